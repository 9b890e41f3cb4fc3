"""azure-ai-ml's findings land on the file, line and key they are about (mlops/checks/
sdk_findings.py), not on line 1."""

from pathlib import Path

import pytest

from mlops.checks.sdk_findings import flatten, from_diagnostics, from_loader, from_other
from mlops.checks.validation import sdk_layer
from mlops.specs import load_spec

ROOT = Path(__file__).resolve().parents[2]
INVALID = ROOT / "tests" / "invalid_specs"


def _spec(tmp_path, text: str):
    path = tmp_path / "job.yml"
    path.write_text(text)
    return load_spec(path, role="job")


def test_nested_messages_flatten_to_key_paths_and_dict_values_are_not_keys():
    messages = {"outputs": {"model": {"value": {"mode": ["bad mode"]}}},
                "code": [{"_schema": ["In order to specify a git path"]},
                         {"_schema": ["Can't find directory"]}],
                "distribution": [{"type": ["not pytorch"], "extra": ["Unknown field."]},
                                 {"type": ["not mpi"]}]}
    assert flatten(messages) == [(("outputs", "model", "mode"), "bad mode"),
                                 (("code",), "Can't find directory"),  # the specific one
                                 (("distribution", "type"), "not mpi")]  # the closest branch


def test_loader_errors_in_prose_are_parsed_and_placed_on_their_line(tmp_path):
    spec = _spec(tmp_path, "type: command\ncommand: echo\noutputs:\n  model:\n    mode: x\n")
    prose = 'Validation for CommandJobSchema failed:\n{\n "outputs": {"model": {"value": ' \
        '{"mode": ["Value \'x\' passed is not in set"]}}}\n}\n Visit this link'
    (finding,) = from_loader(spec, prose)
    assert (finding.key, finding.line) == ("outputs.model.mode", 5)
    assert finding.problem == "azure-ai-ml: Value 'x' passed is not in set"


def test_diagnostics_name_the_file_they_came_from(tmp_path):
    component = tmp_path / "step.yml"
    component.write_text("name: step\ninputs:\n  data:\n    type: uri_folder\n")
    spec = _spec(tmp_path, "type: pipeline\njobs:\n  a:\n    component: step.yml\n")

    class Diagnostic:
        def __init__(self, yaml_path, local_path, message):
            self.yaml_path, self.local_path, self.message = yaml_path, local_path, message

    own, other = from_diagnostics(spec, [Diagnostic("jobs.a", None, "own"),
                                         Diagnostic("inputs.data", str(component), "theirs")])
    assert (own.path, own.line) == (spec.path, 3)
    assert (other.path, other.line) == (component, 3)


def test_other_errors_point_at_the_value_they_quote(tmp_path):
    spec = _spec(tmp_path, "name: e\nimage: x\nconda_file: envs/missing-conda.yml\n")
    (finding,) = from_other(spec, FileNotFoundError("No such file or directory: "
                                                    "/abs/envs/missing-conda.yml"))
    assert (finding.key, finding.line) == ("conda_file", 3)
    (whole,) = from_other(spec, RuntimeError("something else"))
    assert (whole.key, whole.line) == ("", 1)


@pytest.mark.parametrize("name", ["bad-output-mode.yml", "optional-in-job-input.yml",
                                  "wrong-distribution-type.yml", "pipeline-missing-component.yml",
                                  "pipeline-unbound-input.yml", "missing-conda-file.yml"])
def test_the_real_sdk_findings_sit_on_the_line_of_their_key(name):
    spec = load_spec(INVALID / name)  # typed by its $schema: an environment spec among them
    findings = sdk_layer(spec)
    assert findings and all(f.key for f in findings)
    lines = (INVALID / name).read_text().splitlines()
    for finding in findings:
        # the key's own line, or its nearest parent's where the key is missing from the file
        parts = tuple(finding.key.split("."))
        while parts not in spec.lines:
            parts = parts[:-1]
        assert finding.line == spec.lines[parts] > 1
        assert lines[finding.line - 1].strip().startswith(parts[-1] + ":")


def test_of_equal_alternatives_the_one_that_wants_no_missing_key_gives_the_reason():
    # an inline environment whose conda file is missing (az ml's own union of alternatives)
    messages = {"environment": [{"_schema": ["In order to specify an existing environments"]},
                                {"name": ["Missing data for required field."]},
                                ["No such file or directory: /repo/env/conda.yml"]]}
    assert flatten(messages) == [(("environment",),
                                  "No such file or directory: /repo/env/conda.yml")]


def test_a_component_that_uses_itself_is_named_with_its_chain(tmp_path):
    """azure-ai-ml's loader recurses until Python stops it; the finding names the cycle."""
    from mlops.checks.sdk_findings import component_cycle, from_other
    from mlops.specs import load_spec

    head = "$schema: https://azuremlschemas.azureedge.net/latest/pipelineComponent.schema.json\n"
    (tmp_path / "a.yml").write_text(head + "type: pipeline\njobs:\n  x:\n    type: pipeline\n"
                                    "    component: ./b.yml\n  y:\n    component: ./c.yml\n")
    (tmp_path / "b.yml").write_text(head + "type: pipeline\njobs:\n  z:\n    component: c.yml\n")
    (tmp_path / "c.yml").write_text(head + "type: pipeline\njobs:\n  w:\n"
                                    "    component: file:./a.yml\n")
    assert component_cycle(tmp_path / "a.yml") == [tmp_path / n for n in
                                                    ("a.yml", "b.yml", "c.yml", "a.yml")]
    (tmp_path / "c.yml").write_text(head + "type: pipeline\njobs:\n  w:\n"
                                    "    component: azureml:c@latest\n")
    assert component_cycle(tmp_path / "a.yml") is None
    (tmp_path / "c.yml").write_text(head + "type: pipeline\njobs:\n  w:\n    component: ./c.yml\n")
    [finding] = from_other(load_spec(tmp_path / "a.yml"), RecursionError("maximum recursion"))
    assert "a component uses itself (c.yml -> c.yml)" in str(finding)


@pytest.mark.parametrize(("kind", "body"), [
    ("pipelineComponent", "name: pc\ntype: pipeline\njobs:\n  a:\n    type: command\n"
                          "    component:\n      command: echo 1\n"
                          "      environment: azureml:AzureML-sklearn-1.5@latest\n"),
    ("parallelComponent", "name: par\ntype: parallel\nmini_batch_size: '1'\ninputs:\n"
                          "  data:\n    type: uri_folder\ninput_data: ${{inputs.data}}\n"
                          "task:\n  type: run_function\n  entry_script: score.py\n"
                          "  environment: azureml:AzureML-sklearn-1.5@latest\n"),
])
def test_kinds_without_a_vendored_schema_are_checked_by_azure_ai_mls_loader(tmp_path, kind,
                                                                             body):
    """A pipeline or parallel component is what azure-ai-ml loads (no 'unknown $schema'); an
    environment it refuses is its finding."""
    from mlops.checks.validation import check
    from mlops.specs import load_spec

    path = tmp_path / "c.yml"
    path.write_text(f"$schema: https://azuremlschemas.azureedge.net/latest/{kind}.schema.json\n"
                    + body)
    assert [str(f) for f in check(load_spec(path)) if f.is_error] == []
    path.write_text(path.read_text().replace("environment: azureml:", "environment: 7 # "))
    assert any("environment" in str(f) for f in check(load_spec(path)) if f.is_error)


RESOURCES = {  # a spec Azure's docs publish for each kind, its key to break, the broken value
    "computeInstance": ("name: ci-one-2x\ntype: computeinstance\nsize: STANDARD_DS3_v2\n"
                        "idle_time_before_shutdown_minutes: 30\n",
                        "idle_time_before_shutdown_minutes: 30", "Not a valid integer"),
    "azureBlob": ("name: blob_store\ntype: azure_blob\naccount_name: acct\n"
                  "container_name: data\n", "account_name: acct",
                  "Missing data for required field"),
    "workspace": ("name: my-ws\nlocation: eastus\ndisplay_name: mine\n", "display_name: mine",
                  "Unknown field"),
    "schedule": ("name: nightly\ntrigger:\n  type: cron\n  expression: '0 2 * * *'\n"
                 "create_job: ./job.yml\n", "type: cron", "is not in set"),
    "registry": ("name: myreg\nlocation: eastus\nreplication_locations:\n  - location: eastus\n",
                 "location: eastus\nreplication", "Missing data for required field"),
}
BREAKS = {"idle_time_before_shutdown_minutes: 30": "idle_time_before_shutdown_minutes: soon",
          "account_name: acct": "", "display_name: mine": "bogus: mine",
          "type: cron": "type: crontab", "location: eastus\nreplication": "replication"}


@pytest.mark.parametrize("kind", sorted(RESOURCES))
def test_a_workspaces_other_resources_are_checked_by_the_loader_az_ml_create_calls(tmp_path,
                                                                                   kind):
    """`make validate` refused a compute instance, a datastore, the workspace, a schedule or a
    registry spec as an unknown $schema (each is `az ml <kind> create -f`'s); azure-ai-ml's
    loader checks them now, its refusal at the key's line."""
    from mlops.checks.validation import check

    body, key, says = RESOURCES[kind]
    (tmp_path / "job.yml").write_text("type: command\ncommand: echo hi\n"
                                      "environment: azureml:AzureML-sklearn-1.5@latest\n")
    path = tmp_path / "r.yml"
    path.write_text(f"$schema: https://azuremlschemas.azureedge.net/latest/{kind}.schema.json\n"
                    + body)
    assert [str(f) for f in check(load_spec(path))] == []
    path.write_text(path.read_text().replace(key, BREAKS[key]))
    (finding,) = check(load_spec(path))
    assert says in finding.problem and finding.key, finding
    assert finding.line > 1 or "Missing" in says  # (a missing key has no line of its own)


def test_a_schema_finding_the_loader_does_not_share_is_dropped_beside_its_real_one(tmp_path):
    """A Spark node's `instance_type: Standard_E8S_V3` (azure-ai-ml takes any casing; the
    generated schema lists two) was a second, false error beside the node's missing entry."""
    from mlops.checks.validation import check

    (tmp_path / "src").mkdir()
    (tmp_path / "c.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/sparkComponent.schema.json\n"
        "name: sc\ntype: spark\ncode: ./src\nentry:\n  file: gone.py\nconf:\n"
        "  spark.driver.cores: 1\n  spark.driver.memory: 2g\n  spark.executor.cores: 2\n"
        "  spark.executor.memory: 2g\n  spark.executor.instances: 2\n")
    path = tmp_path / "p.yml"
    path.write_text("$schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json"
                    "\ntype: pipeline\njobs:\n  s:\n    type: spark\n    component: ./c.yml\n"
                    "    resources:\n      instance_type: Standard_E8S_V3\n"
                    "      runtime_version: 3.4.0\n")
    (finding,) = check(load_spec(path))
    assert finding.key == "jobs.s.component.entry" and "gone.py" in finding.problem
