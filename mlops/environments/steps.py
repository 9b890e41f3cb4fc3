"""Install steps: an environment built by several package installs in turn (a Dockerfile's RUN
lines), as its requirement lines carry them.

A plan's requirement lines are one install, resolved as one set, until a step line:
`--install-step`, followed by that install's own flags (`--no-deps`, `--upgrade`, `--pre`). The
lines after it, up to the next step line, are that install's arguments, and a line
`--install-constraint <requirement>` one of its constraints (`pip install -c <file>`). Lines
before the first step line are what the image holds before any of them (a curated image's set).
Readers that take a line as a requirement (name_of) pass step lines over as options.

Azure's build runs each install against the image as the installs before it left it: pip keeps
what is installed where it satisfies the new request and replaces what conflicts with it
(resolve.target_set). So the order of the steps decides the environment, and every key made of
the lines (a cached layer's, a step's reuse) is made with key_lines, which keeps it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol

STEP = "--install-step"
CONSTRAINT = "--install-constraint"
NO_DEPS, UPGRADE, PRE = "--no-deps", "--upgrade", "--pre"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One install: its requirement lines, its constraints and its flags."""

    lines: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    no_deps: bool = False  # each package installed alone, none of its dependencies
    upgrade: bool = False  # the named packages to their newest allowed release
    pre: bool = False  # pre-releases allowed


def step_line(*, no_deps: bool = False, upgrade: bool = False, pre: bool = False) -> str:
    """The line that starts an install with these flags."""
    flags = [flag for flag, on in ((NO_DEPS, no_deps), (UPGRADE, upgrade), (PRE, pre)) if on]
    return " ".join([STEP, *flags])


def is_step_option(line: str) -> bool:
    return line.startswith((STEP, CONSTRAINT))


def has_steps(lines: list[str]) -> bool:
    return any(line.startswith(STEP) for line in lines)


def split(lines: list[str]) -> list[Step]:
    """The installs, in order; the first holds the lines before any step line (maybe none)."""
    found: list[Step] = []
    flags, current, constraints = "", [], []
    for line in [*lines, STEP]:
        if not line.startswith(STEP):
            if line.startswith(CONSTRAINT):
                constraints.append(line[len(CONSTRAINT):].strip())
            else:
                current.append(line)
            continue
        words = shlex.split(flags)
        found.append(Step(lines=tuple(current), constraints=tuple(constraints),
                          no_deps=NO_DEPS in words, upgrade=UPGRADE in words, pre=PRE in words))
        flags, current, constraints = line[len(STEP):], [], []
    return found


def key_lines(lines: list[str]) -> list[str]:
    """The lines as a key that any order of them within an install leaves alone and the order
    of the installs changes: each line after the first step line prefixed by its install's
    number (lines with no step line: as they are, so their keys are what they were)."""
    if not has_steps(lines):
        return list(lines)
    keyed, index = [], 0
    for line in lines:
        index += line.startswith(STEP)
        keyed.append(f"{index}:{line}")
    return keyed


def into_first(lines: list[str], extra: list[str]) -> list[str]:
    """`extra` as part of what the image holds: before the first step line (at the end when
    there is none)."""
    at = next((i for i, line in enumerate(lines) if line.startswith(STEP)), len(lines))
    return [*lines[:at], *extra, *lines[at:]]


def constrained(lines: list[str], requirement: str) -> list[str]:
    """`requirement` in what the image holds and a constraint of every install after it."""
    out = into_first(lines, [requirement])
    return [item for line in out for item in
            ([line, f"{CONSTRAINT} {requirement}"] if line.startswith(STEP) else [line])]


def stacked(lines: list[str]) -> list[str]:
    """A key's mark of how files several installs' wheels share are left (the later install's
    on top, closures.restack): only environments built by installs in turn carry it, so no
    other cached environment is built again."""
    return ["installs-stacked-1"] if has_steps(lines) else []


class Released(Protocol):
    """A package's release as an install's resolution holds it (resolve.Locked)."""

    version: str


def written_in(installs: list[dict[str, Released]]) -> dict[str, int]:
    """Which install last wrote each package's files: the one that brought its final release (a
    later install that keeps it, as pip keeps what satisfies its request, rewrites nothing).
    `installs`: each install's resolution in order, name -> its release."""
    found: dict[str, int] = {}
    versions: dict[str, str] = {}
    for number, locked in enumerate(installs):
        for name, held in locked.items():
            if versions.get(name) != held.version:
                found[name], versions[name] = number, held.version
    return found


def rewritten(owners: list[str], written: dict[str, int]) -> list[str]:
    """Of packages that ship the same files, the ones a later install wrote over the first
    one's, in the order the installs wrote them: whose files Azure's build leaves on top."""
    numbers = {name: written.get(name, 0) for name in owners}
    first = min(numbers.values(), default=0)
    return sorted((name for name in owners if numbers[name] > first), key=numbers.__getitem__)
