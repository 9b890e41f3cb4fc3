"""Nothing wrong served, nothing damaged resumed: a model file with flipped bytes, a model.json
that does not fit its weights or its ONNX graph, a damaged last checkpoint."""

from __future__ import annotations

import json
import shutil

import pytest
from endpoint_client import free_port, use_root
from support import SMALL_ARCH, train_args

from image_classifier import checkpoint
from image_classifier.predict import Service, _session, check_consistent
from image_classifier.train import main as train_main
from mlops import serve
from mlops.specs import ROOT


def flip(path, count: int = 256) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))


@pytest.fixture
def model_copy(model_dir, tmp_path):
    return shutil.copytree(model_dir, tmp_path / "model")


def edit_metadata(folder, **changes) -> None:
    path = folder / "model.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.proof
@pytest.mark.parametrize(("file", "backend"), [("model.pt", "torch"), ("model.onnx", "onnx")])
def test_a_model_file_with_flipped_bytes_is_refused_by_name(model_copy, file, backend):
    flip(model_copy / file)
    with pytest.raises(checkpoint.DamagedFile, match=f"{model_copy / file} is damaged"):
        Service(model_copy, backend)


@pytest.mark.proof
def test_reversed_class_names_in_model_json_are_refused_for_onnx(model_copy):
    meta = json.loads((model_copy / "model.json").read_text())
    edit_metadata(model_copy, classes=meta["classes"][::-1])
    with pytest.raises(checkpoint.DamagedFile, match="disagrees with .*model.onnx in classes"):
        Service(model_copy, "onnx")


@pytest.mark.proof
def test_a_class_count_or_size_the_graph_lacks_is_refused(model_copy):
    meta = json.loads((model_copy / "model.json").read_text())
    edit_metadata(model_copy, classes=[*meta["classes"], "extra"],
                  image_size=meta["image_size"] + 16)
    with pytest.raises(checkpoint.DamagedFile, match="model.onnx in classes, image_size"):
        Service(model_copy, "onnx")


@pytest.mark.proof
def test_without_weights_beside_it_the_onnx_graph_itself_is_checked(model_copy):
    """By the metadata export wrote into it; a graph without that, by its input and output."""
    import onnx

    meta = json.loads((model_copy / "model.json").read_text())
    meta.update(classes=[*meta["classes"], "extra"], image_size=meta["image_size"] + 16)
    (model_copy / "model.pt").unlink()
    session = _session(model_copy / "model.onnx", 1)
    with pytest.raises(checkpoint.DamagedFile, match="model.onnx in classes, image_size"):
        check_consistent(model_copy, meta, session, model_copy / "model.onnx")
    graph = onnx.load(str(model_copy / "model.onnx"))
    del graph.metadata_props[:]
    onnx.save(graph, str(model_copy / "bare.onnx"))
    with pytest.raises(checkpoint.DamagedFile, match=r"3 classes, the graph outputs 2; "
                                                    r"image_size \d+, the graph takes"):
        check_consistent(model_copy, meta, _session(model_copy / "bare.onnx", 1),
                         model_copy / "bare.onnx")


def test_the_local_endpoint_refuses_to_start_on_a_damaged_model(model_copy, tmp_path,
                                                                monkeypatch):
    use_root(monkeypatch, tmp_path / "endpoints")
    flip(model_copy / "model.onnx")
    assert serve.main(["start", "--deployment", str(ROOT / "endpoints" / "blue.yml"),
                       "--model", str(model_copy), "--port", str(free_port())]) == 1
    (log_path,) = (tmp_path / "endpoints" / "fowl-classifier").glob("blue-*/log.txt")
    log = log_path.read_text()  # as the server sees the file:
    assert "/azureml-models/" in log and "model/model.onnx is damaged" in log  # Azure's layout


def test_a_damaged_last_checkpoint_resumes_from_best_and_says_so(tiny_data, tmp_path,
                                                                mlflow_store, capsys):
    out = tmp_path / "out"
    assert train_main(train_args(tiny_data, out, epochs=2, arch=SMALL_ARCH)) == 0
    last = out / "checkpoints" / "last.pt"
    flip(last, 4096)
    capsys.readouterr()
    assert train_main(train_args(tiny_data, out, epochs=3, arch=SMALL_ARCH)) == 0
    said = capsys.readouterr().out  # the trainer logs to stdout
    assert f"{last} is damaged" in said and "trying best.pt" in said
    assert f"resuming from {out / 'checkpoints' / 'best.pt'}" in said
    assert checkpoint.load(last)["epoch"] == 3  # written whole again
