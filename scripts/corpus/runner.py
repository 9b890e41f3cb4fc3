"""How a case runs: the one place that turns a case into the commands a user would type.

Today those are the local runtime's front doors (`python -m mlops.run|serve|batch|assets`);
when the `azml` CLI lands, `door()` is the one function to change. A front door is started as
an installed console script starts (`python -P`: the folder it runs from is not put on
sys.path first), so a repository with a folder of the runtime's own package name (`mlops/`,
which every mlops-v2 template has) does not hide it.

Each command runs from the case's folder with the case's variables, in a session of its own,
writing to the case's log; past its deadline its whole process group is stopped (SIGTERM,
then SIGKILL), and a log growing past `max_log_bytes` stops it too, so a case can neither hang
the corpus nor fill the disk.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from corpus.manifest import Case

GRACE_S = 15  # SIGTERM -> SIGKILL: the runtime stops its job and ends its MLflow runs first
TAIL_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where a case runs: its checkout, its folder, its stand-in map, its variables, its log."""

    root: Path  # the repository's checkout
    cwd: Path
    asset_map: Path
    env: dict[str, str]
    log: Path
    max_log_bytes: int = 50 * 1024 * 1024


@dataclass(frozen=True)
class Finished:
    code: int | None  # None: stopped (deadline, or the log's limit)
    seconds: float
    stopped: str = ""  # why it was stopped: "timeout", "log limit"


def door(name: str, *args: str) -> list[str]:
    """The command line of a front door of the local runtime (azml's verbs later)."""
    return [sys.executable, "-P", "-m", f"mlops.{name}", *args]


def setup_command(spec: str, place: Place) -> list[str]:
    """`az ml <kind> create -f <spec>`: the kind as the manifest says it ("data:x.yml")."""
    kind, _, path = spec.rpartition(":")
    return door("assets", "create", *([kind] if kind else []), "-f", path, "--assets",
                str(place.asset_map))


def job_command(case: Case, place: Place) -> list[str]:
    sets = [arg for value in case.sets for arg in ("--set", value)]
    return door("run", case.path, "--assets", str(place.asset_map), *sets)


def online_commands(case: Case, place: Place, port: int,
                    request: str) -> tuple[list[str], list[str], list[str]]:
    """start, invoke, stop: `az ml online-deployment create` and `online-endpoint invoke`."""
    start = door("serve", "start", "--deployment", case.path, "--port", str(port),
                 "--all-traffic", "1", "--assets", str(place.asset_map))
    invoke = door("serve", "invoke", "--request", request)
    return start, invoke, door("serve", "stop")


def batch_command(case: Case, place: Place, input_path: str) -> list[str]:
    kind = ["--input-type", case.input_type] if case.input_type == "mltable" else []
    return door("batch", case.path, "--input", input_path, *kind, "--assets",
                str(place.asset_map))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def execute(argv: list[str], place: Place, deadline: float) -> Finished:
    """Run one command to its end or its deadline (time.monotonic()), output to the log."""
    started = time.monotonic()
    place.log.parent.mkdir(parents=True, exist_ok=True)
    with open(place.log, "ab") as log:
        shown = argv[3:] if argv[1:3] == ["-P", "-m"] else argv
        log.write(f"\n$ {' '.join(shown)}\n".encode())
        log.flush()
        process = subprocess.Popen(argv, cwd=place.cwd, env=place.env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    stopped = watch(process, place, deadline)
    code = process.wait() if not stopped else None
    return Finished(code, time.monotonic() - started, stopped)


def watch(process: subprocess.Popen, place: Place, deadline: float) -> str:
    """Wait for the process; stop its group at the deadline or the log's limit ("" if it
    ended by itself)."""
    while True:
        try:
            process.wait(timeout=1.0)
            return ""
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() > deadline:
            stop_group(process)
            return "timeout"
        if place.log.stat().st_size > place.max_log_bytes:
            stop_group(process)
            return "log limit"


def stop_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(log: Path, size: int = TAIL_BYTES) -> str:
    """The end of a log, at most `size` bytes of it."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - size))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def head(log: Path, size: int = TAIL_BYTES) -> str:
    """The start of a log, at most `size` bytes of it."""
    try:
        with open(log, "rb") as handle:
            return handle.read(size).decode(errors="replace")
    except OSError:
        return ""
