"""Any online or batch deployment spec serves locally as Azure serves it: the model its spec
names, laid out under AZUREML_MODEL_DIR as Azure mounts it, in the deployment's environment, and
MLflow models without code through Azure's no-code scoring."""

from __future__ import annotations

import json

import pytest

from mlops.endpoints import deployment, models
from mlops.endpoints.models import ModelSource, lay_out, model_source, name_version
from mlops.errors import LocalRunError
from mlops.project import Project
from mlops.specs import ROOT, load_spec

# ---- where the model comes from (no server) ----

@pytest.mark.parametrize("reference, name, version", [
    ("azureml:clf:3", "clf", "3"), ("azureml:clf@latest", "clf", "latest"),
    ("azureml://registries/shared/models/clf/versions/7", "clf", "7"),
    ("azureml://registries/shared/models/clf/labels/latest", "clf", "latest"),
    ("azureml://subscriptions/s/resourceGroups/g/workspaces/w/models/clf/versions/2", "clf",
     "2")])
def test_model_references_name_the_model_and_version(reference, name, version):
    assert name_version(reference) == (name, version)


def test_a_local_model_path_is_relative_to_the_spec_and_must_exist(tmp_path):
    (tmp_path / "model-1" / "model").mkdir(parents=True)
    source = model_source({"path": "model-1/model/"}, tmp_path, "d.yml")
    assert source.path == tmp_path / "model-1" / "model" and not source.mlflow
    with pytest.raises(LocalRunError, match="model.path gone does not exist"):
        model_source({"path": "gone"}, tmp_path, "d.yml")


def test_an_inline_model_without_a_name_is_azure_ml_s_anonymous_asset_named_by_its_hash(
        tmp_path):
    """azure-ai-ml names a deployment's unnamed inline model the sha256 of its upload hash,
    version 1, so AZUREML_MODEL_DIR is azureml-models/<hash>/1 (not the file's stem)."""
    from azure.ai.ml import load_online_deployment

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "clf.pkl").write_bytes(b"weights")
    spec = tmp_path / "d.yml"
    spec.write_text("name: blue\nendpoint_name: e\ninstance_type: Standard_F2s_v2\n"
                    "model:\n  path: model/clf.pkl\n")
    azure = load_online_deployment(spec).model
    source = model_source({"path": "model/clf.pkl"}, tmp_path, "d.yml")
    assert (source.name, source.version) == (azure.name, azure.version) != ("clf", "1")
    named = model_source({"path": "model", "name": "clf"}, tmp_path, "d.yml")
    assert (named.name, named.version) == ("clf", "1")


def test_registered_models_map_through_the_mapping_file_by_reference_or_name(tmp_path):
    (tmp_path / "m.pkl").write_bytes(b"x")
    assets = tmp_path / "local-paths.yml"
    assets.write_text(f"azureml:clf: {tmp_path / 'm.pkl'}\n"
                      f"azureml://registries/shared/models/other: {tmp_path}\n")
    for reference in ("azureml:clf:3", "azureml:clf@latest",
                      "azureml://registries/shared/models/clf/versions/1"):
        assert model_source(reference, tmp_path, "d.yml",
                            asset_file=assets).path == tmp_path / "m.pkl"
    other = model_source({"path": "azureml://registries/shared/models/other/versions/2"},
                         tmp_path, "d.yml", asset_file=assets)
    assert (other.path, other.name, other.version) == (tmp_path, "other", "2")


def test_a_mapped_model_named_by_a_label_is_laid_out_under_a_version_never_the_label(
        tmp_path):
    """az ml resolves name@label (and /labels/<label>) to a version before deploying, so
    AZUREML_MODEL_DIR ends in a version; a stand-in's is the first one, 1."""
    (tmp_path / "m.pkl").write_bytes(b"x")
    assets = tmp_path / "local-paths.yml"
    assets.write_text(f"azureml:clf: {tmp_path / 'm.pkl'}\n"
                      f"azureml://registries/shared/models/other: {tmp_path}\n")
    versions = {reference: model_source(reference, tmp_path, "d.yml", asset_file=assets).version
                for reference in ("azureml:clf@latest", "azureml:clf@production", "azureml:clf:3",
                                  "azureml://registries/shared/models/other/labels/latest",
                                  "azureml://registries/shared/models/other/versions/2")}
    assert list(versions.values()) == ["1", "1", "3", "1", "2"]


def test_an_unmapped_model_is_an_error_that_names_the_line_to_add(tmp_path):
    assets = tmp_path / "local-paths.yml"
    assets.write_text("{}\n")
    with pytest.raises(LocalRunError, match=r"azureml:stranger: <local file or folder>' to"):
        model_source("azureml:stranger@latest", tmp_path, "d.yml", asset_file=assets)


def test_an_unknown_model_is_said_in_the_words_of_azml_not_of_this_repositorys_makefile(
        tmp_path):
    """Any user's repository: the fixes are azml's (register, map, --model), never a make
    variable of this template (found deploying AlienCommunication/mlops-azure-azureml's blue)."""
    assets = tmp_path / "local-paths.yml"
    assets.write_text("{}\n")
    with pytest.raises(LocalRunError) as refused:
        model_source("azureml:used-car:1", tmp_path, "d.yml", asset_file=assets)
    message = str(refused.value)
    assert "azml model create -f <its YAML>" in message and "--model <" in message
    assert "MODEL_DIR" not in message
    with pytest.raises(LocalRunError, match="--model /no/such: no such file or folder"):
        model_source("azureml:used-car:1", tmp_path, "d.yml", override="/no/such")


def test_this_projects_own_model_is_served_only_once_registered(tmp_path, monkeypatch):
    """A trained model the registry never took (the pipeline's gate refused it, or nobody
    registered it) is never served by name; a spec with no model serves the newest trained."""
    trained = tmp_path / "runs" / "train-1" / "outputs" / "model"
    trained.mkdir(parents=True)
    (trained / "model.pt").write_bytes(b"x")
    mine = Project(root=tmp_path, state=tmp_path, own_models=("mine",), runs_dir=tmp_path / "runs")
    monkeypatch.setattr(models, "project", lambda: mine)
    assets = tmp_path / "local-paths.yml"
    assets.write_text("{}\n")
    with pytest.raises(LocalRunError, match="the local workspace holds no version of mine"):
        model_source("azureml:mine@latest", tmp_path, "d.yml", asset_file=assets)
    assert model_source(None, tmp_path, "d.yml").path == trained  # a spec with no model
    override = model_source("azureml:mine@latest", tmp_path, "d.yml", override=str(tmp_path))
    assert (override.path, override.origin) == (tmp_path, "MODEL_DIR")


def test_azure_model_layout_folder_under_its_name_file_directly_in_and_user_files_kept(
        tmp_path):
    folder = tmp_path / "src" / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "weights.bin").write_bytes(b"w")
    (folder / "MLmodel").write_text("flavors: {}\n")
    layout = lay_out(ModelSource(path=folder, name="clf", version="3", origin="test", mlflow=True),
                     tmp_path / "app")
    assert layout.root == tmp_path / "app" / "azureml-models" / "clf" / "3"
    assert layout.env() == {"AZUREML_MODEL_DIR": str(layout.root), "MLFLOW_MODEL_FOLDER": "model"}
    copy = layout.root / "model" / "sub" / "weights.bin"
    assert not copy.is_symlink() and copy.read_bytes() == b"w"  # MLflow refuses outside links
    single = lay_out(ModelSource(path=folder / "sub" / "weights.bin", name="w", version="1",
                                 origin="t"), tmp_path / "a")
    assert sorted(p.name for p in single.root.iterdir()) == ["weights.bin"]
    again = lay_out(ModelSource(path=folder, name="clf", version="3", origin="test", mlflow=True),
                    tmp_path / "app")
    assert again.root == layout.root and (folder / "sub" / "weights.bin").read_bytes() == b"w"
    assert str(folder) in layout.read_only()


# ---- the kind of a deployment and what it runs ----

def test_a_missing_code_folder_or_model_path_is_said_for_any_repository(tmp_path):
    """A user's deployment whose code or model path is missing hears what to change in its own
    spec, not this repository's layout (../src) or its Makefile (make train-local)."""
    from mlops.checks import lint_assets
    spec = tmp_path / "deploy" / "deployment.yml"
    spec.parent.mkdir()
    spec.write_text("$schema: https://azuremlschemas.azureedge.net/latest/managedOnline"
                    "Deployment.schema.json\nname: blue\nendpoint_name: ep\n"
                    "model: {path: ../../elsewhere/model/}\n"
                    "code_configuration: {code: ../../elsewhere/scoring/, scoring_script: s.py}\n")
    found = lint_assets.check_deployment(load_spec(spec), set())
    said = {f.key: f"{f.problem} {f.fix}" for f in found}
    assert "../../elsewhere/scoring/" in said["code_configuration.code"]
    assert "../../elsewhere/model/" in said["model.path"]
    assert not any("../src" in text or "make " in text for text in said.values())


def test_deployments_are_typed_by_their_type_as_azure_ai_ml_does(tmp_path):
    spec = tmp_path / "d.yml"
    for data, role, kind in (({"type": "kubernetes"}, "online-deployment",
                              "kubernetesOnlineDeployment"),
                             ({}, "online-deployment", "managedOnlineDeployment"),
                             ({"type": "managed"}, "online-deployment",
                              "managedOnlineDeployment"),
                             ({}, "batch-deployment", "modelBatchDeployment")):
        spec.write_text(json.dumps({"name": "x", **data}))
        assert load_spec(spec, role).kind == kind


def test_an_online_spec_is_not_a_batch_deployment_and_code_is_needed_unless_mlflow(tmp_path):
    with pytest.raises(LocalRunError, match="managedOnlineDeployment, not a batch deployment"):
        deployment.load(ROOT / "endpoints" / "blue.yml", "batch-deployment")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "m.pkl").write_bytes(b"x")
    spec = tmp_path / "d.yml"
    spec.write_text("name: plain\nendpoint_name: e\nmodel:\n  path: model\n"
                    "instance_type: Standard_DS3_v2\ninstance_count: 1\n")
    with pytest.raises(LocalRunError, match="Azure deploys only MLflow models without code"):
        deployment.load(spec, "online-deployment")


@pytest.mark.parametrize(("settings", "level"), [({}, "info"), ({"logging_level": "debug"},
                                                                  "debug")])
def test_a_batch_scoring_script_is_given_its_logging_level_on_the_command_line(
        tmp_path, settings, level):
    """Azure's batch driver passes --logging_level, which its docs read with argparse."""
    from types import SimpleNamespace

    from mlops.endpoints.batch_deployment import scoring_task

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "m.pkl").write_bytes(b"x")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text("def init(): pass\ndef run(b): return b\n")
    (tmp_path / "d.yml").write_text(
        "name: plain\nendpoint_name: e\ntype: model\nmodel:\n  path: model\n"
        "code_configuration:\n  code: src\n  scoring_script: score.py\n"
        "environment:\n  image: python:3.11\ncompute: azureml:cpu\n")
    spec = deployment.load(tmp_path / "d.yml", "batch-deployment")
    layout = SimpleNamespace(env=dict, read_only=list)
    task = scoring_task(spec, tmp_path, layout=layout, settings=settings, max_procs=1)
    assert task.command.endswith(f" -- --logging_level {level}")
    assert task.env_vars["LOGGING_LEVEL"] == level


# ---- the workspace names a deployment makes, in the order az ml resolves them ----

DEPLOYMENT = """\
$schema: https://azuremlschemas.azureedge.net/latest/{schema}.schema.json
name: blue
endpoint_name: their-endpoint
model: azureml:their-model:1
code_configuration: {{code: src, scoring_script: score.py}}
environment: {environment}
{extra}"""
ONLINE = ("managedOnlineDeployment", "online-deployment",
          "instance_type: Standard_DS3_v2\ninstance_count: 1\n")
BATCH = ("batchDeployment", "batch-deployment", "compute: azureml:cpu-cluster\n")


def _deployment(repo, kind, environment: str):
    schema, role, extra = kind
    (repo / "src").mkdir(exist_ok=True)
    (repo / "src" / "score.py").write_text("def init():\n    pass\n\ndef run(data):\n"
                                           "    return data\n")
    (repo / "deployment.yml").write_text(DEPLOYMENT.format(schema=schema, environment=environment,
                                                           extra=extra))
    return repo / "deployment.yml", role


@pytest.mark.parametrize("kind", [ONLINE, BATCH], ids=["online", "batch"])
def test_an_unknown_workspace_environment_is_refused_before_the_model_not_run_in_venv(
        repo, kind):
    """azure-ai-ml's upload_dependencies resolves code, then environment, then model: a
    deployment naming an environment its workspace lacks is refused for that environment (its
    model unknown too), as az ml <kind> create refuses it, not served from .venv."""
    spec, role = _deployment(repo, kind, "azureml:their-env:2")
    with pytest.raises(LocalRunError) as refused:
        deployment.load(spec, role)
    said = str(refused.value)
    assert "environment azureml:their-env:2 has no local stand-in" in said
    assert f"az ml {role} create submits it as the workspace's environments/their-env/" \
           "versions/2, and Azure refuses the deployment" in said
    assert "their-model" not in said


@pytest.mark.parametrize("kind", [ONLINE, BATCH], ids=["online", "batch"])
def test_a_known_environment_passes_and_the_model_is_resolved_next(repo, kind):
    (repo / "environments").mkdir()
    (repo / "environments" / "env.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json\n"
        "name: their-env\nversion: 2\nimage: mcr.microsoft.com/azureml/"
        "openmpi4.1.0-ubuntu22.04:latest\n")
    for environment in ("azureml:their-env:2",
                        "azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu:1"):
        spec, role = _deployment(repo, kind, environment)
        with pytest.raises(LocalRunError, match="model azureml:their-model:1 has no local "
                                                "stand-in"):
            deployment.load(spec, role)
