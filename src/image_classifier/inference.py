"""Rebuild a trained model from its model folder: shared by evaluation, export and scoring.

For scoring (`torch_only`), the ResNet family is rebuilt on torch alone (resnet.py) and the
eval transform is made only when asked for, so a scoring process serving a ResNet never
imports torchvision (1.6-1.9 CPU s at every start). Evaluation, export and registration build
through torchvision, as training does: the MLflow model that registration pickles holds
torchvision's classes, which an MLflow user's environment has (tracking.MODEL_PACKAGES).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from . import checkpoint, resnet
from .model_files import find_model_file


@dataclass(kw_only=True)
class LoadedModel:
    model: torch.nn.Module
    classes: list[str]
    image_size: int
    metadata: dict[str, object]

    @cached_property
    def transform(self):
        """The eval transform (torchvision's), for evaluation and export; scoring uses
        preprocess.py's, which gives the same numbers without torchvision."""
        from .data import build_transforms

        return build_transforms(self.image_size, train=False, mean=self.metadata["mean"],
                                std=self.metadata["std"])


def _fits(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    """The checkpoint's tensors can stand in for the module's as they are: the same names,
    shapes and dtypes, laid out contiguously (as a copy into a freshly built module is)."""
    own = model.state_dict()
    return own.keys() == state.keys() and all(
        isinstance(t, torch.Tensor) and t.shape == own[k].shape and t.dtype == own[k].dtype
        and t.is_contiguous() for k, t in state.items())


def build_model(arch: str, num_classes: int, torch_only: bool, **build) -> torch.nn.Module:
    """The network, untrained: torchvision's (model.py); with `torch_only`, the ResNet family
    from resnet.py (the same module names, shapes and numbers)."""
    if torch_only and arch in resnet.ARCHS:
        return resnet.build(arch, num_classes)
    from .model import build_model as torchvision_model

    return torchvision_model(arch, num_classes, **build)


def rebuild(ckpt: dict[str, object], torch_only: bool = False) -> torch.nn.Module:
    """The network with the checkpoint's weights. Built on the meta device (no memory, no
    random initialisation that the weights would overwrite: a tenth of a second of a
    ResNet-18's load, per scoring process) and given the checkpoint's tensors, when they fit
    it exactly; else built on the CPU and loaded by copy, as training loads one."""
    build = {"weights": "none", "image_size": ckpt["image_size"], "torch_only": torch_only}
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


def load_model(root: str | os.PathLike, torch_only: bool = False) -> LoadedModel:
    """Rebuild through the training builders (`torch_only`: resnet.py's where it has the
    architecture); weights_only loading never unpickles code."""
    ckpt = checkpoint.load(find_model_file(root))
    model = rebuild(ckpt, torch_only)
    model.eval()
    metadata = {k: v for k, v in ckpt.items() if k != "model"}
    return LoadedModel(model=model, classes=list(ckpt["classes"]), image_size=ckpt["image_size"],
                       metadata=metadata)


def probabilities(model: torch.nn.Module, batch: np.ndarray) -> np.ndarray:
    """Softmax over the model's logits for an N x 3 x S x S float32 array (preprocess.py's):
    torch.from_numpy shares the array's memory, so the torch backend is fed without a copy."""
    with torch.inference_mode():
        return torch.softmax(model(torch.from_numpy(batch)).float(), dim=1).numpy()


def set_threads(threads: int) -> None:
    """Threads of each torch forward pass in this process (0: torch's default, every core)."""
    if threads:
        torch.set_num_threads(threads)
