"""The cached layer of an environment: its whole closure resolved as Azure's build resolves it
for the environment's own Python (a conda file's `python=3.8`, a curated image's 3.10, else this
machine's), moved to this machine's Python as one set (mlops/environments/resolve.py), and every
package of the moved set whose version differs from .venv's installed into the layer, so nothing
the environment reaches floats to .venv's release. What the closure does not reach still comes
from .venv (torch too, whose build stands in for any version). A layer whose compiled packages
were built for NumPy 1 and fail to import under NumPy 2 is resolved again with numpy<2, the pair
conda-forge (Azure's conda build) gives them (mlops/environments/abi.py).

The layer is keyed by the environment's requirements and Python and by the .venv below it; the
resolution is recorded in its layer.json, so a cached run resolves nothing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from mlops.environments import abi, resolve, steps
from mlops.environments.integrity import cached_layer, sharers, torn
from mlops.environments.interpreters import HERE, Python
from mlops.environments.layers import (
    BASE_SITE,
    PY,
    base_view,
    cache_dir,
    layer_key,
    make_venv,
)
from mlops.environments.requirements import canonical, hidden_families, name_of
from mlops.errors import LocalError, LocalRunError, MachineError


def closure_key(lines: list[str], python: str) -> str:
    return layer_key([f"python=={python}", "closure-layer-4", *steps.key_lines(lines),
                      *steps.stacked(lines)])


def build_closure_layer(lines: list[str], python: str, label: str,
                        adds: tuple[str, ...] = ()) -> Path:
    """The layer for `lines` as Python `python` resolves them, built once under a lock. `adds`:
    what the image brings besides (a deployment's server): taken as bare names when the
    environment's own pins leave no room for the image's versions."""

    def build(folder: Path) -> None:
        started = time.perf_counter()
        print(f"{label}: resolving {len(lines) + len(adds)} requirement(s) for Python "
              f"{python}, as Azure's image build does, and moving them to this Python",
              flush=True)
        layer = _paired(folder, lines, python=python, label=label, adds=adds)
        record = {"label": label, "requirements": lines, "adds": list(adds), "python": python,
                  "target": {k: v.version for k, v in layer.moved.target.items()},
                  "installed": layer.installed, "moved": layer.moved.lines,
                  "below": str(layer.below), "seconds": round(time.perf_counter() - started, 1)}
        (folder / "layer.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"{label}: cached layer ready in {record['seconds']:.1f}s "
              f"({len(layer.installed)} package(s); {folder})", flush=True)

    return cached_layer(cache_dir() / closure_key(steps.into_first(lines, list(adds)), python),
                        build)


class Built(NamedTuple):
    moved: resolve.Moved
    installed: dict[str, str]  # name -> version, what the layer itself holds
    below: Path  # .venv as the layer sees it


def _built(folder: Path, lines: list[str], *, python: str, label: str,
           adds: tuple[str, ...]) -> Built:
    target = target_for(lines, python, label, adds)
    no_build: frozenset[str] = frozenset()
    while True:
        moved = _moved(target, python, label, no_build)
        try:
            installed = _install(folder, moved, label)
            break
        except resolve.BuildFailed as failed:
            if failed.name in no_build or failed.name not in moved.here:
                raise build_error(failed, label, python) from None
            print(f"{label}: {failed.name} {failed.version} does not build from its source "
                  "here; taking the nearest release with a wheel for this Python", flush=True)
            no_build |= {failed.name}
    shadowed = _shadowed(folder)
    hidden = _under(shadowed, set(moved.here) - set(installed))
    if hidden:  # .venv's copies (same versions) are hidden with the entry: the layer's own
        extra = {name: moved.here[name] for name in hidden}
        installed = dict(sorted({**installed, **install_set(folder, extra, label)}.items()))
        shadowed = _shadowed(folder)
    below = base_view(hidden_families(list(installed)), shadowed)
    make_venv(folder, [below])  # .venv as the layer sees it, now that the layer is known
    return Built(moved, installed, below)


def _paired(folder: Path, lines: list[str], *, python: str, label: str,
            adds: tuple[str, ...]) -> Built:
    """_built, then again with numpy<2 if what it installed was compiled for NumPy 1 and fails
    under NumPy 2: conda-forge never pairs them."""
    layer = _built(folder, lines, python=python, label=label, adds=adds)
    site = folder / "lib" / PY / "site-packages"
    stale = abi.built_for_numpy_1(folder / "bin" / "python", site) if layer.installed else []
    if not stale:
        return layer
    print(f"{label}: {', '.join(stale)} fail(s) to import under NumPy 2 (built for NumPy 1); "
          f"resolving again with {abi.NUMPY_1}, as Azure's conda build pairs them", flush=True)
    try:
        paired = _built(folder, abi.with_numpy_1(lines), python=python, label=label, adds=adds)
    except LocalError as err:  # either kind: NumPy 1 does not install here
        print(f"warning: {label}: {abi.NUMPY_1} does not install with the rest ({err}); keeping "
              "NumPy 2", flush=True)
        return _built(folder, lines, python=python, label=label, adds=adds)
    paired.moved.lines.append(f"numpy -> {abi.NUMPY_1}: {', '.join(stale)} fail(s) under "
                              "NumPy 2")
    return paired


def target_for(lines: list[str], python: str, label: str,
               adds: tuple[str, ...]) -> dict[str, resolve.Locked]:
    """What Azure's image build installs for Python `python` (the version as the spec names
    it), else the error that says no set exists, in the resolver's words."""
    try:
        return _target(lines, python, adds)
    except resolve.NoSet as err:
        raise LocalRunError(f"{resolve.environment_named(label)}: no set of releases satisfies its "
                            f"requirements for Python {python}, so Azure's image build for "
                            f"that Python fails too (the resolver's words):\n{err}") from None


def _moved(target, python: str, label: str,
           no_build: frozenset[str] = frozenset()) -> resolve.Moved:
    try:
        return resolve.move_here(target, no_build)
    except resolve.NoSet as err:
        raise LocalRunError(f"{resolve.environment_named(label)}: what Azure's build resolves for "
                            f"Python {python} has no set of releases that installs on this "
                            f"machine's Python; run it on Azure, or pin releases made for this "
                            f"Python:\n{err}") from None


def _resolved(lines: list[str], python: str, label: str, adds: tuple[str, ...]):
    """The environment's closure for `python`, moved to this Python."""
    return _moved(target_for(lines, python, label, adds), python, label)


def build_error(failed: resolve.BuildFailed, label: str, python: str) -> MachineError:
    """A build that failed even where a wheel could stand in: the package, its version, and
    what to pin."""
    return MachineError(
        f"{resolve.environment_named(label)}: {failed}\nFix: pin a release of {failed.name} "
        f"that publishes a wheel for this machine's Python (and Python {python} on Azure), or "
        "install the build tools its source needs")


def _target(lines: list[str], python: str, adds: tuple[str, ...]):
    try:
        return resolve.target_set(steps.into_first(lines, list(adds)), python)
    except resolve.NoSet:
        if not adds:
            raise
    named = [name_of(line) or line for line in adds]  # the environment's pins decide
    return resolve.target_set(steps.into_first(lines, named), python)


def _shadowed(folder: Path) -> frozenset[str]:
    """Top-level entries of .venv to hide from the layer: those under which a folder that is a
    namespace portion in the layer is a regular package in .venv (azure/monitor/opentelemetry/
    of .venv's azure-monitor-opentelemetry would otherwise win over the layer's exporter inside
    it, and import .venv's releases of the rest). Where both are namespaces they merge."""
    site = folder / "lib" / PY / "site-packages"
    found = set()
    todo = [entry.relative_to(site) for entry in site.iterdir()
            if entry.is_dir() and not entry.name.endswith(".dist-info")]
    while todo:
        relative = todo.pop()
        if (site / relative / "__init__.py").exists():
            continue  # a regular package of the layer: .venv's copy is never reached
        if (BASE_SITE / relative / "__init__.py").exists():
            found.add(relative.parts[0])
            continue
        todo += [entry.relative_to(site) for entry in (site / relative).iterdir()
                 if entry.is_dir() and entry.name != "__pycache__"]
    return frozenset(found)


def _under(shadowed: frozenset[str], names: set[str], dists=None) -> set[str]:
    """Which of .venv's distributions `names` have files under the hidden top-level entries."""
    found = set()
    for dist in dists or importlib.metadata.distributions(path=[str(BASE_SITE)]):
        name = canonical(dist.metadata["Name"])
        if name in names and any(f.parts[0] in shadowed for f in dist.files or []):
            found.add(name)
    return found


def _install(folder: Path, moved: resolve.Moved, label: str) -> dict[str, str]:
    """Every moved package .venv lacks at that version, into a fresh layer over .venv."""
    shutil.rmtree(folder, ignore_errors=True)
    wanted = {name: locked for name, locked in moved.here.items()
              if resolve.venv_version(name) != locked.version}
    make_venv(folder, [base_view(hidden_families(list(wanted)))])
    installed = install_set(folder, wanted, label)
    restack(folder, moved.target, label)
    return installed


def install_set(folder: Path, wanted: dict[str, resolve.Locked], label: str, *,
                python: Python = HERE, wheels_only: bool = True,
                built_on: tuple[str, ...] = ()) -> dict[str, str]:
    """`wanted` into the venv at `folder`, as resolved (no dependency of its own is followed;
    with `wheels_only`, compiled packages as wheels only), its bytecode compiled as pip
    compiles it when an image is built (a job's first import would otherwise compile it, and a
    read-only cache would make every job do so); name -> version. `built_on`: the image's
    `--exclude-newer <time>`, so sdists build with the build tools of the day it was built."""
    if wanted:
        argv = [resolve.uv_binary(), "pip", "install", "--python",
                str(folder / "bin" / "python"), "--no-deps", "--quiet", *bytecode_flags(python),
                *built_on,
                *[f"{name}=={locked.version}" for name, locked in sorted(wanted.items())]]
        for name in sorted(n for n, locked in wanted.items() if locked.compiled and wheels_only):
            argv += ["--only-binary", name]
        result = resolve.run_uv(argv)
        if result.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            failed = resolve.build_failure(result.stderr)
            if failed is not None:
                raise failed
            raise resolve.uv_failure(
                result.stderr, f"{resolve.environment_named(label)}: installing its packages")
        mend_torn(folder, label, python)
        compile_old(folder, python)
    python.site(folder).mkdir(parents=True, exist_ok=True)
    return {name: locked.version for name, locked in sorted(wanted.items())}


def bytecode_flags(python: Python) -> list[str]:
    """uv's --compile-bytecode where its compile script runs: from Python 3.7 (it reads
    py_compile.PycInvalidationMode, new in 3.7); an older Python compiles with compile_old."""
    return ["--compile-bytecode"] if python.info >= (3, 7) else []


def compile_old(folder: Path, python: Python) -> None:
    """The bytecode of a Python older than 3.7 by its own compileall, as pip compiles what it
    installs; a file that does not compile is left as pip leaves it (a source-only test)."""
    if bytecode_flags(python):
        return
    with contextlib.suppress(OSError):  # bytecode saves first imports; a job runs without it
        subprocess.run([str(folder / "bin" / "python"), "-m", "compileall", "-q",
                        str(python.site(folder))], capture_output=True, check=False)


def mend_torn(folder: Path, label: str, python: Python = HERE) -> None:
    """A file several wheels ship that uv's parallel install left a mix of (integrity.torn):
    one of its owners installed again alone, so the file is that wheel's whole, as pip's
    serial install would leave it."""
    for owners in torn(folder):
        _reinstall(folder, owners[-1], label, python=python,
                   why=f"a file it shares with {', '.join(owners[:-1])} was left mixed")


def restack(folder: Path, target: dict[str, resolve.Locked], label: str,
            python: Python = HERE) -> None:
    """Files several installed wheels ship, as Azure's installs in turn leave them: a wheel a
    later install brought is installed again, alone, over the earlier ones' (conda's mlflow
    1.26, then pip's mlflow-skinny 2.17 for azureml-mlflow: skinny's files are the mlflow
    package the job imports), where uv's one install of the set leaves each such file to
    whichever wheel wrote it last."""
    if not isinstance(target, resolve.Staged):
        return
    written = steps.written_in([install.locked for install in target.steps])
    for owners in sharers(folder):
        named = {canonical(owner.partition("==")[0]): owner for owner in owners}
        for name in steps.rewritten(list(named), written):
            others = ", ".join(sorted(set(owners) - {named[name]}))
            _reinstall(folder, named[name], label, python=python,
                       why=f"a later install than {others}'s wrote its files over theirs")


def _reinstall(folder: Path, owner: str, label: str, *, python: Python, why: str) -> None:
    argv = [resolve.uv_binary(), "pip", "install", "--python", str(folder / "bin" / "python"),
            "--no-deps", "--quiet", *bytecode_flags(python), "--reinstall", owner]
    result = resolve.run_uv(argv)
    if result.returncode != 0:
        raise resolve.uv_failure(result.stderr, f"{resolve.environment_named(label)}: "
                                 f"installing {owner} again ({why})")
