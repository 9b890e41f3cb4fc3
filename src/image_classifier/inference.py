"""Rebuild a trained model from its model folder: shared by evaluation, export and scoring."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from . import checkpoint
from .data import build_transforms
from .model import build_model
from .model_files import find_model_file


@dataclass(kw_only=True)
class LoadedModel:
    model: torch.nn.Module
    classes: list[str]
    image_size: int
    transform: object
    metadata: dict[str, object]


def _fits(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    """The checkpoint's tensors can stand in for the module's as they are: the same names,
    shapes and dtypes, laid out contiguously (as a copy into a freshly built module is)."""
    own = model.state_dict()
    return own.keys() == state.keys() and all(
        isinstance(t, torch.Tensor) and t.shape == own[k].shape and t.dtype == own[k].dtype
        and t.is_contiguous() for k, t in state.items())


def rebuild(ckpt: dict[str, object]) -> torch.nn.Module:
    """The network with the checkpoint's weights. Built on the meta device (no memory, no
    random initialisation that the weights would overwrite: a tenth of a second of a
    ResNet-18's load, per scoring process) and given the checkpoint's tensors, when they fit
    it exactly; else built on the CPU and loaded by copy, as training loads one."""
    build = {"weights": "none", "image_size": ckpt["image_size"]}
    try:
        with torch.device("meta"):
            model = build_model(ckpt["arch"], len(ckpt["classes"]), **build)
    except (RuntimeError, NotImplementedError, ValueError):
        model = None  # a builder that needs real tensors (or refuses): the CPU says why
    if model is not None and _fits(model, ckpt["model"]):
        model.load_state_dict(ckpt["model"], assign=True)
        if not any(t.is_meta for t in (*model.parameters(), *model.buffers())):
            return model
    model = build_model(ckpt["arch"], len(ckpt["classes"]), **build)
    model.load_state_dict(ckpt["model"])
    return model


def load_model(root: str | os.PathLike) -> LoadedModel:
    """Rebuild through the training builders; weights_only loading never unpickles code."""
    ckpt = checkpoint.load(find_model_file(root))
    model = rebuild(ckpt)
    model.eval()
    transform = build_transforms(ckpt["image_size"], train=False, mean=ckpt["mean"],
                                 std=ckpt["std"])
    metadata = {k: v for k, v in ckpt.items() if k != "model"}
    return LoadedModel(model=model, classes=list(ckpt["classes"]), image_size=ckpt["image_size"],
                       transform=transform, metadata=metadata)


def probabilities(model: torch.nn.Module, batch: np.ndarray) -> np.ndarray:
    """Softmax over the model's logits for an N x 3 x S x S float32 array (preprocess.py's):
    torch.from_numpy shares the array's memory, so the torch backend is fed without a copy."""
    with torch.inference_mode():
        return torch.softmax(model(torch.from_numpy(batch)).float(), dim=1).numpy()


def set_threads(threads: int) -> None:
    """Threads of each torch forward pass in this process (0: torch's default, every core)."""
    if threads:
        torch.set_num_threads(threads)
