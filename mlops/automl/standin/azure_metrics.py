"""The metrics Azure's AutoML logs for a trial, under Azure's names, from one validation set.

Classification: accuracy, AUC_*, average_precision_score_*, balanced_accuracy, f1_score_*,
log_loss, matthews_correlation, norm_macro_recall, precision_score_*, recall_score_*.
Regression and forecasting: r2_score, spearman_correlation, explained_variance,
(normalized_)root_mean_squared_error, (normalized_)mean_absolute_error,
(normalized_)median_absolute_error, normalized by the range of the target, as Azure does.
"""

import math

import numpy as np
from scipy.stats import spearmanr
from sklearn import metrics as sk

# the primary metrics Azure offers, and whether a higher value is better
GOALS = {
    "accuracy": True, "AUC_weighted": True, "norm_macro_recall": True,
    "average_precision_score_weighted": True, "precision_score_weighted": True,
    "spearman_correlation": True, "r2_score": True,
    "normalized_root_mean_squared_error": False, "normalized_mean_absolute_error": False,
}


def classification(y_true, y_pred, proba, labels) -> dict[str, float]:
    found = {"accuracy": sk.accuracy_score(y_true, y_pred),
             "balanced_accuracy": sk.balanced_accuracy_score(y_true, y_pred),
             "matthews_correlation": sk.matthews_corrcoef(y_true, y_pred)}
    for average in ("weighted", "macro", "micro"):
        found[f"precision_score_{average}"] = sk.precision_score(
            y_true, y_pred, average=average, zero_division=0)
        found[f"recall_score_{average}"] = sk.recall_score(
            y_true, y_pred, average=average, zero_division=0)
        found[f"f1_score_{average}"] = sk.f1_score(y_true, y_pred, average=average,
                                                   zero_division=0)
    chance = 1.0 / max(len(labels), 2)
    found["norm_macro_recall"] = max(0.0, (found["recall_score_macro"] - chance) / (1 - chance))
    if proba is not None:
        found.update(probability_metrics(y_true, proba, labels))
    return found


def probability_metrics(y_true, proba, labels) -> dict[str, float]:
    """AUC, average precision and log loss: from class probabilities, one column per label."""
    onehot = np.column_stack([np.asarray(y_true) == label for label in labels]).astype(int)
    found = {"log_loss": sk.log_loss(y_true, proba, labels=labels)}
    present = onehot.sum(axis=0) > 0
    if present.sum() < 2:  # one class only in this validation set: AUC is undefined
        return found
    onehot, proba = onehot[:, present], np.asarray(proba)[:, present]
    for average in ("weighted", "macro", "micro"):
        found[f"AUC_{average}"] = sk.roc_auc_score(onehot, proba, average=average)
        found[f"average_precision_score_{average}"] = sk.average_precision_score(
            onehot, proba, average=average)
    return found


def regression(y_true, y_pred, y_range: float) -> dict[str, float]:
    y_true, y_pred = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    scale = y_range if y_range > 0 else 1.0
    rmse = math.sqrt(sk.mean_squared_error(y_true, y_pred))
    mae = sk.mean_absolute_error(y_true, y_pred)
    median = sk.median_absolute_error(y_true, y_pred)
    rho = spearmanr(y_true, y_pred).statistic if len(set(y_pred)) > 1 else 0.0
    return {"r2_score": sk.r2_score(y_true, y_pred),
            "explained_variance": sk.explained_variance_score(y_true, y_pred),
            "spearman_correlation": 0.0 if math.isnan(rho) else float(rho),
            "root_mean_squared_error": rmse, "normalized_root_mean_squared_error": rmse / scale,
            "mean_absolute_error": mae, "normalized_mean_absolute_error": mae / scale,
            "median_absolute_error": median, "normalized_median_absolute_error": median / scale}


def loss(metrics: dict[str, float], primary: str) -> float:
    """What FLAML minimises: the primary metric, negated where higher is better; a trial that
    could not compute it (no probabilities for AUC) is the worst."""
    value = metrics.get(primary)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.inf
    return -value if GOALS[primary] else value
