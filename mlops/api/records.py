"""A local job as the workspace knows it: its name, its run folder and how it stands (run.json,
mlops/runtime/records.py), read whenever asked, never cached."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from mlops.errors import NotFound
from mlops.runtime import JobStatus, RunRecord, Status, TaskRecord
from mlops.workspace.jobs import job_folder, job_names
from mlops.workspace.records import DamagedRecord
from mlops.workspace.store import Workspace, workspace_root

RUNNER_LOG = "runner.log"  # the runner's output: what `azml job stream` prints
CANCEL_ASKED = "cancel.requested"  # `job cancel` was asked to stop the runner with this pid


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (the runner ended, its parent has not reaped it) is not running
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def _is_watchdog(pid: int | None) -> bool:
    """Whether `pid` runs a watchdog, not a process that reused its number (where /proc
    cannot say, e.g. macOS: a live pid is taken as the watchdog)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return any(arg.endswith(b"/watchdog.py") for arg in argv[1:3])  # python <its file>
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return False


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """A job by name: its run folder and its run.json."""

    name: str
    folder: Path
    run: RunRecord | None

    @classmethod
    def at(cls, name: str, folder: Path) -> JobRecord:
        """Its run.json; read again when it says Running and the runner is gone, as a runner
        records its end and then exits: the first read may be from just before that end (a
        job that completed was shown Failed)."""
        run = cls._read(name, folder)
        if run and run.status and not run.status.terminal and not _alive(run.pid):
            run = cls._read(name, folder)
        return cls(name=name, folder=folder, run=run)

    @staticmethod
    def _read(name: str, folder: Path) -> RunRecord | None:
        try:
            return RunRecord.read(folder)
        except ValueError as err:
            raise DamagedRecord(f"job {name}: {err}: its record cannot be read; restore it, or "
                                f"remove {folder} (the job is then gone)") from None

    def refreshed(self) -> JobRecord:
        return JobRecord.at(self.name, self.folder)

    @property
    def pid(self) -> int | None:
        return self.run.pid if self.run else None

    @property
    def status(self) -> JobStatus:
        """As recorded; a job whose runner is gone without recording an end (kill -9, a
        crash): as its task's watchdog recorded it (Canceled, as `status.json` says), else
        Failed. A folder from before jobs recorded their status: its task's."""
        recorded = self.run.status if self.run else None
        if recorded is None:
            return self._from_task()
        if not recorded.terminal and not _alive(self.pid):
            if self._watchdog_ending():
                return JobStatus.CANCEL_REQUESTED
            return JobStatus.FAILED if self.runner_lost else self._from_task()
        if not recorded.terminal and self._cancel_asked():
            return JobStatus.CANCEL_REQUESTED
        return recorded

    def _cancel_asked(self) -> bool:
        """`job cancel` told this runner to stop; it has not recorded its end yet (it gives
        the job's processes their grace). A request to an earlier runner of the folder does
        not count."""
        try:
            return (self.folder / CANCEL_ASKED).read_text().strip() == str(self.pid)
        except (OSError, ValueError):
            return False

    def _watchdog_ending(self) -> bool:
        """The runner died with its task running and the task's watchdog is stopping it (its
        processes get up to 5 s after TERM): Canceled once the watchdog records it, not Failed
        until then, so a script waiting for an end sees one end only."""
        try:
            task = TaskRecord.read(self.folder)
        except ValueError:
            return False
        return (task is not None and task.status == Status.RUNNING
                and _alive(task.watchdog) and _is_watchdog(task.watchdog))

    @property
    def runner_lost(self) -> bool:
        """The job's runner is gone and neither it nor its task's watchdog recorded an end
        (kill -9 of the runner before its task started, the machine stopped)."""
        recorded = self.run.status if self.run else None
        if recorded is None or recorded.terminal or _alive(self.pid):
            return False
        task = TaskRecord.read(self.folder)
        return task is None or task.status == Status.RUNNING

    def _from_task(self) -> JobStatus:
        task = TaskRecord.read(self.folder)
        if task is None:
            return JobStatus.COMPLETED if (self.folder / "outputs").is_dir() else \
                JobStatus.FAILED
        return {Status.RUNNING: JobStatus.RUNNING if _alive(task.pid) else JobStatus.FAILED,
                Status.COMPLETED: JobStatus.COMPLETED, Status.REUSED: JobStatus.COMPLETED,
                Status.FAILED: JobStatus.FAILED}.get(task.status, JobStatus.CANCELED)

    @property
    def mlflow_run_id(self) -> str | None:
        """The job's MLflow run: the run.json's (a pipeline's, a sweep's), else its task's."""
        if self.run and self.run.mlflow_run_id:
            return self.run.mlflow_run_id
        try:
            task = TaskRecord.read(self.folder)
        except ValueError:  # (a damaged status.json: the job's status says so elsewhere)
            return None
        return task.mlflow_run_id if task else None

    @property
    def web_view(self) -> str:
        """Where a user looks at the job: its run folder (Azure's Studio page)."""
        return self.folder.as_uri()

    def named_outputs(self) -> dict[str, Path]:
        """Each output's local folder or file, as the job recorded it when it completed (else
        what its run folder holds)."""
        from mlops.workspace.jobs import completed_outputs

        recorded = completed_outputs(Workspace(workspace_root()), self.name)
        if recorded:
            return {k: Path(v) for k, v in recorded.items()}
        held = self.folder / "outputs"
        return {p.name: p for p in sorted(held.iterdir())} if held.is_dir() else {}

    def artifacts(self) -> dict[str, Path]:
        """The job's default artifacts, as Azure keeps them: `outputs/` and `logs/` of its
        working directory, and its log as user_logs/std_log.txt."""
        wd, found = self.folder / "wd", {}
        for name in ("outputs", "logs"):
            if (wd / name).exists():
                found[name] = wd / name
        log = self.folder / "log.txt"
        found["user_logs/std_log.txt"] = log if log.is_file() else self.folder / RUNNER_LOG
        return found


def find_job(name: str) -> JobRecord:
    """The job `name`, or NotFound (az's exit 3) naming the workspace it looked in."""
    workspace = Workspace(workspace_root())
    folder = job_folder(workspace, name)
    if folder is None or not folder.is_dir():
        raise NotFound(f"job {name!r} was not found in the local workspace {workspace.root} "
                       "(azml job list shows the jobs it holds)")
    return JobRecord.at(name, folder)


def all_jobs() -> list[JobRecord]:
    """Every job the workspace holds whose run folder is still there, newest first; a folder
    named twice (the spec's name and the folder's) once, by its spec's name; one whose run.json
    cannot be read is left out with a warning."""
    workspace = Workspace(workspace_root())
    seen: dict[Path, JobRecord] = {}
    for name in job_names(workspace):
        folder = job_folder(workspace, name)
        if folder is None or not folder.is_dir():
            continue
        try:
            record = JobRecord.at(name, folder)
        except DamagedRecord as err:  # one damaged record hides no other job
            print(f"WARNING: {err}: left out of the list (azml job show -n {name})",
                  file=sys.stderr)
            continue
        if folder not in seen or (record.run and record.run.name == name):
            seen[folder] = record
    return sorted(seen.values(), key=lambda r: (r.run and r.run.created_at) or "",
                  reverse=True)
