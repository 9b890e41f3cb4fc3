"""The unit tests (make test-quick): no process, server or training. A test here that starts a
process fails at once and says where it belongs.

Most of a unit test's cost is the first import of a heavy library in its worker: torch and
torchvision (5 s of CPU), MLflow (3 s), azure-ai-ml (2 s), or the house rules' parse of every
file (2 s). The tests that need one share a worker (HEAVY, an xdist_group each under --dist
loadgroup, as make test-quick and make test run), so each is paid once per session instead of
once per worker; the other tests fill the workers around them. A test left out of its group
still passes, at the cost of the import in a second worker.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import itertools
import os
import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent
# group -> the modules (test_x) or tests (test_x::test_y, every parameter of it) that import it
HEAVY = {
    "torch": (
        "test_builders", "test_checkpoint_integrity", "test_data", "test_models", "test_preprocess",
        "test_archives::test_the_trainers_zip_input_is_refused_as_a_bomb_too",
        "test_automl_vision::test_weights_come_from_a_local_folder_else_the_model_keeps_its_"
        "initialisation",
        "test_config::test_every_steps_help_prints",
        "test_full_disk::test_a_file_too_large_for_the_disk_leaves_the_old_one_and_names_the_"
        "real_fault",
        "test_scoring_without_torch",  # onnxruntime, which test_checkpoint_integrity imports
    ),
    # the house rules parse every file of the repository (each process once: support.syntax)
    "house": ("test_imports", "test_tiers"),
    # MLflow (3 s, with pandas, scipy and pyarrow; scikit-learn's metrics share those): the
    # tests that import it, one each from modules that are azure-ai-ml's otherwise
    "mlflow": (
        "test_tracking", "test_tracking_rest", "test_tracking_server", "test_makefile",
        "test_nocode_scoring",  # with pandas, numpy and the inference server's Flask app
        "test_parallel_partitions",  # pandas (with pyarrow), which MLflow imports
        "test_conformance::test_a_parquet_stand_in_is_typed_with_dates_as_timestamps",
        # SciPy, which scikit-learn's metrics import
        "test_sweep_summary::test_random_sampling_with_azures_sobol_rule_is_a_seeded_sobol_"
        "sequence",
        "test_kept_verdicts::test_mlflows_registry_is_asked_again_only_once_its_store_or_the_"
        "workspace_changed",
        "test_workspace::test_an_mlflow_registration_is_fetched_from_the_state_store_from_any_"
        "folder",
        "test_workspace_hostile::test_a_damaged_mlflow_store_is_one_line_naming_it",
        "test_workspace_hostile::test_an_mlflow_version_whose_files_are_gone_is_never_taken_in",
        "test_automl::test_azures_classification_metrics_carry_azures_names_and_definitions",
        "test_automl::test_azures_regression_errors_are_normalized_by_the_targets_range",
        "test_automl::test_without_validation_settings_azures_rule_by_rows_picks_folds_or_a_"
        "holdout",
        "test_automl::test_a_forecasting_frequency_in_azures_older_pandas_spelling_is_read",
        "test_automl::test_forecast_horizon_auto_is_one_season_of_the_frequency_by_azures_rule",
        "test_automl::test_test_data_size_holds_a_stratified_share_of_training_out_for_the_"
        "test_run",
    ),
    # azure-ai-ml (2 s; the workspace lists an upload's files with it): apart from MLflow's,
    # so that the two largest groups take a worker each
    "sdk": (
        "test_automl", "test_azml", "test_batch_verbs", "test_deployments",
        "test_endpoint_rules", "test_hostile_specs", "test_prepare_references", "test_registry",
        "test_run_folders", "test_runtime_rules", "test_sdk_findings", "test_specs",
        "test_automl_vision", "test_reuse_keys", "test_kept_verdicts", "test_workspace",
        "test_workspace_hostile", "test_asset_flags", "test_az_flags", "test_computes",
        "test_job_validate", "test_model_download", "test_job_verbs", "test_schedules",
        "test_pipeline_deployment",
    ),
}
# the groups by their CPU on 2 cores, costliest first (MLOPS_TEST_TIMES, docs/development.md)
COSTLIEST = ("sdk", "mlflow", "torch", "house")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items) -> None:
    """Each unit test HEAVY names gets its group's xdist_group mark (before tests/conftest.py
    hands the groups to xdist), and the groups come first, in COSTLIEST's order: make
    test-quick hands them out in that order (--no-loadscope-reorder), so that each of the two
    workers of a 2-core machine starts on one of the two costliest groups and the rest fills
    in around them (by number of tests, xdist's default, one worker got MLflow's and torch's
    groups: 19 s of CPU against the other's 15)."""
    group_of = {name: group for group, names in HEAVY.items() for name in names}
    for item in items:
        path = Path(item.path)
        if path.parent != UNIT:
            continue
        test = f"{path.stem}::{getattr(item, 'originalname', item.name)}"
        group = group_of.get(test) or group_of.get(path.stem)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    rank = {group: n for n, group in enumerate(COSTLIEST)}
    items.sort(key=lambda item: min((rank.get(str(m.args[0]), len(rank)) for m in
                                     item.iter_markers("xdist_group") if m.args),
                                    default=len(rank)))


@pytest.fixture(scope="session", autouse=True)
def processes_started_once() -> None:
    """What starts a process the first time only, done before the guard below (a session
    fixture is set up before any test's own), so that the test that happens to come first is not
    taken for one that starts a process: the lookup of libdl that torch's first import makes
    (cuda.pathfinder, which CUDA builds of torch load, runs `ldconfig -p` once), and
    platform.processor(), which runs `uname -p` once and keeps the answer (MLflow asks it for
    every run it creates). The lookup alone, not torch (3 s of CPU): a worker that runs no test
    of torch's never imports it."""
    if importlib.util.find_spec("cuda") and importlib.util.find_spec("cuda.pathfinder"):
        importlib.import_module("cuda.pathfinder")
    platform.processor()


@pytest.fixture(scope="session", autouse=True)
def one_azml_parser() -> Iterator[None]:
    """azml's parser built once per worker, not once per `run` (70 ms of CPU each: a thousand
    arguments under 67 verbs; 137 calls cost the azure-ai-ml worker 9 s). The `azml` command
    builds it once per process too; parsing never changes a parser, and no verb changes the
    lists its arguments default to. Every worker has imported mlops.cli already: test modules
    of both groups import it to collect."""
    from mlops import cli

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "build_parser", functools.cache(cli.build_parser))
        yield


@pytest.fixture(autouse=True)
def one_torch_thread(request) -> None:
    """torch's tests run on one thread: their tensors are tiny, and a second OpenMP thread only
    spins on the core the other xdist worker needs (test_builders, test_models and test_data:
    8.9 -> 6.7 s of CPU, 10.7 -> 7.0 s of wall on 2 busy cores). Set before each of them, so a
    test that sets its own count (Service(threads=2)) does not leave it to the next."""
    mark = request.node.get_closest_marker("xdist_group")
    if mark is not None and mark.args and mark.args[0] == "torch":
        importlib.import_module("torch").set_num_threads(1)


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started a process: move the test to tests/e2e/")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)


@pytest.fixture(scope="session")
def spare_workspaces() -> Iterator[int]:
    """Numbers for the workspaces of the tests without a tmp_path of their own."""
    return itertools.count()


@pytest.fixture(autouse=True)
def own_workspace(request, monkeypatch, tmp_path_factory, spare_workspaces):
    """A local workspace of the test's own (mlops/workspace), and no MLflow registry to take
    models in from: MLflow's client starts a process to learn the platform. It is `workspace`
    in the test's tmp_path where the test has one; else a folder nothing has made yet (the
    workspace makes it on its first write), so that the tests that need no folder make none."""
    if "tmp_path" in request.fixturenames:
        folder = request.getfixturevalue("tmp_path") / "workspace"
    else:
        folder = tmp_path_factory.getbasetemp() / "workspaces" / str(next(spare_workspaces))
    monkeypatch.setenv("MLOPS_WORKSPACE_DIR", str(folder))
    monkeypatch.setattr("mlops.workspace.mlflow_models._client", lambda: None)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A user's repository: azml.toml at its root, the current folder, its own state folder."""
    from mlops.project import forget

    (tmp_path / "azml.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AZML_STATE_DIR", raising=False)
    monkeypatch.delenv("MLOPS_STATE_DIR", raising=False)
    forget()
    yield tmp_path
    forget()
