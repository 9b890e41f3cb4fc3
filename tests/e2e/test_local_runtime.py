"""The local runtime follows Azure ML's execution model, on third-party-shaped specs.

Every fixture under tests/fixtures/thirdparty is written in the style of published Azure ML CLI
v2 specs (inline pipeline nodes, quoted references, sweep nodes, datastore URIs, ...). Every test
asserts that the source tree is unchanged afterwards (the `sources_unchanged` fixture).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support import lazy, until

from mlops import run as local
from mlops.checks.validation import validate
from mlops.runtime import launch, mlflow_server
from mlops.runtime.mlflow_runs import Tracking
from mlops.runtime.tasks import default_experiment
from mlops.specs import ROOT

tracking = lazy("mlflow.tracking")

TP = ROOT / "tests" / "fixtures" / "thirdparty"
HELLO = ROOT / "tests" / "fixtures" / "hello"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store")


def run(spec: Path, run_dir: Path, *sets: str, assets: Path | None = None) -> int:
    argv = [str(spec), "--run-dir", str(run_dir), "--max-procs", "2"]
    argv += ["--assets", str(assets)] if assets else []
    return local.main(argv + [x for s in sets for x in ("--set", s)])


def runs(experiment: str) -> list:
    client = tracking.MlflowClient()
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


@pytest.mark.proof
def test_quoted_references_get_the_argv_azure_gives(tmp_path):
    assert run(TP / "quoted-ref.yml", tmp_path / "run") == 0
    seen = json.loads((tmp_path / "run/outputs/report/seen.json").read_text())
    table = str(tmp_path / "run/inputs/table/table.csv")
    assert seen["argv"] == ["--columns", "a b,c", "--title", "two words", "--flag", "True",
                            "--data", table, "--out", str(tmp_path / "run/outputs/report")]
    assert seen["cwd"] == str(tmp_path / "run" / "wd")
    assert Path(table).read_text() == (TP / "tables/table.csv").read_text()
    env = seen["env"]
    assert env["AZURE_ML_INPUT_columns"] == "a b,c" and env["AZURE_ML_INPUT_table"] == table
    assert env["MLFLOW_RUN_ID"] == env["AZUREML_RUN_ID"]
    assert env["MLFLOW_EXPERIMENT_NAME"] == default_experiment()  # Azure's default experiment name
    assert (env["AZUREML_ARM_WORKSPACE_NAME"], env["AZUREML_ARM_RESOURCEGROUP"]) == ("local",) * 2
    assert env["AZUREML_ARM_SUBSCRIPTION"] and env["AZUREML_ARM_PROJECT_NAME"] == \
        default_experiment()


def test_outputs_and_logs_folders_are_created_kept_and_uploaded(tmp_path):
    assert run(TP / "quoted-ref.yml", tmp_path / "run") == 0
    wd = tmp_path / "run" / "wd"
    assert (wd / "outputs/note.txt").is_file() and (wd / "logs/trace.log").is_file()
    assert (wd / "scratch.txt").is_file() and not (TP / "src/scratch.txt").exists()
    (mlflow_run,) = runs(default_experiment())
    client = tracking.MlflowClient()
    uploaded = {a.path for folder in ("outputs", "logs", "user_logs")
                for a in client.list_artifacts(mlflow_run.info.run_id, folder)}
    assert {"outputs/note.txt", "logs/trace.log", "user_logs/log.txt"} <= uploaded


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_inline_pipeline_nodes_with_empty_output_declarations(tmp_path):
    assert run(TP / "inline-pipeline.yml", tmp_path / "run") == 0
    copy = tmp_path / "run/steps/consume/outputs/copy/copy.txt"
    assert copy.read_text().strip() == "hello there"
    parent = next(r for r in runs(default_experiment()) if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs(default_experiment())
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == ["consume", "produce"]


@pytest.mark.proof
def test_node_level_data_inputs_resolve_like_job_inputs(tmp_path):
    assets = tmp_path / "local-paths.yml"
    assets.write_text(yaml.safe_dump({
        "wasbs://datasets@example.blob.core.windows.net/tables/": str(TP / "tables") + "/"}))
    assert run(TP / "data-node-pipeline.yml", tmp_path / "run", assets=assets) == 0
    assert (tmp_path / "run/outputs/final/table.csv").read_text() == "x,y\n1,2\n"
    log = (tmp_path / "run/steps/local_rows/log.txt").read_text()
    assert "inputs/source/table.csv" in log  # bound under the step's own short path


@pytest.mark.proof
def test_an_unmapped_wasbs_input_names_the_uri_and_the_file_and_leaves_nothing(tmp_path,
                                                                            capsys):
    assets = tmp_path / "empty.yml"
    assets.write_text("{}\n")
    assert run(TP / "data-node-pipeline.yml", tmp_path / "run", assets=assets) == 2
    err = capsys.readouterr().err
    uri = "wasbs://datasets@example.blob.core.windows.net/tables/table.csv"
    assert f"{uri} has no local stand-in" in err and str(assets) in err
    assert "--set jobs." in err  # an override that --set takes: the dotted key, no file name
    assert not (tmp_path / "run").exists()  # nothing started: no run folder


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_pipeline_sweep_node_passes_its_best_trial_downstream(tmp_path, monkeypatch):
    # on 4 cores, the 2 trials that run at once get 2 threads each
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(launch, "usable_cores", lambda: 4)
    assert run(TP / "sweep-node-pipeline.yml", tmp_path / "run") == 0
    summary = json.loads((tmp_path / "run/steps/tune/sweep_summary.json").read_text())
    assert len(summary["trials"]) == 2
    assert summary["best_trial"]["params"] == {"lr": 0.5, "kernel": "rbf"}
    assert "lr=0.5 kernel=rbf threads=2" in (tmp_path / "run/steps/report/log.txt").read_text()
    trials = [r for r in runs(default_experiment()) if "mlops.trial" in r.data.tags]
    assert len(trials) == 2 and all("score" in r.data.metrics for r in trials)
    folders = {t["folder"] for t in summary["trials"]}
    assert len(folders) == 2  # every trial in its own folder, own snapshot


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_distributed_node_runs_any_command_once_per_process(tmp_path, monkeypatch):
    # a machine with GPUs 3 and 5 visible: each simulated node gets its own, so LOCAL_RANK 0
    # picks a different device on each (on Azure, each node's own first GPU)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    # and 4 cores: the two processes share them, two threads each
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(launch, "usable_cores", lambda: 4)
    assert run(TP / "distributed-echo.yml", tmp_path / "run") == 0
    ranks = tmp_path / "run/steps/ranks/outputs/ranks"
    lines = sorted(p.read_text().split("master=")[0].split() for p in ranks.iterdir())
    assert lines == [["rank=0", "local=0", "world=2", "node=0", "gpus=3", "threads=2"],
                     ["rank=1", "local=0", "world=2", "node=1", "gpus=5", "threads=2"]]


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_mpi_and_tensorflow_distribution_variables(tmp_path):
    assert run(TP / "distributed-mpi.yml", tmp_path / "mpi") == 0  # no $schema: typed by type
    mpi = [json.loads(p.read_text()) for p in sorted((tmp_path / "mpi/outputs/env").iterdir())]
    assert [m["OMPI_COMM_WORLD_RANK"] for m in mpi] == ["0", "1"]
    assert {m["OMPI_COMM_WORLD_SIZE"] for m in mpi} == {"2"}
    assert run(TP / "distributed-tf.yml", tmp_path / "tf") == 0
    tf = [json.loads(json.loads(p.read_text())["TF_CONFIG"])
          for p in sorted((tmp_path / "tf/outputs/env").iterdir())]
    assert [t["task"] for t in tf] == [{"type": "worker", "index": 0},
                                       {"type": "worker", "index": 1}]
    assert len(tf[0]["cluster"]["worker"]) == 2


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_mpi_distribution_with_mpi4py_runs_under_a_real_mpirun(tmp_path, monkeypatch):
    """2 nodes x 2 processes, an environment with mpi4py: the layer gets Open MPI from PyPI and
    one mpirun starts every process, so MPI.COMM_WORLD spans them and all-reduces."""
    monkeypatch.setenv("LOCAL_ENVS_DIR", str(tmp_path.parent / "envs"))
    argv = [str(TP / "mpi-allreduce.yml"), "--run-dir", str(tmp_path / "run"), "--max-procs", "4"]
    assert local.main(argv) == 0
    assert (tmp_path / "run/outputs/result/sum.txt").read_text() == "4 10\n"
    log = (tmp_path / "run/log.txt").read_text()
    assert all(f"rank {r} of 4: sum 10" in log for r in range(4))


@pytest.mark.proof
def test_a_dying_launcher_takes_its_workers_with_it(tmp_path):
    assert run(TP / "orphan.yml", tmp_path / "run") == 128 + signal.SIGKILL
    worker = int((tmp_path / "run/outputs/pids/worker.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_crash_ends_every_mlflow_run_the_job_opened(tmp_path):
    assert run(TP / "crash.yml", tmp_path / "run") == 1
    statuses = {r.info.run_name: r.info.status for r in runs("thirdparty-crash")}
    name = json.loads((tmp_path / "run/run.json").read_text())["name"]  # no display_name:
    assert statuses == {name: "FAILED", "inner": "FAILED"}  # the run is named as the job


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_step_past_its_limits_timeout_is_canceled_and_nothing_after_it_runs(tmp_path, capsys):
    started = time.monotonic()
    assert run(TP / "timeout-pipeline.yml", tmp_path / "run") == 128 + signal.SIGTERM
    assert time.monotonic() - started < 60  # the step sleeps 600 s; its limit is 2 s
    step = json.loads((tmp_path / "run/steps/stuck/status.json").read_text())
    assert step["status"] == "Canceled" and not (tmp_path / "run/steps/after").exists()
    assert "jobs.stuck: limits.timeout of 2 s reached: canceling stuck" in capsys.readouterr().err
    assert {r.info.run_name: r.info.status for r in runs("thirdparty-timeout")}["stuck"] == \
        "KILLED"


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_command_jobs_limits_timeout_cancels_it_and_a_job_that_ends_in_time_completes(
        tmp_path, capsys):
    sets = ("command=sleep 600", "limits.timeout=1")
    assert run(HELLO / "hello-command.yml", tmp_path / "late", *sets) == 128 + signal.SIGTERM
    assert json.loads((tmp_path / "late/status.json").read_text())["status"] == "Canceled"
    assert "hello-command: Canceled (exit 143" in capsys.readouterr().out
    assert run(HELLO / "hello-command.yml", tmp_path / "in-time", "command=true",
               "limits.timeout=60") == 0


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_failure_inside_a_package_moved_from_another_python_says_so_once(tmp_path, capsys,
                                                                           monkeypatch):
    # an environment for Python 3.9 where no 3.9 interpreter is to be had is moved here; a
    # package raising AttributeError is what a release made for another Python does, the job's
    # own ZeroDivisionError is not
    from mlops.environments import activation

    monkeypatch.setattr(activation, "find", lambda minor: None)
    py39 = "environment=azureml:AzureML-minimal-ubuntu22.04-py39-cpu-inference@latest"
    inside = "command=python -c \"import yaml; yaml.safe_load(3)\""
    assert run(HELLO / "hello-command.yml", tmp_path / "package", inside, py39) == 1
    note = "is built for Python 3.9 on Azure and ran on"
    assert capsys.readouterr().err.count(note) == 1
    assert run(HELLO / "hello-command.yml", tmp_path / "own", "command=python -c 1/0", py39) \
        == 1
    assert note not in capsys.readouterr().err


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_sweep_whose_metric_is_never_logged_completes_with_no_best_trial(tmp_path, capsys):
    assert run(TP / "sweep-wrong-metric.yml", tmp_path / "run") == 0  # as a HyperDrive run
    summary = json.loads((tmp_path / "run/sweep_summary.json").read_text())
    assert summary["metrics_logged"] == ["score"] and summary["best_trial"] is None
    assert "(the trials logged: score). The sweep completes with no best trial" \
        in capsys.readouterr().err


def test_a_sweep_whose_trials_all_failed_quotes_the_first_trials_error(tmp_path, capsys):
    assert run(TP / "sweep-offline-weights.yml", tmp_path / "run") == 1
    err = capsys.readouterr().err
    assert "every trial failed (2 of 2); trial 0 ended with: RuntimeError: cannot download " \
           "resnet18-f37072fd.pth: no network" in err
    assert f"its log: {tmp_path / 'run/trials/trial_000/log.txt'}" in err
    assert "Fix objective.primary_metric" not in err


def test_a_sweep_with_some_failed_trials_counts_them(tmp_path, capsys):
    # (not --set search_space.offline.values.1=0: az ml cannot --set inside a list)
    assert run(TP / "sweep-one-trial-offline.yml", tmp_path / "run") == 0
    err = capsys.readouterr().err
    assert "1 of 2 trials failed (first: trial 0" in err


@pytest.mark.proof
def test_what_azure_refuses_is_refused_by_validate_and_locally(tmp_path, capsys):
    spec = TP / "bayesian-with-policy.yml"
    problems = [str(f) for f in validate([spec]) if f.is_error]
    assert any("Bayesian sampling supports only choice, uniform and quniform" in p
               for p in problems)
    assert any("does not support early termination" in p for p in problems)
    assert run(spec, tmp_path / "run") == 2
    assert "Azure would refuse this spec" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_warnings_are_printed_and_never_block_a_run(tmp_path, capsys):
    sets = ["inputs.epochs=1", "limits.max_total_trials=1", "early_termination.type=bandit",
            "early_termination.slack_factor=0.2", "early_termination.delay_evaluation=3"]
    assert run(HELLO / "hello-sweep.yml", tmp_path / "run", *sets) == 0
    err = capsys.readouterr().err
    assert "warning: early_termination.delay_evaluation: delay_evaluation 3 is not below " \
           "epochs 1" in err
    assert "warning: inputs.epochs: input 'epochs' is declared but never passed" in err


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_what_the_loader_accepts_the_schema_layer_never_refuses(tmp_path):
    """A pipeline sweep node with name: and display_name: loads and validates in azure-ai-ml;
    the generated schema is stricter. The loader decides, for every fixture spec."""
    from mlops.checks.validation import KINDS, check
    from mlops.specs import load_spec

    assert validate([TP / "named-sweep-node.yml"]) == []
    assert run(TP / "named-sweep-node.yml", tmp_path / "run") == 0
    for path in sorted((ROOT / "tests" / "fixtures").rglob("*.yml")):
        spec = load_spec(path)
        if spec.kind in KINDS:  # the loader ran once, in check: its findings say azure-ai-ml
            found = check(spec)
            if not [f for f in found if f.problem.startswith("azure-ai-ml:")]:
                assert not [f for f in found if "schema:" in f.problem], path


@pytest.mark.proof
def test_a_spec_without_schema_line_is_typed_by_its_type():
    assert validate([TP / "no-schema-line.yml", TP / "distributed-tf.yml"]) == []


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_rerunning_a_sweep_into_its_folder_is_refused(tmp_path, capsys):
    assert run(HELLO / "hello-sweep.yml", tmp_path / "run", "limits.max_total_trials=1") == 0
    assert run(HELLO / "hello-sweep.yml", tmp_path / "run", "limits.max_total_trials=1") == 2
    assert "a sweep cannot be resumed" in capsys.readouterr().err


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_rerun_appends_to_the_log(tmp_path):
    for _ in range(2):
        assert run(TP / "distributed-tf.yml", tmp_path / "run") == 0
    log = (tmp_path / "run/log.txt").read_text()
    assert log.count("==== attempt at") == 1


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_stop_the_whole_job_and_mark_it_killed(tmp_path, sig):
    runner = subprocess.Popen(
        [sys.executable, "-m", "mlops.run", str(HELLO / "hello-command.yml"), "--run-dir",
         str(tmp_path / "run"), "--set", "inputs.steps=200", "--set", "inputs.sleep=0.2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = _pid_from(tmp_path / "run/outputs/result/pid")
    runner.send_signal(sig)
    assert runner.wait(timeout=60) == 128 + sig
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    (mlflow_run,) = runs("hello-command")
    assert mlflow_run.info.status == "KILLED"


def _pid_from(path: Path, seconds: float = 90) -> int:
    """The pid the job writes; polled until complete, since the file exists before its text."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.1)
    raise AssertionError(f"{path} held no pid after {seconds} s")


def _gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_launcher_killed_without_warning_takes_its_job_with_it(tmp_path):
    """SIGKILL cannot be caught: the watchdog stops the job, records it Canceled, ends its MLflow
    run KILLED, and a rerun into the folder reopens that run instead of leaving a ghost."""
    folder = tmp_path / "run"
    runner = subprocess.Popen(
        [sys.executable, "-m", "mlops.run", str(HELLO / "hello-command.yml"), "--run-dir",
         str(folder), "--set", "inputs.steps=300", "--set", "inputs.sleep=0.2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = _pid_from(folder / "outputs/result/pid")
    started = json.loads((folder / "status.json").read_text())
    assert started["status"] == "Running" and started["mlflow_run_id"] and started["watchdog"]
    runner.kill()
    runner.wait()
    assert _gone(child, 30), "the job outlived its launcher"
    deadline = time.monotonic() + 30
    while (record := json.loads((folder / "status.json").read_text()))["status"] == "Running" \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert record["status"] == "Canceled" and "runner died" in record["reason"]
    assert _gone(started["watchdog"], 30), "the watchdog stayed after recording the end"
    (mlflow_run,) = runs("hello-command")
    assert (mlflow_run.info.run_id, mlflow_run.info.status) == (started["mlflow_run_id"],
                                                                "KILLED")
    assert run(HELLO / "hello-command.yml", folder, "inputs.steps=1", "inputs.sleep=0") == 0
    (mlflow_run,) = runs("hello-command")
    assert (mlflow_run.info.run_id, mlflow_run.info.status) == (started["mlflow_run_id"],
                                                                "FINISHED")


def _left_running(folder: Path, pid: int) -> tuple[str, str]:
    """A run folder as a runner leaves it when it and its watchdog died together."""
    client = tracking.MlflowClient()
    experiment = Tracking().experiment_id("hello-command")
    parent = client.create_run(experiment, run_name="hello-command").info.run_id
    inner = client.create_run(experiment, run_name="inner",
                              tags={"mlflow.parentRunId": parent}).info.run_id
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({
        "status": "Running", "mlflow_run_id": parent, "pid": pid, "started_ms": 0}))
    return parent, inner


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_rerun_ends_what_a_dead_runner_left_running_and_reopens_its_run(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    parent, inner = _left_running(tmp_path / "run", dead.pid)
    assert run(HELLO / "hello-command.yml", tmp_path / "run", "inputs.sleep=0") == 0
    statuses = {r.info.run_id: r.info.status for r in runs("hello-command")}
    assert statuses == {parent: "FINISHED", inner: "KILLED"}


@pytest.mark.proof
def test_a_folder_a_live_runner_uses_is_refused(tmp_path, capsys):
    # a live process whose command line names the runner (bash -c would exec `sleep` away)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "mlops.run"])
    try:
        _left_running(tmp_path / "run", live.pid)
        assert run(HELLO / "hello-command.yml", tmp_path / "run") == 2
    finally:
        live.kill()
    assert f"is in use by a local run (pid {live.pid})" in capsys.readouterr().err
    assert not (tmp_path / "run/wd").exists()


@pytest.mark.network  # a cold cache: its environment layer from the registry
def test_a_run_folder_a_shell_would_split_runs_through_a_safe_link(tmp_path, capsys):
    """A checkout under `rel 4 ü/`: Azure substitutes paths unquoted, so the commands see the
    folder through a link of safe characters, and every file lands in the real folder."""
    import uuid

    # a name never run before: the note comes with a new link (/tmp/mlops-links-<uid> outlives
    # pytest's numbered folders, which a later session may number the same)
    folder = tmp_path / f"my runs ü {uuid.uuid4().hex[:8]}" / "x;y"
    assert run(TP / "distributed-tf.yml", folder) == 0
    err = capsys.readouterr().err
    assert f"note: {folder} has characters a shell would split" in err
    assert len(list((folder / "outputs" / "env").iterdir())) == 2  # in the real folder
    command = (folder / "command.sh").read_text()
    assert "mlops-links-" in command and " " not in command.split("dump_env.py ")[1].strip()


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_job_cannot_write_into_its_mounted_inputs_as_on_azure(tmp_path):
    """ro_mount (the default) refuses every write with Azure's error, and an uncaught one fails
    the job; a `mode: download` copy may change; the user's files never do."""
    original = (TP / "ro-data/notes.txt").read_bytes()
    assert run(TP / "readonly-inputs.yml", tmp_path / "run") == 1
    log = (tmp_path / "run/log.txt").read_text()
    for attempt in ("append", "create", "os.open", "remove", "rename", "rmtree", "file input"):
        assert f"{attempt} refused 30 Read-only file system" in log
    assert "read the user's own notes" in log and "copy a private copy may change" in log
    assert "OSError: [Errno 30] Read-only file system" in log.splitlines()[-1]
    assert (TP / "ro-data/notes.txt").read_bytes() == original
    assert sorted(p.name for p in (TP / "ro-data").iterdir()) == ["notes.txt"]


OUTPUTS = ROOT / "tests" / "fixtures" / "outputs"


@pytest.mark.proof
def test_an_output_emptied_or_removed_by_the_step_stays_as_azures_mount_point(tmp_path):
    """rw_mount: Python's rmtree empties the mount and ends with EBUSY; after the shell's
    `rm -rf`, the next command writes into it; what is written after is the output."""
    assert run(OUTPUTS / "rm-output.yml", tmp_path / "run") == 0
    log = (tmp_path / "run/log.txt").read_text()
    assert "rmtree: Device or resource busy" in log and "written: ['python.txt']" in log
    out = tmp_path / "run/outputs/model"
    assert sorted(p.name for p in out.iterdir()) == ["shell.txt"]
    assert (out / "shell.txt").read_text() == "from-shell\n"


def test_an_output_mapped_under_a_space_is_emptied_by_rm_rf_and_stays(tmp_path):
    """The same step with its output mapped to a datastore folder under a path with a space:
    the command sees it through a link, and `rm -rf` removes the folder (made again), not the
    link, so what is written afterwards is the output."""
    store = tmp_path / "my store"
    assets = tmp_path / "paths.yml"
    assets.write_text(f'"azureml://datastores/workspaceblobstore/paths/": "{store}/"\n')
    assert run(OUTPUTS / "rm-output.yml", tmp_path / "run", "outputs.model.path="
               "azureml://datastores/workspaceblobstore/paths/model", assets=assets) == 0
    assert sorted(p.name for p in (store / "model").iterdir()) == ["shell.txt"]


def test_an_output_on_an_inputs_datastore_folder_is_written_through_its_own_mount(tmp_path):
    """The input stays read-only; the output, the same datastore path, is read-write."""
    store = shutil.copytree(OUTPUTS / "datastore", tmp_path / "store")
    assets = tmp_path / "paths.yml"
    assets.write_text(f"azureml://datastores/workspaceblobstore/paths/: {store}/\n")
    assert run(OUTPUTS / "same-path.yml", tmp_path / "run", assets=assets) == 0
    log = (tmp_path / "run/log.txt").read_text()
    assert "input: Read-only file system" in log and "counted 1" in log
    assert (store / "shared/count.txt").read_text() == "1"
    assert not (store / "shared/x.txt").exists()


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_two_runs_into_one_folder_at_once_one_runs_and_the_other_touches_nothing(tmp_path):
    """Two `make local RUN_DIR=x` started together: one holds the folder, the other is refused at
    once (exit 2) and its cleanup leaves the running job's folder alone."""
    folder = tmp_path / "run"
    command = [sys.executable, "-m", "mlops.run", str(HELLO / "hello-command.yml"), "--run-dir",
               str(folder), "--set", "inputs.steps=8", "--set", "inputs.sleep=0.25"]
    both = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True) for _ in range(2)]
    outcomes = sorted((p.wait(timeout=180), p.stdout.read()) for p in both)
    assert [code for code, _ in outcomes] == [0, 2], outcomes
    assert f"{folder} is in use by a local run" in outcomes[1][1]
    assert (folder / "outputs" / "result" / "done").read_text() == "ok"
    assert json.loads((folder / "status.json").read_text())["status"] == "Completed"


def watchdogs_of(folder: Path) -> list[int]:
    """The watchdogs guarding the task in `folder` (their command line names it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            line = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(line) > 2 and line[1].endswith(b"watchdog.py") and line[2] == bytes(folder):
            found.append(int(proc.name))
    return found


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_pipeline_launcher_killed_without_warning_ends_its_root_run(tmp_path):
    """kill -9 of a pipeline's launcher: the step's watchdog ends the step, the root's ends the
    pipeline's own MLflow run, so nothing stays RUNNING."""
    folder = tmp_path / "run"
    runner = subprocess.Popen(
        [sys.executable, "-m", "mlops.run", str(HELLO / "hello-pipeline.yml"), "--run-dir",
         str(folder), "--set", "jobs.prep.command=sleep 60"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step = folder / "steps" / "prep"
    until(lambda: watchdogs_of(step), 120, "the step's watchdog")
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 60
    while any(r.info.status == "RUNNING" for r in runs("hello-pipeline")) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    statuses = {r.info.run_name: r.info.status for r in runs("hello-pipeline")}
    assert statuses == {"hello-pipeline": "KILLED", "prep": "KILLED"}, statuses


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB file system of its own (tmpfs), where a run can fill the disk; skipped where this
    user may not mount one."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_full_disk_leaves_a_true_status_and_no_traceback(tmp_path, small_disk):
    """The job's output fills the run folder's disk: the runner says so, keeps echoing, and
    status.json holds the outcome (never Running), written in the space its first record
    reserved."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "talk.py").write_text("for n in range(4000):\n    print('x' * 1000, flush=True)\n")
    spec = tmp_path / "talk.yml"
    spec.write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
        "type: command\ncode: code\ncommand: python talk.py\n"
        "environment: azureml:AzureML-minimal-ubuntu22.04-py39-cpu-inference@latest\n"
        "compute: azureml:cpu-cluster\n")
    done = subprocess.run([sys.executable, "-m", "mlops.run", str(spec), "--run-dir",
                           str(small_disk / "run")], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "No space left on device" in done.stderr
    record = json.loads((small_disk / "run" / "status.json").read_text())
    assert record["status"] in ("Completed", "Failed") and record["faults"]
    assert done.returncode == record["exit_code"]


def test_a_full_mlflow_store_is_said_in_one_line_and_the_outcome_stays_on_disk(tmp_path,
                                                                             small_disk):
    """The job fills the disk the MLflow store is on: ending its run there fails, which the
    runner says in one line (exit 1), and status.json and run.json still say how it ended."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "fill.py").write_text(
        "import sys\ntry:\n    with open(sys.argv[1], 'wb') as out:\n        while True:\n"
        "            out.write(b'x' * 4096)\n            out.flush()\nexcept OSError:\n"
        "    pass\n")
    spec = tmp_path / "fill.yml"
    spec.write_text(HELLO.joinpath("hello-command.yml").read_text().split("code:")[0] +
                    f"code: {code}\ncommand: python fill.py '{small_disk / 'fill'}'\n"
                    f"environment:\n  image: mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04"
                    f":latest\n  conda_file: {HELLO / 'hello-conda.yml'}\n")
    store = f"sqlite:///{small_disk / 'mlflow.db'}"
    try:
        done = subprocess.run([sys.executable, "-m", "mlops.run", str(spec), "--run-dir",
                               str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True,
                              timeout=180, env={**os.environ, "MLFLOW_TRACKING_URI": store})
    finally:  # the store's warm tracking server goes with its disk
        mlflow_server.stop(mlflow_server.server_folder(store))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"the MLflow store {small_disk / 'mlflow.db'}: database or disk is full" in \
        done.stderr
    assert done.returncode == 1
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "Completed"


@pytest.mark.network  # a cold cache: the sklearn-1.5 stand-in (with azureml-core) from the registry
def test_an_sdk_v1_script_logs_through_run_get_context_into_the_jobs_mlflow_run(tmp_path):
    """azureml-core's Run.get_context() is the job's run, as on Azure: offline it would only
    print and have no experiment (the published AutoML pipeline's register step reads the
    workspace's MLflow URI through it)."""
    assert run(TP / "v1-run-context.yml", tmp_path / "run") == 0
    (job,) = runs("v1-run-context")
    log = (tmp_path / "run/log.txt").read_text()
    assert f"run {job.info.run_id} in experiment v1-run-context; tracking http" in log
    assert "metrics ['answer', 'losses', 'table.epoch', 'table.score']; parent None" in log
    assert job.data.metrics["answer"] == 42 and job.data.tags["stage"] == "local"
    history = tracking.MlflowClient().get_metric_history(job.info.run_id, "losses")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [0.9, 0.5, 0.25]
    assert "is a Run: True; type azureml.scriptrun; Run(Experiment: v1-run-context," in log
    uploaded = tracking.MlflowClient().list_artifacts(job.info.run_id, "outputs")
    assert [a.path for a in uploaded] == ["outputs/answer.txt"]


def test_sdk_v1_workspace_calls_name_the_stand_in_and_get_model_path_answers_from_it(tmp_path):
    """Dataset.get_by_name and Datastore.get need a live workspace: one line each, naming the
    call and the map entry; Model.get_model_path answers from the map's entry."""
    model = tmp_path / "model"
    model.mkdir()
    assets = tmp_path / "paths.yml"
    assets.write_text(f"azureml:local-model: {model}\nazureml:titanic: {tmp_path}\n")
    assert run(TP / "v1-workspace-calls.yml", tmp_path / "run", assets=assets) == 0
    log = (tmp_path / "run/log.txt").read_text()
    assert f"model path: {model}" in log
    assert f"refused: AbstractDataset.get_by_name (at v1_workspace.py:8) needs a live Azure ML " \
        f"workspace (workspace._auth), which a local run does not have; {assets} maps " \
        f"azureml:titanic to {tmp_path}" in log
    assert "refused: Datastore.get (at v1_workspace.py:9) needs a live Azure ML workspace" in log
    assert f"`azureml://datastores/workspaceblobstore/paths/: <local folder>/` in {assets}" in log

