"""Every repo spec passes all three validation layers; every invalid spec is rejected clearly."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from mlops.checks.validation import KINDS, schema_layer, validate
from mlops.specs import JOB_TYPES, ROOT, discover, load_spec, schema_kind

INVALID = sorted((ROOT / "tests" / "invalid_specs").glob("*.yml"))


def test_repo_has_every_spec_kind_it_promises():
    kinds = {load_spec(p).kind for p in discover()}
    assert {"commandJob", "sweepJob", "pipelineJob", "commandComponent", "environment",
            "amlCompute", "data"} <= kinds


def test_every_repo_spec_passes_schema_sdk_and_lint():
    findings = validate(discover())
    assert not findings, "\n".join(map(str, findings))


def test_invalid_corpus_is_large_enough():
    assert len(INVALID) >= 20


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_spec_is_reported_with_its_message_and_severity(path):
    """An error is what Azure refuses (validate exits 1, a local run refuses to start); a
    warning is what Azure accepts: it is reported, and nothing else in the file is an error."""
    text = path.read_text()
    expected = re.match(r"# expect: (.*)", text).group(1).strip()
    warning_only = "# severity: warning" in text
    findings = validate([path])
    messages = [str(f) for f in findings]
    matching = [f for f in findings if expected in str(f)]
    assert matching, f"expected {expected!r} in {messages}"
    assert all(". Fix: " in m for m in messages)
    if warning_only:
        assert not any(f.is_error for f in findings), messages
        assert all(": warning: " in str(f) for f in matching)
    else:
        assert any(f.is_error for f in matching), messages


def test_validate_exits_1_on_errors_only(capsys):
    from mlops.validate import main

    assert main([str(ROOT / "tests/invalid_specs/unused-input.yml")]) == 0
    assert main([str(ROOT / "tests/invalid_specs/min-above-max.yml")]) == 1
    assert "1 error(s), 0 warning(s)" in capsys.readouterr().err


def test_findings_name_file_line_and_key():
    path = ROOT / "tests" / "invalid_specs" / "min-above-max.yml"
    (finding,) = [f for f in validate([path]) if "min_value" in f.problem]
    text = path.read_text().splitlines()
    assert text[finding.line - 1].strip().startswith("learning_rate:")
    assert str(finding).startswith("tests/invalid_specs/min-above-max.yml:") or \
        "min-above-max.yml:" in str(finding)
    assert finding.key == "search_space.learning_rate"


def test_editor_settings_map_every_schema():
    settings = json.loads((ROOT / ".vscode" / "settings.json").read_text())["yaml.schemas"]
    assert {Path(p).name for p in settings} == {f"{k}.schema.json" for k in KINDS}
    for schema in settings:
        assert (ROOT / schema).is_file()


def test_every_job_input_of_train_is_a_trainer_flag_with_the_same_name():
    """Config field names = CLI flags = YAML input names."""
    from image_classifier.config import TrainConfig

    fields = set(TrainConfig.__dataclass_fields__)
    for spec in ("jobs/train.yml", "jobs/train-distributed.yml", "components/train.yml"):
        inputs = set(load_spec(ROOT / spec).data["inputs"])
        assert inputs <= fields, f"{spec}: {inputs - fields} are not trainer fields"


def test_what_the_tooling_knows_of_this_project_comes_from_its_config_section():
    """[tool.azml]: flags are checked for the entry packages it names, metrics per module."""
    from mlops.checks.lint import entry_point_parser
    from mlops.project import project

    config = project()
    assert config.entry_packages == ("image_classifier",)
    assert "lr" in config.metrics["image_classifier.train"]
    assert entry_point_parser("python -m image_classifier.train --epochs 1") is not None
    assert entry_point_parser("python -m someone_else.train --epochs 1") is None



def test_entry_flags_are_read_from_the_config_module_without_importing_the_entry(monkeypatch):
    """Validation reads a step's flags from `<package>.config.ENTRY_CONFIGS` where the package
    lists it, never importing the entry module (torch: seconds); an entry it does not list is
    imported for its own build_parser."""
    import importlib

    from image_classifier.config import ENTRY_CONFIGS
    from mlops.checks.lint import entry_point_parser

    real, imported = importlib.import_module, []

    def watch(name, *args):
        imported.append(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", watch)
    for entry, config in ENTRY_CONFIGS.items():
        parser = entry_point_parser(f"python -m image_classifier.{entry} --x 1")
        assert {f"--{name}" for name in config.__dataclass_fields__} <= {
            opt for action in parser._actions for opt in action.option_strings}
    assert not [name for name in imported if name != "image_classifier.config"]
    register = entry_point_parser("python -m image_classifier.register")
    assert imported[-1] == "image_classifier.register"
    assert "--model_name" in {opt for action in register._actions for opt in action.option_strings}

def test_the_lock_file_agrees_with_every_pin_in_pyproject():
    """constraints.txt (make lock) holds each pin of pyproject.toml and mlops/pyproject.toml (the
    azml tool) at the same version: a pin bumped without `make lock` would make `make setup`
    fail to resolve."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    tool = tomllib.loads((ROOT / "mlops" / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + tool["dependencies"] + \
        [x for group in project["optional-dependencies"].values() for x in group]
    locked = {canonicalize_name(Requirement(line).name): Requirement(line).specifier
              for line in (ROOT / "constraints.txt").read_text().splitlines()
              if line and not line.startswith("#")}
    for line in lines:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in constraints.txt: run make lock"
        version = next(iter(locked[name])).version
        assert requirement.specifier.contains(version), f"{name}: run make lock"


def test_the_specs_others_refer_to_are_parsed_once_and_again_when_changed(tmp_path, monkeypatch):
    """Every command of a pipeline or sweep asks for the repository's compute sizes: assets/ is
    parsed once per process, and a file edited since is read again."""
    import mlops.checks.validation as validate_module

    (tmp_path / "assets").mkdir()
    compute = tmp_path / "assets" / "compute.yml"
    compute.write_text("name: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\n")
    parsed = []
    (tmp_path / "azml.toml").write_text("")  # the repository the current folder is in
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(validate_module, "load_spec",
                        lambda path: parsed.append(path) or load_spec(path))
    for _ in range(3):
        assert validate_module._compute_sizes() == {"cpu-cluster": "Standard_DS3_v2"}
    assert parsed == [compute]
    compute.write_text("name: cpu-cluster\ntype: amlcompute\nsize: Standard_NC6s_v3\n")
    assert validate_module._compute_sizes() == {"cpu-cluster": "Standard_NC6s_v3"}
    assert parsed == [compute, compute]


def _without_endpoint(source: Path, folder: Path) -> Path:
    """A copy of a repo deployment with no endpoint_name, its relative paths kept working."""
    text = "".join(line for line in source.read_text().splitlines(keepends=True)
                   if not line.startswith("endpoint_name:"))
    target = source.parent / f".no-endpoint-{folder.name}.yml"  # beside it: paths still resolve
    target.write_text(text)
    return target


@pytest.mark.parametrize("variant", ["online without endpoint_name", "batch without endpoint_name",
                                     "flat batch layout"])
def test_deployment_layouts_azure_ai_ml_loads_are_accepted(variant, tmp_path):
    """What `az ml online-deployment/batch-deployment create --file` takes is not refused here:
    the endpoint comes from --endpoint-name; the flat layout still loads as a BatchDeployment."""
    sources = {"online without endpoint_name": ROOT / "endpoints" / "blue.yml",
               "batch without endpoint_name": ROOT / "endpoints" / "batch" / "deployment.yml",
               "flat batch layout": ROOT / "tests" / "fixtures" / "batch" / "flat-deployment.yml"}
    path = sources[variant] if variant == "flat batch layout" else \
        _without_endpoint(sources[variant], tmp_path)
    try:
        findings = validate([path])
    finally:
        if path != sources[variant]:
            path.unlink()
    assert [str(f) for f in findings if f.is_error] == []
    if variant != "flat batch layout":
        assert any("--endpoint-name" in str(f) for f in findings)


ONLINE = ROOT / "endpoints" / "blue.yml"
BATCH = ROOT / "endpoints" / "batch" / "deployment.yml"
LAYOUTS = {  # what azure-ai-ml 1.35.2 loads, written as the docs and public samples write it
    "online, model by version": (ONLINE, {"model": "azureml:fowl-classifier:3"}),
    "online, inline environment": (ONLINE, {"environment": {
        "image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest",
        "conda_file": "../environments/conda.yml"}}),
    "online, registry environment": (ONLINE, {
        "environment": "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"}),
    "online, environment by version": (ONLINE, {"environment": "azureml:image-classifier:1"}),
    "online, no probes or request settings": (ONLINE, {"request_settings": None,
                                                       "liveness_probe": None,
                                                       "readiness_probe": None}),
    "batch, inline environment": (BATCH, {"environment": {
        "image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest",
        "conda_file": "../../environments/conda.yml"}}),
    "batch, model by version": (BATCH, {"model": "azureml:fowl-classifier:3"}),
    "batch, defaults for every setting": (BATCH, {"settings": {"mini_batch_size": 10}}),
}


@pytest.mark.parametrize("variant", LAYOUTS, ids=list(LAYOUTS))
def test_every_layout_azure_ai_ml_loads_is_accepted_here(variant, tmp_path):
    """The validation a local run starts with (azure-ai-ml's own loader and validation for the
    spec's kind, then this repository's checks) accepts every variant."""
    import yaml as pyyaml

    source, changes = LAYOUTS[variant]
    data = pyyaml.safe_load(source.read_text())
    for key, value in changes.items():
        data.pop(key) if value is None else data.__setitem__(key, value)
    code = data["code_configuration"]
    code["code"] = str((source.parent / code["code"]).resolve())  # the copy lives elsewhere
    if isinstance(data["environment"], dict):
        conda = data["environment"]["conda_file"]
        data["environment"]["conda_file"] = str((source.parent / conda).resolve())
    path = tmp_path / source.name
    path.write_text(pyyaml.safe_dump(data, sort_keys=False))
    assert [str(f) for f in validate([path]) if f.is_error] == []


def test_a_job_is_typed_by_its_type_whatever_its_schema_url(tmp_path):
    """azure-ai-ml loads a job by its `type:` and ignores $schema: its own pre-GA configs
    (http://azureml/sdk-2-0/SparkJob.json) load, and pass the same checks."""
    from mlops.checks.prepare import prepare_job
    from mlops.runtime.uris import AssetMap

    spark = ROOT / "tests" / "fixtures" / "spark"
    data = yaml.safe_load((spark / "spark-job.yml").read_text())
    data.update({"$schema": "http://azureml/sdk-2-0/SparkJob.json", "code": str(spark / "src")})
    path = tmp_path / "pre-ga.yml"
    path.write_text(yaml.safe_dump(data))
    job = prepare_job(path, [], [], AssetMap(spark / "local-paths.yml"))
    assert job.spec.kind == "sparkJob"
    assert load_spec(path).kind == "sparkJob"  # validate (no role) reads it from the URL too
    for url in ("https://azuremlschemas.azureedge.net/development/commandJob.schema.json",
                "http://azureml/sdk-2-0/CommandJob.json", "CommandJob"):
        assert schema_kind(url) == "commandJob"
    assert schema_kind("https://example.com/whatever.json") == ""


@pytest.mark.parametrize(("data", "said"), [
    ({"type": "finetuning"}, "a fine-tuning job (type: finetuning)"),
    ({"type": "import"}, "an import job (type: import)"),
    ({"type": "Command", "command": "x"}, "type: 'Command' is not a job type (azure-ai-ml: "
                                          "'Unsupported job type: Command.')"),
    ({"$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
      "type": "command", "command": "x"}, "its $schema names a commandComponent, not a job"),
    ({"$schema": "http://azureml/sdk-2-0/ManagedOnlineDeployment.json", "model": "m"},
     "make serve-local DEPLOYMENT=<this file>")])
def test_a_spec_that_does_not_run_here_says_what_it_is_and_what_runs_it(data, said):
    from mlops.checks.prepare import not_runnable, what_it_is
    from mlops.specs import Spec

    spec = Spec(path=Path("x.yml"), data=data, role="job")
    assert said in not_runnable(spec) + what_it_is(spec)


def test_a_spark_job_whose_schema_names_a_component_runs_by_its_type():
    """azure-ai-ml's own Spark job configs say $schema: .../SparkComponent.json with type:
    spark: az ml job create loads them as Spark jobs."""
    from mlops.checks.prepare import not_runnable
    from mlops.specs import Spec

    spec = Spec(path=Path("x.yml"), data={"$schema": "http://azureml/sdk-2-0/SparkComponent.json",
                                "type": "spark"}, role="job")
    assert spec.kind == "sparkJob" and not_runnable(spec) == ""


def test_every_job_kind_azure_ai_ml_loads_is_known_and_the_five_local_ones_run():
    from mlops.checks.prepare import not_runnable
    from mlops.specs import Spec

    for type_ in JOB_TYPES:
        reason = not_runnable(Spec(path=Path("x.yml"), data={"type": type_}, role="job"))
        assert bool(reason) == (type_ not in ("command", "sweep", "pipeline", "spark",
                                              "automl")), type_


def test_a_schema_error_names_azures_published_schema_not_a_path_of_this_repository(tmp_path):
    """azml validates any user's repository: the field list it points at is Azure's schema of
    the kind, which exists wherever the spec is."""
    spec = tmp_path / "job.yml"
    spec.write_text("$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
                    "command: echo hi\nenvironment: azureml:env@latest\ncomand: typo\n")
    found = schema_layer(load_spec(spec))
    assert [f.key for f in found] == ["comand"]
    assert found[0].fix.startswith("see the field list in https://azuremlschemas.azureedge.net/"
                                   "latest/commandJob.schema.json")


@pytest.mark.parametrize("kind", ["command", "sweep", "pipeline", "component file"])
def test_a_code_folder_az_ml_cannot_upload_is_refused_at_create(tmp_path, kind):
    """az ml job create uploads `code:` (a sweep's trial's, each inline or file component's)
    before the job exists, so a link to nothing in it fails the create: refused then, naming
    the entry, as the snapshot would."""
    from mlops.checks.prepare import prepare_job
    from mlops.errors import LocalRunError
    from mlops.runtime.uris import AssetMap

    code = tmp_path / "src"
    code.mkdir()
    (code / "main.py").write_text("print(1)\n")
    (code / "gone").symlink_to(tmp_path / "nowhere")
    command = {"command": "python main.py", "code": "src",
               "environment": "azureml:AzureML-sklearn-1.5@latest"}
    (tmp_path / "step.yml").write_text(yaml.safe_dump({"type": "command", "name": "step",
                                                       **command}))
    data = {"command": {"type": "command", **command},
            "sweep": {"type": "sweep", "trial": command, "sampling_algorithm": "random",
                      "search_space": {"c": {"type": "choice", "values": [1]}},
                      "objective": {"goal": "maximize", "primary_metric": "m"},
                      "limits": {"max_total_trials": 1}},
            "pipeline": {"type": "pipeline", "settings": {"default_compute": "azureml:cpu"},
                         "jobs": {"a": {"type": "command", **command}}},
            "component file": {"type": "pipeline", "settings": {"default_compute": "azureml:c"},
                               "jobs": {"a": {"component": "file:step.yml"}}}}[kind]
    path = tmp_path / "job.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(LocalRunError, match="gone is a link to .*nowhere, which does not exist"):
        prepare_job(path, [], [], AssetMap(None))
    (code / "gone").unlink()
    assert prepare_job(path, [], [], AssetMap(None)).spec.kind == f"{data['type']}Job"
