"""azml in a repository that is not this one: `job create` returns at once and the job runs in
the background, `show`/`stream`/`download` follow it, `cancel` stops it, and what runs write
stays in that repository's own state folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, until

HELLO = ROOT / "tests" / "fixtures" / "hello"


def azml(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MLOPS_WORKSPACE_DIR", "AZML_STATE_DIR",
                        "MLOPS_STATE_DIR", "MLFLOW_RUN_ID")}
    done = subprocess.run([str(Path(sys.executable).parent / "azml"), *args], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def repo(tmp_path) -> Path:
    """A user's repository (git, no settings file): the hello job's spec and code, and an
    `mlops/` folder of specs as every mlops-v2 template has (the runtime's processes started
    from here must not take it for the runtime's package)."""
    folder = tmp_path / "their repo"
    shutil.copytree(HELLO, folder / "cli" / "jobs")
    (folder / "mlops" / "azureml").mkdir(parents=True)
    (folder / "mlops" / "azureml" / "README.md").write_text("their pipelines' specs\n")
    (folder / ".git").mkdir()
    return folder


def recorded_status(repo: Path, name: str) -> str | None:
    """The status the job's run.json records (what `azml job show` reads), None before it is
    written."""
    for record in repo.glob(".azml/runs/*/run.json"):
        try:
            found = json.loads(record.read_text())
        except ValueError:  # being replaced: read on the next look
            continue
        if found.get("name") == name:
            return found.get("status")
    return None


def status(repo: Path, name: str) -> str:
    return azml(repo, "job", "show", "-n", name, "--query", "status", "-o", "tsv").stdout.strip()


@pytest.mark.proof
def test_a_job_is_created_in_the_background_followed_downloaded_and_stays_in_its_repo(
        repo, sources_unchanged):
    created = json.loads(azml(repo, "job", "create", "-f", "cli/jobs/hello-command.yml",
                              "--name", "hello-1", "--set", "inputs.steps=3").stdout)
    assert (created["name"], created["status"]) == ("hello-1", "Starting")
    # waited for on the run record itself (an azml process a look costs about a second of
    # CPU); then azml says the same
    until(lambda: recorded_status(repo, "hello-1") not in (None, "Starting", "Running"), 240,
          "the job to end", step=0.2)
    assert status(repo, "hello-1") == "Completed"
    streamed = azml(repo, "job", "stream", "-n", "hello-1").stdout
    assert streamed.startswith("RunId: hello-1\n") and "Execution Summary" in streamed
    azml(repo, "job", "download", "-n", "hello-1", "--all", "-p", "got")
    assert (repo / "got" / "named-outputs" / "result" / "done").read_text() == "ok"
    listed = azml(repo, "job", "list", "--query", "[].name", "-o", "tsv").stdout.split()
    assert listed == ["hello-1"]
    again = azml(repo, "job", "create", "-f", "cli/jobs/hello-command.yml", "--name",
                 "hello-1", check=False)
    assert again.returncode == 2 and "taken" in again.stderr
    assert sorted(p.name for p in repo.iterdir()) == [".azml", ".git", "cli", "got", "mlops"]
    assert {"runs", "mlflow.db", "workspace"} <= {p.name for p in (repo / ".azml").iterdir()}


def test_cancel_stops_a_running_job_and_its_processes(repo):
    azml(repo, "job", "create", "-f", "cli/jobs/hello-command.yml", "--name", "slow",
         "--set", "inputs.steps=200", "inputs.sleep=0.5")
    pid_file = until(lambda: next(repo.glob(".azml/runs/*/outputs/result/pid"), None), 240,
                     "the job's script to start")
    script = int(until(pid_file.read_text, 10, "the script's pid"))
    azml(repo, "job", "cancel", "-n", "slow")
    assert status(repo, "slow") == "Canceled"
    until(lambda: not Path(f"/proc/{script}").exists() or
          Path(f"/proc/{script}/stat").read_text().split(") ")[1][0] == "Z", 30,
          "the job's script to stop")
    streamed = azml(repo, "job", "stream", "-n", "slow", check=False)
    assert streamed.returncode == 1 and "Canceled" in streamed.stderr


def test_an_online_endpoint_is_created_deployed_to_rolled_out_and_deleted_as_with_az_ml(repo):
    """The safe-rollout walk of Azure's docs, verb for verb: endpoint, blue with all traffic,
    green at 0 %, traffic moved, blue deleted, the endpoint deleted (its servers stopped)."""
    shutil.copytree(ROOT / "tests" / "fixtures" / "endpoint", repo / "ep")
    (repo / "req.json").write_text('{"data": [1]}')
    created = json.loads(azml(repo, "online-endpoint", "create", "-f", "ep/endpoint.yml").stdout)
    assert created["name"] == "rollout-local" and created["scoring_uri"].endswith("/score")
    azml(repo, "online-deployment", "create", "-f", "ep/blue.yml", "--all-traffic")
    azml(repo, "online-deployment", "create", "-f", "ep/green.yml")
    show = ["online-endpoint", "show", "-n", "rollout-local", "--query", "traffic"]
    assert json.loads(azml(repo, *show).stdout) == {"blue": 100, "green": 0}
    invoke = ["online-endpoint", "invoke", "-n", "rollout-local", "-r", "req.json"]
    assert json.loads(json.loads(azml(repo, *invoke).stdout)) == {"who": "blue"}
    azml(repo, "online-endpoint", "update", "-n", "rollout-local", "--traffic",
         "blue=0 green=100")
    assert json.loads(json.loads(azml(repo, *invoke).stdout)) == {"who": "green"}
    logs = azml(repo, "online-deployment", "get-logs", "-n", "green", "-e", "rollout-local",
                "-o", "tsv").stdout
    assert "POST /score" in logs
    azml(repo, "online-deployment", "delete", "-n", "blue", "-e", "rollout-local", "--yes")
    assert json.loads(azml(repo, *show).stdout) == {"green": 100}
    azml(repo, "online-endpoint", "delete", "-n", "rollout-local", "--yes")
    gone = azml(repo, *show, check=False)
    assert gone.returncode == 3 and "not found" in gone.stderr
    until(lambda: not list(repo.glob(".azml/runs/endpoints/rollout-local/*/status.json")) or
          all('"Running"' not in p.read_text() for p in
              repo.glob(".azml/runs/endpoints/rollout-local/*/status.json")),
          60, "every server of the endpoint to stop")


def test_a_schedules_trigger_runs_its_job_in_the_background_and_update_archive_follow(repo):
    """`az ml schedule trigger` (nothing fires a schedule here): its job runs through job
    create's own path with the schedule's values over it; the job is then updated and archived
    as az ml does it."""
    (repo / "cli" / "jobs" / "nightly.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/schedule.schema.json\n"
        "name: nightly\ntrigger:\n  type: cron\n  expression: \"0 2 * * *\"\n"
        "create_job:\n  type: command\n  job: ./hello-command.yml\n  inputs:\n    steps: 3\n")
    made = azml(repo, "schedule", "create", "-f", "cli/jobs/nightly.yml")
    assert "nothing here fires it" in made.stderr
    name = json.loads(azml(repo, "schedule", "trigger", "-n", "nightly").stdout)["job_name"]
    until(lambda: recorded_status(repo, name) not in (None, "Starting", "Running"), 240,
          "the triggered job to end", step=0.2)
    shown = json.loads(azml(repo, "job", "show", "-n", name).stdout)
    assert (shown["status"], shown["inputs"]["steps"]) == ("Completed", "3")
    updated = azml(repo, "job", "update", "-n", name, "--set", "tags.reviewed=yes",
                   "--query", "tags.reviewed", "-o", "tsv")
    assert updated.stdout.strip() == "yes"
    azml(repo, "job", "archive", "-n", name)
    assert azml(repo, "job", "list", "--query", "[].name", "-o", "tsv").stdout.split() == []
    assert azml(repo, "job", "list", "--archived-only", "--query", "[].name", "-o",
                "tsv").stdout.split() == [name]
