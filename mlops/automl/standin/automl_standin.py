"""The tabular AutoML stand-in: FLAML searches what an AutoML spec asks for, under Azure's names.

    python automl_standin.py --task classification --target_column_name y
        --training_data <MLTable folder> [--validation_data <MLTable folder>] ...
        --best_model <folder>

Azure picks a tabular job's candidate pipelines through its AutoML service, which no machine
outside Azure can call. This runs the same job with FLAML instead: the data is read by Azure's
own `mltable` package; task, primary metric, limits, allowed and blocked algorithms, validation
(validation_data, validation_data_size, n_cross_validations), test_data or test_data_size, and
featurization off/auto are mapped; each trial becomes a child MLflow run with Azure's metric
names; the best model is an MLflow model (scikit-learn flavour, python_function loader) in
`best_model`, and in the best child run's outputs/mlflow-model as Azure writes it. The first
line of the log says what differs from Azure's search.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

# .venv's azureml-mlflow announces an `azureml` tracking scheme this environment lacks
warnings.filterwarnings("ignore", message="Failure attempting to register")
FLAML_TASKS = {"classification": "classification", "regression": "regression",
               "forecasting": "ts_forecast"}


@dataclass(kw_only=True)
class StandinConfig:
    """One field per flag; the names are the AutoML spec's keys."""

    task: str = "classification"
    target_column_name: str = ""
    primary_metric: str = "accuracy"
    training_data: str = ""
    validation_data: str = ""
    test_data: str = ""
    validation_data_size: float = 0.0
    test_data_size: float = 0.0  # the share of training_data held out for the test run
    n_cross_validations: str = ""  # a number of folds, "auto", or "" (Azure's rule by rows)
    timeout_minutes: float = 0.0  # 0: none
    trial_timeout_minutes: float = 0.0
    max_trials: int = 1000  # Azure's default
    max_cores_per_trial: int = -1
    enable_early_termination: bool = True
    allowed_training_algorithms: str = ""  # comma-separated, Azure's names
    blocked_training_algorithms: str = ""
    weight_column_name: str = ""  # each training row's weight, not a feature
    featurization: str = "auto"  # auto, off or custom
    categorical_columns: str = ""  # featurization.column_name_and_types: ... Categorical
    time_column_name: str = ""
    forecast_horizon: str = "1"  # periods ahead, or "auto" (Azure's rule: series.horizon)
    frequency: str = ""  # a pandas offset alias (H, D, W-THU); "" infers it
    seed: int = 1
    best_model: str = ""  # the output folder of the best model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for item in dataclasses.fields(StandinConfig):
        default = item.default
        if isinstance(default, bool):
            parser.add_argument(f"--{item.name}", default=default,
                                type=lambda text: text.lower() in ("1", "true", "yes"))
        else:
            parser.add_argument(f"--{item.name}", default=default, type=type(default))
    return parser


def names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def differences(config: StandinConfig, chosen: dict[str, str]) -> str:
    """The first line of the log: this is not Azure's search, and how it differs."""
    return ("AutoML stand-in: FLAML searches " + ", ".join(chosen) + f" for {config.task} "
            f"({config.primary_metric}); this is not Azure's AutoML service: other candidate "
            "pipelines, featurization and hyperparameters, trials run one at a time, no "
            "VotingEnsemble or StackEnsemble, no explanations")


def main(argv: list[str] | None = None) -> int:
    # scikit-learn, FLAML and pandas load here: build_parser and the config take none of them
    import algorithms
    import search
    import tracking

    config = StandinConfig(**vars(build_parser().parse_args(argv)))
    chosen = algorithms.estimators(config.task, names(config.allowed_training_algorithms),
                                   names(config.blocked_training_algorithms))
    print(differences(config, chosen), flush=True)
    if not chosen:
        print("error: no algorithm is left to search (allowed minus blocked)", file=sys.stderr)
        return 2
    data = search.load_data(config)
    started = time.monotonic()
    outcome = search.run(config, data, chosen, FLAML_TASKS[config.task])
    print(f"{len(outcome.trials)} trial(s) in {time.monotonic() - started:.1f} s; best: "
          f"{outcome.best.algorithm} {config.primary_metric}="
          f"{outcome.best.metrics.get(config.primary_metric)}", flush=True)
    best_run = tracking.trial_runs(config, outcome)
    model = search.save_model(outcome, data, Path(config.best_model), best_run)
    tests = search.test_metrics(config, outcome, data)
    tracking.record_best(outcome, best_run, model, tests)
    summary = {"best_algorithm": outcome.best.algorithm, "best_config": outcome.best.config,
               "best_metrics": outcome.best.metrics, "test_metrics": tests,
               "trials": len(outcome.trials)}
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    try:
        status = main()
    finally:
        gc.freeze()  # no collection at shutdown: MLflow's and FLAML's objects cost seconds
    sys.exit(status)
