"""Batch endpoints and deployments as `az ml batch-endpoint` / `batch-deployment` know them.

Nothing runs until an endpoint is invoked (batch_jobs.py): an endpoint is its spec, recorded in
`<runs>/batch-endpoints/<name>/endpoint.yml`; a deployment is its spec file, the --set it was
created with and (local only) a model folder, recorded in `deployments/<name>.yml` beside it,
as online endpoints keep theirs in `<runs>/endpoints/<name>/`. Commands on one endpoint take
its lock in turn. The spec is checked when the deployment is created, as Azure checks it; its
code is read when a job runs (Azure uploads it at create: change the code, create again).

The endpoint's default deployment (`defaults.deployment_name`) is what an invoke without
--deployment-name runs: the one the endpoint spec names, else the first deployment created
into the endpoint, else the one created or updated with --set-default. What each verb prints is
azure-ai-ml's entity of the spec (the `_to_dict()` az ml prints) with what the service fills in.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from mlops.api.views import GROUP, resource_id
from mlops.checks.overrides import apply_sets, parse_sets
from mlops.endpoints.deployment import load
from mlops.endpoints.local_endpoint import checked_name, endpoint_lock
from mlops.endpoints.pipeline_deployment import load_pipeline_deployment
from mlops.errors import LocalRunError, NotFound
from mlops.project import project
from mlops.specs import SpecData, load_spec

View = dict[str, object]
ENDPOINT = "endpoint.yml"
DEPLOYMENTS = "deployments"
PIPELINE = "pipelineComponentBatchDeployment"  # its kind: it runs as a pipeline job
# Azure's rule for a batch deployment's name (its REST API's pattern)
DEPLOYMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$")


def batch_root() -> Path:
    return project().runs_dir / "batch-endpoints"


def endpoint_folder(name: str) -> Path:
    return batch_root() / checked_name(name, "batch endpoint")


def _write(path: Path, data: SpecData) -> None:
    """`data` as YAML, replaced atomically (a reader sees the old record or the new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def _read(path: Path, missing: str) -> SpecData:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFound(missing) from None
    except (OSError, yaml.YAMLError) as err:
        raise LocalRunError(f"{path}: damaged record ({err}); delete it and create the "
                            "endpoint again") from None
    if not isinstance(data, dict):
        raise LocalRunError(f"{path}: damaged record; delete it and create it again")
    return data


def endpoint_spec(name: str) -> SpecData:
    """The endpoint as created (its spec, with its defaults), or az's not-found."""
    return _read(endpoint_folder(name) / ENDPOINT,
                 f"batch endpoint {name!r} was not found here: azml batch-endpoint create -f "
                 "<endpoint spec> (or --name) creates it")


def _sdk():
    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    from azure.ai.ml import entities

    return entities


def create_endpoint(spec: Path | None, *, name: str | None = None,
                    sets: list[str] | None = None) -> View:
    """`az ml batch-endpoint create|update -f [--name] [--set]`, or `create --name` alone
    (azure-ai-ml's defaults: aad_token auth): recorded (an existing one is overwritten with the
    new settings; its default deployment kept unless the spec names one)."""
    if spec is None and not name:
        raise LocalRunError("batch-endpoint create: give --file <endpoint spec> or --name")
    where = spec if spec is not None else Path(str(name))
    data = dict(load_spec(spec).data) if spec is not None else {}
    data = apply_sets(data, parse_sets(sets or [], where), where)
    endpoint = checked_name(str(name or data.get("name") or ""), "batch endpoint")
    data["name"] = endpoint
    data.pop("$schema", None)
    _checked(data, spec or f"batch endpoint {endpoint}")
    folder = endpoint_folder(endpoint)
    with endpoint_lock(folder, "batch-endpoint create"):
        if (folder / ENDPOINT).is_file() and not _default(data):
            kept = _default(endpoint_spec(endpoint))
            if kept:
                data["defaults"] = {"deployment_name": kept}
        _write(folder / ENDPOINT, data)
    return endpoint_view(endpoint)


def _checked(data: SpecData, where: Path | str) -> None:
    """azure-ai-ml's loader refuses what az ml batch-endpoint create refuses."""
    try:
        _sdk().BatchEndpoint._load(data=data)  # noqa: SLF001 - load_batch_endpoint on a dict
    except Exception as err:  # noqa: BLE001 - azure-ai-ml's refusal, in its words
        raise LocalRunError(f"{where}: {err}") from None


def _default(data: SpecData) -> str:
    defaults = data.get("defaults")
    return str(defaults.get("deployment_name") or "") if isinstance(defaults, dict) else ""


def update_endpoint(name: str, sets: list[str]) -> View:
    """`az ml batch-endpoint update -n --set defaults.deployment_name=<d>` (and any key)."""
    folder = endpoint_folder(name)
    with endpoint_lock(folder, "batch-endpoint update"):
        data = apply_sets(endpoint_spec(name), parse_sets(sets, Path(name)), Path(name))
        data["name"] = name
        _checked(data, f"batch endpoint {name}")
        _write(folder / ENDPOINT, data)
    return endpoint_view(name)


def set_default(name: str, deployment: str) -> None:
    folder = endpoint_folder(name)
    data = endpoint_spec(name)
    data["defaults"] = {"deployment_name": deployment}
    _write(folder / ENDPOINT, data)


def endpoint_view(name: str) -> View:
    """The endpoint as `az ml batch-endpoint show` prints it. No REST front is served here:
    its jobs are created with azml batch-endpoint invoke (scoring_uri: none)."""
    data = endpoint_spec(name)
    view = _sdk().BatchEndpoint._load(data=data)._to_dict()  # noqa: SLF001 - what az prints
    view.update(id=resource_id("batchEndpoints", name), provisioning_state="Succeeded",
                location="local", scoring_uri=None, resourceGroup=GROUP)
    view.setdefault("defaults", {"deployment_name": _default(data) or None})
    return view


def endpoints() -> list[View]:
    root = batch_root()
    found = sorted(root.glob(f"*/{ENDPOINT}")) if root.is_dir() else []
    return [endpoint_view(path.parent.name) for path in found]


def delete_endpoint(name: str) -> None:
    """`az ml batch-endpoint delete`: the endpoint and its deployments forgotten (their jobs
    and run folders kept, as Azure keeps the jobs)."""
    folder = endpoint_folder(name)
    endpoint_spec(name)
    with endpoint_lock(folder, "batch-endpoint delete"):
        for path in sorted((folder / DEPLOYMENTS).glob("*.yml")):
            path.unlink(missing_ok=True)
        (folder / ENDPOINT).unlink(missing_ok=True)


@dataclass(frozen=True, kw_only=True)
class DeploymentRequest:
    """`az ml batch-deployment create|update -f <spec> [--endpoint-name] [--name] [--set ...]
    [--set-default]`, and a model folder to run instead of the spec's (local only)."""

    spec: Path | None  # None (update): the deployment --name as recorded, --set over it
    endpoint: str | None = None
    name: str | None = None
    sets: list[str] = field(default_factory=list)
    set_default: bool = False
    model: str | None = None
    asset_file: Path | None = None


def create_deployment(request: DeploymentRequest, *, update: bool = False) -> View:
    """Checked as Azure checks it (its model, code and environment found), then recorded; the
    endpoint's first deployment, or one with --set-default, becomes its default."""
    if request.spec is None:
        request = _as_recorded(request)
    data = load_spec(request.spec).data
    endpoint = str(request.endpoint or data.get("endpoint_name") or "")
    if not endpoint:
        raise LocalRunError(f"{request.spec}: no endpoint_name: give --endpoint-name")
    name = str(request.name or data.get("name") or "")
    if not DEPLOYMENT_NAME.match(name):
        raise LocalRunError(f"{request.spec}: deployment name {name!r}: Azure's start with a "
                            "letter or digit and hold letters, digits, '-' and '_' (give --name)")
    endpoint_spec(endpoint)  # the endpoint exists, as on Azure
    sets = [*request.sets, f"name={name}", f"endpoint_name={endpoint}"]
    path = endpoint_folder(endpoint) / DEPLOYMENTS / f"{name}.yml"
    if update and not path.is_file():
        raise NotFound(f"batch deployment {name!r} was not found in batch endpoint {endpoint}")
    _checked_deployment(request.spec, request, sets)
    with endpoint_lock(endpoint_folder(endpoint), f"batch-deployment create {name}"):
        first = not any(path.parent.glob("*.yml"))
        _write(path, {"source": str(request.spec.resolve()), "sets": sets,
                      "model": request.model})
        if request.set_default or (first and not _default(endpoint_spec(endpoint))):
            set_default(endpoint, name)
    return deployment_view(endpoint, name)


def _checked_deployment(spec: Path, request: DeploymentRequest, sets: list[str]) -> None:
    """A model deployment's model, code and environment found, or a pipeline component
    deployment's component (or job) found, as Azure resolves them at create."""
    if load_spec(spec, "batch-deployment").kind != PIPELINE:
        load(spec, "batch-deployment", request.model, request.asset_file, sets=sets)
        return
    if request.model:
        raise LocalRunError(f"--model: {spec} is a pipeline component deployment, which has "
                            "no model (its component's steps name theirs)")
    load_pipeline_deployment(spec, sets, request.asset_file)


def _as_recorded(request: DeploymentRequest) -> DeploymentRequest:
    """update -n D -e E --set k=v (az's generic update): the spec and sets it was made of."""
    if not request.name or not request.endpoint:
        raise LocalRunError("batch-deployment update without --file: give --name and "
                            "--endpoint-name (the deployment to update)")
    record = deployment_record(request.endpoint, request.name)
    return replace(request, spec=Path(str(record.get("source"))),
                   sets=[*list(record.get("sets") or []), *request.sets],
                   model=request.model or (str(record["model"]) if record.get("model")
                                           else None))


def deployment_record(endpoint: str, name: str) -> SpecData:
    return _read(endpoint_folder(endpoint) / DEPLOYMENTS / f"{name}.yml",
                 f"batch deployment {name!r} was not found in batch endpoint {endpoint} (azml "
                 f"batch-deployment list -e {endpoint} shows its deployments)")


def deployment_view(endpoint: str, name: str) -> View:
    """The deployment as `az ml batch-deployment show` prints it."""
    endpoint_spec(endpoint)
    record = deployment_record(endpoint, name)
    source = Path(str(record.get("source")))
    try:
        spec = load_spec(source, "batch-deployment")
        data = apply_sets(spec.data, parse_sets(list(record.get("sets") or []), source), source)
        entities = _sdk()
        kind = {"modelBatchDeployment": entities.ModelBatchDeployment,
                PIPELINE: entities.PipelineComponentBatchDeployment}.get(
                    spec.kind, entities.BatchDeployment)
        view = kind._load(data=data, yaml_path=source)._to_dict()  # noqa: SLF001
    except Exception:  # noqa: BLE001 - the spec moved or broke since: what the record holds
        view = {"name": name, "endpoint_name": endpoint, "source": str(source)}
    view.update(id=resource_id(f"batchEndpoints/{endpoint}/deployments", name),
                provisioning_state="Succeeded", resourceGroup=GROUP)
    return view


def deployments(endpoint: str) -> list[View]:
    endpoint_spec(endpoint)
    folder = endpoint_folder(endpoint) / DEPLOYMENTS
    return [deployment_view(endpoint, p.stem) for p in sorted(folder.glob("*.yml"))]


def delete_deployment(endpoint: str, name: str) -> None:
    """`az ml batch-deployment delete`: forgotten (its jobs kept); the endpoint then has no
    default deployment if it was that one."""
    with endpoint_lock(endpoint_folder(endpoint), f"batch-deployment delete {name}"):
        deployment_record(endpoint, name)
        (endpoint_folder(endpoint) / DEPLOYMENTS / f"{name}.yml").unlink(missing_ok=True)
        data = endpoint_spec(endpoint)
        if _default(data) == name:
            data.pop("defaults", None)
            _write(endpoint_folder(endpoint) / ENDPOINT, data)
