"""Models registered through MLflow (`mlflow.register_model`, `log_model(registered_model_name=
...)`, this project's register step) are versions of the workspace's one model registry, as on
Azure, where MLflow's registry is the workspace's.

The local MLflow store (MLFLOW_TRACKING_URI: a sqlite or file store, or a local server) keeps
MLflow's registrations; `take_in` copies each version the workspace lacks into it, under the
version number MLflow gave it (the next free integer when the workspace already holds that
number), before a model name is resolved or listed. A model created in the workspace is also
registered in MLflow, tagged with its workspace version, so MLflow's numbers move on as Azure's
one counter does and `models:/<name>/<n>` loads it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from mlops.workspace.records import AssetKind, AssetVersion, held
from mlops.workspace.store import Draft, Workspace

WORKSPACE_TAG = "mlops.workspace_version"
ORIGIN = "mlflow"


def _client():
    """MLflow's client for the local store, None where there is none to read."""
    from mlops.project import tracking_uri

    uri = tracking_uri()  # the store local runs use (never MLflow's own default in this folder)
    if uri.startswith(("azureml:", "databricks")):
        return None
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return None  # no store yet, so no registration: reading never creates one
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _mlflow_versions(client, name: str) -> list:
    from mlflow.exceptions import MlflowException

    quoted = name.replace("'", "\\'")
    try:
        found = client.search_model_versions(f"name='{quoted}'")
    except MlflowException:
        return []
    return sorted(found, key=lambda v: int(v.version))


def registered_names() -> list[str]:
    """The model names MLflow's registry in the local store holds."""
    client = _client()
    if client is None:
        return []
    from mlflow.exceptions import MlflowException

    try:
        return sorted(m.name for m in client.search_registered_models())
    except MlflowException:
        return []


def take_in(workspace: Workspace, name: str) -> list[AssetVersion]:
    """Copy into the workspace every MLflow version of `name` it does not hold yet."""
    client = _client()
    if client is None:
        return []
    pending = [v for v in _mlflow_versions(client, name) if WORKSPACE_TAG not in (v.tags or {})]
    if not pending:
        return []
    workspace.root.mkdir(parents=True, exist_ok=True)
    with held(workspace.root / ".mlflow.lock"):  # one taker at a time
        taken = {r.origin for r in workspace.versions(AssetKind.MODEL, name)}
        return [_copy_in(workspace, name, version, f"{ORIGIN}:{name}/{version.version}")
                for version in pending if f"{ORIGIN}:{name}/{version.version}" not in taken]


def _copy_in(workspace: Workspace, name: str, version, origin: str) -> AssetVersion:
    import mlflow.artifacts

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a log, not a tty
    with tempfile.TemporaryDirectory(prefix=".mlflow-", dir=workspace.root) as staging:
        fetched = Path(mlflow.artifacts.download_artifacts(
            f"models:/{name}/{version.version}", dst_path=str(Path(staging) / "download")))
        folder = Path(staging) / "model"
        shutil.move(fetched, folder)
        held = {v.version for v in workspace.versions(AssetKind.MODEL, name)}
        draft = Draft(AssetKind.MODEL, name, folder, type="mlflow_model",
                      version=None if version.version in held else str(version.version),
                      description=version.description or "", tags=dict(version.tags or {}),
                      properties={"mlflow.run_id": version.run_id or "",
                                  "mlflow.source": version.source or ""},
                      origin=origin)
        with contextlib.suppress(AttributeError):
            draft.stage = "" if version.current_stage in (None, "None") else version.current_stage
        return workspace.create(draft)


def register_in_mlflow(record: AssetVersion) -> str | None:
    """Register a model created in the workspace in MLflow too; MLflow's version number."""
    client = _client()
    if client is None:
        return None
    from mlflow.exceptions import MlflowException

    with contextlib.suppress(MlflowException):
        client.create_registered_model(record.name)
    created = client.create_model_version(record.name, str(record.path),
                                          tags={WORKSPACE_TAG: record.version},
                                          description=record.description or None)
    return str(created.version)
