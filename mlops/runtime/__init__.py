"""The one local runtime: every command job, sweep trial, pipeline step and batch run goes through
resolve -> snapshot -> environment -> launch -> collect, as Azure ML runs a job.

A task's folder holds what Azure keeps for a job:
    wd/               its private copy of `code:` (the working directory; outputs/ and logs/ in it)
    inputs/<name>     each data input, bound under a short safe path (Azure mounts INPUT_<name>)
    outputs/<name>    each output (unless a pipeline binds it elsewhere)
    log.txt           stdout and stderr of every process (appended when a job is run again)
    status.json       written when the task starts (Running, its MLflow run id, the runner's pid)
                      and replaced atomically with the outcome and exit code when it ends
Values are substituted into the command raw, as Azure does, so every bound path must be safe in
a shell: the run root is checked once, and every other path is built from names below it.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlops.environments.activation import Environments
from mlops.errors import LocalRunError
from mlops.runtime import debugging, launch, placement, snapshot, watchdog
from mlops.runtime.binding import bind_inputs, bind_outputs, fill_artifacts
from mlops.runtime.environ import process_env, tracking_env
from mlops.runtime.mlflow_runs import Tracking, now_ms
from mlops.runtime.reuse import StepIndex
from mlops.runtime.tasks import Task
from mlops.runtime.values import render_command

FRAME = re.compile(r'^(?:\[process \d+\] )?\s*File "([^"]+)", line \d+')  # a traceback frame
RAISED = re.compile(r"^(?:\[process \d+\] )?(?:[\w.]+\.)?(\w+(?:Error|Exception)):")
VERSION_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError",
                  "SyntaxError", "UnpicklingError"}
# where installed packages live: a site-packages, or a layer's view of .venv's (layers.base_view)
INSTALLED = re.compile(r"/site-packages/|/view-[0-9a-f]{16}/")
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@%=,-]+$")


@dataclass
class Runtime:
    """What every task of one local run shares."""

    root: Path
    max_procs: int
    tracking: Tracking = field(default_factory=Tracking)
    environments: Environments = field(default_factory=Environments)
    sharing: int = 1  # tasks run side by side (a sweep's concurrent trials): they share the cores
    started: bool = False  # a process was launched: the run folder now holds a real run
    force_rerun: bool = False  # pipeline steps run again even where an earlier one matches
    steps: StepIndex | None = None  # completed steps of every run beside this one (reuse.py)
    debug: debugging.DebugRequest | None = None  # DEBUG=: the one process to debug
    debug_taken: bool = False  # that process started: no later task takes it

    def __post_init__(self) -> None:
        if not SAFE_PATH.match(str(self.root)):
            raise LocalRunError(
                f"the run folder {self.root} has characters a shell would split or expand "
                "(Azure substitutes paths into commands unquoted). Pass --run-dir (RUN_DIR=) "
                "with a path of letters, digits and . _ - / only, or move the repository")
        if self.steps is None:
            self.steps = StepIndex(self.root.resolve().parent)


@dataclass
class Running:
    task: Task
    launch: launch.Launch
    run_id: str
    outputs: dict[str, str]
    since_ms: int
    started: float
    guard: watchdog.Guard | None = None  # ends the task if this runner dies without a word
    debugged: bool = False  # one of its processes waits for, or runs under, a debugger


@dataclass
class Result:
    status: str  # Completed, Failed, Canceled, EarlyTerminated, TimedOut
    code: int
    run_id: str
    outputs: dict[str, str]
    seconds: float
    log: Path


def previous_run(folder: Path, rt: Runtime) -> str | None:
    """The MLflow run of an earlier attempt of the task in this folder, to reopen. An attempt
    whose runner died without a word (and whose watchdog died too) is ended first: its runs
    still RUNNING become KILLED. A folder a live runner is using is refused."""
    record = watchdog.read_status(folder)
    if record.get("status") == "Running":
        if watchdog.alive(record.get("pid")):
            raise LocalRunError(f"{folder} is in use by a local run (pid {record['pid']}); "
                                "wait for it, stop it, or use another --run-dir")
        if record.get("mlflow_run_id"):
            rt.tracking.finish(record["mlflow_run_id"], "KILLED", record.get("started_ms"),
                               only_running=True)
    return record.get("mlflow_run_id")


@dataclass
class Prepared:
    """A task resolved and snapshotted, ready for its environment and processes."""

    inputs: dict[str, str | None]
    outputs: dict[str, str]
    command: str
    wd: Path
    overlays: placement.Overlays
    debug: debugging.DebugPlan | None


def prepare(task: Task, rt: Runtime) -> Prepared:
    """Resolve (bind inputs and outputs, render the command) and snapshot `code:`."""
    task.folder.mkdir(parents=True, exist_ok=True)
    inputs = bind_inputs(task.inputs, task.folder)
    outputs = bind_outputs(task.outputs, task.folder)
    command = render_command(task.command, {"inputs": inputs, "outputs": outputs}, task.where)
    wd = task.folder / task.workdir.name
    code_at = wd / task.workdir.code_under if task.workdir.code_under else wd
    snapshot.take(task.code, code_at)
    try:
        overlays = placement.with_gpus(task.placement,
                                       placement.rank_envs(task.placement, rt.max_procs))
    except ValueError as err:
        raise LocalRunError(f"{task.where}: {err}") from None
    debug = None
    if rt.debug is not None and not rt.debug_taken and rt.debug.matches(task.address):
        debug = debugging.plan(rt.debug, len(overlays.envs), wd, code_at, task.code)
        rt.debug_taken = True
    return Prepared(inputs, outputs, command, wd, overlays, debug)


def start(task: Task, rt: Runtime, echo: bool = True, label: str = "") -> Running:
    """Resolve, snapshot, build the environment, open the MLflow run, launch the processes."""
    earlier_run = previous_run(task.folder, rt)  # before anything is written into the folder
    ready = prepare(task, rt)
    run_id = rt.tracking.start(task.experiment, task.name, task.tags, task.parent_run,
                               reopen=earlier_run)
    since = now_ms()
    try:
        base = process_env(task, rt.environments, ready.inputs, ready.outputs,
                           tracking_env(task, rt.tracking, run_id, ready.wd), ready.debug)
    except BaseException:
        rt.tracking.finish(run_id, "FAILED")
        raise
    for notice in (ready.overlays.notice, ready.debug and ready.debug.notice(task.name)):
        if notice:
            print(notice, file=sys.stderr, flush=True)
    distributed = task.placement.distribution is not None
    launch.share_cores(base, rt.sharing * (len(ready.overlays.envs) if distributed else 1))
    command, envs = placement.under_mpirun(ready.command, ready.overlays.envs,
                                           task.placement.distribution, base)
    (task.folder / "command.sh").write_text(command + "\n")
    rt.started = True
    watchdog.write_status(task.folder, {"status": "Running", "mlflow_run_id": run_id,
                                        "pid": os.getpid(), "started_ms": since,
                                        "outputs": ready.outputs})
    job = launch.Launch(command, ready.wd, debugging.overlay(ready.debug, base, envs),
                        task.folder / "log.txt", label, echo, debugging.terminal(ready.debug))
    guard = watchdog.start(task.folder, run_id, rt.tracking.uri, [p.pid for p in job.procs])
    return Running(task, job, run_id, ready.outputs, since, time.monotonic(), guard,
                   ready.debug is not None)


def last_raised(tail) -> str:
    """The exception the last lines of a log end in ("" for none)."""
    raised = [found.group(1) for line in tail if (found := RAISED.search(line))]
    return raised[-1] if raised else ""


def missing_module(tail) -> bool:
    """The log ends in a ModuleNotFoundError: what the environment would have installed."""
    return last_raised(tail) == "ModuleNotFoundError"


def version_error(tail) -> bool:
    """The last lines of a log end in a Python traceback of the kinds a package made for another
    Python raises (an import, an attribute or a signature gone, a pickle of older classes), from
    an installed package (site-packages), not from the job's own code."""
    frames = [found.group(1) for line in tail if (found := FRAME.search(line))]
    return bool(frames) and last_raised(tail) in VERSION_ERRORS and \
        bool(INSTALLED.search(frames[-1]))


def collect(running: Running, rt: Runtime) -> list[str]:
    """Outputs and artifacts into place; what the machine refused (a full disk), as lines."""
    faults = [f"{running.launch.log}: {running.launch.log_error.strerror}"] \
        if running.launch.log_error else []
    wd = running.task.folder / running.task.workdir.name
    try:
        fill_artifacts(running.task.command, wd, running.outputs)
        rt.tracking.log_artifacts(running.run_id, wd, running.launch.log)
    except OSError as err:
        faults.append(f"collecting outputs and artifacts: {err.strerror} ({err.filename})")
    for fault in faults:
        print(f"warning: {running.task.name}: {fault}", file=sys.stderr)
    return faults


def finish(running: Running, rt: Runtime, status: str | None = None) -> Result:
    """Collect: stop what is left, upload artifacts, record the outcome in MLflow and on disk."""
    job = running.launch
    code = job.poll()
    if code is None:
        job.stop()
        code = job.poll()
    job.close()
    faults = collect(running, rt)
    status = status or ("Completed" if code == 0 else "Failed")
    caveat = rt.environments.caveat(running.task.where)
    if status == "Failed" and caveat and version_error(job.tail):
        print(caveat, file=sys.stderr)
    undefined = rt.environments.undefined_note(running.task.where)
    if status == "Failed" and undefined and missing_module(job.tail):
        print(undefined, file=sys.stderr)
    mlflow_status = {"Completed": "FINISHED", "Failed": "FAILED"}.get(status, "KILLED")
    rt.tracking.finish(running.run_id, mlflow_status, running.since_ms, job.ended_ms)
    rt.environments.release(running.task.folder)
    seconds = time.monotonic() - running.started
    record = {"status": status, "exit_code": code, "mlflow_run_id": running.run_id,
              "seconds": round(seconds, 3), "outputs": running.outputs,
              **({"faults": faults} if faults else {})}
    try:
        watchdog.write_status(running.task.folder, record)
    except OSError as err:
        print(f"error: {running.task.folder / watchdog.STATUS}: {err.strerror}; "
              f"{running.task.name} ended {status} (exit {code})", file=sys.stderr)
    if running.guard is not None:
        watchdog.release(running.guard)
    return Result(status, code, running.run_id, running.outputs, seconds, job.log)


def run(task: Task, rt: Runtime, echo: bool = True, label: str = "") -> Result:
    """Start a task and wait for it; Ctrl-C (or SIGTERM/SIGHUP) stops it and records KILLED."""
    running = start(task, rt, echo, label)
    until = running.started + task.timeout if task.timeout and not running.debugged else None
    try:
        if running.launch.wait(until) is None:
            print(f"\n{task.where}: limits.timeout of {task.timeout:g} s reached: canceling "
                  f"{task.name}, as Azure cancels a job that runs longer", file=sys.stderr)
            running.launch.stop()
            canceled = finish(running, rt, "Canceled")
            return canceled if canceled.code else replace(canceled, code=1)  # never a success
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping {task.name} ...", file=sys.stderr)
        running.launch.stop()
        finish(running, rt, "Canceled")
        raise
    return finish(running, rt)
