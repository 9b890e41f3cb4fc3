"""A job spec that passed Azure's checks, and its record in the run folder.

The run folder is `<runs_dir>/<slug>-<time>` ([tool.azml] runs_dir), or the one asked for: a
command job run again into its folder resumes there, a pipeline resumes there with the steps it
completed reused unless they changed (reuse.py); a sweep is never resumed. `spec.yml` holds
the spec as it ran (after --set), `run.json` its kind, file and MLflow run (records.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import yaml

from mlops.errors import LocalRunError, write_holder
from mlops.project import project
from mlops.runtime.records import JobStatus, RunRecord
from mlops.runtime.uris import AssetMap
from mlops.specs import Spec, SpecData
from mlops.workspace.names import generated_job_name

LOCK = ".lock"
# A run folder's stem: with "-YYYYmmdd-HHMMSS-N" after it, a file name the file system takes
# (255 bytes) and a job name Azure takes (folder_job_name)
SLUG_MAX = 200
BATCH_JOB = "batchJob"  # run.json's kind for a batch endpoint's job (endpoints/batch_run.py)


@dataclass
class Job:
    """A spec that passed Azure's checks, with the overrides it was run with."""

    spec: Spec
    assets: AssetMap
    named: str = ""  # the job's name, once its run folder is known (identity())

    @property
    def data(self) -> SpecData:
        return self.spec.data

    @property
    def name(self) -> str:
        """The display name: the MLflow run's name, a label only; Azure's default is the job's
        name (azure-ai-ml's generate_defaults)."""
        return str(self.data.get("display_name") or self.named or self.spec.path.stem)

    @property
    def slug(self) -> str:
        """The run folder's stem: a shell-safe slug of the display name (or the file's name), its
        first SLUG_MAX characters; the display name may hold spaces and parentheses and run
        long."""
        label = str(self.data.get("display_name") or self.spec.path.stem)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", label)[:SLUG_MAX].strip("-.")
        return slug or re.sub(r"[^A-Za-z0-9_.-]+", "-", self.spec.path.stem)[:SLUG_MAX] or "job"

    def identity(self, folder: Path) -> Identity:
        return Identity(kind=self.spec.kind, spec=self.spec.path, name=job_name(self, folder),
                        data=self.data)


@dataclass(frozen=True, kw_only=True)
class Identity:
    """What a run folder's run.json and spec.yml say its run is: a job of a spec, or a batch
    deployment's job (kind batchJob: the deployment's spec, the job as az prints it)."""

    kind: str
    spec: Path  # the spec file it ran
    name: str  # the job's name, unique in the workspace
    data: SpecData  # spec.yml: what ran, as `az ml job show` reads it


def read_record(folder: Path) -> RunRecord | None:
    """The run.json of an earlier run in `folder` (None when there is none)."""
    try:
        return RunRecord.read(folder)
    except ValueError as err:
        raise LocalRunError(f"{err}: use a new --run-dir, or delete the file to start this "
                            "folder afresh") from None


def run_folder(job: Job, requested: Path | None) -> Path:
    """A new <runs_dir>/<name>-<time>, or the requested folder (a rerun resumes a command
    job or a pipeline)."""
    if requested is None:
        runs, stamp = project().runs_dir, time.strftime("%Y%m%d-%H%M%S")
        folder, n = runs / f"{job.slug}-{stamp}", 1
        while folder.exists():
            n += 1
            folder = runs / f"{job.slug}-{stamp}-{n}"
        return folder
    folder = requested.resolve()
    earlier = read_record(folder)
    kind = earlier.kind if earlier and earlier.status != JobStatus.STARTING else None
    if kind == "sweepJob":
        raise LocalRunError(f"{folder} holds a sweep already; a sweep cannot be resumed (its "
                            "trials would mix parameters). Use a new --run-dir")
    if kind is not None and kind != job.spec.kind:
        raise LocalRunError(f"{folder} holds a {kind} run; a {job.spec.kind} cannot reuse it. "
                            "Use a new --run-dir")
    return folder


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the run folder for this run alone: an exclusive lock on `<folder>/.lock`, taken
    before anything else is written and let go when the run ends (or its process dies). A
    second run into the folder is refused at once and touches nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 32, 0).decode(errors="replace").strip() or "?"
            raise LocalRunError(f"{folder} is in use by a local run (pid {holder}); wait for "
                                "it, stop it, or use another --run-dir") from None
        write_holder(handle, f"{os.getpid()}\n", folder / LOCK)
        yield
    finally:
        os.close(handle)  # the lock goes with it


def job_name(job: Job, folder: Path) -> str:
    """The job's name: its spec's `name:` (az ml job create --name sets it); else the one its
    run folder's run.json holds (a run resumed in its folder keeps its name); else one made as
    azure-ai-ml makes it for a job without a name (workspace/names.generated_job_name), or
    its run folder's name made a name Azure takes where that cannot be (`x;y` is `x_y`)."""
    if job.data.get("name"):
        return str(job.data["name"])
    earlier = read_record(folder)
    if earlier is not None and earlier.name:
        return earlier.name
    return generated_job_name() or folder_job_name(folder)


def folder_job_name(folder: Path) -> str:
    """A run folder's name as a job name Azure takes (`x;y` is job `x_y`)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", folder.name).lstrip("_-")[:256]
    return safe or "job"


def now() -> str:
    return datetime.now(UTC).isoformat()


def write_record(run: Identity, folder: Path, *, status: JobStatus = JobStatus.RUNNING,
                 pid: int | None = None) -> RunRecord:
    """spec.yml as it runs, and run.json: the job's kind, spec, name and status (with the MLflow
    run and creation time an earlier run in the folder recorded, which a rerun keeps)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yml").write_text(yaml.safe_dump(run.data, sort_keys=False))
    earlier = read_record(folder)
    record = RunRecord(kind=run.kind, spec=str(run.spec.resolve()),
                       mlflow_run_id=earlier and earlier.mlflow_run_id,
                       name=run.name, status=status, pid=pid or os.getpid(),
                       created_at=(earlier and earlier.created_at) or now())
    record.write(folder)
    return record


def update_record(folder: Path, **changes: object) -> None:
    """run.json with `changes` (the MLflow run once it opens; how the job ended)."""
    earlier = read_record(folder)
    if earlier is not None:
        replace(earlier, **changes).write(folder)


def end_record(folder: Path, code: int) -> None:
    """How the job ended: Completed (0), Canceled (a signal: 128 + its number), else Failed."""
    status = JobStatus.COMPLETED if code == 0 else \
        JobStatus.CANCELED if code > 128 else JobStatus.FAILED
    update_record(folder, status=status, exit_code=code, ended_at=now(), pid=None)
