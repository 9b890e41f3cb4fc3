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
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from . import exit_with
from .data import DataError, build_datasets
from .distributed import DistContext
from .engine import evaluate
from .inference import load_model
from .loading import collate
from .tracking import confusion_figure

log = logging.getLogger("image_classifier.evaluate")


def evaluate_model(model_dir: str, data: str, batch_size: int = 32) -> dict:
    loaded = load_model(model_dir)
    bundle = build_datasets(data, loaded.image_size)
    if bundle.classes != loaded.classes:
        raise DataError(f"{data}: classes {bundle.classes} differ from the model's "
                        f"{loaded.classes}.")
    bundle.val.transform = loaded.transform
    ctx = DistContext(0, 1, 0, torch.device("cpu"))
    result = evaluate(loaded.model, DataLoader(bundle.val, batch_size=batch_size,
                                               collate_fn=collate),
                      torch.nn.CrossEntropyLoss(), ctx, len(loaded.classes))
    matrix = np.array(result.confusion)
    recall = matrix.diagonal() / np.maximum(matrix.sum(axis=1), 1)
    return {"val_acc": result.acc, "val_loss": result.loss, "val_count": result.count,
            "classes": loaded.classes, "confusion_matrix": result.confusion,
            "recall": dict(zip(loaded.classes, recall.round(4).tolist(), strict=True))}


def write_outputs(metrics: dict, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    figure = confusion_figure(np.array(metrics["confusion_matrix"]), metrics["classes"])
    figure.savefig(output / "confusion_matrix.png", dpi=100)
    if os.environ.get("MLFLOW_TRACKING_URI") or os.environ.get("MLFLOW_RUN_ID"):
        import mlflow

        with mlflow.start_run():
            mlflow.log_metrics({"eval_val_acc": metrics["val_acc"],
                                "eval_val_loss": metrics["val_loss"]})
            mlflow.log_figure(figure, "eval_confusion_matrix.png")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Evaluate a model folder on val/.")
    parser.add_argument("--model", required=True, help="model folder written by the trainer")
    parser.add_argument("--data", required=True, help="ImageFolder with train/ and val/")
    parser.add_argument("--output", required=True, help="folder for metrics.json and the plot")
    parser.add_argument("--batch_size", type=int, default=32)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    try:
        metrics = evaluate_model(args.model, args.data, args.batch_size)
    except (DataError, FileNotFoundError) as err:
        log.error("%s", err)
        return 2
    write_outputs(metrics, Path(args.output))
    log.info("val acc %.4f, loss %.4f on %d images", metrics["val_acc"], metrics["val_loss"],
             metrics["val_count"])
    return 0


if __name__ == "__main__":
    exit_with(main)
