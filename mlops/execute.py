"""Start, watch and stop the processes of a local run; create its MLflow runs as Azure would.

Each command runs under bash in its own process group (so a stop reaches torchrun's children
too), with stdout and stderr written to a log file and, optionally, echoed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

STOP_GRACE_S = 10


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path
    reader: threading.Thread
    tail: deque = field(default_factory=lambda: deque(maxlen=40))


def start(name: str, command: str, cwd: Path, env: dict, log: Path, echo: bool) -> Process:
    log.parent.mkdir(parents=True, exist_ok=True)
    popen = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1,
                             start_new_session=True)
    tail: deque = deque(maxlen=40)

    def pump() -> None:
        with log.open("w") as handle:
            for line in popen.stdout:
                handle.write(line)
                handle.flush()
                tail.append(line.rstrip("\n"))
                if echo:
                    sys.stdout.write(f"[{name}] {line}" if name else line)
                    sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return Process(name, popen, log, reader, tail)


def stop(process: Process, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the whole process group, then SIGKILL whatever is left after the grace period."""
    if process.popen.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.popen.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.popen.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait(process: Process) -> int:
    try:
        code = process.popen.wait()
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping {process.name or 'the job'} ...", file=sys.stderr)
        stop(process)
        raise
    process.reader.join(timeout=5)
    return code


class Tracking:
    """MLflow runs for local jobs: the spec's experiment and display name, tagged with the spec."""

    def __init__(self) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()

    def start(self, experiment: str, name: str, tags: dict, parent: str | None = None) -> str:
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        tags = {**tags, **({"mlflow.parentRunId": parent} if parent else {})}
        return self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id

    def finish(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def history(self, run_id: str, metric: str) -> list[float]:
        points = self.client.get_metric_history(run_id, metric)
        return [p.value for p in sorted(points, key=lambda p: (p.step, p.timestamp))]
