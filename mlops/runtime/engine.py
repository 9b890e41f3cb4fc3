"""The one local runtime: every command job, sweep trial, pipeline step, Spark job, batch run and
local endpoint goes through the same five stages, as Azure ML runs a job:

    resolve      bind inputs and outputs under the task's folder, render the command, place
                 its processes (a distribution's ranks, a driver's workers), pick the one to debug
    snapshot     copy `code:` into the working directory, as Azure uploads it
    environment  the environment's cached layers and a fresh top layer (environments/)
    launch       the MLflow run, the process variables (environ.py), the processes (launch.py),
                 status.json and the watchdog
    collect      outputs and artifacts into place, the outcome into MLflow and status.json

A task's folder holds what Azure keeps for a job:
    wd/               its private copy of `code:` (the working directory; outputs/ and logs/ in it)
    inputs/<name>     each data input, bound under a short safe path (Azure mounts INPUT_<name>)
    outputs/<name>    each output (unless a pipeline binds it elsewhere)
    log.txt           stdout and stderr of every process (appended when a job is run again)
    status.json       Running (its MLflow run id, the runner's pid), then the outcome (records.py)
Values are substituted into the command raw, as Azure does, so every bound path must be safe in
a shell: the run root is checked once, and every other path is built from names below it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlops.environments.activation import Activation, Environments
from mlops.errors import LocalRunError
from mlops.runtime import debugging, launch, localize, placement, reuse, snapshot, watchdog
from mlops.runtime.aliases import is_safe, shell_path
from mlops.runtime.binding import bind_inputs, bind_outputs, fill_artifacts
from mlops.runtime.environ import process_env, tracking_env
from mlops.runtime.failures import explain
from mlops.runtime.mlflow_runs import OpenRun, Tracking
from mlops.runtime.records import RunStatus, Status, TaskRecord
from mlops.runtime.reuse import StepIndex
from mlops.runtime.selection import Selection
from mlops.runtime.service import Service
from mlops.runtime.tasks import Task
from mlops.runtime.values import render_command


@dataclass(kw_only=True)
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
    explain: bool = False  # --explain: every step's whole key diff under its line
    selection: Selection | None = None  # --from / --only: the steps that run (selection.py)

    @property
    def shown(self) -> Path:
        """The run folder as its user knows it (`root` may be a link to it: aliases.py)."""
        return self.root.resolve()

    def __post_init__(self) -> None:
        if not is_safe(self.root):  # front doors pass aliases.safe_root(): never seen
            raise LocalRunError(f"the run folder {self.root} has characters a shell would split "
                                "(Azure substitutes paths into commands unquoted)")
        if self.steps is None:
            self.steps = StepIndex(self.root.resolve().parent)


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """A task resolved: its inputs' and outputs' paths, its command, where it runs, and its
    processes' variables (one overlay each)."""

    inputs: dict[str, str | None]
    outputs: dict[str, str]
    command: str
    wd: Path
    code_at: Path  # where the snapshot holds `code:` (the working directory, or under it)
    overlays: placement.Overlays
    debug: debugging.DebugPlan | None


@dataclass(kw_only=True)
class Running:
    """A task whose processes run."""

    task: Task
    launch: launch.Launch
    run: OpenRun
    outputs: dict[str, str]
    started: float
    guard: watchdog.Guard | None = None  # ends the task if this runner dies without a word
    debugged: bool = False  # one of its processes waits for, or runs under, a debugger

    @property
    def run_id(self) -> str:
        return self.run.run_id


@dataclass(frozen=True, kw_only=True)
class Result:
    """How a task ended."""

    status: Status
    code: int
    run_id: str
    outputs: dict[str, str]
    seconds: float
    log: Path


# ---- the stages ----------------------------------------------------------------------------

def resolve(task: Task, rt: Runtime) -> Resolved:
    """Bind inputs and outputs, render the command, place the processes, plan the debugger."""
    task.folder.mkdir(parents=True, exist_ok=True)
    inputs = bind_inputs(task.inputs, task.folder)
    outputs = bind_outputs(task.outputs, task.folder)
    command = render_command(task.command, {"inputs": inputs, "outputs": {
        name: shell_path(path) for name, path in outputs.items()}}, task.where)
    wd = task.folder / task.workdir.name
    code_at = wd / task.workdir.code_under if task.workdir.code_under else wd
    try:
        overlays = placement.with_gpus(task.placement,
                                       placement.rank_envs(task.placement, rt.max_procs))
    except ValueError as err:
        raise LocalRunError(f"{task.where}: {err}") from None
    debug = None
    if rt.debug is not None and not rt.debug_taken and rt.debug.matches(task.address):
        debug = debugging.plan(rt.debug, len(overlays.envs), wd=wd, code=code_at, source=task.code)
        rt.debug_taken = True
    return Resolved(inputs=inputs, outputs=outputs, command=command, wd=wd, code_at=code_at,
                    overlays=overlays, debug=debug)


def take_snapshot(task: Task, resolved: Resolved) -> None:
    """`code:` into the working directory, as Azure uploads it (and a Spark job's files and
    archives where its executors find them)."""
    snapshot.take(task.code, resolved.code_at, includes=task.includes)
    for warning in localize.place(task.localized, resolved.code_at, task.where):
        print(warning, file=sys.stderr, flush=True)


def environment(task: Task, rt: Runtime, resolved: Resolved) -> Activation:
    """The environment's layers, and a fresh top layer (with the debugger's hook when one of the
    task's processes is debugged)."""
    activation = rt.environments.activate(task.environment, task.folder, task.where)
    if resolved.debug is not None:
        debugging.install_hook(activation.top_site, activation.python, resolved.debug)
    return activation


def launch_processes(task: Task, rt: Runtime, resolved: Resolved,
                     variables: dict[str, str], *, echo: bool, label: str) -> launch.Launch:
    """The task's processes, each with its variables; the command as run in command.sh."""
    for notice in (resolved.overlays.notice,
                   resolved.debug and resolved.debug.notice(task.name)):
        if notice:
            print(notice, file=sys.stderr, flush=True)
    distributed = task.placement.distribution is not None
    launch.share_cores(variables, rt.sharing * (len(resolved.overlays.envs)
                                                if distributed else 1))
    command, envs = placement.under_mpirun(resolved.command, resolved.overlays.envs,
                                           task.placement.distribution, variables)
    (task.folder / "command.sh").write_text(command + "\n")
    rt.started = True
    return launch.Launch(command=command, cwd=resolved.wd,
                         envs=debugging.overlay(resolved.debug, variables, envs),
                         log=task.folder / "log.txt", label=label, echo=echo,
                         terminal=debugging.terminal(resolved.debug)).start()


def collect(running: Running, rt: Runtime) -> list[str]:
    """Outputs and artifacts into place; what the machine refused (a full disk), as lines (the
    log's fault was said when it happened; a collection's is said here)."""
    faults = [f"{running.launch.log}: {running.launch.log_error.strerror}"] \
        if running.launch.log_error else []
    wd = running.task.folder / running.task.workdir.name
    try:
        fill_artifacts(running.task.command, wd, running.outputs)
        rt.tracking.log_artifacts(running.run_id, wd, running.launch.log)
    except OSError as err:
        faults.append(f"collecting outputs and artifacts: {err.strerror} ({err.filename})")
        print(f"warning: {running.task.name}: {faults[-1]}", file=sys.stderr)
    return faults


# ---- a task, start to end -------------------------------------------------------------------

def previous_run(folder: Path, rt: Runtime) -> str | None:
    """The MLflow run of an earlier attempt of the task in this folder, to reopen. An attempt
    whose runner died without a word (and whose watchdog died too) is ended first: its runs
    still RUNNING become KILLED. A folder a live runner is using is refused."""
    record = TaskRecord.read(folder)
    if record is None:
        return None
    if record.status == Status.RUNNING:
        if watchdog.alive(record.pid):
            raise LocalRunError(f"{folder} is in use by a local run (pid {record.pid}); "
                                "wait for it, stop it, or use another --run-dir")
        if record.mlflow_run_id:
            rt.tracking.finish(record.mlflow_run_id, RunStatus.KILLED, since_ms=record.started_ms,
                               only_running=True)
    return record.mlflow_run_id


def start(task: Task, rt: Runtime, *, echo: bool = True, label: str = "") -> Running:
    """Resolve, snapshot, build the environment, open the MLflow run, launch the processes."""
    earlier_run = previous_run(task.folder, rt)  # before anything is written into the folder
    resolved = resolve(task, rt)
    take_snapshot(task, resolved)
    run = rt.tracking.open(task.experiment, task.name, task.tags, parent=task.parent_run,
                           reopen=earlier_run, process=True)
    with run:  # an error before the processes start ends the run FAILED (KILLED: Ctrl-C)
        activation = environment(task, rt, resolved)
        store = rt.tracking.serve()  # the launch stage starts the tracking server, if needed
        variables = process_env(task, activation, inputs=resolved.inputs,
                                outputs=resolved.outputs,
                                extra=tracking_env(task, rt.tracking, run.run_id, resolved.wd,
                                                   uri=store))
        job = launch_processes(task, rt, resolved, variables, echo=echo, label=label)
    guard = watchdog.start(task.folder, run.run_id, store=rt.tracking.uri,
                           pgids=[p.pid for p in job.procs])
    TaskRecord(status=Status.RUNNING, mlflow_run_id=run.run_id, pid=os.getpid(),
               started_ms=run.since_ms, outputs=resolved.outputs,
               watchdog=guard.pid).write(task.folder)
    return Running(task=task, launch=job, run=run, outputs=resolved.outputs,
                   started=time.monotonic(), guard=guard, debugged=resolved.debug is not None)


def finish(running: Running, rt: Runtime, status: Status | None = None) -> Result:
    """Collect: stop what is left, upload artifacts, record the outcome in MLflow and on disk.
    `status`: how the runner ended it (None: as its processes did)."""
    job = running.launch
    code = job.poll()
    if code is None:
        job.stop()
        code = job.poll()
    job.close()
    faults = collect(running, rt)
    status = status or (Status.COMPLETED if code == 0 else Status.FAILED)
    if status == Status.FAILED:
        for note in explain(rt.environments, running.task.where, job.tail):
            print(note, file=sys.stderr)
    seconds = time.monotonic() - running.started
    try:  # the outcome is recorded on disk even when MLflow cannot take it (a full store)
        running.run.close(status, job.ended_ms)
    finally:
        rt.environments.release(running.task.folder)
        try:
            TaskRecord(status=status, mlflow_run_id=running.run_id, exit_code=code,
                       seconds=round(seconds, 3), outputs=running.outputs,
                       faults=faults).write(running.task.folder)
        except OSError as err:
            print(f"error: {running.task.folder / 'status.json'}: {err.strerror}; "
                  f"{running.task.name} ended {status} (exit {code})", file=sys.stderr)
        if running.guard is not None:
            watchdog.release(running.guard)
    return Result(status=status, code=code, run_id=running.run_id, outputs=running.outputs,
                  seconds=seconds, log=job.log)


def run(task: Task, rt: Runtime, *, echo: bool = True, label: str = "") -> Result:
    """Start a task and wait for it; Ctrl-C (or SIGTERM/SIGHUP) stops it and records KILLED."""
    running = start(task, rt, echo=echo, label=label)
    until = running.started + task.timeout if task.timeout and not running.debugged else None
    try:
        if running.launch.wait(until) is None:
            print(f"\n{task.where}: limits.timeout of {task.timeout:g} s reached: canceling "
                  f"{task.name}, as Azure cancels a job that runs longer", file=sys.stderr)
            running.launch.stop()
            canceled = finish(running, rt, Status.CANCELED)
            return canceled if canceled.code else replace(canceled, code=1)  # never a success
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopping {task.name} ...", file=sys.stderr)
        running.launch.stop()
        finish(running, rt, Status.CANCELED)
        raise
    return finish(running, rt)


def run_step(task: Task, rt: Runtime, *, rules: reuse.StepRules, label: str = "",
             runs: Callable[[], Result] | None = None) -> Result:
    """A pipeline step: reused as Azure reuses one (reuse.py) when an earlier completed step
    has its key, else run (`runs`, else as a task), and recorded for later runs when it
    completes; either way one line says why (with --explain, the whole key diff)."""
    decision = rt.steps.decide(task, rt.environments.env_map, rules)
    print(f"step {task.name}: {decision.line}", flush=True)
    if rt.explain:
        print("".join(f"    {line}\n" for line in decision.details), end="", flush=True)
    if decision.earlier is not None:
        linked = reuse.link_step(task, decision.earlier, rt.tracking)
        rt.steps.linked(decision, task.folder, rules)
        return Result(status=Status.REUSED, code=0, run_id=linked.run_id, outputs=linked.outputs,
                      seconds=0.0, log=decision.earlier.folder / "log.txt")
    result = runs() if runs is not None else run(task, rt, label=label)
    if result.status == Status.COMPLETED:
        rt.steps.record(decision, task.folder, result.run_id, rules)
    return result


def start_service(task: Task, rt: Runtime, about: list[str]) -> Service:
    """A server left running (the local endpoint): the same stages, no MLflow run (a deployment
    has none on Azure), launched detached into its own process group; the log starts with
    `about` and the environment it runs in."""
    resolved = resolve(task, rt)
    take_snapshot(task, resolved)
    activation = environment(task, rt, resolved)
    variables = debugging.overlay(resolved.debug, process_env(
        task, activation, inputs=resolved.inputs, outputs=resolved.outputs), [{}])[0]
    if resolved.debug is not None:
        print(resolved.debug.notice(task.name).replace("waits for", "listens for"), flush=True)
    (task.folder / "command.sh").write_text(resolved.command + "\n")
    rt.started = True
    lines = [*about, f"environment: {activation.label}"]
    with launch.signals_held():  # the server is recorded before a signal unwinds anything
        job = launch.Launch(command=resolved.command, cwd=resolved.wd, envs=[variables],
                            log=task.folder / "log.txt",
                            header="".join(f"mlops.serve: {line}\n" for line in lines),
                            detached=True).start()
        pid = job.procs[0].pid
        try:
            TaskRecord(status=Status.RUNNING, pid=pid, outputs=resolved.outputs).write(task.folder)
        except BaseException:  # unrecorded (a full disk): not left running
            launch.stop_group(pid, 0)
            raise
    return Service(pid=pid, log=job.log, folder=task.folder, environment=activation.label)
