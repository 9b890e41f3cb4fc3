"""An AutoML job or pipeline node (type: automl) as what runs it on this machine.

Image tasks run on Azure's own runner, as a sweep of the runtime (vision_job.py). Azure runs a
tabular AutoML job (classification, regression, forecasting) as a search its AutoML service
drives; no machine outside Azure can call that service. Here such a job becomes one command of
the runtime: the FLAML stand-in (standin/automl_standin.py) in its own environment
(standin/conda.yml), with the spec's data as inputs and `best_model` as its output, so snapshot,
environment, MLflow, status, signals, DEBUG= and step reuse are the runtime's own. What differs
from Azure is said once per run (`notes`); what cannot run at all is refused by name before
anything runs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from mlops.automl import IMAGE, SHARED_KEYS
from mlops.automl.standin import algorithms
from mlops.automl.vision_job import image_sweep
from mlops.errors import LocalRunError
from mlops.runtime import AssetMap
from mlops.specs import SpecData

STANDIN = Path(__file__).resolve().parent / "standin"
DATA = ("training_data", "validation_data", "test_data")
TABULAR = ("classification", "regression", "forecasting")
IMAGE_TASKS = ("image_classification", "image_classification_multilabel",
               "image_object_detection", "image_instance_segmentation")
TEXT_TASKS = ("text_classification", "text_classification_multilabel", "text_ner")
# Azure's primary metrics, by how a spec may spell them (AUC_weighted, auc_weighted, AUCWeighted)
METRICS = {name.replace("_", "").lower(): name for name in (
    "accuracy", "AUC_weighted", "norm_macro_recall", "average_precision_score_weighted",
    "precision_score_weighted", "spearman_correlation", "normalized_root_mean_squared_error",
    "r2_score", "normalized_mean_absolute_error")}
CLASSIFICATION_METRICS = ("accuracy", "AUC_weighted", "norm_macro_recall",
                          "average_precision_score_weighted", "precision_score_weighted")
DEFAULT_METRIC = {"classification": "accuracy",  # azure-ai-ml's DEFAULT_PRIMARY_METRIC
                  "regression": "normalized_root_mean_squared_error",
                  "forecasting": "normalized_root_mean_squared_error"}


@dataclass
class Flags:
    """The stand-in's flags (StandinConfig's fields) and what differs from Azure, filled in
    setting by setting."""

    values: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AutoMLCommand:
    """The command definition an AutoML spec runs as, and what differs from Azure."""

    definition: SpecData
    notes: list[str] = field(default_factory=list)


def task_of(raw: SpecData, where: str) -> str:
    task = str(raw.get("task") or raw.get("task_type") or "").lower()
    if task in TEXT_TASKS:
        raise LocalRunError(
            f"{where}: task: {task}: Azure fine-tunes a Hugging Face model for text tasks, "
            "downloaded from the hub at run time, which this machine cannot reach; submit "
            "this job to Azure")
    if task not in TABULAR + IMAGE_TASKS:
        raise LocalRunError(f"{where}: task: {task or '(none)'} is not an AutoML task (one of "
                            f"{', '.join(TABULAR + IMAGE_TASKS + TEXT_TASKS)})")
    return task


def primary_metric(raw: SpecData, task: str, where: str) -> str:
    given = raw.get("primary_metric")
    if given in (None, ""):
        return DEFAULT_METRIC[task]
    name = METRICS.get(str(given).replace("_", "").lower(), "")
    allowed = CLASSIFICATION_METRICS if task == "classification" else \
        tuple(m for m in METRICS.values() if m not in CLASSIFICATION_METRICS)
    if name not in allowed:
        raise LocalRunError(f"{where}.primary_metric: {given!r} is not a {task} metric of "
                            f"Azure's AutoML (one of {', '.join(allowed)})")
    return name


def azure_algorithms(task: str) -> dict[str, str]:
    """Every algorithm name Azure knows for the task, by its spelling without _ and case."""
    from azure.ai.ml import automl

    enum = {"classification": automl.ClassificationModels,
            "regression": automl.RegressionModels,
            "forecasting": automl.ForecastingModels}[task]
    return {m.value.lower(): m.value for m in enum}


def algorithm_flags(training: SpecData, task: str, where: str, flags: Flags) -> None:
    """Allowed and blocked algorithms by Azure's names; one Azure knows that has no stand-in is
    noted, one Azure does not know is refused as Azure refuses it."""
    known = azure_algorithms(task)
    for key in ("allowed_training_algorithms", "blocked_training_algorithms"):
        names = []
        for given in training.get(key) or []:
            azure = known.get(str(given).replace("_", "").replace("-", "").lower())
            if azure is None:
                raise LocalRunError(f"{where}.training.{key}: {given!r} is not a {task} "
                                    f"algorithm of Azure's AutoML ({', '.join(known.values())})")
            if not algorithms.canonical(azure, task):  # blocked: absent here anyway
                if key.startswith("allowed"):
                    flags.notes.append(f"{key}: {azure} has no counterpart in the stand-in")
                continue
            names.append(azure)
        if names:
            flags.values[key] = ",".join(names)
    allowed = str(flags.values.get("allowed_training_algorithms") or "")
    if training.get("allowed_training_algorithms") and not allowed:
        raise LocalRunError(f"{where}.training.allowed_training_algorithms: none of them has a "
                            f"counterpart in the local stand-in (it has "
                            f"{', '.join(algorithms.BY_TASK[task])})")
    blocked = str(flags.values.get("blocked_training_algorithms") or "")
    if not algorithms.estimators(task, list(filter(None, allowed.split(","))),
                                 list(filter(None, blocked.split(",")))):
        raise LocalRunError(f"{where}.training: every algorithm is blocked; nothing to search")


def limit_flags(limits: SpecData, where: str, flags: Flags) -> None:
    for key in ("timeout_minutes", "trial_timeout_minutes", "max_trials", "max_cores_per_trial"):
        if limits.get(key) not in (None, "") and \
                not (key == "max_cores_per_trial" and str(limits[key]) == "-1"):  # all cores
            flags.values[key] = number(limits[key], f"{where}.limits.{key}")
    if limits.get("enable_early_termination") is not None:
        flags.values["enable_early_termination"] = bool(limits["enable_early_termination"])
    if int(limits.get("max_concurrent_trials") or 1) > 1:
        flags.notes.append("limits.max_concurrent_trials: the stand-in runs its trials one at "
                           "a time")
    if limits.get("exit_score") is not None:
        flags.notes.append("limits.exit_score: the stand-in does not stop at a score; it stops "
                           "at max_trials or timeout_minutes")


def number(value, where: str) -> float | int:
    try:
        found = float(value)
    except (TypeError, ValueError):
        raise LocalRunError(f"{where}: {value!r} is not a number") from None
    if found <= 0:
        raise LocalRunError(f"{where}: {value!r}; give a positive number")
    return int(found) if found == int(found) else found


def featurization_flags(featurization: SpecData, flags: Flags) -> None:
    flags.values["featurization"] = str(featurization.get("mode") or "auto").lower()
    categorical = [name for name, kind in (featurization.get("column_name_and_types")
                                           or {}).items() if str(kind).lower() == "categorical"]
    if categorical:
        flags.values["categorical_columns"] = ",".join(map(str, categorical))
    ignored = [k for k in ("transformer_params", "blocked_transformers", "drop_columns",
                           "dataset_language") if featurization.get(k)]
    if ignored:
        flags.notes.append(f"featurization: {', '.join(ignored)} are Azure's featurizers; the "
                           "stand-in featurizes with FLAML's own")


# forecasting settings Azure's featurization acts on that the stand-in does not apply
FORECASTING_UNAPPLIED = ("target_lags", "target_rolling_window_size", "feature_lags",
                         "seasonality", "use_stl", "short_series_handling_config",
                         "target_aggregate_function", "country_or_region_for_holidays",
                         "cv_step_size", "features_unknown_at_forecast_time")


def forecasting_flags(raw: SpecData, where: str, flags: Flags) -> None:
    settings = raw.get("forecasting") or {}
    if not settings.get("time_column_name"):
        raise LocalRunError(f"{where}.forecasting.time_column_name: a forecasting job names its "
                            "time column")
    if settings.get("time_series_id_column_names"):
        raise LocalRunError(f"{where}.forecasting.time_series_id_column_names: the local "
                            "stand-in forecasts one series; many series run on Azure")
    horizon = settings.get("forecast_horizon") or 1
    if str(horizon).lower() != "auto":  # auto: Azure's rule, on the data (standin/series.py)
        horizon = int(number(horizon, f"{where}.forecasting.forecast_horizon"))
    flags.values.update({"time_column_name": settings["time_column_name"],
                         "forecast_horizon": str(horizon).lower()})
    if settings.get("frequency"):
        flags.values["frequency"] = str(settings["frequency"])
    unapplied = [key for key in FORECASTING_UNAPPLIED if settings.get(key) not in (None, "")]
    if unapplied:
        flags.notes.append(f"forecasting: {', '.join(unapplied)} are Azure's forecasting "
                           "featurization; the stand-in makes its own lags")
    if raw.get("test_data_size") not in (None, ""):
        flags.notes.append("test_data_size: Azure does not split a test set off forecasting "
                           "data (azure-ai-ml's forecasting() documentation); no test run")


def search_flags(raw: SpecData, task: str, where: str) -> Flags:
    """The stand-in's flags (StandinConfig) from the spec, and what differs from Azure."""
    target = raw.get("target_column_name")
    if not target:
        raise LocalRunError(f"{where}.target_column_name: a {task} job names the column to "
                            "predict")
    flags = Flags({"task": task, "target_column_name": target,
                   "primary_metric": primary_metric(raw, task, where)})
    algorithm_flags(raw.get("training") or {}, task, where, flags)
    splits = ["validation_data_size", "n_cross_validations"] + \
        ([] if task == "forecasting" else ["test_data_size"])  # forecasting: noted below
    for key in splits:
        if raw.get(key) not in (None, ""):
            flags.values[key] = raw[key] if str(raw[key]) == "auto" else number(raw[key], where)
    if raw.get("weight_column_name"):
        flags.values["weight_column_name"] = raw["weight_column_name"]
    limit_flags(raw.get("limits") or {}, where, flags)
    featurization_flags(raw.get("featurization") or {}, flags)
    if task == "forecasting":
        forecasting_flags(raw, where, flags)
    if raw.get("cv_split_column_names"):
        flags.notes.append("cv_split_column_names: not applied by the stand-in (its own folds)")
    return flags


def command_line(flags: dict[str, object], data: list[str]) -> str:
    """`--key=value`, quoted for bash: a column named "-y" or "a b; rm" stays one value."""
    words = [f"--{key}={shlex.quote(str(value))}" for key, value in flags.items()]
    words += [f"--{key} ${{{{inputs.{key}}}}}" for key in data]
    return " ".join(["python automl_standin.py", *words, "--best_model ${{outputs.best_model}}"])


def automl_outputs(raw: SpecData) -> SpecData:
    """An AutoML job's outputs: `best_model` (an MLflow model) whether or not it declares it."""
    return {"best_model": {"type": "mlflow_model"}, **(raw.get("outputs") or {})}


def automl_command(raw: SpecData, where: str, assets: AssetMap | None = None) -> AutoMLCommand:
    """The definition an AutoML spec runs as here: for a tabular task a command (a command job,
    or an inline command node) of the stand-in, for an image task a sweep of Azure's runner
    (vision_job.py; `assets` maps its image URLs); LocalRunError for a task or setting that
    cannot run."""
    task = task_of(raw, where)
    if task in IMAGE_TASKS:
        definition, notes = image_sweep(raw, task, where, assets=assets,
                                        outputs=automl_outputs(raw))
        return AutoMLCommand(definition, [f"note: {where}: {note}" for note in notes])
    flags = search_flags(raw, task, where)
    if not raw.get("training_data"):
        raise LocalRunError(f"{where}.training_data: an AutoML job trains on an MLTable "
                            "(training_data: {type: mltable, path: ...})")
    data = [key for key in DATA if raw.get(key) not in (None, "")]
    definition = {key: raw[key] for key in SHARED_KEYS if key in raw}
    definition.update({
        "type": "command", "command": command_line(flags.values, data), "code": str(STANDIN),
        "environment": {"image": IMAGE, "conda_file": str(STANDIN / "conda.yml")},
        "inputs": {key: raw[key] for key in data}, "outputs": automl_outputs(raw)})
    return AutoMLCommand(definition, [f"note: {where}: {note}" for note in flags.notes])
