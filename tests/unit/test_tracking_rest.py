"""The runner's MLflow calls over REST (mlops/runtime/mlflow_rest.py) against MLflow's own
tracking app, served in this process on loopback (no process: a thread), give what MLflow's
client gives on the store itself (mlflow_store.ClientStore); Tracking over either ends a job's
runs alike; a server that is gone leaves the runner on the store itself."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mlops.runtime.mlflow_rest import RestError, RestStore, local_folder
from mlops.runtime.mlflow_runs import Tracking
from mlops.runtime.mlflow_store import ClientStore
from mlops.runtime.records import RunStatus


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """MLflow's tracking app on a new store, on 127.0.0.1, in a thread (one for the module:
    the app's stores are the process's)."""
    from mlflow.server import app
    from mlflow.server.handlers import initialize_backend_stores
    from werkzeug.serving import make_server

    folder = tmp_path_factory.mktemp("served")
    store = f"sqlite:///{folder / 'mlflow.db'}"
    ClientStore(store).experiment_ids()  # the store and its tables, as the server finds them
    initialize_backend_stores(store, store, str(folder / "mlruns"))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield store, f"http://127.0.0.1:{server.socket.getsockname()[1]}"
    server.shutdown()


def test_the_rest_calls_answer_as_mlflows_client_does(served, tmp_path):
    store, uri = served
    rest, client = RestStore(uri), ClientStore(store)
    assert rest.experiment_by_name("nope") is None
    experiment = rest.create_experiment("exp")
    assert client.experiment_by_name("exp") == experiment == rest.experiment_by_name("exp")
    assert set(rest.experiment_ids()) == set(client.experiment_ids())
    run = rest.create_run(experiment, "job", {"mlops.local": "true"}, 1_000)
    assert client.get_run(run.run_id) == rest.get_run(run.run_id)
    assert (run.status, run.start_time, run.tags["mlops.local"]) == ("RUNNING", 1_000, "true")
    rest.set_tag(run.run_id, "k", "v")
    rest.log_metric(run.run_id, "acc", 0.5, 2_000)
    assert rest.metric_history(run.run_id, "acc") == client.metric_history(run.run_id, "acc") \
        == [(0, 2_000, 0.5)]
    (tmp_path / "out" / "sub").mkdir(parents=True)
    (tmp_path / "out" / "sub" / "a.txt").write_text("a")
    rest.log_artifacts(run.run_id, tmp_path / "out", "outputs")
    rest.log_artifacts(run.run_id, tmp_path / "out" / "sub" / "a.txt", "user_logs")
    artifacts = local_folder(rest.get_run(run.run_id).artifact_uri)
    assert artifacts.is_relative_to(Path(store.removeprefix("sqlite:///")).parent / "mlruns")
    assert (artifacts / "outputs" / "sub" / "a.txt").read_text() == "a"
    assert (artifacts / "user_logs" / "a.txt").read_text() == "a"
    rest.update_run(run.run_id, "FINISHED", 3_000)
    seen = client.get_run(run.run_id)
    assert (seen.status, seen.end_time, seen.tags["k"], seen.metrics) == \
        ("FINISHED", 3_000, "v", {"acc": 0.5})
    found = rest.search_runs([experiment], "attributes.start_time >= 500", 10)
    assert [r.run_id for r in found] == [run.run_id]
    with pytest.raises(RestError) as refused:
        rest.get_run("0" * 32)
    assert refused.value.code == "RESOURCE_DOES_NOT_EXIST"


class Served:
    """What Tracking asks of a server handle."""

    def __init__(self, uri: str):
        self.uri = uri

    def connect(self) -> str:
        return self.uri

    def log_tail(self) -> str:
        return "the server's last words"


def test_tracking_over_rest_ends_the_runs_a_job_left_open(served):
    store, uri = served
    tracking = Tracking(Served(uri), uri=store)
    assert tracking.backend is None  # building it reached nothing
    run = tracking.open("ended", "job", {}, process=True)
    assert tracking.serve() == uri  # the job's URI: the server's
    experiment = tracking.experiment_id("ended")
    inner = ClientStore(store).create_run(experiment, "inner", {"mlflow.parentRunId": run.run_id},
                                          run.since_ms + 1)
    run.close(RunStatus.FAILED, exit_ms=run.since_ms + 5)
    client = ClientStore(store)
    assert client.get_run(inner.run_id).status == client.get_run(run.run_id).status == "FAILED"


def test_a_server_that_is_gone_leaves_the_runner_on_the_store(tmp_path, capsys):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking = Tracking(Served("http://127.0.0.1:9"), uri=store)  # nothing listens on port 9
    run = tracking.open("exp", "job", {})
    assert tracking.serve() == store
    run.close(RunStatus.FINISHED)
    assert ClientStore(store).get_run(run.run_id).status == "FINISHED"
    assert "the server's last words" in capsys.readouterr().err


def test_local_artifact_uris():
    assert local_folder("/a/b") == Path("/a/b")
    assert local_folder("file:///a/b%20c") == Path("/a/b c")
    assert local_folder("mlflow-artifacts:/x") is None
    assert local_folder("s3://bucket/x") is None
