"""Model: any torchvision classification network with its classifier head replaced.

Every architecture `torchvision.models.list_models(module=models)` lists trains (a test takes one
step with each): googlenet and inception_v3 lose their auxiliary heads (their extra outputs in
training mode would break the loss); the ones with input-size rules check `--image_size` and
say what they need: inception_v3 at least 75 px, ViTs a multiple of their patch (exactly the
weights' size with ImageNet weights), MaxViT a multiple of 224.
"""

from __future__ import annotations

import socket
import urllib.error
from pathlib import Path

import torch
from torch import nn
from torchvision import models

DOWNLOAD_TIMEOUT_S = 20
AUX_HEADS = {"googlenet": ("aux1", "aux2"), "inception_v3": ("AuxLogits",)}
MIN_SIZE = {"inception_v3": 75, "alexnet": 63}


class ModelError(ValueError):
    """A model could not be built; the message says what to do next."""


def available_archs() -> list[str]:
    return sorted(models.list_models(module=models))


def size_rule(arch: str, weights: str) -> tuple[int, int, int | None]:
    """(minimum, multiple, exact size or None) that --image_size must meet for `arch`."""
    if arch.startswith("vit_"):
        patch = int(arch.rsplit("_", 1)[1])
        exact = None
        if weights == "imagenet":
            exact = models.get_model_weights(arch).DEFAULT.transforms().crop_size[0]
        return patch, patch, exact
    if arch.startswith("maxvit"):
        return 224, 224, None
    return MIN_SIZE.get(arch, 32), 1, None


def check_image_size(arch: str, image_size: int, weights: str) -> None:
    least, multiple, exact = size_rule(arch, weights)
    if exact is not None and image_size != exact:
        raise ModelError(f"--arch {arch} with --weights imagenet needs --image_size {exact} "
                         "(the size its weights were trained at); or use --weights none")
    if image_size < least or image_size % multiple:
        need = f"a multiple of {multiple}" if multiple > 1 else f"at least {least}"
        raise ModelError(f"--arch {arch} needs --image_size {need} (got {image_size})")


def _find_head(model: nn.Module) -> tuple[nn.Module, str, nn.Module]:
    """The last Linear layer is the classifier head in every torchvision classification model
    but SqueezeNet, whose head is its classifier's 1x1 convolution."""
    last = None
    if type(model).__name__ == "SqueezeNet":
        return model.classifier, "1", model.classifier[1]
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name, module
    if last is None:
        raise ModelError(f"{type(model).__name__} has no Linear classifier head to replace.")
    name, head = last
    parent_name, _, attr = name.rpartition(".")
    return model.get_submodule(parent_name), attr, head


def _imagenet_state_dict(arch: str) -> dict[str, torch.Tensor]:
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


def _file_state_dict(path: str) -> dict[str, torch.Tensor]:
    if not Path(path).is_file():
        raise ModelError(f"--weights {path}: no such file; use 'none', 'imagenet' or a file path.")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # one of our own checkpoints
    return state


def _constructor_args(arch: str, image_size: int | None) -> dict[str, object]:
    if image_size and arch.startswith("vit_"):
        return {"image_size": image_size}
    if image_size and arch.startswith("maxvit"):
        return {"input_size": (image_size, image_size)}
    return {}


def _drop_aux_heads(model: nn.Module, arch: str) -> None:
    """One output in training mode, as every other classifier (the aux losses are not used)."""
    if arch in AUX_HEADS:
        model.aux_logits = False
        for attr in AUX_HEADS[arch]:
            setattr(model, attr, None)


def build_model(arch: str, num_classes: int, *, weights: str = "none",
                freeze_backbone: bool = False, image_size: int | None = None) -> nn.Module:
    """Build ``arch``, load backbone weights (none / imagenet / state-dict path), new head."""
    if arch not in models.list_models(module=models):
        raise ModelError(f"--arch {arch}: not a torchvision classification model. "
                         f"Choose one of: {', '.join(available_archs())}.")
    if image_size:
        check_image_size(arch, image_size, weights)
    model = models.get_model(arch, weights=None, **_constructor_args(arch, image_size))
    if weights == "imagenet":
        model.load_state_dict(_imagenet_state_dict(arch))
        if arch in AUX_HEADS:
            model.transform_input = True  # as torchvision sets it for these weights
    elif weights not in ("none", ""):
        state = _file_state_dict(weights)
        if not any(key.startswith(AUX_HEADS.get(arch, ("-",))) for key in state):
            _drop_aux_heads(model, arch)  # e.g. one of our own checkpoints of this arch
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise ModelError(f"--weights {weights}: does not fit {arch} ({err}).") from err
    _drop_aux_heads(model, arch)
    parent, attr, old_head = _find_head(model)
    if freeze_backbone:
        for param in model.parameters():
            param.requires_grad = False
    if isinstance(old_head, nn.Conv2d):  # SqueezeNet classifies with a 1x1 convolution
        setattr(parent, attr, nn.Conv2d(old_head.in_channels, num_classes, 1))
        model.num_classes = num_classes
    else:
        setattr(parent, attr, nn.Linear(old_head.in_features, num_classes))  # new head trains
    return model

