"""AutoML specs (type: automl) become the command that runs them here (mlops/automl/translate.py):
what is mapped, what is noted, what is refused before any work; and the stand-in's own pure
parts (Azure's metric names, its algorithm table, Azure's validation rule by rows)."""

from __future__ import annotations

import shlex
import sys

import numpy as np
import pytest
from support import ROOT

from mlops.automl.standin import algorithms
from mlops.automl.translate import STANDIN, automl_command
from mlops.checks.prepare import prepare_job
from mlops.errors import LocalRunError
from mlops.orchestrators.graph import build_nodes
from mlops.runtime.uris import AssetMap
from mlops.specs import load_spec

FIXTURES = ROOT / "tests" / "fixtures" / "automl"


def spec(**over) -> dict:
    base = {"type": "automl", "task": "classification", "target_column_name": "state",
            "training_data": {"type": "mltable", "path": "./fruit-train"}}
    return {**base, **over}


def flags(command: str) -> dict[str, str]:
    """The stand-in's flags as argparse reads them (--key=value, or --key value)."""
    words = shlex.split(command.replace("${{", "<").replace("}}", ">"))[2:]
    found, words = {}, iter(words)
    for word in words:
        key, _, value = word.partition("=")
        found[key] = value if _ else next(words)
    return found


def test_the_classification_fixture_runs_the_stand_in_with_its_settings_as_flags():
    data = load_spec(FIXTURES / "classification.yml").data
    built = automl_command(data, "classification.yml")
    definition = built.definition
    assert definition["code"] == str(STANDIN)
    assert definition["environment"]["conda_file"] == str(STANDIN / "conda.yml")
    assert definition["outputs"] == {"best_model": {"type": "mlflow_model"}}
    assert set(definition["inputs"]) == {"training_data", "validation_data", "test_data"}
    assert flags(definition["command"]) == {
        "--task": "classification", "--target_column_name": "state",
        "--primary_metric": "AUC_weighted", "--allowed_training_algorithms":
        "LightGBM,LogisticRegression", "--max_trials": "4", "--timeout_minutes": "5",
        "--enable_early_termination": "True", "--featurization": "auto",
        "--training_data": "<inputs.training_data>", "--validation_data":
        "<inputs.validation_data>", "--test_data": "<inputs.test_data>",
        "--best_model": "<outputs.best_model>"}
    assert definition["experiment_name"] == "automl-fixtures" and built.notes == []


@pytest.mark.parametrize("given", ["AUC_weighted", "auc_weighted", "AUCWeighted"])
def test_a_primary_metric_is_read_in_any_spelling_azure_ai_ml_takes(given):
    command = automl_command(spec(primary_metric=given), "j").definition["command"]
    assert flags(command)["--primary_metric"] == "AUC_weighted"


@pytest.mark.parametrize(("task", "metric"), [
    ("classification", "accuracy"), ("regression", "normalized_root_mean_squared_error"),
    ("forecasting", "normalized_root_mean_squared_error")])
def test_without_a_primary_metric_the_tasks_default_is_azure_ai_mls(task, metric):
    data = spec(task=task, forecasting={"time_column_name": "date"})
    assert flags(automl_command(data, "j").definition["command"])["--primary_metric"] == metric


def test_a_metric_of_another_task_is_refused_with_the_tasks_own():
    with pytest.raises(LocalRunError, match=r"j\.primary_metric: 'r2_score' is not a "
                                            r"classification metric .*accuracy, AUC_weighted"):
        automl_command(spec(primary_metric="r2_score"), "j")


def test_algorithms_are_azures_names_in_any_spelling_and_one_without_a_stand_in_is_noted():
    built = automl_command(spec(training={"allowed_training_algorithms": [
        "light_gbm", "xg_boost_classifier", "decision_tree"]}), "j")
    assert flags(built.definition["command"])["--allowed_training_algorithms"] == \
        "LightGBM,XGBoostClassifier"
    assert built.notes == ["note: j: allowed_training_algorithms: DecisionTree has no "
                           "counterpart in the stand-in"]


@pytest.mark.parametrize(("training", "message"), [
    ({"allowed_training_algorithms": ["gradient_boostin"]},
     r"'gradient_boostin' is not a classification algorithm of Azure's AutoML"),
    ({"allowed_training_algorithms": ["DecisionTree", "SVM"]},
     r"none of them has a counterpart in the local stand-in"),
    ({"blocked_training_algorithms": list(algorithms.CLASSIFICATION)},
     r"every algorithm is blocked"),
])
def test_an_algorithm_list_nothing_can_run_from_is_refused(training, message):
    with pytest.raises(LocalRunError, match=message):
        automl_command(spec(training=training), "j")


@pytest.mark.parametrize(("task", "reason"), [
    ("text_ner", "Hugging Face model"),
    ("translation", "is not an AutoML task")])
def test_tasks_the_stand_in_cannot_run_are_refused_with_the_reason(task, reason):
    with pytest.raises(LocalRunError, match=reason):
        automl_command(spec(task=task), "j")


@pytest.mark.parametrize(("over", "message"), [
    ({"target_column_name": None}, r"j\.target_column_name: a classification job names"),
    ({"training_data": None}, r"j\.training_data: an AutoML job trains on an MLTable"),
    ({"limits": {"max_trials": "many"}}, r"j\.limits\.max_trials: 'many' is not a number"),
    ({"task": "forecasting"}, r"forecasting\.time_column_name: a forecasting job names"),
    ({"task": "forecasting", "forecasting": {"time_column_name": "d",
                                             "time_series_id_column_names": ["store"]}},
     r"forecasts one series")])
def test_a_setting_the_stand_in_cannot_run_is_refused_by_its_key(over, message):
    with pytest.raises(LocalRunError, match=message):
        automl_command(spec(**over), "j")


def test_what_the_stand_in_does_differently_is_noted_once_per_setting():
    built = automl_command(spec(limits={"max_concurrent_trials": 4, "exit_score": 0.9},
                                featurization={"mode": "custom",
                                               "blocked_transformers": ["LabelEncoder"],
                                               "column_name_and_types": {"n c": "Categorical"}},
                                weight_column_name="w"), "j")
    assert [note.split(": ", 2)[2].split(":")[0] for note in built.notes] == [
        "limits.max_concurrent_trials", "limits.exit_score", "featurization"]
    found = flags(built.definition["command"])
    assert found["--categorical_columns"] == "n c" and found["--featurization"] == "custom"
    assert found["--weight_column_name"] == "w"  # each row's weight in the search


def test_an_automl_node_is_a_command_node_bound_to_the_step_before_it():
    data = load_spec(FIXTURES / "pipeline.yml").data
    nodes = build_nodes(data["jobs"], FIXTURES, AssetMap(ROOT / "assets/local-paths.yml"),
                        "pipeline.yml")
    assert [n.name for n in nodes] == ["prep", "search", "score"]
    search = nodes[1]
    assert search.kind == "command" and search.inline
    assert search.raw["inputs"] == {
        "training_data": "${{parent.jobs.prep.outputs.train}}",
        "validation_data": "${{parent.jobs.prep.outputs.valid}}"}
    assert search.raw["outputs"]["best_model"]["name"] == "automl-fixture-fruit"


def test_a_published_style_automl_spec_passes_azure_ai_mls_loader_and_a_bad_one_does_not(
        tmp_path):
    job = prepare_job(FIXTURES / "classification.yml", [], [], AssetMap(tmp_path / "none.yml"))
    assert job.spec.kind == "autoMLJob"
    with pytest.raises(LocalRunError, match=r"limits"):
        prepare_job(FIXTURES / "classification.yml", ["limits.max_trials=lots"], [],
                    AssetMap(tmp_path / "none.yml"))
    image = tmp_path / "image.yml"
    image.write_text("type: automl\ntask: image_classification\ntarget_column_name: label\n"
                     f"training_data:\n  type: mltable\n  path: {FIXTURES / 'fruit-train'}\n"
                     "limits:\n  max_trials: 2\ntraining_parameters:\n  model_name: resnet9\n")
    with pytest.raises(LocalRunError, match=r"image\.yml\.training_parameters\.model_name: "
                                            r"model 'resnet9' is not one of"):
        prepare_job(image, [], [], AssetMap(tmp_path / "none.yml"))


@pytest.fixture
def azure_metrics():
    """The stand-in's metrics (scikit-learn and SciPy: imported by the worker that runs these
    tests alone, not by every worker's collection)."""
    from mlops.automl.standin import azure_metrics

    return azure_metrics


def test_azures_classification_metrics_carry_azures_names_and_definitions(azure_metrics):
    y = np.array(["a", "a", "b", "b", "c", "c"])
    predicted = np.array(["a", "b", "b", "b", "c", "a"])
    proba = np.array([[.8, .1, .1], [.3, .6, .1], [.1, .8, .1], [.2, .7, .1], [.1, .1, .8],
                      [.5, .2, .3]])
    found = azure_metrics.classification(y, predicted, proba, ["a", "b", "c"])
    assert found["accuracy"] == pytest.approx(4 / 6)
    assert found["norm_macro_recall"] == pytest.approx((4 / 6 - 1 / 3) / (1 - 1 / 3))
    assert {"AUC_weighted", "average_precision_score_weighted", "log_loss",
            "precision_score_weighted", "f1_score_macro", "matthews_correlation"} <= set(found)
    assert "AUC_weighted" not in azure_metrics.classification(y, predicted, None, ["a", "b", "c"])
    assert azure_metrics.loss(found, "accuracy") == pytest.approx(-4 / 6)


def test_azures_regression_errors_are_normalized_by_the_targets_range(azure_metrics):
    found = azure_metrics.regression([0.0, 10.0, 20.0], [1.0, 10.0, 17.0], y_range=20.0)
    assert found["root_mean_squared_error"] == pytest.approx((10 / 3) ** 0.5)
    assert found["normalized_root_mean_squared_error"] == pytest.approx((10 / 3) ** 0.5 / 20)
    assert found["normalized_mean_absolute_error"] == pytest.approx(4 / 3 / 20)
    assert azure_metrics.loss(found, "normalized_mean_absolute_error") == pytest.approx(4 / 60)
    assert azure_metrics.loss({}, "r2_score") == float("inf")


@pytest.mark.parametrize(("rows", "expected"), [
    (999, {"eval_method": "cv", "n_splits": 10}), (20000, {"eval_method": "cv", "n_splits": 3}),
    (20001, {"eval_method": "holdout", "split_ratio": 0.1})])
def test_without_validation_settings_azures_rule_by_rows_picks_folds_or_a_holdout(
        rows, expected, monkeypatch):
    monkeypatch.syspath_prepend(str(STANDIN))  # the stand-in's modules import each other
    search = pytest.importorskip("search")
    config = type("Config", (), {"validation_data_size": 0.0, "n_cross_validations": ""})
    data = search.Data(X=None, y=[0] * rows)
    assert search.validation(config, data) == expected
    config.n_cross_validations = "5"
    assert search.validation(config, data) == {"eval_method": "cv", "n_splits": 5}
    sys.modules.pop("search", None)


@pytest.mark.parametrize(("alias", "now"), [("H", "h"), ("15T", "15min"), ("W-THU", "W-THU"),
                                            ("M", "ME"), ("D", "D")])
def test_a_forecasting_frequency_in_azures_older_pandas_spelling_is_read(alias, now, monkeypatch):
    monkeypatch.syspath_prepend(str(STANDIN))
    series = pytest.importorskip("series")
    import pandas as pd

    assert series.offset(alias) == pd.tseries.frequencies.to_offset(now)
    sys.modules.pop("series", None)


@pytest.mark.parametrize(("frequency", "periods"), [
    ("h", 24), ("2h", 12), ("5h", 1), ("15min", 4), ("7min", 1), ("D", 7), ("7D", 4),
    ("3D", 1), ("W-SUN", 4), ("MS", 12), ("ME", 12), ("5MS", 1), ("QS", 4), ("YS", 1),
    ("2YS", 1), ("B", 1)])
def test_forecast_horizon_auto_is_one_season_of_the_frequency_by_azures_rule(
        frequency, periods, monkeypatch):
    """Azure's heuristic (azureml-training-tabular): a season's periods, else the default 1."""
    monkeypatch.syspath_prepend(str(STANDIN))
    series = pytest.importorskip("series")
    assert series.horizon("auto", frequency) == periods
    assert series.horizon("AUTO", frequency) == periods and series.horizon("48", frequency) == 48
    sys.modules.pop("series", None)


def test_test_data_size_holds_a_stratified_share_of_training_out_for_the_test_run(monkeypatch):
    monkeypatch.syspath_prepend(str(STANDIN))
    search = pytest.importorskip("search")
    import pandas as pd

    y = pd.Series(["a"] * 80 + ["b"] * 20)
    X = pd.DataFrame({"x": range(100)})
    data = search.Data(X=X, y=y, weights=pd.Series([float(i) for i in range(100)]))
    config = type("Config", (), {"task": "classification", "test_data_size": 0.2, "seed": 1})
    search.hold_out_test(config, data)
    X_test, y_test = data.test
    assert (len(data.X), len(X_test)) == (80, 20)
    assert y_test.value_counts().to_dict() == {"a": 16, "b": 4}  # the classes' shares kept
    assert list(data.weights) == [float(v) for v in data.X["x"]]  # weights follow their rows
    assert not set(X_test["x"]) & set(data.X["x"])
    for module in ("search", "series", "azure_metrics"):
        sys.modules.pop(module, None)


def test_a_hostile_column_name_reaches_the_stand_in_as_one_value():
    """A target named like a flag, or with shell syntax, is one argparse value."""
    sys.path.insert(0, str(STANDIN))
    try:
        import automl_standin
    finally:
        sys.path.remove(str(STANDIN))
    for name in ("-y", "a b; rm -rf x", "$(boom)", "--task"):
        command = automl_command(spec(target_column_name=name), "j").definition["command"]
        argv = shlex.split(command.replace("${{", "<").replace("}}", ">"))[2:]
        parsed = automl_standin.build_parser().parse_args(argv)
        assert parsed.target_column_name == name and parsed.task == "classification"
    for module in ("automl_standin", "algorithms", "search", "tracking", "azure_metrics"):
        sys.modules.pop(module, None)  # the stand-in's top-level names, imported from its folder


def test_forecasting_settings_pass_auto_horizons_and_note_what_the_stand_in_does_not_apply():
    forecasting = {"time_column_name": "t", "forecast_horizon": "auto", "target_lags": [12],
                   "target_rolling_window_size": 4, "frequency": "H"}
    built = automl_command(spec(task="forecasting", forecasting=forecasting, test_data_size=0.1,
                                training={"blocked_training_algorithms": ["prophet"]}), "j")
    found = flags(built.definition["command"])
    assert found["--forecast_horizon"] == "auto" and found["--frequency"] == "H"
    assert "--test_data_size" not in found
    assert [note.split(": ", 2)[2].split(":")[0] for note in built.notes] == [
        "forecasting", "test_data_size"]  # a blocked algorithm absent here needs no note
    assert "target_lags, target_rolling_window_size" in built.notes[0]
    forecasting["forecast_horizon"] = 48
    assert flags(automl_command(spec(task="forecasting", forecasting=forecasting), "j")
                 .definition["command"])["--forecast_horizon"] == "48"
    forecasting["forecast_horizon"] = "soon"
    with pytest.raises(LocalRunError, match=r"forecast_horizon: 'soon' is not a number"):
        automl_command(spec(task="forecasting", forecasting=forecasting), "j")


def test_test_data_size_reaches_the_stand_in_for_classification_and_regression():
    for task in ("classification", "regression"):
        command = automl_command(spec(task=task, test_data_size=0.2), "j").definition["command"]
        assert flags(command)["--test_data_size"] == "0.2"


def test_max_cores_per_trial_minus_one_is_every_core_as_on_azure():
    command = automl_command(spec(limits={"max_cores_per_trial": -1}), "j").definition["command"]
    assert "--max_cores_per_trial" not in command  # the stand-in's default, -1: every core
