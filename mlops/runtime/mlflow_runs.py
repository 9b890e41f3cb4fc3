"""MLflow runs for local jobs, created as Azure ML creates them for a job, a trial or a step.

The runner opens the run (the spec's experiment and display name, tagged with the spec) and hands
it to the job through MLFLOW_RUN_ID, as Azure does, so a plain `mlflow.log_metric` lands in it.
When the job ends the runner records the outcome: FINISHED, FAILED or KILLED, also on any run the
job opened below it and left RUNNING (a crash, Ctrl-C), and uploads `outputs/`, `logs/` and the
job's log as the run's artifacts, the folders Azure uploads.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
import time
from pathlib import Path

from mlops.project import SQLITE, sqlite_file, tracking_uri  # noqa: F401 - the store's names
from mlops.runtime.records import RunStatus, Status

# Runs closed this close to the job's end were closed by its exit hook. A process still tears
# down for seconds after MLflow's hook on a loaded machine (torch's finalizers, other atexit
# hooks), so 2 s misjudged a crash's nested run as finished on purpose.
EXIT_WINDOW_MS = 10_000
log = logging.getLogger(__name__)


def artifact_root(uri: str) -> Path:
    """Where the artifacts of the experiments a local run creates go: beside a sqlite store's
    file (<folder>/mlruns/<experiment id>), whichever folder the runner starts in (MLflow's
    default, ./mlruns, would scatter one store's artifacts over every working directory)."""
    path = sqlite_file(uri)
    return path.parent / "mlruns" if path else Path("mlruns").resolve()


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


class Tracking:
    """The runner's own client (on the store directly) and the URI jobs are given (the local
    tracking server's, when it runs: mlops/runtime/mlflow_server.py)."""

    def __init__(self, server=None, uri: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.uri = uri or tracking_uri()
        if path := sqlite_file(self.uri):
            with creating(path):
                if not path.exists():
                    self._store()  # a new store: its Default experiment's artifacts beside it
        self.client = MlflowClient(self.uri)
        self.server = server
        if server is not None:
            server.store_ready()

    def serve(self) -> str:
        """The URI jobs track to: the local tracking server's, started here when a job first
        needs it (the launch stage asks, engine.start), else the store's."""
        return (self.server.uri() if self.server else None) or self.uri

    def experiment_id(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found:
            return found.experiment_id
        try:
            if not sqlite_file(self.uri):
                return self.client.create_experiment(name)
            return self._store().create_experiment(name)
        except Exception:
            # another run, started at the same moment, created it first
            if found := self.client.get_experiment_by_name(name):
                return found.experiment_id
            raise

    def _store(self):
        """The store as the tracking server opens it, with its default artifact root: new
        experiments get <artifact root>/<id>."""
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        return SqlAlchemyStore(self.uri, str(artifact_root(self.uri)))

    def open(self, experiment: str, name: str, tags: dict[str, str], *,
             parent: str | None = None, reopen: str | None = None,
             process: bool = False) -> OpenRun:
        """The one place a local run's MLflow runs open: a new run, or the run `reopen` names
        reopened (a job run again into its folder is the same job, as Azure retries a preempted
        job under its own run, and its training resumes into it). Close it with OpenRun.close,
        or use it as a context manager: it ends KILLED if interrupted, FAILED on any other
        exception, unless it was closed first. `process`: a process of the task logs into it
        (and may open runs below it, which close with it)."""
        run_id = self._create(experiment, name, tags=tags, parent=parent, reopen=reopen)
        return OpenRun(self, run_id, now_ms() if process else None)

    def _create(self, experiment: str, name: str, *, tags: dict[str, str], parent: str | None,
                reopen: str | None) -> str:
        if reopen:
            try:
                self.client.get_run(reopen)
                self.client.update_run(reopen, status=RunStatus.RUNNING)
                return reopen
            except Exception:  # noqa: BLE001 - gone (another store, deleted): start afresh
                pass
        tags = {**tags, **({"mlflow.parentRunId": parent} if parent else {})}
        run = self.client.create_run(self.experiment_id(experiment), run_name=name, tags=tags)
        return run.info.run_id

    def finish(self, run_id: str, status: RunStatus, *, since_ms: int | None = None,
               exit_ms: int | None = None, only_running: bool = False) -> None:
        """End `run_id` and the runs the job opened below it: any left RUNNING, and, when the
        job failed or was stopped, those its dying process closed as FINISHED (MLflow's exit
        hook ends open runs as FINISHED even when the process crashes). `only_running`: leave
        every run that already ended as it is (a dead launcher's leftovers)."""
        if since_ms is not None:
            for child in self._descendants(run_id, since_ms):
                closed_by_exit = (status != RunStatus.FINISHED and exit_ms is not None and
                                  child.info.status == RunStatus.FINISHED and
                                  (child.info.end_time or 0) >= exit_ms - EXIT_WINDOW_MS)
                if child.info.status == RunStatus.RUNNING or closed_by_exit:
                    self.client.set_terminated(child.info.run_id, status)
        if only_running:
            try:
                if self.client.get_run(run_id).info.status != RunStatus.RUNNING:
                    return
            except Exception:  # noqa: BLE001 - gone (another store, deleted): nothing to end
                return
        self.client.set_terminated(run_id, status)

    def _descendants(self, root: str, since_ms: int) -> list:
        experiments = [e.experiment_id for e in self.client.search_experiments()]
        recent = self.client.search_runs(experiments, f"attributes.start_time >= {since_ms}",
                                         max_results=1000)
        parents = {r.info.run_id: r.data.tags.get("mlflow.parentRunId") for r in recent}
        found = []
        for run in recent:
            node, seen = parents.get(run.info.run_id), set()
            while node and node != root and node not in seen:
                seen.add(node)
                node = parents.get(node) or self._parent(node)
            if node == root and run.info.run_id != root:
                found.append(run)
        return found

    def _parent(self, run_id: str) -> str | None:
        try:
            return self.client.get_run(run_id).data.tags.get("mlflow.parentRunId")
        except Exception:  # noqa: BLE001 - a deleted run ends the chain
            return None

    def log_artifacts(self, run_id: str, wd: Path, log_file: Path) -> None:
        """outputs/ and logs/ of the working directory, and the job's log, as Azure uploads."""
        try:
            for name in ("outputs", "logs"):
                folder = wd / name
                if folder.is_dir() and any(folder.iterdir()):
                    self.client.log_artifacts(run_id, str(folder), name)
            if log_file.is_file():
                self.client.log_artifact(run_id, str(log_file), "user_logs")
        except Exception as err:  # noqa: BLE001 - artifacts never decide a job's outcome
            print(f"warning: could not upload artifacts of MLflow run {run_id}: {err}",
                  file=sys.stderr)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def history(self, run_id: str, metric: str) -> list[float]:
        points = self.client.get_metric_history(run_id, metric)
        return [p.value for p in sorted(points, key=lambda p: (p.step, p.timestamp))]

    def metric_names(self, run_id: str) -> list[str]:
        return sorted(self.client.get_run(run_id).data.metrics)


def now_ms() -> int:
    return int(time.time() * 1000)


class OpenRun:
    """An MLflow run a local run opened (Tracking.open): closed once, with the status of what it
    tracked; as a context manager, KILLED when interrupted and FAILED on an error."""

    def __init__(self, tracking: Tracking, run_id: str, since_ms: int | None):
        self.tracking, self.run_id, self.since_ms = tracking, run_id, since_ms
        self.closed = False

    def close(self, status: Status | RunStatus, exit_ms: int | None = None) -> None:
        """End the run, and the runs its task opened below it (see Tracking.finish)."""
        if self.closed:
            return
        self.closed = True
        final = status.run_status if isinstance(status, Status) else status
        self.tracking.finish(self.run_id, final, since_ms=self.since_ms, exit_ms=exit_ms)

    def __enter__(self) -> OpenRun:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is not None:
            interrupted = issubclass(kind, KeyboardInterrupt)
            self.close(RunStatus.KILLED if interrupted else RunStatus.FAILED)
