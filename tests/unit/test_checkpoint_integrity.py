"""A checkpoint holds a digest of what was written; a file with flipped bytes or cut short is
refused by name, never loaded as if it were whole."""

from __future__ import annotations

import json

import pytest
from support import lazy

# torch loads with the first test (support.lazy)
torch = lazy("torch")
checkpoint = lazy("image_classifier.checkpoint")


def saved(tmp_path):
    path = tmp_path / "last.pt"
    checkpoint.atomic_save({"model": {"w": torch.arange(262144, dtype=torch.float32)},
                            "classes": ["a", "b"], "epoch": 3}, path)
    return path


def test_a_whole_checkpoint_loads(tmp_path):
    loaded = checkpoint.load(saved(tmp_path))
    assert loaded["epoch"] == 3 and loaded["model"]["w"][5] == 5


def test_flipped_bytes_inside_the_tensors_are_refused_by_name(tmp_path):
    path = saved(tmp_path)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 256] = bytes(b ^ 0xFF for b in data[middle:middle + 256])
    path.write_bytes(bytes(data))
    with pytest.raises(checkpoint.DamagedFile, match=f"{path} is damaged"):
        checkpoint.load(path)


def test_a_truncated_checkpoint_is_refused_by_name(tmp_path):
    path = saved(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(checkpoint.DamagedFile, match=f"{path} is damaged and cannot be read"):
        checkpoint.load(path)


def test_a_checkpoint_written_before_digests_still_loads(tmp_path):
    path = tmp_path / "old.pt"
    torch.save({"model": {"w": torch.ones(3)}, "epoch": 1}, path)
    assert checkpoint.load(path)["epoch"] == 1


def test_model_json_records_the_model_file_and_a_changed_file_is_refused(tmp_path):
    best = {"model": {"w": torch.ones(4)}, "arch": "resnet18", "classes": ["a", "b"],
            "image_size": 32, "mean": [0.5] * 3, "std": [0.2] * 3, "epoch": 1,
            "best_val_acc": 0.5}
    folder = checkpoint.write_model_dir(best, tmp_path / "model")
    recorded = json.loads((folder / "model.json").read_text())["files"]
    assert recorded == {"model.pt": checkpoint.file_digest(folder / "model.pt")}
    checkpoint.check_file(folder, "model.pt")
    (folder / "model.pt").write_bytes((folder / "model.pt").read_bytes() + b"\0")
    with pytest.raises(checkpoint.DamagedFile, match="model.pt is damaged: its sha256"):
        checkpoint.check_file(folder, "model.pt")


def test_a_graph_exported_without_metadata_is_checked_against_the_weights(tmp_path):
    """An ONNX graph from an export that did not write model.json into it: model.json is
    checked against model.pt beside it (reading it imports torch, as before)."""
    from tiny_onnx import tiny_graph

    from image_classifier.predict import _session, check_consistent

    best = {"model": {"w": torch.ones(4)}, "arch": "resnet18", "classes": ["a", "b"],
            "image_size": 32, "mean": [0.5] * 3, "std": [0.2] * 3, "epoch": 1,
            "best_val_acc": 0.5}
    folder = checkpoint.write_model_dir(best, tmp_path / "model")
    tiny_graph(folder / "model.onnx", None)
    session = _session(folder / "model.onnx", 1)
    meta = json.loads((folder / "model.json").read_text())
    check_consistent(folder, meta, session, folder / "model.onnx")
    with pytest.raises(checkpoint.DamagedFile, match="disagrees with .*model.pt in classes"):
        check_consistent(folder, {**meta, "classes": ["b", "a"]}, session,
                         folder / "model.onnx")
