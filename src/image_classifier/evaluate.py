"""Pipeline step: evaluate a model folder on the validation split.

``python -m image_classifier.evaluate --model <model folder> --data <imagefolder> --output <dir>``

Writes ``metrics.json`` (accuracy, loss, per-class recall, confusion matrix) and
``confusion_matrix.png`` to ``--output`` and logs them to MLflow when a run is active or
configured.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from . import exit_with
from .config import EvaluateConfig, parse
from .config import build_parser as config_parser
from .data import DataError, build_datasets
from .distributed import DistContext
from .engine import evaluate
from .inference import load_model
from .loading import collate
from .tracking import confusion_figure

log = logging.getLogger("image_classifier.evaluate")


@dataclass(frozen=True, kw_only=True)
class Metrics:
    """metrics.json: how the model does on val/."""

    val_acc: float
    val_loss: float
    val_count: int
    classes: list[str]
    confusion_matrix: list[list[int]]  # rows: true class, columns: predicted
    recall: dict[str, float]  # per class


def evaluate_model(cfg: EvaluateConfig) -> Metrics:
    loaded = load_model(cfg.model)
    bundle = build_datasets(cfg.data, loaded.image_size)
    if bundle.classes != loaded.classes:
        raise DataError(f"{cfg.data}: classes {bundle.classes} differ from the model's "
                        f"{loaded.classes}.")
    bundle.val.transform = loaded.transform
    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    loader = DataLoader(bundle.val, batch_size=cfg.batch_size, collate_fn=collate)
    result = evaluate(loaded.model, loader, ctx, num_classes=len(loaded.classes))
    matrix = np.array(result.confusion)
    recall = matrix.diagonal() / np.maximum(matrix.sum(axis=1), 1)
    return Metrics(val_acc=result.acc, val_loss=result.loss, val_count=result.count,
                   classes=loaded.classes, confusion_matrix=result.confusion,
                   recall=dict(zip(loaded.classes, recall.round(4).tolist(), strict=True)))


def write_outputs(metrics: Metrics, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "metrics.json").write_text(json.dumps(asdict(metrics), indent=2) + "\n")
    figure = confusion_figure(np.array(metrics.confusion_matrix), metrics.classes)
    figure.savefig(output / "confusion_matrix.png", dpi=100)
    if os.environ.get("MLFLOW_TRACKING_URI") or os.environ.get("MLFLOW_RUN_ID"):
        import mlflow

        with mlflow.start_run():
            mlflow.log_metrics({"eval_val_acc": metrics.val_acc,
                                "eval_val_loss": metrics.val_loss})
            mlflow.log_figure(figure, "eval_confusion_matrix.png")


def build_parser() -> argparse.ArgumentParser:
    """The command line: a flag per field of EvaluateConfig (validation checks specs by it)."""
    return config_parser(EvaluateConfig)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(EvaluateConfig, argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    try:
        metrics = evaluate_model(cfg)
    except (DataError, FileNotFoundError) as err:
        log.error("%s", err)
        return 2
    write_outputs(metrics, Path(cfg.output))
    log.info("val acc %.4f, loss %.4f on %d images", metrics.val_acc, metrics.val_loss,
             metrics.val_count)
    return 0


if __name__ == "__main__":
    exit_with(main)
