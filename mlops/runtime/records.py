"""What a local run records on disk, typed: a task's status.json, a run folder's run.json, and
the statuses they hold (Azure's job statuses, and the MLflow run status each one ends as).

Standard library only: the watchdog (watchdog.py) reads and writes these records without the
package's heavier imports.

status.json is written when the task starts (Running, its MLflow run id, the runner's pid) and
replaced atomically with the outcome. Every status.json is padded to RESERVED bytes, so on a full
disk the last record is written in place, in the space the first reserved.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path

STATUS = "status.json"
RUN = "run.json"
RESERVED = 4096


class RunStatus(StrEnum):
    """MLflow's run statuses (mlflow.entities.RunStatus), as the tracking store spells them."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


class Status(StrEnum):
    """A local task's status: Azure ML's job statuses it can take, and four of its own (a
    pipeline step linked from an earlier run, a trial the sweep's policy or trial_timeout
    stopped, a step of an if_else block its condition did not choose), each shown as Azure's
    Studio shows the child run."""

    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"
    REUSED = "Reused"
    EARLY_TERMINATED = "EarlyTerminated"
    TIMED_OUT = "TimedOut"
    SKIPPED = "Skipped"

    @property
    def run_status(self) -> RunStatus:
        """The MLflow status a task of this status leaves its run in."""
        return {Status.RUNNING: RunStatus.RUNNING, Status.COMPLETED: RunStatus.FINISHED,
                Status.REUSED: RunStatus.FINISHED, Status.SKIPPED: RunStatus.FINISHED,
                Status.FAILED: RunStatus.FAILED}.get(
                    self, RunStatus.KILLED)


def _padded(record: dict[str, object]) -> bytes:
    text = json.dumps(record, indent=2) + "\n"
    return (text + " " * max(0, RESERVED - len(text) - 1) + "\n").encode()


def write_json(path: Path, record: dict[str, object]) -> None:
    """`record` replaced atomically: a reader sees the old one or the new, never half. On a full
    disk it is written over the old one in place, in the space the first record reserved (JSON
    allows the trailing blanks)."""
    data = _padded(record)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        if not path.is_file() or path.stat().st_size < len(data):
            raise
        with open(path, "r+b") as handle:  # the reserved blocks: no new space needed
            handle.write(data)


def read_json(path: Path) -> dict[str, object] | None:
    """The JSON object in `path`; None when it is missing or damaged."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


@dataclass(kw_only=True)
class TaskRecord:
    """A task's status.json."""

    status: Status
    mlflow_run_id: str | None = None
    pid: int | None = None  # the runner (a job) or the server (a service) while it runs
    started_ms: int | None = None  # where the runs the task opens below its own start
    exit_code: int | None = None
    seconds: float | None = None
    outputs: dict[str, str] = field(default_factory=dict)  # output name -> its path
    faults: list[str] = field(default_factory=list)  # what the machine refused (a full disk)
    reused_run: str | None = None  # Reused: the MLflow run of the step it links
    reused_from: str | None = None  # Reused: that step's folder
    reason: str | None = None  # why it ended so, where the status alone does not say
    watchdog: int | None = None  # the pid of the task's watchdog (runtime/watchdog.py)

    def write(self, folder: Path) -> None:
        record = {k: v for k, v in asdict(self).items() if v not in (None, [], {})}
        write_json(folder / STATUS, {**record, "status": str(self.status),
                                     "outputs": self.outputs})

    @classmethod
    def read(cls, folder: Path) -> TaskRecord | None:
        """The record in `folder`; None when there is none, or it is damaged."""
        data = read_json(folder / STATUS)
        if data is None or data.get("status") not in set(Status):
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known},
                      "status": Status(data["status"])})


class JobStatus(StrEnum):
    """A job's status, as `az ml job show` spells Azure's (what a local job can be)."""

    STARTING = "Starting"
    RUNNING = "Running"
    CANCEL_REQUESTED = "CancelRequested"  # its runner died; its watchdog is ending it
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED)


@dataclass(kw_only=True)
class RunRecord:
    """A run folder's run.json: the job it holds (kind, spec, name, MLflow run) and how the job
    stands: Starting (created, its runner not yet up), Running (the runner's pid), then how it
    ended. Replaced atomically, as status.json is."""

    kind: str
    spec: str
    mlflow_run_id: str | None = None
    name: str | None = None  # the job's name (Azure's: unique in the workspace)
    status: JobStatus | None = None
    pid: int | None = None  # the runner, while the job is Starting or Running
    created_at: str | None = None  # ISO 8601, UTC
    ended_at: str | None = None
    exit_code: int | None = None

    def write(self, folder: Path) -> None:
        record = {k: v for k, v in asdict(self).items() if v is not None}
        write_json(folder / RUN, {**record, **({"status": str(self.status)}
                                               if self.status else {})})

    @classmethod
    def read(cls, folder: Path) -> RunRecord | None:
        """None when the folder holds no run; ValueError when its run.json is damaged."""
        path = folder / RUN
        if not path.is_file():
            return None
        data = read_json(path)
        if data is None or not isinstance(data.get("kind"), str):
            raise ValueError(f"{path} is damaged")
        known = {f.name: f.type for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known and _typed(v, k)}
        if kept.get("status") not in {*JobStatus, None}:
            kept.pop("status")
        return cls(**{**kept, "spec": str(data.get("spec", "")),
                      "status": JobStatus(kept["status"]) if kept.get("status") else None})


def _typed(value: object, key: str) -> bool:
    """A run.json value of the type its field holds (a damaged field is dropped, not trusted)."""
    if key in ("pid", "exit_code"):
        return isinstance(value, int) and not isinstance(value, bool)
    return value is None or isinstance(value, str)
