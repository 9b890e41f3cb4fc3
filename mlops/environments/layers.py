"""Cached environment layers: plain virtual environments stacked over .venv
(mlops/environments/closures.py decides what a layer holds; this module makes the venvs, the
view of .venv below them, and the lock a build runs under).

A layer is a venv whose site-packages ends with a .pth that adds the layers below it. It is keyed
by its content and by the .venv below it, built once under a lock, and recorded in layer.json.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from mlops.environments.interpreters import HERE, Python
from mlops.environments.requirements import canonical
from mlops.errors import MachineError
from mlops.project import cache_root

VENV_BIN = Path(sys.executable).parent
BASE_SITE = Path(sysconfig.get_paths()["purelib"])
PY = HERE.lib


@dataclass(frozen=True)
class Stack:
    """What a task's top layer goes over: cached layers (highest first) and the Python they are
    for. Over .venv (`own` False): .venv's site-packages, as the layers see it, is the bottom.
    A complete environment of its own interpreter (`own`): nothing of .venv is seen."""

    layers: list[Path]
    python: Python = HERE
    own: bool = False

    def sites(self) -> list[Path]:
        """Every site-packages below the top layer, highest first."""
        sites = [self.python.site(layer) for layer in self.layers]
        if self.own:
            return sites
        below = [Path(layer_record(layer).get("below") or BASE_SITE) for layer in self.layers]
        return sites + (below[-1:] or [BASE_SITE])

    def bins(self) -> list[Path]:
        return [layer / "bin" for layer in self.layers] + ([] if self.own else [VENV_BIN])


def cache_dir() -> Path:
    """Where cached layers live: LOCAL_ENVS_DIR, else <cache root>/envs (project.cache_root;
    make clean-envs empties it)."""
    return Path(os.environ.get("LOCAL_ENVS_DIR") or cache_root() / "envs")


def make_venv(folder: Path, lower: list[Path], python: Python = HERE) -> Path:
    """A bare venv of `python` (no copy of pip: the shims run the lower layers' pip into this
    one, unless the layer installed a pip of its own, whose scripts stay as its wheel wrote
    them)."""
    site = python.site(folder)
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    site.mkdir(parents=True, exist_ok=True)
    real = python.executable
    (folder / "pyvenv.cfg").write_text(f"home = {real.parent}\ninclude-system-site-packages = "
                                       f"false\nversion = {python.version}\n")
    for name in ("python", "python3", python.lib):
        link = folder / "bin" / name
        if not link.is_symlink():
            link.symlink_to(real)
    for name in ("pip", "pip3"):
        shim = folder / "bin" / name
        if shim.exists():  # the layer's own pip (its wheel's script, by its RECORD's digest)
            continue
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
                         f"{base_identity()}".encode())
    view = cache_dir() / f"view-{key.hexdigest()[:16]}"
    if (view / ".complete").is_file():
        return view
    drop = set(shadowed)
    for dist in importlib.metadata.distributions(path=[str(BASE_SITE)]):
        if canonical(dist.metadata["Name"]) in hidden:
            drop |= {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}
    tmp = view.with_name(f"{view.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for entry in BASE_SITE.iterdir():
            if entry.name not in drop:
                (tmp / entry.name).symlink_to(entry)
        (tmp / ".complete").touch()
    except OSError as err:
        raise MachineError(f"the environment cache {view.parent} cannot be written "
                           f"({err.strerror or err}) and lacks {view.name}: make it writable, "
                           "or set MLOPS_CACHE_DIR (or LOCAL_ENVS_DIR) to a writable folder"
                           ) from None
    try:
        tmp.rename(view)
    except OSError:  # another run made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return view


def base_identity() -> str:
    """What .venv holds, as the layers over it depend on it: its distributions and their
    versions (the names of its .dist-info folders) and its top-level entries. Not the folder's
    modification time, which moves whenever anything writes beside the packages (a layer
    built on an unchanged .venv was then built again)."""
    names = sorted(entry.name for entry in BASE_SITE.iterdir() if entry.name != "__pycache__")
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def layer_key(requirements: list[str]) -> str:
    base = base_identity()  # .venv changed: layers built on it are rebuilt
    text = "\n".join(sorted(requirements)) + f"\n{BASE_SITE}\n{base}\n{PY}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def closure(requirements: list[str], paths: list[str]) -> set[str]:
    """The names of what `requirements` install, extras included, following each installed
    one's own requirements (the first path that holds a distribution wins, as on sys.path)."""
    dists: dict[str, importlib.metadata.Distribution] = {}
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


def layer_record(layer: Path) -> dict[str, object]:
    try:
        return json.loads((layer / "layer.json").read_text())
    except (OSError, ValueError):
        return {}
