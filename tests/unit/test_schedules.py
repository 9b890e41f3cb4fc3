"""`azml schedule`: a job schedule's YAML loaded by azure-ai-ml's load_schedule, its create_job
checked as job create checks a job, kept in the local workspace; list's enabled views, az's
generic update, and trigger creating its job once through job create's path (its runner
stubbed: no process)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlops.api import jobs
from mlops.api.schedule_plans import Plan, leaf_sets, plan_of, rerun_sets
from mlops.cli import run
from mlops.errors import LocalRunError
from mlops.runtime.records import JobStatus, RunRecord
from mlops.workspace.jobs import claim_name
from mlops.workspace.store import Workspace, workspace_root

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "hello"
CRON = "trigger:\n  type: cron\n  expression: \"0 2 * * *\"\n"


@pytest.fixture
def started(repo, monkeypatch) -> list[list[str]]:
    """The hello job's folder in the user's repository; each runner command line create
    would start."""
    shutil.copytree(HELLO, repo / "jobs")
    argvs: list[list[str]] = []
    monkeypatch.setattr(jobs, "start", lambda run, folder, argv: argvs.append(argv))
    return argvs


def schedule(repo: Path, create_job: str, name: str = "nightly") -> Path:
    path = repo / "jobs" / f"{name}.yml"
    path.write_text("$schema: https://azuremlschemas.azureedge.net/latest/schedule.schema.json"
                    f"\nname: {name}\n{CRON}create_job: {create_job}\n")
    return path


def azml(capsys, *argv: str) -> tuple[int, object, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_a_schedule_is_kept_shown_listed_and_says_nothing_fires_it(repo, started, capsys):
    code, made, err = azml(capsys, "schedule", "create", "-f",
                           str(schedule(repo, "./hello-command.yml")), "--set",
                           "display_name=Nightly", "tags.team=a")
    assert code == 0 and "nothing here fires it on its trigger" in err and not started
    assert (made["name"], made["display_name"], made["tags"], made["is_enabled"]) == (
        "nightly", "Nightly", {"team": "a"}, True)
    assert made["trigger"] == {"type": "cron", "expression": "0 2 * * *", "time_zone": "UTC"}
    assert made["create_job"]["type"] == "command" and made["id"].endswith("/schedules/nightly")
    assert azml(capsys, "schedule", "show", "-n", "nightly")[1] == made
    assert azml(capsys, "schedule", "create", "-f", str(schedule(repo, "azureml:j1", "again")),
                "-n", "again2")[0] == 0
    names = lambda *f: azml(capsys, "schedule", "list", "--query", "[].name", *f)[1]  # noqa: E731
    assert names() == ["again2", "nightly"]
    assert azml(capsys, "schedule", "disable", "-n", "nightly")[1]["is_enabled"] is False
    assert (names(), names("--disabled-only")) == (["again2"], ["nightly"])
    assert names("--include-disabled") == ["again2", "nightly"]
    code, _, err = azml(capsys, "schedule", "list", "--include-disabled", "--disabled-only")
    assert code == 2 and "Cannot provide both disabled-only and include-disabled." in err
    assert azml(capsys, "schedule", "enable", "-n", "nightly")[1]["is_enabled"] is True
    assert azml(capsys, "schedule", "delete", "-n", "nightly") == (0, None, "")
    assert azml(capsys, "schedule", "show", "-n", "nightly")[0] == 3


@pytest.mark.parametrize(("create_job", "says"), [
    ("./no-such-job.yml", "no-such-job.yml"),
    ("{type: command, job: ./hello-command.yml, inputs: {steps: 3}, nope: 1}", "nope"),
    ("{type: command, job: ./hello-command.yml, compute: azureml:gpu, "
     "environment: azureml:nothing-here@latest}", "nothing-here"),
])
def test_what_load_schedule_or_job_create_refuses_is_refused_and_nothing_kept(
        repo, started, capsys, create_job, says):
    code, out, err = azml(capsys, "schedule", "create", "-f", str(schedule(repo, create_job)))
    assert (code, out) == (2, None) and says in err
    assert azml(capsys, "schedule", "list", "--include-disabled")[1] == []


def test_update_is_az_s_generic_update_over_the_schedule_s_own_fields(repo, started, capsys):
    azml(capsys, "schedule", "create", "-f", str(schedule(repo, "./hello-command.yml")))
    code, shown, _ = azml(capsys, "schedule", "update", "-n", "nightly", "--set",
                          "trigger.expression=0 3 * * 1", "tags.b=c", "description=d")
    assert code == 0 and shown["trigger"]["expression"] == "0 3 * * 1"
    assert (shown["tags"], shown["description"], shown["is_enabled"]) == ({"b": "c"}, "d", True)
    for argv, says in ((["--set", "trigger.type=hourly"], "schedule update"),
                       (["--set", "create_job.command=x"], "create it again"),
                       (["--set", "name=other"], "name cannot change")):
        code, _, err = azml(capsys, "schedule", "update", "-n", "nightly", *argv)
        assert code == 2 and says in err, argv
    assert azml(capsys, "schedule", "show", "-n", "nightly")[1]["trigger"]["type"] == "cron"


def test_trigger_creates_its_job_once_through_job_create_s_path(repo, started, capsys):
    path = schedule(repo, "{type: command, job: ./hello-command.yml, inputs: {steps: 5}, "
                          "experiment_name: nightly-runs}")
    azml(capsys, "schedule", "create", "-f", str(path))
    code, result, err = azml(capsys, "schedule", "trigger", "-n", "nightly")
    assert code == 0 and set(result) == {"job_name", "schedule_action_type"}
    assert result["schedule_action_type"] == "CreateJob" and "triggered once" in err
    (argv,) = started
    assert argv[argv.index("--run-dir") - 1].endswith("jobs/hello-command.yml")
    assert " ".join(argv).endswith("--set inputs.steps=5 --set experiment_name=nightly-runs")
    assert azml(capsys, "schedule", "trigger", "-n", "nope")[0] == 3


def test_an_existing_job_runs_again_with_what_it_was_created_with(repo, started, capsys):
    folder = workspace_root().parent / "runs" / "first"
    folder.mkdir(parents=True)
    ran = (HELLO / "hello-command.yml").read_text().replace("steps: 2", "steps: 7")
    (folder / "spec.yml").write_text(ran + "name: first\n")
    RunRecord(kind="commandJob", spec=str(repo / "jobs" / "hello-command.yml"), name="first",
              status=JobStatus.COMPLETED).write(folder)
    claim_name(Workspace(workspace_root()), "first", folder)
    azml(capsys, "schedule", "create", "-f", str(schedule(repo, "azureml:first")))
    assert azml(capsys, "schedule", "trigger", "-n", "nightly")[0] == 0
    assert started[0][-2:] == ["--set", "inputs.steps=7"]


def test_a_plan_reads_create_job_as_azure_ai_ml_s_schedule_schema_does(tmp_path):
    spec = tmp_path / "s.yml"
    assert plan_of("./j.yml", spec) == Plan(job_file=str(tmp_path / "j.yml"))
    assert plan_of("azureml:/subscriptions/0/resourceGroups/g/providers/Microsoft."
                   "MachineLearningServices/workspaces/w/jobs/abc", spec) == Plan(job="abc")
    assert plan_of({"type": "pipeline", "job": "azureml:abc", "settings": {"x": True}},
                   spec) == Plan(job="abc", sets=("settings.x=true",))
    with pytest.raises(LocalRunError, match="create_job.tags"):
        leaf_sets({"tags": ["a"]}, "create_job")
    assert rerun_sets({"name": "a", "inputs": {"n": 3, "m": 1}, "k": "new"},
                      {"inputs": {"n": 2, "m": 1}}) == ["inputs.n=3", "k=new"]
