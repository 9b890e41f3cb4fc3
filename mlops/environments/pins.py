"""What an environment's requirements mean for its own Python, and pins this machine's Python
cannot take, moved to the nearest release that installs here.

An environment for Python 3.8 that asks for `mlflow` gets, on Azure, the newest release that
supports 3.8 (2.17.2), not today's newest: `for_python` resolves each requirement that is not an
exact pin the way Azure's image build does, from the package index, for that Python.

Azure builds an environment's image with the Python its conda file names (3.8, say); this machine
has one Python. A pin with no release for it (`numpy==1.21.2` has no wheel for Python 3.11) is
moved to the nearest release that has one: the newest of the same major.minor, else the newest
patch of the closest newer major.minor, else the closest older. Each move is one warning line.
pip itself says which releases install here ("from versions: ..." lists only those with a
wheel for this interpreter and platform), asked with a dry run that downloads nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from mlops.environments.requirements import LEFT_TO_VENV, canonical

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


def _loose(line: str) -> Requirement | None:
    """A requirement whose version the index decides (not an exact pin, URL or marker)."""
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return None
    exact = any(spec.operator in ("==", "===") and "*" not in spec.version
                for spec in requirement.specifier)
    if exact or requirement.url or requirement.marker or \
            canonical(requirement.name) in LEFT_TO_VENV:
        return None
    return requirement


def newest_for(version: str | None, lines: list[str], python: str) -> dict[str, str]:
    """pip's choice for each line on Python `version` (this one's when None), name -> version,
    each line on its own (no dependencies), from the index's wheels; a line with none is left
    out."""
    target = ["--python-version", version] if version else []
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        result = subprocess.run(
            [python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
             "--only-binary=:all:", *target, "--report", str(report), *PIP_QUIET, *lines],
            capture_output=True, text=True)
        if result.returncode == 0:
            return {canonical(item["metadata"]["name"]): item["metadata"]["version"]
                    for item in json.loads(report.read_text()).get("install", [])}
    if len(lines) == 1:
        return {}
    found: dict[str, str] = {}
    for line in lines:
        found.update(newest_for(version, [line], python))
    return found


def differing(version: str, lines: list[str], python: str) -> dict[str, str]:
    """The lines whose release for Python `version` is not the one pip would take here (mlflow:
    2.17.2 for 3.8, 3.x here): only those need pinning."""
    there, here = newest_for(version, lines, python), newest_for(None, lines, python)
    return {name: chosen for name, chosen in there.items() if here.get(name) != chosen}


def for_python(lines: list[str], version: str | None, cache: Path,
               python: str = sys.executable) -> Relaxed:
    """`lines` with each requirement that is not an exact pin pinned to the release Azure's
    build picks for the environment's Python `version` (unchanged when it is this Python's);
    `moved` lists the choices ("mlflow 2.17.2")."""
    wanted = ".".join((version or "").rstrip(".*").split(".")[:2])
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    loose = {line: req for line in lines if (req := _loose(line)) is not None}
    if not re.fullmatch(r"\d+\.\d+", wanted) or wanted == here or not loose:
        return Relaxed(list(lines))
    key = hashlib.sha256("\n".join([wanted, *sorted(loose)]).encode()).hexdigest()[:16]
    record = cache / f"for-python-{key}.json"
    try:
        chosen = json.loads(record.read_text())
    except (OSError, ValueError):
        chosen = differing(wanted, list(loose), python)
        cache.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(chosen))
        os.replace(tmp, record)
    out = Relaxed([])
    for line in lines:
        requirement = loose.get(line)
        picked = chosen.get(canonical(requirement.name)) if requirement else None
        if picked is None:
            out.requirements.append(line)
            continue
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        out.requirements.append(f"{requirement.name}{extras}=={picked}")
        out.moved.append(f"{requirement.name} {picked}")
    return out
