"""Any online or batch deployment spec serves locally as Azure serves it: the model its spec
names, laid out under AZUREML_MODEL_DIR as Azure mounts it, in the deployment's environment, and
MLflow models without code through Azure's no-code scoring."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from endpoint_client import Endpoints, use_root
from endpoint_client import post as client_post
from support import built_once

from mlops import batch
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
        # in this worker, which has scikit-learn and MLflow loaded already: no process is
        # under test here
        spec = importlib.util.spec_from_file_location("make_models", MAKE_MODELS)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.main([str(folder / "deployments")]) == 0

    return built_once(tmp_path_factory, "deployments", make) / "deployments"


@pytest.fixture
def served(tmp_path, monkeypatch):
    """Local endpoints of this test (serve.main start, as make serve-local), stopped after it."""
    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    yield endpoints
    endpoints.stop()


def post(endpoints: Endpoints, body) -> tuple[int, object]:
    """The scorer's status and answer, through the endpoint with its key (a scorer's error
    comes back as Azure sends it: 424, the scorer's status in a header)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = client_post(f"http://127.0.0.1:{endpoints.port}/score", data, endpoints.headers())
    status = answer.status
    if status == 424:
        status = int(answer.headers["ms-azureml-model-error-statuscode"])
    return status, answer.body


def server(endpoints: Endpoints) -> Path:
    """The folder of the endpoint's one deployment server."""
    (slot,) = endpoints.state().deployments.values()
    return Path(slot.folder)


def server_log(endpoints: Endpoints) -> str:
    return (server(endpoints) / "log.txt").read_text()


@pytest.mark.parametrize("spec", ["folder-deployment.yml", "file-deployment.yml",
                                  "kubernetes-deployment.yml"])
def test_a_custom_scoring_script_reads_the_model_where_azure_mounts_it(deployments, served, spec):
    served.start(deployments / "regressor" / spec)
    request = json.loads((deployments / "regressor" / "sample-request.json").read_text())
    status, answer = post(served, request)
    assert status == 200 and answer == pytest.approx(expected(request["data"]))
    log = server_log(served)
    assert f"from {deployments / 'regressor' / 'model'}" in log and "environment: " in log
    model_dir = server(served) / "app" / "azureml-models"
    assert model_dir.is_dir() and (deployments / "regressor" / "model" / "regressor.pkl").is_file()


@pytest.mark.proof
def test_an_mlflow_model_without_code_answers_as_azures_no_code_scoring(deployments, served):
    """Azure's no-code scorer's rules (mlops/endpoints/nocode/mlflow_score.py) under the
    environment's real inference server: `input_data` in split orientation is predicted; what
    the server cannot parse is its own 400 or 415; input the model refuses is a 500; the
    endpoint answers each non-200 as 424 with the server's status in a header."""
    served.start(deployments / "mlflow" / "online-deployment.yml")
    assert "no-code MLflow scoring" in server_log(served)
    split = json.loads((deployments / "mlflow" / "sample-request.json").read_text())
    assert post(served, split) == (200, pytest.approx(expected(split["input_data"]["data"])))
    frame = {"columns": ["a", "b", "c"], "data": [[1, 2, 3], [0.5, 0, 1]]}
    assert post(served, {"input_data": frame}) == (
        200, pytest.approx(expected([[1, 2, 3], [0.5, 0, 1]])))
    assert post(served, {"dataframe_split": frame}) == (
        400, {"message": "A value is not provided for the 'input_data' parameter."})
    assert post(served, b"not json")[0] == 400
    wrong_type = client_post(f"http://127.0.0.1:{served.port}/score", split, served.headers(),
                             content_type="text/plain")
    assert (wrong_type.status, wrong_type.headers["ms-azureml-model-error-statuscode"]) == (
        424, "415")
    failed = {"message": "An unexpected error occurred in scoring script. Check the logs for "
                         "more info."}
    for body in ({"input_data": {"columns": ["a", "b"], "index": [0], "data": [[1, 2]]}},
                 {"input_data": [{"a": 1.0, "b": 2.0, "c": 3.0}]}):  # records: split is read
        assert post(served, body) == (500, failed)


def test_an_mlflow_tensor_model_takes_arrays(deployments, served):
    served.start(deployments / "mlflow" / "tensor-deployment.yml")
    assert post(served, {"input_data": [[1, 2, 3], [0, 0, 0]]}) == (
        200, pytest.approx(expected([[1, 2, 3], [0, 0, 0]])))
    status, answer = post(served, {"input_data": [[1, 2]]})
    assert status == 500 and "Check the logs" in answer["message"]
    assert "does not match expected shape" in server_log(served)


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


@pytest.mark.network  # a cold cache: the MLTable reader's environment from the registry
def test_an_mltable_input_is_scored_row_by_row_as_azure_reads_the_table(
        deployments, tmp_path, capsys, mlflow_store):
    """A folder with 01.csv and its MLTable, given as an mltable input: the table's rows are
    scored (as a folder of files, its MLTable file would fail: "File type '' is not
    supported"); the MLTable's own `take` applies."""
    data = tmp_path / "table"
    data.mkdir()
    (data / "01.csv").write_text("a,b,c\n1.0,2,3\n0,0,0\n10,-1,0.5\n2,2.5,2\n")
    (data / "MLTable").write_text("paths:\n  - file: ./01.csv\ntransformations:\n"
                                  "  - read_delimited:\n      delimiter: ','\n  - take: 3\n")
    code = batch.main([str(deployments / "mlflow" / "batch-deployment.yml"), "--input", str(data),
                       "--input-type", "mltable", "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0 and "3 of 3 rows scored, 0 failed" in out
    rows = (tmp_path / "run/outputs/predictions.csv").read_text().splitlines()
    assert [float(r.split(",")[1]) for r in rows] == pytest.approx(
        expected([[1, 2, 3], [0, 0, 0], [10, -1, 0.5]]))
    from mlops import assets  # an mltable data asset is scored by its rows, as on Azure

    assert assets.main(["create", "data", "--name", "rows", "--path", str(data), "--type",
                        "mltable"]) == 0
    assert batch.main([str(deployments / "mlflow" / "batch-deployment.yml"), "--input",
                       "azureml:rows@latest", "--run-dir", str(tmp_path / "asset")]) == 0
    assert "3 of 3 rows scored, 0 failed" in capsys.readouterr().out


@pytest.mark.heavy
@pytest.mark.network
def test_a_deployment_pinning_another_scikit_learn_serves_in_that_environment(
        deployments, served, tmp_path):
    """The conda file pins scikit-learn 1.5.2 (.venv has another): the environment is built as a
    job's, the model pickled by that release loads in it, and the answer says which served."""
    from mlops.environments.activation import Environments
    from mlops.environments.envspec import EnvironmentRef

    pinned = deployments / "pinned"
    env = Environments().activate(EnvironmentRef(value={"conda_file": "conda.yml"}, base=pinned),
                                  tmp_path / "maker", "test: make the pinned model")
    subprocess.run([str(tmp_path / "maker" / "env" / "bin" / "python"), str(MAKE_MODELS),
                    str(deployments), "--only", "pinned"], check=True,
                   env={**os.environ, **env.variables})
    served.start(pinned / "deployment.yml")
    request = json.loads((pinned / "sample-request.json").read_text())
    status, answer = post(served, request)
    assert status == 200 and answer["scikit_learn"] == "1.5.2"
    assert answer["predictions"] == pytest.approx(expected(request["data"]))
    log = server_log(served)
    from mlops.environments.layers import cache_dir  # the environment cache, wherever it is

    assert "scikit-learn 1.5.2 serves LinearRegression" in log and f"{cache_dir()}/" in log
