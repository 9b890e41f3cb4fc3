"""The runner's MLflow calls over REST (mlops/runtime/mlflow_rest.py) against MLflow's own
tracking app, served in this process on loopback (no process: a thread), give what MLflow's
client gives on the store itself (mlflow_store.ClientStore); Tracking over either ends a job's
runs alike; a server that is gone leaves the runner on the store itself."""

from __future__ import annotations

import os
import threading
import types
from pathlib import Path

import pytest
from support import copied_store

from mlops.runtime.mlflow_rest import RestError, RestStore, local_folder
from mlops.runtime.mlflow_runs import Tracking
from mlops.runtime.mlflow_store import ClientStore
from mlops.runtime.records import RunStatus


@pytest.fixture(scope="module")
def served(tmp_path_factory, empty_mlflow_store):
    """MLflow's tracking app on a store of its own, on 127.0.0.1, in a thread (one for the
    module: the app's stores are the process's)."""
    from mlflow.server import app, handlers
    from mlflow.server.handlers import initialize_backend_stores
    from werkzeug.serving import make_server

    folder = tmp_path_factory.mktemp("served")
    store = copied_store(empty_mlflow_store, folder)  # its tables, as the server finds them
    with pytest.MonkeyPatch.context() as patch:
        # what opening the app's stores sets process-wide (MLflow's cached stores, its tracking
        # URI and MLFLOW_TRACKING_URI) is undone after the module: a later test in this worker
        # would read this store, and a tracking server forked from it would serve it
        for cached in ("_tracking_store", "_model_registry_store"):
            patch.setattr(handlers, cached, None)
        patch.setattr(handlers.utils, "_tracking_uri", None)
        patch.setenv("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI", ""))
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


def test_a_server_that_is_gone_leaves_the_runner_on_the_store(tmp_path, capsys,
                                                              empty_mlflow_store):
    store = copied_store(empty_mlflow_store, tmp_path)
    tracking = Tracking(Served("http://127.0.0.1:9"), uri=store)  # nothing listens on port 9
    run = tracking.open("exp", "job", {})
    assert tracking.serve() == store
    run.close(RunStatus.FINISHED)
    assert ClientStore(store).get_run(run.run_id).status == "FINISHED"
    assert "the server's last words" in capsys.readouterr().err


class FullDisk(Served):
    def log_tail(self) -> str:  # what a server that died on a full disk logged last
        return ('File ".../sqlalchemy/engine/default.py", line 954, in do_commit\n  '
                'sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database or disk '
                'is full')


def test_a_server_that_died_of_a_full_disk_is_that_fault_said_once(tmp_path, capsys,
                                                                   empty_mlflow_store):
    from mlops.errors import MachineError

    store = copied_store(empty_mlflow_store, tmp_path)
    tracking = Tracking(FullDisk("http://127.0.0.1:9"), uri=store)  # nothing listens on port 9
    with pytest.raises(MachineError, match="database or disk is full; ") as raised:
        tracking.open("exp", "job", {})
    assert "sqlalchemy" not in str(raised.value)
    assert capsys.readouterr().err == ""  # no warning with the server's traceback before it


def test_local_artifact_uris():
    assert local_folder("/a/b") == Path("/a/b")
    assert local_folder("file:///a/b%20c") == Path("/a/b c")
    assert local_folder("mlflow-artifacts:/x") is None
    assert local_folder("s3://bucket/x") is None


def test_an_artifact_the_disk_refused_leaves_no_part_of_itself(tmp_path, monkeypatch,
                                                              empty_mlflow_store):
    """A full disk half-way through a file: no half file among the run's artifacts (MLflow's
    copy into place left one, which a download of the run's artifacts served as whole), and
    the files copied before it stay whole; the store itself copies the same way."""
    import errno
    import shutil

    from mlops.runtime import mlflow_rest

    outputs = tmp_path / "wd" / "outputs"
    outputs.mkdir(parents=True)
    (outputs / "a.bin").write_bytes(b"a" * 100)
    (outputs / "b.bin").write_bytes(b"b" * 100)
    real = shutil.copy2

    def fills(source, target, **kwargs):
        if Path(source).name == "b.bin":
            Path(target).write_bytes(b"b" * 10)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(source, target, **kwargs)

    monkeypatch.setattr(mlflow_rest.shutil, "copy2", fills)
    store = copied_store(empty_mlflow_store, tmp_path)
    client = ClientStore(store)
    run = client.create_run(client.create_experiment("e"), "r", {}, 0).run_id
    with pytest.raises(OSError):
        client.log_artifacts(run, outputs, "outputs")
    held = local_folder(client.get_run(run).artifact_uri) / "outputs"
    assert sorted(p.name for p in held.iterdir()) == ["a.bin"]
    assert (held / "a.bin").read_bytes() == b"a" * 100


def test_run_historys_calls_on_a_run_read_and_write_its_mlflow_run(served):
    """What responsible-AI's gather step sends (rai_component_utilities.
    add_properties_to_gather_run), answered on MLflow's app in this process (run_history.py):
    the properties become the tags the local Run stand-in writes; an unknown run is 404."""
    from mlflow.server import app
    from werkzeug.test import Client

    from mlops.runtime.run_history import routes

    store, uri = served
    rest = RestStore(uri)
    run = rest.create_run(rest.create_experiment("history"), "gather", {"mlops.step": "g"}, 1_000)
    client = Client(routes(app.wsgi_app))
    path = ("/history/v1.0/subscriptions/None/resourceGroups/None/providers/Microsoft."
            f"MachineLearningServices/workspaces/None/experimentids/unknown/runs/{run.run_id}")
    properties = {"_azureml.responsibleai.rai_insights.type": "gather", "count": 3}
    answer = client.patch(path, json={"runId": run.run_id, "properties": properties},
                          headers={"Authorization": "Bearer None"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    view = answer.get_json()
    assert view["runId"] == run.run_id and view["status"] == "Running"
    assert view["properties"] == {"_azureml.responsibleai.rai_insights.type": "gather",
                                  "count": "3"}
    assert view["tags"] == {"mlops.step": "g"} and view["startTimeUtc"].endswith("Z")
    tags = ClientStore(store).get_run(run.run_id).tags
    assert tags["properties._azureml.responsibleai.rai_insights.type"] == "gather"
    by_name = path.replace("experimentids/unknown", "experiments/history")
    assert client.get(by_name).get_json()["properties"]["count"] == "3"
    missing = client.patch(path.replace(run.run_id, "nope"), json={"properties": {}})
    assert missing.status_code == 404 and "nope" in missing.get_json()["error"]["message"]
    assert client.patch(path, data=b"{", content_type="application/json").status_code == 400
    assert client.patch(path, json={"properties": {"a": {"b": 1}}}).status_code == 400
    assert client.delete(path).status_code == 405
    assert client.get("/health").get_data() == b"OK"  # MLflow's own routes as they were


def test_jobs_trust_the_authority_of_the_server_they_track_to(served, tmp_path):
    store, uri = served
    handle = Served(uri)
    handle.tls = types.SimpleNamespace(ca=tmp_path / "ca.pem")
    assert Tracking(handle, uri=store).trusted_ca() == str(tmp_path / "ca.pem")
    assert Tracking(uri=store).trusted_ca() is None  # no server: jobs track to the store itself


@pytest.fixture
def uploading(served, tmp_path):
    """MLflow's app behind the layer that registers a model from a local folder as Azure's
    registry does (model_uploads.py), on 127.0.0.1 in a thread; its URI and artifact root."""
    from mlflow.server import app
    from werkzeug.serving import make_server

    from mlops.runtime.model_uploads import local_sources

    root = tmp_path / "artifacts root"
    server = make_server("127.0.0.1", 0, local_sources(app.wsgi_app, str(root)), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.socket.getsockname()[1]}", root
    server.shutdown()


def test_a_model_version_from_a_local_folder_is_uploaded_and_registered(uploading, tmp_path):
    """MlflowClient().create_model_version(name, source="file://<folder>") with no run, as
    Azure's example trainers call it: Azure's registry uploads the folder and registers the
    copy; MLflow's own server refuses every local source outside a run's artifacts."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri, root = uploading
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    folder = tmp_path / "saved model" / "housing_1"
    (folder / "data").mkdir(parents=True)
    (folder / "MLmodel").write_text("flavors: {}\n")
    (folder / "data" / "model.pkl").write_bytes(b"\x80\x04N.")
    client.create_registered_model("housing_1")
    version = client.create_model_version("housing_1", source=f"file://{folder}",
                                          tags={"k": "v"})
    copy = Path(version.source)
    assert copy.is_relative_to(root / "LocalUpload") and copy.name == "housing_1"
    assert (copy / "data" / "model.pkl").read_bytes() == b"\x80\x04N."
    assert (version.version, version.tags) == ("1", {"k": "v"})
    assert client.get_model_version("housing_1", "1").source == str(copy)
    uploads = sorted((root / "LocalUpload").iterdir())
    (folder / "MLmodel").unlink()
    with pytest.raises(MlflowException, match="must be a directory containing an mlflow MLmodel"):
        client.create_model_version("housing_1", source=f"file://{folder}")
    (folder / "MLmodel").write_text("flavors: {}\n")
    with pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST|not found"):
        client.create_model_version("unregistered", source=f"file://{folder}")
    assert sorted((root / "LocalUpload").iterdir()) == uploads  # nothing left of either
    with pytest.raises(MlflowException, match="Invalid model version source"):  # MLflow's rule
        client.create_model_version("housing_1", source=f"file://{folder}", run_id="0" * 32)
