"""The stand-in's search: data from MLTable, FLAML with Azure's settings mapped, trials read back.

Validation follows Azure's rule: validation_data when given; else validation_data_size as a
holdout share; else n_cross_validations folds; else, by the number of training rows, 10 folds
under 1,000 rows, 3 folds up to 20,000, and a 10% holdout above. test_data_size holds its
share of training_data out for the test run first, as Azure does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import azure_metrics
import pandas as pd
import series
from sklearn.model_selection import train_test_split

AZURE_TIMEOUT_MINUTES = 6 * 24 * 60  # limits.timeout_minutes when a spec sets none


@dataclass(kw_only=True)
class Data:
    X: pd.DataFrame
    y: pd.Series
    validation: tuple | None = None  # (X, y)
    test: tuple | None = None
    weights: pd.Series | None = None  # weight_column_name's values for the training rows
    horizon: int = 1  # forecasting: periods ahead (forecast_horizon, `auto` resolved)
    y_range: float = 0.0  # the target's range, which Azure's normalized errors divide by


@dataclass(kw_only=True)
class TrialRecord:
    number: int
    algorithm: str  # Azure's name
    estimator: str  # FLAML's
    config: dict[str, object]
    metrics: dict[str, float]
    seconds: float


@dataclass
class Outcome:
    automl: object  # the fitted flaml.AutoML
    trials: list[TrialRecord] = field(default_factory=list)
    best: TrialRecord | None = None


def read_table(folder: str, config, role: str) -> pd.DataFrame:
    """The table as Azure's mltable reads it; what it refuses stops the job with mltable's
    code and words on one line (an encoding error at its file and line), no traceback."""
    from _mlops_mltable_worker import TableError, load_table  # the runtime's, in every task

    try:
        frame = load_table(folder)
    except TableError as err:
        raise SystemExit(f"error: {role}: Azure's mltable could not read {folder}: {err}") \
            from None
    for name in (n for n in config.categorical_columns.split(",") if n):
        if name in frame.columns:
            frame[name] = frame[name].astype("category")
    target = config.target_column_name
    if target not in frame.columns:
        raise SystemExit(f"error: {role} has no column {target!r} (target_column_name); its "
                         f"columns: {', '.join(map(str, frame.columns))}")
    return frame[frame[target].notna()]  # Azure drops rows without a target


def split(frame: pd.DataFrame, config) -> tuple:
    """(X, y, the series' frequency: None unless forecasting)."""
    frame, frequency = frame.reset_index(drop=True), None
    if config.task == "forecasting":
        frame, frequency = series.regular(frame, config)
        first = [config.time_column_name]
        frame = frame[first + [c for c in frame.columns if c not in first]]
    target = config.target_column_name
    return frame.drop(columns=[target]), frame[target], frequency


def load_data(config) -> Data:
    X, y, frequency = split(read_table(config.training_data, config, "training_data"), config)
    data = Data(X=X, y=y)
    if config.task == "forecasting":
        data.horizon = series.horizon(config.forecast_horizon, frequency)
    if config.weight_column_name:
        if config.weight_column_name not in X.columns:
            raise SystemExit(f"error: training_data has no column "
                             f"{config.weight_column_name!r} (weight_column_name)")
        data.weights = X.pop(config.weight_column_name)
    if config.validation_data:
        data.validation = split(read_table(config.validation_data, config,
                                           "validation_data"), config)[:2]
    if config.test_data:
        data.test = split(read_table(config.test_data, config, "test_data"), config)[:2]
    elif config.test_data_size:
        hold_out_test(config, data)
    for part in (data.validation, data.test):  # weights are not features of the model
        if part is not None and config.weight_column_name in part[0].columns:
            part[0].pop(config.weight_column_name)
    if config.task != "classification":
        values = pd.concat([y] + ([data.validation[1]] if data.validation else []))
        data.y_range = float(values.max() - values.min())
    return data


def hold_out_test(config, data: Data) -> None:
    """test_data_size: Azure's test run scores this share of training_data, held out before
    any validation split: stratified by class for classification, at random for regression."""
    parts = [data.X, data.y] + ([data.weights] if data.weights is not None else [])
    try:
        found = train_test_split(*parts, test_size=config.test_data_size, random_state=config.seed,
                                 stratify=data.y if config.task == "classification" else None)
    except ValueError:  # a class too rare to stratify: a random share, as for regression
        found = train_test_split(*parts, test_size=config.test_data_size, random_state=config.seed)
    found = [part.reset_index(drop=True) for part in found]
    data.X, data.y, data.test = found[0], found[2], (found[1], found[3])
    if data.weights is not None:
        data.weights = found[4]
    print(f"test_data_size: {len(found[1])} of {len(found[0]) + len(found[1])} training rows "
          "held out for the test run", flush=True)


def validation(config, data: Data) -> dict[str, object]:
    if data.validation is not None:
        return {"eval_method": "holdout", "X_val": data.validation[0],
                "y_val": data.validation[1]}
    if config.validation_data_size:
        return {"eval_method": "holdout", "split_ratio": config.validation_data_size}
    folds = config.n_cross_validations
    if folds and folds != "auto":
        return {"eval_method": "cv", "n_splits": int(folds)}
    rows = len(data.y)
    if rows > 20000:
        return {"eval_method": "holdout", "split_ratio": 0.1}
    return {"eval_method": "cv", "n_splits": 10 if rows < 1000 else 3}


def trial_metrics(config, data: Data):
    """FLAML's metric hook: Azure's metrics on the trial's validation fold, and its loss."""

    def metric(X_val, y_val, estimator, labels, X_train, y_train, *args, **kwargs):
        predicted = estimator.predict(X_val)
        if y_val is None:  # a forecast: FLAML hands over the held-out window as a dataset
            y_val = X_val.test_data[X_val.target_names[0]]
        if config.task == "classification":
            found = azure_metrics.classification(y_val, predicted, probabilities(estimator, X_val),
                                                 classes(estimator, y_train, y_val))
        else:
            found = azure_metrics.regression(y_val, predicted, data.y_range)
        found = {k: float(v) for k, v in found.items()}
        return azure_metrics.loss(found, config.primary_metric), found

    return metric


def classes(estimator, *targets) -> list:
    """The labels in the order of predict_proba's columns."""
    try:
        return list(estimator.classes_)
    except AttributeError:
        return sorted(set().union(*(set(t) for t in targets)))


def probabilities(estimator, X):
    """Class probabilities; None for a model without them (LinearSVM), as Azure then logs no
    AUC, average precision or log loss."""
    try:
        return estimator.predict_proba(X)
    except (AttributeError, NotImplementedError):
        return None


def limits(config) -> dict[str, object]:
    found = {"max_iter": config.max_trials,
             "time_budget": (config.timeout_minutes or AZURE_TIMEOUT_MINUTES) * 60,
             "early_stop": config.enable_early_termination, "n_jobs": config.max_cores_per_trial}
    if config.trial_timeout_minutes:
        found["train_time_limit"] = config.trial_timeout_minutes * 60
    return found


def searcher():
    """FLAML's AutoML, except that one iteration is one evaluated trial, as on Azure: FLAML
    (2.7, pinned in conda.yml) skips evaluating when max_iter is 1 and it would retrain."""
    from flaml import AutoML

    class OneTrialEvaluated(AutoML):
        def _search(self):
            if self._max_iter == 1:
                self._state.retrain_final = False
            return super()._search()

    return OneTrialEvaluated()


def run(config, data: Data, chosen: dict[str, str], flaml_task: str) -> Outcome:
    log = Path("outputs", "automl_trials.jsonl").resolve()  # ./outputs: the run's artifacts
    log.parent.mkdir(parents=True, exist_ok=True)
    automl = searcher()
    extra = {}
    if data.weights is not None:
        extra["sample_weight"] = data.weights.to_numpy()
    if config.task == "forecasting":
        extra["period"] = data.horizon
        import statsmodels.tools.sm_exceptions  # noqa: F401 - it sets its warnings to "always"

        warnings.filterwarnings("ignore", message="No frequency information")  # each fit
    automl.fit(X_train=data.X, y_train=data.y, task=flaml_task,
               metric=trial_metrics(config, data), estimator_list=list(chosen.values()),
               log_file_name=str(log), log_type="all", seed=config.seed, verbose=1,
               skip_transform=config.featurization == "off", mlflow_logging=False,
               learner_selector="roundrobin",  # every algorithm gets trials, as on Azure
               **validation(config, data), **limits(config), **extra)
    automl.__class__ = automl.__class__.__base__  # the model pickles as flaml's own AutoML
    automl._state.metric = config.primary_metric  # a name, not the hook (it holds the data)
    by_estimator = {flaml: azure for azure, flaml in chosen.items()}
    outcome = Outcome(automl, read_trials(log, by_estimator))
    if automl.best_estimator is None or not outcome.trials:
        raise SystemExit("error: no trial completed within the limits (raise "
                         "limits.timeout_minutes or limits.max_trials)")
    best = automl.best_config_per_estimator[automl.best_estimator]
    outcome.best = next((t for t in outcome.trials if t.estimator == automl.best_estimator
                         and t.config == best), outcome.trials[-1])
    return outcome


def read_trials(log: Path, by_estimator: dict[str, str]) -> list[TrialRecord]:
    found = []
    for line in log.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if "learner" not in record:
            continue
        found.append(TrialRecord(number=len(found), algorithm=by_estimator.get(record["learner"],
                                                              record["learner"]),
                                 estimator=record["learner"], config=record.get("config") or {},
                                 metrics=record.get("logged_metric") or {},
                                 seconds=float(record.get("trial_time") or 0)))
    return found


def requirements() -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("flaml", "lightgbm", "xgboost-cpu", "scikit-learn", "scipy", "statsmodels",
                 "pandas", "numpy", "cloudpickle", "mlflow-skinny"):
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{name}=={version(name)}")
    return found


def save_model(outcome: Outcome, data: Data, folder: Path, run_id: str | None) -> Path:
    """The best model as an MLflow model in `folder`: written beside it, then moved in. Its
    MLmodel names the best child run (run_id), as a model Azure's AutoML logged does."""
    import mlflow.sklearn
    from mlflow.models import Model, infer_signature

    # MLflow warns that cloudpickle runs code when loaded: so does every AutoML model Azure
    # writes (and loads with the packages its requirements name)
    logging.getLogger("mlflow.sklearn").setLevel(logging.ERROR)

    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / ".partial-mlflow-model"
    shutil.rmtree(partial, ignore_errors=True)
    sample = data.X.head(5)
    mlflow.sklearn.save_model(outcome.automl, str(partial), serialization_format="cloudpickle",
                              signature=infer_signature(sample, outcome.automl.predict(sample)),
                              pip_requirements=requirements(),
                              mlflow_model=Model(run_id=run_id))
    for entry in partial.iterdir():
        target = folder / entry.name
        if target.is_dir():
            shutil.rmtree(target)
        entry.replace(target)
    partial.rmdir()
    return folder


def test_metrics(config, outcome: Outcome, data: Data) -> dict[str, float]:
    """test_data scored by the best model (Azure's test run), under Azure's metric names."""
    if data.test is None:
        return {}
    X, y = data.test
    predicted = outcome.automl.predict(X)
    if config.task == "classification":
        labels = list(outcome.automl.classes_)
        proba = outcome.automl.predict_proba(X)
        found = azure_metrics.classification(y, predicted, proba, labels)
    else:
        found = azure_metrics.regression(y, predicted, data.y_range)
    return {k: float(v) for k, v in found.items()}
