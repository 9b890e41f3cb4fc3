"""Scoring's torch-only ResNets (resnet.py) are torchvision's: the same state dict, the same
numbers; a scoring load of a ResNet builds them, the other loads torchvision's."""

from __future__ import annotations

import importlib
import sys

import pytest
from support import lazy

torch = lazy("torch")
resnet = lazy("image_classifier.resnet")
classifier = lazy("image_classifier.model")
inference = lazy("image_classifier.inference")


@pytest.mark.parametrize("arch", ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                                  "resnext50_32x4d", "resnext101_32x8d", "resnext101_64x4d",
                                  "wide_resnet50_2", "wide_resnet101_2"])
def test_each_architecture_has_torchvisions_parameter_names_and_shapes(arch):
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        ours = resnet.build(arch, 3).state_dict()
        theirs = classifier.build_model(arch, 3, weights="none").state_dict()
    assert list(ours) == list(theirs)
    assert [(t.shape, t.dtype) for t in ours.values()] == \
        [(t.shape, t.dtype) for t in theirs.values()]


@pytest.mark.parametrize("arch", ["resnet18", "resnext50_32x4d"])  # basic and grouped bottleneck
def test_torchvisions_trained_weights_give_the_same_numbers(arch):
    torch.manual_seed(0)
    trained = classifier.build_model(arch, 2, weights="none").eval()
    for module in trained.modules():  # batch norm statistics as training leaves them, not 0/1
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    ours = resnet.build(arch, 2).eval()
    ours.load_state_dict(trained.state_dict())
    images = torch.randn(3, 3, 64, 64)
    with torch.inference_mode():
        assert torch.equal(ours(images), trained(images))


def test_a_scoring_load_builds_a_resnet_on_torch_alone_and_anything_else_through_torchvision():
    torch.manual_seed(0)
    state = classifier.build_model("resnet18", 2, weights="none").state_dict()
    ckpt = {"arch": "resnet18", "classes": ["a", "b"], "image_size": 64, "model": state}
    assert isinstance(inference.rebuild(ckpt, torch_only=True), resnet.ResNet)
    assert not isinstance(inference.rebuild(ckpt), resnet.ResNet)  # export, registration
    squeeze = classifier.build_model("squeezenet1_1", 2, weights="none", image_size=64)
    built = inference.rebuild({**ckpt, "arch": "squeezenet1_1", "model": squeeze.state_dict()},
                              torch_only=True)
    assert type(built) is type(squeeze)


@pytest.fixture
def without_torchvision(monkeypatch):
    """torchvision unimportable, and image_classifier imported afresh under that (what was
    loaded before is put back afterwards)."""
    before = {name: module for name, module in sys.modules.items()
              if name.split(".")[0] == "image_classifier"}
    monkeypatch.setitem(sys.modules, "torchvision", None)  # `import torchvision` raises
    for name in before:
        del sys.modules[name]
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "image_classifier"]:
        del sys.modules[name]
    sys.modules.update(before)


def test_the_batch_script_scores_a_resnet_model_pt_with_torchvision_unimportable(
        tmp_path, monkeypatch, without_torchvision):
    from PIL import Image

    checkpoint = importlib.import_module("image_classifier.checkpoint")
    built = importlib.import_module("image_classifier.resnet").build("resnet18", 2)
    checkpoint.write_model_dir({"model": built.state_dict(),
                                "arch": "resnet18", "classes": ["ants", "bees"],
                                "image_size": 64, "mean": [0.5] * 3, "std": [0.25] * 3,
                                "epoch": 0, "best_val_acc": 0.0}, tmp_path / "model")
    Image.new("RGB", (90, 70), (200, 30, 30)).save(tmp_path / "a.jpg")
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(tmp_path / "model"))
    monkeypatch.setenv("SCORE_BACKEND", "torch")
    monkeypatch.delenv("AZUREML_BI_OUTPUT_PATH", raising=False)
    batch_score = importlib.import_module("image_classifier.batch_score")
    batch_score.init()
    rows = batch_score.run([str(tmp_path / "a.jpg")])
    assert isinstance(batch_score._service.model, sys.modules["image_classifier.resnet"].ResNet)
    assert [row.split(",")[0] for row in rows] == ["a.jpg"]
    assert abs(sum(map(float, rows[0].split(",")[2:])) - 1) < 1e-5
