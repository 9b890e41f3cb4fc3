"""An environment's whole closure as Azure's image build resolves it for the environment's own
Python, then moved to this machine's Python as one set (uv, a resolver that evaluates markers and
Requires-Python for a target: pip's --python-version does not, pypa/pip#11664).

1. target: `uv pip compile` of the environment's requirements for its Python on Azure's platform
   (Linux x86_64). That set is what Azure's image holds; when none exists, Azure's build fails
   too, and only then is that said.
2. here: every package of that set as a lower bound (`name>=version`), resolved for this Python
   with the lowest versions that install together (`--resolution lowest-direct`), packages that
   ship compiled wheels taken as wheels only (pure-Python sdists stay allowed, as Azure's pip
   builds them). Families move together (torch/torchvision, numpy/scipy/scikit-learn,
   azureml-defaults/its server/pyarrow, mltable/dataprep/rslex).
The GPU stack (torch and its CUDA wheels) is never moved: .venv's build stands in for it.

An environment installed by several installs in turn (a Dockerfile's RUN lines: steps.py) is
resolved as its build runs them: each install's arguments for themselves, what the installs
before it left preferred where it satisfies them and replaced where it conflicts (pip's
only-if-needed; `--upgrade`: the named packages' newest), `--no-deps` packages alone. The set is
what the last install left, and each install's resolution is moved here in turn.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mlops.environments import steps
from mlops.environments.requirements import canonical, name_of
from mlops.errors import LocalRunError, MachineError

AZURE_PLATFORM = "x86_64-manylinux_2_28"  # Azure ML's images: Linux on x86_64, glibc >= 2.28
# .venv's build stands in for these whatever version an environment resolves (a CUDA stack is
# gigabytes, and .venv's runs here)
GPU_STACK = re.compile(r"^(torch|torchvision|torchaudio|triton|pytorch-triton.*|nvidia-.*|"
                       r"cuda-.*)$")
BUILD_FAILED = re.compile(r"Failed to (?:download and )?build `([A-Za-z0-9_.\-]+)==([^`]+)`")
# setup.py files of before 2026 import pkg_resources, which setuptools 82 no longer ships: their
# builds get the setuptools of their era, as a pip of that era had (a build constraint: what the
# environment installs is unchanged)
NO_PKG_RESOURCES = "No module named 'pkg_resources'"
LEGACY_SETUPTOOLS = "setuptools<82"
ROUNDS = 6  # sdists that fail to build metadata, taken as wheels only one by one


@dataclass(frozen=True)
class Locked:
    """One package of a resolved set."""

    version: str
    compiled: bool  # its wheels for the platform are platform-specific
    marker: str = ""


@dataclass
class Moved:
    """A closure moved to this Python."""

    target: dict[str, Locked]  # name -> what Azure's build holds for the environment's Python
    here: dict[str, Locked]  # name -> what installs here
    lines: list[str] = field(default_factory=list)  # "numpy 1.21.6 -> 1.23.2", one per move


class StepSet(NamedTuple):
    """One install's resolution: what it installed, and whether alone (`--no-deps`)."""

    locked: dict[str, Locked]
    no_deps: bool = False


class Staged(dict):
    """A set installed by several installs in turn: name -> what the last install of it left,
    with each install's own resolution, in order (`steps`)."""

    def __init__(self, resolved: list[StepSet]):
        super().__init__({name: locked for step in resolved for name, locked in
                          step.locked.items()})
        self.steps = resolved


class NoSet(LocalRunError):
    """No set of releases satisfies the requirements for the environment's own Python."""


NO_SOLUTION = "No solution found when resolving"
UNWRITABLE = re.compile(r"(Permission denied|Read-only file system|No space left on device)")
CACHE_PATH = re.compile(r"(?:cache|directory)[^`]*`([^`]+)`", re.IGNORECASE)


class UvFailed(MachineError):
    """uv could not run at all: the reason is this machine's (its network, its cache folder),
    not the environment's."""


FULL = "No space left on device"
ABSOLUTE = re.compile(r"`(/[^`]+)`|(?<![\w.~])(/[^\s`'\"():]+)")


# uv's "failed to copy file from <a> to <b>: No space left on device": <b> whole, spaces and all
COPIED_TO = re.compile(rf" to (/.+?): {FULL}")


def _full_at(stderr: str) -> str:
    """The path whose write found the disk full: the target of uv's copy on that line, else
    the last path it names there (one in backquotes whole: a path may hold spaces)."""
    line = next(line for line in stderr.splitlines() if FULL in line)
    if copied := COPIED_TO.search(line):
        return copied.group(1)
    paths = [a or b for a, b in ABSOLUTE.findall(line.split(FULL)[0])]
    return paths[-1] if paths else "a file"


def environment_named(label: str) -> str:
    """How a message names an environment: its label where that says it is one ("the
    environment of jobs/x.yml"), else `environment <label>` (a name, a conda file)."""
    return label if label.startswith("the environment") else f"environment {label}"


def uv_failure(stderr: str, doing: str) -> UvFailed:
    """What stopped uv, in its words, with what to do: a full disk (wherever uv was writing:
    a layer, its cache), or its cache folder."""
    words = tail(stderr)
    if FULL in stderr:
        return UvFailed(f"{doing}: the disk is full (writing {_full_at(stderr)}: {FULL}): free "
                        "space on it, or point MLOPS_CACHE_DIR (the environments) and "
                        "UV_CACHE_DIR (uv's downloads) at a disk with room, and run again; uv "
                        f"said:\n{words}")
    if UNWRITABLE.search(stderr) and "cache" in stderr.lower():
        where = CACHE_PATH.search(stderr)
        folder = where.group(1) if where else os.environ.get("UV_CACHE_DIR", "uv's cache")
        return UvFailed(f"{doing}: uv's cache folder {folder} cannot be written "
                        f"({UNWRITABLE.search(stderr).group(1)}): set UV_CACHE_DIR to a "
                        f"writable folder (or MLOPS_STATE_DIR, which holds the caches too) and "
                        f"run again; uv said:\n{words}")
    return UvFailed(f"{doing}: uv failed (its words):\n{words}")


class BuildFailed(MachineError):
    """A package built from its source distribution failed to build on this machine (its
    compiler, its headers): the machine's, though a pin of a release with a wheel avoids it."""

    def __init__(self, name: str, version: str, log: str):
        super().__init__(f"{name} {version} failed to build from its source distribution "
                         f"(the build's last lines):\n{log}")
        self.name, self.version, self.log = canonical(name), version, log


def build_failure(stderr: str) -> BuildFailed | None:
    """The package whose build uv reports failed, if one did."""
    found = BUILD_FAILED.search(stderr)
    return BuildFailed(found.group(1), found.group(2), tail(stderr)) if found else None


def run_uv(argv: list[str]) -> subprocess.CompletedProcess:
    """uv; a build that fails for want of pkg_resources runs again with the setuptools its
    setup.py was written for."""
    result = subprocess.run(argv, capture_output=True, text=True, env=uv_env())
    if result.returncode == 0 or NO_PKG_RESOURCES not in result.stderr:
        return result
    with tempfile.TemporaryDirectory(prefix="build-") as tmp:
        constraints = Path(tmp) / "build-constraints.txt"
        constraints.write_text(LEGACY_SETUPTOOLS + "\n")
        return subprocess.run([*argv, "--build-constraints", str(constraints)],
                              capture_output=True, text=True, env=uv_env())


def uv_binary() -> str:
    found = Path(sys.executable).parent / "uv"
    if found.is_file():
        return str(found)
    raise MachineError("uv is not installed beside this Python (it resolves environments for "
                       "their own Python): run make setup, or reinstall azml")


def _locked(path: Path) -> dict[str, Locked]:
    data = tomllib.loads(path.read_text())
    found = {}
    for package in data.get("packages", []):
        wheels = [w.get("url", "") or w.get("name", "") for w in package.get("wheels", [])]
        compiled = any(not url.endswith("-none-any.whl") for url in wheels)
        found[canonical(package["name"])] = Locked(str(package["version"]), compiled,
                                                   str(package.get("marker") or ""))
    return found


# A curated image's line `--exclude-newer <time>` (mlops/environments/curated.py): what PyPI held
# when Azure built it, for what its definition leaves unpinned; uv takes it as an option.
EXCLUDE_NEWER = "--exclude-newer"


def as_of(lines: list[str]) -> list[str]:
    """uv's `--exclude-newer <time>` for an environment built on a known day ([]: today)."""
    return [word for line in lines if line.startswith(EXCLUDE_NEWER) for word in line.split()][:2]


def compile_set(lines: list[str], python: list[str], only_binary: set[str],
                lowest: bool = False, options: tuple[str, ...] = (),
                prefer: dict[str, Locked] | None = None) -> dict[str, Locked]:
    """uv's resolution of `lines` for `python` (its --python-version/--platform or --python
    flags, and any other `options`); sdists whose metadata fails to build are retried as wheels
    only. `prefer`: what is installed already, kept where it satisfies (uv reads an existing
    output file as its preferences)."""
    no_build = set(only_binary)
    built_on = as_of(lines)
    lines = [line for line in lines if not line.startswith(EXCLUDE_NEWER)]
    with tempfile.TemporaryDirectory(prefix="resolve-") as tmp:
        source, lock = Path(tmp) / "requirements.in", Path(tmp) / "pylock.toml"
        source.write_text("\n".join(lines) + "\n")
        for _ in range(ROUNDS):
            write_preferences(lock, prefer or {})
            argv = [uv_binary(), "pip", "compile", str(source), "--format", "pylock.toml",
                    "-o", str(lock), "--quiet", "--no-header", *python, *built_on, *options]
            argv += ["--resolution", "lowest-direct"] if lowest else []
            for name in sorted(no_build):
                argv += ["--only-binary", name]
            result = run_uv(argv)
            if result.returncode == 0:
                return _locked(lock)
            failed = {canonical(m) for m, _ in BUILD_FAILED.findall(result.stderr)} - no_build
            if not failed and NO_SOLUTION in result.stderr:
                raise NoSet(tail(result.stderr))  # the one failure Azure's build has too
            if not failed:
                raise uv_failure(result.stderr, "resolving the environment")
            no_build |= failed
    raise uv_failure(result.stderr, f"resolving the environment ({ROUNDS} source "
                     "distributions failed to build)")


def write_preferences(lock: Path, held: dict[str, Locked]) -> None:
    """`held` as the lock file uv's next resolution starts from (none: no file)."""
    if not held:
        lock.unlink(missing_ok=True)
        return
    entries = [f'[[packages]]\nname = "{name}"\nversion = "{locked.version}"\n'
               for name, locked in sorted(held.items())]
    lock.write_text('lock-version = "1.0"\ncreated-by = "mlops"\n\n' + "\n".join(entries))


def uv_env() -> dict[str, str]:
    """uv never downloads a Python for a target it only resolves for, and installs by copying:
    its default on Linux hard-links each file to its cache, so a file changed in one
    environment would change the cache and every environment holding it (clone falls back to
    hard links where the file system cannot clone; docs/environments.md has the figures)."""
    return {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1",
            "UV_LINK_MODE": "copy"}


def tail(text: str, lines: int = 14) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def target_set(lines: list[str], version: str) -> dict[str, Locked]:
    """What Azure's image build installs for Python `version` (NoSet: nothing does); for
    several installs in turn, what the last left (a Staged set)."""
    python = ["--python-version", version, "--python-platform", AZURE_PLATFORM]
    if not steps.has_steps(lines):
        return compile_set(lines, python, set())
    dated = [line for line in lines if line.startswith(EXCLUDE_NEWER)]
    resolved: list[StepSet] = []
    for number, step in enumerate(steps.split(lines)):
        wanted = [line for line in step.lines if not line.startswith(EXCLUDE_NEWER)]
        if wanted:
            try:
                locked = compile_step(step, [*wanted, *dated], python, Staged(resolved))
            except NoSet as err:
                raise NoSet(f"its install {number} (pip install {' '.join(wanted)}) has no "
                            f"solution, with what the installs before it left:\n{err}"
                            ) from None
            resolved.append(StepSet(locked, step.no_deps))
    return Staged(resolved)


def compile_step(step: steps.Step, lines: list[str], python: list[str],
                 held: dict[str, Locked]) -> dict[str, Locked]:
    """One install's own resolution, as pip makes it in the image the installs before it left
    (`held`): installed releases kept where they satisfy, replaced where they conflict; the
    packages `--upgrade` names at their newest; `--no-deps`: the named packages alone."""
    options = ["--no-deps"] if step.no_deps else []
    options += ["--prerelease", "allow"] if step.pre else []
    if step.upgrade:
        options += [word for line in lines if name_of(line)
                    for word in ("--upgrade-package", name_of(line))]
    with tempfile.TemporaryDirectory(prefix="step-") as tmp:
        if step.constraints:
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text("\n".join(step.constraints) + "\n")
            options += ["-c", str(constraints)]
        return compile_set(lines, python, set(), options=tuple(options), prefer=held)


def move_here(target: dict[str, Locked], no_build: frozenset[str] = frozenset()) -> Moved:
    """The target set as the nearest releases that install on this Python together; `no_build`:
    packages whose source did not build here, taken as wheels only too."""
    compiled = {name for name, locked in target.items() if locked.compiled} | no_build
    resolved = target.steps if isinstance(target, Staged) else [StepSet(target)]
    here: dict[str, Locked] = {}
    for step in resolved:  # each install's own resolution in turn, as its build ran them
        lines = [f"{name}>={locked.version}{f' ; {locked.marker}' if locked.marker else ''}"
                 for name, locked in sorted(step.locked.items()) if not GPU_STACK.match(name)]
        kept = [f"{name}>={here[name].version}" for name in sorted(step.locked)
                if name in here and not step.no_deps]  # what an earlier install put there and
        # this one resolves again stays at its moved release where this install allows it, as
        # pip keeps an installed package that satisfies (a NumPy 1 under the pandas built for
        # it), even where this step's own line for it carries a marker this Python does not meet;
        # what this install does not resolve is not its business (pip leaves it as it is)
        here |= compile_set(lines + kept, ["--python", sys.executable], compiled, lowest=True,
                            options=("--no-deps",) if step.no_deps else ()) if lines else {}
    moved = Moved(target, {k: v for k, v in here.items() if not GPU_STACK.match(k)})
    for name, locked in sorted(target.items()):
        now = moved.here.get(name)
        if now is not None and now.version != locked.version:
            moved.lines.append(f"{name} {locked.version} -> {now.version}")
        elif GPU_STACK.match(name) and venv_version(name) not in (None, locked.version):
            moved.lines.append(f"{name} {locked.version} -> {venv_version(name)} (.venv's "
                               "build stands in)")
    return moved


def venv_version(name: str) -> str | None:
    """The version of `name` .venv has (None: it has none)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
