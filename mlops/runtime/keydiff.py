"""What differs between two steps' key parts (keyparts.py), said in words.

`compare` lists every difference, most telling first (code files, additional includes, inputs,
parameters, the environment, the command, outputs, placement, variables, the component's
version); `summary` makes the one line a pipeline step prints (`ran: code src/train.py changed`),
and each Change's `details` are what `--explain` prints under it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from mlops.runtime.keyparts import Json, KeyParts, Source, TreeStore

SHOWN_FILES = 50  # files --explain lists per code folder or include
LINE_CHANGES = 2  # changes the one line names before "(+N more)"


@dataclass(frozen=True)
class Change:
    """One part that differs: a few words for the line, and the whole of it for --explain."""

    short: str
    details: tuple[str, ...] = ()


def shown(path: str | Path) -> str:
    """A path as a reader finds it: relative to here when it is below here."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def literal(value: str | None, width: int = 40) -> str:
    text = "(none)" if value is None else repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def source_changes(what: str, old: Source | None, new: Source | None,
                   trees: TreeStore) -> list[Change]:
    """A code folder (or file, or include) by content: the files that changed, by path."""
    if (old.digest if old else None) == (new.digest if new else None):
        return []
    if old is None or new is None:
        return [Change(f"{what} {shown(new.path) if new else shown(old.path)} "
                       f"{'added' if new else 'removed'}")]
    if not (old.tree and new.tree):
        return [Change(f"{what} {shown(new.path)} changed")]
    files = trees.diff(old.tree, new.tree, SHOWN_FILES + 1)
    if not files or files[0][1] == "unknown":
        return [Change(f"{what} {shown(new.path)} changed")]
    lines = tuple(f"{what} {shown(Path(new.path) / name)}: {state}"
                  for name, state in files[:SHOWN_FILES])
    if len(files) > SHOWN_FILES:
        lines += (f"{what}: and more files",)
    first, state = files[0]
    more = f" (+{len(files) - 1} more file{'s' if len(files) > 2 else ''})" \
        if len(files) > 1 else ""
    return [Change(f"{what} {shown(Path(new.path) / first)} {state}{more}", lines)]


def include_changes(old: list[Source], new: list[Source], trees: TreeStore) -> list[Change]:
    """Additional includes by the name they take in the snapshot (a copy of the same folder
    elsewhere is the same include), by path where two share a name."""
    before, after = by_name(old), by_name(new)
    return [change for path in [*after, *[p for p in before if p not in after]]
            for change in source_changes("additional include", before.get(path),
                                         after.get(path), trees)]


def by_name(sources: list[Source]) -> dict[str, Source]:
    names = [Path(source.path).name for source in sources]
    return {name if names.count(name) == 1 else source.path: source
            for name, source in zip(names, sources, strict=True)}


def input_changes(old: KeyParts, new: KeyParts) -> list[Change]:
    changes = []
    for name in [*new.inputs, *[n for n in old.inputs if n not in new.inputs]]:
        was, now = old.inputs.get(name), new.inputs.get(name)
        if was == now or name in new.params or name in old.params:
            continue
        if was is None or now is None:
            changes.append(Change(f"input {name} {'added' if was is None else 'removed'}"))
        elif was.startswith("data:") and now.startswith("data:"):
            changes.append(Change(f"input {name}: its content changed",
                                  (f"input {name}: content {was[5:17]} -> {now[5:17]}",)))
        else:
            changes.append(Change(f"input {name}: {literal(value(was))} -> "
                                  f"{literal(value(now))}"))
    return changes


def value(part: str) -> str:
    """An input's part as a reader knows it: a literal's text, or "(data)"."""
    return part[5:] if part.startswith("text:") else "(data)"


def param_changes(old: dict[str, str], new: dict[str, str]) -> list[Change]:
    return [Change(f"parameter {name}: {literal(old.get(name))} -> {literal(new.get(name))}")
            for name in [*new, *[n for n in old if n not in new]] if old.get(name) != new.get(name)]


def packages(lines: Json) -> dict[str, str]:
    """A requirement list by package name (a line no parser reads is its own name)."""
    found = {}
    for line in lines if isinstance(lines, list) else []:
        try:
            name = canonicalize_name(Requirement(str(line)).name)
        except InvalidRequirement:
            name = str(line)
        found[name] = str(line)
    return found


def environment_changes(old: dict[str, Json], new: dict[str, Json]) -> list[Change]:
    changes = []
    if old.get("python") != new.get("python"):
        changes.append(Change(f"environment: Python {old.get('python') or '(any)'} -> "
                              f"{new.get('python') or '(any)'}"))
    for field, what in (("requirements", "environment"), ("adds", "image packages"),
                        ("fixed", "image packages")):
        before, after = packages(old.get(field)), packages(new.get(field))
        for name in [*after, *[n for n in before if n not in after]]:
            was, now = before.get(name), after.get(name)
            if was != now:
                text = f"{was} -> {now}" if was and now else f"{now} added" if now else \
                    f"{was} removed"
                changes.append(Change(f"{what}: {text}"))
    if changes and old.get("label") != new.get("label"):
        changes.append(Change(f"environment: {old.get('label')} -> {new.get('label')}"))
    return changes


def mapping_changes(what: str, old: dict[str, Json], new: dict[str, Json]) -> list[Change]:
    """Declared outputs, variables, a parallel node's settings: by name."""
    names = [n for n in [*new, *[n for n in old if n not in new]] if old.get(n) != new.get(n)]
    return [Change(f"{what} {name} changed", (f"{what} {name}: {literal(str(old.get(name)), 80)}"
                                              f" -> {literal(str(new.get(name)), 80)}",))
            for name in names]


def compare(old: KeyParts, new: KeyParts, trees: TreeStore) -> list[Change]:
    """Every difference between an earlier step's parts and this one's, most telling first."""
    changes = [*source_changes("code", old.code, new.code, trees),
               *include_changes(old.includes, new.includes, trees),
               *input_changes(old, new), *param_changes(old.params, new.params),
               *environment_changes(old.environment, new.environment)]
    if old.command != new.command and old.params == new.params:
        changes.append(Change("command changed", (f"command was: {old.command}",
                                                  f"command now: {new.command}")))
    changes += mapping_changes("output", old.outputs, new.outputs)
    if old.placement != new.placement:
        changes.append(Change("distribution or resources changed",
                              (f"placement: {old.placement} -> {new.placement}",)))
    changes += mapping_changes("environment variable", old.env, new.env)
    changes += mapping_changes("setting", old.extra, new.extra)
    if old.key != new.key and not changes:
        changes.append(Change("its key differs (the earlier step kept no parts of it)"))
    if (old.component, old.version) != (new.component, new.version) and \
            (old.component or new.component):
        changes.append(Change(f"component {old.component or '(inline)'} {old.version or '-'}"
                              f" -> {new.component or '(inline)'} {new.version or '-'}"))
    return changes


def summary(changes: list[Change]) -> str:
    """The one line: the first changes named, the rest counted."""
    named = "; ".join(change.short for change in changes[:LINE_CHANGES])
    rest = len(changes) - LINE_CHANGES
    return named + (f" (+{rest} more)" if rest > 0 else "")


def details(changes: list[Change]) -> list[str]:
    return [line for change in changes for line in (change.details or (change.short,))]
