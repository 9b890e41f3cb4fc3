"""Every torchvision classifier trains; augmentation streams per rank; the fast path per device."""

from __future__ import annotations

import pytest
from support import lazy

# torch and torchvision load with the first test that uses them (support.lazy)
torch = lazy("torch")
engine = lazy("image_classifier.engine")
classifier = lazy("image_classifier.model")
precision = lazy("image_classifier.precision")


@pytest.mark.parametrize(("arch", "size", "weights", "message"), [
    ("inception_v3", 64, "none", "needs --image_size at least 75"),
    ("vit_b_16", 100, "none", "needs --image_size a multiple of 16"),
    ("vit_b_16", 64, "imagenet", "needs --image_size 224"),
    ("maxvit_t", 64, "none", "needs --image_size a multiple of 224"),
])
def test_size_rules_are_explained_before_anything_is_built(arch, size, weights, message):
    with pytest.raises(classifier.ModelError, match=message):
        classifier.build_model(arch, 2, weights=weights, image_size=size)


def test_each_rank_augments_from_its_own_reproducible_stream():
    def draws(rank: int, epoch: int = 3) -> torch.Tensor:
        engine.seed_epoch(42, epoch, rank)
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
    chosen, why = precision.resolve_precision("auto", torch.device("cuda", 0))
    assert chosen == expected and name in why
    gpu = torch.device("cuda", 0)
    assert precision.resolve_channels_last("auto", chosen, gpu) is (expected != "fp32")


def test_auto_precision_on_cpus(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags : fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert precision.cpu_has_amx(cpuinfo)
    cpuinfo.write_text("flags : fpu avx2 avx512f avx512_bf16\n")  # measured slower in bf16
    assert not precision.cpu_has_amx(cpuinfo)
    cpu = torch.device("cpu")
    monkeypatch.setattr("image_classifier.precision.cpu_has_amx", lambda: False)
    assert precision.resolve_precision("auto", cpu)[0] == "fp32"
    monkeypatch.setattr("image_classifier.precision.cpu_has_amx", lambda: True)
    assert precision.resolve_precision("auto", cpu)[0] == "bf16"
    assert precision.resolve_precision("fp32", cpu) == ("fp32", "as requested")
    assert precision.grad_scaler("bf16", cpu) is None
    assert precision.resolve_channels_last("auto", "fp32", cpu) is True
    assert precision.resolve_channels_last("False", "bf16", cpu) is False


def test_a_scoring_load_takes_the_checkpoints_tensors_else_copies_them_as_before():
    inference = lazy("image_classifier.inference")
    torch.manual_seed(0)
    trained = classifier.build_model("squeezenet1_1", 3, weights="none", image_size=64).eval()
    state = trained.state_dict()
    ckpt = {"arch": "squeezenet1_1", "classes": ["a", "b", "c"], "image_size": 64}
    images = torch.randn(2, 3, 64, 64)
    fast = inference.rebuild({**ckpt, "model": state}).eval()  # built on meta, given the tensors
    assert all(p.data_ptr() == state[k].data_ptr() for k, p in fast.named_parameters())
    assert torch.equal(fast(images), trained(images))
    for odd in ({k: v.half() if v.is_floating_point() else v for k, v in state.items()},
                {k: v.contiguous(memory_format=torch.channels_last) if v.dim() == 4 else v
                 for k, v in state.items()}):  # copied into fp32, contiguous tensors as before
        copied = inference.rebuild({**ckpt, "model": odd}).eval()
        assert all(p.dtype == torch.float32 and p.is_contiguous() for p in copied.parameters())
        assert all(p.data_ptr() != odd[k].data_ptr() for k, p in copied.named_parameters())
    with pytest.raises(RuntimeError, match="Missing key"):  # a checkpoint that does not fit
        inference.rebuild({**ckpt, "model": {k: v for k, v in state.items() if "0" not in k}})
