"""Fixtures of the end-to-end tests (real training, jobs, servers and processes): tiny synthetic
ImageFolders made once per session, isolated MLflow stores, the default model trained once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import (
    ROOT,
    SOURCES,
    built_once,
    source_digest,
    track_into,
    train_args,
)

sys.path.insert(0, str(ROOT / "scripts"))

from make_synthetic_data import generate  # noqa: E402


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """24 train / 8 val images per class, 48 px: enough to learn, fast to train."""
    return built_once(tmp_path_factory, "data", lambda folder: generate(
        folder / "synthetic", train_per_class=24, val_per_class=8, size=48)) / "synthetic"


@pytest.fixture(scope="session")
def empty_mlflow_store(empty_mlflow_store) -> Path:
    """tests/conftest.py's, with MLflow's server code loaded too, so each local run forks its
    tracking server instead of starting a Python process that imports it
    (mlops/runtime/mlflow_server.py; the subprocess tests still start it the usual way)."""
    import mlflow.server.handlers  # noqa: F401

    return empty_mlflow_store


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch, empty_mlflow_store) -> str:
    uri = track_into(monkeypatch, empty_mlflow_store, tmp_path)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return uri


@pytest.fixture(scope="session")
def model_dir(tiny_data, tmp_path_factory, empty_mlflow_store) -> Path:
    """The default model (resnet18) trained on tiny data, exported to ONNX by the trainer's own
    flag."""

    def train(root: Path) -> None:
        from image_classifier.train import main as train_main

        with pytest.MonkeyPatch.context() as patch:
            track_into(patch, empty_mlflow_store, root)
            # the default arch, which exports to ONNX and int8 in less CPU than SMALL_ARCH
            args = train_args(tiny_data, root / "out", epochs=1, arch="resnet18",
                              export_onnx="True")
            assert train_main(args) == 0

    return built_once(tmp_path_factory, "trained", train) / "out" / "model"


@pytest.fixture
def sources_unchanged():
    """Asserts after the test that no local run wrote into the code, specs or fixtures."""
    before = source_digest(*SOURCES)
    yield
    after = source_digest(*SOURCES)
    changed = sorted(set(before) ^ set(after) | {k for k in before if after.get(k) != before[k]})
    assert not changed, f"a local run changed the source tree: {changed[:10]}"
