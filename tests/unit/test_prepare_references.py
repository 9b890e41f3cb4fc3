"""az ml job create resolves the workspace names a job makes when it is submitted, and so do
`azml job create` and `make local`, before anything runs (mlops/checks/references.py): an unknown
one is refused with nothing left behind; known ones, and what Azure passes on, are accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops.api import jobs
from mlops.errors import LocalRunError
from mlops.orchestrators.jobs import JobRequest, run_local
from mlops.project import forget, project
from mlops.workspace.records import AssetKind
from mlops.workspace.store import Draft, Workspace, workspace_root

COMMAND = """\
$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
command: python train.py --data ${{{{inputs.data}}}}
code: src
environment: {environment}
compute: azureml:cpu-cluster
inputs:
  data:
    type: uri_folder
    path: {path}
"""
PIPELINE = """\
$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json
type: pipeline
settings:
  default_compute: azureml:cpu-cluster
jobs:
  train:
    component: {component}
    inputs:
      data:
        type: uri_folder
        path: {path}
"""
SWEEP = """\
$schema: https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json
type: sweep
compute: azureml:cpu-cluster
trial:
  code: src
  command: python train.py --data ${{{{inputs.data}}}} --lr ${{{{search_space.lr}}}}
  environment: {environment}
inputs:
  data:
    type: uri_folder
    path: {path}
sampling_algorithm: random
search_space:
  lr:
    type: choice
    values: [0.1, 0.01]
objective:
  goal: maximize
  primary_metric: accuracy
limits:
  max_total_trials: 2
"""
COMPONENT = """\
$schema: https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json
name: train
type: command
inputs:
  data:
    type: uri_folder
command: python train.py --data ${{inputs.data}}
code: src
environment: {environment}
"""
IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest"
INLINE_ENV = "{image: " + IMAGE + "}"


@pytest.fixture
def started(repo, monkeypatch) -> list[Path]:
    """The user's repository with its code and data; the run folders create would start."""
    (repo / "src").mkdir()
    (repo / "src" / "train.py").write_text("print('trained')\n")
    (repo / "data").mkdir()
    (repo / "data" / "a.csv").write_text("x\n1\n")
    folders: list[Path] = []
    monkeypatch.setattr(jobs, "start", lambda run, folder, argv: folders.append(folder))
    return folders


def spec(repo: Path, text: str, name: str = "job.yml") -> Path:
    (repo / name).write_text(text)
    return repo / name


def create(path: Path):
    return jobs.create(jobs.Submission(spec=path))


def nothing_left() -> None:
    """No run folder, no job name claimed."""
    runs = project().runs_dir
    assert not runs.exists() or not list(runs.iterdir())
    assert not list(workspace_root().glob("jobs/*"))


def test_an_unknown_data_asset_is_refused_at_create_as_azure_refuses_it(repo, started):
    path = spec(repo, COMMAND.format(environment=INLINE_ENV, path="azureml:fowl@latest"))
    with pytest.raises(LocalRunError) as refused:
        create(path)
    message = str(refused.value)
    assert f"{path}: inputs.data: azureml:fowl@latest has no local stand-in" in message
    assert "'Asset fowl does not exist in workspace <workspace>.'" in message
    assert "azml data create -f" in message and "'azureml:fowl: <local path>'" in message
    assert "--set inputs.data.path=" in message
    assert started == []
    nothing_left()
    with pytest.raises(LocalRunError, match=r"versions/3, and Azure refuses the job"):
        create(spec(repo, COMMAND.format(environment=INLINE_ENV, path="azureml:fowl:3")))


def test_make_local_refuses_it_before_a_run_folder_or_a_name(repo, started):
    path = spec(repo, COMMAND.format(environment=INLINE_ENV, path="azureml:fowl:1"))
    with pytest.raises(LocalRunError, match="azureml:fowl:1 has no local stand-in"):
        run_local(JobRequest(spec=str(path)))
    nothing_left()


def test_a_registered_or_mapped_data_asset_is_accepted(repo, started):
    Workspace(workspace_root()).create(Draft(kind=AssetKind.DATA, name="fowl",
                                             source=repo / "data", type="uri_folder"))
    create(spec(repo, COMMAND.format(environment=INLINE_ENV, path="azureml:fowl@latest")))
    with pytest.raises(LocalRunError, match="has no version 2 in the local workspace"):
        create(spec(repo, COMMAND.format(environment=INLINE_ENV, path="azureml:fowl:2")))
    (repo / "local-paths.yml").write_text("azureml:birds: data\n")
    (repo / "azml.toml").write_text('asset_map = "local-paths.yml"\n')
    forget()
    create(spec(repo, COMMAND.format(environment=INLINE_ENV, path="azureml:birds:7")))
    assert len(started) == 2


@pytest.mark.parametrize("path", [
    "azureml://datastores/workspaceblobstore/paths/fowl/",
    "azureml://jobs/an-earlier-job/outputs/model",
    "azureml://registries/azureml/data/fowl/versions/1",
    "https://example.com/fowl.zip"])
def test_what_azure_passes_on_unresolved_is_left_to_the_run(repo, started, path):
    create(spec(repo, COMMAND.format(environment=INLINE_ENV, path=path)))
    assert len(started) == 1


def test_a_pipeline_nodes_unknown_component_and_node_input_are_refused(repo, started):
    with pytest.raises(LocalRunError) as refused:
        create(spec(repo, PIPELINE.format(component="azureml:train:4", path="data")))
    message = str(refused.value)
    assert "jobs.train.component: azureml:train:4 has no local stand-in" in message
    assert "components/train/versions/4" in message and "azml component create -f" in message
    spec(repo, COMPONENT.format(environment=INLINE_ENV), "train.yml")
    with pytest.raises(LocalRunError, match=r"jobs\.train\.inputs\.data: azureml:fowl@latest "
                                            r"has no local stand-in.*inputs\.data\.path="):
        create(spec(repo, PIPELINE.format(component="train.yml", path="azureml:fowl@latest")))
    nothing_left()
    create(spec(repo, PIPELINE.format(component="train.yml", path="data")))
    assert len(started) == 1


def test_an_unknown_environment_is_refused_and_known_ones_are_accepted(repo, started):
    with pytest.raises(LocalRunError) as refused:
        create(spec(repo, COMMAND.format(environment="azureml:train-env:2", path="data")))
    message = str(refused.value)
    assert f"{repo / 'job.yml'}: environment: environment azureml:train-env:2 has no local " \
           "stand-in" in message
    assert "environments/train-env/versions/2" in message
    assert "azml environment create -f" in message and "'azureml:train-env: [" in message
    spec(repo, COMPONENT.format(environment="azureml:train-env@latest"), "train.yml")
    with pytest.raises(LocalRunError, match=r"jobs\.train\.component\.environment: environment "
                                            r"azureml:train-env@latest has no local stand-in"):
        create(spec(repo, PIPELINE.format(component="train.yml", path="data")))
    nothing_left()
    curated = "azureml:AzureML-sklearn-1.5@latest"
    create(spec(repo, COMMAND.format(environment=curated, path="data")))
    (repo / "train-env.yml").write_text(f"name: train-env\nversion: '2'\nimage: {IMAGE}\n")
    create(spec(repo, COMMAND.format(environment="azureml:train-env:2", path="data")))
    assert len(started) == 2


def test_a_sweeps_inputs_and_its_trials_environment_are_resolved(repo, started):
    with pytest.raises(LocalRunError, match=r": inputs\.data: azureml:fowl:1 has no local"):
        create(spec(repo, SWEEP.format(environment=INLINE_ENV, path="azureml:fowl:1")))
    with pytest.raises(LocalRunError, match=r": trial\.environment: environment "
                                            r"azureml:train-env@latest has no local stand-in"):
        create(spec(repo, SWEEP.format(environment="azureml:train-env@latest", path="data")))
    nothing_left()
    create(spec(repo, SWEEP.format(environment=INLINE_ENV, path="data")))
    assert len(started) == 1


def test_a_name_without_a_version_or_label_is_refused_even_where_the_workspace_holds_it(
        repo, started):
    """azure-ai-ml turns each short name into an asset id and needs its version (get_asset_arm_id:
    'Version must be provided'); a name alone finding the local workspace's latest is not what
    Azure does. Its job schemas strip `azureml:` from an environment and a component first."""
    workspace = Workspace(workspace_root())
    workspace.create(Draft(kind=AssetKind.DATA, name="fowl", source=repo / "data",
                           type="uri_folder"))
    (repo / "train-env.yml").write_text(f"name: train-env\nversion: '2'\nimage: {IMAGE}\n")
    refused = {
        COMMAND.format(environment=INLINE_ENV, path="azureml:fowl"):
            "inputs.data: az ml job create refuses azureml:fowl: 'Failed to extract version "
            "when parsing asset azureml:fowl of type data as arm id. Version must be provided.'",
        COMMAND.format(environment="azureml:train-env", path="azureml:fowl"):  # its order
            "environment: az ml job create refuses azureml:train-env: 'Failed to extract "
            "version when parsing asset train-env of type environments as arm id.",
        COMMAND.format(environment=INLINE_ENV, path="azureml:fowl").replace(
            "type: uri_folder", "type: mlflow_model"): "asset azureml:fowl of type models as",
        PIPELINE.format(component="azureml:train", path="data"):
            "jobs.train.component: az ml job create refuses azureml:train: 'Failed to extract "
            "version when parsing asset train of type components as arm id.",
    }
    for text, message in refused.items():
        with pytest.raises(LocalRunError) as caught:
            create(spec(repo, text))
        assert message in str(caught.value)
        assert "Name a version (azureml:" in str(caught.value)
    nothing_left()
    create(spec(repo, COMMAND.format(environment="azureml:AzureML-sklearn-1.5", path="data")))
    create(spec(repo, COMMAND.format(environment="azureml:train-env:2",
                                     path="azureml:fowl@latest")))
    assert len(started) == 2
