"""Pins of an environment for this machine's Python that have no release for it, moved to the
nearest release that installs here (an environment for another Python is resolved as a whole
instead: mlops/environments/resolve.py).

A pin with no release for this Python (`numpy==1.21.2` has no wheel for Python 3.11) is
moved to the nearest release that has one: the newest of the same major.minor, else the newest
patch of the closest newer major.minor, else the closest older. Each move is one warning line.
pip itself says which releases install here ("from versions: ..." lists only those with a
wheel for this interpreter and platform), asked with a dry run that downloads nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from mlops.environments.requirements import canonical

NOT_FOUND = re.compile(r"satisfies the requirement (\S+) \(from versions: ([^)]*)\)")
HERE = f"Python {sys.version_info.major}.{sys.version_info.minor}"
PIP_QUIET = ["--disable-pip-version-check", "--no-input", "-q"]


@dataclass
class Relaxed:
    requirements: list[str]
    moved: list[str] = field(default_factory=list)  # "numpy==1.21.2 -> 1.23.5: ..."


def nearest(target: Version, available: list[Version]) -> Version | None:
    """Same major.minor (newest), else the closest newer major.minor (its newest patch), else
    the closest older release."""
    final = [v for v in available if not v.is_prerelease]
    same = [v for v in final if v.release[:2] == target.release[:2]]
    if same:
        return max(same)
    newer = [v for v in final if v > target]
    if newer:
        lowest = min(v.release[:2] for v in newer)
        return max(v for v in newer if v.release[:2] == lowest)
    older = [v for v in final if v < target]
    return max(older) if older else None


def _target(requirement: Requirement) -> Version | None:
    """The version the pin aims at: its exact or lower bound, else its upper bound."""
    ranked = sorted(requirement.specifier,
                    key=lambda spec: ("==", "===", "~=", ">=", ">", "<=", "<", "!=")
                    .index(spec.operator))
    for spec in ranked:
        try:
            return Version(spec.version.rstrip(".*"))
        except InvalidVersion:
            continue
    return None


def _pinned(lines: list[str]) -> dict[str, Requirement]:
    """The version-constrained requirements pip resolves from an index, by name."""
    found = {}
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.specifier and not requirement.url and \
                (requirement.marker is None or requirement.marker.evaluate()):
            found[line] = requirement
    return found


def binary_check(python: str, lines: list[str]) -> str:
    """pip's verdict on whether every line has a wheel for this interpreter ("" when so)."""
    result = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
         "--only-binary=:all:", *PIP_QUIET, *lines],
        capture_output=True, text=True)
    return "" if result.returncode == 0 else result.stdout + result.stderr


def relax(lines: list[str], python: str = sys.executable) -> Relaxed:
    """`lines` with each pin that has no release for this Python moved to the nearest one."""
    out = Relaxed(list(lines))
    pinned = _pinned(out.requirements)
    for _ in range(len(pinned)):
        verdict = binary_check(python, list(pinned))
        match = NOT_FOUND.search(verdict)
        if not verdict or not match:
            break  # all install, or pip failed for another reason: the real install says it
        try:
            failing = canonical(Requirement(match.group(1)).name)
        except InvalidRequirement:
            break
        line = next((k for k, r in pinned.items() if canonical(r.name) == failing), None)
        if line is None:
            break
        requirement = pinned.pop(line)
        versions = [Version(v) for v in match.group(2).split(", ") if v and v != "none"]
        target = _target(requirement)
        chosen = nearest(target, versions) if target else None
        if chosen is None:
            continue  # no wheel at all: pip may still build the sdist
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        moved = f"{requirement.name}{extras}=={chosen}"
        out.requirements[out.requirements.index(line)] = moved
        pinned[moved] = Requirement(moved)
        out.moved.append(f"{line} -> {chosen}: {requirement.specifier} has no wheel for {HERE}")
    return out
