"""az ml <kind> create's flags as the ml extension passes them (ml_<kind>_create): over --file
(--name, --version, --set, ...) or, for an environment, without one (mlops/cli/assets.py,
mlops/api/drafts.py)."""

from __future__ import annotations

import json

import pytest

from mlops.cli import run
from mlops.environments.envfiles import dockerfile_in

SCHEMA = "$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json\n"


def shown(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_an_environment_is_made_from_flags_alone_as_az_makes_it(repo, capsys):
    """`az ml environment create --name e --image i --conda-file c` (published setup scripts):
    no spec; the conda file from the current folder."""
    (repo / "conda.yml").write_text("dependencies:\n  - python=3.11\n")
    assert run(["environment", "create", "--name", "e1", "--image", "python:3.11",
                "--conda-file", "conda.yml", "--tags", "team=cv", "solo"]) == 0
    made = shown(capsys)
    assert (made["name"], made["version"], made["image"]) == ("e1", "1", "python:3.11")
    assert made["conda_file"] == {"dependencies": ["python=3.11"]}
    assert made["tags"] == {"team": "cv", "solo": ""}


def test_an_environment_needs_an_image_or_a_build_and_not_both(repo, capsys):
    """azure-ai-ml's Environment.validate, which runs before anything is sent."""
    (repo / "ctx").mkdir()
    (repo / "ctx" / "Dockerfile").write_text("FROM python:3.11-slim\n")
    assert run(["environment", "create", "--name", "e2"]) == 2
    assert "Docker image or Dockerfile is required for environments" in capsys.readouterr().err
    (repo / "env.yml").write_text(SCHEMA + "name: e3\nimage: python:3.11\n")
    assert run(["environment", "create", "-f", "env.yml", "--build-context", "ctx"]) == 2
    assert "should be provided not both" in capsys.readouterr().err
    # --dockerfile-path's default, /Dockerfile, is the build context's own Dockerfile
    assert run(["environment", "create", "--name", "e4", "--build-context", "ctx"]) == 0
    assert shown(capsys)["build"]["dockerfile_path"] == "/Dockerfile"
    assert dockerfile_in(repo / "ctx", "/Dockerfile") == repo / "ctx" / "Dockerfile"


def test_flags_over_a_file_rename_and_reversion_it_after_set(repo, capsys):
    """--set first, then --name, --version, --description: the flags win where both set."""
    (repo / "env.yml").write_text(SCHEMA + "name: given\nversion: 2\nimage: python:3.11\n")
    assert run(["environment", "create", "-f", "env.yml", "--set", "description=from-set",
                "--set", "version=5", "--name", "renamed", "--version", "7"]) == 0
    made = shown(capsys)
    assert (made["name"], made["version"], made["description"]) == ("renamed", "7", "from-set")
    (repo / "model.bin").write_bytes(b"m")
    (repo / "model.yml").write_text("name: m\npath: model.bin\n")
    assert run(["model", "create", "-f", "model.yml", "-n", "other", "--set", "type=mlflow_model",
                "--set", "type=custom_model", "--query", "[name, type]", "-o", "tsv"]) == 0
    assert capsys.readouterr().out.split() == ["other", "custom_model"]


def test_a_model_from_name_and_path_takes_its_tags_and_stage(repo, capsys):
    (repo / "model.bin").write_bytes(b"m")
    assert run(["model", "create", "-n", "m", "-p", "model.bin", "--tags", "a=1",
                "--stage", "Production"]) == 0
    made = shown(capsys)
    assert made["tags"] == {"a": "1"} and made.get("stage") == "Production"


def test_a_deployments_name_and_set_go_over_its_spec_as_the_ml_extension_loads_it(
        repo, monkeypatch):
    """online-deployment create -f S -e E -n N --set k=v: --set, then --name, then
    --endpoint-name over the spec (ml_online_deployment_create's params_override)."""
    from mlops.api import endpoints

    started = []
    monkeypatch.setattr(endpoints.actions, "start", lambda serve: started.append(serve) or 1)
    (repo / "blue.yml").write_text("name: blue\nendpoint_name: other\n")
    assert run(["online-endpoint", "create", "-n", "ep1", "-o", "none"]) == 0
    assert run(["online-deployment", "create", "-f", "blue.yml", "-e", "ep1", "-n", "teal",
                "--set", "name=ignored", "--set", "instance_count=2"]) == 1  # (no server)
    assert started[0].sets == ("name=ignored", "instance_count=2", "name=teal",
                               "endpoint_name=ep1")


def test_a_data_assets_local_path_must_be_what_its_type_says(repo, capsys):
    """azure-ai-ml's _assert_local_path_matches_asset_type (and an MLTable's metadata read from
    its folder), before anything is uploaded; a URI is not checked."""
    (repo / "table").mkdir()
    (repo / "rows.csv").write_text("a\n1\n")
    for path, kind in (("table", "uri_file"), ("rows.csv", "uri_folder"), ("table", "mltable")):
        assert run(["data", "create", "-n", "d", "-p", path, "-t", kind]) == 2
        assert f"does not match asset type {kind}" in capsys.readouterr().err
    (repo / "table" / "MLTable").write_text("paths:\n  - file: ../rows.csv\n")
    assert run(["data", "create", "-n", "d", "-p", "table", "-t", "mltable", "-o", "none"]) == 0
    (repo / "data.yml").write_text("name: d2\ntype: uri_file\npath: table\n")
    assert run(["data", "create", "-f", "data.yml"]) == 2
    assert "data.yml: path: File path does not match asset type uri_file" in \
        capsys.readouterr().err


def test_a_folder_with_nothing_to_upload_is_refused_where_az_ml_uploads_it(repo, capsys):
    """azure-ai-ml's upload_directory raises EmptyDirectoryError for a folder with no file to
    upload (its .amlignore counted): a model's or data asset's local path, a job's code:."""
    from mlops.checks.validation import check
    from mlops.errors import LocalRunError
    from mlops.runtime.snapshot import code_files
    from mlops.specs import load_spec

    (repo / "empty").mkdir()
    assert run(["model", "create", "-n", "m", "-p", "empty"]) == 2
    assert "Directory" in capsys.readouterr().err
    (repo / "ignored").mkdir()
    (repo / "ignored" / ".amlignore").write_text("*\n")
    (repo / "ignored" / "x.bin").write_bytes(b"x")
    assert run(["data", "create", "-n", "d", "-p", "ignored"]) == 2
    assert "is empty. path or local_path must be a non-empty directory" in \
        capsys.readouterr().err
    with pytest.raises(LocalRunError, match="code: Directory .* is empty"):
        code_files(repo / "ignored")
    (repo / "job.yml").write_text("$schema: https://azuremlschemas.azureedge.net/latest/"
                                  "commandJob.schema.json\ncommand: echo hi\ncode: empty\n"
                                  "environment: azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu"
                                  "@latest\n")
    found = [str(f) for f in check(load_spec(repo / "job.yml")) if f.is_error]
    assert any("code 'empty' is an empty folder" in f for f in found)


@pytest.mark.parametrize(("path", "kind", "says"), [
    ("nothere", "uri_folder", "local path .*nothere does not exist"),
    ("empty", "uri_folder", "Directory .*empty is empty. path or local_path must be a non-empty"),
    ("{repo}/table", "uri_file", "There is no file on target path: .*table"),
    ("{repo}/rows.csv", "uri_folder", "There is no dir on target path: .*rows.csv"),
])
def test_a_local_input_az_ml_job_create_cannot_upload_is_refused_at_create(repo, path, kind,
                                                                           says):
    """JobOperations._resolve_job_input, before the job exists: an absolute path of the wrong
    shape, a folder with no file to upload (a relative path of the other shape is uploaded)."""
    from mlops.checks.prepare import prepare_job
    from mlops.errors import LocalRunError
    from mlops.runtime import AssetMap

    (repo / "empty").mkdir()
    (repo / "table").mkdir()
    (repo / "table" / "part.csv").write_text("a\n1\n")
    (repo / "rows.csv").write_text("a\n1\n")
    (repo / "job.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
        "command: echo ${{inputs.d}}\nenvironment: azureml:AzureML-sklearn-1.0-ubuntu20.04-py38"
        f"-cpu@latest\ninputs:\n  d:\n    type: {kind}\n    path: '{path.format(repo=repo)}'\n")
    with pytest.raises(LocalRunError, match=says):
        prepare_job(repo / "job.yml", [], [], AssetMap())
    prepare_job(repo / "job.yml", ["inputs.d.path=table", "inputs.d.type=uri_file"], [],
                AssetMap())  # relative: uploaded whatever its shape, as on Azure


def test_a_models_short_names_are_az_s_stage_and_lists_take_stage_and_max_results(
        repo, capsys):
    """model create -s is --stage (az's add_stage_param), -d its deployment template; model
    list --stage and -r/--max-results; archive -l latest archives the version it names."""
    (repo / "model.bin").write_bytes(b"m")
    assert run(["model", "create", "-n", "m", "-p", "model.bin", "-s", "Production",
                "-o", "none"]) == 0
    assert run(["model", "create", "-n", "m", "-p", "model.bin", "-s", "Staging",
                "-d", "azureml://registries/r/deploymenttemplates/t/versions/1",
                "-o", "none"]) == 0
    assert "not kept by the local workspace" in capsys.readouterr().err
    assert run(["model", "list", "-n", "m", "-s", "Staging", "--query", "[].version",
                "-o", "tsv"]) == 0
    assert capsys.readouterr().out.split() == ["2"]
    assert run(["model", "list", "-n", "m", "-r", "1", "-o", "tsv", "--query", "length(@)"]) == 0
    assert capsys.readouterr().out.split() == ["1"]
    assert run(["model", "archive", "-n", "m", "-l", "latest"]) == 0
    assert run(["model", "list", "-n", "m", "--query", "[].version", "-o", "tsv"]) == 0
    assert capsys.readouterr().out.split() == ["1"]


def test_data_takes_d_as_its_description_and_set_takes_many_pairs(repo, capsys):
    (repo / "rows.csv").write_text("a\n1\n")
    assert run(["data", "create", "-n", "d", "-v", "1", "-p", "rows.csv", "-t", "uri_file",
                "-d", "the rows", "--no-wait", "--skip-validation"]) == 0
    assert shown(capsys)["description"] == "the rows"
    (repo / "env.yml").write_text(SCHEMA + "name: e5\nimage: python:3.11\n")
    assert run(["environment", "create", "-f", "env.yml", "--set", "description=x",
                "tags.a=1", "--query", "[description, tags.a]", "-o", "tsv"]) == 0
    assert capsys.readouterr().out.split() == ["x", "1"]
