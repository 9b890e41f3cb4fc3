"""A pipeline component batch deployment (`type: pipeline`) run as Azure runs it, with the az ml
commands of Azure's published deploy-pipelines scripts: create the endpoint, create the
deployment --set-default, invoke with an inputs file (and with --set inputs.<n>.path), follow
the job, show it Completed, download its named output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, until

FIXTURES = ROOT / "tests" / "fixtures"


def azml(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MLOPS_WORKSPACE_DIR", "AZML_STATE_DIR",
                        "MLOPS_STATE_DIR", "MLFLOW_RUN_ID")}
    done = subprocess.run([str(Path(sys.executable).parent / "azml"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ended(repo: Path, name: str) -> str | None:
    """The job's status once it ended (read from its run.json, as azml job show reads it)."""
    try:
        status = json.loads((repo / ".azml" / "runs" / name / "run.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None
    return status if status not in ("Starting", "Running") else None


@pytest.mark.proof
def test_a_pipeline_deployment_is_invoked_followed_and_its_output_downloaded(tmp_path):
    repo = tmp_path / "their repo"
    shutil.copytree(FIXTURES / "pipeline_deployment", repo / "deploy")
    shutil.copytree(FIXTURES / "hello", repo / "hello")  # its steps' conda file
    (repo / ".git").mkdir()
    here = repo / "deploy"
    azml(here, "batch-endpoint", "create", "-f", "endpoint.yml")
    made = json.loads(azml(here, "batch-deployment", "create", "--endpoint", "shout-batch",
                           "-f", "deployment.yml", "--set-default"))
    assert (made["name"], made["type"]) == ("shout-pipeline", "pipeline")
    names = []
    for extra in (["--f", "inputs.yml"],
                  ["--set", "inputs.lines.path=more", "--set", "inputs.lines.type=uri_folder"]):
        job = json.loads(azml(here, "batch-endpoint", "invoke", "-n", "shout-batch", *extra))
        assert job["name"].startswith("batchjob-") and job["status"] == "Starting"
        names.append(job["name"])
    for name in names:
        until(lambda n=name: ended(repo, n), 240, f"job {name} to end", step=0.2)
        shown = json.loads(azml(here, "job", "show", "-n", name))
        assert (shown["status"], shown["type"], shown["experiment_name"]) == \
            ("Completed", "pipeline", "shout-batch"), azml(here, "job", "stream", "-n", name)
        assert shown["properties"]["azureml.deploymentname"] == "shout-pipeline"
        assert "Execution Summary" in azml(here, "job", "stream", "-n", name)
        azml(here, "job", "download", "-n", name, "--output-name", "shouted", "-p", name)
    first, second = (here / n / "named-outputs" / "shouted" / "shouted.txt" for n in names)
    assert first.read_text() == "HELLO?\nWORLD?\n"  # inputs.yml's suffix over the default
    assert second.read_text() == "AGAIN!\n"  # the component's default suffix
    listed = json.loads(azml(here, "batch-endpoint", "list-jobs", "-n", "shout-batch",
                             "--query", "[].name"))
    assert sorted(listed) == sorted(names)
    assert not (repo / "deploy" / ".azml").exists()  # the state stays at the repository's root
