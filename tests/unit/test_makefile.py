"""The Makefile renders the right az ml command lines (make -n: nothing runs, no Azure needed)."""

from __future__ import annotations

import sys

from support import copied_store

from mlops.specs import ROOT


def test_the_gate_reads_the_runs_metric_and_refuses_below_the_bar(tmp_path, monkeypatch,
                                                                   empty_mlflow_store):
    from mlflow.tracking import MlflowClient

    sys.path.insert(0, str(ROOT / "scripts"))
    from gate_model import decide, main

    assert decide({"best_val_acc": 0.8}, "best_val_acc", 0.7)[0]
    assert not decide({"best_val_acc": 0.69}, "best_val_acc", 0.7)[0]
    assert "logged no best_val_acc" in decide({"val_acc": 0.9}, "best_val_acc", 0.7)[1]
    uri = copied_store(empty_mlflow_store, tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("gate")).info.run_id
    client.log_metric(run, "best_val_acc", 0.75)
    assert main(["--run", run, "--min", "0.7"]) == 0
    assert main(["--run", run, "--min", "0.8"]) == 1


def test_each_help_group_is_declared_once():
    """`make help` lists a group's targets together; the Makefile keeps them together too."""
    headers = [line for line in (ROOT / "Makefile").read_text().splitlines()
               if line.startswith("##@ ")]
    assert len(headers) == len(set(headers)), headers
