"""conformance/corpus.yml: one entry per published spec, read and checked before anything runs.

An entry names the repository, the commit it is pinned to and the spec's path there; its kind
and how it runs (a job; an online deployment and the request it is invoked with; a batch
deployment and its input); the asset specs the repository's own workflow creates first
(`setup`, as `az ml <asset> create -f`); earlier entries whose workspace it needs (`after`: a
deployment of the model a training entry registered runs in that entry's local workspace);
the stand-in data its references map to; and what Azure would do with it, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from corpus import standins
from mlops.errors import LocalRunError
from mlops.specs import read_yaml

KINDS = ("command", "sweep", "pipeline", "parallel", "spark", "automl", "online", "batch")
JOB_KINDS = KINDS[:6]
# completes: Azure runs it to the end; fails: Azure fails it too (`match` is its reason);
# needs-service: it needs what no laptop has (a registry, a Key Vault, a live workspace), and the
# runtime should refuse it by name (`match`); skip: in the corpus, not run (too heavy: a GPU, a
# download of gigabytes), with the reason.
OUTCOMES = ("completes", "fails", "needs-service", "skip")
EXCLUDED_REPOS = {"azure/azureml-examples"}  # the corpus is other people's repositories
CASE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*$")
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
PYTHON = re.compile(r"^3\.\d{1,2}$")
MAX_TIMEOUT = 7200
KEYS = {"id", "repo", "commit", "path", "kind", "python", "expect", "cwd", "setup", "after",
        "request", "input", "input_type", "sets", "standins", "timeout", "note"}


class ManifestError(LocalRunError):
    """The manifest is wrong: the message names the entry and the key to change."""


@dataclass(frozen=True, kw_only=True)
class Expectation:
    outcome: str
    reason: str  # why Azure would do that, one line
    match: str = ""  # fails / needs-service: a regular expression the run's output must hold


@dataclass(frozen=True, kw_only=True)
class Case:
    id: str
    repo: str
    commit: str
    path: str  # the spec, relative to the repository's root
    kind: str
    python: str  # the Python the spec's environment asks for
    expect: Expectation
    cwd: str = ""  # where the user runs it from (the repository's root when empty)
    setup: tuple[str, ...] = ()  # asset specs created first, in order: "<kind>:<path>" where
    # the manifest names the kind (az ml data create -f x.yml), else "<path>" (by its $schema)
    after: tuple[str, ...] = ()
    request: str = ""  # online: the request file (a repository path or a stand-in's reference)
    input: str = ""  # batch: a repository path, or a stand-in's reference
    input_type: str = ""  # batch: mltable for an MLTable folder
    sets: tuple[str, ...] = ()
    standins: tuple[standins.Standin, ...] = ()
    timeout: int = 1800
    note: str = ""

    @property
    def runnable(self) -> bool:
        return self.expect.outcome != "skip"


@dataclass(frozen=True)
class Manifest:
    path: Path
    cases: tuple[Case, ...] = field(default_factory=tuple)

    def select(self, only: list[str]) -> tuple[Case, ...]:
        """The cases whose id is one of `only` or starts with one followed by `/`, with every
        case they run after; all of them when `only` is empty."""
        if not only:
            return self.cases
        picked = {c.id for c in self.cases if any(c.id == o or c.id.startswith(o.rstrip("/") +
                                                                            "/") for o in only)}
        unknown = [o for o in only if not any(c.id == o or c.id.startswith(o.rstrip("/") + "/")
                                               for c in self.cases)]
        if unknown:
            raise ManifestError(f"{self.path}: no case is named {', '.join(unknown)}")
        by_id = {c.id: c for c in self.cases}
        todo = list(picked)
        while todo:
            for needed in by_id[todo.pop()].after:
                if needed not in picked:
                    picked.add(needed)
                    todo.append(needed)
        return tuple(c for c in self.cases if c.id in picked)


def load(path: Path) -> Manifest:
    try:
        data = read_yaml(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ManifestError(f"{path}: cannot be read ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ManifestError(f"{path}: expected a mapping with a `cases:` list")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ManifestError(f"{path}: defaults: expected a mapping")
    cases: list[Case] = []
    for index, entry in enumerate(data["cases"]):
        where = f"{path}: cases[{index}]"
        if not isinstance(entry, dict):
            raise ManifestError(f"{where}: expected a mapping")
        case = parse_case({**defaults, **entry}, where)
        check_order(case, cases, f"{path}: {case.id}")
        cases.append(case)
    return Manifest(path, tuple(cases))


def parse_case(entry: dict[str, object], where: str) -> Case:
    unknown = set(entry) - KEYS
    if unknown:
        raise ManifestError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    case_id = text(entry, "id", where, CASE_ID)
    where = f"{where} ({case_id})"
    repo = text(entry, "repo", where, REPO)
    if repo.lower() in EXCLUDED_REPOS:
        raise ManifestError(f"{where}: repo: {repo} is excluded (the corpus is other people's "
                            "repositories)")
    kind = text(entry, "kind", where)
    if kind not in KINDS:
        raise ManifestError(f"{where}: kind: {kind!r} is not one of {', '.join(KINDS)}")
    case = Case(id=case_id, repo=repo, commit=text(entry, "commit", where, COMMIT),
                path=relative(entry, "path", where), kind=kind,
                python=text(entry, "python", where, PYTHON),
                expect=expectation(entry.get("expect"), where),
                cwd=relative(entry, "cwd", where, required=False),
                setup=setups(entry.get("setup"), where),
                after=strings(entry, "after", where), sets=strings(entry, "sets", where),
                request=str(entry.get("request") or ""),
                input=str(entry.get("input") or ""), input_type=str(entry.get("input_type") or ""),
                standins=stand_ins(entry.get("standins"), where),
                timeout=timeout(entry.get("timeout", 1800), where),
                note=str(entry.get("note") or ""))
    check_kind(case, where)
    return case


ASSET_KINDS = ("model", "data", "environment", "component")


def setups(value: object, where: str) -> tuple[str, ...]:
    """`setup:` items: a path (its $schema says its kind), or {<kind>: <path>} for a spec the
    repository's workflow creates with that verb (`az ml data create -f dataset.yml`)."""
    if not isinstance(value, list | None):
        raise ManifestError(f"{where}: setup: expected a list")
    found = []
    for item in value or []:
        kind, path = next(iter(item.items())) if isinstance(item, dict) and len(item) == 1 \
            else ("", item)
        if kind and kind not in ASSET_KINDS:
            raise ManifestError(f"{where}: setup: {kind!r} is not one of {', '.join(ASSET_KINDS)}")
        path = relative({"setup": path}, "setup", where)
        found.append(f"{kind}:{path}" if kind else path)
    return tuple(found)


def stand_ins(value: object, where: str) -> tuple[standins.Standin, ...]:
    try:
        return standins.parse(value, where)
    except standins.StandinError as err:
        raise ManifestError(str(err)) from None


def text(entry: dict[str, object], key: str, where: str, pattern: re.Pattern | None = None) -> str:
    value = entry.get(key)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or str(value) == "":
        raise ManifestError(f"{where}: {key}: required (a string)")
    value = str(value)
    if pattern is not None and not pattern.match(value):
        raise ManifestError(f"{where}: {key}: {value!r} does not match {pattern.pattern}")
    return value


def relative(entry: dict[str, object], key: str, where: str, required: bool = True) -> str:
    """A path inside the repository: relative, with no `..` and no backslash."""
    value = entry.get(key)
    if value in (None, "") and not required:
        return ""
    value = text(entry, key, where)
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or "\\" in value:
        raise ManifestError(f"{where}: {key}: {value!r} must be a path inside the repository "
                            "(relative, no ..)")
    return str(path)


def strings(entry: dict[str, object], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ManifestError(f"{where}: {key}: expected a list of strings")
    return tuple(value)


def expectation(value: object, where: str) -> Expectation:
    if not isinstance(value, dict):
        raise ManifestError(f"{where}: expect: required, e.g. {{outcome: completes, reason: "
                            "...}}")
    outcome = text(value, "outcome", f"{where}: expect")
    if outcome not in OUTCOMES:
        raise ManifestError(f"{where}: expect.outcome: {outcome!r} is not one of "
                            f"{', '.join(OUTCOMES)}")
    reason = text(value, "reason", f"{where}: expect")
    if "\n" in reason.strip():
        raise ManifestError(f"{where}: expect.reason: one line")
    match = str(value.get("match") or "")
    if outcome in ("fails", "needs-service") and not match:
        raise ManifestError(f"{where}: expect.match: required for {outcome} (what the output "
                            "must say)")
    try:
        re.compile(match)
    except re.error as err:
        raise ManifestError(f"{where}: expect.match: not a regular expression ({err})") from None
    return Expectation(outcome=outcome, reason=reason.strip(), match=match)


def timeout(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_TIMEOUT:
        raise ManifestError(f"{where}: timeout: seconds, 1 to {MAX_TIMEOUT}")
    return value


def check_kind(case: Case, where: str) -> None:
    if case.kind == "online" and not case.request:
        raise ManifestError(f"{where}: request: an online deployment is invoked with a request "
                            "file")
    if case.kind == "batch" and not case.input:
        raise ManifestError(f"{where}: input: a batch deployment needs an input")
    if case.kind in JOB_KINDS and (case.request or case.input):
        raise ManifestError(f"{where}: request/input: only for online and batch deployments")
    generated = {s.reference for s in case.standins}
    for key in ("input", "request"):  # a repository path, or a stand-in's reference
        value = getattr(case, key)
        if value and value not in generated:
            relative({key: value}, key, where)
    if case.input_type not in ("", "mltable", "uri_folder", "uri_file"):
        raise ManifestError(f"{where}: input_type: mltable, uri_folder or uri_file")


def check_order(case: Case, earlier: list[Case], where: str) -> None:
    """Ids are unique; `after` names earlier cases of the same repository and commit (so the
    order of the file is an order to run them in)."""
    by_id = {c.id: c for c in earlier}
    if case.id in by_id:
        raise ManifestError(f"{where}: id used twice")
    for needed in case.after:
        first = by_id.get(needed)
        if first is None:
            raise ManifestError(f"{where}: after: {needed} is not an earlier case")
        if (first.repo, first.commit) != (case.repo, case.commit):
            raise ManifestError(f"{where}: after: {needed} is another repository or commit")


def groups(cases: tuple[Case, ...]) -> list[list[Case]]:
    """Cases joined by `after` (directly or through others), each list in manifest order: a
    group runs in one checkout and one local workspace, its cases one after another."""
    leader: dict[str, str] = {}

    def find(case_id: str) -> str:
        while leader.get(case_id, case_id) != case_id:
            case_id = leader[case_id]
        return case_id

    for case in cases:
        leader.setdefault(case.id, case.id)
        for needed in case.after:
            leader[find(case.id)] = find(needed)
    grouped: dict[str, list[Case]] = {}
    for case in cases:
        grouped.setdefault(find(case.id), []).append(case)
    return list(grouped.values())
