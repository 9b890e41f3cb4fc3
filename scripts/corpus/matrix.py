"""The corpus's results: conformance/results.json (one record per case, the newest run of each
kept, so a subset run updates its rows) and docs/conformance.md (the matrix and its totals)."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from corpus.manifest import Case, Manifest
from corpus.verdict import Verdict

GOOD = (Verdict.PASSED, Verdict.REFUSED, Verdict.AZURE)


@dataclass(frozen=True, kw_only=True)
class Result:
    id: str
    repo: str
    commit: str
    path: str
    kind: str
    python: str  # the environment's Python: as the run's log says, else as the manifest says
    expected: str
    got: str
    verdict: str
    reason: str
    seconds: float
    date: str  # when it ran (UTC, YYYY-MM-DD)

    @property
    def good(self) -> bool:
        return self.verdict in {v.value for v in GOOD}


def load(path: Path) -> dict[str, Result]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return {r["id"]: Result(**r) for r in data.get("results", [])}
    except (ValueError, TypeError, KeyError):
        return {}  # an unreadable file is rebuilt from this run


def save(results: dict[str, Result], manifest: Manifest, path: Path) -> None:
    """Every case's newest result, in manifest order, written atomically."""
    known = [results[c.id] for c in manifest.cases if c.id in results]
    text = json.dumps({"results": [asdict(r) for r in known]}, indent=1) + "\n"
    write_atomically(path, text)


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def pass_rate(results: list[Result]) -> float | None:
    """The share of the runnable cases that ran whose outcome is Azure's (None: none ran)."""
    ran = [r for r in results if r.verdict != Verdict.NOT_RUN.value]
    return sum(r.good for r in ran) / len(ran) if ran else None


MAX_CELL = 200  # characters a table cell of docs/ may hold (tests/unit/test_docs.py)


def cell(text: object) -> str:
    """A table cell: one line, its pipes escaped, at most MAX_CELL characters (the whole
    reason stays in the manifest and results.json)."""
    text = " ".join(str(text).split())
    text = text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"
    return text.replace("|", "\\|")


def row(case: Case, result: Result | None) -> str:
    where = f"{case.repo}@{case.commit[:7]}"
    if result is None:
        values = [case.id, where, case.path, case.kind, case.python, case.expect.outcome,
                  "not run yet", "", ""]
    else:
        values = [case.id, where, case.path, case.kind, result.python, result.expected,
                  result.got, result.verdict, result.reason]
    return "| " + " | ".join(cell(v) for v in values) + " |"


def totals(manifest: Manifest, results: dict[str, Result]) -> list[str]:
    cases = manifest.cases
    verdicts = Counter(results[c.id].verdict if c.id in results else "not run yet"
                       for c in cases)
    rate = pass_rate([results[c.id] for c in cases if c.id in results and c.runnable])
    kinds = Counter(c.kind for c in cases)
    pythons = Counter(c.python for c in cases)
    return [
        f"- specs: {len(cases)} ({sum(c.runnable for c in cases)} runnable), repositories: "
        f"{len({c.repo for c in cases})}",
        "- kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
        "- Pythons: " + ", ".join(f"{k} {n}" for k, n in sorted(
            pythons.items(), key=lambda kv: tuple(int(x) for x in kv[0].split(".")))),
        "- classes: " + ", ".join(f"{k} {verdicts[k]}" for k in
                                 [v.value for v in Verdict] + ["not run yet"] if verdicts[k]),
        "- Azure's outcome (passed, refused with a named reason, fails as Azure fails) on the "
        "runnable specs that ran: " + ("none ran" if rate is None else f"{rate:.0%}"),
    ]


HEADER = """# Conformance: published third-party specs, run as Azure runs them

`make conformance` runs every spec of `conformance/corpus.yml` — jobs, sweeps, pipelines
(parallel ones too), Spark, AutoML, online and batch deployments from public repositories
other than Azure/azureml-examples, each pinned to a commit — through the local runtime, from a
scratch copy of its repository, as a user would run it, and compares what happens with what
Azure would do (the manifest's `expect`, with its reason). `make conformance CASES=<id> ...`
runs a subset; the newest result of each spec is kept in `conformance/results.json`, and this
page is written from it. How the corpus and its harness work: `conformance/README.md`.

Classes: **passed** (Azure's outcome: it completes); **refused with a named reason** (it needs a
live service, and the runtime says which); **fails as Azure fails** (Azure fails it too, for
the reason given); **project defect** (anything else); **not run** (not runnable here, with
the reason).
"""


def render(manifest: Manifest, results: dict[str, Result]) -> str:
    lines = [HEADER, "## Totals", "", *totals(manifest, results), "", "## Matrix", "",
             "| case | repository | spec | kind | Python | expected | got | class | reason |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [row(case, results.get(case.id)) for case in manifest.cases]
    return "\n".join(lines) + "\n"
