"""The runner's MLflow calls made on a store itself, through MLflow's own client: where no local
tracking server serves the store (a remote server, a file store, a server that could not start)
and for a launcher's leftovers (the watchdog). The same calls as mlflow_rest.RestStore, with the
same answers; it imports MLflow (about 3 s of CPU), which a run on its warm server never does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from mlops.project import sqlite_file, tracking_uri
from mlops.runtime.mlflow_rest import RunView, copy_artifacts, local_folder
from mlops.runtime.records import TaskRecord


def artifact_root(uri: str) -> Path:
    """Where the artifacts of the experiments a local run creates go: beside a sqlite store's
    file (<folder>/mlruns/<experiment id>), whichever folder the runner starts in (MLflow's
    default, ./mlruns, would scatter one store's artifacts over every working directory)."""
    path = sqlite_file(uri)
    return path.parent / "mlruns" if path else Path("mlruns").resolve()


def run_artifacts(folder: Path) -> Path | None:
    """The default `artifacts` output on Azure of the job run in `folder` (azureml://jobs/
    <name>/outputs/artifacts): its MLflow run's artifacts, where the runner uploaded outputs/,
    logs/ and the job's log and the job logged its own (a model); None where its status.json
    names no run or the local store holds no such folder."""
    task = TaskRecord.read(folder)
    run_id = task.mlflow_run_id if task else None
    found = sorted(artifact_root(tracking_uri()).glob(f"*/{run_id}/artifacts")) if run_id \
        else []
    return found[0] if found else None


@contextlib.contextmanager
def creating(path: Path):
    """Held while a process creates the store `path` or finds it made: an exclusive lock on its
    folder. Two runs started together on a new store would otherwise both create MLflow's
    tables and run its migrations, and all but one fail ("table experiments already exists",
    "expected to match one row"), leaving a half-migrated file that fails every later run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # releases the lock


def view(run) -> RunView:
    return RunView(run_id=run.info.run_id, status=run.info.status,
                   start_time=run.info.start_time or 0, end_time=run.info.end_time,
                   artifact_uri=run.info.artifact_uri or "", tags=dict(run.data.tags),
                   metrics=dict(run.data.metrics))


class ClientStore:
    """MLflow's client on the store `uri`; a new sqlite store is created on first use with its
    Default experiment's artifacts beside it. Building one opens nothing."""

    def __init__(self, uri: str):
        self.uri = uri
        self._client = None

    @property
    def client(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            if path := sqlite_file(self.uri):
                with creating(path):
                    if not path.exists():
                        self._store()  # a new store: its Default experiment's artifacts beside
            self._client = MlflowClient(self.uri)
        return self._client

    def _store(self):
        """The store as the tracking server opens it, with its default artifact root: new
        experiments get <artifact root>/<id>."""
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        return SqlAlchemyStore(self.uri, str(artifact_root(self.uri)))

    def experiment_by_name(self, name: str) -> str | None:
        found = self.client.get_experiment_by_name(name)
        return found.experiment_id if found else None

    def create_experiment(self, name: str) -> str:
        if not sqlite_file(self.uri):
            return self.client.create_experiment(name)
        return self._store().create_experiment(name)

    def experiment_ids(self) -> list[str]:
        return [e.experiment_id for e in self.client.search_experiments()]

    def create_run(self, experiment_id: str, name: str, tags: dict[str, str],
                   start_ms: int) -> RunView:
        return view(self.client.create_run(experiment_id, start_time=start_ms, tags=tags,
                                           run_name=name))

    def get_run(self, run_id: str) -> RunView:
        return view(self.client.get_run(run_id))

    def update_run(self, run_id: str, status: str, end_ms: int | None) -> None:
        if end_ms:
            self.client.set_terminated(run_id, status, end_time=end_ms)
        else:
            self.client.update_run(run_id, status=status)

    def search_runs(self, experiment_ids: list[str], where: str,
                    max_results: int) -> list[RunView]:
        return [view(run) for run in self.client.search_runs(experiment_ids, where,
                                                             max_results=max_results)]

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def log_metric(self, run_id: str, key: str, value: float, timestamp_ms: int) -> None:
        self.client.log_metric(run_id, key, value, timestamp=timestamp_ms, step=0)

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, int, float]]:
        return [(m.step, m.timestamp, m.value)
                for m in self.client.get_metric_history(run_id, key)]

    def log_artifacts(self, run_id: str, source: Path, under: str) -> None:
        """As the server's: a local artifact folder gets each file whole or not at all
        (mlflow_rest.copy_artifacts); MLflow's own repository writes in place."""
        root = local_folder(self.get_run(run_id).artifact_uri)
        if root is not None:
            copy_artifacts(source, root / under)
        elif source.is_dir():
            self.client.log_artifacts(run_id, str(source), under)
        else:
            self.client.log_artifact(run_id, str(source), under)
