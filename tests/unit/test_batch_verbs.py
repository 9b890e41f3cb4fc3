"""azml batch-endpoint and batch-deployment, without processes: az's arguments, the JSON each
verb prints, the default deployment rule, an invoke's input and job settings, a batch job as
`az ml job show` prints it (mlops/cli/batch.py, mlops/api/batch_endpoints.py, batch_jobs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops.api.batch_jobs import Invocation, job_sets, the_input
from mlops.api.records import JobRecord
from mlops.api.views import job_view
from mlops.cli import build_parser, run
from mlops.cli.batch import invocation
from mlops.endpoints.batch_run import BatchRequest, batch_folder, identity
from mlops.errors import LocalRunError
from mlops.project import project
from mlops.runtime.job import BATCH_JOB, write_record
from mlops.runtime.records import JobStatus
from mlops.workspace.jobs import claim_name
from mlops.workspace.store import Workspace, workspace_root

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = ROOT / "endpoints" / "batch" / "endpoint.yml"
FLAKY = ROOT / "tests" / "fixtures" / "batch" / "flaky-deployment.yml"


@pytest.fixture
def repo(repo):
    """The user's repository (conftest.py) with a model folder."""
    (repo / "model").mkdir()
    return repo


def azml(capsys, *args: str) -> object:
    code = run(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out) if out.strip() else None


def test_invoke_takes_az_s_arguments_and_the_job_settings():
    args = build_parser().parse_args([
        "batch-endpoint", "invoke", "-n", "ep", "-d", "blue", "--input", "azureml:imgs@latest",
        "--input-type", "uri_folder", "--mini-batch-size", "5", "--instance-count", "2",
        "--set", "output_file_name=out.csv", "--job-name", "j1", "--debug", "worker:0"])
    got = invocation(args)
    assert (got.endpoint, got.deployment, got.input, got.input_type, got.job_name) == \
        ("ep", "blue", "azureml:imgs@latest", "uri_folder", "j1")
    assert got.settings == {"mini_batch_size": "5", "instance_count": "2"}
    assert got.sets == ["output_file_name=out.csv"] and got.debug == ["--debug", "worker:0"]
    model = job_sets(got, {"type": "model", "settings": {}})
    assert model == ["settings.mini_batch_size=5", "resources.instance_count=2",
                     "settings.output_file_name=out.csv"]
    flat = job_sets(got, {"mini_batch_size": 10})
    assert flat == ["mini_batch_size=5", "resources.instance_count=2", "output_file_name=out.csv"]


def test_an_invoke_scores_one_data_input_named_any_way_az_takes_it(tmp_path):
    assert the_input(Invocation(endpoint="e", input="data", input_type="uri_file")) == \
        ("data", "uri_file")
    given = Invocation(endpoint="e", inputs=json.dumps(
        {"heart": {"type": "uri_folder", "path": "x"}, "mode": {"type": "string",
                                                               "default": "a"}}))
    assert the_input(given) == ("x", "uri_folder")
    (tmp_path / "inputs.yml").write_text("inputs:\n  d:\n    type: mltable\n    path: t\n")
    assert the_input(Invocation(endpoint="e", file=tmp_path / "inputs.yml")) == ("t", "mltable")
    assert the_input(Invocation(endpoint="e", sets=["inputs.d.path=y"])) == ("y", "")
    for bad in (Invocation(endpoint="e"), Invocation(endpoint="e", inputs='{"a": "1", "b": "2"}'),
                Invocation(endpoint="e", inputs="[1]"), Invocation(endpoint="e", sets=["x=1"])):
        with pytest.raises(LocalRunError):
            job_sets(bad, {}) if bad.sets == ["x=1"] else the_input(bad)


def test_endpoints_and_deployments_print_what_az_prints_and_the_first_is_the_default(
        repo, capsys):
    endpoint = azml(capsys, "batch-endpoint", "create", "-f", str(ENDPOINT), "-n", "fowl-b")
    assert {"name", "auth_mode", "id", "provisioning_state", "defaults", "resourceGroup",
            "scoring_uri"} <= set(endpoint)
    assert endpoint["id"].endswith("/batchEndpoints/fowl-b")
    assert endpoint["defaults"] == {"deployment_name": None}
    first = azml(capsys, "batch-deployment", "create", "-f", str(FLAKY), "-e", "fowl-b",
                 "--model", str(repo / "model"))
    assert (first["name"], first["endpoint_name"], first["type"]) == ("flaky", "fowl-b", "model")
    assert first["settings"]["mini_batch_size"] == 4
    assert first["id"].endswith("/batchEndpoints/fowl-b/deployments/flaky")
    azml(capsys, "batch-deployment", "create", "-f", str(FLAKY), "-e", "fowl-b", "-n", "two",
         "--model", str(repo / "model"), "--set", "settings.mini_batch_size=9")
    show = ["batch-endpoint", "show", "-n", "fowl-b", "--query", "defaults.deployment_name"]
    assert azml(capsys, *show) == "flaky"  # the first stays the default
    assert azml(capsys, "batch-deployment", "show", "-n", "two", "-e", "fowl-b", "--query",
                "settings.mini_batch_size") == 9
    azml(capsys, "batch-deployment", "update", "-f", str(FLAKY), "-e", "fowl-b", "-n", "two",
         "--model", str(repo / "model"), "--set-default")
    assert azml(capsys, *show) == "two"
    azml(capsys, "batch-endpoint", "update", "-n", "fowl-b", "--set",
         "defaults.deployment_name=flaky")
    assert azml(capsys, *show) == "flaky"
    azml(capsys, "batch-deployment", "delete", "-n", "flaky", "-e", "fowl-b", "--yes")
    assert azml(capsys, *show) is None
    assert azml(capsys, "batch-deployment", "list", "-e", "fowl-b", "--query", "[].name") == \
        ["two"]


def test_unknown_endpoints_and_deployments_are_az_s_exit_3_and_bad_input_exit_2(repo, capsys):
    assert run(["batch-endpoint", "show", "-n", "nope"]) == 3
    assert "not found" in capsys.readouterr().err
    azml(capsys, "batch-endpoint", "create", "-f", str(ENDPOINT), "-n", "fowl-b")
    assert run(["batch-deployment", "show", "-n", "x", "-e", "fowl-b"]) == 3
    assert run(["batch-endpoint", "invoke", "-n", "fowl-b", "--input", "."]) == 2
    assert "no default deployment" in capsys.readouterr().err
    assert run(["batch-deployment", "update", "-f", str(FLAKY), "-e", "fowl-b"]) == 3
    assert run(["batch-deployment", "create", "-f", str(FLAKY), "-e", "nope"]) == 3
    assert run(["batch-endpoint", "create", "-f", str(ENDPOINT), "-n", "1bad"]) == 2


def test_an_endpoint_is_created_from_its_name_alone_as_az_creates_it(repo, capsys):
    """`az ml batch-endpoint create --name N` and `az ml online-endpoint create --name N` (no
    --file: azure-ai-ml's defaults, aad_token and key auth); neither file nor name is exit 2."""
    made = azml(capsys, "batch-endpoint", "create", "--name", "loans")
    assert (made["name"], made["auth_mode"]) == ("loans", "aad_token")
    assert azml(capsys, "batch-endpoint", "show", "-n", "loans", "--query", "name") == "loans"
    online = azml(capsys, "online-endpoint", "create", "--name", "loans-online")
    assert (online["name"], online["auth_mode"]) == ("loans-online", "key")
    assert run(["batch-endpoint", "create"]) == 2
    assert "give --file <endpoint spec> or --name" in capsys.readouterr().err
    assert run(["online-endpoint", "create"]) == 2
    assert "give --file <endpoint spec> or --name" in capsys.readouterr().err


def test_an_online_endpoint_without_schema_is_recorded_as_the_kind_azure_loaded(repo, capsys):
    """$schema is optional in a spec (and absent with --name alone); the recorded endpoint,
    which its deployments start from, names the kind azure-ai-ml loaded it as (a deployment
    into it was refused: 'not an online endpoint spec')."""
    from mlops.api.endpoints import _record
    from mlops.specs import schema_kind

    (repo / "ep.yml").write_text("name: plain-ep\nauth_mode: key\n")
    azml(capsys, "online-endpoint", "create", "-f", str(repo / "ep.yml"))
    azml(capsys, "online-endpoint", "create", "--name", "named-ep")
    (repo / "k8s.yml").write_text("name: k8s-ep\ncompute: azureml:aks\n")
    azml(capsys, "online-endpoint", "create", "-f", str(repo / "k8s.yml"))
    kinds = [schema_kind(_record(name).spec["$schema"]) for name in
             ("plain-ep", "named-ep", "k8s-ep")]
    assert kinds == ["managedOnlineEndpoint", "managedOnlineEndpoint",
                     "kubernetesOnlineEndpoint"]


def test_a_batch_job_shows_as_az_ml_job_show_prints_a_batch_endpoint_s_job(repo, tmp_path):
    request = BatchRequest(deployment=FLAKY, input=str(tmp_path), endpoint="fowl-b",
                           job_name="batchjob-1")
    folder = workspace_root().parent / "runs" / "batchjob-1"
    run_ = identity(request, deployment="flaky", folder=folder, kind="uri_folder")
    write_record(run_, folder, status=JobStatus.STARTING, pid=2**22 + 12345)  # no such pid
    claim_name(Workspace(workspace_root()), run_.name, folder)
    view = job_view(JobRecord.at("batchjob-1", folder))
    assert (view["name"], view["type"], view["status"], view["experiment_name"]) == \
        ("batchjob-1", "pipeline", "Failed", "fowl-b")  # its runner gone: it failed
    assert view["inputs"]["input_data"] == {"type": "uri_folder", "path": str(tmp_path)}
    assert set(view["outputs"]) == {"score"} and view["jobs"] == {}
    assert view["properties"]["azureml.deploymentname"] == "flaky"
    assert {"id", "creation_context", "services", "resourceGroup"} <= set(view)
    assert JobRecord.at("batchjob-1", folder).run.kind == BATCH_JOB


def test_a_batch_run_folder_is_new_or_holds_only_the_start_its_invoke_recorded(repo, tmp_path):
    request = BatchRequest(deployment=FLAKY, input=".", run_dir=tmp_path / "run")
    assert batch_folder(request, "flaky") == tmp_path / "run"
    run_ = identity(request, deployment="flaky", folder=tmp_path / "run", kind="uri_folder")
    write_record(run_, tmp_path / "run", status=JobStatus.STARTING)
    assert batch_folder(request, "flaky") == tmp_path / "run"
    write_record(run_, tmp_path / "run", status=JobStatus.RUNNING)
    with pytest.raises(LocalRunError, match="not empty"):
        batch_folder(request, "flaky")
    new = batch_folder(BatchRequest(deployment=FLAKY, input="."), "flaky")
    assert new.parent == project().runs_dir.resolve() and not new.exists()


def test_a_completed_jobs_artifacts_are_its_mlflow_runs_artifact_folder(repo, monkeypatch):
    """What a completed job records as its default `artifacts` output: the artifact folder of
    the MLflow run its status.json names, beside the local store (none: no such folder)."""
    from mlops.runtime import run_artifacts as artifacts_folder
    from mlops.runtime.records import Status, TaskRecord

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_folder = repo / ".azml" / "runs" / "j"
    run_folder.mkdir(parents=True)
    assert artifacts_folder(run_folder) is None
    TaskRecord(status=Status.COMPLETED, mlflow_run_id="abc123").write(run_folder)
    assert artifacts_folder(run_folder) is None
    artifacts = repo / ".azml" / "mlruns" / "3" / "abc123" / "artifacts"
    artifacts.mkdir(parents=True)
    assert artifacts_folder(run_folder) == artifacts


def test_a_deployment_updates_without_its_file_as_az_s_generic_update(repo, capsys):
    """`az ml batch-deployment update -n D -e E --set k=v`: --set over what it was made of."""
    azml(capsys, "batch-endpoint", "create", "-f", str(ENDPOINT), "-n", "fowl-u")
    azml(capsys, "batch-deployment", "create", "-f", str(FLAKY), "-e", "fowl-u",
         "--model", str(repo / "model"), "--set", "settings.retry_settings.max_retries=2")
    updated = azml(capsys, "batch-deployment", "update", "-n", "flaky", "-e", "fowl-u",
                   "--set", "settings.mini_batch_size=7")
    assert (updated["settings"]["mini_batch_size"],
            updated["settings"]["retry_settings"]["max_retries"]) == (7, 2)
    assert run(["batch-deployment", "update", "-e", "fowl-u", "--set", "a=1"]) == 2
    assert "give --name and --endpoint-name" in capsys.readouterr().err
    assert run(["batch-deployment", "update", "-n", "nope", "-e", "fowl-u", "--set", "a=1"]) == 3
    with pytest.raises(SystemExit):  # create needs -f
        run(["batch-deployment", "create", "-n", "x", "-e", "fowl-u"])
    capsys.readouterr()


def test_a_deployments_list_jobs_are_the_endpoint_jobs_it_ran(repo, tmp_path, capsys):
    """`az ml batch-deployment list-jobs -n D -e E` (published invoke scripts)."""
    azml(capsys, "batch-endpoint", "create", "-f", str(ENDPOINT), "-n", "fowl-l")
    for deployment in ("flaky", "two"):
        azml(capsys, "batch-deployment", "create", "-f", str(FLAKY), "-e", "fowl-l", "-n",
             deployment, "--model", str(repo / "model"))
    for n, deployment in enumerate(("flaky", "two", "flaky")):
        request = BatchRequest(deployment=FLAKY, input=str(tmp_path), endpoint="fowl-l",
                               job_name=f"batchjob-l{n}")
        folder = workspace_root().parent / "runs" / f"batchjob-l{n}"
        run_ = identity(request, deployment=deployment, folder=folder, kind="uri_folder")
        write_record(run_, folder, status=JobStatus.STARTING, pid=2**22 + 12345)
        claim_name(Workspace(workspace_root()), run_.name, folder)
    listed = azml(capsys, "batch-deployment", "list-jobs", "-n", "flaky", "-e", "fowl-l",
                  "--query", "[].name")
    assert sorted(listed) == ["batchjob-l0", "batchjob-l2"]
    assert len(azml(capsys, "batch-endpoint", "list-jobs", "-n", "fowl-l")) == 3
    assert run(["batch-deployment", "list-jobs", "-n", "nope", "-e", "fowl-l"]) == 3
    capsys.readouterr()
