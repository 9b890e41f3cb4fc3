"""A server the runtime started and left running (the local online endpoint): engine.py's
start_service starts it through the same stages as a job (resolve -> snapshot -> environment ->
launch, with no MLflow run: a deployment has none on Azure) in a process group of its own; this
module tells whether it still runs and stops that group, as Azure ends a deployment's container.

Its folder holds what a task's does: the snapshot (its Workdir), the top environment layer,
`command.sh`, `log.txt`, and `status.json` with the server's pid while it runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from mlops.runtime.records import Status, TaskRecord


@dataclass(frozen=True, kw_only=True)
class Service:
    pid: int  # also its process group
    log: Path
    folder: Path
    environment: str = ""  # the environment it runs in, as the log names it


def running(service: Service) -> bool:
    return alive(service.pid)


def alive(pid: int) -> bool:
    """Whether the process runs (a pid of 0 or less never does)."""
    if pid <= 0:
        return False
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that has exited but that no one has waited for yet (its parent gone, and no
    init in a container to reap it) still answers kill(pid, 0): it does not run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def stop_service(pid: int, folder: Path | None = None, grace: float = 5.0) -> None:
    """TERM the server's group, KILL it after `grace` seconds; its status becomes Canceled."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap(pid)
            os.kill(pid, 0)
            if _zombie(pid):  # exited; nobody here can wait for it
                raise ProcessLookupError(pid)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    _reap(pid)
    record = TaskRecord.read(folder) if folder is not None else None
    if record is not None and record.pid == pid:
        TaskRecord(status=Status.CANCELED, pid=pid).write(folder)


def _reap(pid: int) -> None:
    """A server this process started stays a zombie (and "alive") until it is waited for."""
    with contextlib.suppress(ChildProcessError):  # another process started it: exit is enough
        os.waitpid(pid, os.WNOHANG)
