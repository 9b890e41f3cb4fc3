"""Model: any torchvision classification network with its classifier head replaced."""

from __future__ import annotations

import socket
import urllib.error
from pathlib import Path

import torch
from torch import nn
from torchvision import models

DOWNLOAD_TIMEOUT_S = 20


class ModelError(ValueError):
    """A model could not be built; the message says what to do next."""


def available_archs() -> list[str]:
    return sorted(models.list_models(module=models))


def _find_head(model: nn.Module) -> tuple[nn.Module, str, nn.Linear]:
    """The last Linear layer is the classifier head in every torchvision classification model."""
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name, module
    if last is None:
        raise ModelError(f"{type(model).__name__} has no Linear classifier head to replace.")
    name, head = last
    parent_name, _, attr = name.rpartition(".")
    return model.get_submodule(parent_name), attr, head


def _imagenet_state_dict(arch: str) -> dict:
    weights = models.get_model_weights(arch).DEFAULT
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # urllib waits forever on a black-holed network
    try:
        return weights.get_state_dict(progress=False, check_hash=True)
    except (urllib.error.URLError, OSError) as err:
        raise ModelError(
            f"could not download ImageNet weights for {arch} from {weights.url} ({err}). "
            "Offline or air-gapped? Pass --weights /path/to/state_dict.pth (a torchvision state "
            "dict for this arch) or --weights none to train from scratch."
        ) from err
    finally:
        socket.setdefaulttimeout(previous)


def _file_state_dict(path: str) -> dict:
    if not Path(path).is_file():
        raise ModelError(f"--weights {path}: no such file; use 'none', 'imagenet' or a file path.")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # one of our own checkpoints
    return state


def build_model(arch: str, num_classes: int, weights: str = "none",
                freeze_backbone: bool = False) -> nn.Module:
    """Build ``arch``, load backbone weights (none / imagenet / state-dict path), new head."""
    if arch not in models.list_models(module=models):
        raise ModelError(f"--arch {arch}: not a torchvision classification model. "
                         f"Choose one of: {', '.join(available_archs())}.")
    model = models.get_model(arch, weights=None)
    if weights == "imagenet":
        model.load_state_dict(_imagenet_state_dict(arch))
    elif weights not in ("none", ""):
        try:
            model.load_state_dict(_file_state_dict(weights))
        except RuntimeError as err:
            raise ModelError(f"--weights {weights}: does not fit {arch} ({err}).") from err
    parent, attr, old_head = _find_head(model)
    if freeze_backbone:
        for param in model.parameters():
            param.requires_grad = False
    setattr(parent, attr, nn.Linear(old_head.in_features, num_classes))  # new head trains
    return model


def head_parameters(model: nn.Module) -> list[nn.Parameter]:
    return list(_find_head(model)[2].parameters())
