"""if_else, do_while and parallel_for run for real (tests/fixtures/control_flow: tiny standard
library steps): each branch taken, a loop stopped by its condition and by its limit, every item
run and aggregated, a skipped step recorded as Studio shows it, and steps inside reused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlops.specs import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "control_flow"
pytestmark = [pytest.mark.usefixtures("sources_unchanged", "mlflow_store"),
              pytest.mark.network]  # a cold cache: the fixtures' environment layer


def run(spec: str, folder: Path, *sets: str) -> str:
    """The job in its own process, with the setting az ml needs to load control-flow nodes
    (azure-ai-ml reads it when its pipeline schema is first imported)."""
    args = [a for s in sets for a in ("--set", s)]
    env = {**os.environ, "AZURE_ML_CLI_PRIVATE_FEATURES_ENABLED": "true",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "mlops.run", str(FIXTURES / spec),
                           "--run-dir", str(folder), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def status(folder: Path, *steps: str) -> dict[str, object]:
    return json.loads((folder.joinpath("steps", *steps) / "status.json").read_text())


@pytest.mark.proof  # the three kinds share one planner: if_else proves it in make test
def test_if_else_takes_each_branch_and_skips_the_other(tmp_path):
    from mlflow.tracking import MlflowClient

    out = run("if-else.yml", tmp_path / "big")
    assert "step branch: if_else: condition True: runs big; skips small" in out
    assert (tmp_path / "big/steps/big/outputs/out/said.txt").read_text() == "big\n"
    skipped = status(tmp_path / "big", "small")
    assert skipped["status"] == "Skipped" and "condition was True" in skipped["reason"]
    run_info = MlflowClient().get_run(skipped["mlflow_run_id"])
    assert run_info.info.status == "FINISHED" and run_info.data.tags["mlops.status"] == "Skipped"

    out = run("if-else.yml", tmp_path / "small", "inputs.value=1")
    assert "condition False: runs small; skips big" in out
    assert status(tmp_path / "small", "big")["status"] == "Skipped"
    assert (tmp_path / "small/steps/small/outputs/out/said.txt").read_text() == "small\n"

    out = run("if-else.yml", tmp_path / "again")  # steps inside a branch are reused
    assert status(tmp_path / "again", "check")["status"] == "Reused"
    assert status(tmp_path / "again", "big")["status"] == "Reused"


def test_do_while_stops_on_its_condition_and_on_its_limit(tmp_path):
    out = run("do-while.yml", tmp_path / "cond")
    assert "again is False after iteration 2: done" in out
    last = tmp_path / "cond/steps/loop/iteration_2/steps/counter"
    assert (last / "outputs/log/log.txt").read_text() == "count 1\ncount 2\ncount 3\n"
    assert not (tmp_path / "cond/steps/loop/iteration_3").exists()
    assert "say: 3" in (tmp_path / "cond/steps/report/log.txt").read_text()

    out = run("do-while.yml", tmp_path / "limit", "inputs.limit=10")
    assert "max_iteration_count 5 reached" in out
    assert "say: 5" in (tmp_path / "limit/steps/report/log.txt").read_text()


def test_parallel_for_runs_each_item_and_aggregates(tmp_path):
    out = run("parallel-for.yml", tmp_path)
    assert "parallel_for: 3 item(s), outputs out, length aggregated" in out
    table = tmp_path / "steps/each/outputs/out"
    assert (table / "MLTable").read_text() == \
        "paths:\n  - folder: ./0\n  - folder: ./1\n  - folder: ./2\n"
    assert (table / "2/greeting.txt").read_text().count("hello wasps") == 3
    gathered = json.loads((tmp_path / "steps/gather/outputs/out/gathered.json").read_text())
    assert gathered["lengths"] == {"0": "10", "1": "21", "2": "35"}
    assert status(tmp_path, "each", "item_1", "steps", "greeter")["status"] == "Completed"
