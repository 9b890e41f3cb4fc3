"""Pipeline step: register the model in MLflow (the workspace registry on Azure ML) if it is good.

``python -m image_classifier.register --model <folder> --metrics <evaluate output> --name fowl``

Refuses (exit 3) when the evaluated accuracy is below ``--min_val_acc``, so a bad model never
reaches the registry. Writes ``registration.json`` to ``--output``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from . import exit_with
from .inference import find_model_file, load_model
from .tracking import MlflowTracker

log = logging.getLogger("image_classifier.register")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Register a model folder if good enough.")
    parser.add_argument("--model", required=True, help="model folder written by the trainer")
    parser.add_argument("--metrics", required=True, help="folder holding evaluate's metrics.json")
    parser.add_argument("--name", required=True, help="registered model name")
    parser.add_argument("--min_val_acc", type=float, default=0.0, help="quality gate")
    parser.add_argument("--output", required=True, help="folder for registration.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    metrics = json.loads((Path(args.metrics) / "metrics.json").read_text())
    record = {"name": args.name, "val_acc": metrics["val_acc"], "min_val_acc": args.min_val_acc,
              "registered": False}
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    if metrics["val_acc"] < args.min_val_acc:
        (output / "registration.json").write_text(json.dumps(record, indent=2) + "\n")
        log.error("val acc %.4f is below --min_val_acc %.4f: not registering %s",
                  metrics["val_acc"], args.min_val_acc, args.name)
        return 3
    loaded = load_model(args.model)
    tracker = MlflowTracker()
    try:
        tracker.register_model(loaded.model, find_model_file(args.model).parent, args.name)
        tracker.log_metrics({"registered_val_acc": metrics["val_acc"]}, step=0)
    finally:
        tracker.close(ok=True)
    record.update(registered=True, run_id=tracker.run_id)
    (output / "registration.json").write_text(json.dumps(record, indent=2) + "\n")
    log.info("registered %s (val acc %.4f) from run %s", args.name, metrics["val_acc"],
             tracker.run_id)
    return 0


if __name__ == "__main__":
    exit_with(main)
