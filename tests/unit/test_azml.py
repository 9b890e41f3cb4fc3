"""azml, without processes: az's output formats and --query, a job's status from its run.json,
`job show` as az prints it, `job download`'s layout, not-found as az's exit 3 (mlops/cli,
mlops/api)."""

from __future__ import annotations

import errno
import io
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from mlops.api.jobs import download
from mlops.api.records import JobRecord, all_jobs, find_job
from mlops.api.session import Session
from mlops.api.views import job_view
from mlops.cli import run
from mlops.cli.output import query, render
from mlops.errors import LocalError, LocalRunError, NotFound
from mlops.runtime.records import JobStatus, RunRecord
from mlops.workspace.jobs import claim_name, record_job
from mlops.workspace.store import Workspace, workspace_root

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "hello" / "hello-command.yml"
DEAD_PID = 2**22 + 12345  # above Linux's pid_max: no process has it


def a_job(name: str, status: JobStatus | None, *, pid: int | None = None,
          created: str = "2026-11-27T10:00:00+00:00", code: int | None = None) -> JobRecord:
    folder = workspace_root().parent / "runs" / name
    folder.mkdir(parents=True)
    (folder / "spec.yml").write_text(HELLO.read_text())
    RunRecord(kind="commandJob", spec=str(HELLO), name=name, status=status, pid=pid,
              created_at=created, exit_code=code).write(folder)
    claim_name(Workspace(workspace_root()), name, folder)
    return JobRecord.at(name, folder)


def test_json_is_az_s_sorted_and_indented_and_tsv_keeps_scalars_in_key_order():
    result = {"name": "j", "status": "Completed", "inputs": {"a": 1}, "tags": [], "ok": True}
    assert render(result, "json") == json.dumps(result, indent=2, sort_keys=True) + "\n"
    assert render(result, "tsv") == "\tj\ttrue\tCompleted\t0\n"  # inputs, name, ok, status, tags
    assert render([{"b": 2, "a": None}], "tsv") == "\t2\n"
    assert yaml.safe_load(render(result, "yaml")) == result
    assert render(None, "json") == "" and render(result, "none") == ""


def test_table_has_a_column_per_scalar_key_and_query_is_jmespath():
    rows = [{"name": "a", "status": "Completed", "inputs": {}}, {"name": "bb", "status": "x"}]
    assert render(rows, "table").splitlines() == [
        "Name  Status", "----  ---------", "a     Completed", "bb    x"]
    assert query(rows, "[?status=='x'].name") == ["bb"]
    with pytest.raises(LocalRunError, match="--query"):
        query(rows, "[?")


def test_a_job_whose_runner_died_without_an_end_failed_and_an_ended_one_stays(repo):
    assert a_job("starting", JobStatus.STARTING, pid=os.getpid()).status == JobStatus.STARTING
    assert a_job("killed", JobStatus.RUNNING, pid=DEAD_PID).status == JobStatus.FAILED
    assert a_job("done", JobStatus.COMPLETED, code=0).status == JobStatus.COMPLETED


def test_a_job_whose_runner_died_is_what_its_tasks_watchdog_recorded(repo):
    """kill -9 of the runner: its watchdog stops the task and records it Canceled; job show
    and job list say so too (they said Failed beside a status.json saying Canceled)."""
    from mlops.runtime.records import Status, TaskRecord

    killed = a_job("killed", JobStatus.RUNNING, pid=DEAD_PID)
    TaskRecord(status=Status.CANCELED, exit_code=137).write(killed.folder)
    assert killed.status == JobStatus.CANCELED
    running = a_job("cut", JobStatus.RUNNING, pid=DEAD_PID)
    TaskRecord(status=Status.RUNNING, pid=DEAD_PID).write(running.folder)
    assert running.status == JobStatus.FAILED  # no watchdog's word: the runner's death
    assert running.runner_lost and not killed.runner_lost


def test_a_job_whose_watchdog_is_still_stopping_it_is_cancel_requested(repo, monkeypatch):
    """kill -9 of the runner: its watchdog gives the job's processes up to 5 s after TERM, then
    records Canceled; job show said Failed until then, so a script polling for an end saw
    Failed, then Canceled. A pid that another process reused is not the watchdog."""
    from mlops.api import records
    from mlops.runtime.records import Status, TaskRecord

    dying = a_job("dying", JobStatus.RUNNING, pid=DEAD_PID)
    TaskRecord(status=Status.RUNNING, pid=DEAD_PID, watchdog=os.getpid()).write(dying.folder)
    assert dying.status == JobStatus.FAILED  # this pid runs pytest, not a watchdog
    monkeypatch.setattr(records, "_is_watchdog", lambda pid: pid == os.getpid())
    assert dying.status == JobStatus.CANCEL_REQUESTED and not dying.status.terminal
    TaskRecord(status=Status.RUNNING, pid=DEAD_PID, watchdog=DEAD_PID).write(dying.folder)
    assert dying.status == JobStatus.FAILED  # the watchdog died too: nobody will end it


def test_a_job_its_runner_was_told_to_cancel_is_cancel_requested_until_it_ends(repo):
    """`job cancel --no-wait`: the runner gives the job's processes their grace before it
    records Canceled; show said Running meanwhile (Azure: CancelRequested)."""
    from mlops.api.records import CANCEL_ASKED

    asked = a_job("asked", JobStatus.RUNNING, pid=os.getpid())
    (asked.folder / CANCEL_ASKED).write_text(str(DEAD_PID))  # asked of an earlier runner
    assert asked.status == JobStatus.RUNNING
    (asked.folder / CANCEL_ASKED).write_text(str(os.getpid()))
    assert asked.status == JobStatus.CANCEL_REQUESTED
    ended = a_job("ended", JobStatus.CANCELED, pid=os.getpid())
    (ended.folder / CANCEL_ASKED).write_text(str(os.getpid()))
    assert ended.status == JobStatus.CANCELED


def test_stream_of_a_job_whose_runner_is_gone_says_so(repo):
    """kill -9 of `job create`'s runner before its task starts: stream said only "ended
    Failed" beside a log that ends mid-run."""
    lost = a_job("lost", JobStatus.RUNNING, pid=DEAD_PID)
    with pytest.raises(LocalError, match=f"its runner \\(process {DEAD_PID}\\) is gone"):
        Session().stream_job(lost.name, io.StringIO())
    failed = a_job("failed", JobStatus.FAILED, code=1)
    with pytest.raises(LocalError, match=r"ended Failed \(exit 1\)") as ended:
        Session().stream_job(failed.name, io.StringIO())
    assert "gone" not in str(ended.value) and not failed.runner_lost


def test_show_prints_the_keys_az_ml_job_show_prints_for_a_command_job(repo):
    a_job("hello-1", JobStatus.COMPLETED, code=0)
    view = job_view(find_job("hello-1"))
    assert {"$schema", "code", "command", "compute", "creation_context", "display_name",
            "environment", "environment_variables", "experiment_name", "id", "inputs", "name",
            "outputs", "parameters", "properties", "resourceGroup", "resources", "services",
            "status", "tags", "type"} - {"$schema"} <= set(view)
    assert (view["name"], view["status"], view["type"]) == ("hello-1", "Completed", "command")
    assert view["id"].endswith("/jobs/hello-1") and view["services"]["Studio"]["endpoint"]
    assert view["properties"]["azml.run_folder"].endswith("runs/hello-1")


def test_a_job_killed_before_its_run_folder_held_anything_is_listed_failed(repo):
    """A runner killed right after it took its folder and claimed its name (the folder holds
    its .lock alone): list and show say it Failed; list was a FileNotFoundError traceback."""
    folder = workspace_root().parent / "runs" / "cut-short"
    folder.mkdir(parents=True)
    (folder / ".lock").write_text("123\n")
    claim_name(Workspace(workspace_root()), "cut-short", folder)
    a_job("whole", JobStatus.COMPLETED, code=0)
    listed = {view["name"]: view["status"] for view in map(job_view, all_jobs())}
    assert listed == {"cut-short": "Failed", "whole": "Completed"}
    assert job_view(find_job("cut-short"))["status"] == "Failed"


def test_an_unknown_job_is_az_s_exit_3_and_list_is_newest_first(repo, capsys):
    a_job("old", JobStatus.COMPLETED, created="2026-11-27T09:00:00+00:00")
    a_job("new", JobStatus.FAILED, created="2026-11-27T11:00:00+00:00", code=1)
    assert [r.name for r in all_jobs()] == ["new", "old"]
    with pytest.raises(NotFound):
        find_job("nope")
    assert run(["job", "show", "-n", "nope"]) == 3
    assert "not found" in capsys.readouterr().err
    assert run(["job", "list", "--query", "[].status", "-o", "tsv"]) == 0
    assert capsys.readouterr().out == "Failed\nCompleted\n"


def test_an_assets_unknown_version_is_az_s_exit_3_as_its_unknown_name_is(repo, tmp_path,
                                                                          capsys):
    """az ml model show -n m --version 99: the service's 404, exit 3, like an unknown name."""
    (tmp_path / "weights.bin").write_bytes(b"w")
    assert run(["model", "create", "-n", "m1", "-p", str(tmp_path / "weights.bin")]) == 0
    assert run(["model", "show", "-n", "m1", "--version", "99"]) == 3
    assert "m1 has no version 99" in capsys.readouterr().err
    assert run(["model", "show", "-n", "nope"]) == 3


def test_download_lays_out_artifacts_and_named_outputs_as_az_ml_job_download(repo, tmp_path):
    record = a_job("done", JobStatus.COMPLETED, code=0)
    (record.folder / "wd" / "outputs").mkdir(parents=True)
    (record.folder / "wd" / "outputs" / "metrics.json").write_text("{}")
    (record.folder / "log.txt").write_text("hello\n")
    result = record.folder / "outputs" / "result"
    result.mkdir(parents=True)
    (result / "done").write_text("ok")
    record_job(Workspace(workspace_root()), ["done"], record.folder, {"result": str(result)})
    target = tmp_path / "down"
    download(record, target, everything=True)
    assert (target / "artifacts" / "outputs" / "metrics.json").is_file()
    assert (target / "artifacts" / "user_logs" / "std_log.txt").read_text() == "hello\n"
    assert (target / "named-outputs" / "result" / "done").read_text() == "ok"
    with pytest.raises(LocalRunError, match="no output 'nope'"):
        download(record, target, output="nope")
    running = a_job("running", JobStatus.RUNNING, pid=os.getpid())
    with pytest.raises(LocalRunError, match="only once it has ended"):
        download(running, target)


@pytest.mark.parametrize(("code", "says"), [(errno.ENOSPC, "free some space there"),
                                            (errno.EROFS, "read-only file system")])
def test_the_machine_s_fault_is_exit_1_with_what_to_do_not_a_traceback(monkeypatch, capsys,
                                                                        code, says):
    def full(*_args, **_kwargs):  # a copy that filled the disk: the name written is the second
        err = OSError(code, os.strerror(code), "/src/a.py")
        err.filename2 = "/state/runs/x/wd/a.py"
        raise err

    monkeypatch.setattr("mlops.cli.Session", full)
    assert run(["job", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ERROR: /state/runs/x/wd/a.py: ") and says in err
    assert "AZML_STATE_DIR" in err
    monkeypatch.setattr("mlops.cli.Session", lambda: (_ for _ in ()).throw(OSError(5, "EIO")))
    with pytest.raises(OSError):  # not the machine's foreseeable fault: the traceback stays
        run(["job", "list"])


def test_a_damaged_run_json_leaves_that_job_out_of_the_list_not_the_others(repo, capsys):
    a_job("good", JobStatus.COMPLETED, code=0)
    a_job("bad", JobStatus.COMPLETED, code=0)
    (workspace_root().parent / "runs" / "bad" / "run.json").write_text('{"name": ')
    assert run(["job", "list", "--query", "[].name", "-o", "tsv"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == ["good"] and "bad" in err and "left out" in err
    assert run(["job", "show", "-n", "bad"]) == 1  # the machine's: said where it is asked for


def test_ctrl_c_while_azml_still_imports_is_exit_130_without_a_traceback(monkeypatch):
    from mlops import azml

    def interrupted(_main):  # the signal lands in `from mlops.cli import run`
        raise KeyboardInterrupt

    monkeypatch.setattr(azml, "exit_with", interrupted)
    with pytest.raises(SystemExit) as ended:
        azml.entry()
    assert ended.value.code == 130


def test_a_signal_ends_azml_with_128_plus_its_number_as_the_front_doors(monkeypatch):
    """SIGTERM to `azml job run` is 143 (it was 130, Ctrl-C's, whatever the signal)."""
    import signal

    from mlops import azml, cli
    from mlops.runtime.launch import Interrupted

    def terminated(*_args):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(cli, "keep_state_out_of_git", terminated)
    assert cli.run(["job", "list"]) == 143
    monkeypatch.setattr(azml, "exit_with", terminated)
    with pytest.raises(SystemExit) as ended:
        azml.entry()
    assert ended.value.code == 143


def test_a_job_that_ends_as_it_is_read_is_shown_as_it_ended_not_failed(repo, monkeypatch):
    """The runner records its end, then exits: a run.json read just before the end, with the
    runner gone when its pid is checked, is read again (it was shown Failed)."""
    from mlops.api import records

    a_job("racing", JobStatus.RUNNING, pid=DEAD_PID)
    folder = workspace_root().parent / "runs" / "racing"

    def ends_meanwhile(pid):
        RunRecord(kind="commandJob", spec=str(HELLO), name="racing", status=JobStatus.COMPLETED,
                  created_at="2026-11-27T10:00:00+00:00", exit_code=0).write(folder)
        return False

    monkeypatch.setattr(records, "_alive", ends_meanwhile)
    assert JobRecord.at("racing", folder).status == JobStatus.COMPLETED
    assert find_job("racing").run.exit_code == 0


def test_show_prints_local_inputs_at_their_upload_uri_and_the_default_output(repo, tmp_path):
    """az ml uploads a local input at create and the job keeps the upload's URI
    (LocalUpload/<azure-ai-ml's object hash>/<name>, a folder's ending in /); show printed
    `azureml:data/x.csv`. The URI is fixed at the first view; the .amlignore'd file is
    not part of the hash; a registered input is left as it is."""
    spec_dir = tmp_path / "spec dir"
    (spec_dir / "data" / "d").mkdir(parents=True)
    (spec_dir / "data" / "x.csv").write_text("a,b\n")
    (spec_dir / "data" / "d" / "y.txt").write_text("y")
    spec = spec_dir / "job.yml"
    spec.write_text("type: command\ncommand: echo ${{inputs.f}} ${{inputs.d}} ${{inputs.r}}\n"
                    "environment: azureml:AzureML-sklearn-1.5@latest\ninputs:\n"
                    "  f: {type: uri_file, path: data/x.csv}\n"
                    "  d: {type: uri_folder, path: ./data/d}\n"
                    "  r: {type: uri_folder, path: azureml:registered:1}\n")
    folder = workspace_root().parent / "runs" / "up"
    folder.mkdir(parents=True)
    (folder / "spec.yml").write_text(spec.read_text())
    RunRecord(kind="commandJob", spec=str(spec), name="up", status=JobStatus.COMPLETED,
              created_at="2026-11-27T10:00:00+00:00", exit_code=0).write(folder)
    claim_name(Workspace(workspace_root()), "up", folder)
    blob = "azureml://datastores/workspaceblobstore/paths/LocalUpload/"
    inputs = job_view(find_job("up"))["inputs"]
    assert inputs["f"]["path"] == blob + (
        "cc57292eb829d615f8e0f7860ff48993e8b0c85d6b55d04688e2dbd8547cfbb2/x.csv")
    assert re.fullmatch(re.escape(blob) + "[0-9a-f]{64}/d/", inputs["d"]["path"])
    assert inputs["r"]["path"] == "azureml:registered:1"
    (spec_dir / "data" / "x.csv").write_text("changed after create\n")
    (spec_dir / "data" / "d" / ".amlignore").write_text("skipped.txt\n")
    view = job_view(find_job("up"))
    assert view["inputs"]["f"]["path"] == inputs["f"]["path"]  # as create fixed it
    assert view["outputs"]["default"] == {
        "mode": "rw_mount", "type": "uri_folder",
        "path": "azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.up"}
    from mlops.api.uploads import upload_uri

    before = upload_uri(spec_dir / "data" / "d", "uri_folder")
    (spec_dir / "data" / "d" / "skipped.txt").write_text("left out by .amlignore")
    assert upload_uri(spec_dir / "data" / "d", "uri_folder") == before


def test_show_names_a_command_jobs_mlflow_run_from_its_tasks_record(repo):
    """A command job's run id is in its task's status.json, not run.json: show left
    `mlflow.run_id` out of its properties."""
    from mlops.runtime.records import Status, TaskRecord

    job = a_job("tracked", JobStatus.COMPLETED, code=0)
    TaskRecord(status=Status.COMPLETED, mlflow_run_id="abc", exit_code=0).write(job.folder)
    assert job_view(find_job("tracked"))["properties"]["mlflow.run_id"] == "abc"
