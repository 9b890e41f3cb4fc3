"""The local runtime follows Azure ML's execution model, on third-party-shaped specs.

Every fixture under tests/fixtures/thirdparty is written in the style of published Azure ML CLI
v2 specs (inline pipeline nodes, quoted references, sweep nodes, datastore URIs, ...). Every test
asserts that the source tree is unchanged afterwards (the `sources_unchanged` fixture).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from mlops import run as local
from mlops.errors import LocalRunError
from mlops.overrides import apply_sets, parse_sets
from mlops.resolve import render_command
from mlops.specs import ROOT
from mlops.uris import lookup
from mlops.validate import validate

TP = ROOT / "tests" / "fixtures" / "thirdparty"
HELLO = ROOT / "tests" / "fixtures" / "hello"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store")


def run(spec: Path, run_dir: Path, *sets: str, assets: Path | None = None) -> int:
    argv = [str(spec), "--run-dir", str(run_dir), "--max-procs", "2"]
    argv += ["--assets", str(assets)] if assets else []
    return local.main(argv + [x for s in sets for x in ("--set", s)])


def runs(experiment: str) -> list:
    client = MlflowClient()
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


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
    assert env["MLFLOW_EXPERIMENT_NAME"] == Path.cwd().name  # Azure's default experiment name


def test_outputs_and_logs_folders_are_created_kept_and_uploaded(tmp_path):
    assert run(TP / "quoted-ref.yml", tmp_path / "run") == 0
    wd = tmp_path / "run" / "wd"
    assert (wd / "outputs/note.txt").is_file() and (wd / "logs/trace.log").is_file()
    assert (wd / "scratch.txt").is_file() and not (TP / "src/scratch.txt").exists()
    (mlflow_run,) = runs(Path.cwd().name)
    client = MlflowClient()
    uploaded = {a.path for folder in ("outputs", "logs", "user_logs")
                for a in client.list_artifacts(mlflow_run.info.run_id, folder)}
    assert {"outputs/note.txt", "logs/trace.log", "user_logs/log.txt"} <= uploaded


def test_inline_pipeline_nodes_with_empty_output_declarations(tmp_path):
    assert run(TP / "inline-pipeline.yml", tmp_path / "run") == 0
    copy = tmp_path / "run/steps/consume/outputs/copy/copy.txt"
    assert copy.read_text().strip() == "hello there"
    parent = next(r for r in runs(Path.cwd().name) if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs(Path.cwd().name)
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == ["consume", "produce"]


def test_node_level_data_inputs_resolve_like_job_inputs(tmp_path):
    assets = tmp_path / "local-paths.yml"
    assets.write_text(yaml.safe_dump({
        "wasbs://datasets@example.blob.core.windows.net/tables/": str(TP / "tables") + "/"}))
    assert run(TP / "data-node-pipeline.yml", tmp_path / "run", assets=assets) == 0
    assert (tmp_path / "run/outputs/final/table.csv").read_text() == "x,y\n1,2\n"
    log = (tmp_path / "run/steps/local_rows/log.txt").read_text()
    assert "inputs/source/table.csv" in log  # bound under the step's own short path


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


def test_pipeline_sweep_node_passes_its_best_trial_downstream(tmp_path):
    assert run(TP / "sweep-node-pipeline.yml", tmp_path / "run") == 0
    summary = json.loads((tmp_path / "run/steps/tune/sweep_summary.json").read_text())
    assert len(summary["trials"]) == 4
    assert summary["best_trial"]["params"] == {"lr": 0.5, "kernel": "rbf"}
    assert "lr=0.5 kernel=rbf" in (tmp_path / "run/steps/report/log.txt").read_text()
    trials = [r for r in runs(Path.cwd().name) if "mlops.trial" in r.data.tags]
    assert len(trials) == 4 and all("score" in r.data.metrics for r in trials)
    folders = {t["folder"] for t in summary["trials"]}
    assert len(folders) == 4  # every trial in its own folder, own snapshot


def test_distributed_node_runs_any_command_once_per_process(tmp_path):
    assert run(TP / "distributed-echo.yml", tmp_path / "run") == 0
    ranks = tmp_path / "run/steps/ranks/outputs/ranks"
    lines = sorted(p.read_text().split("master=")[0].split() for p in ranks.iterdir())
    assert lines == [["rank=0", "local=0", "world=2", "node=0"],
                     ["rank=1", "local=0", "world=2", "node=1"]]


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


def test_a_dying_launcher_takes_its_workers_with_it(tmp_path):
    assert run(TP / "orphan.yml", tmp_path / "run") == 128 + signal.SIGKILL
    worker = int((tmp_path / "run/outputs/pids/worker.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)


def test_a_crash_ends_every_mlflow_run_the_job_opened(tmp_path):
    assert run(TP / "crash.yml", tmp_path / "run") == 1
    statuses = {r.info.run_name: r.info.status for r in runs("thirdparty-crash")}
    assert statuses == {"crash": "FAILED", "inner": "FAILED"}


def test_a_sweep_whose_metric_is_never_logged_names_what_was(tmp_path, capsys):
    assert run(TP / "sweep-wrong-metric.yml", tmp_path / "run") == 1
    summary = json.loads((tmp_path / "run/sweep_summary.json").read_text())
    assert summary["metrics_logged"] == ["score"]
    assert "the trials logged: score" in capsys.readouterr().err


def test_what_azure_refuses_is_refused_by_validate_and_locally(tmp_path, capsys):
    spec = TP / "bayesian-with-policy.yml"
    problems = [str(f) for f in validate([spec]) if f.is_error]
    assert any("Bayesian sampling supports only choice, uniform and quniform" in p
               for p in problems)
    assert any("does not support early termination" in p for p in problems)
    assert run(spec, tmp_path / "run") == 2
    assert "Azure would refuse this spec" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_warnings_are_printed_and_never_block_a_run(tmp_path, capsys):
    sets = ["inputs.epochs=1", "early_termination.type=bandit",
            "early_termination.slack_factor=0.2", "early_termination.delay_evaluation=3"]
    assert run(HELLO / "hello-sweep.yml", tmp_path / "run", *sets) == 0
    err = capsys.readouterr().err
    assert "warning: early_termination.delay_evaluation: delay_evaluation 3 is not below " \
           "epochs 1" in err
    assert "warning: inputs.epochs: input 'epochs' is declared but never passed" in err


def test_a_spec_without_schema_line_is_typed_by_its_type():
    assert validate([TP / "no-schema-line.yml", TP / "distributed-tf.yml"]) == []


def test_rerunning_a_sweep_into_its_folder_is_refused(tmp_path, capsys):
    assert run(HELLO / "hello-sweep.yml", tmp_path / "run", "limits.max_total_trials=1") == 0
    assert run(HELLO / "hello-sweep.yml", tmp_path / "run", "limits.max_total_trials=1") == 2
    assert "a sweep cannot be resumed" in capsys.readouterr().err


def test_a_rerun_appends_to_the_log(tmp_path):
    for _ in range(2):
        assert run(TP / "distributed-tf.yml", tmp_path / "run") == 0
    log = (tmp_path / "run/log.txt").read_text()
    assert log.count("==== attempt at") == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_stop_the_whole_job_and_mark_it_killed(tmp_path, sig):
    runner = subprocess.Popen(
        [sys.executable, "-m", "mlops.run", str(HELLO / "hello-command.yml"), "--run-dir",
         str(tmp_path / "run"), "--set", "inputs.steps=200", "--set", "inputs.sleep=0.2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file = tmp_path / "run/outputs/result/pid"
    deadline = time.monotonic() + 90
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    runner.send_signal(sig)
    assert runner.wait(timeout=60) == 128 + sig
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    (mlflow_run,) = runs("hello-command")
    assert mlflow_run.info.status == "KILLED"


def test_render_substitutes_raw_values_and_drops_unset_optional_segments():
    command = "python t.py --a '${{inputs.a}}' $[[--b ${{inputs.b}}]] --o ${{outputs.o}}"
    values = {"inputs": {"a": "x y", "b": None}, "outputs": {"o": "/tmp/o"}}
    assert render_command(command, values, "s.yml") == "python t.py --a 'x y'  --o /tmp/o"
    values["inputs"]["a"] = None
    with pytest.raises(LocalRunError, match=r"\$\{\{inputs.a\}\} has no value"):
        render_command(command, values, "s.yml")


def test_set_passes_raw_strings_as_the_cli_does():
    data = {"inputs": {"epochs": 10, "data": "azureml:fowl@latest"}}
    apply_sets(data, parse_sets(["inputs.epochs=1", "limits.timeout=60", "a.b=x=y"],
                                Path("s.yml")), Path("s.yml"))
    assert data["inputs"]["epochs"] == "1" and data["limits"]["timeout"] == "60"
    assert data["a"]["b"] == "x=y"
    with pytest.raises(LocalRunError, match="defined by reference strings"):
        apply_sets(data, [{"inputs.data.path": "/x"}], Path("s.yml"))


def test_reference_lookup_by_asset_name_prefix_and_long_datastore_form():
    mapping = {"azureml:fowl": "data/fowl",
               "azureml://datastores/blob/paths/": "data/blob/"}
    assert lookup("azureml:fowl:3", mapping) == "data/fowl"
    assert lookup("azureml:fowl@latest", mapping) == "data/fowl"
    assert lookup("azureml://datastores/blob/paths/a/b.csv", mapping) == "data/blob/a/b.csv"
    long_form = ("azureml://subscriptions/s/resourcegroups/g/workspaces/w/datastores/blob/"
                 "paths/a/b.csv")
    assert lookup(long_form, mapping) == "data/blob/a/b.csv"
    assert lookup("https://example.com/x.csv", mapping) is None


def test_an_unsafe_run_folder_is_refused_clearly(tmp_path, capsys):
    assert run(TP / "distributed-tf.yml", tmp_path / "my runs" / "x") == 2
    assert "characters a shell would split" in capsys.readouterr().err
