"""Every torchvision classifier trains; augmentation streams per rank; the fast path per device."""

from __future__ import annotations

import contextlib

import pytest
import torch

from image_classifier.engine import seed_epoch
from image_classifier.model import ModelError, available_archs, build_model, size_rule
from image_classifier.precision import (
    cpu_has_amx,
    grad_scaler,
    resolve_channels_last,
    resolve_precision,
)


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


@pytest.mark.slow
@pytest.mark.parametrize("arch", available_archs())
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


@pytest.mark.parametrize(("arch", "size", "weights", "message"), [
    ("inception_v3", 64, "none", "needs --image_size at least 75"),
    ("vit_b_16", 100, "none", "needs --image_size a multiple of 16"),
    ("vit_b_16", 64, "imagenet", "needs --image_size 224"),
    ("maxvit_t", 64, "none", "needs --image_size a multiple of 224"),
])
def test_size_rules_are_explained_before_anything_is_built(arch, size, weights, message):
    with pytest.raises(ModelError, match=message):
        build_model(arch, 2, weights, image_size=size)


def test_each_rank_augments_from_its_own_reproducible_stream():
    def draws(rank: int, epoch: int = 3) -> torch.Tensor:
        seed_epoch(42, epoch, rank)
        return torch.rand(8)

    assert torch.equal(draws(0), draws(0)) and torch.equal(draws(1), draws(1))
    assert not torch.equal(draws(0), draws(1))
    assert not torch.equal(draws(0, epoch=3), draws(0, epoch=4))


@pytest.mark.parametrize(("capability", "name", "expected"), [
    ((7, 5), "Tesla T4", "fp16"), ((7, 0), "Tesla V100", "fp16"),
    ((8, 0), "A100", "bf16"), ((9, 0), "H100", "bf16"), ((6, 1), "P40", "fp32")])
def test_auto_precision_on_gpus(monkeypatch, capability, name, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    precision, why = resolve_precision("auto", torch.device("cuda", 0))
    assert precision == expected and name in why
    gpu = torch.device("cuda", 0)
    assert resolve_channels_last("auto", precision, gpu) is (expected != "fp32")


def test_auto_precision_on_cpus(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags : fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert cpu_has_amx(cpuinfo)
    cpuinfo.write_text("flags : fpu avx2 avx512f avx512_bf16\n")  # measured slower in bf16
    assert not cpu_has_amx(cpuinfo)
    from image_classifier import precision

    cpu = torch.device("cpu")
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: False)
    assert resolve_precision("auto", cpu)[0] == "fp32"
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: True)
    assert resolve_precision("auto", cpu)[0] == "bf16"
    assert resolve_precision("fp32", cpu) == ("fp32", "as requested")
    assert grad_scaler("bf16", cpu) is None
    assert resolve_channels_last("auto", "fp32", cpu) is True
    assert resolve_channels_last("False", "bf16", cpu) is False
