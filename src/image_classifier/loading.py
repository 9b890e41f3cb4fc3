"""Reading images for training: the check before epoch 1, the decoded-image cache, bad samples.

- The check decodes every image for real (a half-length JPEG passes Image.verify() but not a
  decode), on a few threads (Pillow releases the GIL while decoding). When the cache is on, what
  it decodes is what epoch 1 would have decoded: it stays in the cache, so epoch 1 computes
  instead of decoding.
- A decode that still fails later (a file changed under a running job) never raises inside the
  loader: the sample comes back as a Problem, and the engine decides on every rank alike (skip
  and count it with --skip_bad_images, else one clear error naming the file, on all ranks).
- The cache lives in the process that reads. With DataLoader workers (GPU nodes) each worker
  would hold its own copy and lose it every epoch, so the cache is off there: the workers'
  parallel decoding is what hides decode time on those nodes.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
from PIL import Image
from torch.utils.data import default_collate

from . import usable_cores
from .images import Limits, open_image

log = logging.getLogger(__name__)
CHECK_SIDE = 32  # without a cache, the check decodes JPEGs at their smallest draft scale


@dataclass(frozen=True)
class Problem:
    """A sample that could not be read: the engine skips it or stops on it."""

    path: str
    message: str


class ImageLoader:
    """Open an image as RGB through images.open_image, keeping decoded images in RAM up to
    ``cache_bytes`` (decoding is half the per-image CPU cost; small datasets then skip it)."""

    def __init__(self, min_side: int, cache_bytes: int = 0):
        self.min_side = min_side
        self.cache_bytes = cache_bytes
        self._cache: dict[str, Image.Image] = {}
        self._cached_bytes = 0

    def remember(self, path: str, image: Image.Image) -> None:
        size = image.width * image.height * 3
        if path not in self._cache and self._cached_bytes + size <= self.cache_bytes:
            self._cache[path] = image
            self._cached_bytes += size

    def __call__(self, path: str) -> Image.Image:
        image = self._cache.get(path)
        if image is None:
            image = open_image(path, self.min_side, Limits())
            self.remember(path, image)
        return image  # transforms return new images; the cached one is never modified


def check(paths: list[str], loader: ImageLoader, threads: int) -> dict[str, str]:
    """Decode every image once; return {path: problem} for those that fail. Fills the cache."""
    side = loader.min_side if loader.cache_bytes else CHECK_SIDE

    def one(path: str) -> tuple[str, Image.Image | None, str]:
        try:
            return path, open_image(path, side, Limits()), ""
        except ValueError as err:  # ImageError
            return path, None, str(err)

    bad: dict[str, str] = {}
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for path, image, problem in pool.map(one, paths, chunksize=8):
            if problem:
                bad[path] = problem
            elif loader.cache_bytes:
                loader.remember(path, image)
    return bad


def check_threads() -> int:
    return min(8, usable_cores())


def collate(batch: list) -> tuple[torch.Tensor, torch.Tensor, list[Problem]]:
    """(images, targets, problems): the readable samples stacked, the unreadable ones listed."""
    problems = [item for item in batch if isinstance(item, Problem)]
    good = [item for item in batch if not isinstance(item, Problem)]
    if not good:
        return torch.empty(0), torch.empty(0, dtype=torch.long), problems
    images, targets = default_collate(good)
    return images, targets, problems
