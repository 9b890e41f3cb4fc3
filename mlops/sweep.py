"""Local sweep jobs: Optuna samples the search space, trials run as processes, and Azure's
early-termination policies stop trials while they run (read from each trial's MLflow metric).

Search space types follow Azure's definitions: loguniform(min, max) is exp(uniform(min, max)),
q* types round to multiples of q, normal/lognormal are sampled through the inverse normal CDF of
a uniform Optuna variable (so TPE can model them). random -> RandomSampler, grid -> every
combination enqueued in order (choice only), bayesian -> TPESampler.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from statistics import NormalDist

import optuna

from . import execute
from .policies import Policy, should_stop
from .resolve import LocalRunError, render_command, resolve_inputs

POLL_S = 0.5
_EPS = 1e-9


def _q(value: float, q) -> float:
    return round(value / float(q)) * float(q) if q else value


def sample(trial: optuna.Trial, name: str, p: dict):
    kind = p["type"]
    if kind == "choice":
        return trial.suggest_categorical(name, list(p["values"]))
    if kind == "randint":
        return trial.suggest_int(name, 0, int(p["upper"]) - 1)
    if kind in ("uniform", "quniform"):
        return _q(trial.suggest_float(name, p["min_value"], p["max_value"]), p.get("q"))
    if kind in ("loguniform", "qloguniform"):
        exponent = trial.suggest_float(name, p["min_value"], p["max_value"])
        return _q(math.exp(exponent), p.get("q"))
    if kind in ("normal", "qnormal", "lognormal", "qlognormal"):
        u = trial.suggest_float(f"{name}__u", _EPS, 1 - _EPS)
        value = NormalDist(float(p["mu"]), float(p["sigma"])).inv_cdf(u)
        return _q(math.exp(value) if "lognormal" in kind else value, p.get("q"))
    raise LocalRunError(f"search_space.{name}: type {kind} is not supported locally")


def make_study(algorithm, space: dict, maximize: bool) -> optuna.Study:
    kind = str(algorithm.get("type") if isinstance(algorithm, dict) else algorithm).lower()
    seed = algorithm.get("seed") if isinstance(algorithm, dict) else None
    samplers = {"random": optuna.samplers.RandomSampler, "grid": optuna.samplers.RandomSampler,
                "bayesian": optuna.samplers.TPESampler}
    if kind not in samplers:
        raise LocalRunError(f"sampling_algorithm {kind} is not supported locally: use random, "
                            "grid or bayesian")
    study = optuna.create_study(direction="maximize" if maximize else "minimize",
                                sampler=samplers[kind](seed=seed))
    if kind == "grid":  # every combination once, in order (GridSampler cannot ask/tell)
        names = list(space)
        for combo in itertools.product(*(space[n]["values"] for n in names)):
            study.enqueue_trial(dict(zip(names, combo, strict=True)))
    return study


@dataclass
class Trial:
    number: int
    params: dict
    run_id: str
    process: execute.Process
    started: float
    optuna_trial: optuna.Trial
    history: list = field(default_factory=list)
    evaluated: int = 0
    status: str = "Running"
    seconds: float = 0.0


class Sweep:
    def __init__(self, ctx, parent_run: str):
        spec = ctx.spec.data
        self.ctx, self.spec, self.parent_run = ctx, spec, parent_run
        self.space = spec["search_space"]
        objective = spec["objective"]
        self.metric = objective["primary_metric"]
        self.maximize = str(objective.get("goal", "maximize")).lower() == "maximize"
        self.policy = Policy.from_spec(spec.get("early_termination"))
        limits = spec.get("limits") or {}
        grid = math.prod(len(p["values"]) for p in self.space.values()) \
            if "grid" in str(spec.get("sampling_algorithm")).lower() else None
        self.max_trials = min(int(limits.get("max_total_trials", grid or 1)), grid or 10**9)
        self.concurrency = max(1, min(int(limits.get("max_concurrent_trials", 1)), ctx.max_procs))
        self.timeout = float(limits.get("timeout") or 0)
        self.trial_timeout = float(limits.get("trial_timeout") or 0)
        self.study = make_study(spec.get("sampling_algorithm", "random"), self.space,
                                self.maximize)
        trial_spec = spec["trial"]
        self.inputs = resolve_inputs(spec.get("inputs"), ctx.spec.path, ctx.asset_map,
                                     ctx.map_file)
        self.cwd = (ctx.spec.path.parent / trial_spec.get("code", ".")).resolve()
        self.trials: list[Trial] = []

    def launch(self) -> Trial:
        number = len(self.trials)
        optuna_trial = self.study.ask()
        params = {name: sample(optuna_trial, name, p) for name, p in self.space.items()}
        folder = self.ctx.run_dir / "trials" / f"trial_{number:03d}"
        outputs = {}
        for name in self.spec.get("outputs") or {}:
            (folder / "outputs" / name).mkdir(parents=True, exist_ok=True)
            outputs[name] = str(folder / "outputs" / name)
        values = {"inputs": self.inputs, "outputs": outputs,
                  "search_space": {k: str(v) for k, v in params.items()}}
        command = render_command(str(self.spec["trial"]["command"]), values, self.ctx.spec.path,
                                 "trial.command")
        name = f"{self.spec.get('display_name', 'sweep')}_{number}"
        run_id = self.ctx.tracking.start(self.spec.get("experiment_name") or "Default", name,
                                         {"mlops.spec": str(self.ctx.spec.path),
                                          "mlops.trial": str(number),
                                          **{f"param.{k}": str(v) for k, v in params.items()}},
                                         parent=self.parent_run)
        threads = max(1, self.ctx.max_procs // self.concurrency)
        from .run import process_env  # a trial is a command job: same environment rules

        env = process_env(self.spec["trial"].get("environment_variables"), run_id, threads)
        process = execute.start(name, command, self.cwd, env, folder / "log.txt", echo=False)
        trial = Trial(number, params, run_id, process, time.monotonic(), optuna_trial)
        self.trials.append(trial)
        print(f"trial {number} started: {params}", flush=True)
        return trial

    def running(self) -> list[Trial]:
        return [t for t in self.trials if t.status == "Running"]

    def finish(self, trial: Trial, status: str) -> None:
        if status != "Completed":
            execute.stop(trial.process)
        trial.process.reader.join(timeout=5)
        trial.seconds = time.monotonic() - trial.started
        trial.history = self.ctx.tracking.history(trial.run_id, self.metric)
        trial.status = status
        state = {"Completed": optuna.trial.TrialState.COMPLETE,
                 "EarlyTerminated": optuna.trial.TrialState.PRUNED}.get(
                     status, optuna.trial.TrialState.FAIL)
        value = self.best(trial)
        if state == optuna.trial.TrialState.COMPLETE and value is None:
            state = optuna.trial.TrialState.FAIL
        self.study.tell(trial.optuna_trial, value if state == optuna.trial.TrialState.COMPLETE
                        else None, state=state)
        self.ctx.tracking.finish(trial.run_id, {"Completed": "FINISHED",
                                                "EarlyTerminated": "KILLED"}.get(status, "FAILED"))
        print(f"trial {trial.number} {status}: {self.metric}={value} after "
              f"{len(trial.history)} report(s)", flush=True)

    def best(self, trial: Trial):
        if not trial.history:
            return None
        return max(trial.history) if self.maximize else min(trial.history)

    def apply_policy(self, trial: Trial) -> bool:
        """Evaluate every interval the trial reported since the last check, in order."""
        trial.history = self.ctx.tracking.history(trial.run_id, self.metric)
        others = [t.history for t in self.running() if t is not trial]
        done = [t.history for t in self.trials if t.status != "Running" and t.history]
        while trial.evaluated < len(trial.history):
            trial.evaluated += 1
            if should_stop(self.policy, trial.history[:trial.evaluated], others, done,
                           self.maximize):
                print(f"trial {trial.number}: early-terminated at interval {trial.evaluated} "
                      f"({self.policy.type})", flush=True)
                return True
        return False

    def step(self) -> None:
        for trial in self.running():
            code = trial.process.popen.poll()
            if code is not None:
                self.finish(trial, "Completed" if code == 0 else "Failed")
            elif self.apply_policy(trial):
                self.finish(trial, "EarlyTerminated")
            elif self.trial_timeout and time.monotonic() - trial.started > self.trial_timeout:
                self.finish(trial, "TimedOut")

    def run(self) -> None:
        started = time.monotonic()
        while True:
            out_of_time = self.timeout and time.monotonic() - started > self.timeout
            while (not out_of_time and len(self.running()) < self.concurrency
                   and len(self.trials) < self.max_trials):
                self.launch()
            if not self.running():
                return
            if out_of_time:
                for trial in self.running():
                    self.finish(trial, "Canceled")
                return
            time.sleep(POLL_S)
            self.step()

    def summary(self) -> dict:
        rows = [{"trial": t.number, "params": t.params, "metric": self.best(t),
                 "status": t.status, "intervals": len(t.history), "run_id": t.run_id,
                 "seconds": round(t.seconds, 2)} for t in self.trials]
        scored = [r for r in rows if r["metric"] is not None and r["status"] == "Completed"]
        pick = max if self.maximize else min
        best = pick(scored, key=lambda r: r["metric"]) if scored else None
        return {"primary_metric": self.metric, "goal": "maximize" if self.maximize else
                "minimize", "trials": rows, "best_trial": best}


def print_table(summary: dict) -> None:
    names = sorted({k for row in summary["trials"] for k in row["params"]})
    header = ["trial", *names, summary["primary_metric"], "status"]
    print("\n" + "  ".join(f"{h:>14}" for h in header))
    for row in summary["trials"]:
        cells = [row["trial"], *[row["params"].get(n) for n in names], row["metric"],
                 row["status"]]
        print("  ".join(f"{c:>14.6g}" if isinstance(c, float) else f"{c!s:>14}" for c in cells))
    best = summary["best_trial"]
    if best:
        print(f"best trial: {best['trial']} ({summary['primary_metric']}={best['metric']:.6g}, "
              f"MLflow run {best['run_id']})")


def run_sweep(ctx) -> int:
    spec = ctx.spec.data
    name = spec.get("display_name") or ctx.spec.path.stem
    parent = ctx.tracking.start(spec.get("experiment_name") or "Default", name,
                                {"mlops.spec": str(ctx.spec.path), "mlops.local": "true"})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep = Sweep(ctx, parent)
    try:
        sweep.run()
    except KeyboardInterrupt:
        print("\ninterrupted: stopping running trials ...", file=sys.stderr)
        for trial in sweep.running():
            sweep.finish(trial, "Canceled")
        ctx.tracking.finish(parent, "KILLED")
        return 130
    summary = sweep.summary()
    (ctx.run_dir / "sweep_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print_table(summary)
    best = summary["best_trial"]
    if best:
        ctx.tracking.set_tag(parent, "best_child_run_id", best["run_id"])
    ctx.tracking.finish(parent, "FINISHED" if best else "FAILED")
    print(f"summary: {ctx.run_dir / 'sweep_summary.json'}")
    return 0 if best else 1
