"""An image AutoML job (or pipeline node) as the sweep that runs it on this machine.

Azure runs an image task as a HyperDrive sweep whose every trial is its image runner
(azureml-automl-dnn-vision) with the AutoML settings and the trial's sampled hyperparameters.
Here it is a sweep of the runtime (mlops/orchestrators/sweep.py): `sweep.sampling_algorithm` and
`sweep.early_termination` as written, `search_space` sampled as Azure's sweeps sample it (several
model spaces are one nested choice, passed to the runner as `--model '<json>'`, one space as its
own flags), `limits` as the sweep's limits, the task's primary metric maximized. Each trial runs
vision/automl_vision.py in the runner's own environment (vision/conda.yml, Python 3.10), and the
best trial's MLflow model is the job's `best_model`, as Azure's is.

Refused by name before anything runs: model names that Azure serves from other backends (Hugging
Face and MMDetection models of its registry, which need a download) and names the runner does
not know. Azure's automatic model choice (no search_space) is its service's; here one trial runs
the runner's default model, and a note says so.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from mlops.automl import IMAGE, SHARED_KEYS
from mlops.environments.interpreters import find, how_to_get
from mlops.errors import LocalRunError
from mlops.runtime import AssetMap
from mlops.specs import SpecData

VISION = Path(__file__).resolve().parent / "vision"
RUNNER_PYTHON = "3.10"  # vision/conda.yml's
# azure-ai-ml's default primary metric per task, and the metrics each task's runner logs
METRICS = {"image_classification": ("accuracy", ("accuracy",)),
           "image_classification_multilabel": ("iou", ("iou", "accuracy")),
           "image_object_detection": ("mean_average_precision", ("mean_average_precision",)),
           "image_instance_segmentation": ("mean_average_precision",
                                           ("mean_average_precision",))}
CLASSIFIERS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnest50",
               "resnest101", "mobilenetv2", "seresnext", "vitb16r224", "vits16r224",
               "vitl16r224")
DETECTORS = ("fasterrcnn_resnet18_fpn", "fasterrcnn_resnet34_fpn", "fasterrcnn_resnet50_fpn",
             "fasterrcnn_resnet101_fpn", "fasterrcnn_resnet152_fpn", "retinanet_resnet50_fpn",
             "yolov5")
SEGMENTERS = ("maskrcnn_resnet18_fpn", "maskrcnn_resnet34_fpn", "maskrcnn_resnet50_fpn",
              "maskrcnn_resnet101_fpn", "maskrcnn_resnet152_fpn")
MODELS = {"image_classification": CLASSIFIERS, "image_classification_multilabel": CLASSIFIERS,
          "image_object_detection": DETECTORS, "image_instance_segmentation": SEGMENTERS}
DISTRIBUTIONS = ("choice", "randint", "uniform", "quniform", "loguniform", "qloguniform",
                 "normal", "qnormal", "lognormal", "qlognormal")


def primary_metric(raw: SpecData, task: str, where: str) -> str:
    default, known = METRICS[task]
    given = str(raw.get("primary_metric") or default)
    if given.lower() not in known:
        raise LocalRunError(f"{where}.primary_metric: {given!r} is not a {task} metric of "
                            f"Azure's AutoML ({', '.join(known)})")
    return given.lower()


def check_model(name, task: str, where: str) -> None:
    text = str(name)
    if "/" in text or text.lower().startswith("mmd"):
        raise LocalRunError(f"{where}: model {text!r} is one Azure trains from its model registry "
                            "(Hugging Face or MMDetection weights downloaded at run time), not "
                            "with the image runner this machine has; submit this job to Azure")
    if text not in MODELS[task]:
        raise LocalRunError(f"{where}: model {text!r} is not one of the {task} runner's models "
                            f"({', '.join(MODELS[task])})")


def distribution(value, key: str, task: str, where: str) -> SpecData:
    """One search space entry as a sweep distribution; a plain value is a choice of one."""
    if isinstance(value, dict) and str(value.get("type", "")).lower() in DISTRIBUTIONS:
        found = {**value, "type": str(value["type"]).lower()}
    elif isinstance(value, (str, int, float, bool)):
        found = {"type": "choice", "values": [value]}
    else:
        raise LocalRunError(f"{where}.{key}: a search space entry is a value or a distribution "
                            f"({{type: choice|uniform|..., ...}}), not {value!r}")
    if key == "model_name":
        for name in found.get("values") or []:
            check_model(name, task, f"{where}.model_name")
    return found


def sweep_space(raw: SpecData, task: str, where: str) -> tuple[SpecData, list[str]]:
    """The sweep's search space and the flags a trial passes to the runner."""
    spaces = raw.get("search_space") or []
    if isinstance(spaces, dict):
        spaces = [spaces]
    converted = [{key: distribution(value, key, task, f"{where}.search_space[{n}]")
                  for key, value in (space or {}).items()}
                 for n, space in enumerate(spaces)]
    converted = [space for space in converted if space]
    if len(converted) == 1:
        space = converted[0]
        return space, [f"--{key} ${{{{search_space.{key}}}}}" for key in space]
    if converted:  # Azure's nested choice: the runner reads it from --model as JSON
        return {"model": {"type": "choice", "values": converted}}, \
            ["--model '${{search_space.model}}'"]
    return {}, []


def typed(parameters: SpecData, task: str, where: str) -> SpecData:
    """training_parameters with azure-ai-ml's types: `--set training_parameters.x=1` gives the
    string "1", which the SDK's schema loads as the number Azure hands the runner."""
    from azure.ai.ml._schema.automl.image_vertical import image_model_settings as schemas
    from marshmallow import ValidationError

    schema = (schemas.ImageModelSettingsClassificationSchema if "classification" in task
              else schemas.ImageModelSettingsObjectDetectionSchema)()
    found = {}
    for key, value in parameters.items():
        field = schema.fields.get(key)
        try:
            found[key] = field.deserialize(value) if field is not None and value is not None \
                else value
        except ValidationError as err:
            raise LocalRunError(f"{where}.training_parameters.{key}: {value!r}: "
                                f"{' '.join(map(str, err.messages))}") from None
    return found


def settings_json(raw: SpecData, task: str, metric: str, where: str) -> str:
    settings = typed(dict(raw.get("training_parameters") or {}), task, where)
    if settings.get("model_name"):
        check_model(settings["model_name"], task, f"{where}.training_parameters.model_name")
    settings["primary_metric"] = metric
    if raw.get("validation_data_size") is not None:
        settings["validation_size"] = float(raw["validation_data_size"])
    return json.dumps(settings, separators=(",", ":"), sort_keys=True)


def url_map(assets: AssetMap | None) -> dict[str, str]:
    """The mapping file's entries as absolute paths, for the trial to map image URLs."""
    if assets is None:
        return {}
    return {key: str((assets.base / value).resolve()) for key, value in assets.mapping.items()}


def trial_command(raw: SpecData, task: str, settings: str, flags: list[str]) -> str:
    words = ["python automl_vision.py", f"--task={task}", f"--settings={shlex.quote(settings)}",
             f"--target_column_name={shlex.quote(str(raw.get('target_column_name') or 'label'))}",
             "--training_data ${{inputs.training_data}}"]
    if raw.get("validation_data"):
        words.append("--validation_data ${{inputs.validation_data}}")
    return " ".join([*words, "--best_model ${{outputs.best_model}}", *flags])


def sweep_limits(raw: SpecData, space: SpecData, notes: list[str]) -> SpecData:
    limits = raw.get("limits") or {}
    trials = int(limits.get("max_trials") or 1)
    if not space and trials > 1:
        notes.append(f"limits.max_trials: {trials} with no search_space is Azure's automatic "
                     "model sweep, chosen by its service; here one trial runs the runner's "
                     "default model")
        trials = 1
    found: SpecData = {"max_total_trials": trials,
                       "max_concurrent_trials": int(limits.get("max_concurrent_trials") or 1)}
    if limits.get("timeout_minutes"):
        found["timeout"] = int(float(limits["timeout_minutes"]) * 60)
    return found


def require_runner_python(where: str) -> None:
    """The runner installs on Python 3.10 only (its pmdarima has no 3.11 wheel): without an
    interpreter of 3.10 nothing could run it, so the job is refused before any work."""
    if find(RUNNER_PYTHON) is None:
        raise LocalRunError(f"{where}: Azure's image runner (azureml-automl-dnn-vision) runs on "
                            f"Python {RUNNER_PYTHON}, and this machine has none: "
                            f"{how_to_get(RUNNER_PYTHON)}")


def image_sweep(raw: SpecData, task: str, where: str, *, assets: AssetMap | None,
                outputs: SpecData) -> tuple[SpecData, list[str]]:
    """The sweep definition an image AutoML spec runs as, and what differs from Azure."""
    if not raw.get("training_data"):
        raise LocalRunError(f"{where}.training_data: an image AutoML job trains on an MLTable "
                            "of JSON Lines (training_data: {type: mltable, path: ...})")
    metric = primary_metric(raw, task, where)
    space, flags = sweep_space(raw, task, where)
    notes: list[str] = []
    limits = sweep_limits(raw, space, notes)
    trial = {"code": str(VISION),
             "command": trial_command(raw, task, settings_json(raw, task, metric, where), flags),
             "environment": {"image": IMAGE, "conda_file": str(VISION / "conda.yml")}}
    mapping = url_map(assets)
    if mapping:
        trial["environment_variables"] = {"AZUREML_AUTOML_URL_MAP": json.dumps(mapping)}
    require_runner_python(where)  # after the spec's own errors: they come first
    sweep = raw.get("sweep") or {}
    definition = {key: raw[key] for key in SHARED_KEYS if key in raw}
    definition.update({
        "type": "sweep", "trial": trial, "search_space": space,
        "sampling_algorithm": sweep.get("sampling_algorithm") or "random",
        "objective": {"primary_metric": metric, "goal": "maximize"}, "limits": limits,
        "inputs": {key: raw[key] for key in ("training_data", "validation_data")
                   if raw.get(key)},
        "outputs": outputs})
    if sweep.get("early_termination"):
        definition["early_termination"] = sweep["early_termination"]
    return definition, notes
