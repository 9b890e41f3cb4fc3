"""Predict with a model folder: one model, one preprocessing, for the online and batch endpoints.

Service loads the model folder the trainer wrote (model.pt, model.json, and model.onnx /
model.int8.onnx when export wrote them) with the backend asked for: torch (weights_only), fp32
ONNX or int8 ONNX through onnxruntime. `predict` takes decoded PIL images, `predict_array` a
preprocessed N x 3 x S x S float32 array; both return a label and per-class probabilities per
image. Preprocessing and batching are NumPy's (preprocess.py): with an ONNX model nothing here
imports torch, so a scoring process starts in a fraction of a second; the torch backend is
imported only when it is the one served.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .model_files import (
    GRAPH_KEYS,
    GRAPH_METADATA,
    INT8_FILE,
    METADATA_FILE,
    MODEL_FILE,
    ONNX_FILE,
    DamagedFile,
    check_file,
    find_model_folder,
    read_metadata,
)
from .preprocess import Preprocess, resize_size

BACKENDS = ("auto", "torch", "onnx", "int8")


def choose_backend(folder: Path, backend: str) -> str:
    """auto: the int8 model when export kept one, else fp32 ONNX, else torch."""
    if backend not in BACKENDS:
        raise ValueError(f"SCORE_BACKEND={backend}: use one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    return next((name for name, file in (("int8", INT8_FILE), ("onnx", ONNX_FILE))
                 if (folder / file).is_file()), "torch")


class Service:
    """The loaded model: classes, preprocessing, and a batch -> probabilities function."""

    def __init__(self, model_dir: str | os.PathLike, backend: str = "auto", threads: int = 0):
        """`threads`: per forward pass (0: the library's default, every core)."""
        folder = find_model_folder(model_dir)
        self.backend, self.wide_session = choose_backend(folder, backend), None
        meta = self._load_torch(folder, threads) if self.backend == "torch" else \
            self._load_onnx(folder, threads)
        self.classes = list(meta["classes"])
        self.image_size = int(meta["image_size"])
        self.min_side = resize_size(self.image_size)
        self.preprocess = Preprocess(self.image_size, tuple(meta["mean"]), tuple(meta["std"]))

    def _load_torch(self, folder: Path, threads: int) -> dict[str, object]:
        if not (folder / MODEL_FILE).is_file():
            raise FileNotFoundError(f"SCORE_BACKEND=torch but {folder} holds only the exported "
                                    f"graph, no {MODEL_FILE}: use SCORE_BACKEND=auto or onnx")
        from . import inference  # torch: only when it is the backend served

        inference.set_threads(threads)
        loaded = inference.load_model(folder, torch_only=True)  # a ResNet: no torchvision
        self.model, self.model_file = loaded.model, folder / MODEL_FILE
        self.forward: Callable[[np.ndarray], np.ndarray] = \
            lambda batch: inference.probabilities(loaded.model, batch)
        return loaded.metadata

    def _load_onnx(self, folder: Path, threads: int) -> dict[str, object]:
        self.model_file = folder / (INT8_FILE if self.backend == "int8" else ONNX_FILE)
        if not self.model_file.is_file():
            raise FileNotFoundError(f"SCORE_BACKEND={self.backend} but {self.model_file} does "
                                    "not exist: export it (make export-onnx) or use torch")
        check_file(folder, self.model_file.name)
        meta = read_metadata(folder)
        self.session = _session(self.model_file, threads)
        check_consistent(folder, meta, self.session, self.model_file)
        self.forward = lambda batch: _softmax(self.session.run(["logits"], {"input": batch})[0])
        return meta

    def widen(self, threads: int) -> None:
        """A second ONNX session on `threads` threads for passes that run alone (the Batcher
        says which): a lone request gets every core, concurrent passes get one each. torch
        has one thread setting per process, so a torch model keeps its single one."""
        if self.backend != "torch" and threads > 1:
            self.wide_session = _session(self.model_file, threads)

    def probabilities(self, batch: np.ndarray, alone: bool = False) -> np.ndarray:
        if alone and self.wide_session is not None:
            return _softmax(self.wide_session.run(["logits"], {"input": batch})[0])
        return self.forward(batch)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


@dataclass(kw_only=True)
class Waiting:
    """A part of a request's batch, waiting for a lane; the lane fills in its rows or error."""

    batch: np.ndarray
    done: threading.Event = field(default_factory=threading.Event)
    rows: np.ndarray | None = None
    error: Exception | None = None


class Batcher:
    """Runs the forward passes of concurrent requests together (dynamic batching).

    Each request thread preprocesses its own images (Pillow and NumPy release the GIL, so they
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

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        # parts, so that idle lanes share a lone request; under load _take merges them again
        items = [Waiting(batch=part)
                 for part in np.array_split(batch, max(1, min(self.lanes, len(batch))))]
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
                rows = self.service.probabilities(_joined([i.batch for i in taken]), alone)
                start = 0
                for item in taken:
                    item.rows = rows[start:start + len(item.batch)]
                    start += len(item.batch)
            except Exception as err:  # noqa: BLE001 - every waiting request gets the error
                for item in taken:
                    item.error = err
            for item in taken:
                item.done.set()


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One pass's batch: a lone part as it is (no copy), several concatenated."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def check_consistent(folder: Path, meta: dict[str, object], session, model_file: Path) -> None:
    """An ONNX graph is served with model.json's classes, size and normalization: they must be
    the graph's own (export writes them into it; for a graph exported without them, model.pt's
    beside it) and fit the graph's input and output, else a reversed class list swaps every
    label and a wrong size fails every request."""
    reference, source = _reference(folder, session, model_file)
    if reference is not None:
        differ = [key for key in GRAPH_KEYS
                  if np.atleast_1d(reference[key]).tolist() != np.atleast_1d(meta[key]).tolist()]
        if differ:
            raise DamagedFile(f"{folder / METADATA_FILE} disagrees with {source} in "
                              f"{', '.join(differ)}")
    height, width = session.get_inputs()[0].shape[2:4]
    classes = session.get_outputs()[0].shape[-1]
    problems = []
    if isinstance(classes, int) and classes != len(meta["classes"]):
        problems.append(f"{len(meta['classes'])} classes, the graph outputs {classes}")
    if isinstance(height, int) and meta["image_size"] not in (height, width):
        problems.append(f"image_size {meta['image_size']}, the graph takes {height}x{width}")
    if problems:
        raise DamagedFile(f"{folder / METADATA_FILE} does not fit {model_file}: "
                          f"{'; '.join(problems)}")


def _reference(folder: Path, session, model_file: Path
               ) -> tuple[dict[str, object] | None, Path]:
    """What model.json must agree with: the graph's metadata, else model.pt's (torch), else
    nothing (the graph's shapes are still checked)."""
    written = session.get_modelmeta().custom_metadata_map.get(GRAPH_METADATA)
    if written:
        try:
            reference = json.loads(written)
        except ValueError:
            raise DamagedFile(f"{model_file}: its {GRAPH_METADATA} metadata is not JSON") from None
        if isinstance(reference, dict) and set(GRAPH_KEYS) <= reference.keys():
            return reference, model_file
        raise DamagedFile(f"{model_file}: its {GRAPH_METADATA} metadata lacks "
                          f"{', '.join(GRAPH_KEYS)}")
    weights = folder / MODEL_FILE
    if not weights.is_file():
        return None, weights
    from . import checkpoint  # torch: a graph exported before graphs carried their metadata

    return checkpoint.load(weights), weights


def _session(path: Path, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def predict_array(service: Service, batch: np.ndarray, batcher: Batcher | None = None
                  ) -> list[dict[str, object]]:
    """A preprocessed N x 3 x S x S float32 batch -> one {label, probabilities} per image."""
    rows = batcher(batch) if batcher is not None else service.probabilities(batch)
    return [{"label": service.classes[int(row.argmax())],
             "probabilities": {c: round(float(p), 6) for c, p in zip(service.classes, row,
                                                                     strict=True)}}
            for row in rows]


def predict(service: Service, images: list, batcher: Batcher | None = None
            ) -> list[dict[str, object]]:
    """Decoded PIL images -> labels and probabilities, in one forward pass."""
    return predict_array(service, service.preprocess.batch(images), batcher)
