"""Write endpoints/sample-request.json: {"images": [<base64 JPEG>, ...]} from image files.

    python scripts/make_sample_request.py [IMAGE ...] [--out endpoints/sample-request.json]

Default: one image of the embedded synthetic data (so it works offline and stays small).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_synthetic_data import generate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*", type=Path, help="JPEG or PNG files")
    parser.add_argument("--out", type=Path, default=Path("endpoints/sample-request.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        made = generate(Path(tmp), train_per_class=1, val_per_class=1)
        images = args.images or [made / "val" / "chickens" / "chickens_0000.jpg"]
        body = {"images": [base64.b64encode(p.read_bytes()).decode() for p in images]}
    args.out.write_text(json.dumps(body) + "\n")
    print(f"wrote {args.out} ({len(images)} image(s), {args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
