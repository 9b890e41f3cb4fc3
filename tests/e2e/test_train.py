"""End-to-end runs of the trainer through main(): what MLflow, checkpoints and model dir hold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support import SMALL_ARCH, lazy, train_args

from image_classifier import checkpoint
from image_classifier.train import main

tracking = lazy("mlflow.tracking")  # MLflow: seconds of every xdist worker's collection

METRICS = ("train_loss", "train_acc", "val_loss", "val_acc", "best_val_acc", "lr")


def _only_run(uri):
    client = tracking.MlflowClient(uri)
    experiment = client.get_experiment_by_name("tests")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, "exactly one MLflow run expected"
    return client, runs[0]


def _steps(client, run, metric):
    return [m.step for m in client.get_metric_history(run.info.run_id, metric)]


@pytest.mark.proof
def test_end_to_end_tracks_checkpoints_and_writes_the_model(tiny_data, tmp_path, mlflow_store):
    out = tmp_path / "out"
    assert main(train_args(tiny_data, out, epochs=3)) == 0

    client, run = _only_run(mlflow_store)
    for metric in METRICS:
        assert _steps(client, run, metric) == [1, 2, 3], metric
    assert run.data.params["learning_rate"] == "0.01" and run.data.params["arch"] == SMALL_ARCH
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "training_curves.png", "confusion_matrix.png"} <= artifacts
    best = run.data.metrics["best_val_acc"]
    train_acc = [m.value for m in client.get_metric_history(run.info.run_id, "train_acc")]
    assert train_acc[-1] >= 0.8, "the synthetic classes are learnable: accuracy must rise"

    last = checkpoint.load(out / "checkpoints" / "last.pt")
    assert last["epoch"] == 3 and last["classes"] == ["chickens", "turkeys"]
    assert {"model", "optimizer", "scheduler", "best_val_acc", "arch", "image_size", "mean",
            "std"} <= set(last)
    assert sorted(p.name for p in (out / "model").iterdir()) == ["model.json", "model.pt"]
    served = checkpoint.load(out / "model" / "model.pt")
    assert "optimizer" not in served and served["best_val_acc"] == best
    meta = json.loads((out / "model" / "model.json").read_text())
    assert meta["classes"] == ["chickens", "turkeys"] and meta["image_size"] == 32
    assert meta["arch"] == SMALL_ARCH and len(meta["mean"]) == 3


def test_rerun_with_same_output_dir_resumes_the_same_run(tiny_data, tmp_path, mlflow_store):
    out = tmp_path / "out"
    assert main(train_args(tiny_data, out, epochs=2)) == 0
    assert main(train_args(tiny_data, out, epochs=3)) == 0
    client, run = _only_run(mlflow_store)
    assert _steps(client, run, "best_val_acc") == [1, 2, 3]
    assert json.loads(run.data.tags["resumed_at_epoch_2"]) == {"epochs": 3}
    assert checkpoint.load(out / "checkpoints" / "last.pt")["epoch"] == 3


@pytest.mark.proof
def test_resume_refuses_a_checkpoint_of_another_model(tiny_data, tmp_path, mlflow_store, capsys):
    out = tmp_path / "out"
    assert main(train_args(tiny_data, out, epochs=1)) == 0
    assert main(train_args(tiny_data, out, epochs=2, arch="resnet18")) == 2
    assert "checkpoint differs from this run in arch" in capsys.readouterr().out


@pytest.mark.proof
def test_bad_data_exits_2_with_the_path(tmp_path, mlflow_store, capsys):
    assert main(train_args(tmp_path / "missing", tmp_path / "out")) == 2
    assert f"{tmp_path / 'missing'}: no such file" in capsys.readouterr().out


def _history(out):
    rows = checkpoint.load(out / "checkpoints" / "last.pt")["history"]
    return [(r["epoch"], r["train_loss"], r["val_loss"], r["val_acc"]) for r in rows]


@pytest.mark.slow
def test_killed_mid_run_then_resumed_equals_uninterrupted(tiny_data, tmp_path, mlflow_store):
    """The victim is a process killed without warning; the resumed run and the uninterrupted
    reference run here, on the one thread the victim used too, so all three compute alike."""
    epochs = 3
    interrupted = train_args(tiny_data, tmp_path / "interrupted", epochs=epochs)
    victim = subprocess.Popen([sys.executable, "-m", "image_classifier.train", *interrupted],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    last = tmp_path / "interrupted" / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 120
    while not last.exists() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)  # like a preempted node: no chance to clean up
    victim.wait()
    killed_at = checkpoint.load(last)["epoch"]
    assert killed_at < epochs, "the run must be interrupted before its end"

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(interrupted) == 0
        assert_one_complete_run(mlflow_store, epochs)  # before the reference run adds its own
        assert main(train_args(tiny_data, tmp_path / "straight", epochs=epochs)) == 0
    finally:
        torch.set_num_threads(threads)
    assert _history(tmp_path / "interrupted") == _history(tmp_path / "straight")
    resumed = checkpoint.load(last)["model"]
    straight = checkpoint.load(tmp_path / "straight" / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)


def assert_one_complete_run(uri: str, epochs: int) -> None:
    """One MLflow run, with every parameter and exactly one value per epoch of every metric
    (a kill between the checkpoint and the metrics must not lose that epoch's values)."""
    client, run = _only_run(uri)
    assert run.info.status == "FINISHED"
    assert {"learning_rate", "epochs", "arch", "seed"} <= set(run.data.params)
    for metric in (*METRICS, "skipped_images", "epoch_seconds"):
        assert _steps(client, run, metric) == list(range(1, epochs + 1)), metric


def test_register_name_registers_an_mlflow_model(tiny_data, tmp_path, mlflow_store):
    out = tmp_path / "out"
    assert main(train_args(tiny_data, out, epochs=1, register_name="fowl-test")) == 0
    client = tracking.MlflowClient(mlflow_store)
    (version,) = client.search_model_versions("name='fowl-test'")
    assert version.run_id == _only_run(mlflow_store)[1].info.run_id
    import mlflow

    local = mlflow.artifacts.download_artifacts(artifact_uri=version.source,
                                                dst_path=str(tmp_path / "registered"))
    files = {path.name for path in Path(local).rglob("*")}
    assert {"MLmodel", "model.pt", "model.json"} <= files  # the model and our model folder
    pins = (Path(local) / "requirements.txt").read_text().split()  # what loading it takes
    assert {"torch", "torchvision", "cloudpickle"} <= {pin.split("==")[0] for pin in pins}, pins
    assert f"torch=={torch.__version__.split('+')[0]}" in pins
