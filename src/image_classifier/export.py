"""Export a model folder to ONNX with a parity check against torch on real images.

``python -m image_classifier.export --model_dir <folder> --data <imagefolder>``

Writes ``model.onnx`` beside ``model.pt`` (the scoring script then serves it with onnxruntime),
prints the largest absolute logit difference between onnxruntime and torch on up to 16
validation images, and fails (removing the file) if it exceeds ``--tolerance``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import torch

from .data import DataError, build_datasets
from .inference import find_model_file, load_model
from .model import ModelError

ONNX_FILE = "model.onnx"
log = logging.getLogger("image_classifier.export")


class ParityError(ModelError):
    """onnxruntime and torch disagree beyond the tolerance."""


def sample_batch(data: str, transform, count: int = 16) -> torch.Tensor:
    """Real validation images, preprocessed exactly as the scoring script does."""
    bundle = build_datasets(data, image_size=224)
    paths = [path for path, _ in bundle.val.samples[:count]]
    return torch.stack([transform(bundle.val.loader(p)) for p in paths])


def export_onnx(model: torch.nn.Module, batch: torch.Tensor, path: Path,
                tolerance: float = 1e-4) -> float:
    """Export with a dynamic batch axis; return the max |onnxruntime - torch| on `batch`."""
    import onnxruntime

    model = model.eval().float()
    batch_dim = torch.export.Dim("batch", min=1, max=1024)
    program = torch.onnx.export(model, (batch[:2],), dynamo=True, input_names=["input"],
                                output_names=["logits"], dynamic_shapes=({0: batch_dim},),
                                verbose=False)
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.inference_mode():
        expected = model(batch).numpy()
    actual = session.run(["logits"], {"input": batch.numpy()})[0]
    difference = float(np.abs(actual - expected).max())
    if difference > tolerance:
        path.unlink(missing_ok=True)
        raise ParityError(f"onnxruntime differs from torch by {difference:.2e} (> {tolerance}); "
                          f"{path} removed")
    return difference


def export_model_dir(model_dir: str, data: str, tolerance: float = 1e-4) -> tuple[Path, float]:
    loaded = load_model(model_dir)
    path = find_model_file(model_dir).parent / ONNX_FILE
    difference = export_onnx(loaded.model, sample_batch(data, loaded.transform), path, tolerance)
    return path, difference


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Export a model folder to ONNX (parity-checked).")
    parser.add_argument("--model_dir", required=True, help="folder holding model.pt")
    parser.add_argument("--data", required=True, help="ImageFolder whose val/ images are used")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="max |onnx - torch| logit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    try:
        path, difference = export_model_dir(args.model_dir, args.data, args.tolerance)
    except (DataError, FileNotFoundError, ParityError) as err:
        log.error("%s", err)
        return 2
    log.info("wrote %s; parity on real images: max |onnxruntime - torch| = %.2e (<= %.0e)",
             path, difference, args.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main())
