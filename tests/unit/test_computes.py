"""`azml compute`: az ml compute's verbs over the local workspace, the compute loaded by
azure-ai-ml's load_compute with az's flags as its params_override (ml_compute_create)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops.cli import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def azml(tmp_path, monkeypatch, capsys):
    """`azml compute ...` in a workspace of its own: (exit code, JSON printed, stderr)."""
    monkeypatch.setenv("MLOPS_WORKSPACE_DIR", str(tmp_path / "ws"))

    def call(argv: list[str]) -> tuple[int, object, str]:
        code = run(["compute", *argv])
        out, err = capsys.readouterr()
        return code, (json.loads(out) if out.strip() else None), err
    return call


def test_a_spec_and_flags_make_the_compute_az_shows_and_updates(azml):
    code, made, err = azml(["create", "-f", str(ROOT / "assets" / "compute-cpu.yml"),
                            "--set", "max_instances=3", "--tier", "low_priority"])
    assert code == 0 and "nothing is provisioned" in err
    assert (made["name"], made["type"], made["max_instances"], made["tier"]) == \
        ("cpu-cluster", "amlcompute", 3, "low_priority")
    assert made["provisioning_state"] == "Succeeded"
    assert made["id"].endswith("/computes/cpu-cluster")
    code, made, err = azml(["create", "-n", "gpu", "--type", "AmlCompute", "--max-instances",
                            "4", "--size", "Standard_NC12", "--tags", "a=1", "b"])
    assert code == 0 and made["type"] == "amlcompute" and made["tags"] == {"a": "1", "b": ""}
    assert "Standard_NC12s_v3" in err  # a retired size: said, not refused (the list is ours)
    code, made, _ = azml(["update", "-n", "cpu-cluster", "--max-instances", "200"])
    assert code == 0 and made["max_instances"] == 200 and made["tier"] == "low_priority"
    assert azml(["list", "--query", "[].name"])[1] == ["cpu-cluster", "gpu"]
    assert azml(["show", "-n", "gpu"])[1]["max_instances"] == 4
    assert azml(["delete", "-n", "gpu", "--yes"])[0] == 0
    code, _, err = azml(["show", "-n", "gpu"])
    assert code == 3 and "not in the local workspace" in err


@pytest.mark.parametrize(("argv", "says"), [
    (["-n", "x", "--type", "weird"], "Unknown compute type: weird"),
    (["-n", "x"], "Unknown compute type: None"),
    (["-n", "x", "--type", "amlcompute", "--max-instances", "many"], "Not a valid integer"),
    (["-n", "s", "--type", "synapsespark", "--set", "resource_id=/r"],
     "Create operation not supported for synapsespark"),
    (["-n", "a/b", "--type", "amlcompute"], "Compute name 'a/b' is not available"),
])
def test_what_load_compute_refuses_is_refused_in_its_words(azml, argv, says):
    code, out, err = azml(["create", *argv])
    assert code == 2 and out is None and says in err


def test_delete_asks_as_az_does_and_update_takes_the_types_az_updates(azml):
    azml(["create", "-n", "vm1", "--type", "virtualmachine", "--set", "resource_id=/r"])
    code, _, err = azml(["delete", "-n", "vm1"])  # stdin is no terminal under pytest
    assert code == 2 and "Use --yes" in err
    code, _, err = azml(["update", "-n", "vm1", "--max-instances", "2"])
    assert code == 2 and "is virtualmachine type" in err
    assert azml(["show", "-n", "vm1"])[0] == 0


def test_workspace_show_is_the_local_one_and_names_its_mlflow_store(tmp_path, monkeypatch,
                                                                    capsys):
    """`MLFLOW_TRACKING_URI=$(az ml workspace show --query mlflow_tracking_uri -o tsv)`, as
    published MLOps scripts set it, points at the local store; any --name is the local one."""
    store = tmp_path / "state dir" / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    assert run(["workspace", "show", "-n", "prod-ws", "-g", "rg", "--query",
                "mlflow_tracking_uri", "-o", "tsv"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"sqlite:///{store}" and "the workspace is the local one" in err
    assert run(["workspace", "list", "--query", "[].[name, resource_group]"]) == 0
    assert json.loads(capsys.readouterr().out) == [["local", "local"]]


def test_a_datastore_is_kept_without_its_secrets_beside_the_workspaces_own(azml, tmp_path,
                                                                           capsys):
    spec = tmp_path / "ds.yml"
    spec.write_text("name: blob1\ntype: azure_blob\naccount_name: acct\ncontainer_name: data\n"
                    "credentials:\n  account_key: s3cret\n")
    assert run(["datastore", "create", "-f", str(spec), "-n", "raw",
                "--set", "container_name=other"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert (made["name"], made["container_name"], made["credentials"]) == ("raw", "other", {})
    assert "s3cret" not in "".join(p.read_text() for p in (tmp_path / "ws").rglob("*.json"))
    assert run(["datastore", "list", "--query", "[].name"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        "raw", "workspaceartifactstore", "workspaceblobstore", "workspacefilestore",
        "workspaceworkingdirectory"]
    assert run(["datastore", "delete", "-n", "raw"]) == 0
    assert run(["datastore", "show", "-n", "raw"]) == 3
    assert run(["datastore", "delete", "-n", "workspaceblobstore"]) == 2
    spec.write_text("name: x\ntype: azure_blob\n")
    assert run(["datastore", "create", "-f", str(spec)]) == 2
    assert "account_name" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [["compute", "create"], ["datastore", "create"],
                                  ["job", "validate"]])
def test_a_yaml_bomb_is_refused_before_azure_ai_ml_reads_it(verb, tmp_path, monkeypatch,
                                                            capsys):
    monkeypatch.setenv("MLOPS_WORKSPACE_DIR", str(tmp_path / "ws"))
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb = tmp_path / "bomb.yml"
    bomb.write_text("\n".join([*lines, "name: x", "type: amlcompute"]) + "\n")
    assert run([*verb, "-f", str(bomb)]) == 2
    assert "expands to more than" in capsys.readouterr().err


def test_an_instance_starts_stops_and_restarts_as_its_state_allows_and_a_cluster_does_not(azml):
    """The service's start acts on a stopped compute instance only, in its words; a cluster is
    no instance (azure-ai-ml's begin_start: "Start a compute instance")."""
    code, made, _ = azml(["create", "-n", "ci1", "--type", "computeinstance", "--size",
                          "Standard_DS3_v2"])
    assert code == 0 and made["state"] == "Running"
    code, _, err = azml(["start", "-n", "ci1"])
    assert code == 2 and "StartComputeInstanceOnlyAllowedInStoppedState" in err
    assert azml(["stop", "-n", "ci1", "--no-wait"])[:2] == (0, None)
    assert azml(["show", "-n", "ci1"])[1]["state"] == "Stopped"
    code, made, _ = azml(["update", "-n", "ci1", "--tags", "a=1"])
    assert code == 0 and made["state"] == "Stopped"  # an update keeps the instance's state
    assert azml(["start", "-n", "ci1"])[0] == 0
    assert azml(["show", "-n", "ci1"])[1]["state"] == "Running"
    assert azml(["stop", "-n", "ci1"])[0] == 0 and azml(["restart", "-n", "ci1"])[0] == 0
    assert azml(["show", "-n", "ci1"])[1]["state"] == "Running"
    azml(["create", "-n", "cpu", "--type", "amlcompute"])
    for action in ("start", "stop", "restart"):
        code, _, err = azml([action, "-n", "cpu"])
        assert code == 2 and "acts on a compute instance (computeinstance) only" in err
    assert azml(["stop", "-n", "nope"])[0] == 3


@pytest.mark.parametrize("argv,taken", [
    (["-n", "cpu-cluster", "--type", "amlcompute"], True),
    (["-n", "c", "--type", "amlcompute"], False),  # under 2 characters
    (["-n", "my-cpu-cluster-ds3", "--type", "amlcompute"], False),  # over 16
    (["-n", "cpu_cluster", "--type", "amlcompute"], False),
    (["-n", "cluster-", "--type", "amlcompute"], False),
    (["-n", "my-compute-instance-ds11", "--type", "computeinstance"], True),  # 24
    (["-n", "cpu-cluster-1", "--type", "computeinstance"], False),  # a digit after '-' ends it
    (["-n", "ci", "--type", "computeinstance"], False),  # under 3
])
def test_a_name_the_service_refuses_for_its_kind_is_refused_and_nothing_kept(azml, argv, taken):
    code, made, err = azml(["create", *argv])
    assert (code == 0) is taken
    if not taken:
        assert code == 2 and "Reason: Invalid" in err and "Fix: rename it" in err
        assert azml(["list"])[1] == []
