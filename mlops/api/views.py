"""A local job as `az ml job show` prints it: azure-ai-ml's own entity of the spec as it ran
(the same `_to_dict()` the az ml extension prints), with the name, status, creation context,
id and services a workspace would give it. What only Azure has (its Studio page, its tracking
service) points at the local ones: the run folder and the local MLflow store."""

from __future__ import annotations

import getpass
import io
import logging
from datetime import UTC, datetime
from pathlib import Path

from mlops.api import uploads
from mlops.api.job_edits import JobEdits
from mlops.api.records import JobRecord
from mlops.project import RESOURCE_GROUP, SUBSCRIPTION, WORKSPACE_NAME, tracking_uri
from mlops.runtime import BATCH_JOB
from mlops.specs import read_yaml

GROUP, WORKSPACE = RESOURCE_GROUP, WORKSPACE_NAME
ARM = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/"
       "Microsoft.MachineLearningServices/workspaces/{workspace}")
JobView = dict[str, object]  # a job as az prints it (JSON)


def resource_id(kind: str, name: str) -> str:
    """The id a workspace would give a resource of `kind` ("jobs", "onlineEndpoints")."""
    return "azureml:" + ARM.format(workspace=WORKSPACE) + f"/{kind}/{name}"


def _created(record: JobRecord) -> datetime:
    stamp = record.run.created_at if record.run else None
    try:
        return datetime.fromisoformat(stamp) if stamp else \
            datetime.fromtimestamp(record.folder.stat().st_mtime, UTC)
    except (ValueError, OSError):
        return datetime.now(UTC)


def _entity(record: JobRecord):
    """azure-ai-ml's job of the spec as it ran (spec.yml), paths relative to the spec's own
    folder; None when it cannot be loaded any more (the spec's files moved), or when the run
    folder holds none (its runner was killed before it wrote one)."""
    from azure.ai.ml import load_job
    from azure.ai.ml.entities._builders.base_node import BaseNode

    try:
        text = (record.folder / "spec.yml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    origin = _origin(record)
    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)  # its experimental-class notes
    try:
        job = load_job(io.StringIO(text), relative_origin=str(origin / "spec.yml"))
    except Exception:  # noqa: BLE001 - whatever the loader raises, the raw spec stands in
        return None
    return job._to_job() if isinstance(job, BaseNode) else job


def _origin(record: JobRecord) -> Path:
    """The folder the spec's relative paths start from."""
    return Path(record.run.spec).parent if record.run and record.run.spec else record.folder


def job_view(record: JobRecord) -> JobView:
    """The job as `az ml job show` prints it."""
    from azure.ai.ml.entities._job.job_service import JobService
    from azure.ai.ml.entities._system_data import SystemData

    if record.run and record.run.kind == BATCH_JOB:  # spec.yml is the job as az prints it
        return _raw_view(record, str(record.status))
    job, status = _entity(record), str(record.status)
    if job is None:
        return _raw_view(record, status)
    job.name = record.name
    job.display_name = job.display_name or record.name  # Azure's default: the job's name
    job._status = status  # noqa: SLF001 - what the service sets on the entity it returns
    job._id = resource_id("jobs", record.name)  # noqa: SLF001
    job._creation_context = SystemData(  # noqa: SLF001
        created_at=_created(record), created_by=getpass.getuser(), created_by_type="User")
    job.services = {"Tracking": JobService(endpoint=tracking_uri(), type="Tracking"),
                    "Studio": JobService(endpoint=record.web_view, type="Studio")}
    uploads.as_uploaded(job, _origin(record), record.folder)
    view = job._to_dict()  # noqa: SLF001 - what `az ml job show` prints
    uploads.with_default_output(view, record.name)
    return _local_properties(view, record)


def _raw_view(record: JobRecord, status: str) -> JobView:
    """The spec itself with the workspace's keys, where azure-ai-ml cannot load it again."""
    try:
        data = read_yaml((record.folder / "spec.yml").read_text(encoding="utf-8")) or {}
    except Exception:  # noqa: BLE001 - a damaged spec.yml: the keys the workspace gives
        data = {}
    view = {k: v for k, v in (data if isinstance(data, dict) else {}).items() if k != "$schema"}
    view.setdefault("display_name", record.name)
    view.update(name=record.name, status=status, id=resource_id("jobs", record.name),
                creation_context={"created_at": _created(record).isoformat(),
                                  "created_by": getpass.getuser(), "created_by_type": "User"},
                services={"Tracking": {"endpoint": tracking_uri(), "type": "Tracking"},
                          "Studio": {"endpoint": record.web_view, "type": "Studio"}})
    return _local_properties(view, record)


def _local_properties(view: JobView, record: JobRecord) -> JobView:
    """What the local run adds under `properties` (Azure keeps its own there), and the
    resource group az adds to every resource it prints; what `job update` changed first."""
    JobEdits.read(record.folder).over(view)
    properties = dict(view.get("properties") or {})
    properties["azml.run_folder"] = str(record.folder)
    if record.mlflow_run_id:
        properties["mlflow.run_id"] = record.mlflow_run_id
    if record.run and record.run.exit_code is not None:
        properties["azml.exit_code"] = str(record.run.exit_code)
    view["properties"] = properties
    view["resourceGroup"] = GROUP
    if view.get("type") == "command":  # what the service fills in when the spec says nothing
        view.setdefault("resources", {"instance_count": 1, "properties": {}, "shm_size": "2g"})
    return view


def workspace_view() -> dict[str, object]:
    """The local workspace as `az ml workspace show` prints one (azure-ai-ml's Workspace
    entity): its id and group are the ones every local resource id names, and
    `mlflow_tracking_uri` is the local store, so `MLFLOW_TRACKING_URI=$(azml workspace show
    --query mlflow_tracking_uri -o tsv)` points an MLflow client at it, as it does at Azure's."""
    from azure.ai.ml.entities import Workspace

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    entity = Workspace(name=WORKSPACE, location="local", display_name=WORKSPACE,
                       resource_group=GROUP)
    view = entity._to_dict()  # noqa: SLF001 - what az ml prints
    view.update({"id": ARM.format(workspace=WORKSPACE), "resource_group": GROUP,
                 "mlflow_tracking_uri": tracking_uri(), "provisioning_state": "Succeeded"})
    return view

