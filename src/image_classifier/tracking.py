"""Experiment tracking: MLflow on rank 0, a no-op elsewhere.

MLflow is used untouched: on Azure ML, azureml-mlflow and the MLFLOW_TRACKING_URI / MLFLOW_RUN_ID
that Azure sets route everything to the job's run; locally the Makefile points
MLFLOW_TRACKING_URI at a sqlite store and MLFLOW_EXPERIMENT_NAME picks the experiment.
"""

from __future__ import annotations

import logging
import os
import time
from importlib.metadata import version
from pathlib import Path

log = logging.getLogger(__name__)


def pyplot():
    """matplotlib's pyplot, headless (compute nodes and CI have no display), loaded for the first
    figure: about a second of CPU that a run spends at its end, not at its start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class NullTracker:
    run_id: str | None = None

    def complete(self, params: dict[str, object], history: list[dict[str, float]]) -> None: ...
    def log_params(self, params: dict[str, object]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_dict(self, data: dict[str, object], name: str) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_figure(self, figure, name: str) -> None: ...
    def register_model(self, model, model_dir: Path, name: str) -> None: ...
    def close(self, ok: bool) -> None: ...


class MlflowTracker(NullTracker):
    """Which run a resumed training logs to: the environment's (MLFLOW_RUN_ID) wins. On Azure it
    is the job's own run, and a low-priority node that is preempted retries the same job, so it
    is also the run the checkpoint names; a different one means a new job continues this
    checkpoint folder, and that job's run is where its user looks. Without MLFLOW_RUN_ID (a
    plain `python -m ...` run) the checkpoint's run continues. Either way `complete` gives the
    run what it lacks: the parameters, and every epoch of the checkpoint's history."""

    def __init__(self, resume_run_id: str | None = None):
        import mlflow

        self._mlflow = mlflow
        run = mlflow.start_run(run_id=None if os.environ.get("MLFLOW_RUN_ID") else resume_run_id)
        self.run_id = run.info.run_id
        log.info("MLflow run %s (tracking URI %s)", self.run_id, mlflow.get_tracking_uri())

    def complete(self, params: dict[str, object], history: list[dict[str, float]]) -> None:
        """Log the params if the run has none; re-log any epoch of `history` the run lacks (a
        kill between the checkpoint and the metrics, or a run that is new to this checkpoint)."""
        from mlflow.entities import Metric

        client = self._mlflow.tracking.MlflowClient()
        if not client.get_run(self.run_id).data.params:
            self.log_params(params)
            self.log_dict(params, "config.json")
        missing = []
        keys = sorted({k for row in history for k in row if k != "epoch"})
        for key in keys:
            have = {m.step for m in client.get_metric_history(self.run_id, key)}
            now = int(time.time() * 1000)
            missing += [Metric(key, float(row[key]), now, row["epoch"]) for row in history
                        if key in row and row["epoch"] not in have]
        if missing:
            client.log_batch(self.run_id, metrics=missing)
            log.info("MLflow run %s: logged %d metric value(s) of earlier epochs it lacked",
                     self.run_id, len(missing))

    def log_params(self, params: dict[str, object]) -> None:
        self._mlflow.log_params(params)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._mlflow.log_metrics(metrics, step=step)

    def log_dict(self, data: dict[str, object], name: str) -> None:
        self._mlflow.log_dict(data, name)

    def set_tags(self, tags: dict[str, str]) -> None:
        self._mlflow.set_tags(tags)

    def log_figure(self, figure, name: str) -> None:
        self._mlflow.log_figure(figure, name)
        pyplot().close(figure)

    def register_model(self, model, model_dir: Path, name: str) -> None:
        """Log an MLflow pytorch model (pickle, not torch.export) carrying our model folder."""
        import mlflow.pytorch

        mlflow.pytorch.log_model(
            model.cpu().eval(),
            name="model",
            registered_model_name=name,
            serialization_format="pickle",
            pip_requirements=model_requirements(),
            extra_files=[str(p) for p in sorted(model_dir.iterdir()) if p.is_file()],
        )

    def close(self, ok: bool) -> None:
        self._mlflow.end_run(status="FINISHED" if ok else "FAILED")


# Loading the pickled model takes torch, torchvision (its classes) and cloudpickle (its format).
MODEL_PACKAGES = ("torch", "torchvision", "cloudpickle")


def model_requirements() -> list[str]:
    """MODEL_PACKAGES pinned to the releases that wrote the model (without a local label such as
    +cpu, which no package index serves). Left to itself, MLflow infers the list by loading the
    model in a second Python process, seconds of CPU, and adds whatever that process imported."""
    return [f"{name}=={version(name).split('+')[0]}" for name in MODEL_PACKAGES]


def curves_figure(history: list[dict[str, float]]):
    epochs = [row["epoch"] for row in history]
    figure, (loss_ax, acc_ax) = pyplot().subplots(1, 2, figsize=(9, 3.5))
    for split in ("train", "val"):
        loss_ax.plot(epochs, [row[f"{split}_loss"] for row in history], marker="o", label=split)
        acc_ax.plot(epochs, [row[f"{split}_acc"] for row in history], marker="o", label=split)
    loss_ax.set(title="loss", xlabel="epoch")
    acc_ax.set(title="accuracy", xlabel="epoch", ylim=(0, 1))
    for axis in (loss_ax, acc_ax):
        axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def confusion_figure(matrix, classes: list[str]):
    """Rows are true classes, columns predicted; counts annotated in each cell."""
    size = max(3.5, 0.6 * len(classes) + 2)
    figure, axis = pyplot().subplots(figsize=(size, size))
    axis.imshow(matrix, cmap="Blues")
    axis.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    axis.set_yticks(range(len(classes)), classes)
    axis.set(xlabel="predicted", ylabel="true", title="confusion matrix (best epoch, val)")
    peak = max(int(matrix.max()), 1)
    for (row, col), count in _cells(matrix):
        axis.text(col, row, str(count), ha="center", va="center",
                  color="white" if count > peak / 2 else "black")
    figure.tight_layout()
    return figure


def _cells(matrix):
    rows, cols = matrix.shape
    return [((r, c), int(matrix[r, c])) for r in range(rows) for c in range(cols)]
