"""The eval preprocessing in NumPy and Pillow: what a scoring worker runs, without torch.

Eval geometry is torchvision's Resize(shorter side) then CenterCrop, done as one resampling of
the pixels the crop keeps (ResizeCenterCrop); then ToTensor (HWC uint8 -> CHW float32 / 255)
and Normalize ((x - mean) / std), as the same float32 operations in the same order, so an image
gives the numbers data.build_transforms gives it (tests/unit/test_preprocess.py). An ONNX model
is served with this alone; the torch backend is fed the same arrays (torch.from_numpy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from PIL import Image

from .images import to_rgb


def resize_size(image_size: int) -> int:
    """Eval resize before the center crop, in the torchvision reference ratio (256 for 224)."""
    return int(round(image_size * 256 / 224))


def resized(width: int, height: int, shorter: int) -> tuple[int, int]:
    """(width, height) once the shorter side is `shorter`: torchvision's Resize(int) rule (the
    longer side truncated)."""
    if width <= height:
        return shorter, int(shorter * height / width)
    return int(shorter * width / height), shorter


def _offset(side: int, crop: int) -> int:
    """Where CenterCrop starts along one side: negative where it pads (with black) first."""
    return -((crop - side) // 2) if crop > side else int(round((side - crop) / 2.0))


class ResizeCenterCrop:
    """torchvision's Resize(resize) then CenterCrop(crop) on a PIL image, in one resampling of
    only the pixels the crop keeps (Pillow's resize `box`): the same filter taps at the same
    source positions, so the result equals the two-step one to within one level of rounding,
    at about half the CPU. Preprocessing is what a CPU endpoint spends besides the model, on
    every image. A crop larger than the resized image is padded with black, as CenterCrop pads."""

    def __init__(self, resize: int, crop: int):
        self.resize, self.crop = resize, crop

    def __call__(self, image: Image.Image) -> Image.Image:
        width, height = image.size
        new_w, new_h = resized(width, height, self.resize)
        left, top = _offset(new_w, self.crop), _offset(new_h, self.crop)
        if left < 0 or top < 0:  # pads: the whole image resized, then cut with a black border
            if (new_w, new_h) != (width, height):
                image = image.resize((new_w, new_h), Image.BILINEAR)
            return image.crop((left, top, left + self.crop, top + self.crop))
        if (new_w, new_h) == (width, height):
            return image.crop((left, top, left + self.crop, top + self.crop))
        sx, sy = width / new_w, height / new_h
        box = (left * sx, top * sy, (left + self.crop) * sx, (top + self.crop) * sy)
        return image.resize((self.crop, self.crop), Image.BILINEAR, box=box)


@dataclass(frozen=True)
class Preprocess:
    """A decoded RGB image -> the model's 3 x S x S float32 input, normalized as in training."""

    image_size: int
    mean: Sequence[float]
    std: Sequence[float]

    @cached_property
    def _geometry(self) -> ResizeCenterCrop:
        return ResizeCenterCrop(resize_size(self.image_size), self.image_size)

    @cached_property
    def _scale(self) -> tuple[np.ndarray, np.ndarray]:
        """mean and std as float32 C x 1 x 1, made once, not per image."""
        return (np.asarray(self.mean, dtype=np.float32).reshape(-1, 1, 1),
                np.asarray(self.std, dtype=np.float32).reshape(-1, 1, 1))

    def __call__(self, image: Image.Image) -> np.ndarray:
        pixels = np.asarray(self._geometry(to_rgb(image)))
        chw = pixels.transpose(2, 0, 1).astype(np.float32, order="C")  # one copy, laid out CHW
        chw /= np.float32(255)
        mean, std = self._scale
        chw -= mean
        chw /= std
        return chw

    def batch(self, images: list[Image.Image]) -> np.ndarray:
        """N images -> one N x 3 x S x S array."""
        return np.stack([self(image) for image in images])
