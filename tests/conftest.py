"""Shared fixtures: tiny synthetic ImageFolders made in tmp dirs, and an isolated MLflow store."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from make_synthetic_data import generate  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # The workers already keep every core busy (make test starts one per core, and one more):
    # each worker, and every process a test starts (jobs take this shell's variables, as on a
    # laptop), uses one OpenMP thread. Torch's default of one thread per core would put several
    # spinning threads on every core, and OpenMP's spin-waiting on oversubscribed cores costs
    # half as much CPU again.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

HYMENOPTERA = ROOT.parent / "shared" / "data" / "hymenoptera_data"


@contextlib.contextmanager
def shared_folder(tmp_path_factory, name: str) -> Iterator[Path]:
    """A folder that every xdist worker of this test session shares (without xdist, one of the
    session's own), held under an exclusive lock while the caller fills it or finds what an
    earlier caller left: one costly run then serves the tests of every worker, which only read
    it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-N/popen-gwK: pytest-N is this session's, and only its
    folder = base / "shared" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder.mkdir(exist_ok=True)  # under the lock: built_once empties it under the lock too
        yield folder


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """shared_folder, filled by `build(folder)` for the first caller that asks; a build that
    failed is started afresh by the next."""
    with shared_folder(tmp_path_factory, name) as folder:
        done = folder / ".built"
        if not done.exists():
            shutil.rmtree(folder)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """24 train / 8 val images per class, 48 px: enough to learn, fast to train."""
    return built_once(tmp_path_factory, "data", lambda folder: generate(
        folder / "synthetic", train_per_class=24, val_per_class=8, size=48)) / "synthetic"


@pytest.fixture(scope="session", autouse=True)
def no_repository_store(tmp_path_factory) -> Iterator[None]:
    """A test that tracks without a store of its own (mlflow_store) tracks into one of the
    session's, never into the repository's mlflow.db and mlruns/ (make exports
    MLFLOW_TRACKING_URI). The file is created by the first test that uses it."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('default-store') / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        yield


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory) -> Path:
    """A store with MLflow's tables made once: creating them costs about a second of CPU in every
    test that tracks, and a copy is the same file. MLflow's server code is loaded here too, so
    each local run forks its tracking server instead of starting a Python process that imports
    it (mlops/runtime/mlflow_server.py; the subprocess tests still start it the usual way)."""
    import mlflow.server.handlers  # noqa: F401
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    # the Default experiment's artifacts beside the store (MLflow's default is ./mlruns: the
    # repository)
    SqlAlchemyStore(f"sqlite:///{path}", str(path.parent / "mlruns"))
    return path


def copied_store(empty: Path, folder: Path) -> str:
    """The URI of a copy of the empty store in `folder` (a fresh file would be migrated)."""
    shutil.copyfile(empty, folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def track_into(patch: pytest.MonkeyPatch, empty: Path, folder: Path) -> str:
    """Point MLflow at a copy of the empty store in `folder`, experiment `tests`, made as a
    local run makes it: its artifacts beside the store, not in the repository's ./mlruns."""
    from mlops.runtime.mlflow_runs import Tracking

    uri = copied_store(empty, folder)
    patch.setenv("MLFLOW_TRACKING_URI", uri)
    patch.setenv("MLFLOW_EXPERIMENT_NAME", "tests")
    Tracking(uri=uri).experiment_id("tests")
    return uri


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


# The model the tests train unless they test the default one: a quarter of resnet18's CPU and a
# seventh of its bytes per run (checkpoints, the model folder), where every behaviour under test
# (resume, DDP, batch norm, tracking) is the same. resnet18, the default, is still trained and
# served (model_dir), and every listed arch is built and stepped (test_models).
SMALL_ARCH = "mobilenet_v3_small"


def train_args(data, out, epochs=2, **extra) -> list[str]:
    """The flags every end-to-end test uses: CPU, no download, tiny images, a small model."""
    args = {"data": data, "output_dir": out, "epochs": epochs, "image_size": 32,
            "batch_size": 8, "learning_rate": 0.01, "weights": "none", "num_workers": 0,
            "seed": 7, "arch": SMALL_ARCH, **extra}
    return [item for key, value in args.items() for item in (f"--{key}", str(value))]


def source_digest(*folders: Path) -> dict[str, str]:
    """sha256 of every file under the folders (Python's __pycache__ aside): a source tree that
    a local run must leave byte-for-byte as it found it."""
    import hashlib

    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


SOURCES = [ROOT / name for name in ("src", "jobs", "components", "environments", "assets")] + \
    [ROOT / "tests" / "fixtures"]


@pytest.fixture
def sources_unchanged():
    """Asserts after the test that no local run wrote into the code, specs or fixtures."""
    before = source_digest(*SOURCES)
    yield
    after = source_digest(*SOURCES)
    changed = sorted(set(before) ^ set(after) | {k for k in before if after.get(k) != before[k]})
    assert not changed, f"a local run changed the source tree: {changed[:10]}"


# What `make test-quick` leaves out: tests that train, start servers or run jobs end to end.
END_TO_END_FIXTURES = {"tiny_data", "model_dir", "mlflow_store", "sources_unchanged", "deployments"}
END_TO_END_MODULES = {"test_distributed", "test_serve_local"}  # process groups, real servers


def pytest_collection_modifyitems(config, items):  # noqa: ARG001 - pytest's hook signature
    """Marks `e2e` every test that trains, serves or runs a job (it uses one of the fixtures
    above, lives in one of the modules above, or is `slow`), so `-m "not e2e"` is the unit
    tests alone; and runs those first. xdist hands each worker its next tests in this order:
    with the unit tests (a fraction of a second each) last, the workers end together, instead of
    one running a long test at the end while the others' cores idle."""
    for item in items:
        if END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())) or \
                item.get_closest_marker("slow") or item.module.__name__ in END_TO_END_MODULES:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable: file order


def pytest_collection_finish(session):  # noqa: ARG001 - pytest's hook signature
    """What collection imported (torch, MLflow, azure-ai-ml: about a million objects) lives as
    long as the worker: frozen, it is left out of every full garbage collection, which would
    scan it about 20 times per worker at a third of a second each."""
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):  # noqa: ARG001 - pytest's hook signature
    """Python's exit scans every live object for cycles, several seconds in a worker that ran
    hundreds of tests; nothing the session leaves needs it (mlops.exit_with, for entry points)."""
    gc.freeze()
