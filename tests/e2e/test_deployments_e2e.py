"""Any online or batch deployment spec serves locally as Azure serves it: the model its spec
names, laid out under AZUREML_MODEL_DIR as Azure mounts it, in the deployment's environment, and
MLflow models without code through Azure's no-code scoring."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support import built_once

from mlops import batch, serve
from mlops.endpoints import online
from mlops.specs import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "deployments"
MAKE_MODELS = FIXTURES / "make_models.py"


def expected(rows):
    """What every fixture model predicts: y = a + 2b + 3c + 4."""
    return [a + 2 * b + 3 * c + 4 for a, b, c in rows]


# ---- served for real on loopback ----

@pytest.fixture(scope="session")
def deployments(tmp_path_factory):
    """A copy of the fixtures with their models written by .venv's scikit-learn and MLflow."""

    def make(folder: Path) -> None:
        shutil.copytree(FIXTURES, folder / "deployments")
        subprocess.run([sys.executable, str(MAKE_MODELS), str(folder / "deployments")],
                       check=True)

    return built_once(tmp_path_factory, "deployments", make) / "deployments"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """Start the local endpoint for a spec (serve.main, as make serve-local), stop it after."""
    monkeypatch.setattr(online, "STATE", tmp_path / "serve-local")
    port = _free_port()

    def start(spec: Path) -> str:
        assert serve.main(["start", "--deployment", str(spec), "--port", str(port)]) == 0
        return f"http://127.0.0.1:{port}/score"

    yield start
    online.stop()


def post(url: str, body) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    call = urllib.request.Request(url, data=data, method="POST",
                                  headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def server_log() -> str:
    return (online.STATE / "log.txt").read_text()


@pytest.mark.parametrize("spec", ["folder-deployment.yml", "file-deployment.yml",
                                  "kubernetes-deployment.yml"])
def test_a_custom_scoring_script_reads_the_model_where_azure_mounts_it(deployments, served, spec):
    url = served(deployments / "regressor" / spec)
    request = json.loads((deployments / "regressor" / "sample-request.json").read_text())
    status, answer = post(url, request)
    assert status == 200 and answer == pytest.approx(expected(request["data"]))
    log = server_log()
    assert f"from {deployments / 'regressor' / 'model'}" in log and "environment: " in log
    model_dir = online.STATE / "app" / "azureml-models"
    assert model_dir.is_dir() and (deployments / "regressor" / "model" / "regressor.pkl").is_file()


def test_an_mlflow_model_without_code_answers_azures_and_mlflows_request_formats(
        deployments, served):
    url = served(deployments / "mlflow" / "online-deployment.yml")
    assert "no-code MLflow scoring" in server_log()
    split = json.loads((deployments / "mlflow" / "sample-request.json").read_text())
    assert post(url, split) == (200, pytest.approx(expected(split["input_data"]["data"])))
    records = [{"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 0.5, "b": 0.0, "c": 1.0}]
    want = pytest.approx(expected([[1, 2, 3], [0.5, 0, 1]]))
    for body in ({"input_data": records}, {"dataframe_records": records},
                 {"dataframe_split": {"columns": ["a", "b", "c"],
                                      "data": [[1, 2, 3], [0.5, 0, 1]]}}):
        assert post(url, body) == (200, want)
    status, answer = post(url, {"input_data": {"columns": ["a", "b"], "index": [0],
                                               "data": [[1, 2]]}})
    assert status == 400 and "missing inputs ['c']" in answer["error"]
    assert post(url, b"not json")[0] == 400
    assert post(url, {"something": "else"})[0] == 400


def test_an_mlflow_tensor_model_takes_arrays(deployments, served):
    url = served(deployments / "mlflow" / "tensor-deployment.yml")
    assert post(url, {"input_data": [[1, 2, 3], [0, 0, 0]]}) == (
        200, pytest.approx(expected([[1, 2, 3], [0, 0, 0]])))
    status, answer = post(url, {"input_data": [[1, 2]]})
    assert status == 400 and "does not match expected shape" in answer["error"]


def test_an_mlflow_batch_deployment_without_code_writes_azures_predictions_file(
        deployments, tmp_path, capsys, mlflow_store):
    data = tmp_path / "input"
    shutil.copytree(deployments / "mlflow" / "batch-input", data)
    (data / "notes.txt").write_text("not a table")  # Azure: "File type 'txt' is not supported"
    code = batch.main([str(deployments / "mlflow" / "batch-deployment.yml"), "--input", str(data),
                       "--run-dir", str(tmp_path / "run"), "--max-procs", "2"])
    out = capsys.readouterr().out
    assert code == 0 and "2 of 3 files scored, 1 failed" in out  # error_threshold: -1
    assert "the MLflow batch driver" in out and "AZUREML_MODEL_DIR=" in out
    rows = [line.split(",") for line in
            (tmp_path / "run" / "outputs" / "predictions.csv").read_text().splitlines()]
    assert [(r[0], r[2]) for r in rows] == [("0", "part-1.csv"), ("1", "part-1.csv"),
                                            ("0", "part-2.csv")]  # row, prediction, file
    assert [float(r[1]) for r in rows] == pytest.approx(expected([[1, 2, 3], [0, 0, 0],
                                                                  [10, -1, 0.5]]))
    assert "File type 'txt' is not supported" in (tmp_path / "run" / "log.txt").read_text()


@pytest.mark.heavy
@pytest.mark.network
def test_a_deployment_pinning_another_scikit_learn_serves_in_that_environment(
        deployments, served, tmp_path):
    """The conda file pins scikit-learn 1.5.2 (.venv has another): the environment is built as a
    job's, the model pickled by that release loads in it, and the answer says which served."""
    from mlops.environments.activation import Environments
    from mlops.environments.envspec import EnvironmentRef

    pinned = deployments / "pinned"
    env = Environments().activate(EnvironmentRef({"conda_file": "conda.yml"}, pinned),
                                  tmp_path / "maker", "test: make the pinned model")
    subprocess.run([str(tmp_path / "maker" / "env" / "bin" / "python"), str(MAKE_MODELS),
                    str(deployments), "--only", "pinned"], check=True,
                   env={**os.environ, **env.variables})
    url = served(pinned / "deployment.yml")
    request = json.loads((pinned / "sample-request.json").read_text())
    status, answer = post(url, request)
    assert status == 200 and answer["scikit_learn"] == "1.5.2"
    assert answer["predictions"] == pytest.approx(expected(request["data"]))
    log = server_log()
    assert "scikit-learn 1.5.2 serves LinearRegression" in log and ".cache/envs/" in log
