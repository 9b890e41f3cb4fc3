"""Export a model folder to ONNX, parity-checked against torch; optionally a gated int8 model.

``python -m image_classifier.export --model_dir <folder> --data <imagefolder> [--int8 True]``

Writes ``model.onnx`` beside ``model.pt`` (the scoring script then serves it with onnxruntime),
prints the largest absolute logit difference between onnxruntime and torch on up to 16
validation images, and fails (removing the file) if it exceeds ``--tolerance``.

With ``--int8`` it also writes ``model.int8.onnx``: onnxruntime static quantization (QDQ, int8
weights per channel), calibrated on training images preprocessed exactly as the scoring script
does. It is kept only if it passes a gate printed at export, measured on the whole validation
split: top-1 agreement with the fp32 model >= 99% and validation accuracy within 1 point.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import checkpoint, exit_with
from .config import ExportConfig, parse
from .config import build_parser as config_parser
from .data import DataError, build_datasets
from .inference import find_model_file, load_model
from .model import ModelError
from .model_files import GRAPH_METADATA, INT8_FILE, ONNX_FILE, graph_metadata, replacing

log = logging.getLogger("image_classifier.export")
AGREEMENT = 0.99
ACCURACY_DROP = 0.01


class ParityError(ModelError):
    """onnxruntime and torch disagree beyond the tolerance."""


def export_onnx(model: torch.nn.Module, batch: torch.Tensor, path: Path,
                tolerance: float = 1e-4, metadata: dict[str, object] | None = None) -> float:
    """Export with a dynamic batch axis; return the max |onnxruntime - torch| on `batch`.
    `metadata` (model.json's classes, image_size, mean, std) goes into the graph, where a
    scorer checks model.json against it without torch (predict.check_consistent)."""
    import onnxruntime

    model = model.eval().float()
    batch_dim = torch.export.Dim("batch", min=1, max=1024)
    program = torch.onnx.export(model, (batch[:2],), dynamo=True, input_names=["input"],
                                output_names=["logits"], dynamic_shapes=({0: batch_dim},),
                                verbose=False)
    if metadata is not None:
        program.model.metadata_props[GRAPH_METADATA] = graph_metadata(metadata)
    with replacing(path) as tmp:  # path is written whole, and only once it passes
        program.save(str(tmp))
        session = onnxruntime.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        with torch.inference_mode():
            expected = model(batch).numpy()
        actual = session.run(["logits"], {"input": batch.numpy()})[0]
        difference = float(np.abs(actual - expected).max())
        if difference > tolerance:
            path.unlink(missing_ok=True)
            raise ParityError(f"onnxruntime differs from torch by {difference:.2e} "
                              f"(> {tolerance}); no {path.name} is kept")
    return difference


def preprocessed(dataset, transform, indices) -> list[tuple[np.ndarray, int]]:
    """(image, label) pairs as the scoring script would feed them, unreadable ones left out."""
    out = []
    for index in indices:
        path, label = dataset.samples[index]
        try:
            out.append((transform(dataset.loader(path)).numpy(), label))
        except ValueError:  # an image the check let through but cannot be read now
            continue
    return out


def _calibration_reader(samples: list[np.ndarray], batch: int = 8):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([np.stack(samples[i:i + batch])
                                 for i in range(0, len(samples), batch)])

        def get_next(self):
            chunk = next(self.batches, None)
            return None if chunk is None else {"input": chunk}

    return Reader()


def _top1(path: Path, images: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(["logits"], {"input": images[i:i + 32]})[0].argmax(1)
                           for i in range(0, len(images), 32)])


@dataclass(frozen=True, kw_only=True)
class Int8Report:
    """The int8 gate, measured on the whole validation split."""

    agreement: float  # top-1 agreement with the fp32 ONNX model
    fp32_acc: float
    int8_acc: float
    val_images: int

    @property
    def kept(self) -> bool:
        return self.agreement >= AGREEMENT and self.int8_acc >= self.fp32_acc - ACCURACY_DROP


@dataclass(frozen=True)
class Exported:
    """What export_model_dir wrote: model.onnx, its parity with torch, and the int8 gate."""

    path: Path
    difference: float  # max |onnxruntime - torch| logit on real validation images
    int8: Int8Report | None = None


def quantize_int8(folder: Path, bundle, transform, *, calibration: int = 128, seed: int = 0,
                  keep: bool = False) -> Int8Report:
    """Write model.int8.onnx beside model.onnx and keep it only if it passes the gate (keep:
    whatever the gate says, for a speed benchmark of an untrained model)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    picks = random.Random(seed).sample(range(len(bundle.train)),
                                       min(calibration, len(bundle.train)))
    calib = [image for image, _ in preprocessed(bundle.train, transform, picks)]
    val = preprocessed(bundle.val, transform, range(len(bundle.val)))
    images, labels = np.stack([i for i, _ in val]), np.array([label for _, label in val])
    target = folder / INT8_FILE
    with tempfile.TemporaryDirectory() as tmp, replacing(target) as written:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(folder / ONNX_FILE), str(prepared))
        quantize_static(str(prepared), str(written), _calibration_reader(calib),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    fp32, int8 = _top1(folder / ONNX_FILE, images), _top1(target, images)
    report = Int8Report(agreement=float((fp32 == int8).mean()),
                        fp32_acc=float((fp32 == labels).mean()),
                        int8_acc=float((int8 == labels).mean()), val_images=len(labels))
    if not report.kept and not keep:
        target.unlink(missing_ok=True)
    log.info("int8 gate on %d val images: top-1 agreement %.2f%% (>= %.0f%%), val acc %.4f vs "
             "fp32 %.4f (within %.0f point): %s", report.val_images, 100 * report.agreement,
             100 * AGREEMENT, report.int8_acc, report.fp32_acc, 100 * ACCURACY_DROP,
             f"kept {target}" if report.kept else "failed, int8 model not kept")
    return report


def sample_batch(dataset, transform, count: int = 16) -> torch.Tensor:
    """Real validation images, preprocessed exactly as the scoring script does."""
    pairs = preprocessed(dataset, transform, range(min(count, len(dataset))))
    return torch.from_numpy(np.stack([image for image, _ in pairs]))


def export_model_dir(cfg: ExportConfig) -> Exported:
    loaded = load_model(cfg.model_dir)
    folder = find_model_file(cfg.model_dir).parent
    bundle = build_datasets(cfg.data, loaded.image_size)
    if bundle.classes != loaded.classes:
        raise DataError(f"{cfg.data}: classes {bundle.classes} differ from the model's "
                        f"{loaded.classes}")
    path = folder / ONNX_FILE
    difference = export_onnx(loaded.model, sample_batch(bundle.val, loaded.transform), path,
                             cfg.tolerance, metadata=loaded.metadata)
    checkpoint.record_file(folder, ONNX_FILE)
    report = quantize_int8(folder, bundle, loaded.transform) if cfg.int8 else None
    if report and report.kept:
        checkpoint.record_file(folder, INT8_FILE)
    return Exported(path, difference, report)


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per field of ExportConfig (validation checks specs against it)."""
    return config_parser(ExportConfig)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(ExportConfig, argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
    try:
        exported = export_model_dir(cfg)
    except (DataError, FileNotFoundError, ParityError) as err:
        log.error("%s", err)
        return 2
    log.info("wrote %s; parity on real images: max |onnxruntime - torch| = %.2e (<= %.0e)",
             exported.path, exported.difference, cfg.tolerance)
    return 0


if __name__ == "__main__":
    exit_with(main)
