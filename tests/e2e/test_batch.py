"""The batch deployment: its specs validate, and batch-local runs it as Azure would."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import built_once, copied_store, until

from image_classifier.images import open_image
from image_classifier.predict import Service, predict
from mlops import batch
from mlops.checks.validation import validate
from mlops.runtime.records import RunRecord
from mlops.specs import ROOT

SPEC = ROOT / "endpoints" / "batch" / "deployment.yml"
FIXTURES = ROOT / "tests" / "fixtures" / "batch"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store")


@pytest.fixture
def images(tiny_data, tmp_path) -> Path:
    folder = shutil.copytree(tiny_data / "val", tmp_path / "images")
    (folder / "turkeys" / "broken.jpg").write_bytes(b"not a jpeg")
    return folder


def run(spec: Path, folder: Path, model: Path, run_dir: Path) -> int:
    return batch.main([str(spec), "--input", str(folder), "--model", str(model), "--run-dir",
                       str(run_dir), "--max-procs", "2"])


@pytest.mark.proof
def test_the_batch_specs_pass_every_validation_layer():
    assert validate([ROOT / "endpoints/batch/endpoint.yml", SPEC]) == []


@dataclass(kw_only=True)
class Scored:
    images: Path
    run: Path
    code: int
    out: str


@pytest.fixture(scope="session")
def scored(tiny_data, model_dir, tmp_path_factory, empty_mlflow_store) -> Scored:
    """The repo's batch deployment run once over the val images and a broken file, for the
    tests that read its outputs."""

    def score(folder: Path) -> None:
        images = shutil.copytree(tiny_data / "val", folder / "images")
        (images / "turkeys" / "broken.jpg").write_bytes(b"not a jpeg")
        with pytest.MonkeyPatch.context() as patch, io.StringIO() as out:
            patch.setenv("MLFLOW_TRACKING_URI", copied_store(empty_mlflow_store, folder))
            with contextlib.redirect_stdout(out):
                code = run(SPEC, images, model_dir, folder / "run")
            (folder / "stdout.txt").write_text(out.getvalue())
        (folder / "code").write_text(str(code))

    folder = built_once(tmp_path_factory, "batch-scored", score)
    return Scored(images=folder / "images", run=folder / "run",
                  code=int((folder / "code").read_text()), out=(folder / "stdout.txt").read_text())


@pytest.mark.proof
def test_batch_local_writes_a_row_per_image_and_counts_the_bad_one(scored):
    assert scored.code == 0, scored.out
    rows = list(csv.reader((scored.run / "outputs/predictions.csv").open()))
    names = {p.name for p in scored.images.rglob("*_*.jpg")}
    assert len(rows) == 16 and {r[0] for r in rows} == names
    for _name, label, *probabilities in rows:
        assert label in ("chickens", "turkeys") and len(probabilities) == 2
        assert abs(sum(map(float, probabilities)) - 1) < 1e-4
    errors = "".join(p.read_text() for p in (scored.run / "outputs").glob("errors_*.csv"))
    assert errors.startswith("broken.jpg,") and "not a readable image" in errors
    assert "16 of 17 files scored, 1 failed" in scored.out


@pytest.mark.proof
def test_the_rows_match_the_online_predict(scored, model_dir):
    assert scored.code == 0, scored.out
    rows = {r[0]: r for r in csv.reader((scored.run / "outputs/predictions.csv").open())}
    service = Service(model_dir)
    paths = sorted(scored.images.rglob("*_*.jpg"))[:5]
    for path, online in zip(paths, predict(service, [open_image(str(p), service.min_side)
                                                     for p in paths]), strict=True):
        row = rows[path.name]
        assert row[1] == online["label"]
        expected = [online["probabilities"][c] for c in service.classes]
        assert [float(v) for v in row[2:]] == pytest.approx(expected, abs=1e-6)


def moved(spec: dict) -> dict:
    """A deployment spec written outside the repository: its code and its environment as the
    repository's files, inline (its `azureml:image-classifier@latest` is found by the spec's
    folder: out of the repository nothing knows it, and the deployment is refused as az ml
    refuses one whose environment the workspace lacks)."""
    environment = yaml.safe_load((ROOT / "environments" / "image-classifier.yml").read_text())
    spec["environment"] = {"image": environment["image"],
                           "conda_file": str(ROOT / "environments" / environment["conda_file"])}
    return spec


def test_the_error_threshold_stops_a_run_with_too_many_bad_files(images, model_dir, tmp_path,
                                                                 capsys):
    spec = moved(yaml.safe_load(SPEC.read_text()))
    spec["settings"].update(error_threshold=2, mini_batch_size=2)
    spec["code_configuration"]["code"] = str(ROOT / "src")
    strict = tmp_path / "strict.yml"
    strict.write_text(yaml.safe_dump(spec))
    for index in range(4):
        (images / "chickens" / f"bad-{index}.png").write_bytes(b"\x89PNG broken")
    assert run(strict, images, model_dir, tmp_path / "run") == 1
    out = capsys.readouterr().out
    assert "error_threshold 2 exceeded" in out and ": Failed:" in out


def test_a_failing_mini_batch_is_retried_and_a_slow_one_times_out(tiny_data, model_dir,
                                                                  tmp_path, monkeypatch):
    assert run(FIXTURES / "flaky-deployment.yml", tiny_data / "val", model_dir,
               tmp_path / "flaky") == 0  # the first call fails, the retry succeeds
    rows = (tmp_path / "flaky/outputs/rows.txt").read_text().split()
    assert len(rows) == 16 and {r.split(",")[1] for r in rows} >= {"2"}
    monkeypatch.setenv("BATCH_SLEEP", "8")  # beyond retry_settings.timeout (5 s) every time
    spec = moved(yaml.safe_load((FIXTURES / "flaky-deployment.yml").read_text()))
    spec["settings"]["environment_variables"] = {"BATCH_SLEEP": "8"}
    spec["code_configuration"]["code"] = str(FIXTURES)
    slow = tmp_path / "slow.yml"
    slow.write_text(yaml.safe_dump(spec))
    assert run(slow, tiny_data / "val" / "chickens", model_dir, tmp_path / "slow") == 1
    assert "run() took longer than retry_settings.timeout" in \
        (tmp_path / "slow/log.txt").read_text()


@pytest.mark.proof
def test_a_spec_that_is_not_a_batch_deployment_is_refused(images, model_dir, tmp_path, capsys):
    assert run(ROOT / "endpoints/blue.yml", images, model_dir, tmp_path / "run") == 2
    assert "managedOnlineDeployment, not a batch deployment" in capsys.readouterr().err


@pytest.mark.proof
def test_a_pipeline_component_deployment_is_refused_with_what_runs_it_here(tmp_path, capsys):
    (tmp_path / "deployment.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/"
        "pipelineComponentBatchDeployment.schema.json\n"
        "name: hello-dpl\nendpoint_name: hello\ntype: pipeline\n"
        "component: azureml:hello_batch@latest\nsettings:\n  default_compute: batch-cluster\n")
    assert batch.main([str(tmp_path / "deployment.yml"), "--input", str(tmp_path),
                       "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "a deployment of type pipeline runs a pipeline component, not a model" in err
    assert "azml batch-endpoint invoke" in err and not (tmp_path / "run").exists()


def test_names_that_are_not_utf8_fifos_and_link_loops_lose_nothing(tiny_data, model_dir,
                                                                   tmp_path, capsys):
    """File names are bytes on Linux: a valid image and a broken one whose names are not UTF-8
    are scored and reported under their own bytes; a FIFO and a link loop are named once and
    counted, and nothing else in their mini-batch is lost."""
    import os

    images = tmp_path / "images"
    images.mkdir()
    originals = sorted((tiny_data / "val" / "chickens").glob("*.jpg"))[:3]
    for source in originals:
        shutil.copyfile(source, images / source.name)
    odd = os.fsencode(images) + b"/caf\xe9.jpg"
    with open(odd, "wb") as handle:
        handle.write(originals[0].read_bytes())
    with open(os.fsencode(images) + b"/bro\xffken.jpg", "wb") as handle:
        handle.write(b"not a jpeg")
    os.mkfifo(images / "pipe.jpg")
    (images / "loop.jpg").symlink_to("loop.jpg")
    code = run(SPEC, images, model_dir, tmp_path / "run")
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rows = (tmp_path / "run" / "outputs" / "predictions.csv").read_bytes().splitlines()
    assert len(rows) == 4 and any(row.startswith(b"caf\xe9.jpg,") for row in rows)
    (errors,) = (tmp_path / "run" / "outputs").glob("errors_*.csv")
    assert errors.read_bytes().startswith(b"bro\xffken.jpg,")
    assert err.count("pipe.jpg (a FIFO)") == 1 and err.count("loop.jpg (a link loop)") == 1
    assert "4 of 5 files scored, 1 failed, 2 not files (not scored)" in out


def test_the_flat_batch_deployment_layout_azure_ai_ml_still_loads_scores_a_folder(
        tiny_data, model_dir, tmp_path, capsys, monkeypatch):
    """No `type:`, the settings at the top level ($schema batchDeployment): azure-ai-ml loads it
    as a BatchDeployment, so it validates and runs here with those settings. Its input is a
    data asset of the local workspace, as `az ml batch-endpoint invoke --input
    azureml:<name>@latest` names one."""
    from mlops.workspace.records import AssetKind
    from mlops.workspace.store import Draft, Workspace

    monkeypatch.setenv("MLOPS_WORKSPACE_DIR", str(tmp_path / "workspace"))
    Workspace(tmp_path / "workspace").create(Draft(kind=AssetKind.DATA, name="val-images",
                                                   source=tiny_data / "val", type="uri_folder"))
    spec = FIXTURES / "flat-deployment.yml"
    assert [f for f in validate([spec]) if f.is_error] == []
    assert batch.main([str(spec), "--input", "azureml:val-images@latest", "--model",
                       str(model_dir), "--run-dir", str(tmp_path / "run"), "--max-procs",
                       "2"]) == 0, capsys.readouterr()
    rows = (tmp_path / "run" / "outputs" / "flat-rows.csv").read_text().splitlines()
    assert len(rows) == 16
    assert "in 4 mini-batch(es), 1 process(es)" in capsys.readouterr().out


def test_the_processes_start_before_the_input_is_read_and_an_unreadable_one_ends_the_run(
        tiny_data, model_dir, tmp_path, monkeypatch, capsys):
    """The scoring processes import the script and run init() while the input is read (here a
    zip is checked and refused, ARCHIVE_MAX_MEMBERS=2): the run ends Failed, its processes
    stopped, with the input's error and exit code 2."""
    import zipfile

    from mlops.endpoints import batch_deployment
    from mlops.runtime.records import Status, TaskRecord

    seen: list[Status | None] = []
    real = batch_deployment.plan

    def plan(*args, **kwargs):
        record = TaskRecord.read(tmp_path / "run")
        seen.append(record and record.status)
        return real(*args, **kwargs)

    monkeypatch.setattr(batch_deployment, "plan", plan)
    monkeypatch.setenv("ARCHIVE_MAX_MEMBERS", "2")
    with zipfile.ZipFile(tmp_path / "three.zip", "w") as archive:
        for path in sorted((tiny_data / "val" / "chickens").glob("*.jpg"))[:3]:
            archive.write(path, path.name)
    assert run(FIXTURES / "flaky-deployment.yml", tmp_path / "three.zip", model_dir,
               tmp_path / "run") == 2
    assert seen == [Status.RUNNING]  # launched first
    assert "3 members" in capsys.readouterr().err
    assert TaskRecord.read(tmp_path / "run").status == Status.FAILED
    work = str(tmp_path / "run" / "work").encode()

    def running_there(process: Path) -> bool:
        try:
            return work in (process / "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            return False

    assert not [p for p in Path("/proc").glob("[0-9]*") if running_there(p)]


def azml(state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """azml in this repository (its environments), its state in `state`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MLOPS_WORKSPACE_DIR", "MLOPS_STATE_DIR",
                        "MLFLOW_RUN_ID")}
    done = subprocess.run([sys.executable, "-m", "mlops.azml", *args], cwd=ROOT,
                          env={**env, "AZML_STATE_DIR": str(state)}, capture_output=True,
                          text=True, timeout=300)
    assert not check or done.returncode == 0, done.stderr
    return done


def ended(folder: Path) -> str:
    record = RunRecord.read(folder)
    status = str(record.status) if record and record.status else ""
    return status if status in ("Completed", "Failed", "Canceled") else ""


@pytest.mark.proof
def test_a_batch_endpoint_is_created_deployed_and_invoked_as_with_az_ml(tiny_data, tmp_path):
    """A batch endpoint and deployment, created as az ml creates them; an invoke is a job of its
    own (type pipeline) that runs to Completed in the background, which `job show` reads and
    `job download` copies the scores of. The deployment's scorer is the standard library's
    (tests/fixtures/batch: its first call in each process fails and is retried): the repo's
    torch deployment is scored by test_batch_local_writes_a_row_per_image_and_counts_the_bad_one
    through the same runtime."""
    state, model = tmp_path / "state", tmp_path / "model"
    model.mkdir()
    azml(state, "batch-endpoint", "create", "-f", "endpoints/batch/endpoint.yml")
    azml(state, "batch-deployment", "create", "-f", str(FIXTURES / "flaky-deployment.yml"),
         "--model", str(model))
    job = json.loads(azml(state, "batch-endpoint", "invoke", "-n", "fowl-classifier-batch",
                          "--input", str(tiny_data / "val"), "--max-procs", "2").stdout)
    assert job["name"].startswith("batchjob-") and job["status"] == "Starting"
    assert job["properties"]["azureml.deploymentname"] == "flaky"
    folder = Path(job["properties"]["azml.run_folder"])
    assert until(lambda: ended(folder), 300, "the batch job to end") == "Completed", \
        (folder / "runner.log").read_text()
    shown = json.loads(azml(state, "job", "show", "-n", job["name"]).stdout)
    assert (shown["status"], shown["type"]) == ("Completed", "pipeline")
    listed = azml(state, "batch-endpoint", "list-jobs", "-n", "fowl-classifier-batch",
                  "--query", "[].name", "-o", "tsv").stdout.split()
    assert listed == [job["name"]]
    azml(state, "job", "download", "-n", job["name"], "--output-name", "score", "-p",
         str(tmp_path / "got"))
    rows = (tmp_path / "got/named-outputs/score/rows.txt").read_text().splitlines()
    assert sorted(row.split(",")[0] for row in rows) == sorted(
        p.name for p in (tiny_data / "val").rglob("*") if p.is_file())


def test_a_batch_job_is_canceled_like_any_job(tmp_path):
    """SIGTERM (azml job cancel) stops the scoring processes; the job ends Canceled."""
    state, model = tmp_path / "state", tmp_path / "model"
    model.mkdir()
    images = shutil.copytree(FIXTURES, tmp_path / "in")
    azml(state, "batch-endpoint", "create", "-f", "endpoints/batch/endpoint.yml", "-n", "slow-b")
    azml(state, "batch-deployment", "create", "-f", str(FIXTURES / "flaky-deployment.yml"),
         "-e", "slow-b", "--model", str(model), "--set",
         "settings.environment_variables.BATCH_SLEEP=120", "settings.retry_settings.timeout=300")
    job = json.loads(azml(state, "batch-endpoint", "invoke", "-n", "slow-b", "--input",
                          str(images)).stdout)
    folder = Path(job["properties"]["azml.run_folder"])
    until(lambda: list(folder.glob("outputs/init-*")), 240, "a scoring process to start")
    azml(state, "job", "cancel", "-n", job["name"])
    assert ended(folder) == "Canceled" and RunRecord.read(folder).exit_code == 143
    again = azml(state, "job", "stream", "-n", job["name"], check=False)
    assert again.returncode == 1 and "Canceled" in again.stderr
