"""Data: locate the ImageFolder behind ``--data``, build transforms and datasets, check images."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from torch.utils.data import DataLoader, DistributedSampler, Subset
from torchvision import datasets, transforms
from torchvision.datasets.folder import IMG_EXTENSIONS

from .config import TrainConfig
from .distributed import DistContext
from .images import ImageError
from .loading import ImageLoader, Problem, check, check_threads, collate
from .preprocess import ResizeCenterCrop, resize_size

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SPLITS = ("train", "val")
_IGNORED_CHILDREN = {"__MACOSX"}


class DataError(ValueError):
    """A problem with the user's data; the message names the path and what to do."""


def _has_splits(folder: Path) -> bool:
    return all((folder / split).is_dir() for split in SPLITS)


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "image-classifier"


def _remove_stale_extractions(cache: Path) -> None:
    """A process killed mid-extraction (or a full disk) leaves <name>.tmp-<pid>: clear those
    whose process is gone."""
    for tmp in cache.glob("*.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        try:
            os.kill(int(pid), 0)
        except (ValueError, ProcessLookupError):
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:
            continue  # alive, someone else's


def check_archive(zip_path: Path, members: list[zipfile.ZipInfo]) -> None:
    """A zip bomb is refused from its directory before a byte is written: more members, more
    inflated bytes, or a higher inflated/stored ratio than the limits (ARCHIVE_MAX_MEMBERS,
    ARCHIVE_MAX_BYTES, ARCHIVE_MAX_RATIO raise them). zipfile stops any member at its stated
    size."""
    files = [m for m in members if not m.is_dir()]
    total, stored = sum(m.file_size for m in files), sum(m.compress_size for m in files)
    for name, value, default in (("ARCHIVE_MAX_MEMBERS", len(files), 200_000),
                                 ("ARCHIVE_MAX_BYTES", total, 10 * 2**30),
                                 ("ARCHIVE_MAX_RATIO", total // max(1, stored) if total > 2**20
                                  else 0, 200)):
        limit = int(os.environ.get(name) or default)
        if value > limit:
            raise DataError(f"{zip_path}: refused as a zip bomb: {name.split('_', 2)[2].lower()} "
                            f"{value:,} is over the limit {limit:,} ({name}=<n> raises it).")


def extract_zip(zip_path: Path, cache_root: Path | None = None) -> Path:
    """Extract once per zip content version; concurrent ranks race safely via an atomic rename."""
    stat = zip_path.stat()
    identity = f"{zip_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha1(identity.encode()).hexdigest()
    cache = cache_root or _cache_root()
    dest = cache / f"{zip_path.stem}-{key[:12]}"
    if dest.is_dir():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    _remove_stale_extractions(cache)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    try:
        with zipfile.ZipFile(zip_path) as archive:
            check_archive(zip_path, archive.infolist())
            archive.extractall(tmp)  # zipfile strips absolute and '..' members
    except zipfile.BadZipFile as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(f"{zip_path}: not a readable zip file ({err}).") from err
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(f"{zip_path}: extracting into {cache} failed ({err.strerror or err}). "
                        "Free some space there, or set XDG_CACHE_HOME to a larger disk.") from err
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


def build_transforms(image_size: int, train: bool, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Train: random resized crop + flip; eval: resize + center crop (as preprocess.Preprocess
    does without torch). Both normalize."""
    if train:
        geometry = [transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip()]
    else:
        geometry = [ResizeCenterCrop(resize_size(image_size), image_size)]
    return transforms.Compose([*geometry, transforms.ToTensor(), transforms.Normalize(mean, std)])


def _walk_class(folder: str, others: list[str]) -> list[str]:
    """Image files under one class folder, following links but never into a loop, twice into one
    folder, or into another class's folder (whose images would get this class's label)."""
    found, seen = [], set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        inside_other = any(real == o or real.startswith(o + os.sep) for o in others)
        if real in seen or inside_other:
            log.warning("%s: not read (a link back into %s)", root,
                        "a folder already read" if real in seen else "another class's folder")
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        found += [os.path.join(root, f) for f in sorted(files)
                  if f.lower().endswith(IMG_EXTENSIONS)]
    return found


class SafeImageFolder(datasets.ImageFolder):
    """ImageFolder whose walk is loop-safe and whose unreadable samples come back as Problems."""

    @staticmethod
    def make_dataset(directory, class_to_idx, extensions=None, is_valid_file=None,
                     allow_empty=False):
        reals = {name: os.path.realpath(os.path.join(directory, name)) for name in class_to_idx}
        instances, empty = [], []
        for name, index in sorted(class_to_idx.items()):
            others = [r for other, r in reals.items() if other != name]
            found = _walk_class(os.path.join(directory, name), others)
            instances += [(path, index) for path in found]
            if not found:
                empty.append(name)
        if empty and not allow_empty:  # as torchvision's ImageFolder: a class with no image
            raise FileNotFoundError(  # could never be learned (or, in val, measured)
                f"Found no valid file for the class(es) {', '.join(empty)}")
        return instances

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        try:
            sample = self.loader(path)
        except ImageError as err:
            return Problem(path, str(err))
        return self.transform(sample), target


@dataclass(kw_only=True)
class DataBundle:
    root: Path
    train: SafeImageFolder
    val: SafeImageFolder
    classes: list[str]
    skipped: int


def _image_folder(split_dir: Path, transform, loader) -> SafeImageFolder:
    try:
        dataset = SafeImageFolder(str(split_dir), transform=transform, loader=loader)
    except FileNotFoundError as err:
        raise DataError(
            f"{split_dir}: no images found ({err}). Each split needs one sub-folder per class, "
            "each holding at least one image (.jpg, .png, ...): add images or remove the folder "
            "from both splits."
        ) from err
    ignored = [p for p in split_dir.rglob("*") if p.is_file() and not p.name.startswith(".")
               and not p.name.lower().endswith(IMG_EXTENSIONS)]
    if ignored:
        log.warning("%s: ignored %d file(s) of a type ImageFolder does not read (%s), e.g. %s",
                    split_dir, len(ignored), " ".join(IMG_EXTENSIONS), ignored[0])
    return dataset


def check_images(splits: list[SafeImageFolder], loader: ImageLoader, skip_bad: bool) -> int:
    """Decode every image (filling the cache); fail on unreadable ones naming the first, or drop
    them all and return how many were dropped."""
    bad = check([path for ds in splits for path, _ in ds.samples], loader, check_threads())
    if bad and not skip_bad:
        first, problem = next(iter(bad.items()))
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise DataError(f"{first}: {problem}{more}. Remove or replace it, or pass "
                        "--skip_bad_images True to skip such files.")
    for path, problem in bad.items():
        log.warning("skipping %s: %s", path, problem)
    for dataset in splits:
        dataset.samples = dataset.imgs = [s for s in dataset.samples if s[0] not in bad]
        dataset.targets = [target for _, target in dataset.samples]
    return len(bad)


def build_datasets(data: str | os.PathLike, image_size: int, *, skip_bad_images: bool = False,
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
    skipped = check_images([train, val], loader, skip_bad_images)
    for split, ds in (("train", train), ("val", val)):
        if not ds.samples:
            raise DataError(f"{root / split}: every image was unreadable; nothing left to use.")
        left = {target for _, target in ds.samples}
        emptied = [name for index, name in enumerate(ds.classes) if index not in left]
        if emptied:
            raise DataError(f"{root / split}: every image of class(es) {', '.join(emptied)} was "
                            "unreadable; a class needs at least one readable image in each split.")
    return DataBundle(root=root, train=train, val=val, classes=list(train.classes), skipped=skipped)


@dataclass
class Loaders:
    """The training and validation loaders of one process (its shard)."""

    train: DataLoader
    val: DataLoader
    sampler: DistributedSampler  # set_epoch() reshuffles the training shards


def build_loaders(bundle: DataBundle, cfg: TrainConfig, ctx: DistContext,
                  workers: int) -> Loaders:
    # drop_last keeps rank shards disjoint (no padding duplicates); no effect with one process.
    sampler = DistributedSampler(bundle.train, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=cfg.seed, drop_last=True)
    # A last batch of one image breaks BatchNorm (one value per channel at small sizes): drop
    # it; the shuffle gives that image a place in another epoch.
    lone = len(sampler) % cfg.batch_size == 1 and len(sampler) > 1
    # Validation is sharded without padding so every image counts exactly once in the sums.
    val_shard = Subset(bundle.val, range(ctx.rank, len(bundle.val), ctx.world_size))
    common = {"batch_size": cfg.batch_size, "num_workers": workers, "collate_fn": collate,
              "pin_memory": ctx.device.type == "cuda"}
    train = DataLoader(bundle.train, sampler=sampler, drop_last=lone, **common)
    val = DataLoader(val_shard, shuffle=False, **common)
    return Loaders(train, val, sampler)
