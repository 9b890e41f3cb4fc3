"""The runner's MLflow store (mlops/runtime/mlflow_runs.py): runs started together share it."""

import os
import re
import threading
from pathlib import Path

import pytest
from support import copied_store

from mlops.errors import MachineError
from mlops.runtime.mlflow_runs import Tracking


def together(count: int, action) -> list[str]:
    """`action()` in `count` threads at once: what each returned, or the error it raised."""
    results, gate = [], threading.Barrier(count)

    def go():
        gate.wait()
        try:
            results.append(action())
        except Exception as error:  # noqa: BLE001 - the test reports every one
            results.append(f"{type(error).__name__}: {error}"[:200])

    threads = [threading.Thread(target=go) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_runs_started_together_on_a_new_store_all_start_and_share_one_experiment(tmp_path):
    # Each thread opens its own connection, as two `make local` in two terminals do; without
    # the lock all but one died in MLflow's migrations and the file stayed half-migrated.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ids = together(3, lambda: Tracking(uri=uri).experiment_id("first"))
    assert ids == ["1", "1", "1"]
    ids = together(3, lambda: Tracking(uri=uri).experiment_id("second"))
    assert ids == ["2", "2", "2"]
    from mlflow.tracking import MlflowClient  # here: the worker that runs this test imports it

    names = {e.name for e in MlflowClient(uri).search_experiments()}
    assert names == {"Default", "first", "second"}
    assert not set(Path(tmp_path).iterdir()) - {tmp_path / "mlflow.db", tmp_path / "mlruns"}


def test_mlflow_1x_preview_routes_reach_the_stable_handlers():
    """MLflow 1.x registers models through /api/2.0/preview/mlflow/; the server answers those
    with the handlers MLflow 2 and 3 serve under /api/2.0/mlflow/."""
    from mlops.runtime.mlflow_serve import stable_routes

    seen = []
    app = stable_routes(lambda environ, start: seen.append(environ["PATH_INFO"]) or [b""])
    for path in ("/api/2.0/preview/mlflow/registered-models/create",
                 "/ajax-api/2.0/preview/mlflow/model-versions/get", "/api/2.0/mlflow/runs/get",
                 "/health"):
        app({"PATH_INFO": path}, None)
    assert seen == ["/api/2.0/mlflow/registered-models/create",
                    "/ajax-api/2.0/mlflow/model-versions/get", "/api/2.0/mlflow/runs/get",
                    "/health"]


def test_an_absolute_artifact_path_is_kept_under_the_runs_artifacts(tmp_path):
    """As azureml-mlflow's repository joins it onto the run's prefix: no leading `/`."""
    import types

    from mlops.runtime import mlflow_client

    assert mlflow_client.relative("/tmp/wd/model") == "tmp/wd/model"
    assert mlflow_client.relative("/") is None
    assert mlflow_client.relative("model/a") == "model/a" and mlflow_client.relative(None) is None

    class Repository:  # MLflow's LocalArtifactRepository: refuses an absolute path
        def log_artifacts(self, local_dir, artifact_path=None):
            assert not str(artifact_path).startswith("/"), "Invalid artifact path"
            return artifact_path

        log_artifact = log_artifacts

    mlflow_client.patch(types.SimpleNamespace(LocalArtifactRepository=Repository))
    assert Repository().log_artifacts(str(tmp_path), "/a/b/../model") == "a/model"
    assert Repository().log_artifact(str(tmp_path), artifact_path="/x.txt") == "x.txt"


@pytest.mark.parametrize("damage", ["overwritten", "cut short"])
def test_a_damaged_store_is_the_machines_error_naming_it_and_what_to_do(tmp_path, damage,
                                                                        empty_mlflow_store):
    """An mlflow.db SQLite cannot read (overwritten, cut short by a full disk) stops the run
    with one line naming the file and how to start afresh, not sqlalchemy's traceback."""
    store = tmp_path / "state dir" / "mlflow.db"
    store.parent.mkdir()
    # a whole store first: a copy of the migrated empty one (migrating a new file: 2 s of CPU)
    Tracking(uri=copied_store(empty_mlflow_store, store.parent)).experiment_id("made")
    data = store.read_bytes()
    store.write_bytes(os.urandom(4096) if damage == "overwritten" else data[:len(data) // 3])
    said = "file is not a database" if damage == "overwritten" else "malformed"
    with pytest.raises(MachineError, match=rf"{re.escape(str(store))} is damaged \(SQLite: "
                                           rf".*{said}.*mv '{re.escape(str(store))}'"):
        Tracking(uri=f"sqlite:///{store}").experiment_id("other")


def test_a_store_whose_disk_refuses_a_write_is_the_machines_error_naming_it(tmp_path):
    """sqlite's 'database or disk is full' (or read-only), as the warm server's REST answer or
    MLflow's own error carries it, is a MachineError with what to do (was a RestError traceback
    that left status.json Running)."""
    import pytest

    from mlops.errors import MachineError
    from mlops.runtime.mlflow_rest import RestError

    class Full:
        def update_run(self, *args):
            raise RestError("TEMPORARILY_UNAVAILABLE", "(sqlite3.OperationalError) database or "
                            "disk is full [SQL: UPDATE runs SET status=?]")

        def get_run(self, *args):
            raise RuntimeError("(sqlite3.OperationalError) attempt to write a readonly database")

        def search_runs(self, *args):
            raise RestError("INVALID_PARAMETER_VALUE", "a bad filter")

    store = tmp_path / "state dir" / "mlflow.db"
    tracking = Tracking(uri=f"sqlite:///{store}")
    tracking.backend = Full()
    with pytest.raises(MachineError, match=rf"the MLflow store {store}: database or disk is "
                                           "full; free some space there"):
        tracking._do("update_run", "run", "FAILED", 0)
    with pytest.raises(MachineError, match="attempt to write a readonly database; it is on a "
                                           "read-only file system"):
        tracking._do("get_run", "run")
    with pytest.raises(RestError, match="a bad filter"):  # any other error as it is
        tracking._do("search_runs", [], "", 1)


def test_a_run_mlflow_refuses_by_its_own_limits_is_the_inputs_error_naming_it():
    """An experiment_name of 5,000 characters: MLflow's 500-character limit is said as the
    input's error, with the names shortened (was a RestError traceback)."""
    import pytest

    from mlops.errors import LocalRunError
    from mlops.runtime.mlflow_rest import RestError

    class Limited:
        def experiment_by_name(self, name):
            return None

        def create_experiment(self, name):
            raise RestError("INVALID_PARAMETER_VALUE", "'name' exceeds the maximum length of "
                            "500 characters")

    tracking = Tracking(uri="sqlite:////tmp/unused.db")
    tracking.backend = Limited()
    with pytest.raises(LocalRunError, match=r"refused the run \(experiment 'xxx.*\.\.\. \(5000 "
                                            r"characters\)', name 'job'\): INVALID_PARAMETER_"
                                            r"VALUE: 'name' exceeds the maximum length of 500 "
                                            r"characters; shorten the spec's experiment_name"):
        tracking.open("x" * 5000, "job", {})
