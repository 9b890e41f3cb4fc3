"""The one mini-batch driver, for batch deployments and `type: parallel` pipeline nodes alike.

The work is cut into mini-batches (lists of files, or tables) queued as files under
`<task>/work/todo`; the task's processes (`Placement.copies` of them) each run
minibatch_worker.py, which imports the scoring or entry script, calls init() once and run() on
every mini-batch it claims (an atomic rename, so no two share one), with retries and a timeout
per call. Here the driver watches the results, stops the processes once errors pass Azure's
thresholds (error_threshold: failed files or rows; mini_batch_error_threshold: failed
mini-batches; -1: never), and writes the rows run() returned in mini-batch order.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mlops.runtime import engine, launch
from mlops.runtime.minibatch_recovery import Recovery
from mlops.runtime.records import Status
from mlops.runtime.tasks import Task

QUEUES = ("todo", "claimed", "results", "agents")  # agents: the workers' processNNN names


@dataclass(frozen=True)
class Retry:
    """retry_settings: tries after the first, and seconds each run() call may take."""

    max_retries: int
    timeout: int

    @classmethod
    def from_spec(cls, data, default: Retry) -> Retry:
        data = data if isinstance(data, dict) else {}
        return cls(int(data.get("max_retries", default.max_retries)),
                   int(data.get("timeout", default.timeout)))


@dataclass(frozen=True)
class Limits:
    """When Azure stops the run: more failed items, or mini-batches, than these (-1: never)."""

    error_threshold: int = -1
    mini_batch_error_threshold: int = -1
    max_retries: int = 3  # retry_settings: the tries a mini-batch has after its first

    @classmethod
    def from_spec(cls, data: dict[str, object], retry: Retry) -> Limits:
        return cls(int(data.get("error_threshold", -1)),
                   int(data.get("mini_batch_error_threshold", -1)), retry.max_retries)


@dataclass(frozen=True)
class Tally:
    """What the processes did with the mini-batches."""

    items: int  # files or rows queued
    failed: int  # not scored: run() raised, returned no row for them, or never got them
    failed_batches: int

    @property
    def scored(self) -> int:
        return self.items - self.failed


@dataclass(frozen=True)
class Listing:
    """An input folder's files to score, and the entries that are not files, with why."""

    files: list[str]
    skipped: list[str]  # "<path> (a FIFO)", ... named once in the run's output

    def notice(self) -> str:
        if not self.skipped:
            return ""
        shown = ", ".join(self.skipped[:10]) + (" ..." if len(self.skipped) > 10 else "")
        what = "entry is" if len(self.skipped) == 1 else "entries are"
        return f"note: {len(self.skipped)} input {what} not files and not scored: {shown}"


def list_files(source: Path) -> Listing:
    """Every regular file under `source` (links to files and folders followed; names kept as
    the file system has them, bytes that are not UTF-8 included), and what is not one."""
    files, skipped, seen = [], [], set()
    for folder, dirs, names in os.walk(source, followlinks=True):
        seen.add(os.path.realpath(folder))
        kept = []
        for name in sorted(dirs):
            path = os.path.join(folder, name)
            real = os.path.realpath(path)
            if real in seen or os.path.realpath(folder).startswith(real + os.sep):
                skipped.append(f"{path} (a link loop)")
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(names):
            path = os.path.join(folder, name)
            why = _not_a_file(path)
            (skipped if why else files).append(f"{path} ({why})" if why else path)
    return Listing(sorted(files), skipped)


KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
         (stat.S_ISBLK, "a device"))


def _not_a_file(path: str) -> str:
    """"" for a readable regular file (or a link to one), else what it is."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        return "a link loop" if err.errno == errno.ELOOP else f"unreadable: {err.strerror}"
    if stat.S_ISREG(mode):
        return "" if os.access(path, os.R_OK) else "unreadable: permission denied"
    return next((name for test, name in KINDS if test(mode)), "not a file")


@dataclass(frozen=True)
class Driven:
    result: engine.Result
    tally: Tally
    seconds: float


def worker_command(work: Path, script: str, retry: Retry, arguments: str = "") -> str:
    """The command each process runs: the worker around the script (`arguments`: the script's
    own command line, a parallel job's program_arguments)."""
    command = (f"python -m _mlops_minibatch_worker {work} {shlex.quote(script)} "
               f"--retries {retry.max_retries} --timeout {retry.timeout}")
    return f"{command} -- {arguments}".strip() if arguments else command


def processes(requested: int, max_procs: int, where: str) -> int:
    """instance_count x max_concurrency_per_instance, capped by this machine with a notice."""
    if requested > max_procs:
        print(f"note: {where}: {requested} processes requested, running {max_procs} on this "
              "machine (--max-procs)", file=sys.stderr)
    return max(1, min(requested, max_procs))


QUEUED = "queued"  # written once every mini-batch is in todo/: workers stop at an empty queue


def open_queue(work: Path) -> None:
    """An empty queue: what an earlier attempt left is dropped."""
    for name in QUEUES:
        (work / name).mkdir(parents=True, exist_ok=True)
        for stale in (work / name).glob("*"):
            stale.unlink()
    (work / QUEUED).unlink(missing_ok=True)


def queue(batches: list, work: Path) -> int:
    """The mini-batches into the queue, in order, each written whole before a worker can claim
    it, then the mark that the queue is complete."""
    for index, batch in enumerate(batches):
        staged = work / "todo" / f"{index:06d}.tmp"
        staged.write_text(json.dumps(batch))
        os.replace(staged, work / "todo" / f"{index:06d}.json")
    (work / QUEUED).write_text(str(len(batches)))
    return len(batches)


@dataclass(kw_only=True)
class Results:
    """The outcomes the processes have written so far, each read once: a poll lists the
    folder and reads only what is new, so watching costs the same at the last mini-batch
    as at the first (the scoring processes need the cores)."""

    folder: Path
    seen: set[str] = field(default_factory=set)
    done: int = 0  # mini-batches
    scored: int = 0  # items handed to run()
    failed: int = 0  # items run() returned no row for
    failed_batches: int = 0

    def read(self) -> Results:
        for name in sorted(set(os.listdir(self.folder)) - self.seen):
            self.seen.add(name)  # each name is written whole (renamed into place), once
            if name.endswith(".json"):  # a mini-batch's counts, written after its rows
                outcome = json.loads((self.folder / name).read_text())
                self.done += 1
                self.scored += outcome["items"]
                self.failed += outcome["items"] - outcome["returned"]
                self.failed_batches += bool(outcome.get("error"))
        return self


def tally(work: Path, items: int) -> Tally:
    """Items never handed to run() (the run stopped first) count as failed, as on Azure."""
    results = Results(folder=work / "results").read()
    return Tally(items, results.failed + items - results.scored, results.failed_batches)


POLL_S = 0.05  # how often the driver looks for results (a process's end wakes it at once)


def over_limit(results: Results, limits: Limits) -> str:
    """Why the run stops for its errors ("": it goes on), as Azure's thresholds say."""
    if 0 <= limits.error_threshold < results.failed:
        return (f"error_threshold {limits.error_threshold} exceeded ({results.failed} failed "
                "files): stopping")
    if 0 <= limits.mini_batch_error_threshold < results.failed_batches:
        return (f"mini_batch_error_threshold {limits.mini_batch_error_threshold} exceeded "
                f"({results.failed_batches} failed mini-batches): stopping")
    return ""


def watch(running: engine.Running, total: int, items: int, limits: Limits) -> Status:
    """Progress until every mini-batch is done, the processes end, or errors pass a limit."""
    started, shown, tty = time.monotonic(), (-1, 0.0), sys.stdout.isatty()
    results = Results(folder=running.task.folder / "work" / "results")
    recovery = Recovery(work=running.task.folder / "work", max_retries=limits.max_retries,
                        guard=running.guard)
    while True:
        launch.check_interrupt()
        scored, failed = results.read().scored, results.failed
        elapsed = time.monotonic() - started
        if scored != shown[0] and (tty or elapsed - shown[1] >= 5 or results.done == total):
            line = f"{scored}/{items} files, {scored / max(elapsed, 1e-6):.1f}/s, {failed} failed"
            print(f"\r{line}" if tty else line, end="" if tty else "\n", flush=True)
            shown = (scored, elapsed)
        stop = over_limit(results, limits) or recovery.after_deaths(running.launch,
                                                                     results.done)
        if stop:
            print(f"\n{stop}")
            return Status.FAILED
        if results.done == total:
            return Status.COMPLETED
        if running.launch.poll() is not None:  # they ended with work left (init(), a crash)
            print(f"\n{ended_early(running.launch, total - results.done)}", flush=True)
            return Status.FAILED
        running.launch.nap(POLL_S)


def ended_early(launched: launch.Launch, left: int) -> str:
    """Why the run stops with mini-batches left: which process ended first, and how."""
    if launched.first_failed is None:
        return f"the scoring processes ended with {left} mini-batches left: stopping"
    return (f"process {launched.first_failed} ended ({launch.ending(launched.first_failure)}) "
            f"with {left} mini-batches left: stopping")


@dataclass(frozen=True, kw_only=True)
class Batches:
    """The work of a drive: the mini-batches, how many items they hold, when to stop."""

    batches: list
    items: int
    limits: Limits


Plan = Callable[[], Batches]


@dataclass(frozen=True)
class Hooks:
    """What the caller of a drive is told: `announce`, once the work is known (the processes
    started); `settled`, once every mini-batch is done or the run stopped, with the run's id,
    the tally and the seconds the work took, while the processes exit, so what needs only
    the results (the rows, the run's metrics) does not wait for them."""

    announce: Callable[[engine.Running], None] | None = None
    settled: Callable[[str, Tally, float], None] | None = None


def drive(task: Task, rt: engine.Runtime, work: Batches | Plan, *, label: str = "",
          echo: bool = True, hooks: Hooks = Hooks()) -> Driven:
    """Start the task's processes, queue the mini-batches, watch them, collect the outcome.
    `work`: the mini-batches, or what reads the input into them, called once the processes
    have started: they import the script and run init() meanwhile, and the first of them
    scores the first mini-batch as soon as both are ready. An error while reading the input
    ends the run (FAILED) and is raised."""
    folder = task.folder / "work"
    open_queue(folder)
    running = engine.start(task, rt, echo=echo, label=label)
    running.launch.fail_fast = False  # a killed worker is started again (minibatch_recovery)
    started = time.monotonic()
    try:
        work = work() if callable(work) else work
        total = queue(work.batches, folder)
        if hooks.announce is not None:
            hooks.announce(running)
        status = watch(running, total, work.items, work.limits)
    except BaseException as err:
        running.launch.stop()
        engine.finish(running, rt, Status.CANCELED if isinstance(err, KeyboardInterrupt)
                      else Status.FAILED)
        raise
    seconds = time.monotonic() - started
    if status == Status.FAILED and running.launch.poll() is None:
        running.launch.stop()
    counted = tally(folder, work.items)  # final: every mini-batch done, or no process left
    try:
        if hooks.settled is not None:
            hooks.settled(running.run_id, counted, seconds)
    finally:  # the processes' end (their last words in the log), then the run's
        running.launch.wait()
        result = engine.finish(running, rt, status)
    return Driven(result, counted, seconds)


def write_rows(work: Path, target: Path) -> Path:
    """append_row: every mini-batch's rows, in mini-batch order, into `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:  # bytes: file names that are not UTF-8 stay as they are
        for part in sorted((work / "results").glob("*.txt")):
            out.write(part.read_bytes())
    return target
