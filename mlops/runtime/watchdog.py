"""What happens to a task when its launcher dies without a word (SIGKILL, the OOM killer, a CI
runner's hard stop): on Azure the job's container goes with its node; here a watchdog does it.

The runtime starts one watchdog per task, a small process in a session of its own that holds
the read end of a pipe only the launcher can write. When the pipe closes without the launcher
having said "done", the launcher is gone: the watchdog stops the task's process groups (those
it was started with, and any the launcher named on the pipe since, `pgid N`) (TERM,
then KILL), records the task as Canceled in its status.json and ends its MLflow run, and every
run below it still RUNNING, as KILLED on the store itself (the launcher's tracking server died
with it). A later run into the same folder reopens that MLflow run (runtime.previous_run).

    python mlops/runtime/watchdog.py <task folder> <mlflow run id> <store uri> <pgid> [<pgid> ...]

It starts by its file's path, not as `-m mlops.runtime.watchdog`: waiting needs the standard
library alone, and the package's imports (a tenth of a second of CPU for each task) are only paid
by a watchdog that takes over.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

DONE = b"done\n"


def alive(pid: int | None) -> bool:
    """Whether `pid` is a live local runner (not merely a reused pid)."""
    if not pid or pid == os.getpid():
        return False
    try:
        return b"mlops" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


Guard = subprocess.Popen  # a started watchdog: release() lets it go


def start(folder: Path, run_id: str, *, store: str, pgids: list[int],
          since_ms: int | None = None) -> Guard:
    """`since_ms`: where the runs below `run_id` start (else the folder's status.json says)."""
    since = [f"since={since_ms}"] if since_ms is not None else []
    return subprocess.Popen(
        [sys.executable, __file__, str(folder), run_id, store, *since, *map(str, pgids)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)  # a signal to the launcher's group must not reach it


@contextlib.contextmanager
def guarding(folder: Path, run_id: str, store: str) -> Iterator[None]:
    """A run the launcher holds itself (a pipeline's or a sweep's root): if the launcher dies
    without a word, it and every run below it still RUNNING end KILLED."""
    guard = start(folder, run_id, store=store, pgids=[], since_ms=int(time.time() * 1000) - 1000)
    try:
        yield
    finally:
        release(guard)


_released: list[Guard] = []  # told to leave: reaped once they have, or when the runner ends
_reaping: list[bool] = []  # reap() is registered to run at the runner's exit


def also_guard(watchdog: Guard, pgid: int) -> None:
    """A process group the task started later (a mini-batch worker started again)."""
    with contextlib.suppress(OSError):
        watchdog.stdin.write(b"pgid %d\n" % pgid)
        watchdog.stdin.flush()


def release(watchdog: Guard) -> None:
    """The launcher finished the task itself: the watchdog leaves quietly, by itself (a task
    shorter than a watchdog's start does not wait for it to start and end); the runner reaps
    the last ones as it exits."""
    try:
        watchdog.stdin.write(DONE)
        watchdog.stdin.close()
    except OSError:
        watchdog.kill()
    if not _reaping:
        atexit.register(reap)
        _reaping.append(True)
    _released[:] = [w for w in _released if w.poll() is None] + [watchdog]


def reap() -> None:
    for watchdog in _released:
        try:
            watchdog.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watchdog.kill()
    _released.clear()


def end_orphaned_run(store: str, run_id: str, since_ms: int | None) -> None:
    """The run and every run the task opened below it that is still RUNNING: KILLED."""
    from mlops.runtime.mlflow_runs import Tracking
    from mlops.runtime.records import RunStatus

    Tracking(uri=store).finish(run_id, RunStatus.KILLED, since_ms=since_ms, only_running=True)


def take_over(folder: Path, run_id: str, *, store: str, pgids: list[int],
              since_ms: int | None = None) -> None:
    from dataclasses import replace

    from mlops.runtime.launch import stop_group
    from mlops.runtime.records import Status, TaskRecord

    for pgid in pgids:
        stop_group(pgid, 5)
    record = TaskRecord.read(folder)
    try:
        end_orphaned_run(store, run_id, since_ms or (record and record.started_ms))
    finally:  # the record last: once it says Canceled, everything is over
        if record is not None and record.status == Status.RUNNING:
            replace(record, status=Status.CANCELED, exit_code=None,
                    reason="the local runner died (killed without warning)").write(folder)


def main(argv: list[str] | None = None) -> int:
    folder, run_id, store, *pgids = argv if argv is not None else sys.argv[1:]
    since = [int(p.removeprefix("since=")) for p in pgids if p.startswith("since=")]
    pgids = [p for p in pgids if not p.startswith("since=")]
    said = sys.stdin.buffer.read()  # returns at EOF: when the launcher says done, or dies
    if said.endswith(DONE):
        return 0
    pgids += [line[5:] for line in said.decode(errors="replace").splitlines()
              if line.startswith("pgid ") and line[5:].isdigit()]
    time.sleep(0.2)  # let the launcher's own last writes land first
    take_over(Path(folder), run_id, store=store, pgids=[int(p) for p in pgids],
              since_ms=since[0] if since else None)
    return 0


if __name__ == "__main__":
    # the project root in place of this file's folder, whose module names would shadow others
    sys.path[0] = str(Path(__file__).resolve().parents[2])
    sys.exit(main())
