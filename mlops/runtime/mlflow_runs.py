"""MLflow runs for local jobs, created as Azure ML creates them for a job, a trial or a step.

The runner opens the run (the spec's experiment and display name, tagged with the spec) and hands
it to the job through MLFLOW_RUN_ID, as Azure does, so a plain `mlflow.log_metric` lands in it.
When the job ends the runner records the outcome: FINISHED, FAILED or KILLED, also on any run the
job opened below it and left RUNNING (a crash, Ctrl-C), and uploads `outputs/`, `logs/` and the
job's log as the run's artifacts, the folders Azure uploads.
"""

from __future__ import annotations

import errno
import sys
import time
from pathlib import Path

from mlops.errors import ADVICE, LocalRunError, MachineError
from mlops.project import SQLITE, sqlite_file, tracking_uri  # noqa: F401 - the store's names
from mlops.runtime.mlflow_rest import RestError, RestStore
from mlops.runtime.mlflow_store import ClientStore, artifact_root, creating  # noqa: F401
from mlops.runtime.records import RunStatus, Status

# Runs closed this close to the job's end were closed by its exit hook. A process still tears
# down for seconds after MLflow's hook on a loaded machine (torch's finalizers, other atexit
# hooks), so 2 s misjudged a crash's nested run as finished on purpose.
EXIT_WINDOW_MS = 10_000
PARENT = "mlflow.parentRunId"


# what SQLite says when it cannot use the store, as the tracking server or MLflow pass it on:
# the file is not (or no longer) a whole database (None), or its file system refused a write
STORE_FAULTS = {"file is not a database": None, "database disk image is malformed": None,
                "database or disk is full": errno.ENOSPC,
                "attempt to write a readonly database": errno.EROFS}


def store_error(uri: str, err: Exception) -> MachineError | None:
    """The machine's error a failed MLflow call stands for when SQLite could not use the store:
    damaged (overwritten, cut short by a full disk or a crash) or refused a write (full,
    read-only); None for any other failure."""
    said = next((words for words in STORE_FAULTS if words in str(err)), None)
    path = sqlite_file(uri)
    if said is None:
        return None
    if (code := STORE_FAULTS[said]) is not None:
        return MachineError(f"the MLflow store {path or uri}: {said}; {ADVICE[code]}")
    if path is None:
        return None
    return MachineError(f"the local MLflow store {path} is damaged (SQLite: {said}): move it "
                        f"aside (mv '{path}' '{path}.damaged') and run again, which makes a new "
                        "one (sqlite3's .recover may get runs back from the damaged file)")


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)")


class Tracking:
    """The runner's MLflow: the runs it opens, ends, tags and reads, and the URI jobs are given.
    Building one opens nothing: `connect()` (a run's set-up calls it; any first call does)
    reaches the store's warm tracking server (mlflow_server.py: the runner then speaks its REST
    API and never imports MLflow), or the store itself where no server serves it or the server
    died (mlflow_store.py)."""

    def __init__(self, server=None, uri: str | None = None) -> None:
        self.uri = uri or tracking_uri()
        self.server = server
        self.backend: RestStore | ClientStore | None = None
        self.job_uri = self.uri
        self._experiments: dict[str, str] = {}

    def connect(self) -> RestStore | ClientStore:
        """The store's server, found warm or started (held until the server handle closes),
        else the store itself."""
        if self.backend is None:
            served = None
            if self.server is not None:
                try:
                    served = self.server.connect()
                except OSError as err:
                    print(f"warning: the local MLflow server could not start ({err}); jobs log "
                          "to the store directly", file=sys.stderr)
            self.backend = RestStore(served) if served else ClientStore(self.uri)
            self.job_uri = served or self.uri
        return self.backend

    def _do(self, call: str, *args):
        backend = self.connect()
        try:
            try:
                return getattr(backend, call)(*args)
            except RestError as err:
                if err.code != "UNREACHABLE":
                    raise
                self._without_server(err)
            return getattr(self.backend, call)(*args)
        except Exception as err:  # the server's answer, or sqlalchemy's from the store itself
            fault = store_error(self.uri, err)
            if fault is not None:  # (the store's own faults are the machine's)
                raise fault from None
            raise

    def _without_server(self, err: RestError) -> None:
        """The store itself from here, the server gone; a server that died because SQLite
        could not use the store (a full disk, a read-only or damaged file) is that fault, said
        once, not a warning with its traceback before the same fault from the store."""
        tail = self.server.log_tail() if self.server is not None else ""
        fault = store_error(self.uri, RuntimeError(tail))
        if fault is not None:
            raise fault
        print(f"warning: the local MLflow server is not running ({err}); the runner uses the "
              f"store directly" + (f":\n  {tail}" if tail else ""), file=sys.stderr)
        self.backend, self.job_uri = ClientStore(self.uri), self.uri

    def serve(self) -> str:
        """The URI jobs track to: the local tracking server's, else the store's."""
        self.connect()
        return self.job_uri

    def trusted_ca(self) -> str | None:
        """The authority of the certificate the jobs' tracking host answers HTTPS with (the
        local server's: local_tls.py); None where jobs track elsewhere."""
        self.connect()
        served = self.server is not None and self.job_uri != self.uri
        tls = getattr(self.server, "tls", None) if served else None
        return str(tls.ca) if tls is not None else None

    def experiment_id(self, name: str) -> str:
        if name not in self._experiments:
            self._experiments[name] = self._experiment_id(name)
        return self._experiments[name]

    def _experiment_id(self, name: str) -> str:
        found = self._do("experiment_by_name", name)
        if found:
            return found
        try:
            return self._do("create_experiment", name)
        except Exception:
            # another run, started at the same moment, created it first
            if found := self._do("experiment_by_name", name):
                return found
            raise

    def open(self, experiment: str, name: str, tags: dict[str, str], *,
             parent: str | None = None, reopen: str | None = None,
             process: bool = False) -> OpenRun:
        """The one place a local run's MLflow runs open: a new run, or the run `reopen` names
        reopened (a job run again into its folder is the same job, as Azure retries a preempted
        job under its own run, and its training resumes into it). Close it with OpenRun.close,
        or use it as a context manager: it ends KILLED if interrupted, FAILED on any other
        exception, unless it was closed first. `process`: a process of the task logs into it
        (and may open runs below it, which close with it)."""
        try:
            run_id = self._create(experiment, name, tags=tags, parent=parent, reopen=reopen)
        except Exception as err:
            if "INVALID_PARAMETER_VALUE" not in f"{getattr(err, 'error_code', '')} {err}":
                raise
            raise LocalRunError(  # MLflow's own limits: a name of 500 characters, ...
                f"MLflow, which records local runs, refused the run (experiment "
                f"{_short(experiment)}, name {_short(name)}): {err}; shorten the spec's "
                "experiment_name or display_name (or the tag it names)") from None
        return OpenRun(self, run_id, now_ms() if process else None)

    def _create(self, experiment: str, name: str, *, tags: dict[str, str], parent: str | None,
                reopen: str | None) -> str:
        if reopen:
            try:
                self._do("get_run", reopen)
                self._do("update_run", reopen, RunStatus.RUNNING.value, None)
                return reopen
            except Exception:  # noqa: BLE001 - gone (another store, deleted): start afresh
                pass
        tags = {**tags, **({PARENT: parent} if parent else {})}
        return self._do("create_run", self.experiment_id(experiment), name, tags,
                        now_ms()).run_id

    def finish(self, run_id: str, status: RunStatus, *, since_ms: int | None = None,
               exit_ms: int | None = None, only_running: bool = False) -> None:
        """End `run_id` and the runs the job opened below it: any left RUNNING, and, when the
        job failed or was stopped, those its dying process closed as FINISHED (MLflow's exit
        hook ends open runs as FINISHED even when the process crashes). `only_running`: leave
        every run that already ended as it is (a dead launcher's leftovers)."""
        if since_ms is not None:
            for child in self._descendants(run_id, since_ms):
                closed_by_exit = (status != RunStatus.FINISHED and exit_ms is not None and
                                  child.status == RunStatus.FINISHED and
                                  (child.end_time or 0) >= exit_ms - EXIT_WINDOW_MS)
                if child.status == RunStatus.RUNNING or closed_by_exit:
                    self._do("update_run", child.run_id, status.value, now_ms())
        if only_running:
            try:
                if self._do("get_run", run_id).status != RunStatus.RUNNING:
                    return
            except Exception:  # noqa: BLE001 - gone (another store, deleted): nothing to end
                return
        self._do("update_run", run_id, status.value, now_ms())

    def _descendants(self, root: str, since_ms: int) -> list:
        experiments = self._do("experiment_ids")
        recent = self._do("search_runs", experiments, f"attributes.start_time >= {since_ms}",
                          1000)
        parents = {r.run_id: r.tags.get(PARENT) for r in recent}
        found = []
        for run in recent:
            node, seen = parents.get(run.run_id), set()
            while node and node != root and node not in seen:
                seen.add(node)
                node = parents.get(node) or self._parent(node)
            if node == root and run.run_id != root:
                found.append(run)
        return found

    def _parent(self, run_id: str) -> str | None:
        try:
            return self._do("get_run", run_id).tags.get(PARENT)
        except Exception:  # noqa: BLE001 - a deleted run ends the chain
            return None

    def log_artifacts(self, run_id: str, wd: Path, log_file: Path) -> None:
        """outputs/ and logs/ of the working directory, and the job's log, as Azure uploads."""
        try:
            for name in ("outputs", "logs"):
                folder = wd / name
                if folder.is_dir() and any(folder.iterdir()):
                    self._do("log_artifacts", run_id, folder, name)
            if log_file.is_file():
                self._do("log_artifacts", run_id, log_file, "user_logs")
        except Exception as err:  # noqa: BLE001 - artifacts never decide a job's outcome
            print(f"warning: could not upload artifacts of MLflow run {run_id}: {err}",
                  file=sys.stderr)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self._do("set_tag", run_id, key, value)

    def log_metric(self, run_id: str, key: str, value: float) -> None:
        self._do("log_metric", run_id, key, value, now_ms())

    def history(self, run_id: str, metric: str) -> list[float]:
        points = self._do("metric_history", run_id, metric)
        return [value for _, _, value in sorted(points, key=lambda p: (p[0], p[1]))]

    def metric_names(self, run_id: str) -> list[str]:
        return sorted(self._do("get_run", run_id).metrics)


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
