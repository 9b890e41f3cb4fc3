"""Checkpoints: one dict, written atomically; enough to resume training and to serve the model.

Every dict saved here carries a digest of its own contents (tensors by their bytes, the rest by
value), and every load checks it: a file with flipped bits or cut short is refused by name
(DamagedFile), never served or resumed from. model.json records the sha256 of each model file
beside it (model.pt, model.onnx, model.int8.onnx), which the ONNX backends check the same way.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .model_files import (  # noqa: F401 - the folder's names, read here too
    METADATA_FILE,
    MODEL_FILE,
    DamagedFile,
    check_file,
    file_digest,
    record_file,
    replacing,
    write_metadata,
)

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
BEST = "best.pt"
# Keys a scoring script needs; the rest (optimizer, scheduler, ...) only matters for resuming.
SERVING_KEYS = ("model", "arch", "classes", "image_size", "mean", "std", "epoch", "best_val_acc")
DIGEST = "digest"


def _feed(digest, value, key: str = "") -> None:
    """Everything a checkpoint holds, in a fixed order, into `digest`."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{key}:{value.dtype}:{tuple(value.shape)}\n".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    elif isinstance(value, dict):
        for name in sorted(value, key=str):
            _feed(digest, value[name], f"{key}/{name}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _feed(digest, item, f"{key}[{index}]")
    else:
        digest.update(f"{key}={value!r}\n".encode())


def payload_digest(payload: dict[str, object]) -> str:
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in payload.items() if k != DIGEST})
    return digest.hexdigest()


def atomic_save(obj, path: Path) -> None:
    """Write to a temp file in the same folder, then rename: a crash never leaves half a file,
    and a full disk is reported as one (model_files.replacing)."""
    if isinstance(obj, dict):
        obj = {**obj, DIGEST: payload_digest(obj)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp, open(tmp, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())


def load(path: Path) -> dict[str, object]:
    """Load a checkpoint without unpickling code (tensors, numbers, strings and lists only),
    and check it holds what was written (files written before digests were: as they are)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001 - a cut or garbled file fails in many ways
        raise DamagedFile(f"{path} is damaged and cannot be read ({type(err).__name__}: "
                          f"{str(err).splitlines()[0][:160] if str(err) else 'no detail'})"
                          ) from None
    if isinstance(payload, dict) and DIGEST in payload and \
            payload[DIGEST] != payload_digest(payload):
        raise DamagedFile(f"{path} is damaged: its contents do not match the digest written "
                          "with them")
    return payload


def checkpoint_dir(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / CHECKPOINT_DIR


def find_resumable(output_dir: str | os.PathLike) -> Path | None:
    """The last checkpoint, after removing temp files a killed writer left behind."""
    folder = checkpoint_dir(output_dir)
    for stale in folder.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    path = folder / LAST
    return path if path.is_file() else None


def write_model_dir(best: dict[str, object], model_dir: str | os.PathLike) -> Path:
    """The servable model: weights plus the metadata the scoring script rebuilds it from."""
    folder = Path(model_dir)
    atomic_save({key: best[key] for key in SERVING_KEYS}, folder / MODEL_FILE)
    metadata = {key: best[key] for key in SERVING_KEYS if key != "model"}
    metadata["mean"], metadata["std"] = list(best["mean"]), list(best["std"])
    metadata["files"] = {MODEL_FILE: file_digest(folder / MODEL_FILE)}
    write_metadata(folder, metadata)
    return folder


@dataclass(kw_only=True)
class TrainState:
    epoch: int = 0
    best_val_acc: float = -1.0
    history: list[dict[str, float]] = field(default_factory=list)
    best_confusion: list[list[int]] = field(default_factory=list)
    mlflow_run_id: str = ""
    config: dict[str, object] = field(default_factory=dict)  # what it was trained with


def make_checkpoint(parts: dict[str, object], state: TrainState, *, cfg, classes, mean,
                    std) -> dict[str, object]:
    """parts: model, optimizer, scheduler (and scaler with fp16) -> one dict to save."""
    ckpt = {name: part.state_dict() for name, part in parts.items() if part is not None}
    return {**ckpt, "epoch": state.epoch, "best_val_acc": state.best_val_acc,
            "history": state.history, "best_confusion": state.best_confusion,
            "mlflow_run_id": state.mlflow_run_id, "arch": cfg.arch, "classes": list(classes),
            "image_size": cfg.image_size, "mean": list(mean), "std": list(std),
            "config": cfg.to_dict()}


def restore(path: Path, parts: dict[str, object], cfg, classes) -> TrainState:
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
    return TrainState(epoch=ckpt["epoch"], best_val_acc=ckpt["best_val_acc"],
                      history=ckpt["history"], best_confusion=ckpt["best_confusion"],
                      mlflow_run_id=ckpt["mlflow_run_id"], config=ckpt["config"])


class ResumeError(ValueError):
    """The output folder holds a checkpoint this run cannot continue."""
