"""Pipeline step: register the model in MLflow (the workspace registry on Azure ML) if it is good.

``python -m image_classifier.register --model <folder> --metrics <evaluate output>
--model_name fowl-classifier --output <folder> [--min_val_acc 0.7]``

Refuses (exit 3) when the evaluated accuracy is below ``--min_val_acc``, so a bad model never
reaches the registry. Writes ``registration.json`` to ``--output``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import exit_with
from .config import build_parser as config_parser
from .config import parse

log = logging.getLogger("image_classifier.register")


@dataclass(kw_only=True)
class RegisterConfig:
    """Register a model folder if its evaluated accuracy passes the gate."""

    model: str = field(metadata={"help": "model folder written by the trainer"})
    metrics: str = field(metadata={"help": "folder holding the evaluate step's metrics.json"})
    model_name: str = field(metadata={"help": "registered model name"})
    output: str = field(metadata={"help": "folder for registration.json"})
    min_val_acc: float = field(default=0.0, metadata={
        "help": "quality gate: refuse to register below this validation accuracy"})


@dataclass(kw_only=True)
class Registration:
    """registration.json: what was decided, and the MLflow run that registered the model."""

    name: str
    val_acc: float
    min_val_acc: float
    registered: bool = False
    run_id: str | None = None

    def write(self, output: Path) -> None:
        output.mkdir(parents=True, exist_ok=True)
        (output / "registration.json").write_text(json.dumps(asdict(self), indent=2) + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line: a flag per field of RegisterConfig (validation checks specs by it)."""
    return config_parser(RegisterConfig)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(RegisterConfig, argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    val_acc = float(json.loads((Path(cfg.metrics) / "metrics.json").read_text())["val_acc"])
    record = Registration(name=cfg.model_name, val_acc=val_acc, min_val_acc=cfg.min_val_acc)
    output = Path(cfg.output)
    if val_acc < cfg.min_val_acc:
        record.write(output)
        log.error("val acc %.4f is below --min_val_acc %.4f: not registering %s", val_acc,
                  cfg.min_val_acc, cfg.model_name)
        return 3
    from .inference import find_model_file, load_model  # torch: only past the gate
    from .tracking import MlflowTracker

    loaded = load_model(cfg.model)
    tracker = MlflowTracker()
    try:
        tracker.register_model(loaded.model, find_model_file(cfg.model).parent, cfg.model_name)
        tracker.log_metrics({"registered_val_acc": val_acc}, step=0)
    finally:
        tracker.close(ok=True)
    record.registered, record.run_id = True, tracker.run_id
    record.write(output)
    log.info("registered %s (val acc %.4f) from run %s", cfg.model_name, val_acc,
             tracker.run_id)
    return 0


if __name__ == "__main__":
    exit_with(main)
