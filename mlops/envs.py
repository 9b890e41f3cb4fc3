"""Local environments without Docker: layers of plain Python virtual environments.

    python -m mlops.envs list | clean        (make envs / make clean-envs)

A job runs in the Python its spec's `environment:` names (mlops/envspec.py reads it), built as
layers over the project's .venv, which is the bottom layer and is never written:
1. .venv: the project's own environment (its conda.yml is generated from pyproject.toml). A spec
   whose requirements .venv already satisfies needs nothing more.
2. a cached layer per distinct set of unsatisfied requirements (keyed by their content and by the
   .venv below it), created once with pip, which sees .venv's packages as installed: torch and
   friends are reused when the pins agree and shadowed by the layer when they do not.
3. a throwaway top layer per run (`<task>/env`): whatever the job itself installs
   (`pip install ...` in the command) lands there and is deleted with the run (KEEP_ENV=1 keeps
   it). Creating it costs a few files and one symlink.
A layer is a venv whose site-packages ends with a .pth that adds the layers below it.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from . import pins
from .envspec import ENV_MAP, EnvMap, EnvPlan, plan_for
from .errors import LocalRunError
from .requirements import canonical, hidden_families, name_of, unfetchable, with_mpi
from .specs import ROOT

VENV_BIN = Path(sys.executable).parent
BASE_SITE = Path(sysconfig.get_paths()["purelib"])
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
TOP = "env"
READONLY_HOOK = Path(__file__).with_name("readonly_inputs.py")  # copied into each top layer


def cache_dir() -> Path:
    """Where cached layers live (LOCAL_ENVS_DIR overrides; make clean-envs empties it)."""
    return Path(os.environ.get("LOCAL_ENVS_DIR") or ROOT / ".cache" / "envs")


def unsatisfied(requirements: list[str]) -> list[str]:
    """The requirements .venv does not already meet (URLs and options are always kept)."""
    missing = []
    for line in requirements:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            missing.append(line)
            continue
        if requirement.marker and not requirement.marker.evaluate():
            continue
        try:
            have = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(line)
            continue
        if requirement.url or not requirement.specifier.contains(have, prereleases=True):
            missing.append(line)
    return missing


def with_families(missing: list[str], requirements: list[str]) -> list[str]:
    """A family with one member missing from .venv comes whole from the layer: every member the
    environment names joins `missing` (the layer's view hides .venv's copies of all of them)."""
    hidden = hidden_families(missing)
    return missing + [line for line in requirements
                      if line not in missing and name_of(line) in hidden]


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


def base_view(hidden: set[str]) -> Path:
    """.venv's site-packages as the layers see it: itself, or, when the environment brings its
    own version of a family (MLflow), a cached folder of links to every entry but that
    family's, so its packages and metadata come from the environment alone."""
    if not hidden:
        return BASE_SITE
    key = hashlib.sha256(f"{sorted(hidden)}{BASE_SITE}{BASE_SITE.stat().st_mtime_ns}".encode())
    view = cache_dir() / f"view-{key.hexdigest()[:16]}"
    if (view / ".complete").is_file():
        return view
    drop = set()
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


def build_layer(requirements: list[str], label: str, everything: tuple = ()) -> Path:
    """The cached layer for `requirements`, created once (a lock keeps concurrent runs out).
    `everything`: all the environment names, .venv's share included."""
    folder = cache_dir() / layer_key(requirements)
    done = folder / "layer.json"
    if done.is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a build that died half-way
        started = time.perf_counter()
        shown = ", ".join(requirements[:6]) + (" ..." if len(requirements) > 6 else "")
        print(f"{label}: installing {len(requirements)} requirement(s) into a "
              f"cached layer ({shown})", flush=True)
        relaxed, below = _install_resolved(folder, requirements, label,
                                           [*requirements, *everything])
        seconds = time.perf_counter() - started
        done.write_text(json.dumps({"label": label, "requirements": requirements,
                                    "installed": relaxed.requirements, "moved": relaxed.moved,
                                    "below": str(below),
                                    "seconds": round(seconds, 1)}, indent=2) + "\n")
        print(f"{label}: cached layer ready in {seconds:.1f}s ({folder})", flush=True)
    return folder


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
    result = subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install",
                             "--disable-pip-version-check", "--no-input", "-q",
                             *relaxed.requirements], capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise LocalRunError(install_failure(label, result.stdout + result.stderr))
    return relaxed


CONFLICT = re.compile(r"^(\S+) \S+ has requirement ([A-Za-z0-9._-]+)")


def closure(requirements: list[str], paths: list[str]) -> set[str]:
    """The names of what `requirements` install, following each installed one's own
    requirements (the first path that holds a distribution wins, as on sys.path)."""
    dists: dict = {}
    for dist in importlib.metadata.distributions(path=paths):
        dists.setdefault(canonical(dist.metadata["Name"]), dist)
    todo = [name for name in map(name_of, requirements) if name]
    seen: set[str] = set()
    while todo:
        name = canonical(todo.pop())
        if name in seen or name not in dists:
            continue
        seen.add(name)
        for line in dists[name].requires or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if not requirement.marker or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


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


class Environments:
    """Activates the environment of each task; remembers what it told the user."""

    def __init__(self, env_map_path: Path | None = None):
        self.env_map = EnvMap(env_map_path or ENV_MAP)
        self.said: set[str] = set()
        self.labels: dict[str, str] = {}  # where -> the environment it named, for logs

    def _say(self, line: str) -> None:
        if line not in self.said:
            self.said.add(line)
            print(line, file=sys.stderr)

    def _explain(self, plan: EnvPlan) -> None:
        if plan.notice:
            self._say(f"note: {plan.notice}")
        if plan.skipped:
            self._say(f"note: {plan.label}: conda packages with no PyPI equivalent are not "
                      f"installed here: {', '.join(plan.skipped)}")
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        wanted = ".".join(plan.python.rstrip(".*").split(".")[:2]) if plan.python else here
        if wanted != here:  # a patch release apart is the same Python for packages
            self._say(f"warning: {plan.label} asks for Python {plan.python}; this machine runs "
                      f"{platform.python_version()} (packages are installed for it)")

    def layers(self, environment, base: Path, where: str, adds: tuple = ()) -> list[Path]:
        """The layers below the top one, highest first (empty: .venv alone). `adds`: packages
        the image itself brings when the environment lacks them (a serving image's server)."""
        plan = plan_for(environment, base, self.env_map, where)
        named = {name_of(line) for line in plan.requirements}
        plan.requirements += [line for line in adds if name_of(line) not in named]
        self._explain(plan)
        self.labels[where] = plan.label
        with_mpi(plan.requirements)
        remote = [line for line in plan.requirements if unfetchable(line)]
        for line in remote:  # Azure's build fetches them; this machine reaches PyPI only
            self._say(f"warning: {plan.label}: skipped {line!r}: this machine cannot fetch it "
                      "(only the package registries are reachable); the rest is installed")
        wanted = pins.for_python([line for line in plan.requirements if line not in remote],
                                 plan.python, cache_dir())
        if wanted.moved:
            self._say(f"note: {plan.label}: for Python {plan.python}, as Azure's image build "
                      f"resolves them: {', '.join(wanted.moved)}")
        layer = self._layer(wanted.requirements, plan.label, last=not wanted.moved)
        if layer is False:  # resolved for the other Python, the set does not install here
            self._say(f"note: {plan.label}: those releases do not install together here; "
                      "using the environment's own requirement lines")
            layer = self._layer([line for line in plan.requirements if line not in remote],
                                plan.label, last=True)
        if layer is None:
            return []
        for line in layer_record(layer).get("moved") or []:
            self._say(f"warning: {plan.label}: {line}")
        with open(layer / "used_by.txt", "a") as record:
            record.write(f"{where}\n")
        return [layer]

    def _layer(self, requirements: list[str], label: str, last: bool = False):
        """The layer for what .venv lacks (None: nothing); False when pip cannot install it and
        this is not the `last` attempt."""
        missing = with_families(unsatisfied(requirements), requirements)
        if not missing:
            return None
        failed = cache_dir() / f"{layer_key(missing)}.failed"  # not tried again on every run
        if not last and failed.is_file():
            return False
        try:
            return build_layer(missing, label, tuple(requirements))
        except LocalRunError as err:
            if last:
                raise
            failed.write_text(f"{err}\n")
            return False

    def activate(self, environment, base: Path, folder: Path, where: str,
                 adds: tuple = ()) -> dict[str, str]:
        """Build (or reuse) the layers and a fresh top layer; the variables that select them."""
        lower = self.layers(environment, base, where, adds)
        self.labels[where] += f" ({', '.join(str(p) for p in lower) or '.venv'})"
        top = folder / TOP
        shutil.rmtree(top, ignore_errors=True)
        below = [Path(layer_record(layer).get("below") or BASE_SITE) for layer in lower[-1:]]
        site = make_venv(top, [layer / "lib" / PY / "site-packages" for layer in lower] +
                         (below or [BASE_SITE]))
        shutil.copyfile(READONLY_HOOK, site / "_mlops_readonly_inputs.py")
        (site / "zz_readonly_inputs.pth").write_text(
            "import _mlops_readonly_inputs; _mlops_readonly_inputs.install()\n")
        bins = [top / "bin", *[layer / "bin" for layer in lower], VENV_BIN]
        path = os.pathsep.join([*map(str, bins), os.environ.get("PATH", "")])
        env = {"PATH": path, "VIRTUAL_ENV": str(top)}
        mpi = [layer for layer in lower if (layer / "bin" / "mpirun").is_file()]
        if mpi:  # a relocated Open MPI finds its own files, libmpi is found from every layer
            libs = [str(layer / "lib") for layer in lower]
            env["OPAL_PREFIX"] = str(mpi[0])
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [*libs, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
        return env

    def release(self, folder: Path) -> None:
        if os.environ.get("KEEP_ENV", "") not in ("1", "true", "True"):
            shutil.rmtree(folder / TOP, ignore_errors=True)


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink())


def list_layers() -> int:
    cache = cache_dir()
    layers = sorted(cache.glob("*/layer.json")) if cache.is_dir() else []
    if not layers:
        print(f"no cached environments in {cache}")
        return 0
    for record in layers:
        info = json.loads(record.read_text())
        used = record.parent / "used_by.txt"
        specs = sorted(set(used.read_text().split("\n")) - {""}) if used.is_file() else []
        print(f"{record.parent.name}  {_size(record.parent) / 2**20:8.1f} MB  {info['label']}\n"
              f"    requirements: {' '.join(info['requirements'])}\n"
              f"    used by: {', '.join(specs) or '-'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Cached local environments (layers on .venv).")
    parser.add_argument("action", choices=["list", "clean"])
    args = parser.parse_args(argv)
    if args.action == "list":
        return list_layers()
    shutil.rmtree(cache_dir(), ignore_errors=True)
    print(f"removed {cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
