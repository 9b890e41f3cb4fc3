"""A server the runtime starts and leaves running (the local online endpoint): the same stages
as a job, resolve -> snapshot -> environment -> launch, with no MLflow run (a deployment has
none on Azure) and no runner waiting for it: its output goes straight to its log, it runs in a
process group of its own, and `stop` ends that group, as Azure ends a deployment's container.

Its folder holds what a task's does: the snapshot (its Workdir), the top environment layer,
`command.sh`, `log.txt`, and `status.json` with the server's pid while it runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlops.runtime import Runtime, debugging, prepare, watchdog
from mlops.runtime.environ import process_env
from mlops.runtime.tasks import Task


@dataclass(frozen=True)
class Service:
    pid: int  # also its process group
    log: Path
    folder: Path


def start_service(task: Task, rt: Runtime, header: Callable[[], str] | None = None) -> Service:
    """Resolve, snapshot, activate the environment, and start the command detached; `header`
    (asked once the environment is ready) starts the log."""
    ready = prepare(task, rt)
    env = debugging.overlay(ready.debug, process_env(task, rt.environments, ready.inputs,
                                                     ready.outputs, debug=ready.debug), [{}])[0]
    if ready.debug is not None:
        print(ready.debug.notice(task.name).replace("waits for", "listens for"), flush=True)
    command = ready.command
    (task.folder / "command.sh").write_text(command + "\n")
    log = task.folder / "log.txt"
    rt.started = True
    with log.open("w") as handle:
        handle.write(header() if header else "")
        handle.flush()
        process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=ready.wd, env=env,
                                   stdin=subprocess.DEVNULL, stdout=handle,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    watchdog.write_status(task.folder, {"status": "Running", "pid": process.pid,
                                        "outputs": ready.outputs})
    return Service(process.pid, log, task.folder)


def running(service: Service) -> bool:
    _reap(service.pid)
    try:
        os.kill(service.pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_service(pid: int, folder: Path | None = None, grace: float = 5.0) -> None:
    """TERM the server's group, KILL it after `grace` seconds; its status becomes Canceled."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap(pid)
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    _reap(pid)
    if folder is not None and watchdog.read_status(folder).get("pid") == pid:
        watchdog.write_status(folder, {"status": "Canceled", "pid": pid})


def _reap(pid: int) -> None:
    """A server this process started stays a zombie (and "alive") until it is waited for."""
    with contextlib.suppress(ChildProcessError):  # another process started it: exit is enough
        os.waitpid(pid, os.WNOHANG)
