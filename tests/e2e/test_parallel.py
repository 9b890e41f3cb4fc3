"""`type: parallel` pipeline nodes run on the batch driver as Azure's parallel jobs do: file and
tabular mini-batches, program_arguments, retries, error thresholds, append_row_to."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from mlops import run as local
from mlops.specs import ROOT

PARALLEL = ROOT / "tests" / "fixtures" / "parallel"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store")


def run(spec: str, folder: Path, *sets: str) -> int:
    argv = [str(PARALLEL / spec), "--run-dir", str(folder), "--max-procs", "2"]
    return local.main(argv + [x for s in sets for x in ("--set", s)])


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_file_mini_batches_retry_count_failures_and_append_rows_in_order(tmp_path, capsys):
    assert run("files-pipeline.yml", tmp_path / "run") == 0
    step = tmp_path / "run/steps/score"
    rows = (step / "outputs/scores/scores.csv").read_text().splitlines()
    assert rows == [f"item_{i}.txt,20" for i in range(1, 7)]  # the bad file's batch: no rows
    log = (step / "log.txt").read_text()
    assert "init with weight 2 label chars" in log  # program_arguments reach argparse
    assert "|INFO|process000|init logged by process000" in log  # azureml_user's EntryScript
    assert log.count("mini-batch attempt") == 2  # max_retries: 1
    assert "ValueError: cannot score item_7.txt" in log
    # unchanged, the node is reused as Azure reuses a parallel step: nothing starts
    capsys.readouterr()
    assert run("files-pipeline.yml", tmp_path / "again") == 0
    assert "step score: reused (from run score)" in capsys.readouterr().out
    assert not (tmp_path / "again/steps/score/log.txt").exists()
    assert (tmp_path / "again/steps/score/outputs/scores/scores.csv").read_text() == \
        "\n".join(rows) + "\n"


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_an_exceeded_error_threshold_fails_the_node(tmp_path, capsys):
    assert run("files-pipeline.yml", tmp_path / "run", "jobs.score.error_threshold=0") != 0
    assert "error_threshold 0 exceeded" in capsys.readouterr().out


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_table_rows_are_dataframes_in_size_bounded_mini_batches(tmp_path):
    assert run("table-pipeline.yml", tmp_path / "run") == 0
    with open(PARALLEL / "table/flowers.csv") as source:
        expected = [f"{float(r['sepal_length'])} {round(float(r['petal_length']) * 3, 2)}"
                    for r in csv.DictReader(source)]
    rows = (tmp_path / "run/steps/score/outputs/scored/parallel_run_step.txt").read_text()
    assert rows.splitlines() == expected
    batches = list((tmp_path / "run/steps/score/work/tables").glob("*.csv"))
    assert 1 < len(batches) < 24


@pytest.mark.network  # a cold cache: the MLTable reader's environment from the registry
def test_an_mltables_own_transformations_apply_as_azures_mltable_reads_them(tmp_path):
    """The table is read by Azure's mltable package: `take` keeps the first rows, and a path
    outside this machine is refused before anything starts."""
    import shutil

    copy = shutil.copytree(PARALLEL, tmp_path / "parallel")
    table = copy / "table/MLTable"
    table.write_text(table.read_text() + "  - take: 5\n")
    argv = [str(copy / "table-pipeline.yml"), "--max-procs", "2"]
    assert local.main([*argv, "--run-dir", str(tmp_path / "run")]) == 0
    rows = (tmp_path / "run/steps/score/outputs/scored/parallel_run_step.txt").read_text()
    assert len(rows.splitlines()) == 5
    table.write_text("paths:\n  - file: wasbs://data@account.blob.core.windows.net/f.csv\n")
    assert local.main([*argv, "--run-dir", str(tmp_path / "remote")]) != 0


@pytest.mark.network  # a cold cache: the MLTable reader's environment from the registry
def test_a_mounted_mltable_is_the_list_of_files_its_paths_name(tmp_path):
    """An mltable input in eval_mount is a file list, as on Azure: run() gets the files the
    MLTable's paths name (not the MLTable file, not the folder's other files); the task is
    typed `function`, which azure-ai-ml loads as it loads run_function."""
    import shutil

    copy = shutil.copytree(PARALLEL, tmp_path / "parallel")
    (copy / "files/MLTable").write_text("paths:\n  - file: ./item_2.txt\n  - file: ./item_5.txt\n")
    argv = [str(copy / "files-pipeline.yml"), "--run-dir", str(tmp_path / "run"),
            "--max-procs", "2"]
    sets = ["jobs.score.inputs.documents.type=mltable", "jobs.score.inputs.documents.mode="
            "eval_mount", "jobs.score.task.type=function"]
    assert local.main(argv + [x for s in sets for x in ("--set", s)]) == 0
    rows = (tmp_path / "run/steps/score/outputs/scores/scores.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows] == ["item_2.txt", "item_5.txt"]


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_killed_worker_is_started_again_and_its_mini_batch_queued_again(tmp_path, capsys):
    """kill -9 of a worker (the OOM killer) stopped the whole node; Azure's driver starts the
    process again and the mini-batch it held is tried again (a try of retry_settings spent)."""
    marker = tmp_path / "crashed-once"
    assert run("files-pipeline.yml", tmp_path / "run",
               f"jobs.score.environment_variables.CRASH_ONCE={marker}") == 0
    assert marker.exists()
    out = capsys.readouterr().out
    assert "ended (killed by SIGKILL (exit 137)); mini-batch 000001 queued again (try 2 of 2)" \
        "; started again" in out, out
    rows = (tmp_path / "run/steps/score/outputs/scores/scores.csv").read_text().splitlines()
    assert rows == [f"item_{i}.txt,20" for i in range(1, 7)]  # each once, in order
