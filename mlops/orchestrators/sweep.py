"""Sweeps: Optuna samples the search space, every trial is a task of the one runtime, and Azure's
early-termination policies stop trials while they run (read from each trial's MLflow metric).

The search space is sampled as Azure defines it (mlops/orchestrators/sampling.py). Used by sweep
jobs and by pipeline nodes of type sweep; the best trial's outputs become the sweep's outputs, as on
Azure.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import optuna

from mlops.orchestrators.policies import Policy, should_stop
from mlops.orchestrators.sampling import grid_points, is_grid, log_base, make_study, sample
from mlops.runtime import (
    AssetMap,
    Decision,
    Job,
    OutputSpec,
    Result,
    Running,
    RunStatus,
    Runtime,
    Status,
    StepRules,
    Task,
    TaskSource,
    Value,
    check_interrupt,
    command_task,
    experiment_name,
    fill_scope,
    finish_task,
    guarding,
    job_inputs,
    job_outputs,
    load_component,
    publish,
    render_literal,
    start_task,
    trial_addresses,
)
from mlops.specs import SpecData

POLL_S = 0.5


@dataclass(kw_only=True)
class Settings:
    space: SpecData
    metric: str
    maximize: bool
    policy: Policy
    max_trials: int
    concurrency: int
    timeout: float
    trial_timeout: float
    algorithm: object

    @classmethod
    def from_spec(cls, data: SpecData, max_procs: int) -> Settings:
        space = data.get("search_space") or {}
        limits = data.get("limits") or {}
        algorithm = data.get("sampling_algorithm", "random")
        grid = math.prod(len(p["values"]) for p in space.values()) if is_grid(algorithm) else None
        objective = data.get("objective") or {}
        return cls(space=space, metric=str(objective.get("primary_metric")),
                   maximize=str(objective.get("goal", "maximize")).lower() == "maximize",
                   policy=Policy.from_spec(data.get("early_termination")),
                   max_trials=min(int(limits.get("max_total_trials") or grid or 1), grid or 10**9),
                   concurrency=max(1,
                                   min(int(limits.get("max_concurrent_trials") or 1), max_procs)),
                   timeout=float(limits.get("timeout") or 0),
                   trial_timeout=float(limits.get("trial_timeout") or 0), algorithm=algorithm)


@dataclass(kw_only=True)
class Trial:
    number: int
    params: dict[str, object]
    running: Running
    optuna_trial: optuna.Trial
    history: list[float] = field(default_factory=list)
    evaluated: int = 0
    status: Status = Status.RUNNING
    result: Result | None = None
    decision: Decision | None = None  # what differs from the trial's nearest earlier run


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    """One trial in the sweep's summary (sweep_summary.json)."""

    trial: int
    params: dict[str, object]
    metric: float | None  # its best value of the primary metric
    status: Status
    intervals: int  # how many times it reported the metric
    run_id: str
    folder: Path
    seconds: float | None
    log: Path | None


@dataclass(frozen=True, kw_only=True)
class SweepSummary:
    """How a sweep ended: every trial, the best completed one, the metrics the trials logged."""

    primary_metric: str
    goal: str
    trials: list[TrialRow]
    best: TrialRow | None
    metrics_logged: list[str]

    def to_json(self) -> dict[str, object]:
        def row(r: TrialRow) -> dict[str, object]:
            return {**asdict(r), "status": str(r.status), "folder": str(r.folder),
                    "log": str(r.log) if r.log else None}

        return {"primary_metric": self.primary_metric, "goal": self.goal,
                "trials": [row(r) for r in self.trials],
                "best_trial": row(self.best) if self.best else None,
                "metrics_logged": self.metrics_logged}

    @property
    def completed(self) -> bool:
        """How Azure ends the sweep: Completed when a trial completed, with or without a best
        one (a HyperDrive run whose trials never logged the primary metric completes, and its
        get_best_run_by_primary_metric is None); Failed when none did."""
        return any(row.status == Status.COMPLETED for row in self.trials)


TrialMaker = Callable[[int, dict[str, object]], Task]


class Sweep:
    def __init__(self, settings: Settings, rt: Runtime, make_task: TrialMaker,
                 rules: StepRules):
        self.s, self.rt, self.make_task, self.rules = settings, rt, make_task, rules
        self.study = make_study(settings.algorithm, settings.space, settings.maximize)
        self.grid = grid_points(settings.space) if is_grid(settings.algorithm) else None
        self.trials: list[Trial] = []

    def launch(self) -> None:
        number = len(self.trials)
        if self.grid is not None:  # max_trials is at most the grid's size
            self.study.enqueue_trial(next(self.grid))
        optuna_trial = self.study.ask()
        base = log_base(self.s.algorithm)
        params = {name: sample(optuna_trial, name, p, base) for name, p in self.s.space.items()}
        task = self.make_task(number, params)
        rules = replace(self.rules, params={k: render_literal(v) for k, v in params.items()})
        decision = self.rt.steps.explain(task, self.rt.environments.env_map, rules)
        running = start_task(task, self.rt, echo=False)
        self.trials.append(Trial(number=number, params=params, running=running,
                                 optuna_trial=optuna_trial, decision=decision))
        print(f"trial {number} started: {params}\ntrial {number}: {decision.line}", flush=True)
        if self.rt.explain:
            print("".join(f"    {line}\n" for line in decision.details), end="", flush=True)

    def running(self) -> list[Trial]:
        return [t for t in self.trials if t.status == Status.RUNNING]

    def best(self, trial: Trial):
        if not trial.history:
            return None
        return max(trial.history) if self.s.maximize else min(trial.history)

    def finish(self, trial: Trial, status: Status | None = None) -> None:
        """`status`: how the sweep ended the trial (None: it ended on its own)."""
        trial.result = finish_task(trial.running, self.rt, status)
        trial.status = trial.result.status
        if trial.status == Status.COMPLETED and trial.decision is not None:
            self.rt.steps.record(trial.decision, trial.running.task.folder,
                                 trial.running.run_id, self.rules)
        trial.history = self.rt.tracking.history(trial.running.run_id, self.s.metric)
        value = self.best(trial)
        state = {Status.COMPLETED: optuna.trial.TrialState.COMPLETE,
                 Status.EARLY_TERMINATED: optuna.trial.TrialState.PRUNED}.get(
                     trial.status, optuna.trial.TrialState.FAIL)
        if state == optuna.trial.TrialState.COMPLETE and value is None:
            state = optuna.trial.TrialState.FAIL
        self.study.tell(trial.optuna_trial, value if state == optuna.trial.TrialState.COMPLETE
                        else None, state=state)
        print(f"trial {trial.number} {trial.status}: {self.s.metric}={value} after "
              f"{len(trial.history)} report(s)", flush=True)

    def apply_policy(self, trial: Trial) -> bool:
        """Evaluate every interval the trial reported since the last check, in order."""
        trial.history = self.rt.tracking.history(trial.running.run_id, self.s.metric)
        others = [t.history for t in self.running() if t is not trial]
        done = [t.history for t in self.trials if t.status != Status.RUNNING and t.history]
        while trial.evaluated < len(trial.history):
            trial.evaluated += 1
            if should_stop(self.s.policy, trial.history[:trial.evaluated], others=others,
                           finished=done, maximize=self.s.maximize):
                print(f"trial {trial.number}: early-terminated at interval {trial.evaluated} "
                      f"({self.s.policy.type})", flush=True)
                return True
        return False

    def step(self) -> None:
        for trial in self.running():
            if trial.running.launch.poll() is not None:
                self.finish(trial)
            elif self.apply_policy(trial):
                self.finish(trial, Status.EARLY_TERMINATED)
            elif self.s.trial_timeout and \
                    time.monotonic() - trial.running.started > self.s.trial_timeout:
                self.finish(trial, Status.TIMED_OUT)

    def run(self) -> None:
        started = time.monotonic()
        while True:
            out_of_time = self.s.timeout and time.monotonic() - started > self.s.timeout
            while (not out_of_time and len(self.running()) < self.s.concurrency
                   and len(self.trials) < self.s.max_trials):
                self.launch()
            if not self.running():
                return
            if out_of_time:
                for trial in self.running():
                    self.finish(trial, Status.CANCELED)
                return
            time.sleep(POLL_S)
            check_interrupt()
            self.step()

    def summary(self) -> SweepSummary:
        rows = [TrialRow(trial=t.number, params=t.params, metric=self.best(t), status=t.status,
                         intervals=len(t.history), run_id=t.running.run_id,
                         folder=t.running.task.folder,
                         seconds=round(t.result.seconds, 2) if t.result else None,
                         log=t.result.log if t.result else None) for t in self.trials]
        scored = [r for r in rows if r.metric is not None and r.status == Status.COMPLETED]
        pick = max if self.s.maximize else min
        best = pick(scored, key=lambda r: r.metric) if scored else None
        logged = sorted({m for t in self.trials for m in
                         self.rt.tracking.metric_names(t.running.run_id)})
        return SweepSummary(primary_metric=self.s.metric,
                            goal="maximize" if self.s.maximize else "minimize", trials=rows,
                            best=best, metrics_logged=logged)


def print_table(summary: SweepSummary) -> None:
    names = sorted({k for row in summary.trials for k in row.params})
    header = ["trial", *names, summary.primary_metric, "status"]
    print("\n" + "  ".join(f"{h:>14}" for h in header))
    for row in summary.trials:
        cells = [row.trial, *[row.params.get(n) for n in names], row.metric, str(row.status)]
        print("  ".join(f"{c:>14.6g}" if isinstance(c, float) else f"{c!s:>14}" for c in cells))
    best, rows = summary.best, summary.trials
    failed = [row for row in rows if row.status == Status.FAILED]
    if best:
        print(f"best trial: {best.trial} ({summary.primary_metric}={best.metric:.6g}, "
              f"MLflow run {best.run_id})")
    if failed and len(failed) == len(rows):
        first = failed[0]
        print(f"every trial failed ({len(rows)} of {len(rows)}); trial {first.trial} ended "
              f"with: {last_error(first.log)}\n  its log: {first.log}", file=sys.stderr)
    elif failed:
        print(f"{len(failed)} of {len(rows)} trials failed (first: trial {failed[0].trial}, "
              f"log {failed[0].log})", file=sys.stderr)
    if not best and summary.completed:
        print(f"warning: {no_best_reason(summary)}. The sweep completes with no best trial, "
              "as Azure's does, and has no outputs to give. Fix objective.primary_metric or "
              "the trial's logging", file=sys.stderr)


def no_best_reason(summary: SweepSummary) -> str:
    logged = ", ".join(summary.metrics_logged) or "none"
    return (f"no completed trial logged the primary metric '{summary.primary_metric}' "
            f"(the trials logged: {logged})")


def last_error(log: Path | None) -> str:
    """The line a failed process ended on: its last error or exception line, else its last."""
    try:
        lines = [line.strip() for line in Path(log).read_text(errors="replace").splitlines()
                 if line.strip()]
    except (OSError, TypeError):
        return "(no log)"
    errors = [line for line in lines if re.search(r"(Error|Exception|error:|Traceback)", line)
              and not line.startswith("Traceback")]
    return (errors or lines or ["(empty log)"])[-1]


def sweep(data: SpecData, rt: Runtime, *, folder: Path, parent_run: str,
          make_task: TrialMaker, rules: StepRules) -> SweepSummary:
    """Run the trials; write sweep_summary.json in `folder`; return the summary. `rules`: how
    each trial's earlier runs are found (it always runs: Azure reuses a step, not a trial)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    settings = Settings.from_spec(data, rt.max_procs)
    trials = Sweep(settings, rt, make_task, replace(rules, indexed=False, resumable=False,
                                                    always="a sweep runs every trial"))
    sharing, rt.sharing = rt.sharing, settings.concurrency
    try:
        trials.run()
    except KeyboardInterrupt:
        print("\ninterrupted: stopping running trials ...", file=sys.stderr)
        for trial in trials.running():
            trial.running.launch.stop()
            trials.finish(trial, Status.CANCELED)
        raise
    finally:
        rt.sharing = sharing
    summary = trials.summary()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep_summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    print_table(summary)
    if summary.best:
        rt.tracking.set_tag(parent_run, "best_child_run_id", summary.best.run_id)
    return summary


@dataclass(frozen=True, kw_only=True)
class TrialContext:
    """Where a sweep's trials go and how they are named and tracked."""

    folder: Path  # trials/trial_NNN under it
    assets: AssetMap  # what its references resolve through
    where: str  # "<spec>: trial", for messages and tags
    name: str  # trials are <name>_<number>
    experiment: str
    parent: str  # the sweep's MLflow run
    address: tuple[str, ...] = ()  # a sweep node's place in its pipeline (DEBUG=<node>/trial:N)
    spec: str = ""  # the job's spec file: a trial's earlier runs are found by it


def trial_factory(trial_def: SpecData, base: Path, *, inputs: dict[str, Value],
                  outputs: dict[str, OutputSpec], ctx: TrialContext) -> TrialMaker:
    """Trials run the trial command with the sampled values as ${{search_space.x}}, in the
    variables AZUREML_SWEEP_x (as HyperDrive sets them) and, for a component trial, as the inputs
    of the same names (as pipeline sweep nodes bind them)."""

    def make(number: int, params: dict[str, object]) -> Task:
        rendered = {k: render_literal(v) for k, v in params.items()}
        merged = {**inputs, **{k: Value(text=v) for k, v in rendered.items()}}
        command = fill_scope(str(trial_def.get("command") or ""), "search_space", rendered)
        variables = {**(trial_def.get("environment_variables") or {}),
                     **{f"AZUREML_SWEEP_{k}": v for k, v in rendered.items()}}
        return command_task(TaskSource(
            definition={**trial_def, "command": command, "environment_variables": variables},
            base=base,
            folder=ctx.folder / "trials" / f"trial_{number:03d}", assets=ctx.assets,
            where=ctx.where, name=f"{ctx.name}_{number}", experiment=ctx.experiment,
            parent=ctx.parent, inputs=merged,
            outputs={k: replace(v, target=None) for k, v in outputs.items()},
            tags={"mlops.spec": ctx.where, "mlops.trial": str(number),
                  **{f"param.{k}": v for k, v in rendered.items()}},
            address=(*ctx.address, f"trial:{number}")))

    return make


def run_sweep_job(job: Job, rt: Runtime) -> int:
    data, path = job.data, job.spec.path
    experiment = experiment_name(data)
    if rt.debug is not None:
        trials = Settings.from_spec(data, rt.max_procs).max_trials
        rt.debug.check(trial_addresses(rt.debug.path, trials))
    trial_def, base, _ = load_component(data["trial"], path.parent, job.assets, f"{path}: trial")
    outputs = job_outputs(data.get("outputs"))
    inputs = job_inputs(data.get("inputs"), path.parent, job.assets)
    tags = {"mlops.spec": str(path), "mlops.local": "true"}
    with rt.tracking.open(experiment, job.name, tags) as run, \
            guarding(rt.root, run.run_id, rt.tracking.uri):
        ctx = TrialContext(folder=rt.root, assets=job.assets, where=f"{path}: trial",
                           name=job.name, experiment=experiment, parent=run.run_id)
        make = trial_factory(trial_def, base, inputs=inputs, outputs=outputs, ctx=ctx)
        summary = sweep(data, rt, folder=rt.root, parent_run=run.run_id, make_task=make,
                        rules=trial_rules(trial_def, str(path.resolve()), rt))
        if summary.best:
            publish(summary.best.folder, outputs, rt.root)
        run.close(RunStatus.FINISHED if summary.completed else RunStatus.FAILED)
    print(f"summary: {rt.shown / 'sweep_summary.json'}")
    return 0 if summary.completed else 1


def trial_rules(trial_def: SpecData, spec: str, rt: Runtime) -> StepRules:
    """How a sweep's trials find their earlier runs: by the spec and trial number, else by
    the trial's component."""
    return StepRules(spec=spec, run=rt.shown.name, component=str(trial_def.get("name") or ""),
                     version=str(trial_def.get("version") or ""))
