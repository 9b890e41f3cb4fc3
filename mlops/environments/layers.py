"""Cached environment layers: plain virtual environments stacked over .venv (mlops/envs.py
decides which requirements a layer gets; this module builds it).

A layer is a venv whose site-packages ends with a .pth that adds the layers below it. It is keyed
by its requirements and by the .venv below it, built once under a lock, and recorded in
layer.json. After pip installs it, what of .venv the environment installs too and the layer's
versions break (pip check) is resolved into the layer as well, as pip resolves an image's
packages together.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from packaging.requirements import InvalidRequirement, Requirement

from mlops.environments import abi, pins
from mlops.environments.requirements import canonical, hidden_families
from mlops.errors import LocalRunError
from mlops.specs import ROOT

VENV_BIN = Path(sys.executable).parent
BASE_SITE = Path(sysconfig.get_paths()["purelib"])
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def cache_dir() -> Path:
    """Where cached layers live (LOCAL_ENVS_DIR overrides; make clean-envs empties it)."""
    return Path(os.environ.get("LOCAL_ENVS_DIR") or ROOT / ".cache" / "envs")


def make_venv(folder: Path, lower: list[Path]) -> Path:
    """A bare venv (no copy of pip: the shims run the lower layers' pip into this one)."""
    site = folder / "lib" / PY / "site-packages"
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    site.mkdir(parents=True, exist_ok=True)
    real = Path(os.path.realpath(sys.executable))
    (folder / "pyvenv.cfg").write_text(f"home = {real.parent}\ninclude-system-site-packages = "
                                       f"false\nversion = {platform.python_version()}\n")
    for name in ("python", "python3", PY):
        link = folder / "bin" / name
        if not link.is_symlink():
            link.symlink_to(real)
    for name in ("pip", "pip3"):
        shim = folder / "bin" / name
        shim.write_text(f'#!/bin/sh\nexec "{folder}/bin/python" -m pip "$@"\n')
        shim.chmod(0o755)
    adds = "; ".join(f"site.addsitedir({str(p)!r})" for p in lower)
    (site / "zz_lower_layers.pth").write_text(f"import site; {adds}\n")
    return site


def base_view(hidden: set[str], shadowed: frozenset[str] = frozenset()) -> Path:
    """.venv's site-packages as the layers see it: itself, or, when the environment brings its
    own version of a family (MLflow), a cached folder of links to every entry but that
    family's, so its packages and metadata come from the environment alone. `shadowed`:
    top-level entries the layer provides itself, hidden whole (a namespace such as azure/ whose
    .venv half would otherwise mix in packages of other releases)."""
    if not hidden and not shadowed:
        return BASE_SITE
    key = hashlib.sha256(f"{sorted(hidden)}{sorted(shadowed)}{BASE_SITE}"
                         f"{BASE_SITE.stat().st_mtime_ns}".encode())
    view = cache_dir() / f"view-{key.hexdigest()[:16]}"
    if (view / ".complete").is_file():
        return view
    drop = set(shadowed)
    for dist in importlib.metadata.distributions(path=[str(BASE_SITE)]):
        if canonical(dist.metadata["Name"]) in hidden:
            drop |= {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}
    tmp = view.with_name(f"{view.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for entry in BASE_SITE.iterdir():
        if entry.name not in drop:
            (tmp / entry.name).symlink_to(entry)
    (tmp / ".complete").touch()
    try:
        tmp.rename(view)
    except OSError:  # another run made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return view


def layer_key(requirements: list[str]) -> str:
    base = BASE_SITE.stat().st_mtime_ns  # .venv changed: layers built on it are rebuilt
    text = "\n".join(sorted(requirements)) + f"\n{BASE_SITE}\n{base}\n{PY}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_layer(folder: Path, build: Callable[[Path], None]) -> Path:
    """`folder`, built once by `build` (which writes its layer.json last): a lock keeps
    concurrent runs out, and a build that died half-way is started afresh."""
    if (folder / "layer.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "layer.json").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
    return folder


def build_layer(requirements: list[str], label: str, everything: tuple = ()) -> Path:
    """The cached layer for `requirements`, created once. `everything`: all the environment
    names, .venv's share included."""

    def build(folder: Path) -> None:
        done = folder / "layer.json"
        started = time.perf_counter()
        shown = ", ".join(requirements[:6]) + (" ..." if len(requirements) > 6 else "")
        print(f"{label}: installing {len(requirements)} requirement(s) into a "
              f"cached layer ({shown})", flush=True)
        relaxed, below = _install_paired(folder, requirements, label,
                                         [*requirements, *everything])
        seconds = time.perf_counter() - started
        done.write_text(json.dumps({"label": label, "requirements": requirements,
                                    "installed": relaxed.requirements, "moved": relaxed.moved,
                                    "below": str(below),
                                    "seconds": round(seconds, 1)}, indent=2) + "\n")
        print(f"{label}: cached layer ready in {seconds:.1f}s ({folder})", flush=True)

    return cached_layer(cache_dir() / layer_key(requirements), build)


def _install_paired(folder: Path, requirements: list[str], label: str, everything: list[str]):
    """_install_resolved, then again with numpy<2 if what it installed was compiled for NumPy 1
    and fails under NumPy 2 (mlops/environments/abi.py): conda-forge never pairs them."""
    relaxed, below = _install_resolved(folder, requirements, label, everything)
    stale = abi.built_for_numpy_1(folder / "bin" / "python", folder / "lib" / PY / "site-packages")
    if not stale:
        return relaxed, below
    print(f"{label}: {', '.join(stale)} fail(s) to import under NumPy 2 (built for NumPy 1); "
          f"installing {abi.NUMPY_1} with them, as Azure's conda build pairs them", flush=True)
    try:
        relaxed, below = _install_resolved(folder, abi.with_numpy_1(requirements), label,
                                           abi.with_numpy_1(everything))
    except LocalRunError as err:
        print(f"warning: {label}: {abi.NUMPY_1} does not install with the rest ({err}); keeping "
              "NumPy 2", flush=True)
        return _install_resolved(folder, requirements, label, everything)
    relaxed.moved.append(f"numpy -> {abi.NUMPY_1}: {', '.join(stale)} fail(s) under NumPy 2")
    return relaxed, below


def _install_resolved(folder: Path, requirements: list[str], label: str, everything: list[str]):
    """Install, then bring into the layer what of .venv the installed versions break, as pip
    resolves an image's packages together (a few rounds at most)."""
    extra: list[str] = []  # .venv packages that must come from the layer too
    for attempt in range(4):
        below = base_view(hidden_families(requirements + extra) | set(extra))
        try:
            relaxed = _install(folder, requirements + extra, below, label)
        except LocalRunError:
            if not extra:
                raise
            print(f"warning: {label}: no versions of {', '.join(extra)} install with the layer; "
                  "keeping .venv's", flush=True)
            below = base_view(hidden_families(requirements))
            return _install(folder, requirements, below, label), below
        broken = broken_below(folder, everything + extra) - set(extra)
        if not broken or attempt == 3:
            return relaxed, below
        print(f"{label}: {', '.join(sorted(broken))} from .venv need(s) other versions of what "
              "the layer installs; resolving them into the layer too", flush=True)
        extra += sorted(broken)
    raise AssertionError("unreachable")


def _install(folder: Path, requirements: list[str], below: Path, label: str) -> pins.Relaxed:
    shutil.rmtree(folder, ignore_errors=True)
    make_venv(folder, [below])
    relaxed = pins.relax(requirements, str(folder / "bin" / "python"))
    code, output = _pip_with_progress(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
         "--no-input", "--progress-bar", "off", *relaxed.requirements], label)
    if code != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise LocalRunError(install_failure(label, output))
    return relaxed


PROGRESS = re.compile(r"^(Collecting|Downloading|Building wheel|Installing collected|"
                      r"Successfully installed)")


class PipRun(NamedTuple):
    code: int
    output: str  # everything pip printed, for the error message


def _pip_with_progress(argv: list[str], label: str) -> PipRun:
    """Run pip, echoing the lines that show it is moving (what it fetches, builds, installs):
    a large layer takes minutes. All of its output is kept for the error message."""
    lines = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as pip:
        for line in pip.stdout:
            lines.append(line)
            if PROGRESS.match(line.strip()):
                print(f"  {label}: {line.strip()[:160]}", flush=True)
    return PipRun(pip.returncode, "".join(lines))


CONFLICT = re.compile(r"^(\S+) \S+ has requirement ([A-Za-z0-9._-]+)")


def closure(requirements: list[str], paths: list[str]) -> set[str]:
    """The names of what `requirements` install, extras included, following each installed
    one's own requirements (the first path that holds a distribution wins, as on sys.path)."""
    dists: dict = {}
    for dist in importlib.metadata.distributions(path=paths):
        dists.setdefault(canonical(dist.metadata["Name"]), dist)
    todo = [_parsed(line) for line in requirements]
    seen: set[tuple] = set()
    while todo:
        requirement = todo.pop()
        if requirement is None:
            continue
        key = (canonical(requirement.name), frozenset(requirement.extras))
        if key in seen or key[0] not in dists:
            continue
        seen.add(key)
        for line in dists[key[0]].requires or []:
            wanted = _parsed(line)
            marker = wanted.marker if wanted else None
            if not marker or any(marker.evaluate({"extra": e}) for e in key[1] or {""}):
                todo.append(wanted)
    return {name for name, _ in seen}


def _parsed(line: str) -> Requirement | None:
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None  # an option or URL line: nothing installed to follow


def broken_below(folder: Path, requirements: list[str]) -> set[str]:
    """Packages of .venv that the environment installs too (its requirements' closure) whose
    own requirements the layer's versions break (pip check): on Azure pip resolves them
    together, so they come from the layer, at versions that fit. What the environment would not
    have at all (torch under a scikit-learn environment), the project itself and other local
    installs are left alone."""
    site = folder / "lib" / PY / "site-packages"
    mine = {canonical(d.metadata["Name"])
            for d in importlib.metadata.distributions(path=[str(site)])}
    needed = closure(requirements, [str(site), str(BASE_SITE)])
    local = {canonical(d.metadata["Name"]) for d in importlib.metadata.distributions(
        path=[str(BASE_SITE)]) if d.read_text("direct_url.json")}
    result = subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "check",
                             "--disable-pip-version-check"], capture_output=True, text=True)
    broken = set()
    for line in result.stdout.splitlines():
        match = CONFLICT.match(line)
        if match and canonical(match.group(2)) in mine:
            dependent = canonical(match.group(1))
            if dependent in needed and dependent not in mine and dependent not in local:
                broken.add(dependent)
    return broken


def install_failure(label: str, output: str) -> str:
    """What pip's failure means here: no release of a package installs on this machine (which
    says nothing of Azure's build, whose Python may differ), or pip's own last lines."""
    tail = "\n".join(output.strip().splitlines()[-12:])
    missing = re.search(r"No matching distribution found for (\S+)", output)
    if missing:
        return (f"environment {label}: no release of {missing.group(1)} installs on this "
                f"machine ({pins.HERE}, {platform.system()} {platform.machine()}); build this "
                f"environment on Azure, or pin a release that has a wheel here:\n{tail}")
    return f"environment {label}: pip could not install its packages on this machine:\n{tail}"


def layer_record(layer: Path) -> dict:
    try:
        return json.loads((layer / "layer.json").read_text())
    except (OSError, ValueError):
        return {}
