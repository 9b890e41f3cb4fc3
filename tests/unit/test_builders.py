import urllib.error

import pytest
from support import lazy

from image_classifier.config import parse_config

# torch and torchvision load with the first test that builds a model (support.lazy)
torch = lazy("torch")
nn = lazy("torch.nn")
classifier = lazy("image_classifier.model")
train = lazy("image_classifier.train")


def test_resnet_head_is_replaced_and_output_has_num_classes():
    model = classifier.build_model("resnet18", num_classes=3)
    assert isinstance(model.fc, nn.Linear) and model.fc.out_features == 3
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 3)


@pytest.mark.parametrize("arch", ["mobilenet_v3_small", "efficientnet_b0"])
def test_other_torchvision_archs_get_a_new_head(arch):
    model = classifier.build_model(arch, num_classes=2)
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 2)


def test_frozen_backbone_gets_no_gradient_and_head_does():
    model = classifier.build_model("resnet18", num_classes=2, freeze_backbone=True)
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    head = {id(p) for p in model.fc.parameters()}  # resnet18's new head
    for param in model.parameters():
        if id(param) in head:
            assert param.requires_grad and param.grad is not None
        else:
            assert not param.requires_grad and param.grad is None


def test_optimizer_only_sees_trainable_parameters():
    model = classifier.build_model("resnet18", num_classes=2, freeze_backbone=True)
    optimizer = train.build_optimizer(model, parse_config(["--data", "d"]))
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == 512 * 2 + 2


def test_weights_from_a_state_dict_file(tmp_path):
    # A backbone state dict as torchvision ships it (1000-class head): the air-gapped form.
    backbone = classifier.build_model("resnet18", num_classes=1000)
    path = tmp_path / "resnet18.pth"
    torch.save(backbone.state_dict(), path)
    model = classifier.build_model("resnet18", num_classes=2, weights=str(path))
    assert torch.equal(model.conv1.weight, backbone.conv1.weight)
    assert model.fc.out_features == 2


def test_weights_file_for_another_arch_is_a_clear_error(tmp_path):
    path = tmp_path / "other.pth"
    torch.save(classifier.build_model("mobilenet_v3_small", 1000).state_dict(), path)
    with pytest.raises(classifier.ModelError, match="does not fit resnet18"):
        classifier.build_model("resnet18", 2, weights=str(path))


def test_unknown_arch_lists_the_choices():
    with pytest.raises(classifier.ModelError, match="resnet50"):
        classifier.build_model("resnet19", 2)


def test_imagenet_offline_fails_fast_with_advice(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # no cached weights

    def offline(*args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr("torchvision.models._api.load_state_dict_from_url", offline)
    with pytest.raises(classifier.ModelError, match="--weights /path/to/state_dict.pth"):
        classifier.build_model("resnet18", 2, weights="imagenet")


@pytest.mark.parametrize("size", [(500, 375), (375, 500), (257, 256), (256, 300), (1203, 224),
                                  (40, 30), (641, 480)])
def test_eval_resize_and_crop_in_one_step_equals_torchvision_two_steps(size):
    """The eval geometry resamples only the cropped region; it must give torchvision's
    Resize + CenterCrop pixels (within one level of rounding), padding included."""
    import numpy as np
    from PIL import Image
    from torchvision import transforms

    from image_classifier.data import ResizeCenterCrop

    rng = np.random.default_rng(sum(size))
    noise = rng.integers(0, 256, (size[1] // 8 + 1, size[0] // 8 + 1, 3), dtype=np.uint8)
    image = Image.fromarray(noise).resize(size, Image.BICUBIC)
    for resize, crop in ((256, 224), (46, 40), (64, 70)):
        ours = np.asarray(ResizeCenterCrop(resize, crop)(image), dtype=int)
        reference = transforms.Compose([transforms.Resize(resize), transforms.CenterCrop(crop)])
        theirs = np.asarray(reference(image), dtype=int)
        assert ours.shape == theirs.shape == (crop, crop, 3)
        assert np.abs(ours - theirs).max() <= 1
        assert (ours != theirs).mean() < 0.05
