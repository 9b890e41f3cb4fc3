"""Data: locate the ImageFolder behind ``--data``, build transforms and datasets, check images."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError
from torchvision import datasets, transforms
from torchvision.datasets.folder import IMG_EXTENSIONS

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SPLITS = ("train", "val")
_IGNORED_CHILDREN = {"__MACOSX"}


class DataError(ValueError):
    """A problem with the user's data; the message names the path and what to do."""


def resize_size(image_size: int) -> int:
    """Eval resize before the center crop, in the torchvision reference ratio (256 for 224)."""
    return int(round(image_size * 256 / 224))


def _has_splits(folder: Path) -> bool:
    return all((folder / split).is_dir() for split in SPLITS)


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "image-classifier"


def extract_zip(zip_path: Path, cache_root: Path | None = None) -> Path:
    """Extract once per zip content version; concurrent ranks race safely via an atomic rename."""
    stat = zip_path.stat()
    identity = f"{zip_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha1(identity.encode()).hexdigest()
    dest = (cache_root or _cache_root()) / f"{zip_path.stem}-{key[:12]}"
    if dest.is_dir():
        return dest
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(tmp)  # zipfile strips absolute and '..' members
    except zipfile.BadZipFile as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(f"{zip_path}: not a readable zip file ({err}).") from err
    try:
        os.rename(tmp, dest)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("extracted %s to %s", zip_path, dest)
    return dest


def resolve_data_root(data: str | os.PathLike, cache_root: Path | None = None) -> Path:
    """Return the folder holding train/ and val/: the path itself, its single child, or a zip's."""
    path = Path(data)
    if not path.exists():
        raise DataError(f"--data {path}: no such file or folder.")
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise DataError(f"--data {path}: a file must be a .zip of an ImageFolder.")
        path = extract_zip(path, cache_root)
    if _has_splits(path):
        return path
    children = [c for c in path.iterdir() if c.is_dir() and c.name not in _IGNORED_CHILDREN
                and not c.name.startswith(".")]
    if len(children) == 1 and _has_splits(children[0]):
        return children[0]
    found = ", ".join(sorted(c.name for c in children)) or "nothing"
    raise DataError(
        f"--data {data}: expected train/ and val/ folders (one sub-folder per class) here or in "
        f"its single child folder; found {found}."
    )


class ImageLoader:
    """Open an image as RGB, letting libjpeg decode large JPEGs at a reduced scale.

    ``draft`` picks the largest 1/2, 1/4 or 1/8 scale still at least ``min_side`` on both sides,
    so a 12 MP photo is decoded at a fraction of the cost while the crop keeps its detail.
    Decoded images are kept in RAM up to ``cache_bytes``: decoding is half the per-image CPU cost,
    and on small datasets every epoch after the first then skips it. The cache lives in the
    process that calls the loader (with workers, in each worker for one epoch).
    """

    def __init__(self, min_side: int, cache_bytes: int = 0):
        self.min_side = min_side
        self.cache_bytes = cache_bytes
        self._cache: dict[str, Image.Image] = {}
        self._cached_bytes = 0

    def _decode(self, path: str) -> Image.Image:
        with Image.open(path) as img:
            if img.format == "JPEG":
                img.draft("RGB", (self.min_side, self.min_side))
            return img.convert("RGB")

    def __call__(self, path: str) -> Image.Image:
        image = self._cache.get(path)
        if image is None:
            image = self._decode(path)
            size = image.width * image.height * 3
            if self._cached_bytes + size <= self.cache_bytes:
                self._cache[path] = image
                self._cached_bytes += size
        return image  # transforms return new images; the cached one is never modified


def build_transforms(image_size: int, train: bool, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Train: random resized crop + flip; eval: resize + center crop. Both normalize."""
    if train:
        geometry = [transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip()]
    else:
        geometry = [transforms.Resize(resize_size(image_size)), transforms.CenterCrop(image_size)]
    return transforms.Compose([*geometry, transforms.ToTensor(), transforms.Normalize(mean, std)])


def _is_readable_image(path: str) -> bool:
    try:
        with Image.open(path) as img:
            img.verify()
        return True
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return False


def check_images(dataset: datasets.ImageFolder, skip_bad: bool) -> int:
    """Fail on the first unreadable file, or drop them all and return how many were dropped."""
    good = []
    bad = []
    for sample in dataset.samples:
        (good if _is_readable_image(sample[0]) else bad).append(sample)
    if bad and not skip_bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise DataError(
            f"{bad[0][0]}: not a readable image{more}. Remove or replace it, or pass "
            "--skip_bad_images True to skip such files."
        )
    for path, _ in bad:
        log.warning("skipping unreadable image %s", path)
    dataset.samples = dataset.imgs = good
    dataset.targets = [target for _, target in good]
    return len(bad)


@dataclass
class DataBundle:
    root: Path
    train: datasets.ImageFolder
    val: datasets.ImageFolder
    classes: list[str]
    skipped: int


def _image_folder(split_dir: Path, transform, loader) -> datasets.ImageFolder:
    try:
        dataset = datasets.ImageFolder(str(split_dir), transform=transform, loader=loader)
    except FileNotFoundError as err:
        raise DataError(
            f"{split_dir}: no images found ({err}). Each split needs one sub-folder per class "
            "holding .jpg/.png files."
        ) from err
    ignored = [p for p in split_dir.rglob("*") if p.is_file() and not p.name.startswith(".")
               and not p.name.lower().endswith(IMG_EXTENSIONS)]
    if ignored:
        log.warning("%s: ignored %d file(s) of a type ImageFolder does not read (%s), e.g. %s",
                    split_dir, len(ignored), " ".join(IMG_EXTENSIONS), ignored[0])
    return dataset


def build_datasets(data: str | os.PathLike, image_size: int, skip_bad_images: bool = False,
                   cache_root: Path | None = None, cache_images_mb: int = 0) -> DataBundle:
    root = resolve_data_root(data, cache_root)
    loader = ImageLoader(resize_size(image_size), cache_images_mb * 2**20)
    train = _image_folder(root / "train", build_transforms(image_size, train=True), loader)
    val = _image_folder(root / "val", build_transforms(image_size, train=False), loader)
    if train.classes != val.classes:
        only_train = sorted(set(train.classes) - set(val.classes))
        only_val = sorted(set(val.classes) - set(train.classes))
        raise DataError(
            f"{root}: train/ and val/ must hold the same class folders; only in train: "
            f"{only_train or '-'}, only in val: {only_val or '-'}."
        )
    skipped = check_images(train, skip_bad_images) + check_images(val, skip_bad_images)
    for split, ds in (("train", train), ("val", val)):
        if not ds.samples:
            raise DataError(f"{root / split}: every image was unreadable; nothing left to use.")
    return DataBundle(root, train, val, list(train.classes), skipped)
