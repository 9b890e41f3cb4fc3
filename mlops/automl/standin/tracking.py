"""The stand-in's MLflow record, as Azure's AutoML leaves it: the job's run is the parent, each
trial a child run `<parent name>_<n>` with its algorithm and Azure's metric names, the parent
tagged with the best child, whose outputs/mlflow-model holds the model."""

from __future__ import annotations

import os
from pathlib import Path

from search import Outcome, TrialRecord


def trial_runs(config, outcome: Outcome) -> str | None:
    """A child run per trial under the job's run; the best child's run id (None without a
    run to record in)."""
    parent = os.environ.get("MLFLOW_RUN_ID")
    if not parent:
        print("note: no MLflow run (MLFLOW_RUN_ID) to record the trials in", flush=True)
        return None
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    above = client.get_run(parent)
    ids = [child_run(client, above, trial, config.featurization) for trial in outcome.trials]
    return ids[outcome.trials.index(outcome.best)]


def record_best(outcome: Outcome, best_id: str | None, model: Path,
                tests: dict[str, float]) -> None:
    """The model in the best child's outputs/mlflow-model; the parent tagged with it and
    carrying its metrics (and test_data's, as test_<metric>)."""
    parent = os.environ.get("MLFLOW_RUN_ID")
    if not parent or not best_id:
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    client.log_artifacts(best_id, str(model), "outputs/mlflow-model")
    client.set_tag(parent, "best_child_run_id", best_id)
    client.set_tag(parent, "automl_best_child_run_id", best_id)
    client.set_tag(parent, "mlops.automl", "FLAML stand-in")
    for name, value in outcome.best.metrics.items():
        client.log_metric(parent, name, value)
    for name, value in tests.items():
        client.log_metric(parent, f"test_{name}", value)


def child_run(client, parent, trial: TrialRecord, featurization: str) -> str:
    name = f"{parent.info.run_name}_{trial.number}"
    run = client.create_run(parent.info.experiment_id, run_name=name,
                            tags={"mlflow.parentRunId": parent.info.run_id,
                                  "run_algorithm": trial.algorithm,
                                  "run_preprocessor": "None" if featurization == "off"
                                  else "FLAML DataTransformer",
                                  "mlops.estimator": trial.estimator})
    run_id = run.info.run_id
    for key, value in trial.config.items():
        client.log_param(run_id, key, value)
    for key, value in trial.metrics.items():
        client.log_metric(run_id, key, value)
    client.log_metric(run_id, "training_time", trial.seconds)
    client.set_terminated(run_id, "FINISHED")
    return run_id
