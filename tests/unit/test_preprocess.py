"""The scoring preprocessing (NumPy and Pillow, no torch) gives the numbers training's eval
transform (torchvision) gives, image for image."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from image_classifier.images import open_image, to_rgb
from image_classifier.preprocess import Preprocess, resize_size

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def picture(width: int, height: int, mode: str, seed: int) -> Image.Image:
    """Smooth structure with noise on it, as a photo has, in `mode`."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // 8 + 2, width // 8 + 2, 4), dtype=np.uint8)
    smooth = Image.fromarray(coarse, "RGBA").resize((width, height), Image.BICUBIC)
    noisy = np.clip(np.asarray(smooth, dtype=int) + rng.integers(-20, 21, (height, width, 4)),
                    0, 255).astype(np.uint8)
    return Image.fromarray(noisy, "RGBA").convert(mode)


def as_jpeg(image: Image.Image, min_side: int) -> Image.Image:
    """Encoded and decoded as a scorer reads a file (draft scale included)."""
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=90)
    return open_image(buffer.getvalue(), min_side)


@pytest.mark.parametrize(("size", "mode"), [
    ((500, 375), "RGB"), ((375, 500), "RGB"), ((257, 301), "L"), ((333, 211), "RGBA"),
    ((224, 224), "RGB"), ((1203, 224), "RGB"), ((31, 45), "LA"), ((640, 480), "P"),
    ((97, 1003), "I;16"),
])
@pytest.mark.parametrize("image_size", [224, 40, 97])
def test_numpy_preprocessing_equals_the_torchvision_eval_transform(size, mode, image_size):
    from image_classifier.data import build_transforms

    if mode == "I;16":
        ramp = np.linspace(0, 65535, size[0] * size[1]).reshape(size[1], size[0])
        image = to_rgb(Image.fromarray(ramp.astype(np.uint16)))
    else:
        image = to_rgb(picture(*size, mode, seed=sum(size)))
    if mode == "RGB" and size[0] > 400:
        image = as_jpeg(image, resize_size(image_size))
    expected = build_transforms(image_size, train=False, mean=MEAN, std=STD)(image).numpy()
    ours = Preprocess(image_size, MEAN, STD)(image)
    assert ours.dtype == np.float32 and ours.shape == expected.shape == (3, image_size,
                                                                         image_size)
    assert np.abs(ours - expected).max() <= 1e-6


def test_a_batch_is_the_images_stacked_in_order():
    images = [picture(120, 90, "RGB", seed) for seed in range(3)]
    preprocess = Preprocess(64, MEAN, STD)
    batch = preprocess.batch(images)
    assert batch.shape == (3, 3, 64, 64) and batch.flags.c_contiguous
    assert all(np.array_equal(batch[i], preprocess(image)) for i, image in enumerate(images))


def test_an_image_not_yet_rgb_is_made_rgb_as_the_decoder_makes_it():
    grey = picture(80, 60, "LA", seed=1)
    preprocess = Preprocess(32, MEAN, STD)
    assert np.array_equal(preprocess(grey), preprocess(to_rgb(grey)))
