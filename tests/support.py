"""What the tests share besides fixtures: the repository root, tiny-data and MLflow-store helpers,
the trainer's test flags, folders one costly run fills for every xdist worker, the images and
package folders the unit and end-to-end tests of one subject both build, the syntax trees the
house-rule tests read, and modules a test module names before it needs them (`lazy`)."""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import importlib
import io
import logging
import os
import shutil
import stat
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
HYMENOPTERA = ROOT.parent / "shared" / "data" / "hymenoptera_data"


def python_files(folder: Path) -> list[Path]:
    """The project's own Python files under `folder`: not what a package build leaves there
    (`build/`, `*.egg-info`: `uv tool install ./mlops` builds in the source folder)."""
    return sorted(p for p in folder.rglob("*.py")
                  if not {"build", "__pycache__"} & set(p.relative_to(folder).parts)
                  and not any(part.endswith(".egg-info") for part in p.parts))


@dataclass(frozen=True)
class Syntax:
    """A Python file's syntax tree and its nodes grouped by type, each group in ast.walk's order:
    the house rules (tests/unit/test_imports.py, test_tiers.py) ask a file for its imports,
    functions, calls and classes many times over; the tree is walked once."""

    tree: ast.Module
    by_type: dict[type, list[ast.AST]]

    @classmethod
    def of(cls, tree: ast.Module) -> Syntax:
        by_type: dict[type, list[ast.AST]] = {}
        for node in ast.walk(tree):
            by_type.setdefault(type(node), []).append(node)
        return cls(tree, by_type)

    def nodes(self, *kinds: type) -> list:
        """The nodes of these exact types (statements and expressions); of several types, in
        the order of the source."""
        if len(kinds) == 1:
            return self.by_type.get(kinds[0], [])
        found = [node for kind in kinds for node in self.by_type.get(kind, [])]
        return sorted(found, key=lambda node: (node.lineno, node.col_offset))


@functools.cache
def syntax(path: Path) -> Syntax:
    """A file's Syntax, parsed and walked once per test process for every rule that reads it."""
    return Syntax.of(ast.parse(path.read_text()))


class LazyModule:
    """A module imported on its first attribute (`torch = lazy("torch")`, then `torch.zeros`):
    each xdist worker collects every test module, so a module-level import of torch or of the
    trainer costs every worker its seconds of CPU; named this way, only the worker that runs a
    test that uses it pays. A name that starts with `_` is not looked up in the module: pytest
    asks every global of a test module for a few (__test__, _mock_name, __wrapped__) while it
    collects. Patch the module by its name (monkeypatch.setattr("package.module.name", ...)).
    """

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attribute: str):
        if attribute.startswith("_"):  # what pytest asks of every global (__test__,
            raise AttributeError(attribute)  # _mock_name, __wrapped__): not the module's
        return getattr(importlib.import_module(self._name), attribute)

    def __setattr__(self, attribute: str, value) -> None:
        raise TypeError(f"patch {self._name} by its name: "
                        f"monkeypatch.setattr(\"{self._name}.{attribute}\", ...)")

    def __repr__(self) -> str:
        return f"<lazy module {self._name}>"


def lazy(name: str) -> ModuleType:
    return LazyModule(name)  # type: ignore[return-value] - it stands in for the module


def until(condition: Callable[[], object], seconds: float, what: str, step: float = 0.01):
    """Poll `condition` until it holds (and return what it returned), or fail after `seconds`
    naming `what` was awaited: a test waits for a state, never a fixed time."""
    deadline = time.monotonic() + seconds
    while not (held := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds:g} s for {what}")
        time.sleep(step)
    return held


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


def source_digest(*folders: Path) -> dict[str, tuple[int, int]]:
    """The size and modification time (to the nanosecond) of every file under the folders
    (Python's __pycache__ aside): a source tree that a local run must leave as it found it. A
    write moves the time even where it leaves the bytes the same. Every end-to-end test reads
    it twice: a stat walk takes a tenth of hashing through rglob."""
    found = {}
    for folder in folders:
        for parent, folders_in, files in os.walk(folder):
            folders_in[:] = [name for name in folders_in if name != "__pycache__"]
            for name in files:
                path = os.path.join(parent, name)
                with contextlib.suppress(FileNotFoundError):  # a dangling link: no file
                    info = os.stat(path)
                    if stat.S_ISREG(info.st_mode):
                        found[path] = (info.st_size, info.st_mtime_ns)
    return found


SOURCES = [ROOT / name for name in ("src", "jobs", "components", "environments", "assets")] + \
    [ROOT / "tests" / "fixtures"]


def jpeg_bytes(size=(64, 48), color=(200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="JPEG")
    return buffer.getvalue()


def huge_jpeg_header(width: int, height: int) -> bytes:
    """A small JPEG whose SOF0 header claims width x height (no pixels to back it)."""
    data = bytearray(jpeg_bytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


ABI_MESSAGE = "numpy.dtype size changed, may indicate binary incompatibility. Expected 96, got 88"


def installed(site: Path, name: str, requires: list[str], files: dict[str, str]) -> None:
    """A distribution in `site`, as pip leaves one: its modules, METADATA and RECORD."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0"]
    lines += [f"Requires-Dist: {line}" for line in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))


def abi_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Compiled numpy users that break (stale), import (fresh) or need no numpy (plain)."""
    site = tmp_path / "site-packages"
    installed(site, "stale", ["numpy>=1.17.3"],
              {"stale/__init__.py": f"raise ValueError({ABI_MESSAGE!r})", "stale/_c.so": ""})
    installed(site, "fresh", ["numpy>=1.19; python_version >= '3.8'"],
              {"fresh/__init__.py": "", "fresh/_c.so": ""})
    installed(site, "plain", ["six"], {"plain/__init__.py": "raise ValueError('x')",
                                       "plain/_c.so": ""})
    installed(site, "purepy", ["numpy"], {"purepy.py": "raise ValueError('x')"})
    monkeypatch.setenv("PYTHONPATH", str(site))  # the checking python sees it, as a layer's does
    return site


class LogRecords(logging.Handler):
    """The log records a test emits: what pytest's caplog gives (`text`, `records`, `messages`,
    `record_tuples`, `set_level`, `at_level`, `clear`). The suite runs without pytest's logging
    plugin (`-p no:logging` in pyproject.toml), whose caplog this stands in for: for each phase
    of each test the plugin walks every logger the session has made, some 2,600 once torch is
    imported, which cost the unit tests about 5 of their 35 seconds."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []
        self.levels: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def text(self) -> str:
        return "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in self.records)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]

    @property
    def record_tuples(self) -> list[tuple[str, int, str]]:
        return [(r.name, r.levelno, r.getMessage()) for r in self.records]

    def clear(self) -> None:
        self.records.clear()

    def set_level(self, level: int | str, logger: str | None = None) -> None:
        """Let `logger` (the root one by default) pass records from `level` up, for the test."""
        target = logging.getLogger(logger)
        self.levels.setdefault(logger or "", target.level)
        target.setLevel(level)

    @contextlib.contextmanager
    def at_level(self, level: int | str, logger: str | None = None) -> Iterator[None]:
        target = logging.getLogger(logger)
        before = target.level
        target.setLevel(level)
        try:
            yield
        finally:
            target.setLevel(before)


@contextlib.contextmanager
def captured_logs() -> Iterator[LogRecords]:
    """LogRecords on the root logger; after, the levels set through it are given back."""
    handler = LogRecords()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for name, level in handler.levels.items():
            logging.getLogger(name or None).setLevel(level)
