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
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image

from . import exit_with
from .config import PrepConfig, parse
from .config import build_parser as config_parser
from .data import DataError, build_datasets, resize_size
from .images import ImageError

log = logging.getLogger("image_classifier.prep")


def resize_shorter_side(image: Image.Image, side: int) -> Image.Image:
    scale = side / min(image.size)
    if scale >= 1:
        return image  # never upsample: training crops do that with the real pixels
    size = (max(side, round(image.width * scale)), max(side, round(image.height * scale)))
    return image.resize(size, Image.Resampling.BICUBIC, reducing_gap=2.0)


@dataclass(frozen=True, kw_only=True)
class PrepReport:
    """prep_report.json: what was read, the size written, and how many images each split got."""

    source: str
    image_size: int
    shorter_side: int
    classes: list[str]
    counts: dict[str, dict[str, int]]  # split -> class -> images written
    skipped_unreadable: int


def prep(cfg: PrepConfig) -> PrepReport:
    """Every image is decoded for real by the check in build_datasets (the same decoder as
    training and serving); one that fails only now is skipped with --skip_bad_images, else an
    error naming it."""
    output = Path(cfg.output)
    bundle = build_datasets(cfg.data, cfg.image_size, skip_bad_images=cfg.skip_bad_images)
    side = resize_size(cfg.image_size)
    counts: dict[str, dict[str, int]] = {}
    skipped = bundle.skipped
    for split, dataset in (("train", bundle.train), ("val", bundle.val)):
        counts[split] = dict.fromkeys(bundle.classes, 0)
        for path, target in dataset.samples:
            label = bundle.classes[target]
            try:
                image = dataset.loader(path)
            except ImageError as err:
                if not cfg.skip_bad_images:
                    raise DataError(f"{path}: {err}. Remove or replace it, or pass "
                                    "--skip_bad_images True") from None
                skipped += 1
                continue
            destination = output / split / label / f"{Path(path).stem}.jpg"
            destination.parent.mkdir(parents=True, exist_ok=True)
            resize_shorter_side(image, side).save(destination, quality=95)
            counts[split][label] += 1
    report = PrepReport(source=str(bundle.root), image_size=cfg.image_size, shorter_side=side,
                        classes=bundle.classes, counts=counts, skipped_unreadable=skipped)
    (output / "prep_report.json").write_text(json.dumps(asdict(report), indent=2) + "\n")
    return report


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per field of PrepConfig (validation checks specs against it)."""
    return config_parser(PrepConfig)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(PrepConfig, argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    try:
        report = prep(cfg)
    except DataError as err:
        log.error("%s", err)
        return 2
    log.info("prepared %s -> %s: %s", report.source, cfg.output, report.counts)
    return 0


if __name__ == "__main__":
    exit_with(main)
