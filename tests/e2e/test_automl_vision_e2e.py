"""Image AutoML jobs on Azure's own runner (azureml-automl-dnn-vision 1.62 on Python 3.10, its
environment of about 8 GB built from the registry once): a multiclass search of two models with
bandit termination, multilabel, object detection, and a pipeline that prepares the data, trains
and scores the best model with mlflow.pyfunc. Each trial is a child MLflow run carrying the
runner's metrics under Azure's names, once per epoch; the parent is tagged with the best child."""

from __future__ import annotations

import json

import pytest
from support import ROOT, lazy

from mlops import run as local

tracking = lazy("mlflow.tracking")

FIXTURES = ROOT / "tests" / "fixtures" / "automl" / "vision"
pytestmark = [pytest.mark.usefixtures("sources_unchanged", "mlflow_store"),
              pytest.mark.network, pytest.mark.heavy]
WHY_NO_PROOF = ("Azure's image runner needs its environment of about 8 GB: make test-heavy runs "
                "these; tests/unit/test_automl_vision.py proves the translation in make test")


def summary_of(folder) -> dict:
    return json.loads((folder / "sweep_summary.json").read_text())


def predicted(tmp_path, model, column: str) -> str:
    """What score.yml printed after loading `model` with mlflow.pyfunc in the runner's env."""
    run = tmp_path / "score"
    assert local.main([str(FIXTURES / "score.yml"), "--run-dir", str(run), "--set",
                       f"inputs.model.path={model}", f"inputs.column={column}"]) == 0
    return (run / "log.txt").read_text()


def test_two_models_are_searched_with_bandit_termination_and_the_best_one_predicts(tmp_path):
    run = tmp_path / "cls"
    assert local.main([str(FIXTURES / "classification.yml"), "--run-dir", str(run)]) == 0
    found = summary_of(run)
    assert found["primary_metric"] == "accuracy" and len(found["trials"]) == 3
    assert {t["params"]["model"]["model_name"] for t in found["trials"]} <= {
        "resnet18", "mobilenetv2"}
    client = tracking.MlflowClient()
    best = found["best_trial"]
    history = client.get_metric_history(best["run_id"], "accuracy")
    assert len(history) == 2  # one per epoch, as the runner logs them
    metrics = client.get_run(best["run_id"]).data.metrics
    assert {"AUC_weighted", "log_loss", "precision_score_weighted"} <= set(metrics)
    parent = client.get_run(client.get_run(best["run_id"]).data.tags["mlflow.parentRunId"])
    assert parent.data.tags["best_child_run_id"] == best["run_id"]
    assert "python_function" in (run / "outputs/best_model/MLmodel").read_text()
    assert "scored 10 images with mlflow.pyfunc" in predicted(
        tmp_path, run / "outputs/best_model", "shape")


def test_a_multilabel_job_completes_under_azures_iou(tmp_path):
    run = tmp_path / "ml"
    assert local.main([str(FIXTURES / "multilabel.yml"), "--run-dir", str(run)]) == 0
    best = summary_of(run)["best_trial"]
    assert best["status"] == "Completed" and 0 <= best["metric"] <= 1
    assert len(tracking.MlflowClient().get_metric_history(best["run_id"], "iou")) == 2
    assert "scored 10 images" in predicted(tmp_path, run / "outputs/best_model", "shapes")


def test_an_object_detection_job_trains_on_boxes_and_its_model_finds_boxes(tmp_path):
    run = tmp_path / "od"
    assert local.main([str(FIXTURES / "detection.yml"), "--run-dir", str(run)]) == 0
    best = summary_of(run)["best_trial"]
    assert best["params"] == {"model_name": "fasterrcnn_resnet18_fpn", "min_size": 64,
                              "max_size": 64}
    rows = (FIXTURES / "shapes/train/annotations.jsonl").read_text().splitlines()
    boxes = sum(len(json.loads(row)["boxes"]) for row in rows)
    assert f"train data: {boxes} box(es)" in (run / "trials/trial_000/log.txt").read_text()
    assert tracking.MlflowClient().get_metric_history(best["run_id"], "mean_average_precision")
    assert "scored 10 images" in predicted(tmp_path, run / "outputs/best_model", "boxes")


def test_a_pipeline_prepares_trains_an_image_model_registers_and_scores_it(tmp_path, capsys):
    run = tmp_path / "pipeline"
    assert local.main([str(FIXTURES / "pipeline.yml"), "--run-dir", str(run)]) == 0
    assert "step train: registered model azureml:automl-vision-fixture-shapes:" in \
        capsys.readouterr().out
    score = (run / "steps/score/log.txt").read_text()
    assert "scored 10 images with mlflow.pyfunc" in score
    assert len((run / "steps/score/outputs/predictions/predictions.csv").read_text()
               .splitlines()) == 11
