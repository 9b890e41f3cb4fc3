"""A tiny ONNX model folder built with onnx's helpers (no torch): what an export writes, in
milliseconds, for the unit tests of the ONNX scoring path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from image_classifier.model_files import GRAPH_METADATA, file_digest, graph_metadata

SIZE = 32
META = {"classes": ["ants", "bees"], "image_size": SIZE, "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225], "arch": "tiny", "epoch": 0}


def tiny_graph(path: Path, metadata: str | None, classes: int = 2) -> None:
    """input N x 3 x S x S -> GlobalAveragePool -> Flatten -> Gemm -> logits N x classes."""
    import onnx
    from onnx import TensorProto, helper

    weights = np.arange(classes * 3, dtype=np.float32).reshape(classes, 3) / 10
    nodes = [helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "tiny",
        inputs=[helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                              ["batch", 3, SIZE, SIZE])],
        outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, weights.shape, weights.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    if metadata is not None:
        helper.set_model_props(model, {GRAPH_METADATA: metadata})
    onnx.save(model, str(path))


def model_folder(folder: Path, metadata: str | None = None, **changes) -> Path:
    """model.onnx, model.json recording its digest, and a model.pt that is not a checkpoint:
    the ONNX path must never read it."""
    folder.mkdir(parents=True)
    tiny_graph(folder / "model.onnx", graph_metadata(META) if metadata is None else metadata)
    (folder / "model.pt").write_bytes(b"not a checkpoint: the ONNX path never reads it")
    files = {"model.onnx": file_digest(folder / "model.onnx")}
    (folder / "model.json").write_text(json.dumps({**META, **changes, "files": files}))
    return folder
