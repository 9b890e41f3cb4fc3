"""The local workspace between jobs, as Azure's workspace: a data asset created from its YAML and
read by a job as `azureml:<name>@latest`; a job output declared with `name:` registered when the
job completes and read by the next job by name and version; a job's output read as
`azureml://jobs/<name>/outputs/<output>`; an output written to a mapped datastore URI read
there by the next job."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlops import assets as assets_front
from mlops import run as local
from mlops.specs import ROOT

pytestmark = pytest.mark.usefixtures("sources_unchanged")
SCHEMA = "https://azuremlschemas.azureedge.net/latest/"
BLOB = "azureml://datastores/workspaceblobstore/paths/shared/handoff/"


def job(path: Path, command: str, inputs: dict, outputs: dict | None = None,
        name: str | None = None) -> Path:
    spec = {"$schema": SCHEMA + "commandJob.schema.json", "type": "command",
            "command": command, "inputs": inputs, "outputs": outputs or {},
            "environment": "azureml:image-classifier@latest", "compute": "azureml:cpu-cluster"}
    if name:
        spec["name"] = name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.proof
def test_assets_and_outputs_flow_between_jobs_by_name(tmp_path, mlflow_store, capsys):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.txt").write_text("from the data asset\n")
    data_spec = tmp_path / "data.yml"
    data_spec.write_text(yaml.safe_dump({"$schema": SCHEMA + "data.schema.json",
                                         "name": "my-files", "type": "uri_folder",
                                         "path": "files"}))
    mapping = tmp_path / "local-paths.yml"
    mapping.write_text(yaml.safe_dump({BLOB: str(tmp_path / "blob")}))
    assert assets_front.main(["create", "-f", str(data_spec)]) == 0
    assert '"version": "1"' in capsys.readouterr().out
    # the jobs' environment by name, registered as in a workspace (a job that names an
    # environment the workspace lacks is refused at submission, as az ml refuses it)
    assert assets_front.main(["create", "-f", str(ROOT / "environments/image-classifier.yml")]) \
        == 0

    first = job(tmp_path / "first.yml",
                "cp ${{inputs.d}}/a.txt ${{outputs.named}}/ && "
                "echo via-datastore > ${{outputs.shared}}/b.txt",
                {"d": {"type": "uri_folder", "path": "azureml:my-files@latest"}},
                {"named": {"type": "uri_folder", "name": "copied", "version": "7"},
                 "shared": {"type": "uri_folder", "path": BLOB}}, name="first-job")
    argv = ["--assets", str(mapping), "--max-procs", "1"]
    assert local.main([str(first), "--run-dir", str(tmp_path / "run one"), *argv]) == 0
    assert "registered data asset azureml:copied:7" in capsys.readouterr().out
    assert (tmp_path / "blob" / "b.txt").read_text() == "via-datastore\n"  # where Azure writes

    second = job(tmp_path / "second.yml",
                 "cat ${{inputs.by_version}}/a.txt ${{inputs.by_job}}/a.txt "
                 "${{inputs.from_blob}}/b.txt > ${{outputs.out}}/all.txt",
                 {"by_version": {"type": "uri_folder", "path": "azureml:copied:7"},
                  "by_job": {"type": "uri_folder",
                             "path": "azureml://jobs/first-job/outputs/named"},
                  "from_blob": {"type": "uri_folder", "path": BLOB}},
                 {"out": {"type": "uri_folder"}})
    assert local.main([str(second), "--run-dir", str(tmp_path / "two"), *argv]) == 0
    assert (tmp_path / "two/outputs/out/all.txt").read_text() == \
        "from the data asset\nfrom the data asset\nvia-datastore\n"

    capsys.readouterr()
    assert local.main([str(first), "--run-dir", str(tmp_path / "taken"), *argv]) == 2
    assert "job name 'first-job' is taken by the local run" in capsys.readouterr().err
    assert not (tmp_path / "taken").exists()  # refused before anything ran
    again = local.main([str(first), "--run-dir", str(tmp_path / "three"), *argv,
                        "--set", "name=first-job-2"])
    assert again == 0  # the same content under copied:7 again: Azure's no-op
    (tmp_path / "files" / "a.txt").write_text("changed\n")
    assert assets_front.main(["create", "-f", str(data_spec)]) == 0  # version 2
    assert local.main([str(first), "--run-dir", str(tmp_path / "four"), *argv,
                       "--set", "name=first-job-3"]) == 1
    assert "copied:7 exists with other content" in capsys.readouterr().err


def test_a_registered_component_and_environment_run_as_registered(tmp_path, mlflow_store,
                                                                   capsys):
    """`component: azureml:<name>:<version>` in a pipeline and `environment: azureml:<name>:1`
    resolve to what was registered (the spec and its code as they were then), not to the files
    as they are now; a node output declared with `name:` is registered when its step
    completes."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "step.py").write_text("import sys, pathlib\n"
                                  "pathlib.Path(sys.argv[1], 'said.txt').write_text('v1')\n")
    component = tmp_path / "component.yml"
    component.write_text(yaml.safe_dump({
        "$schema": SCHEMA + "commandComponent.schema.json", "type": "command",
        "name": "sayer", "version": "1", "code": "code",
        "command": "python step.py ${{outputs.said}}", "outputs": {"said": {"type": "uri_folder"}},
        "environment": "azureml:image-classifier:1"}))

    assert assets_front.main(["create", "-f", str(ROOT / "environments/image-classifier.yml")]) \
        == 0
    assert assets_front.main(["create", "-f", str(component)]) == 0
    (code / "step.py").write_text("raise SystemExit('the files as they are now ran')\n")
    pipeline = tmp_path / "pipeline.yml"
    pipeline.write_text(yaml.safe_dump({
        "$schema": SCHEMA + "pipelineJob.schema.json", "type": "pipeline",
        "settings": {"default_compute": "azureml:cpu-cluster"},
        "jobs": {"say": {"type": "command", "component": "azureml:sayer:1",
                         "outputs": {"said": {"type": "uri_folder", "name": "said-files"}}},
                 "read": {"type": "command", "command": "cat ${{inputs.said}}/said.txt",
                          "inputs": {"said": "${{parent.jobs.say.outputs.said}}"},
                          "environment": "azureml:image-classifier@latest"}}}))
    capsys.readouterr()
    assert local.main([str(pipeline), "--run-dir", str(tmp_path / "run")]) == 0
    assert "v1" in (tmp_path / "run/steps/read/log.txt").read_text()
    assert "step say: registered data asset azureml:said-files:1" in capsys.readouterr().out
