"""Pipeline step: check every image and resize it once to the training size.

``python -m image_classifier.prep --data <imagefolder|zip> --output <folder> --image_size 224``

Writes ``<output>/{train,val}/<class>/*.jpg`` with the shorter side at the eval resize size (the
largest size training and evaluation read), so later steps never decode full-size photos, plus
``prep_report.json`` with the counts.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from PIL import Image

from . import exit_with
from .config import str2bool
from .data import DataError, build_datasets, resize_size
from .images import ImageError

log = logging.getLogger("image_classifier.prep")


def resize_shorter_side(image: Image.Image, side: int) -> Image.Image:
    scale = side / min(image.size)
    if scale >= 1:
        return image  # never upsample: training crops do that with the real pixels
    size = (max(side, round(image.width * scale)), max(side, round(image.height * scale)))
    return image.resize(size, Image.Resampling.BICUBIC, reducing_gap=2.0)


def prep(data: str, output: Path, image_size: int, skip_bad_images: bool) -> dict:
    """Every image is decoded for real by the check in build_datasets (the same decoder as
    training and serving); one that fails only now is skipped with --skip_bad_images, else an
    error naming it."""
    bundle = build_datasets(data, image_size, skip_bad_images)
    side = resize_size(image_size)
    counts: dict[str, dict[str, int]] = {}
    skipped = bundle.skipped
    for split, dataset in (("train", bundle.train), ("val", bundle.val)):
        counts[split] = dict.fromkeys(bundle.classes, 0)
        for path, target in dataset.samples:
            label = bundle.classes[target]
            try:
                image = dataset.loader(path)
            except ImageError as err:
                if not skip_bad_images:
                    raise DataError(f"{path}: {err}. Remove or replace it, or pass "
                                    "--skip_bad_images True") from None
                skipped += 1
                continue
            destination = output / split / label / f"{Path(path).stem}.jpg"
            destination.parent.mkdir(parents=True, exist_ok=True)
            resize_shorter_side(image, side).save(destination, quality=95)
            counts[split][label] += 1
    report = {"source": str(bundle.root), "image_size": image_size, "shorter_side": side,
              "classes": bundle.classes, "counts": counts, "skipped_unreadable": skipped}
    (output / "prep_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Check images and resize them once.")
    parser.add_argument("--data", required=True, help="ImageFolder, its parent, or a .zip")
    parser.add_argument("--output", required=True, help="folder for the resized ImageFolder")
    parser.add_argument("--image_size", type=int, default=224, help="training crop size")
    parser.add_argument("--skip_bad_images", type=str2bool, nargs="?", const=True, default=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    try:
        report = prep(args.data, Path(args.output), args.image_size, args.skip_bad_images)
    except DataError as err:
        log.error("%s", err)
        return 2
    log.info("prepared %s -> %s: %s", report["source"], args.output, report["counts"])
    return 0


if __name__ == "__main__":
    exit_with(main)
