"""Azure's AutoML algorithm names and the FLAML estimator that stands in for each.

Pure data, no imports: the local runtime reads it to check a spec before any work, and the
stand-in reads it inside the job. Names are Azure's (azure.ai.ml.automl ClassificationModels,
RegressionModels, ForecastingModels); an algorithm absent here has no FLAML counterpart.
"""

# In the order the search starts from: Azure's first trials are LightGBM and XGBoost too.
CLASSIFICATION = {
    "LightGBM": "lgbm",
    "XGBoostClassifier": "xgboost",
    "RandomForest": "rf",
    "ExtremeRandomTrees": "extra_tree",
    "LogisticRegression": "lrl2",
    "GradientBoosting": "histgb",  # scikit-learn's histogram gradient boosting
    "KNN": "kneighbor",
    "SGD": "sgd",
    "LinearSVM": "svc",  # FLAML's svc is scikit-learn's LinearSVC
}
REGRESSION = {
    "LightGBM": "lgbm",
    "XGBoostRegressor": "xgboost",
    "RandomForest": "rf",
    "ExtremeRandomTrees": "extra_tree",
    "ElasticNet": "enet",
    "LassoLars": "lassolars",
    "GradientBoosting": "histgb",
    "KNN": "kneighbor",
    "SGD": "sgd",
}
FORECASTING = {
    "LightGBM": "lgbm",
    "Naive": "naive",
    "SeasonalNaive": "snaive",
    "Average": "avg",
    "SeasonalAverage": "savg",
    "AutoArima": "arima",
    "Arimax": "sarimax",
    "ExponentialSmoothing": "holt-winters",
    "LassoLars": "lassolars",
    "RandomForest": "rf",
    "ExtremeRandomTrees": "extra_tree",
    "XGBoostRegressor": "xgboost",
}
BY_TASK = {"classification": CLASSIFICATION, "regression": REGRESSION,
           "forecasting": FORECASTING}


def canonical(name: str, task: str) -> str:
    """An algorithm as a spec may spell it (light_gbm, LightGBM, lightgbm) -> Azure's name, or
    "" when the task has no such stand-in."""
    key = name.replace("_", "").replace("-", "").lower()
    return next((azure for azure in BY_TASK[task]
                 if azure.lower() == key), "")


def estimators(task: str, allowed: list[str], blocked: list[str]) -> dict[str, str]:
    """Azure name -> FLAML estimator for the algorithms the search may use."""
    table = BY_TASK[task]
    chosen = [canonical(n, task) for n in allowed] if allowed else list(table)
    dropped = {canonical(n, task) for n in blocked}
    return {name: table[name] for name in chosen if name and name not in dropped}
