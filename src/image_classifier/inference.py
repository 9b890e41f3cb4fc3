"""Rebuild a trained model from its model folder: shared by evaluation, export and scoring."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkpoint
from .data import build_transforms
from .model import build_model


@dataclass(kw_only=True)
class LoadedModel:
    model: torch.nn.Module
    classes: list[str]
    image_size: int
    transform: object
    metadata: dict[str, object]


def find_model_file(root: str | os.PathLike) -> Path:
    """model.pt at ``root`` or below it (a registered model nests the folder one or more levels)."""
    root = Path(root)
    if root.is_file():
        return root
    direct = root / checkpoint.MODEL_FILE
    if direct.is_file():
        return direct
    found = sorted(root.rglob(checkpoint.MODEL_FILE))
    if not found:
        raise FileNotFoundError(f"{root}: no {checkpoint.MODEL_FILE} found. Point at the model "
                                "folder the trainer wrote (<output_dir>/model or the job's model "
                                "output).")
    return found[0]


def load_model(root: str | os.PathLike) -> LoadedModel:
    """Rebuild through the training builders; weights_only loading never unpickles code."""
    ckpt = checkpoint.load(find_model_file(root))
    model = build_model(ckpt["arch"], len(ckpt["classes"]), weights="none",
                        image_size=ckpt["image_size"])
    model.load_state_dict(ckpt["model"])
    model.eval()
    transform = build_transforms(ckpt["image_size"], train=False, mean=ckpt["mean"],
                                 std=ckpt["std"])
    metadata = {k: v for k, v in ckpt.items() if k != "model"}
    return LoadedModel(model=model, classes=list(ckpt["classes"]), image_size=ckpt["image_size"],
                       transform=transform, metadata=metadata)
