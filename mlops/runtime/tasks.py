"""Task, and spec -> Task: what a command job, a trial or a pipeline node asks the runtime to run.

Each builder is pure apart from reading component files; the runtime does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mlops.environments.envspec import EnvironmentRef
from mlops.errors import LocalRunError
from mlops.runtime.launch import ARG_STRLEN_MAX
from mlops.runtime.localize import Localized
from mlops.runtime.placement import Placement
from mlops.runtime.uris import AssetMap, is_remote
from mlops.runtime.values import OutputSpec, Value, job_inputs, job_outputs
from mlops.specs import SpecData, SpecError, load_spec


@dataclass(frozen=True)
class Workdir:
    """Where the task's copy of `code:` goes in its folder: a job's `wd/` (the code at its root),
    or a server's `app/<code folder name>`, as Azure's inference image lays out AML_APP_ROOT."""

    name: str = "wd"
    code_under: str = ""


@dataclass(kw_only=True)
class Task:
    """One unit Azure runs as a job: a command with its code, inputs, outputs and environment."""

    name: str
    command: str
    where: str  # "jobs/train.yml: command", for messages
    folder: Path
    code: Path | None = None
    includes: list[Path] = field(default_factory=list)  # additional_includes, merged into code
    inputs: dict[str, Value] = field(default_factory=dict)
    outputs: dict[str, OutputSpec] = field(default_factory=dict)
    environment: EnvironmentRef = field(default_factory=EnvironmentRef)
    env_vars: dict[str, str] = field(default_factory=dict)  # the spec's environment_variables
    placement: Placement = field(default_factory=Placement)
    read_only: list[Path] = field(default_factory=list)  # beyond the inputs: a mounted model
    localized: tuple[Localized, ...] = ()  # Spark's files and archives, placed in the wd
    workdir: Workdir = field(default_factory=Workdir)
    timeout: float = 0.0  # limits.timeout: seconds Azure lets it run before it cancels it (0: none)
    experiment: str = "Default"
    tags: dict[str, str] = field(default_factory=dict)
    parent_run: str | None = None
    address: tuple[str, ...] = ()  # in its run: ("train",), ("tune", "trial:3"); DEBUG= names it
    assets: tuple[str, dict[str, str]] = ("", {})  # the asset map's file and azureml: entries


class Component(NamedTuple):
    """A component's definition, the folder its relative paths start from, and the registry
    it came from (its own `azureml:` references resolve there)."""

    data: SpecData
    base: Path
    registry: str | None = None


VARIABLE_MAX = ARG_STRLEN_MAX  # one "NAME=value" a process starts with (launch.py)


def variables(values) -> dict[str, str]:
    """`environment_variables` as the process gets them: names and values as text; one no
    process can start with is the input's error naming it."""
    found = {str(k): "" if v is None else str(v) for k, v in (values or {}).items()}
    for name, value in found.items():
        problem = ("its name holds '=' or a NUL character" if "=" in name or "\0" in name else
                   "its value holds a NUL character" if "\0" in value else
                   f"it is {len(name) + len(value.encode()) + 2:,} bytes, past the "
                   f"{VARIABLE_MAX:,} Linux lets one variable of a starting process be"
                   if len(name) + len(value.encode()) + 2 > VARIABLE_MAX else "")
        if problem:
            raise LocalRunError(f"environment_variables.{name[:60]!r}: {problem}, so no process "
                                "can be started with it. Fix: rename or shorten it (a large "
                                "value belongs in a file, passed as an input)")
    return found


def code_path(code, base: Path, where: str) -> Path | None:
    """`code:` relative to the spec; remote code (azureml:, git+, https) cannot be copied here."""
    if code is None or code == "":
        return None
    code = str(code)
    if is_remote(code):
        raise LocalRunError(f"{where}: code {code} is not a local folder; Azure fetches it, this "
                            "machine cannot. Point code: at a local copy")
    return (base / code.removeprefix("file:")).resolve()


def time_limit(data: SpecData, where: str) -> float:
    """A command job's (or node's) limits.timeout in seconds; 0 when it sets none."""
    value = (data.get("limits") or {}).get("timeout")
    if value in (None, ""):
        return 0.0
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise LocalRunError(f"{where}.limits.timeout: {value!r} is not a number of seconds "
                            "(Azure takes an integer, e.g. timeout: 3600)") from None
    if seconds <= 0:
        raise LocalRunError(f"{where}.limits.timeout: {value!r}; give a positive number of "
                            "seconds, or leave it out for no limit")
    return seconds


def experiment_name(data: SpecData) -> str:
    """The spec's experiment, else Azure's default: the stem of the folder the job is
    submitted from, spaces removed, or `Default` (azure-ai-ml's generate_defaults, in
    entities/_job/to_rest_functions.py: `my project.v2` is experiment `myproject`). A name the
    service refuses at submission (names.py's rule: `a/b`, `v1.2`) is refused here too."""
    from mlops.workspace import names

    given = data.get("experiment_name")
    name = str(given or default_experiment())
    try:
        return names.experiment_name(name)
    except names.InvalidName as err:
        if given:
            raise
        rule = names.EXPERIMENT
        raise names.InvalidName(
            f"the job names no experiment_name, so its experiment is the name of the folder "
            f"it is submitted from ({Path.cwd()}) less its suffix and spaces, {name!r}, which "
            f"Azure refuses: experiment names are 1 to {rule.limit} {rule.text}. Fix: give the "
            "job an experiment_name: (or --set experiment_name=...), or submit it from another "
            "folder") from err


def default_experiment() -> str:
    return Path.cwd().resolve().stem.replace(" ", "") or "Default"


def load_component(ref, base: Path, assets: AssetMap, where: str, *,
                   registry: str | None = None) -> Component:
    """A component given as a file, `file:` path, inline mapping, a registry's (from the folder
    the asset map names for it), or a registered or mapped `azureml:` name. `registry`: the
    registry of the pipeline component this one is a node of."""
    from mlops.runtime.registry_specs import component_file, pinned_environment

    if isinstance(ref, dict):
        return Component(ref, base, registry)
    ref = str(ref)
    held = component_file(ref, assets, where, registry) if is_remote(ref) else None
    if held is not None:
        path, registry = held
    elif is_remote(ref):
        registry = None
        path = assets.local_path(ref, where, base, must_exist=False, bare=True,
                                 kind="component")
        if path.is_dir() and (path / "spec.yml").is_file():  # registered in the workspace
            path = path / "spec.yml"
        if not path.is_file():
            raise LocalRunError(f"{where}: {ref} is a registered component; map it to a local "
                                f"component file in {assets.named} to run it here")
    else:
        path = (base / ref.removeprefix("file:")).resolve()
    try:
        spec = load_spec(path, role="component")
    except SpecError as err:
        raise LocalRunError(f"{where}: component {ref}: {err}") from None
    data = spec.data
    if registry is not None and "environment" in data:
        data = {**data, "environment": pinned_environment(data["environment"], assets, registry)}
    return Component(data, path.parent, registry)


def include_paths(items, base: Path, where: str) -> list[Path]:
    """`additional_includes`: local files and folders, relative to the spec, that Azure merges
    into the code it uploads. An Azure DevOps artifact cannot be fetched here."""
    found = []
    for item in items or []:
        if not isinstance(item, str):
            raise LocalRunError(f"{where}.additional_includes: {item!r} is an Azure DevOps "
                                "artifact; this machine cannot fetch it: list a local copy "
                                "instead")
        found.append((base / item).resolve())
    return found


@dataclass(frozen=True, kw_only=True)
class TaskSource:
    """What every spec-to-Task builder (command, Spark, parallel node) reads: the definition (a
    job, a component with a node's overrides, an inline node), where its relative paths start,
    where the task runs, and how it is named, tracked and bound."""

    definition: SpecData
    base: Path  # where the definition's relative paths start
    folder: Path  # the task's folder
    assets: AssetMap
    where: str  # "jobs/train.yml: command", for messages
    name: str
    experiment: str
    parent: str | None = None  # the MLflow run above it (a pipeline's, a sweep's)
    inputs: dict[str, Value] | None = None  # bound by a pipeline (None: the definition's own)
    outputs: dict[str, OutputSpec] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    address: tuple[str, ...] = ()  # the task's place in its run, for DEBUG=

    def bound_inputs(self) -> dict[str, Value]:
        given = self.definition.get("inputs")
        return job_inputs(given, self.base, self.assets) if self.inputs is None else self.inputs

    def stand_ins(self) -> tuple[str, dict[str, str]]:
        """What the task's SDK v1 calls are told of the asset map (every task of a spec)."""
        return stand_ins(self.assets)

    def bound_outputs(self) -> dict[str, OutputSpec]:
        if self.outputs is not None:
            return self.outputs
        return job_outputs(self.definition.get("outputs"), self.assets)

    def code(self, key: str = "code") -> Path | None:
        return code_path(self.definition.get(key), self.base, f"{self.where}.{key}")

    def includes(self) -> list[Path]:
        return include_paths(self.definition.get("additional_includes"), self.base, self.where)


def stand_ins(assets: AssetMap | None) -> tuple[str, dict[str, str]]:
    """The asset map as a job's SDK v1 calls are told of it: its file and `azureml:` entries."""
    return (assets.named, assets.stand_ins()) if assets is not None else ("", {})


def command_task(source: TaskSource) -> Task:
    """A command job (or component, or inline node, or trial) as one task."""
    data, where = source.definition, source.where
    if not data.get("command"):
        raise LocalRunError(f"{where}: no command to run")
    return Task(
        name=source.name, command=str(data["command"]), where=where, folder=source.folder,
        code=source.code(), includes=source.includes(), inputs=source.bound_inputs(),
        outputs=source.bound_outputs(),
        environment=EnvironmentRef(value=data.get("environment"), base=source.base),
        env_vars=variables(data.get("environment_variables")),
        placement=Placement.from_spec(data, where), timeout=time_limit(data, where),
        experiment=source.experiment, tags=dict(source.tags), parent_run=source.parent,
        address=source.address, assets=source.stand_ins())
