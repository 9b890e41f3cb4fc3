"""An ONNX model is served without torch: the batch and online scoring scripts load it, score
images and check its folder with torch and torchvision unimportable (tests/tiny_onnx.py's graph
stands in for an export, with model.json and the graph's metadata as export writes them)."""

from __future__ import annotations

import base64
import importlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tiny_onnx import META, model_folder, tiny_graph


@pytest.fixture
def without_torch(monkeypatch):
    """torch and torchvision unimportable, and image_classifier imported afresh under that
    (what was loaded before is put back afterwards)."""
    before = {name: module for name, module in sys.modules.items()
              if name.split(".")[0] == "image_classifier"}
    for name in before:
        del sys.modules[name]
    for name in ("torch", "torchvision"):
        monkeypatch.setitem(sys.modules, name, None)  # `import torch` raises ImportError
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "image_classifier"]:
        del sys.modules[name]
    sys.modules.update(before)


def jpeg(color: tuple[int, int, int], size=(50, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_the_batch_script_scores_an_onnx_model_without_torch(tmp_path, monkeypatch,
                                                             without_torch):
    folder = model_folder(tmp_path / "model")
    (tmp_path / "in").mkdir()
    paths = []
    for name, blob in (("a.jpg", jpeg((200, 30, 30))), ("b.jpg", jpeg((20, 30, 220))),
                       ("broken.jpg", b"not a jpeg")):
        paths.append(str(tmp_path / "in" / name))
        Path(paths[-1]).write_bytes(blob)
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(tmp_path))
    monkeypatch.delenv("SCORE_BACKEND", raising=False)
    monkeypatch.setenv("AZUREML_BI_OUTPUT_PATH", str(tmp_path))
    batch_score = importlib.import_module("image_classifier.batch_score")
    batch_score.init()
    rows = batch_score.run(paths)
    assert batch_score._service.backend == "onnx"
    assert batch_score._service.model_file == folder / "model.onnx"
    assert [row.split(",")[0] for row in rows] == ["a.jpg", "b.jpg"]
    assert all(abs(sum(map(float, row.split(",")[2:])) - 1) < 1e-5 for row in rows)
    assert "broken.jpg" in next(tmp_path.glob("errors_*.csv")).read_text()
    assert sys.modules["torch"] is None and sys.modules["torchvision"] is None


def test_the_online_script_serves_an_onnx_model_without_torch(tmp_path, monkeypatch,
                                                              without_torch):
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request

    model_folder(tmp_path / "model")
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(tmp_path / "model"))
    monkeypatch.setenv("SCORE_BACKEND", "onnx")
    score = importlib.import_module("image_classifier.score")
    score.init()
    body = json.dumps({"images": [base64.b64encode(jpeg((10, 200, 10))).decode()]})
    answer = score.run(Request(EnvironBuilder(method="POST", data=body,
                                              content_type="application/json").get_environ()))
    data = {"data": score._service.preprocess.batch([Image.new("RGB", (64, 48))]).tolist()}
    tensor = score.run(Request(EnvironBuilder(method="POST", data=json.dumps(data),
                                              content_type="application/json").get_environ()))
    assert isinstance(answer, dict) and answer["predictions"][0]["label"] in META["classes"]
    assert isinstance(tensor, dict) and len(tensor["predictions"]) == 1
    assert sys.modules["torch"] is None


def test_the_preprocessed_batch_is_what_the_graph_is_fed(tmp_path, without_torch):
    predict = importlib.import_module("image_classifier.predict")
    service = predict.Service(model_folder(tmp_path / "model"), "onnx")
    image = Image.new("RGB", (64, 48), (255, 0, 0))
    batch = service.preprocess.batch([image])
    channels = (np.array([1.0, 0.0, 0.0]) - META["mean"]) / META["std"]
    assert np.allclose(batch.mean(axis=(2, 3))[0], channels, atol=1e-5)
    logits = channels @ (np.arange(6).reshape(2, 3) / 10).T
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert np.allclose(service.probabilities(batch)[0], expected, atol=1e-5)


@pytest.mark.parametrize(("changes", "message"), [
    ({"classes": ["bees", "ants"]}, "disagrees with .*model.onnx in classes"),
    ({"image_size": 48, "std": [1, 1, 1]}, "disagrees with .*model.onnx in image_size, std"),
])
def test_model_json_is_checked_against_the_graphs_own_metadata(tmp_path, without_torch,
                                                                changes, message):
    predict = importlib.import_module("image_classifier.predict")
    model_files = importlib.import_module("image_classifier.model_files")
    with pytest.raises(model_files.DamagedFile, match=message):
        predict.Service(model_folder(tmp_path / "model", **changes), "onnx")


@pytest.mark.parametrize(("metadata", "message"), [
    ("{not json", "its model.json metadata is not JSON"),
    (json.dumps({"classes": ["ants", "bees"]}), "its model.json metadata lacks"),
])
def test_a_graph_whose_metadata_is_damaged_is_refused(tmp_path, without_torch, metadata,
                                                      message):
    predict = importlib.import_module("image_classifier.predict")
    model_files = importlib.import_module("image_classifier.model_files")
    with pytest.raises(model_files.DamagedFile, match=message):
        predict.Service(model_folder(tmp_path / "model", metadata), "onnx")


def test_a_graph_without_metadata_or_weights_is_checked_by_its_shapes(tmp_path, without_torch):
    predict = importlib.import_module("image_classifier.predict")
    model_files = importlib.import_module("image_classifier.model_files")
    folder = tmp_path / "model"
    folder.mkdir()
    tiny_graph(folder / "model.onnx", None, classes=3)
    session = predict._session(folder / "model.onnx", 1)
    with pytest.raises(model_files.DamagedFile, match="2 classes, the graph outputs 3"):
        predict.check_consistent(folder, META, session, folder / "model.onnx")


def test_a_model_registered_as_its_onnx_export_alone_is_served(tmp_path, monkeypatch,
                                                               without_torch):
    """model.onnx and model.json without model.pt (a model registered from the export alone),
    nested as a registered model's folder is: served by the ONNX path; the torch backend asked
    for says what the folder lacks."""
    folder = model_folder(tmp_path / "azureml-models" / "m" / "1" / "model")
    (folder / "model.pt").unlink()
    predict = importlib.import_module("image_classifier.predict")
    service = predict.Service(tmp_path / "azureml-models" / "m" / "1")
    assert service.backend == "onnx" and service.model_file == folder / "model.onnx"
    assert service.probabilities(service.preprocess.batch([Image.new("RGB", (60, 50))])
                                 ).shape == (1, len(META["classes"]))
    with pytest.raises(FileNotFoundError, match="holds only the exported graph"):
        predict.Service(folder, "torch")
    with pytest.raises(FileNotFoundError, match="no model.pt, model.onnx or model.int8.onnx"):
        predict.Service(tmp_path / "in")


@pytest.mark.parametrize("name", ["a b,c.jpg", 'q"uote.jpg', "new\nline.jpg", "cr\rx.jpg"])
def test_a_row_is_one_csv_record_whatever_the_file_is_named(name):
    import csv

    from image_classifier.batch_score import _line

    line = _line([name, "chickens", 0.25])
    assert list(csv.reader(io.StringIO(line + "\n"))) == [[name, "chickens", "0.25"]]
