"""Download the public fowl (chickens/turkeys) zip and check it is a usable ImageFolder.

    python scripts/download_data.py --out data/fowl_data.zip

Offline, it fails within the timeout with a message saying what to use instead.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from image_classifier.data import DataError, build_datasets

FOWL_URL = "https://azuremlexamples.blob.core.windows.net/datasets/fowl_data.zip"
EXPECTED_CLASSES = ["chickens", "turkeys"]


class ProgressReader:
    """A response whose reads advance a progress bar (the zip is hundreds of megabytes)."""

    def __init__(self, response, bar: tqdm):
        self.response, self.bar = response, bar

    def read(self, size: int = -1) -> bytes:
        chunk = self.response.read(size)
        self.bar.update(len(chunk))
        return chunk


def download(url: str, out: Path, timeout: float) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out.parent, suffix=".part", delete=False) as part:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, \
                    tqdm(total=int(response.headers.get("Content-Length") or 0) or None,
                         unit="B", unit_scale=True, desc=out.name) as bar:
                shutil.copyfileobj(ProgressReader(response, bar), part)
        except (TimeoutError, urllib.error.URLError, OSError) as err:
            Path(part.name).unlink(missing_ok=True)
            raise SystemExit(
                f"could not download {url} ({err}). Offline? Use the embedded synthetic data "
                "(make train-local without DATA=) or pass DATA=/path/to/imagefolder."
            ) from err
    Path(part.name).replace(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=FOWL_URL)
    parser.add_argument("--out", default="data/fowl_data.zip")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per network read")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not out.is_file():
        download(args.url, out, args.timeout)
    try:
        bundle = build_datasets(out, image_size=224, cache_root=out.parent / ".cache")
    except DataError as err:
        print(f"{out}: downloaded but not usable: {err}", file=sys.stderr)
        return 1
    if args.url == FOWL_URL and bundle.classes != EXPECTED_CLASSES:
        print(f"{out}: expected classes {EXPECTED_CLASSES}, found {bundle.classes}",
              file=sys.stderr)
        return 1
    print(f"{out}: OK, {len(bundle.train)} train / {len(bundle.val)} val images, "
          f"classes {bundle.classes}. Train on it with: make train-local DATA={out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
