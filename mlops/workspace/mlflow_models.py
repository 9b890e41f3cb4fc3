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
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mlops.errors import MachineError
from mlops.project import remember, remembered
from mlops.workspace.records import AssetKind, AssetVersion, held
from mlops.workspace.store import Draft, Workspace

WORKSPACE_TAG = "mlops.workspace_version"
ORIGIN = "mlflow"


def _client():
    """MLflow's client for the local store, None where there is none to read; MachineError,
    in one line naming the store, where it cannot be read."""
    from mlops.project import tracking_uri

    uri = tracking_uri()  # the store local runs use (never MLflow's own default in this folder)
    if uri.startswith(("azureml:", "databricks")):
        return None
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return None  # no store yet, so no registration: reading never creates one
    from mlflow.tracking import MlflowClient

    with _store():  # its registry too: never MLflow's default store of the current folder
        return MlflowClient(uri, registry_uri=uri)


@contextlib.contextmanager
def _store() -> Iterator[None]:
    """Errors of a damaged or unreadable MLflow store, as one MachineError that names it."""
    import sqlite3

    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    from mlops.project import tracking_uri

    try:
        yield
    except (SQLAlchemyError, sqlite3.Error, MlflowException, OSError) as err:
        reason = str(getattr(err, "orig", None) or err).splitlines()[0][:200]
        raise MachineError(f"the local MLflow store {tracking_uri().removeprefix('sqlite:///')} "
                           f"cannot be "
                           f"read ({reason}): move it aside (the runs and models it holds are "
                           "then gone from MLflow) or set MLFLOW_TRACKING_URI to another "
                           "store") from None


def _mlflow_versions(client, name: str) -> list:
    with _store():  # a name Azure takes holds no quote
        found = client.search_model_versions(f"name='{name}'")
    return sorted(found, key=lambda v: int(v.version))


def registered_names() -> list[str]:
    """The model names MLflow's registry in the local store holds."""
    client = _client()
    if client is None:
        return []
    with _store():
        return sorted(m.name for m in client.search_registered_models())


def store_stamp() -> list[object] | None:
    """The local sqlite store's state, read without MLflow or SQL: its header's file change
    counter (SQLite counts every committed write there: sqlite.org/fileformat.html), its size
    and time, and its write-ahead log's; None for a store that is not a local sqlite file."""
    from mlops.project import sqlite_file, tracking_uri

    path = sqlite_file(tracking_uri())
    try:
        with open(path, "rb") as handle:  # TypeError: no sqlite store
            header = handle.read(100)
        found = os.stat(path)
        wal = os.stat(f"{path}-wal") if os.path.exists(f"{path}-wal") else None
    except (OSError, TypeError):
        return None
    return [str(path), header[24:28].hex(), found.st_size, found.st_mtime_ns,
            wal and [wal.st_size, wal.st_mtime_ns]]


def take_in(workspace: Workspace, name: str) -> list[AssetVersion]:
    """Copy into the workspace every MLflow version of `name` it does not hold yet; a version
    whose files are gone, or a name Azure refuses, is named on stderr and left out. Once every
    version was looked at, MLflow is not asked again (an import of seconds) until its store or
    the workspace's versions of the name change."""
    if not workspace.holds(AssetKind.MODEL, name):
        return []
    looked = ["mlflow-taken-in", str(workspace.root.resolve()), name, store_stamp(),
              sorted(str(v.version) for v in workspace.versions(AssetKind.MODEL, name))]
    if looked[3] is not None and remembered("mlflow", looked) is not None:
        return []
    made = _take_in(workspace, name)
    if looked[3] is not None:  # as the store was before, with the versions held now
        looked[4] = sorted(str(v.version) for v in workspace.versions(AssetKind.MODEL, name))
        remember("mlflow", looked, True)
    return made


def _take_in(workspace: Workspace, name: str) -> list[AssetVersion]:
    client = _client()
    if client is None:
        return []
    pending = [v for v in _mlflow_versions(client, name) if WORKSPACE_TAG not in (v.tags or {})]
    if not pending:
        return []
    workspace.root.mkdir(parents=True, exist_ok=True)
    with held(workspace.root / ".mlflow.lock"):  # one taker at a time
        taken = {r.origin for r in workspace.versions(AssetKind.MODEL, name)}
        made = [_copy_in(workspace, client, name, version=version,
                         origin=f"{ORIGIN}:{name}/{version.version}")
                for version in pending if f"{ORIGIN}:{name}/{version.version}" not in taken]
    return [record for record in made if record is not None]


def _fetched(client, name: str, version, staging: Path) -> Path | None:
    """The version's files, read through `client`'s registry (download_artifacts would read
    models:/ from MLflow's default store of the current folder, whatever registry it is given);
    None, said on stderr, when they are gone (a version of no files is no model: it is never
    taken in, so never @latest)."""
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a log, not a tty
    try:
        source = client.get_model_version_download_uri(name, version.version)
        fetched = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=source, dst_path=str(staging / "download"),
            tracking_uri=client.tracking_uri))
    except (MlflowException, OSError) as err:
        reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
    else:
        if fetched.is_file() or any(p.is_file() for p in fetched.rglob("*")):
            return fetched
        reason = "no files"
    print(f"warning: MLflow's model {name} version {version.version} has no files here "
          f"({reason}; its source: {version.source}): not taken into the local workspace",
          file=sys.stderr)
    return None


def _copy_in(workspace: Workspace, client, name: str, *, version,
             origin: str) -> AssetVersion | None:
    with tempfile.TemporaryDirectory(prefix=".mlflow-", dir=workspace.root) as staging:
        fetched = _fetched(client, name, version, Path(staging))
        if fetched is None:
            return None
        folder = Path(staging) / "model"
        shutil.move(fetched, folder)
        held = {v.version for v in workspace.versions(AssetKind.MODEL, name)}
        draft = Draft(kind=AssetKind.MODEL, name=name, source=folder, type="mlflow_model",
                      version=None if version.version in held else str(version.version),
                      description=version.description or "", tags=dict(version.tags or {}),
                      properties={"mlflow.run_id": version.run_id or "",
                                  "mlflow.source": version.source or ""},
                      origin=origin, uploaded=False)
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
    with _store():
        created = client.create_model_version(record.name, str(record.path),
                                              tags={WORKSPACE_TAG: record.version},
                                              description=record.description or None)
    return str(created.version)


def retag_run(run_id: str, *, tags: dict[str, str], removed: list[str],
              name: str | None) -> None:
    """A job's MLflow run after `job update`: on Azure a job is its MLflow run, its tags the
    run's tags and its display name the run's name, so a change of either is the run's too."""
    client = _client()
    if client is None:
        return
    with _store():
        for key, value in tags.items():
            client.set_tag(run_id, key, value)
        for key in removed:
            client.delete_tag(run_id, key)
        if name:
            client.update_run(run_id, name=name)


def update_model_version(record: AssetVersion) -> None:
    """MLflow's version of a workspace model after `model update`: on Azure the workspace's
    model registry is MLflow's, so the description and tags `az ml model update` sets are the
    ones MLflow's client reads (`get_model_version`). Its own tags (WORKSPACE_TAG) stay."""
    client = _client()
    if client is None:
        return
    mine = [v for v in _mlflow_versions(client, record.name)
            if (v.tags or {}).get(WORKSPACE_TAG, str(v.version)) == record.version]
    with _store():
        for version in mine:
            client.update_model_version(record.name, version.version,
                                        description=record.description)
            for key in set(version.tags or {}) - set(record.tags) - {WORKSPACE_TAG}:
                client.delete_model_version_tag(record.name, version.version, key)
            for key, value in record.tags.items():
                client.set_model_version_tag(record.name, version.version, key, value)
