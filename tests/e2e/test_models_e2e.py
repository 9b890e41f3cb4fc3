"""Every torchvision classifier trains; augmentation streams per rank; the fast path per device."""

from __future__ import annotations

import contextlib

import pytest
import torch

from image_classifier.model import available_archs, build_model, size_rule


def smallest_size(arch: str) -> int:
    least, multiple, _ = size_rule(arch, "none")
    return max(least, multiple)


# Every arch takes one training step. Up to this size it takes it on CPU: the builder, the head,
# the output shape, a gradient for every parameter and finite numbers. Above it, initialising on
# CPU costs seconds to 20 s each (regnet_y_128gf, vit_h_14), so it takes it shape-only on the
# meta device (the same checks but the numbers), and the family's smaller members run the same
# builder code on CPU (vgg and alexnet have no small member).
REAL_STEP_MAX_PARAMS = 30_000_000


@contextlib.contextmanager
def shape_only():
    """Parameters and buffers land on the meta device as modules register them, so a model of
    any size builds in milliseconds (init functions run on tensors without data)."""
    module = torch.nn.Module
    register_parameter, register_buffer = module.register_parameter, module.register_buffer

    def on_meta_parameter(self, name, value):
        if value is not None:
            value = torch.nn.Parameter(value.to("meta"), value.requires_grad)
        register_parameter(self, name, value)

    def on_meta_buffer(self, name, value, persistent=True):
        register_buffer(self, name, None if value is None else value.to("meta"), persistent)

    module.register_parameter, module.register_buffer = on_meta_parameter, on_meta_buffer
    try:
        yield
    finally:
        module.register_parameter, module.register_buffer = register_parameter, register_buffer


def one_step(model: torch.nn.Module, size: int, device: str) -> torch.Tensor:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    logits = model(torch.randn(2, 3, size, size, device=device))
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, 3)  # no aux outputs
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2], device=device))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    optimizer.step()
    return loss


# make test steps one arch of each family, so every kind of head the builder replaces (fc,
# classifier, a 1x1 convolution, heads.head, head, auxiliary heads dropped) and the shape-only
# path are proven; make test-e2e steps the rest.
FAMILIES = {"alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "googlenet",
            "inception_v3", "maxvit_t", "mnasnet0_5", "mobilenet_v3_small", "regnet_x_400mf",
            "resnet18", "shufflenet_v2_x0_5", "squeezenet1_0", "swin_t", "vgg11", "vit_b_16"}


@pytest.mark.slow
@pytest.mark.parametrize("arch", [pytest.param(arch, marks=pytest.mark.proof)
                                  if arch in FAMILIES else arch for arch in available_archs()])
def test_every_listed_arch_builds_and_takes_one_training_step(arch):
    torch.manual_seed(0)
    size = smallest_size(arch)
    with shape_only():
        model = build_model(arch, num_classes=3, weights="none", image_size=size).train()
    if sum(p.numel() for p in model.parameters()) > REAL_STEP_MAX_PARAMS:
        one_step(model, size, "meta")
    else:  # the same checks, with numbers
        model = build_model(arch, num_classes=3, weights="none", image_size=size).train()
        assert torch.isfinite(one_step(model, size, "cpu"))
