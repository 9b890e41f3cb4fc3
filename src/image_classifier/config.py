"""Configuration: one dataclass per entry point, whose field names are its CLI flags and its
component's YAML input names: TrainConfig, PrepConfig, EvaluateConfig and ExportConfig here, in a
module that imports no torch, so that validation reads their command lines in a second
(ENTRY_CONFIGS); RegisterConfig beside its step, which imports nothing heavy.

Azure ML passes every input as a string on the command line (booleans as ``True``/``False``), so
the parser is generated from the dataclass and converts each value by the field's type.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import TypeVar


@dataclass(kw_only=True)
class TrainConfig:
    """Fine-tune a torchvision classifier on an ImageFolder (train/ and val/)."""

    data: str = field(metadata={"help": "ImageFolder with train/ and val/, its parent, or a .zip"})
    output_dir: str = field(default="outputs", metadata={"help": "checkpoints and run files"})
    model_dir: str = field(
        default="", metadata={"help": "where the servable model goes (default <output_dir>/model)"}
    )
    epochs: int = field(default=10, metadata={"help": "number of epochs"})
    batch_size: int = field(default=32, metadata={"help": "per-process batch size"})
    learning_rate: float = field(default=0.001, metadata={"help": "SGD learning rate"})
    momentum: float = field(default=0.9, metadata={"help": "SGD momentum"})
    weight_decay: float = field(default=0.0, metadata={"help": "SGD weight decay"})
    step_size: int = field(default=7, metadata={"help": "StepLR: epochs between LR decays"})
    gamma: float = field(default=0.1, metadata={"help": "StepLR: LR decay factor"})
    arch: str = field(default="resnet18", metadata={"help": "any torchvision classification model"})
    weights: str = field(
        default="imagenet", metadata={"help": "'none', 'imagenet', or a path to a state-dict file"}
    )
    freeze_backbone: bool = field(default=False, metadata={"help": "train the new head only"})
    image_size: int = field(default=224, metadata={"help": "training crop size in pixels"})
    num_workers: int = field(
        default=-1, metadata={"help": "data loader workers per process (-1: from the CPU count)"}
    )
    cache_images_mb: int = field(
        default=1024, metadata={"help": "RAM for decoded images per process (MB); 0 disables"}
    )
    seed: int = field(default=42, metadata={"help": "random seed (epoch streams derive from it)"})
    precision: str = field(default="auto", metadata={
        "help": "auto (bf16 where native, fp16 + loss scaling on V100/T4, else fp32), fp32, bf16 "
                "or fp16"})
    channels_last: str = field(default="auto", metadata={
        "help": "NHWC memory format: auto (on with reduced precision), True or False",
        "bare": "True"})
    skip_bad_images: bool = field(
        default=False, metadata={"help": "skip (and count) unreadable images instead of failing"}
    )
    export_onnx: bool = field(
        default=False, metadata={"help": "also write model.onnx (parity-checked) to the model dir"}
    )
    export_int8: bool = field(default=False, metadata={
        "help": "also write model.int8.onnx (static quantization calibrated on training images), "
                "kept only if it passes the gate: top-1 agreement >= 99%, val acc within 1 point"})
    register_name: str = field(
        default="", metadata={"help": "log and register the model in MLflow under this name"}
    )

    def __post_init__(self) -> None:
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise ValueError(f"--precision must be auto, fp32, bf16 or fp16, got "
                             f"{self.precision!r}")
        if self.channels_last != "auto":
            try:
                self.channels_last = str(str2bool(self.channels_last))
            except argparse.ArgumentTypeError as err:
                raise ValueError(f"--channels_last: {err}") from None
        for name in ("epochs", "batch_size", "image_size", "step_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate}")

    @property
    def resolved_model_dir(self) -> str:
        return self.model_dir or os.path.join(self.output_dir, "model")

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(kw_only=True)
class PrepConfig:
    """Check every image and resize it once to the training size."""

    data: str = field(metadata={"help": "ImageFolder with train/ and val/, its parent, or a .zip"})
    output: str = field(metadata={"help": "folder for the resized ImageFolder and its report"})
    image_size: int = field(default=224, metadata={"help": "training crop size in pixels"})
    skip_bad_images: bool = field(
        default=False, metadata={"help": "skip (and count) unreadable images instead of failing"})


@dataclass(kw_only=True)
class EvaluateConfig:
    """Evaluate a model folder on the validation split."""

    model: str = field(metadata={"help": "model folder written by the trainer"})
    data: str = field(metadata={"help": "ImageFolder with train/ and val/ (val/ is evaluated)"})
    output: str = field(metadata={"help": "folder for metrics.json and confusion_matrix.png"})
    batch_size: int = field(default=32, metadata={"help": "images per forward pass"})


@dataclass(kw_only=True)
class ExportConfig:
    """Export a model folder to ONNX, parity-checked against torch; optionally a gated int8
    model."""

    model_dir: str = field(metadata={"help": "folder holding model.pt"})
    data: str = field(metadata={"help": "ImageFolder: val/ for parity and the int8 gate, train/ "
                                        "to calibrate"})
    tolerance: float = field(default=1e-4, metadata={"help": "max |onnx - torch| logit"})
    int8: bool = field(default=False, metadata={"help": "also write the gated int8 model"})


# the entry points whose command lines validation reads without importing them (torch)
ENTRY_CONFIGS: dict[str, type] = {"train": TrainConfig, "prep": PrepConfig,
                                  "evaluate": EvaluateConfig, "export": ExportConfig}


def str2bool(value: str) -> bool:
    """Accept the spellings Azure ML and shells produce: True/False, true/false, 1/0, yes/no."""
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes", "y", "on"):
        return True
    if lowered in ("false", "0", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {value!r}")


_CONVERTERS = {"bool": str2bool, "int": int, "float": float, "str": str}
C = TypeVar("C")


def build_parser(config_cls: type = TrainConfig) -> argparse.ArgumentParser:
    """One flag per dataclass field; ``--flag`` alone sets a boolean to True."""
    parser = argparse.ArgumentParser(
        description=(config_cls.__doc__ or "").strip(),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for f in fields(config_cls):
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        kwargs: dict[str, object] = {"type": _CONVERTERS[kind],  # argparse %-formats help
                                     "help": str(f.metadata.get("help", "")).replace("%", "%%")}
        if f.default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = f.default
        if kind == "bool" or "bare" in f.metadata:  # `--flag` alone means True
            kwargs["nargs"] = "?"
            kwargs["const"] = f.metadata.get("bare", True)
        parser.add_argument(f"--{f.name}", **kwargs)
    return parser


def parse(config_cls: type[C], argv: list[str] | None = None) -> C:
    """The entry point's config from its command line (exit 2 with the reason on a bad one)."""
    parser = build_parser(config_cls)
    args = parser.parse_args(argv)
    try:
        return config_cls(**vars(args))
    except ValueError as err:
        parser.error(str(err))
        raise  # unreachable: parser.error exits


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    return parse(TrainConfig, argv)
