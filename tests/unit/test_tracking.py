"""The runner's MLflow store (mlops/runtime/mlflow_runs.py): runs started together share it."""

import threading
from pathlib import Path

from mlflow.tracking import MlflowClient

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
    names = {e.name for e in MlflowClient(uri).search_experiments()}
    assert names == {"Default", "first", "second"}
    assert not set(Path(tmp_path).iterdir()) - {tmp_path / "mlflow.db", tmp_path / "mlruns"}
