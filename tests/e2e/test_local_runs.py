"""The repo's job specs, unchanged, run locally through mlops.run (no Docker, no Azure).

Every test asserts that the source tree (src/, the specs, the fixtures) is unchanged afterwards.
"""

from __future__ import annotations

import ast
import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import SMALL_ARCH, built_once, copied_store, lazy, shared_folder

from mlops import run as local
from mlops.endpoints.models import model_source
from mlops.specs import ROOT, load_spec

tracking = lazy("mlflow.tracking")

HELLO = ROOT / "tests" / "fixtures" / "hello"
TINY = ["inputs.epochs=1", "inputs.image_size=32", "inputs.weights=none", "inputs.batch_size=8",
        "inputs.data.type=uri_folder", f"inputs.arch={SMALL_ARCH}"]
pytestmark = pytest.mark.usefixtures("sources_unchanged")


@pytest.fixture
def assets(tmp_path, tiny_data) -> Path:
    path = tmp_path / "local-paths.yml"
    path.write_text(yaml.safe_dump({"azureml:fowl-data": str(tiny_data)}))
    return path


def run(spec, run_dir, assets=None, sets=(), max_procs=2) -> int:
    argv = [str(spec), "--run-dir", str(run_dir), "--max-procs", str(max_procs)]
    argv += ["--assets", str(assets)] if assets else []
    for item in sets:
        argv += ["--set", item]
    return local.main(argv)


def runs_of(experiment: str, uri: str | None = None):
    client = tracking.MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return client, client.search_runs([found.experiment_id]) if found else []


@dataclass
class Retried:
    folder: Path  # the run folder both attempts used
    store: str  # the MLflow store they tracked to
    stopped: int  # the exit code of the runner that was stopped


@pytest.fixture(scope="session")
def retried_train(tmp_path_factory, tiny_data, empty_mlflow_store) -> Retried:
    """jobs/train.yml for 3 epochs, its runner stopped by SIGTERM once the first checkpoint is
    written, then run again into its folder (as Azure retries a preempted job under its own
    run): once for the session, for the tests that read it."""

    def retry(folder: Path) -> None:
        assets = folder / "local-paths.yml"
        assets.write_text(yaml.safe_dump({"azureml:fowl-data": str(tiny_data)}))
        sets = [*TINY, "inputs.epochs=3"]
        argv = [sys.executable, "-m", "mlops.run", str(ROOT / "jobs/train.yml"), "--run-dir",
                str(folder / "run"), "--assets", str(assets)]
        argv += [x for s in sets for x in ("--set", s)]
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MLFLOW_TRACKING_URI", copied_store(empty_mlflow_store, folder))
            runner = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            last = folder / "run/outputs/checkpoints/checkpoints/last.pt"
            deadline = time.monotonic() + 180
            while not last.exists() and runner.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            runner.send_signal(signal.SIGTERM)
            (folder / "stopped").write_text(str(runner.wait(timeout=60)))
            assert run(ROOT / "jobs/train.yml", folder / "run", assets, sets) == 0

    folder = built_once(tmp_path_factory, "retried-train", retry)
    return Retried(folder / "run", f"sqlite:///{folder / 'mlflow.db'}",
                   int((folder / "stopped").read_text()))


@pytest.mark.slow
def test_train_spec_runs_locally(retried_train):
    folder = retried_train.folder
    assert (folder / "outputs/model/model.pt").is_file()
    assert (folder / "outputs/checkpoints/checkpoints/last.pt").is_file()
    assert (folder / "wd/image_classifier/train.py").is_file()  # ran in its own snapshot
    client, runs = runs_of("fowl-classifier", retried_train.store)
    (mlflow_run,) = runs
    assert mlflow_run.info.run_name == "fowl-train" and mlflow_run.info.status == "FINISHED"
    assert mlflow_run.data.tags["mlops.spec"].endswith("jobs/train.yml")
    assert "best_val_acc" in mlflow_run.data.metrics


@pytest.mark.slow
def test_a_stopped_job_rerun_into_its_folder_continues_its_mlflow_run(retried_train):
    """As Azure retries a preempted job under its own run: one run, every epoch once."""
    assert retried_train.stopped == 128 + signal.SIGTERM
    client, runs = runs_of("fowl-classifier", retried_train.store)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert {"epochs", "learning_rate", "arch"} <= set(runs[0].data.params)
    for metric in ("train_loss", "val_acc", "best_val_acc", "lr"):
        steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, metric)]
        assert sorted(steps) == [1, 2, 3], metric
    assert "==== attempt at" in (retried_train.folder / "log.txt").read_text()


@pytest.mark.proof
@pytest.mark.slow
def test_distributed_spec_runs_the_command_once_per_process(tmp_path, assets, mlflow_store,
                                                           monkeypatch, capsys):
    """Each process trains on its own shard, all end with the same weights, rank 0 tracks."""
    monkeypatch.setenv("LOG_LEVEL", "DEBUG")
    sets = [*TINY, "inputs.epochs=2"]
    assert run(ROOT / "jobs/train-distributed.yml", tmp_path / "run", assets, sets) == 0
    log = (tmp_path / "run/log.txt").read_text()
    assert "[process 1]" in capsys.readouterr().out  # Azure starts the command per process
    for epoch in (1, 2):
        shards = {rank: ast.literal_eval(indices) for rank, indices in re.findall(
            rf"epoch {epoch} rank (\d) sample indices (\[.*?\])", log)}
        assert set(shards) == {"0", "1"} and set(shards["0"]).isdisjoint(shards["1"])
        assert sorted(shards["0"] + shards["1"]) == list(range(48))  # 48 images, none dropped
    digests = dict(re.findall(r"rank (\d) final weights digest (\w+)", log))
    assert set(digests) == {"0", "1"} and len(set(digests.values())) == 1
    client, runs = runs_of("fowl-classifier")
    assert len(runs) == 1, "only rank 0 tracks"
    history = client.get_metric_history(runs[0].info.run_id, "best_val_acc")
    assert [m.step for m in history] == [1, 2]
    assert (tmp_path / "run/outputs/model/model.pt").is_file()


@pytest.mark.slow
def test_sweep_spec_runs_locally(tmp_path, assets, mlflow_store):
    sets = [*TINY, "inputs.epochs=2", "limits.max_total_trials=2",
            "early_termination.delay_evaluation=1"]
    assert run(ROOT / "jobs/sweep.yml", tmp_path / "run", assets, sets) == 0
    summary = json.loads((tmp_path / "run/sweep_summary.json").read_text())
    assert len(summary["trials"]) == 2 and summary["best_trial"] is not None
    for trial in summary["trials"]:
        assert 0.0005 <= trial["params"]["learning_rate"] <= 0.005
        assert trial["status"] in ("Completed", "EarlyTerminated") and trial["intervals"] >= 1
    assert len({t["folder"] for t in summary["trials"]}) == 2  # each trial its own folder
    best = Path(summary["best_trial"]["folder"])
    assert (best / "outputs/model/model.pt").is_file()
    published = (tmp_path / "run/outputs/model/model.pt").read_bytes()  # the best trial's model
    assert published == (best / "outputs/model/model.pt").read_bytes()
    client, runs = runs_of("fowl-classifier")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.tags["best_child_run_id"] == summary["best_trial"]["run_id"]
    assert len(runs) == 3


PIPELINE = ["inputs.epochs=1", "inputs.image_size=32", "jobs.train.inputs.weights=none",
            "jobs.train.inputs.batch_size=8", f"jobs.train.inputs.arch={SMALL_ARCH}"]


@pytest.fixture(scope="session")
def passing_pipeline(tmp_path_factory, tiny_data, empty_mlflow_store) -> Path:
    """jobs/pipeline.yml run once for the whole session, in a folder every xdist worker shares
    (the first to come runs it). The other pipeline tests run beside it, so the steps they share
    with it are reused, as Azure reuses them (mlops/runtime/reuse.py)."""
    with shared_folder(tmp_path_factory, "pipelines") as runs:
        if step_statuses(runs / "passing").get("register") != "Completed":
            assets = runs / "local-paths.yml"
            assets.write_text(yaml.safe_dump({"azureml:fowl-data": str(tiny_data)}))
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("MLFLOW_TRACKING_URI", copied_store(empty_mlflow_store, runs))
                assert run(ROOT / "jobs/pipeline.yml", runs / "passing", assets,
                           [*PIPELINE, "inputs.min_val_acc=0"]) == 0
    return runs / "passing"


def step_statuses(folder: Path) -> dict[str, str]:
    return {p.parent.name: json.loads(p.read_text())["status"]
            for p in (folder / "steps").glob("*/status.json")}


@pytest.mark.proof
@pytest.mark.slow
def test_pipeline_spec_runs_locally(passing_pipeline):
    steps = passing_pipeline / "steps"
    assert step_statuses(passing_pipeline) == dict.fromkeys(
        ("prep", "train", "evaluate", "register"), "Completed")
    report = json.loads((steps / "prep/outputs/prepared/prep_report.json").read_text())
    assert report["counts"]["train"] == {"chickens": 24, "turkeys": 24}
    assert (passing_pipeline / "outputs/model/model.pt").is_file()  # parent output wired
    metrics = json.loads((steps / "evaluate/outputs/metrics/metrics.json").read_text())
    assert metrics["val_count"] == 16
    registration = steps / "register/outputs/registration/registration.json"
    assert json.loads(registration.read_text())["registered"]


def test_failing_pipeline_step_stops_and_shows_its_log(tmp_path, assets, mlflow_store, capsys):
    sets = ["inputs.epochs=1", "inputs.image_size=32", "jobs.train.inputs.weights=none",
            "jobs.train.inputs.arch=not_a_model"]
    assert run(ROOT / "jobs/pipeline.yml", tmp_path / "run", assets, sets) != 0
    err = capsys.readouterr().err
    assert "step train failed" in err and "jobs.train" in err
    assert "--arch not_a_model: not a torchvision classification model" in err
    assert step_statuses(tmp_path / "run") == {"prep": "Completed", "train": "Failed"}
    assert not (tmp_path / "run/steps/evaluate").exists()


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_third_party_sweep_with_choice_and_uniform(tmp_path, mlflow_store):
    assert run(HELLO / "hello-sweep.yml", tmp_path / "run") == 0
    summary = json.loads((tmp_path / "run/sweep_summary.json").read_text())
    assert [t["status"] for t in summary["trials"]] == ["Completed"] * 3
    for trial in summary["trials"]:
        assert trial["params"]["quality"] in (0.9, 0.6)
        assert 0.0 <= trial["params"]["noise"] <= 0.01
        assert trial["intervals"] == 4


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_grid_enumerates_and_bandit_stops_weak_trials_while_they_run(tmp_path, mlflow_store):
    assert run(HELLO / "hello-grid.yml", tmp_path / "run", max_procs=4) == 0
    trials = json.loads((tmp_path / "run/sweep_summary.json").read_text())["trials"]
    combos = sorted((t["params"]["quality"], t["params"]["noise"]) for t in trials)
    assert combos == [(0.3, 0.0), (0.3, 0.001), (0.9, 0.0), (0.9, 0.001)]
    for trial in trials:
        if trial["params"]["quality"] == 0.3:
            assert trial["status"] == "EarlyTerminated" and trial["intervals"] < 10
        else:
            assert trial["status"] == "Completed" and trial["intervals"] == 10


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_command_job_gets_environment_variables_and_outputs(tmp_path, mlflow_store):
    assert run(HELLO / "hello-command.yml", tmp_path / "run") == 0
    assert (tmp_path / "run/outputs/result/greeting").read_text() == "hi"
    assert not (HELLO / "src/outputs").exists()
    client, (mlflow_run,) = runs_of("hello-command")
    assert [m.value for m in client.get_metric_history(mlflow_run.info.run_id, "accuracy")] == \
        [0.25, 0.375]
    # artifacts beside the store, not in ./mlruns of whatever folder the runner started in
    assert mlflow_run.info.artifact_uri.startswith(str(tmp_path / "mlruns"))
    assert list((tmp_path / "mlruns").rglob("user_logs/log.txt"))


@pytest.mark.proof
def test_unmapped_asset_names_the_asset_and_the_file(tmp_path, assets, mlflow_store, capsys):
    code = run(ROOT / "jobs/train.yml", tmp_path / "run", assets,
               [*TINY, "inputs.data.path=azureml:mystery-data@3"])
    err = capsys.readouterr().err
    assert code == 2 and "azureml:mystery-data@3 has no local stand-in" in err
    assert f"'azureml:mystery-data: <local path>' to {assets}" in err


@pytest.mark.proof
@pytest.mark.parametrize(("spec", "sets", "message"), [
    ("jobs/train-distributed.yml", ["distribution.type=torch"], "is not one of ['pytorch'"),
    ("components/train.yml", [], "names a commandComponent, not a job"),
    ("tests/invalid_specs/undefined-input-ref.yml", [], "refers to an undefined input 'lr'"),
    ("jobs/train.yml", ["inputs.epochs"], "is not KEY=VALUE"),
])
def test_bad_specs_give_clear_errors(spec, sets, message, tmp_path, assets, mlflow_store, capsys):
    assert run(ROOT / spec, tmp_path / "run", assets, sets) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # last in the file: the shared passing run is most likely done by then
def test_the_local_loop_registers_what_passes_the_gate_and_serves_it_by_name(
        passing_pipeline, mlflow_store, capsys, tmp_path):
    """train -> register -> serve by name, as on Azure: the register step registers version 1
    through MLflow; a run whose model fails the gate registers nothing and the deployment still
    serves 1; a later good run registers 2, `@latest` moves, and `:1` still serves 1. Only the
    register step reruns (its threshold changed): the other steps are the passing run's."""
    assets = passing_pipeline.parent / "local-paths.yml"
    folder = passing_pipeline.parent / f"loop-{tmp_path.name}"
    served = load_spec(ROOT / "endpoints/blue.yml").data["model"]  # azureml:fowl-classifier@latest

    def gate(threshold: float, name: str) -> int:
        return run(ROOT / "jobs/pipeline.yml", folder / name, assets,
                   [*PIPELINE, f"inputs.min_val_acc={threshold}"])

    assert gate(0.001, "first") == 0
    assert model_source(served, ROOT, "blue.yml").version == "1"
    assert gate(1.01, "refused") == 3
    assert step_statuses(folder / "refused") == {
        "prep": "Reused", "train": "Reused", "evaluate": "Reused", "register": "Failed"}
    record = json.loads((folder / "refused/steps/register/outputs/registration/"
                         "registration.json").read_text())
    assert record["registered"] is False and record["min_val_acc"] == 1.01
    assert "below --min_val_acc" in capsys.readouterr().err
    assert model_source(served, ROOT, "blue.yml").version == "1"  # nothing new was registered
    assert gate(0.002, "second") == 0
    latest = model_source(served, ROOT, "blue.yml")
    first = model_source("azureml:fowl-classifier:1", ROOT, "blue.yml")
    assert (latest.version, first.version) == ("2", "1")
    assert "local workspace" in latest.origin and (latest.path / "MLmodel").is_file()
    assert len(tracking.MlflowClient().search_model_versions("name='fowl-classifier'")) == 2


@pytest.mark.proof
def test_a_conda_files_variables_are_set_for_the_job_and_the_spec_wins(tmp_path, mlflow_store):
    """conda sets an environment's `variables:` when it activates it, as Azure's image runs the
    job; the spec's environment_variables are set over them."""
    spec = tmp_path / "job.yml"
    spec.write_text(yaml.safe_dump({
        "$schema": "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json",
        "type": "command", "command": "echo \"greeting=$GREETING retries=$RETRIES\"",
        "environment": {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04",
                        "conda_file": {"dependencies": ["python=3.11"],
                                       "variables": {"GREETING": "hi", "RETRIES": 3}}},
        "environment_variables": {"RETRIES": "5"}}))
    assert run(spec, tmp_path / "run") == 0
    assert "greeting=hi retries=5" in (tmp_path / "run" / "log.txt").read_text()
