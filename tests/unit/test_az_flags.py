"""What az ml's flags do here, beyond parsing (tests/unit/test_az_parity.py holds the table):
online-endpoint create --auth-mode and --set, update --set (az's generic update), job create
--save-as, batch-endpoint update --defaults, online-deployment --vscode-debug and a bare
--debug (mlops/cli, mlops/api)."""

from __future__ import annotations

import json

import pytest
import yaml

from mlops.cli import run
from mlops.cli.jobs import save_as
from mlops.errors import LocalRunError


def test_an_endpoints_auth_mode_and_set_go_over_its_spec_and_update_sets_over_the_record(
        repo, capsys):
    """ml_online_endpoint_create: --set, then --name, then --auth-mode (lower-cased)."""
    (repo / "ep.yml").write_text("name: given\nauth_mode: key\n")
    assert run(["online-endpoint", "create", "-f", "ep.yml", "-n", "ep1", "--auth-mode",
                "AML_TOKEN", "--set", "description=hello", "tags.team=cv", "--no-wait",
                "--query", "[name, auth_mode, description, tags.team]", "-o", "tsv"]) == 0
    assert capsys.readouterr().out.split() == ["ep1", "aml_token", "hello", "cv"]
    assert run(["online-endpoint", "update", "-n", "ep1", "--set", "tags.stage=dev",
                "--query", "[auth_mode, tags.team, tags.stage]", "-o", "tsv"]) == 0
    assert capsys.readouterr().out.split() == ["aml_token", "cv", "dev"]


def test_show_web_notes_studio_and_local_changes_nothing(repo, capsys):
    assert run(["online-endpoint", "create", "-n", "ep2", "--local", "-o", "none"]) == 0
    assert "every endpoint is local" in capsys.readouterr().err
    assert run(["online-endpoint", "show", "-n", "ep2", "--local", "true", "--query", "name",
                "-o", "tsv"]) == 0
    shown = capsys.readouterr()
    assert (shown.out.strip(), shown.err) == ("ep2", "")
    assert run(["online-endpoint", "show", "-n", "ep2", "--web", "-o", "none"]) == 0
    assert "Studio" in capsys.readouterr().err


def test_save_as_writes_the_created_job_as_yaml_and_names_a_missing_folder(tmp_path):
    """ml_job_create's job.dump(save_as): written over; a folder that does not exist is the
    input's error (the job stays created)."""
    target = tmp_path / "job.yml"
    target.write_text("old")
    save_as({"name": "j1", "status": "Starting"}, target)
    assert yaml.safe_load(target.read_text()) == {"name": "j1", "status": "Starting"}
    try:
        save_as({"name": "j1"}, tmp_path / "missing" / "job.yml")
    except LocalRunError as err:
        assert "No such parent folder" in str(err) and "j1 was created" in str(err)
    else:
        raise AssertionError("a missing folder was not refused")


def test_batch_endpoint_update_defaults_sets_its_default_deployment(repo, capsys):
    """ml_batch_endpoint_update: --defaults "deployment_name=d" (convert_str_to_dict)."""
    assert run(["batch-endpoint", "create", "-n", "be1", "-o", "none"]) == 0
    assert run(["batch-endpoint", "update", "-n", "be1", "--defaults",
                "deployment_name=d1", "--query", "defaults"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deployment_name": "d1"}
    assert run(["batch-endpoint", "update", "-n", "be1", "--defaults", "d1"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_vscode_debug_waits_for_a_debugger_and_a_bare_debug_is_az_s_log_level(
        repo, monkeypatch):
    from mlops.api import endpoints

    started = []
    monkeypatch.setattr(endpoints.actions, "start", lambda serve: started.append(serve) or 1)
    (repo / "blue.yml").write_text("name: blue\n")
    assert run(["online-endpoint", "create", "-n", "ep3", "-o", "none"]) == 0
    assert run(["online-deployment", "create", "-f", "blue.yml", "-e", "ep3",
                "--vscode-debug"]) == 1  # (no server)
    assert run(["online-deployment", "create", "-f", "blue.yml", "-e", "ep3", "--debug"]) == 1
    assert started[0].debug is not None and started[0].debug.mode == "debugpy"
    assert started[1].debug is None


def test_workspace_options_are_noted_unless_only_show_errors(repo, capsys):
    """`-g RG -w WS` on every call (published scripts) runs here unchanged; az's
    --only-show-errors leaves the note out, as it leaves az's warnings out."""
    assert run(["model", "list", "-g", "rg", "-w", "ws", "-o", "none"]) == 0
    assert "ignored" in capsys.readouterr().err
    assert run(["model", "list", "-g", "rg", "-w", "ws", "--only-show-errors", "-o", "none"]) == 0
    assert capsys.readouterr().err == ""


def test_an_online_deployment_updates_without_its_file_from_what_it_was_made_of(
        repo, monkeypatch, capsys):
    """`az ml online-deployment update -n blue -e E --set instance_count=2` (generic update):
    the spec and --set values the running deployment was made of, the new --set after them."""
    from mlops.api import endpoints

    started = []
    monkeypatch.setattr(endpoints.actions, "start", lambda serve: started.append(serve) or 1)
    made = type("Slot", (), {"spec": str(repo / "blue.yml"), "sets": ["instance_count=1"]})
    state = type("State", (), {"deployments": {"blue": made}})
    monkeypatch.setattr(endpoints, "_state", lambda endpoint: state)
    (repo / "blue.yml").write_text("name: blue\n")
    assert run(["online-endpoint", "create", "-n", "ep4", "-o", "none"]) == 0
    assert run(["online-deployment", "update", "-n", "blue", "-e", "ep4", "--set",
                "instance_count=2"]) == 1  # (no server)
    assert (started[0].deployment, started[0].sets) == (
        repo / "blue.yml", ("instance_count=1", "instance_count=2", "name=blue",
                            "endpoint_name=ep4"))
    assert run(["online-deployment", "update", "-n", "green", "-e", "ep4"]) == 3
    assert run(["online-deployment", "update", "-e", "ep4"]) == 2
    with pytest.raises(SystemExit):  # create needs -f
        run(["online-deployment", "create", "-e", "ep4"])
    capsys.readouterr()


def test_update_set_traffic_entry_goes_over_the_live_split(repo, monkeypatch, capsys):
    """`az ml online-endpoint update -n E --set traffic.green=10` (generic update of one
    entry): the live split with that entry changed, through Azure's traffic rules."""
    from mlops.api import endpoints
    from mlops.api.session import Session

    asked = []
    monkeypatch.setattr(endpoints.actions, "updated",
                        lambda name, traffic, mirror: asked.append((traffic, mirror)))
    monkeypatch.setattr(Session, "show_endpoint",
                        lambda self, name: {"traffic": {"blue": 100, "green": 0}})
    assert run(["online-endpoint", "create", "-n", "ep5", "-o", "none"]) == 0
    assert run(["online-endpoint", "update", "-n", "ep5", "--set", "traffic.blue=90",
                "traffic.green=10", "-o", "none"]) == 0
    assert run(["online-endpoint", "update", "-n", "ep5", "--set", "mirror_traffic.green=5",
                "-o", "none"]) == 0
    assert asked == [("blue=90 green=10", None), (None, "green=5")]
