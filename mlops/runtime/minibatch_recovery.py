"""A mini-batch worker killed by a signal (kill -9, the OOM killer, a crash in native code),
as Azure's batch driver treats one: its agent starts the process again (init() runs again), the
mini-batch the dead process held goes back to the queue, a try of its retry_settings spent
(its dequeue count, `run_max_try`: max_retries + 1 tries in all); past them, its files count as
failed and error_threshold decides, as for a run() that raises. The process is started again at
most max_retries + 1 times in a row without a mini-batch done in between (an init() that
crashes every time): then the run stops. A process that ends by itself with work left (init()
raised, the script called exit) stops the run at once, its traceback in the log.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mlops.runtime import launch, watchdog
from mlops.runtime.minibatch_worker import write_whole
from mlops.runtime.service import alive


@dataclass(kw_only=True)
class Recovery:
    """What the driver knows of the workers' deaths: each mini-batch's tries lost to one, and
    the deaths since the last mini-batch done."""

    work: Path
    max_retries: int
    guard: watchdog.Guard | None = None
    lost: dict[str, int] = field(default_factory=dict)  # mini-batch id -> tries a death took
    handled: set[int] = field(default_factory=set)  # pids whose death was dealt with
    in_a_row: int = 0
    done: int = 0

    def after_deaths(self, job: launch.Launch, done: int) -> str:
        """Each process that died since the last look started again, its mini-batch queued
        again or failed; why the run stops instead ("": it goes on)."""
        if done > self.done:
            self.done, self.in_a_row = done, 0
        job.poll()  # each ended process's code (and its orphans stopped)
        for rank, popen in enumerate(job.procs):
            code = popen.returncode
            code = 128 - code if code is not None and code < 0 else code
            if code is None or code <= 128 or popen.pid in self.handled:
                continue  # running, or ended by itself (init() raised: the run stops)
            self.handled.add(popen.pid)
            said = self._release_claims()
            self.in_a_row += 1
            if self.in_a_row > self.max_retries + 1:
                return (f"process {rank} ended ({launch.ending(code)}) {self.in_a_row} times "
                        "without a mini-batch done in between: stopping")
            pid = job.restart(rank)
            if self.guard is not None:
                watchdog.also_guard(self.guard, pid)
            print(f"\nprocess {rank} ended ({launch.ending(code)}){said}; started again",
                  flush=True)
        return ""

    def _release_claims(self) -> str:
        """Every mini-batch a dead process held: back to the queue, or failed past its tries."""
        said = ""
        for claimed in sorted((self.work / "claimed").glob("*.json.*")):
            name, _, pid = claimed.name.rpartition(".")
            ident = name.removesuffix(".json")
            if not pid.isdigit() or alive(int(pid)) or \
                    (self.work / "results" / f"{ident}.json").exists():
                continue  # (held by a live process, or done: a claim stays where it was)
            self.lost[ident] = tries = self.lost.get(ident, 0) + 1
            if tries > self.max_retries:
                _failed(self.work, claimed, ident, tries)
                said += f"; mini-batch {ident} failed: {tries} tries ended with its process"
            else:
                os.rename(claimed, self.work / "todo" / name)
                said += f"; mini-batch {ident} queued again (try {tries + 1} of " \
                        f"{self.max_retries + 1})"
        return said


def _failed(work: Path, claimed: Path, ident: str, tries: int) -> None:
    """The mini-batch's outcome as a worker writes one for a run() that failed every try."""
    batch = json.loads(claimed.read_text())
    items = batch.get("rows", 0) if isinstance(batch, dict) else len(batch)
    outcome = {"items": items, "returned": 0, "attempts": tries,
               "error": f"its process ended during each of {tries} tries"}
    write_whole(work / "results" / f"{ident}.txt", "")
    write_whole(work / "results" / f"{ident}.json", json.dumps(outcome))  # the counts last
    claimed.unlink()

