"""The workspace names `az ml job create` resolves when a job is submitted, resolved here the
same way before anything runs: a name nothing here knows is refused as Azure refuses the job.
So are the code folders it uploads then (the job's, a sweep trial's, each inline or file
component's): what az ml's upload cannot take fails the create (mlops/workspace/uploads.py).

azure-ai-ml resolves each short name (`azureml:<name>:<version>`, `azureml:<name>@<label>`) a
job makes as it submits it (operations/_job_operations.py create_or_update, through
_operation_orchestrator.py get_asset_arm_id): a data or model input's `path:` (the job's inputs,
a sweep's, a pipeline's and its nodes' mapping inputs, an AutoML job's training, validation and
test data), an `environment:` (the job's, a sweep trial's, that of each component file or inline
component the pipeline registers, a node's own), and a pipeline node's `component:`. A label is
looked up at once; a version becomes the workspace's asset id, which Azure must find to accept
the job (mlops/workspace/references.py says how each is refused). It passes on unresolved, and
so does this check (the run resolves them, as Azure does while the job runs): `azureml://` URIs
(datastores, a job's outputs, registries, long asset URIs), URLs and local paths, `${{...}}`
bindings, a node input written as a bare string (a literal to azure-ai-ml), inline environments,
curated `AzureML-` names (the service expands them), and what a registered or registry component
holds (resolved when it was registered).

Each name is resolved by the runner's own code (AssetMap.local_path through input_value,
load_component, envspec.require_environment), which reads the local workspace and the maps
and starts nothing, builds nothing and records nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from mlops.environments.envspec import EnvMap, require_environment
from mlops.errors import LocalRunError
from mlops.runtime import (
    AssetMap,
    checked_code,
    code_path,
    input_value,
    is_remote,
    load_component,
)
from mlops.specs import Spec, SpecData
from mlops.workspace.records import AssetKind
from mlops.workspace.references import submitted_name, versionless_refusal

AUTOML_DATA = ("training_data", "validation_data", "test_data")


@dataclass(frozen=True)
class Refs:
    """What each name is resolved against, and the spec file its keys are named in."""

    assets: AssetMap
    env_file: Path | None
    spec: Path

    @functools.cached_property
    def env_map(self) -> EnvMap:
        """The run's environment map, read only for a job that names an environment."""
        return EnvMap(self.env_file)

    def key(self, *dotted: str) -> str:
        """`<spec>: jobs.train.inputs.data`, as the run names a key."""
        return f"{self.spec}: {'.'.join(part for part in dotted if part)}"


def check_references(spec: Spec, assets: AssetMap, env_file: Path | None = None) -> None:
    """Every short name the job makes resolved as the run resolves it (module docstring); a
    LocalRunError for the first one nothing here knows."""
    refs = Refs(assets=assets, env_file=env_file, spec=spec.path)
    data, base = spec.data, spec.path.parent
    check_definition(data, base, refs, "")
    if spec.kind == "sweepJob":
        check_component(data.get("trial"), base, refs, "trial")
    if spec.kind == "pipelineJob":
        check_nodes(data.get("jobs"), base, refs, "")
        check_component(data.get("component"), base, refs, "component")


def check_definition(data: SpecData, base: Path, refs: Refs, where: str) -> None:
    """A job's, a node's or an inline component's own names: its code folder (as az ml's upload
    lists it: what the upload cannot take fails the create), its mapping inputs, an AutoML
    job's data, its environment (a parallel task's too)."""
    code = data.get("code")  # code first, then the environment, then inputs: azure-ai-ml's
    if isinstance(code, str) and code and not is_remote(code):  # order (it uploads code)
        checked_code(code_path(code, base, refs.key(where, "code")))
    task = data.get("task")
    for key, value in (("environment", data.get("environment")),
                       ("task.environment", task.get("environment") if isinstance(task, dict)
                        else None)):
        if isinstance(value, str) and submitted_name(value) is not None:
            versioned(value, AssetKind.ENVIRONMENT, refs.key(where, key))
            require_environment(value, base, refs.env_map, refs.key(where, key))
    inputs = data.get("inputs")
    for name, value in (inputs.items() if isinstance(inputs, dict) else []):
        check_input(value, base, refs, refs.key(where, f"inputs.{name}"))
    for key in AUTOML_DATA if data.get("type") == "automl" else ():
        check_input(data.get(key), base, refs, refs.key(where, key))


def check_input(value, base: Path, refs: Refs, key: str) -> None:
    """A mapping input whose `path:` is a short name, resolved as the run binds it."""
    if isinstance(value, dict) and submitted_name(value.get("path")) is not None:
        model = str(value.get("type", "")).lower() in ("mlflow_model", "custom_model")
        versioned(value["path"], AssetKind.MODEL if model else AssetKind.DATA, key)
        input_value(value, key, base, refs.assets)


def versioned(reference: str, kind: AssetKind, key: str) -> None:
    """A short name with a version or a label, as az ml job create needs to resolve it; a
    LocalRunError in azure-ai-ml's words for one with neither, even where a name alone finds it
    here (the local workspace's latest, a mapped name)."""
    refusal = versionless_refusal(reference, kind)
    if refusal:
        raise LocalRunError(f"{key}: {refusal}")


def check_nodes(jobs, base: Path, refs: Refs, where: str) -> None:
    """Each node's mapping inputs, own environment and component (and what a component file or
    inline component the pipeline registers names, nested pipelines' nodes too)."""
    for name, raw in (jobs.items() if isinstance(jobs, dict) else []):
        if not isinstance(raw, dict):
            continue
        node = ".".join(part for part in (where, f"jobs.{name}") if part)
        kind = str(raw.get("type") or "command").lower()
        ref = raw.get("trial") if kind == "sweep" else raw.get("component")
        if ref is None:  # an inline command, an AutoML node, control flow: its own names
            check_definition(raw, base, refs, node)
            continue
        check_definition({"inputs": raw.get("inputs"), "environment": raw.get("environment")},
                         base, refs, node)
        check_component(ref, base, refs, f"{node}.{'trial' if kind == 'sweep' else 'component'}")


def check_component(ref, base: Path, refs: Refs, where: str) -> None:
    """A node's component or a sweep's trial: a short name resolved (what it holds was resolved
    when it was registered), a file or inline one loaded and its own names checked (azure-ai-ml
    registers it with the job); a registry's left to the run, as azure-ai-ml passes it on."""
    if ref is None:
        return
    if isinstance(ref, str) and ref.startswith("azureml:"):
        if submitted_name(ref) is not None:
            versioned(ref, AssetKind.COMPONENT, refs.key(where))
            load_component(ref, base, refs.assets, refs.key(where))
        return
    component = load_component(ref, base, refs.assets, refs.key(where))
    check_definition(_own(component.data), component.base, refs, where)
    if component.data.get("type") == "pipeline":
        check_nodes(component.data.get("jobs"), component.base, refs, where)


def _own(definition: SpecData) -> SpecData:
    """A component's code and environment names (its inputs declare types and defaults, not
    data the job is given)."""
    return {key: definition[key] for key in ("code", "environment", "task") if key in definition}
