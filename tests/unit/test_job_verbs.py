"""`azml job update|archive|restore|show-services` and `job list`'s archived views, without
processes: az's generic update over the job as shown, the service's rule of what a job's update
may change, azure-ai-ml's list view types (mlops/api/job_verbs.py, generic_update.py)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from mlops.api.generic_update import Edit, apply
from mlops.cli import run
from mlops.errors import LocalRunError
from mlops.runtime.records import JobStatus, RunRecord
from mlops.workspace.jobs import claim_name
from mlops.workspace.store import Workspace, workspace_root

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "hello" / "hello-command.yml"


def a_job(name: str, status: JobStatus, *, extra: str = "", pid: int | None = None) -> Path:
    folder = workspace_root().parent / "runs" / name
    folder.mkdir(parents=True)
    (folder / "spec.yml").write_text(HELLO.read_text() + extra)
    RunRecord(kind="commandJob", spec=str(HELLO), name=name, status=status, pid=pid,
              created_at=f"2026-11-27T10:00:0{len(name) % 10}+00:00").write(folder)
    claim_name(Workspace(workspace_root()), name, folder)
    return folder


def azml(capsys, *argv: str) -> tuple[int, object, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_update_changes_what_the_service_lets_change_and_show_keeps_it(repo, capsys):
    """azureml-examples' train.sh edit (less experiment_name): the job as shown after it."""
    a_job("hello-1", JobStatus.COMPLETED)
    code, shown, _ = azml(capsys, "job", "update", "-n", "hello-1", "--set",
                          "display_name=updated display name", "description=updated",
                          "tags.hello=updated tag", "--set", "properties.stage=two")
    assert code == 0
    assert (shown["display_name"], shown["description"], shown["tags"]) == (
        "updated display name", "updated", {"hello": "updated tag"})
    assert shown["properties"]["stage"] == "two"
    assert shown["properties"]["azml.run_folder"].endswith("runs/hello-1")
    code, again, _ = azml(capsys, "job", "show", "-n", "hello-1")
    assert again == shown
    code, shown, _ = azml(capsys, "job", "update", "-n", "hello-1", "--remove", "tags.hello",
                          "--remove", "description")
    assert code == 0 and shown["tags"] == {} and "description" not in shown
    assert shown["display_name"] == "updated display name"


@pytest.mark.parametrize(("argv", "says"), [
    (["--set", "experiment_name=other"], "the existing job's experiment_name cannot be changed"),
    (["--set", "command=echo hi", "inputs.steps=3"], "job's command, inputs cannot be"),
    (["--set", "tags.n=1"], "Not a valid string."),
    (["--set", "display_name=null"], "Field may not be null."),
    (["--set", "nope.x=1"], "Couldn't find 'nope' in ''. Available options: ['code'"),
    (["--add", "tags", "a=b"], "invalid syntax: `--add property.listProperty"),
    (["--set", "=1"], "Empty key in --set"),
])
def test_what_az_or_the_service_refuses_is_exit_2_and_changes_nothing(repo, capsys, argv,
                                                                        says):
    a_job("hello-2", JobStatus.COMPLETED)
    code, out, err = azml(capsys, "job", "update", "-n", "hello-2", *argv)
    assert (code, out) == (2, None) and says in err
    assert azml(capsys, "job", "show", "-n", "hello-2")[1]["tags"] == {}


def test_a_number_kept_as_text_and_what_load_drops_is_dropped(repo, capsys):
    a_job("hello-3", JobStatus.COMPLETED)
    code, shown, _ = azml(capsys, "job", "update", "-n", "hello-3", "--set", "tags.n=1",
                          "status=Canceled", "--force-string")
    assert code == 0 and shown["tags"] == {"n": "1"} and shown["status"] == "Completed"
    assert azml(capsys, "job", "update", "-n", "nope", "--set", "tags.a=b")[0] == 3


def test_archived_jobs_leave_the_list_as_azure_ai_ml_s_list_views_say(repo, capsys):
    a_job("done", JobStatus.COMPLETED)
    a_job("other", JobStatus.FAILED)
    assert azml(capsys, "job", "archive", "-n", "done")[:2] == (0, None)
    names = lambda *flags: azml(capsys, "job", "list", "--query", "[].name", *flags)[1]  # noqa: E731
    assert names() == ["other"]
    assert names("--archived-only") == ["done"]
    assert sorted(names("--include-archived")) == ["done", "other"]
    code, _, err = azml(capsys, "job", "list", "--include-archived", "--archived-only")
    assert code == 2 and "Cannot provide both archived-only and include-archived." in err
    assert azml(capsys, "job", "show", "-n", "done")[0] == 0  # shown all the same, as on Azure
    azml(capsys, "job", "update", "-n", "done", "--set", "tags.a=b")
    assert names("--archived-only") == ["done"]  # an update keeps it archived
    assert azml(capsys, "job", "restore", "-n", "done")[0] == 0
    assert sorted(names()) == ["done", "other"]
    assert azml(capsys, "job", "archive", "-n", "nope")[0] == 3


def test_archiving_a_running_job_says_az_s_help_and_a_damaged_edit_file_is_named(repo, capsys):
    folder = a_job("live", JobStatus.RUNNING, pid=os.getpid())  # this process: alive
    code, _, err = azml(capsys, "job", "archive", "-n", "live")
    assert code == 0 and "only completed jobs can be archived" in err
    (folder / "job-edits.json").write_text('{"values": {"command": "x"}, "archived": true}')
    code, _, err = azml(capsys, "job", "show", "-n", "live")
    assert code == 1 and "job-edits.json: damaged job edits" in err


def test_show_services_prints_nothing_and_says_what_a_job_asks_for_that_does_not_run(repo,
                                                                                      capsys):
    a_job("plain", JobStatus.COMPLETED)
    a_job("lab", JobStatus.COMPLETED,
          extra="services:\n  my_lab:\n    type: jupyter_lab\n  my_ssh:\n    type: ssh\n")
    assert azml(capsys, "job", "show-services", "-n", "plain") == (0, None, "")
    code, out, err = azml(capsys, "job", "show-services", "-n", "lab", "-i", "0")
    assert (code, out) == (0, None) and "asks for jupyter_lab, ssh" in err
    assert azml(capsys, "job", "show-services", "-n", "lab", "-i", "-1")[0] == 2
    assert azml(capsys, "job", "show-services", "-n", "nope")[0] == 3


def test_generic_update_follows_azure_cli_s_paths_values_and_order():
    target = {"a": {"b": None}, "items": [{"k": "x", "v": 1}, {"k": "y", "v": 2}], "t": {},
              "lst": None}
    apply(target, [Edit("set", ("a.b.c=1", "t.s=[1, 2]", "t.w=hello", "t.q='q'")),
                   Edit("set", ("items[k=y].v=3", "items[0].v={\"n\": true}")),
                   Edit("add", ("lst", "p=1", "q=2", "4", "z")),
                   Edit("remove", ("items", "0")), Edit("set", ("t.e=a=b",))])
    assert target == {"a": {"b": {"c": 1}}, "items": [{"k": "y", "v": 3}],
                      "t": {"s": [1, 2], "w": "hello", "q": "q", "e": "a=b"},
                      "lst": [{"p": "1", "q": "2"}, 4, "z"]}
    with pytest.raises(LocalRunError, match=r"index 5 doesn't exist"):
        apply(target, [Edit("remove", ("items", "5"))])
    with pytest.raises(LocalRunError, match=r"item with value 'n' doesn't exist for key 'k'"):
        apply(target, [Edit("set", ("items[k=n].v=1",))])
    with pytest.raises(LocalRunError, match=r"Couldn't find 'zz' in 't'"):
        apply(target, [Edit("remove", ("t.zz",))])
    assert apply({"x": 1}, [Edit("set", ("x=1",))], force_string=True) == {"x": "1"}


def test_update_changes_the_jobs_mlflow_run_too(repo, capsys, monkeypatch):
    """On Azure a job is its MLflow run: `job update`'s tags and display name are the run's
    (they stayed as the job was created in the local store)."""
    calls = []

    class Client:
        def set_tag(self, run_id, key, value):
            calls.append(("set", run_id, key, value))

        def delete_tag(self, run_id, key):
            calls.append(("delete", run_id, key))

        def update_run(self, run_id, name=None):
            calls.append(("name", run_id, name))

    monkeypatch.setattr("mlops.workspace.mlflow_models._client", Client)
    # the store's error translation (test_workspace_hostile's) imports MLflow, 3 s of CPU in
    # this worker (azure-ai-ml's group) for a client that never raises
    monkeypatch.setattr("mlops.workspace.mlflow_models._store", contextlib.nullcontext)
    folder = a_job("tracked", JobStatus.COMPLETED, extra="tags: {old: o, kept: k}\n")
    record = RunRecord.read(folder)
    RunRecord(**{**record.__dict__, "mlflow_run_id": "r1"}).write(folder)
    code, shown, _ = azml(capsys, "job", "update", "-n", "tracked", "--set", "tags.new=n",
                          "--remove", "tags.old", "--set", "display_name=renamed")
    assert code == 0 and shown["tags"] == {"kept": "k", "new": "n"}
    assert sorted(calls) == [("delete", "r1", "old"), ("name", "r1", "renamed"),
                             ("set", "r1", "new", "n")]
    calls.clear()
    assert azml(capsys, "job", "update", "-n", "tracked", "--set", "description=d")[0] == 0
    assert calls == []  # nothing of the run's changed
