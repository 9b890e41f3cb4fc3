"""Checkpoints: one dict, written atomically; enough to resume training and to serve the model."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
BEST = "best.pt"
MODEL_FILE = "model.pt"
METADATA_FILE = "model.json"
# Keys a scoring script needs; the rest (optimizer, scheduler, ...) only matters for resuming.
SERVING_KEYS = ("model", "arch", "classes", "image_size", "mean", "std", "epoch", "best_val_acc")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_save(obj, path: Path) -> None:
    """Write to a temp file in the same folder, then rename: a crash never leaves half a file.
    The file gets the usual permissions (mkstemp's are 0600: a server running as another user
    could not read the model)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path) -> dict:
    """Load a checkpoint without unpickling code (tensors, numbers, strings and lists only)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def checkpoint_dir(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / CHECKPOINT_DIR


def find_resumable(output_dir: str | os.PathLike) -> Path | None:
    """The last checkpoint, after removing temp files a killed writer left behind."""
    folder = checkpoint_dir(output_dir)
    for stale in folder.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    path = folder / LAST
    return path if path.is_file() else None


def write_model_dir(best: dict, model_dir: str | os.PathLike) -> Path:
    """The servable model: weights plus the metadata the scoring script rebuilds it from."""
    folder = Path(model_dir)
    atomic_save({key: best[key] for key in SERVING_KEYS}, folder / MODEL_FILE)
    metadata = {key: best[key] for key in SERVING_KEYS if key != "model"}
    metadata["mean"], metadata["std"] = list(best["mean"]), list(best["std"])
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
    return folder


@dataclass
class TrainState:
    epoch: int = 0
    best_val_acc: float = -1.0
    history: list[dict] = field(default_factory=list)
    best_confusion: list[list[int]] = field(default_factory=list)
    mlflow_run_id: str = ""
    config: dict = field(default_factory=dict)  # the config the checkpoint was trained with


def make_checkpoint(parts: dict, state: TrainState, cfg, classes, mean, std) -> dict:
    """parts: model, optimizer, scheduler (and scaler with fp16) -> one dict to save."""
    ckpt = {name: part.state_dict() for name, part in parts.items() if part is not None}
    return {**ckpt, "epoch": state.epoch, "best_val_acc": state.best_val_acc,
            "history": state.history, "best_confusion": state.best_confusion,
            "mlflow_run_id": state.mlflow_run_id, "arch": cfg.arch, "classes": list(classes),
            "image_size": cfg.image_size, "mean": list(mean), "std": list(std),
            "config": cfg.to_dict()}


def restore(path: Path, parts: dict, cfg, classes) -> TrainState:
    """Load `path` into parts (model, optimizer, ...); refuse a checkpoint of another model."""
    ckpt = load(path)
    mismatch = [key for key, ours in (("arch", cfg.arch), ("classes", list(classes)),
                                      ("image_size", cfg.image_size)) if ckpt[key] != ours]
    if mismatch:
        raise ResumeError(f"{path}: checkpoint differs from this run in {', '.join(mismatch)}. "
                          "Use a new --output_dir, or delete the old one to start over.")
    for name, part in parts.items():
        if part is not None and name in ckpt:
            part.load_state_dict(ckpt[name])
    return TrainState(ckpt["epoch"], ckpt["best_val_acc"], ckpt["history"],
                      ckpt["best_confusion"], ckpt["mlflow_run_id"], ckpt["config"])


class ResumeError(ValueError):
    """The output folder holds a checkpoint this run cannot continue."""
