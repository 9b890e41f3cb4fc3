"""Pipeline component batch deployments (`type: pipeline`), without processes: the spec as
azure-ai-ml loads it and what it refuses, an invoke's inputs and outputs as az ml sends them,
the pipeline job an invoke runs, a pipeline job's `component:` as its jobs, and a registered
pipeline component that keeps its nodes' files (mlops/endpoints/pipeline_deployment.py,
mlops/orchestrators/component_job.py, mlops/api/drafts.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from mlops.api.batch_jobs import Invocation, named_inputs, named_outputs
from mlops.cli import run
from mlops.endpoints import pipeline_deployment as pipeline
from mlops.errors import LocalRunError
from mlops.orchestrators.component_job import pipeline_body
from mlops.project import project
from mlops.runtime import AssetMap

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "pipeline_deployment"
SCHEMA = "https://azuremlschemas.azureedge.net/latest/pipelineComponentBatchDeployment.schema.json"


@pytest.fixture
def fixture(repo) -> Path:
    """The fixture's folder beside the hello fixtures (its steps' conda file), in a repo."""
    shutil.copytree(FIXTURE, repo / "pipeline_deployment")
    shutil.copytree(ROOT / "tests" / "fixtures" / "hello", repo / "hello")
    return repo / "pipeline_deployment"


def deployment_file(folder: Path, **keys) -> Path:
    path = folder / "d.yml"
    path.write_text(yaml.safe_dump({"$schema": SCHEMA, "name": "d", "endpoint_name": "e",
                                    "type": "pipeline", **keys}))
    return path


def test_a_component_file_is_taken_by_its_absolute_path_with_the_settings(fixture):
    made = pipeline.load_pipeline_deployment(fixture / "deployment.yml")
    assert made.component == str((fixture / "pipeline.yml").resolve()) and made.job is None
    assert made.settings == {"default_compute": "cpu-cluster",
                             "continue_on_step_failure": False}
    again = pipeline.load_pipeline_deployment(fixture / "deployment.yml",
                                              ["settings.default_datastore=blobs"])
    assert pipeline.job_settings(again.settings) == {
        "default_compute": "azureml:cpu-cluster", "continue_on_step_failure": False,
        "default_datastore": "azureml:blobs"}
    assert pipeline.job_settings({"default_compute": "serverless"}) == \
        {"default_compute": "serverless"}


@pytest.mark.parametrize("keys, refusal", [
    ({"component": {"type": "pipeline", "jobs": {}}}, "Not supporting non file for component"),
    ({"component": "azureml:nowhere@latest"}, "nowhere"),
    ({"component": "missing.yml"}, "missing.yml"),
    ({}, "names its component: (a pipeline component file or azureml:<name>:<version>) or "
         "job_definition:"),
    ({"job_definition": "azureml:no-such-job"}, "job 'no-such-job' was not found"),
    ({"job_definition": {"type": "pipeline", "component": "pipeline.yml", "name": "j"}},
     "makes no component of"),
])
def test_what_azure_refuses_is_refused_with_its_reason(fixture, keys, refusal):
    with pytest.raises(LocalRunError) as err:
        pipeline.load_pipeline_deployment(deployment_file(fixture, **keys))
    assert refusal in str(err.value)


def test_an_invokes_inputs_and_outputs_are_what_az_ml_sends(fixture, monkeypatch):
    monkeypatch.chdir(fixture)
    invocation = Invocation(endpoint="e", file=fixture / "inputs.yml",
                            sets=["inputs.lines.path=more", "outputs.shouted.mode=rw_mount"])
    inputs = pipeline.invoke_inputs(named_inputs(invocation), Path.cwd())
    assert inputs == {"lines": {"type": "uri_folder", "path": str(fixture / "more")},
                      "suffix": "?"}
    assert pipeline.invoke_outputs(named_outputs(invocation)) == \
        {"shouted": {"type": "uri_folder", "mode": "rw_mount"}}
    given = {"m": {"type": "custom_model", "path": "azureml:m:1", "mode": "download"},
             "f": {"type": "uri_file", "path": "x.csv", "mode": "download"},
             "n": {"type": "integer"}, "bare": 3}
    assert pipeline.invoke_inputs(given, Path("/w")) == {
        "m": {"type": "custom_model", "path": "azureml:m:1", "mode": "download"},
        "f": {"type": "uri_file", "path": "/w/x.csv"}, "bare": 3}  # a literal of no value: none
    for bad, says in (({"x": {"type": "tabular", "path": "p"}}, "type 'tabular'"),
                      ({"x": {"type": "uri_folder"}}, "give its path")):
        with pytest.raises(LocalRunError, match=says):
            pipeline.invoke_inputs(bad, Path("/w"))
    with pytest.raises(LocalRunError, match="type 'string'"):
        pipeline.invoke_outputs({"o": {"type": "string"}})


def test_an_invoke_runs_the_component_as_a_pipeline_job_in_the_endpoints_experiment(fixture):
    made = pipeline.load_pipeline_deployment(fixture / "deployment.yml")
    request = pipeline.JobRequest(name="batchjob-1", endpoint="shout-batch",
                                  inputs={"suffix": "?"}, outputs={})
    job = pipeline.job_spec(made, request)
    assert (job["type"], job["name"], job["experiment_name"], job["component"]) == \
        ("pipeline", "batchjob-1", "shout-batch", made.component)
    assert job["settings"]["default_compute"] == "azureml:cpu-cluster"
    assert job["properties"] == {"azureml.batchrun": "true",
                                 "azureml.endpointname": "shout-batch",
                                 "azureml.deploymentname": "shout-pipeline"}
    body = pipeline_body(job, fixture / "job.yml", AssetMap(None))
    assert list(body.jobs) == ["gather", "shout"] and body.base == fixture
    # the component's default under the invoke's value; its output typed as it declares it
    assert body.inputs == {"suffix": "?"}
    assert body.outputs == {"shouted": {"type": "uri_folder", "mode": "upload"}}


def test_a_pipeline_jobs_component_gives_its_inputs_defaults_and_outputs_types(fixture):
    job = {"type": "pipeline", "component": "pipeline.yml",
           "inputs": {"lines": "data", "extra": 1}, "outputs": {"shouted": {"mode": "upload"}}}
    body = pipeline_body(job, fixture / "job.yml", AssetMap(None))
    assert body.inputs == {"lines": {"type": "uri_folder", "path": "data"}, "suffix": "!",
                           "extra": 1}
    assert body.outputs == {"shouted": {"type": "uri_folder", "mode": "upload"}}
    with pytest.raises(LocalRunError, match="is not a pipeline component"):
        pipeline_body({"component": "gather.yml"}, fixture / "job.yml", AssetMap(None))
    own = pipeline_body({"jobs": {"a": {}}, "inputs": {"x": 1}}, fixture / "j.yml",
                        AssetMap(None))
    assert (own.jobs, own.inputs, own.base) == ({"a": {}}, {"x": 1}, fixture)


def test_a_job_definitions_paths_are_made_absolute_from_its_spec(tmp_path):
    spec = {"jobs": {"a": {"component": "c.yml", "inputs": {"d": {"path": "data"},
                                                            "r": {"path": "azureml:r:1"},
                                                            "p": {"path": "${{parent.inputs.x}}"}},
                           "outputs": {"o": {"path": "azureml://datastores/x/paths/y"}}},
                     "b": {"code": "src", "environment": {"conda_file": "env.yml",
                                                          "build": {"path": "ctx"}}}},
            "inputs": {"x": {"path": "file:in"}}, "description": "data"}
    got = pipeline.rebased(spec, tmp_path)
    assert got["jobs"]["a"]["component"] == str(tmp_path / "c.yml")
    assert got["jobs"]["a"]["inputs"] == {"d": {"path": str(tmp_path / "data")},
                                          "r": {"path": "azureml:r:1"},
                                          "p": {"path": "${{parent.inputs.x}}"}}
    assert got["jobs"]["a"]["outputs"] == spec["jobs"]["a"]["outputs"]
    assert got["jobs"]["b"] == {"code": str(tmp_path / "src"), "environment": {
        "conda_file": str(tmp_path / "env.yml"), "build": {"path": str(tmp_path / "ctx")}}}
    assert (got["inputs"]["x"]["path"], got["description"]) == (str(tmp_path / "in"), "data")


def test_a_pipeline_deployment_is_created_shown_and_refused_a_model(fixture, capsys):
    assert run(["batch-endpoint", "create", "-f", str(fixture / "endpoint.yml")]) == 0
    capsys.readouterr()
    assert run(["batch-deployment", "create", "-f", str(fixture / "deployment.yml"),
                "--set-default"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["name"], shown["type"], shown["endpoint_name"]) == \
        ("shout-pipeline", "pipeline", "shout-batch")
    assert shown["settings"]["default_compute"] == "cpu-cluster"
    assert run(["batch-deployment", "create", "-f", str(fixture / "deployment.yml"),
                "--model", str(fixture)]) == 2
    assert "has no model" in capsys.readouterr().err


def test_a_registered_pipeline_component_keeps_its_nodes_components_and_code(fixture, capsys):
    """az ml component create of a pipeline component registers each node's component with
    it: the registered copy runs from the workspace, its source folder gone."""
    assert run(["component", "create", "-f", str(fixture / "pipeline.yml")]) == 0
    capsys.readouterr()
    held = fixture.parent / "held"
    shutil.move(fixture, held)  # the source folder is no more
    job = {"type": "pipeline", "component": "azureml:shout_pipeline@latest"}
    body = pipeline_body(job, held / "job.yml", AssetMap(None))
    gather = body.jobs["gather"]["component"]
    assert gather == "gather-spec.yml"
    registered = yaml.safe_load((body.base / gather).read_text())
    assert (body.base / registered["code"] / "steps.py").is_file()
    assert (body.base / registered["environment"]["conda_file"]).is_file()


def test_a_pipeline_jobs_component_is_resolved_before_it_runs_its_inputs_bound_inside(
        fixture, capsys):
    """az ml job create resolves the component a pipeline job names (a name nothing here knows
    is refused before anything runs); the job's inputs are bound inside the component, so no
    'not used by any step' warning."""
    from mlops.checks.prepare import prepare_job

    job = fixture / "job.yml"
    job.write_text(yaml.safe_dump({
        "$schema": "https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json",
        "type": "pipeline", "component": "azureml:nowhere@latest"}))
    with pytest.raises(LocalRunError, match="nowhere"):
        prepare_job(job, [], [], AssetMap(None))
    job.write_text(yaml.safe_dump({
        "$schema": "https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json",
        "type": "pipeline", "component": "pipeline.yml",
        "settings": {"default_compute": "azureml:cpu-cluster"},
        "inputs": {"lines": {"type": "uri_folder", "path": "data"}}}))
    capsys.readouterr()
    assert prepare_job(job, [], [], AssetMap(None)).spec.kind == "pipelineJob"
    assert "not used by any step" not in capsys.readouterr().err


def test_a_node_output_mapping_whose_path_binds_a_pipeline_output_writes_it(tmp_path):
    """`outputs: {scores: {mode: upload, path: ${{parent.outputs.scores}}}}` (Azure's published
    pipeline components write it so) is the pipeline's output, as the bare binding is."""
    from mlops.orchestrators.graph import Node, Scope, node_outputs
    from mlops.runtime import OutputSpec

    target = tmp_path / "outputs" / "scores"
    scope = Scope(inputs={}, outputs={"scores": OutputSpec(type="uri_folder", target=target)},
                  folder=tmp_path, run_id="r", experiment="e", assets=AssetMap(None),
                  base=tmp_path)
    for binding, mode in (({"mode": "upload", "path": "${{parent.outputs.scores}}"}, "upload"),
                          ({"type": "uri_folder", "path": "${{parent.outputs.scores}}"}, None),
                          ("${{parent.outputs.scores}}", None)):
        node = Node(name="score", kind="command", raw={"outputs": {"scores": binding}},
                    definition={"outputs": {"scores": {"type": "uri_folder"}}}, base=tmp_path,
                    where="p.yml: jobs.score")
        made = node_outputs(node, scope)["scores"]
        assert (made.target, made.mode) == (target, mode)
    with pytest.raises(LocalRunError, match="the pipeline has no output nope"):
        node_outputs(Node(name="s", kind="command", raw={"outputs": {"scores": {
            "path": "${{parent.outputs.nope}}"}}}, definition={}, base=tmp_path, where="w"),
            scope)


def test_an_invoke_whose_job_is_refused_names_the_invoke_not_its_removed_file(fixture, capsys,
                                                                              monkeypatch):
    """The job an invoke makes is written in its run folder, checked, and the folder removed
    when refused: the error named that file (gone) and its line."""
    monkeypatch.chdir(fixture)
    for argv in (["batch-endpoint", "create", "-f", "endpoint.yml"],
                 ["batch-deployment", "create", "-f", "deployment.yml", "--set-default"]):
        assert run(argv) == 0
    capsys.readouterr()
    assert run(["batch-endpoint", "invoke", "-n", "shout-batch", "--set",
                "inputs.lines.path=/nonexistent/lines"]) == 2
    err = capsys.readouterr().err
    assert "batch-endpoint invoke -n shout-batch (the pipeline job its inputs make)" in err
    assert "/nonexistent/lines" in err and "batch-job.yml" not in err
    assert not list(project().runs_dir.glob("batchjob-*"))  # nothing left behind


def test_a_component_name_the_workspace_lacks_is_refused_as_batch_deployment_create_does(
        fixture):
    """az ml batch-deployment create resolves the component's name (it said job create's)."""
    with pytest.raises(LocalRunError) as refused:
        pipeline.load_pipeline_deployment(fixture / "deployment.yml",
                                          ["component=azureml:missing@latest"])
    said = str(refused.value)
    assert "az ml batch-deployment create looks it up and refuses the deployment" in said
    assert "job create" not in said
