"""Predict with a model folder: one model, one preprocessing, for the online and batch endpoints.

Service loads the model folder the trainer wrote (model.pt, model.json, and model.onnx /
model.int8.onnx when export wrote them) with the backend asked for: torch (weights_only), fp32
ONNX or int8 ONNX through onnxruntime. `predict` takes decoded PIL images, `predict_tensor` a
preprocessed batch; both return a label and per-class probabilities per image.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import checkpoint
from .data import build_transforms, resize_size
from .inference import find_model_file, load_model

ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
BACKENDS = ("auto", "torch", "onnx", "int8")


class Service:
    """The loaded model: classes, eval transform, and a batch -> probabilities function."""

    def __init__(self, model_dir: str | os.PathLike, backend: str = "auto", threads: int = 0):
        """`threads`: per forward pass (0: the library's default, every core)."""
        folder = find_model_file(model_dir).parent
        if backend not in BACKENDS:
            raise ValueError(f"SCORE_BACKEND={backend}: use one of {', '.join(BACKENDS)}")
        if backend == "auto":
            backend = next((name for name, file in (("int8", INT8_FILE), ("onnx", ONNX_FILE))
                            if (folder / file).is_file()), "torch")
        self.backend, self.wide_session = backend, None
        if threads:
            torch.set_num_threads(threads)
        if backend == "torch":
            loaded = load_model(folder)
            self.model, meta, self.model_file = loaded.model, loaded.metadata, folder / "model.pt"
        else:
            self.model_file = folder / (INT8_FILE if backend == "int8" else ONNX_FILE)
            if not self.model_file.is_file():
                raise FileNotFoundError(f"SCORE_BACKEND={backend} but {self.model_file} does not "
                                        "exist: export it (make export-onnx) or use torch")
            checkpoint.check_file(folder, self.model_file.name)
            meta = json.loads((folder / checkpoint.METADATA_FILE).read_text())
            self.session = _session(self.model_file, threads)
            check_consistent(folder, meta, self.session, self.model_file)
        self.classes = list(meta["classes"])
        self.image_size = int(meta["image_size"])
        self.min_side = resize_size(self.image_size)
        self.transform = build_transforms(self.image_size, train=False, mean=meta["mean"],
                                          std=meta["std"])

    def widen(self, threads: int) -> None:
        """A second ONNX session on `threads` threads for passes that run alone (the Batcher
        says which): a lone request gets every core, concurrent passes get one each. torch
        has one thread setting per process, so a torch model keeps its single one."""
        if self.backend != "torch" and threads > 1:
            self.wide_session = _session(self.model_file, threads)

    def probabilities(self, batch: torch.Tensor, alone: bool = False) -> np.ndarray:
        if self.backend == "torch":
            with torch.inference_mode():
                return torch.softmax(self.model(batch).float(), dim=1).numpy()
        session = self.wide_session if alone and self.wide_session is not None else self.session
        logits = session.run(["logits"], {"input": batch.numpy()})[0]
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)


@dataclass(kw_only=True)
class Waiting:
    """A part of a request's batch, waiting for a lane; the lane fills in its rows or error."""

    batch: torch.Tensor
    done: threading.Event = field(default_factory=threading.Event)
    rows: np.ndarray | None = None
    error: Exception | None = None


class Batcher:
    """Runs the forward passes of concurrent requests together (dynamic batching).

    Each request thread preprocesses its own images (Pillow and torch release the GIL, so they
    overlap) and hands the batch over; `lanes` background threads each run the model on
    everything that is waiting, up to `max_images`, and give each request its rows. Alone, a
    request is run at once (split across the lanes when it has several images); under load,
    four one-image requests become one forward pass of four, which is what brings a server near
    the model's best-batch throughput.
    """

    def __init__(self, service: Service, max_images: int = 64, lanes: int = 1):
        self.service, self.max_images, self.lanes, self.idle = service, max_images, lanes, 0
        self.ready = threading.Condition()
        self.waiting: list[Waiting] = []
        for lane in range(lanes):
            threading.Thread(target=self._loop, name=f"batcher-{lane}", daemon=True).start()

    def __call__(self, batch: torch.Tensor) -> np.ndarray:
        # parts, so that idle lanes share a lone request; under load _take merges them again
        items = [Waiting(batch=part)
                 for part in torch.tensor_split(batch, max(1, min(self.lanes, len(batch))))]
        with self.ready:
            self.waiting.extend(items)
            self.ready.notify_all()
        for item in items:
            item.done.wait()
            if item.error is not None:
                raise item.error
        return np.concatenate([item.rows for item in items])

    def _take(self) -> tuple[list[Waiting], bool]:
        """What waits, shared fairly with the other idle lanes, up to max_images; and whether
        this pass runs alone (every other lane idle, nothing left waiting)."""
        with self.ready:
            self.idle += 1
            while not self.waiting:
                self.ready.wait()
            waiting = sum(len(item.batch) for item in self.waiting)
            share = min(self.max_images, -(-waiting // self.idle))
            self.idle -= 1
            taken, count = [], 0
            while self.waiting and (not taken or count + len(self.waiting[0].batch) <= share):
                item = self.waiting.pop(0)
                taken.append(item)
                count += len(item.batch)
            return taken, self.idle == self.lanes - 1 and not self.waiting

    def _loop(self) -> None:
        while True:
            taken, alone = self._take()
            try:
                rows = self.service.probabilities(torch.cat([i.batch for i in taken]), alone)
                start = 0
                for item in taken:
                    item.rows = rows[start:start + len(item.batch)]
                    start += len(item.batch)
            except Exception as err:  # noqa: BLE001 - every waiting request gets the error
                for item in taken:
                    item.error = err
            for item in taken:
                item.done.set()


def check_consistent(folder: Path, meta: dict[str, object], session, model_file: Path) -> None:
    """An ONNX graph is served with model.json's classes, size and normalization: they must be
    the weights' (model.pt beside it) and fit the graph's input and output, else a reversed
    class list swaps every label and a wrong size fails every request."""
    weights = folder / checkpoint.MODEL_FILE
    if weights.is_file():
        saved = checkpoint.load(weights)
        differ = [key for key in ("classes", "image_size", "mean", "std")
                  if list(np.atleast_1d(saved[key])) != list(np.atleast_1d(meta[key]))]
        if differ:
            raise checkpoint.DamagedFile(f"{folder / checkpoint.METADATA_FILE} disagrees with "
                                         f"{weights} in {', '.join(differ)}")
    height, width = session.get_inputs()[0].shape[2:4]
    classes = session.get_outputs()[0].shape[-1]
    problems = []
    if isinstance(classes, int) and classes != len(meta["classes"]):
        problems.append(f"{len(meta['classes'])} classes, the graph outputs {classes}")
    if isinstance(height, int) and meta["image_size"] not in (height, width):
        problems.append(f"image_size {meta['image_size']}, the graph takes {height}x{width}")
    if problems:
        raise checkpoint.DamagedFile(f"{folder / checkpoint.METADATA_FILE} does not fit "
                                     f"{model_file}: {'; '.join(problems)}")


def _session(path: Path, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def predict_tensor(service: Service, batch: torch.Tensor, batcher: Batcher | None = None
                   ) -> list[dict[str, object]]:
    """A preprocessed N x 3 x S x S batch -> one {label, probabilities} per image."""
    rows = batcher(batch) if batcher is not None else service.probabilities(batch)
    return [{"label": service.classes[int(row.argmax())],
             "probabilities": {c: round(float(p), 6) for c, p in zip(service.classes, row,
                                                                     strict=True)}}
            for row in rows]


def predict(service: Service, images: list, batcher: Batcher | None = None
            ) -> list[dict[str, object]]:
    """Decoded PIL images -> labels and probabilities, in one forward pass."""
    return predict_tensor(service, torch.stack([service.transform(image) for image in images]),
                          batcher)
