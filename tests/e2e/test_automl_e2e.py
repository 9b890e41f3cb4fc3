"""AutoML jobs and pipeline nodes run through the one runtime on the tabular stand-in (FLAML in
its own environment, Azure's `mltable` reading the data): child MLflow runs with Azure's metric
names, the parent tagged with the best child, the best model as an MLflow model that a later
step loads with mlflow.pyfunc, step reuse, and refusals before any work."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from support import ROOT, lazy

from mlops import run as local

tracking = lazy("mlflow.tracking")

FIXTURES = ROOT / "tests" / "fixtures" / "automl"
pytestmark = [pytest.mark.usefixtures("sources_unchanged", "mlflow_store"),
              pytest.mark.network]  # a cold cache: the stand-in's environment from the registry


def runs_of(experiment: str) -> tuple[object, list]:
    """The AutoML job's run (the one tagged with a best child) and its child runs."""
    client = tracking.MlflowClient()
    found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parent = next(r for r in found if "best_child_run_id" in r.data.tags)
    children = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, sorted(children, key=lambda r: r.info.run_name)


@pytest.mark.proof
def test_a_classification_job_logs_each_trial_as_azure_does_and_leaves_its_best_model(
        tmp_path):
    run = tmp_path / "run"
    assert local.main([str(FIXTURES / "classification.yml"), "--run-dir", str(run)]) == 0
    log = (run / "log.txt").read_text()
    assert log.splitlines()[0].startswith("AutoML stand-in: FLAML searches LightGBM, "
                                          "LogisticRegression for classification (AUC_weighted); "
                                          "this is not Azure's AutoML service")
    trials = (run / "wd/outputs/automl_trials.jsonl").read_text().count('"learner"')
    parent, children = runs_of("automl-fixtures")
    assert trials == len(children) == 4 and parent.info.status == "FINISHED"
    assert [c.info.run_name for c in children] == [f"{parent.info.run_name}_{n}"
                                                   for n in range(4)]
    assert {c.data.tags["run_algorithm"] for c in children} == {"LightGBM",
                                                                 "LogisticRegression"}
    assert all({"accuracy", "AUC_weighted", "log_loss", "norm_macro_recall"}
               <= set(c.data.metrics) for c in children)
    best = parent.data.tags["best_child_run_id"]
    assert best in {c.info.run_id for c in children}
    assert parent.data.metrics["AUC_weighted"] == max(c.data.metrics["AUC_weighted"]
                                                      for c in children)
    assert "test_accuracy" in parent.data.metrics  # test_data, scored by the best model
    model = run / "outputs/best_model"
    assert yaml.safe_load((model / "MLmodel").read_text())["run_id"] == best
    listed = tracking.MlflowClient().list_artifacts(best, "outputs/mlflow-model")
    artifacts = {a.path for a in listed}
    assert "outputs/mlflow-model/MLmodel" in artifacts
    assert "flaml==2.7.0" in (model / "requirements.txt").read_text().split()


def test_regression_with_folds_and_a_forecast_complete_under_azures_metric_names(tmp_path):
    assert local.main([str(FIXTURES / "regression.yml"), "--run-dir",
                       str(tmp_path / "regression"), "--set", "test_data_size=0.25"]) == 0
    parent, children = runs_of("automl-fixtures")
    assert {c.data.tags["run_algorithm"] for c in children} <= {
        "LightGBM", "RandomForest", "ExtremeRandomTrees"}  # the others are blocked
    assert all({"r2_score", "normalized_root_mean_squared_error", "spearman_correlation"}
               <= set(c.data.metrics) for c in children)
    assert "test_r2_score" in parent.data.metrics  # the test run on the held-out share
    assert "training rows held out for the test run" in \
        (tmp_path / "regression/log.txt").read_text()
    assert local.main([str(FIXTURES / "forecasting.yml"), "--run-dir",
                       str(tmp_path / "forecast"), "--set",
                       "forecasting.forecast_horizon=auto"]) == 0
    summary = (tmp_path / "forecast/log.txt").read_text()
    assert "for forecasting (normalized_root_mean_squared_error)" in summary
    assert "forecast_horizon: auto is 7 period(s) of D" in summary  # daily: Azure's rule
    assert (tmp_path / "forecast/outputs/best_model/MLmodel").is_file()


def test_a_pipeline_prepares_searches_and_scores_with_the_best_model_then_reuses_the_search(
        tmp_path, capsys):
    first = tmp_path / "first"
    assert local.main([str(FIXTURES / "pipeline.yml"), "--run-dir", str(first)]) == 0
    predictions = (first / "steps/score/outputs/predictions/predictions.csv").read_text()
    assert len(predictions.splitlines()) == 61  # every fifth of 300 rows, and the header
    assert "scored 60 rows: accuracy" in (first / "steps/score/log.txt").read_text()
    out = capsys.readouterr().out
    assert "step search: registered model azureml:automl-fixture-fruit:1" in out
    assert local.main([str(FIXTURES / "pipeline.yml"), "--run-dir", str(tmp_path / "again")]) \
        == 0
    assert "step search: reused (from first search)" in capsys.readouterr().out


@pytest.mark.proof
def test_an_image_model_from_azures_registry_is_refused_before_a_run_folder_exists(
        tmp_path, capsys):
    spec = tmp_path / "image.yml"
    spec.write_text("type: automl\ntask: image_object_detection\ntarget_column_name: label\n"
                    f"training_data:\n  type: mltable\n  path: {FIXTURES / 'fruit-train'}\n"
                    "limits:\n  max_trials: 1\n"
                    "training_parameters:\n  model_name: mmd-3x-rtmdet_tiny_8xb32-300e_coco\n")
    assert local.main([str(spec), "--run-dir", str(tmp_path / "run")]) != 0
    assert "Hugging Face or MMDetection weights downloaded" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_search_that_cannot_read_its_target_fails_with_the_columns_it_has(tmp_path):
    data = shutil.copytree(FIXTURES, tmp_path / "automl")
    spec = data / "classification.yml"
    spec.write_text(spec.read_text().replace("target_column_name: state",
                                             "target_column_name: ripeness"))
    assert local.main([str(spec), "--run-dir", str(tmp_path / "run")]) == 1
    log = (tmp_path / "run/log.txt").read_text()
    assert "error: training_data has no column 'ripeness' (target_column_name); its columns: " \
           "weight, sugar, colour, state" in log
    assert json.loads((tmp_path / "run/status.json").read_text())["status"] == "Failed"


def test_a_weight_column_weighs_the_rows_and_is_no_feature_of_the_model(tmp_path):
    data = shutil.copytree(FIXTURES, tmp_path / "automl")
    for part in ("fruit-train", "fruit-valid"):
        rows = (data / part / "fruit.csv").read_text().splitlines()
        weighted = [rows[0] + ",w"] + [f"{row},{1 + n % 3}" for n, row in enumerate(rows[1:])]
        (data / part / "fruit.csv").write_text("\n".join(weighted) + "\n")
    argv = [str(data / "classification.yml"), "--run-dir", str(tmp_path / "run"),
            "--set", "weight_column_name=w", "--set", "limits.max_trials=2"]
    assert local.main(argv) == 0
    signature = yaml.safe_load((tmp_path / "run/outputs/best_model/MLmodel").read_text())
    inputs = json.loads(signature["signature"]["inputs"])
    assert [column["name"] for column in inputs] == ["weight", "sugar", "colour"]
