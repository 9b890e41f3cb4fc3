

import pytest

from image_classifier.data import build_transforms


@pytest.mark.proof
def test_transforms_give_normalized_square_tensors(tiny_data):
    from PIL import Image

    image = Image.open(next((tiny_data / "train" / "chickens").iterdir())).convert("RGB")
    for train in (True, False):
        tensor = build_transforms(40, train=train)(image)
        assert tensor.shape == (3, 40, 40)
        assert tensor.min() < 0  # normalized, not raw [0, 1]
