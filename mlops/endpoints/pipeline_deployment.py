"""A pipeline component batch deployment (`type: pipeline`) and the pipeline job an invoke of
it runs, as Azure makes it.

azure-ai-ml loads the spec as a PipelineComponentBatchDeployment (its `component:` a pipeline
component file or an `azureml:` name, never inline: "Not supporting non file for component";
or `job_definition:`, an existing pipeline job), and `az ml batch-deployment create` resolves
the component (_BatchDeploymentOperations._validate_component: a file is registered, a name
must be in the workspace, a job must exist). `az ml batch-endpoint invoke` sends the inputs
(a literal's value is its `default`; a data input's local path is uploaded from the current
folder: BatchEndpointOperations.invoke, BatchJobSchema) and the service runs the component as
a pipeline job with them, in the endpoint's experiment, `settings:` as the job's settings.
Here that job is a pipeline job spec with `component:` (or the job_definition's own jobs),
which the one pipeline runner runs (mlops/orchestrators/pipeline.py, component_job.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from mlops.checks.overrides import apply_sets, parse_sets
from mlops.checks.validation import check
from mlops.errors import LocalRunError
from mlops.runtime import AssetMap, is_remote, load_component
from mlops.specs import Spec, SpecData, load_spec
from mlops.workspace.references import submission

PIPELINE_JOB_SCHEMA = "https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json"
LITERALS = ("string", "integer", "number", "boolean")
# the data types azure-ai-ml's BatchJobSchema sends (its _JOB_DATA_TYPE_MAP): another is a
# KeyError in az ml before any request
DATA = ("uri_file", "uri_folder", "mltable", "mlflow_model", "custom_model", "triton_model")
# keys of a pipeline job spec whose relative path a job_definition's run is rebased on
PATH_KEYS = ("code", "component", "trial", "conda_file")


@dataclass(frozen=True, kw_only=True)
class PipelineDeployment:
    spec: Spec
    component: str | None = None  # an absolute component file, or an azureml: name
    job: str | None = None  # job_definition: the pipeline job its component is made from
    settings: SpecData = field(default_factory=dict)
    tags: SpecData = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec.data.get("name") or self.spec.path.stem)


def load_pipeline_deployment(path: str | Path, sets: list[str] | None = None,
                             asset_file: Path | None = None) -> PipelineDeployment:
    """The deployment as az ml batch-deployment create takes it, or what Azure refuses."""
    spec = load_spec(path, "batch-deployment")
    if sets:
        spec.data = apply_sets(spec.data, parse_sets(sets, spec.path), spec.path)
    errors = [str(f) for f in check(spec, for_run=True) if f.is_error]
    if errors:
        raise LocalRunError("\n".join(errors) + "\nAzure would refuse this deployment")
    data = spec.data
    settings = data.get("settings") if isinstance(data.get("settings"), dict) else {}
    made = {"spec": spec, "settings": dict(settings), "tags": dict(data.get("tags") or {})}
    ref = data.get("component")
    if ref is not None:
        return PipelineDeployment(component=_component(str(ref), spec, asset_file), **made)
    definition = data.get("job_definition")
    if definition is None:
        raise LocalRunError(f"{spec.path}: a pipeline deployment names its component: (a "
                            "pipeline component file or azureml:<name>:<version>) or "
                            "job_definition: (azureml:<pipeline job name>)")
    if isinstance(definition, dict):  # azure-ai-ml loads it as a pipeline node
        raise LocalRunError(f"{spec.path}: job_definition: azure-ai-ml loads an inline "
                            "job_definition as a pipeline node, which az ml batch-deployment "
                            "create makes no component of (_validate_component takes a job's "
                            "name or a PipelineJob), so the deployment would have none: name "
                            "the job that ran, job_definition: azureml:<job name>")
    name = str(definition).removeprefix("azureml:")
    source_job(name, f"{spec.path}: job_definition")
    return PipelineDeployment(job=str(name), **made)


def _component(ref: str, spec: Spec, asset_file: Path | None) -> str:
    """A component file as an absolute path, or a name found as jobs find it (the local
    workspace, then the asset map): Azure resolves it at create."""
    where = f"{spec.path}: component"
    load_component(ref, spec.path.parent, AssetMap(asset_file, by=submission("batch-deployment")),
                   where)
    if is_remote(ref):
        return ref
    return str((spec.path.parent / ref.removeprefix("file:")).resolve())


def source_job(name: str, where: str) -> tuple[SpecData, Path]:
    """A pipeline job of the local workspace: the spec it ran (spec.yml) and the folder its
    relative paths start from."""
    import yaml

    from mlops.runtime import read_record
    from mlops.workspace.jobs import job_folder
    from mlops.workspace.store import Workspace, workspace_root

    folder = job_folder(Workspace(workspace_root()), name)
    record = read_record(folder) if folder is not None and folder.is_dir() else None
    if record is None:
        raise LocalRunError(f"{where}: job {name!r} was not found in the local workspace: "
                            "Azure makes the deployment's component from an existing pipeline "
                            "job (azml job create -f <pipeline job> names one)")
    if record.kind != "pipelineJob":
        raise LocalRunError(f"{where}: job {name!r} is a {record.kind}, not a pipeline job: "
                            "Azure makes a pipeline component from a pipeline job only")
    data = yaml.safe_load((folder / "spec.yml").read_text(encoding="utf-8"))
    return data, Path(record.spec).parent


def invoke_inputs(named: SpecData, cwd: Path) -> SpecData:
    """The invoke's inputs as azure-ai-ml sends them: a literal's value is its `default` (a
    bare value stands for itself); a data input keeps its type (default uri_folder), path (a
    local one from `cwd`, where az ml uploads it from) and, but for uri_*, its mode."""
    inputs: SpecData = {}
    for key, value in named.items():
        if not isinstance(value, dict):
            inputs[key] = value
            continue
        kind = str(value.get("type") or "uri_folder")
        if kind in LITERALS:
            if value.get("default") is not None:
                inputs[key] = value["default"]
            continue
        if kind not in DATA:
            raise LocalRunError(f"input {key!r}: type {kind!r} is none az ml sends to a batch "
                                f"endpoint ({', '.join(DATA + LITERALS)})")
        path = value.get("path")
        if not path:
            raise LocalRunError(f"input {key!r}: give its path (--set inputs.{key}.path=...)")
        path = str(path) if is_remote(str(path)) else str((cwd / str(path)).resolve())
        mode = value.get("mode") if kind not in ("uri_file", "uri_folder") else None
        inputs[key] = {"type": kind, "path": path, **({"mode": mode} if mode else {})}
    return inputs


def invoke_outputs(named: SpecData) -> SpecData:
    """The invoke's outputs (-f's `outputs:`, --set outputs.*), typed as az ml sends them."""
    outputs: SpecData = {}
    for key, value in named.items():
        value = value if isinstance(value, dict) else {"path": value}
        kind = str(value.get("type") or "uri_folder")
        if kind not in DATA:
            raise LocalRunError(f"output {key!r}: type {kind!r} is none az ml sends to a batch "
                                f"endpoint ({', '.join(DATA)})")
        outputs[key] = {k: v for k, v in {**value, "type": kind}.items() if v is not None}
    return outputs


def job_settings(settings: SpecData) -> SpecData:
    """The deployment's settings as a pipeline job spec holds them: its default compute and
    datastore are names (the service takes the deployment's settings as text), which a job's
    settings give as `azureml:<name>` (azure-ai-ml's PipelineJobSettingsSchema: ArmStr, or
    `serverless` for the compute)."""
    made = dict(settings)
    for key in ("default_compute", "default_datastore"):
        value = made.get(key)
        if isinstance(value, str) and value and value != "serverless" and \
                not value.startswith("azureml:"):
            made[key] = f"azureml:{value}"
    return made


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """One invoke: the job's name, the endpoint invoked, and its inputs and outputs."""

    name: str
    endpoint: str
    inputs: SpecData
    outputs: SpecData


def job_spec(deployment: PipelineDeployment, request: JobRequest) -> SpecData:
    """The pipeline job the invoke runs: the deployment's component (or its job's jobs) with
    the invoke's inputs and outputs, the deployment's settings, in the endpoint's experiment."""
    properties = {"azureml.batchrun": "true", "azureml.endpointname": request.endpoint,
                  "azureml.deploymentname": deployment.name}
    if deployment.component is not None:
        body: SpecData = {"component": deployment.component, "inputs": request.inputs,
                          "outputs": request.outputs,
                          "settings": job_settings(deployment.settings)}
    else:
        body = from_job(deployment, request)
    return {"$schema": PIPELINE_JOB_SCHEMA, "type": "pipeline", "name": request.name,
            "display_name": request.name, "experiment_name": request.endpoint, **body,
            "tags": {**dict(body.get("tags") or {}), **deployment.tags},
            "properties": {**dict(body.get("properties") or {}), **properties}}


def from_job(deployment: PipelineDeployment, request: JobRequest) -> SpecData:
    """A job_definition's job as it ran, its relative paths made absolute, the invoke's inputs
    and outputs over its own and the deployment's settings over its own."""
    data, base = source_job(str(deployment.job), f"{deployment.spec.path}: job_definition")
    data = rebased(copy.deepcopy(data), base)
    for key in ("name", "display_name", "experiment_name", "$schema"):
        data.pop(key, None)
    data["inputs"] = {**dict(data.get("inputs") or {}), **request.inputs}
    data["outputs"] = {**dict(data.get("outputs") or {}), **request.outputs}
    data["settings"] = {**dict(data.get("settings") or {}),
                        **job_settings(deployment.settings)}
    return data


def rebased(value, base: Path, key: str = "", under: tuple[str, ...] = ()):
    """`value` with each local path of a pipeline job spec (code, component and trial files,
    conda files, a build context, an input's path) made absolute from `base`."""
    if isinstance(value, dict):
        return {k: rebased(v, base, str(k), (*under, key)) for k, v in value.items()}
    if not isinstance(value, str) or not value or is_remote(value) or "${{" in value:
        return value
    is_path = key in PATH_KEYS or (key == "path" and bool({"inputs", "build"} & set(under)))
    return str((base / value.removeprefix("file:")).resolve()) if is_path else value
