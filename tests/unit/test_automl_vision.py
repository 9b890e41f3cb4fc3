"""Image AutoML specs become a sweep of Azure's image runner (mlops/automl/vision_job.py): the
search space, limits, early termination and settings as each trial gets them; what is refused
by name before any work; and the trial's own pure parts: an MLTable of JSON Lines as the
runner's label files (vision_data.py), and pretrained weights read offline (weights.py)."""

from __future__ import annotations

import json
import shlex
import sys

import optuna
import pytest
from support import ROOT

from mlops.automl.translate import automl_command
from mlops.automl.vision import vision_data, weights
from mlops.automl.vision_job import VISION
from mlops.checks.prepare import prepare_job
from mlops.errors import LocalRunError
from mlops.orchestrators.graph import build_nodes
from mlops.orchestrators.sampling import make_study, sample
from mlops.runtime.uris import AssetMap
from mlops.runtime.values import render_literal

FIXTURES = ROOT / "tests" / "fixtures" / "automl" / "vision"
TWO_MODELS = [{"model_name": {"type": "choice", "values": ["resnet18"]},
               "learning_rate": {"type": "uniform", "min_value": 0.001, "max_value": 0.01}},
              {"model_name": {"type": "choice", "values": ["mobilenetv2"]},
               "layers_to_freeze": {"type": "choice", "values": [0, 2]}}]


@pytest.fixture(autouse=True)
def a_python_310(monkeypatch):
    """Finding an interpreter starts a process: a unit test is given one."""
    from mlops.automl import vision_job
    from mlops.environments.interpreters import HERE

    monkeypatch.setattr(vision_job, "find", lambda minor: HERE)


def spec(**over) -> dict:
    base = {"type": "automl", "task": "image_classification", "target_column_name": "label",
            "training_data": {"type": "mltable", "path": "./train"}}
    return {**base, **over}


def words(command: str) -> list[str]:
    return shlex.split(command.replace("${{", "<").replace("}}", ">"))


def test_several_model_spaces_are_one_nested_choice_the_runner_reads_from_model():
    definition = automl_command(spec(
        search_space=TWO_MODELS, limits={"max_trials": 4, "max_concurrent_trials": 2,
                                         "timeout_minutes": 30},
        sweep={"sampling_algorithm": "random",
               "early_termination": {"type": "bandit", "slack_factor": 0.2}},
        validation_data={"type": "mltable", "path": "./valid"}), "j").definition
    assert definition["type"] == "sweep"
    assert definition["search_space"] == {"model": {"type": "choice", "values": TWO_MODELS}}
    assert definition["limits"] == {"max_total_trials": 4, "max_concurrent_trials": 2,
                                    "timeout": 1800}
    assert definition["objective"] == {"primary_metric": "accuracy", "goal": "maximize"}
    assert definition["early_termination"]["type"] == "bandit"
    assert set(definition["inputs"]) == {"training_data", "validation_data"}
    assert definition["outputs"]["best_model"] == {"type": "mlflow_model"}
    trial = definition["trial"]
    assert trial["code"] == str(VISION)
    assert trial["environment"]["conda_file"] == str(VISION / "conda.yml")
    argv = words(trial["command"])
    assert argv[:3] == ["python", "automl_vision.py", "--task=image_classification"]
    assert argv[-2:] == ["--model", "<search_space.model>"]


def test_one_space_passes_each_hyperparameter_as_its_own_flag_and_a_value_is_a_choice_of_one():
    definition = automl_command(spec(search_space=[{"model_name": "resnet34",
                                                    "learning_rate": 0.01}]), "j").definition
    assert definition["search_space"] == {
        "model_name": {"type": "choice", "values": ["resnet34"]},
        "learning_rate": {"type": "choice", "values": [0.01]}}
    argv = words(definition["trial"]["command"])
    assert argv[-4:] == ["--model_name", "<search_space.model_name>",
                         "--learning_rate", "<search_space.learning_rate>"]


def test_the_settings_every_trial_gets_survive_the_shell_as_one_json_value():
    definition = automl_command(spec(target_column_name="it's a -y",
                                     training_parameters={"number_of_epochs": 2,
                                                          "model_name": "resnet18"},
                                     validation_data_size=0.25), "j").definition
    argv = words(definition["trial"]["command"])
    settings = next(w for w in argv if w.startswith("--settings="))
    assert json.loads(settings.partition("=")[2]) == {
        "model_name": "resnet18", "number_of_epochs": 2, "primary_metric": "accuracy",
        "validation_size": 0.25}
    assert "--target_column_name=it's a -y" in argv


@pytest.mark.parametrize(("task", "metric"), [
    ("image_classification", "accuracy"), ("image_classification_multilabel", "iou"),
    ("image_object_detection", "mean_average_precision"),
    ("image_instance_segmentation", "mean_average_precision")])
def test_each_task_maximizes_azures_default_primary_metric(task, metric):
    definition = automl_command(spec(task=task), "j").definition
    assert definition["objective"]["primary_metric"] == metric


@pytest.mark.parametrize(("over", "message"), [
    ({"search_space": [{"model_name": {"type": "choice", "values": [
        "microsoft/beit-base-patch16-224-pt22k-ft22k"]}}]},
     r"j\.search_space\[0\]\.model_name: model 'microsoft/beit.*Hugging Face or MMDetection"),
    ({"task": "image_object_detection", "training_parameters": {"model_name": "mmd-3x-yolof"}},
     r"j\.training_parameters\.model_name: model 'mmd-3x-yolof'.*model registry"),
    ({"training_parameters": {"model_name": "resnet9000"}},
     r"'resnet9000' is not one of the image_classification runner's models \(resnet18"),
    ({"task": "image_object_detection", "search_space": [{"model_name": "resnet18"}]},
     r"'resnet18' is not one of the image_object_detection runner's models"),
    ({"primary_metric": "r2_score"}, r"j\.primary_metric: 'r2_score' is not a"),
    ({"training_data": None}, r"j\.training_data: an image AutoML job trains on an MLTable"),
    ({"search_space": [{"learning_rate": [0.1, 0.2]}]},
     r"j\.search_space\[0\]\.learning_rate: a search space entry is a value or a distribution")])
def test_what_cannot_run_here_is_refused_by_name_before_any_work(over, message):
    with pytest.raises(LocalRunError, match=message):
        automl_command(spec(**over), "j")


def test_azures_automatic_model_sweep_is_one_trial_of_the_default_model_with_a_note():
    built = automl_command(spec(limits={"max_trials": 10}), "j")
    assert built.definition["limits"]["max_total_trials"] == 1
    assert built.definition["search_space"] == {}
    assert any("automatic model sweep" in note for note in built.notes)


def test_image_urls_are_mapped_through_the_run_s_mapping_file_as_absolute_paths(tmp_path):
    mapping = tmp_path / "paths.yml"
    mapping.write_text("azureml://datastores/blob/paths/fridge/: data/fridge\n")
    definition = automl_command(spec(), "j", AssetMap(mapping)).definition
    found = json.loads(definition["trial"]["environment_variables"]["AZUREML_AUTOML_URL_MAP"])
    assert found == {"azureml://datastores/blob/paths/fridge/": str(ROOT / "data" / "fridge")}
    assert "environment_variables" not in automl_command(spec(), "j").definition["trial"]


def test_an_image_job_is_prepared_as_the_sweep_and_a_pipeline_node_as_a_sweep_node(tmp_path):
    none = AssetMap(tmp_path / "none.yml")
    job = prepare_job(FIXTURES / "classification.yml", [], [], none)
    assert job.spec.kind == "sweepJob"
    assert job.data["experiment_name"] == "automl-vision-fixtures"
    pipeline = prepare_job(FIXTURES / "pipeline.yml", [], [], none)
    nodes = {n.name: n for n in build_nodes(pipeline.data["jobs"], FIXTURES, none, "p")}
    assert nodes["train"].kind == "sweep"
    assert nodes["train"].raw["inputs"]["training_data"] == "${{parent.jobs.prep.outputs.train}}"
    assert nodes["train"].definition["code"] == str(VISION)


def test_a_nested_choice_picks_one_space_and_samples_its_entries_for_the_runner():
    space = {"model": {"type": "choice", "values": TWO_MODELS}}
    study = make_study("random", space, maximize=True)
    seen = set()
    for _ in range(12):
        picked = sample(study.ask(), "model", space["model"])
        seen.add(picked["model_name"])
        if picked["model_name"] == "resnet18":
            assert 0.001 <= picked["learning_rate"] <= 0.01 and set(picked) == {
                "model_name", "learning_rate"}
        else:
            assert picked["layers_to_freeze"] in (0, 2)
        assert json.loads(render_literal(picked)) == picked
        assert " " not in render_literal(picked)  # one shell word between quotes
    assert seen == {"resnet18", "mobilenetv2"}
    with pytest.raises(LocalRunError, match="grid: a choice of several search spaces"):
        make_study("grid", space, maximize=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def table(folder, rows, reader="read_json_lines"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "MLTable").write_text(f"paths:\n  - file: ./rows.jsonl\ntransformations:\n"
                                    f"  - {reader}:\n      encoding: utf8\n")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_a_classification_table_becomes_the_runner_s_label_file_with_every_url_mapped(
        tmp_path, monkeypatch):
    monkeypatch.setenv(vision_data.MAP_VARIABLE, json.dumps({
        "azureml://datastores/blob/paths/fridge/": "/data/fridge",
        "https://host/one.jpg": "/data/one.jpg"}))
    long = ("azureml://subscriptions/s/resourcegroups/g/workspaces/w/datastores/blob/paths/"
            "fridge/can/1.jpg")
    folder = table(tmp_path / "t", [
        {"image_url": "images/a b.jpg", "label": "can, tall"},
        {"image_url": long, "label": "milk"},
        {"image_url": "https://host/one.jpg", "label": 3},
        {"image_url": "file:///abs/x.jpg", "label": "can"}])
    out = tmp_path / "train.tsv"
    assert vision_data.classification_file(folder, out, label="label", multilabel=False) == 4
    assert runner_reads(out, multilabel=False) == {
        str(folder / "images" / "a b.jpg"): "can, tall", "/data/fridge/can/1.jpg": "milk",
        "/data/one.jpg": "3", "/abs/x.jpg": "can"}


def runner_reads(path, multilabel: bool) -> dict[str, object]:
    """What azureml-automl-dnn-vision 1.62 reads from a label file: its own two readers
    (ImageFolderLabelFileDatasetWrapper._get_files_to_labels_dict and
    _get_labels_from_label_str), with their exact arguments."""
    import csv

    found: dict[str, object] = {}
    with open(path, newline="") as handle:
        for row in csv.reader(handle, delimiter="\t", skipinitialspace=True):
            if not row:
                continue
            assert len(row) == 2, "More than 2 columns encountered in the input."
            labels = list(csv.reader([row[1]], delimiter=",", quotechar="'",
                                     skipinitialspace=True))[0]
            assert multilabel or len(labels) == 1, "Encountered multi-label line"
            found[row[0]] = labels if multilabel else labels[0]
    return found


LABELS_AS_WRITTEN = ["can, tall", 'say "cheese"', "it's", " leading", "trailing ", "two\nlines",
                     "crlf\r\nend", "tab\there", "''", '"', ",", "", "  ", "\u00a0nbsp", "Ж"]


@pytest.mark.parametrize("label", LABELS_AS_WRITTEN)
def test_a_single_label_reaches_the_runner_exactly_as_written(tmp_path, label):
    folder = table(tmp_path / "t", [{"image_url": "a.jpg", "label": label},
                                    {"image_url": "b.jpg", "label": "plain"}])
    out = tmp_path / "train.tsv"
    assert vision_data.classification_file(folder, out, label="label", multilabel=False) == 2
    assert runner_reads(out, multilabel=False) == {str(folder / "a.jpg"): label,
                                                   str(folder / "b.jpg"): "plain"}


def test_several_labels_reach_the_runner_each_exactly_as_written(tmp_path):
    folder = table(tmp_path / "t", [{"image_url": "a.jpg", "label": LABELS_AS_WRITTEN},
                                    {"image_url": "b.jpg", "label": []}])
    out = tmp_path / "train.tsv"
    assert vision_data.classification_file(folder, out, label="label", multilabel=True) == 2
    assert runner_reads(out, multilabel=True) == {str(folder / "a.jpg"): LABELS_AS_WRITTEN,
                                                  str(folder / "b.jpg"): []}


@pytest.mark.parametrize(("rows", "multilabel", "message"), [
    ([{"image_url": "azureml://datastores/x/paths/a.jpg", "label": "a"}], False,
     r"image_url azureml://datastores/x/paths/a\.jpg has no local stand-in"),
    ([{"image_url": "a.jpg", "label": "a\0b"}], False, r"rows\.jsonl:1: label 'a\\x00b' holds "
                                                      "a NUL character"),
    ([{"image_url": "a.jpg", "label": ["a", "b"]}], False, r"no 'label' of text"),
    ([{"image_url": "a.jpg", "tag": "a"}], False, r"rows\.jsonl:1: no 'label' of text"),
    ([{"image_url": "a.jpg", "label": {"x": 1}}], False, r"no 'label' of text")])
def test_a_row_the_runner_cannot_read_stops_the_trial_naming_it(tmp_path, rows, multilabel,
                                                                  message):
    folder = table(tmp_path / "t", rows)
    with pytest.raises(vision_data.DataError, match=message):
        vision_data.classification_file(folder, tmp_path / "o.tsv", label="label",
                                        multilabel=multilabel)


def test_a_table_that_is_not_json_lines_or_not_json_is_named(tmp_path):
    with pytest.raises(vision_data.DataError, match="reads JSON Lines"):
        list(vision_data.rows(table(tmp_path / "csv", [], reader="read_delimited")))
    folder = table(tmp_path / "bad", [])
    (folder / "rows.jsonl").write_text('{"image_url": "a.jpg"}\n{oops\n')
    with pytest.raises(vision_data.DataError, match=r"rows\.jsonl:2: not JSON"):
        list(vision_data.rows(folder))
    with pytest.raises(vision_data.DataError, match="holds no MLTable file"):
        list(vision_data.rows(tmp_path))


def test_a_table_that_is_not_utf8_is_named_at_its_file_and_line(tmp_path):
    folder = table(tmp_path / "t", [])
    (folder / "rows.jsonl").write_bytes(b'{"image_url": "a.jpg", "label": "a"}\n'
                                        b'{"image_url": "b.jpg", "label": "caf\xe9"}\n')
    with pytest.raises(vision_data.DataError, match=r"rows\.jsonl:2: not UTF-8 \(byte 0xe9 at "
                                                    r"column 37\)"):
        vision_data.classification_file(folder, tmp_path / "o.tsv", label="label",
                                        multilabel=False)


@pytest.mark.parametrize("paths", ["  - pattern: ./*.jsonl", "  - folder: ./none",
                                   "  - file: ./none.jsonl", "  - pattern: ./rows.json"])
def test_paths_that_name_no_file_are_refused_as_mltable_refuses_them(tmp_path, paths):
    folder = tmp_path / "t"
    (folder / "none").mkdir(parents=True)
    (folder / "MLTable").write_text(f"paths:\n{paths}\ntransformations:\n"
                                    "  - read_json_lines:\n      encoding: utf8\n")
    with pytest.raises(vision_data.DataError, match=r"matches no file .* Azure's mltable "
                                                    r"refuses it: Error Code: ScriptExecution"
                                                    r"\.StreamAccess\.NotFound"):
        list(vision_data.rows(folder))


def test_a_table_of_no_rows_is_refused_before_the_runner_starts(tmp_path):
    with pytest.raises(vision_data.DataError, match="holds no image .* No valid datapoints"):
        vision_data.classification_file(table(tmp_path / "t", []), tmp_path / "o.tsv",
                                        label="label", multilabel=False)


@pytest.mark.parametrize("text", ["paths: !!python/object/apply:os.system ['echo hi']\n",
                                  "paths:\n  - file: !!python/name:os.system\n",
                                  "paths: [\n", "- a list\n"])
def test_an_mltable_file_mltable_would_refuse_is_refused_with_no_traceback(tmp_path, text):
    (tmp_path / "MLTable").write_text(text)
    with pytest.raises(vision_data.DataError, match=r"MLTable: (MLTable yaml is invalid|an "
                                                    r"MLTable file is a mapping)"):
        list(vision_data.rows(tmp_path))


def test_a_detection_table_becomes_one_annotation_line_per_box(tmp_path):
    boxes = [{"label": "can", "topX": 0.1, "topY": 0.1, "bottomX": 0.5, "bottomY": 0.5},
             {"label": "milk", "topX": 0.5, "topY": 0.5, "bottomX": 0.9, "bottomY": 0.9}]
    folder = table(tmp_path / "t", [{"image_url": "i/1.jpg", "label": boxes,
                                     "image_details": {"width": 64}}])
    out = tmp_path / "train.jsonl"
    assert vision_data.detection_file(folder, out, label="label") == 2
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["label"] for line in lines] == boxes
    assert {line["imageUrl"] for line in lines} == {str(folder / "i" / "1.jpg")}
    assert lines[0]["imageDetails"] == {"width": 64}
    with pytest.raises(vision_data.DataError, match="is a list of boxes"):
        vision_data.detection_file(table(tmp_path / "u", [{"image_url": "a", "label": "can"}]),
                                   out, label="label")


def test_weights_come_from_a_local_folder_else_the_model_keeps_its_initialisation(
        tmp_path, monkeypatch, capsys):
    import torch  # here: a worker that runs no test of torch's never imports it

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "hub"))
    monkeypatch.setenv(weights.FOLDER_VARIABLE, str(tmp_path / "mine"))
    url = "https://cdn.example/models-vision-pretrained/tiny-0123abcd.pth"
    missing = weights.load_weights(url)
    assert isinstance(missing, weights.RandomInit)
    assert "tiny-0123abcd.pth are not on this machine" in capsys.readouterr().err
    del missing["head.weight"]  # what the runner does before loading: no KeyError
    assert list(missing.keys()) and weights.keeping_marker(lambda a, b: {})(missing, {}) is missing
    (tmp_path / "mine").mkdir()
    torch.save({"w": torch.ones(2)}, tmp_path / "mine" / "tiny-0123abcd.pth")
    assert torch.equal(weights.load_weights(url, check_hash=False)["w"], torch.ones(2))
    torch.save({"w": torch.zeros(3)}, tmp_path / "mapped as.pt")  # the mapping file's entry
    found = weights.load_weights(url, locate=lambda u: str(tmp_path / "mapped as.pt"))
    assert torch.equal(found["w"], torch.zeros(3))


def test_the_trial_leaves_the_sampled_hyperparameters_for_the_runner_to_parse(monkeypatch):
    monkeypatch.syspath_prepend(str(VISION))
    sys.modules.pop("automl_vision", None)
    import automl_vision

    config, rest = automl_vision.parse([
        "--task=image_object_detection", "--settings={\"a\": 1}", "--training_data", "/t",
        "--best_model", "/m", "--model", '{"model_name":"yolov5"}', "--learning_rate", "0.1"])
    assert (config.task, config.training_data, config.best_model) == (
        "image_object_detection", "/t", "/m")
    assert rest == ["--model", '{"model_name":"yolov5"}', "--learning_rate", "0.1"]
    with pytest.raises(SystemExit):
        automl_vision.parse(["--task=text_ner"])


def test_training_parameters_set_as_text_reach_the_runner_with_azures_types():
    """`--set training_parameters.number_of_epochs=1` gives the string "1"; azure-ai-ml's
    schema loads it as a number, and so does the trial's settings."""
    definition = automl_command(spec(training_parameters={
        "number_of_epochs": "1", "early_stopping": "true", "learning_rate": "0.01",
        "model_name": "resnet18"}), "j").definition
    argv = words(definition["trial"]["command"])
    settings = json.loads(next(w for w in argv if w.startswith("--settings=")).partition("=")[2])
    assert (settings["number_of_epochs"], settings["early_stopping"],
            settings["learning_rate"]) == (1, True, 0.01)
    with pytest.raises(LocalRunError, match=r"j\.training_parameters\.number_of_epochs: 'many'"):
        automl_command(spec(training_parameters={"number_of_epochs": "many"}), "j")


def test_without_a_python_310_an_image_job_is_refused_with_how_to_get_one(monkeypatch):
    from mlops.automl import vision_job

    monkeypatch.setattr(vision_job, "find", lambda minor: None)
    with pytest.raises(LocalRunError, match=r"j: Azure's image runner .* runs on Python 3\.10, "
                                            r"and this machine has none: install one"):
        automl_command(spec(), "j")
