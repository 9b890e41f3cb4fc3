"""An environment for another Python, on an interpreter of that version (interpreters.py): its
whole closure resolved as Azure's image build resolves it for the exact Python the spec names
(`python=3.7.5` is 3.7.5; a bare `python=3.8` is the interpreter's own 3.8.x, the patch release a
build of that minor takes), installed as resolved into a complete virtual environment of that
interpreter. Nothing is moved to another release and nothing is borrowed from .venv: the torch
family too is the environment's own release for its Python, from the package registry (cached
once with the environment). An image built on a known day (a curated or registry version: its
release record's day) builds its source distributions with the build tools PyPI held that day, as
its build did; any other environment is built today on Azure, so with today's.

The environment is keyed by its requirements, the version resolved for and the interpreter, built
once under a lock, and checked against its manifest before its first use in a run
(integrity.cached_layer); its layer.json records the resolution, so a cached run resolves nothing.
As for .venv's layers, a set whose compiled packages were built for NumPy 1 and fail under
NumPy 2 is resolved again with numpy<2, conda-forge's pairing (abi.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

from mlops.environments import abi, resolve, steps
from mlops.environments.closures import install_set, restack, target_for
from mlops.environments.integrity import cached_layer
from mlops.environments.interpreters import HERE, Python, minor_of
from mlops.environments.layers import cache_dir
from mlops.errors import LocalError, MachineError

VERSION = "own-python-1"  # bump when what an environment holds changes


def resolved_for(asked: str | None, python: Python | None) -> str:
    """The version a closure is resolved for: the spec's own where it names a patch release
    (3.7.5), else the interpreter's (None: no interpreter, the major.minor asked)."""
    exact = re.match(r"(\d+\.\d+\.\d+)(?![\d.])", (asked or "").strip())
    if exact:
        return exact.group(1)
    return python.version if python is not None else minor_of(asked or HERE.minor)


def own_key(lines: list[str], version: str, python: Python) -> str:
    text = "\n".join([VERSION, version, python.version, str(python.executable),
                      *sorted(steps.key_lines(lines)), *steps.stacked(lines)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_own_environment(lines: list[str], version: str, python: Python, *, label: str,
                          adds: tuple[str, ...] = ()) -> Path:
    """The environment for `lines` on `python`, resolved for Python `version`, built once."""

    def build(folder: Path) -> None:
        started = time.perf_counter()
        print(f"{label}: resolving {len(lines) + len(adds)} requirement(s) for Python {version}, "
              f"as Azure's image build does, into an environment of Python {python.version} "
              f"({python.executable})", flush=True)
        installed, notes = _paired(folder, lines, version=version, python=python, label=label,
                                   adds=adds)
        record = {"label": label, "requirements": lines, "adds": list(adds), "python": version,
                  "interpreter": str(python.executable), "interpreter_version": python.version,
                  "installed": installed, "moved": notes, "own_python": True,
                  "seconds": round(time.perf_counter() - started, 1)}
        (folder / "layer.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"{label}: environment ready in {record['seconds']:.1f}s "
              f"({len(installed)} package(s) on Python {python.version}; {folder})", flush=True)

    key = own_key(steps.into_first(lines, list(adds)), version, python)
    return cached_layer(cache_dir() / f"py{python.minor}-{key}", build)


def _paired(folder: Path, lines: list[str], *, version: str, python: Python, label: str,
            adds: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """The set installed; again with numpy<2 where a compiled package of it fails under NumPy 2
    for want of it (conda-forge never pairs them)."""
    built_on = tuple(resolve.as_of(lines))
    installed = _install(folder, target_for(lines, version, label, adds), python, label,
                         built_on=built_on)
    stale = abi.built_for_numpy_1(folder / "bin" / "python", python.site(folder))
    if not stale:
        return installed, []
    print(f"{label}: {', '.join(stale)} fail(s) to import under NumPy 2 (built for NumPy 1); "
          f"resolving again with {abi.NUMPY_1}, as Azure's conda build pairs them", flush=True)
    try:
        paired = target_for(abi.with_numpy_1(lines), version, label, adds)
    except LocalError as err:  # either kind: NumPy 1 does not install here
        print(f"warning: {label}: {abi.NUMPY_1} does not install with the rest ({err}); keeping "
              "NumPy 2", flush=True)
        return installed, []
    return _install(folder, paired, python, label, built_on=built_on), [
        f"numpy -> {abi.NUMPY_1}: {', '.join(stale)} fail(s) under NumPy 2"]


def _install(folder: Path, locked: dict[str, resolve.Locked], python: Python,
             label: str, *, built_on: tuple[str, ...] = ()) -> dict[str, str]:
    """A fresh virtual environment of `python` holding exactly `locked`; an image built on a
    known day (`built_on`: curated, registry) has its sdists built with the build tools PyPI
    held that day, as its build did (pycocotools 2.0.6 compiles with that day's Cython 3.0,
    not with today's)."""
    shutil.rmtree(folder, ignore_errors=True)
    argv = [resolve.uv_binary(), "venv", "--quiet", "--python", str(python.executable),
            *([] if "pip" in locked else ["--seed"]), str(folder)]
    made = resolve.run_uv(argv)
    if made.returncode != 0:
        raise resolve.uv_failure(made.stderr, f"{resolve.environment_named(label)}: creating a "
                                 f"virtual environment of Python {python.version}")
    try:
        installed = install_set(folder, locked, label, python=python, wheels_only=False,
                                built_on=built_on)
    except resolve.BuildFailed as failed:
        raise MachineError(f"{resolve.environment_named(label)}: {failed}\nFix: install the "
                            f"build tools its source needs, or pin a release of {failed.name} "
                            f"that publishes a wheel for Python {python.minor}") from None
    restack(folder, locked, label, python)
    return installed
