"""Checkpoints: one dict, written atomically; enough to resume training and to serve the model."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
BEST = "best.pt"
MODEL_FILE = "model.pt"
METADATA_FILE = "model.json"
# Keys a scoring script needs; the rest (optimizer, scheduler, ...) only matters for resuming.
SERVING_KEYS = ("model", "arch", "classes", "image_size", "mean", "std", "epoch", "best_val_acc")


def atomic_save(obj, path: Path) -> None:
    """Write to a temp file in the same folder, then rename: a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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
