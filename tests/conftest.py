"""What every test shares: the scripts on the path, one OpenMP thread per worker, no test tracking
into the repository's store, the two folders' markers, and a worker that leaves without Python's
exit-time garbage collection. Fixtures live with their folder: tests/unit (no process, server
or training: make test-quick) and tests/e2e (real runs)."""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent / "scripts"))

from support import LogRecords, captured_logs  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # The workers already keep every core busy (make test starts one per core, and one more):
    # each worker, and every process a test starts (jobs take this shell's variables, as on a
    # laptop), uses one OpenMP thread. Torch's default of one thread per core would put several
    # spinning threads on every core, and OpenMP's spin-waiting on oversubscribed cores costs
    # half as much CPU again.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def no_repository_store(tmp_path_factory) -> Iterator[None]:
    """A test that tracks without a store of its own (mlflow_store) tracks into one of the
    session's, never into the repository's mlflow.db and mlruns/ (make exports
    MLFLOW_TRACKING_URI). The file is created by the first test that uses it."""
    from mlops.project import cache_root

    uri = f"sqlite:///{tmp_path_factory.mktemp('default-store') / 'mlflow.db'}"
    caches = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        # the caches a user's runs share (environment layers, debugpy, uv's and pip's
        # downloads): tests that point XDG_CACHE_HOME at a folder of their own (the trainer's
        # zip cache) still share them, so a layer is built once per machine, not per test
        patch.setenv("MLOPS_CACHE_DIR", str(cache_root()))
        patch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or str(caches / "uv"))
        patch.setenv("PIP_CACHE_DIR", os.environ.get("PIP_CACHE_DIR") or str(caches / "pip"))
        # every test's store gets a warm tracking server of its own (mlops/runtime/
        # mlflow_server.py): it stops a few seconds after its test's last run, not 15 minutes
        patch.setenv("AZML_TRACKING_IDLE_S", "3")
        yield


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory) -> Path:
    """A store with MLflow's tables made once: creating them costs about a second of CPU in every
    test that tracks, and a copy is the same file (support.copied_store)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    # the Default experiment's artifacts beside the store (MLflow's default is ./mlruns: the
    # repository)
    SqlAlchemyStore(f"sqlite:///{path}", str(path.parent / "mlruns"))
    return path


@pytest.fixture
def caplog() -> Iterator[LogRecords]:
    """Every log record that reaches the root logger during the test (pytest's caplog, whose
    plugin this suite leaves off: support.LogRecords)."""
    with captured_logs() as handler:
        yield handler


@pytest.fixture(scope="session", autouse=True)
def sqlite_without_fsync() -> None:
    """SQLite stores that the test processes open (MLflow's, and the tracking servers forked from
    a worker) skip fsync: a test never cuts the power, and a killed process loses nothing SQLite
    handed the kernel. A new MLflow store's migrations wait about a second for the disk
    otherwise. The runs a test starts as processes of their own keep SQLite's default."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _no_fsync):
        event.listen(Engine, "connect", _no_fsync)


def _no_fsync(connection, record) -> None:  # noqa: ARG001 - SQLAlchemy's listener signature
    if type(connection).__module__.startswith("sqlite3"):
        cursor = connection.cursor()
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.close()


def pytest_collection_modifyitems(config, items):
    """Marks `e2e` every test under tests/e2e (so `-m e2e` selects them) and runs those first.
    xdist hands each worker its next tests in this order: with the unit tests (a fraction of a
    second each) last, the workers end together, instead of one running a long test at the end
    while the others' cores idle."""
    for item in items:
        if TESTS / "e2e" in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable: file order
    if getattr(config.option, "loadgroup", False):
        _grouped(items)


def _grouped(items) -> None:
    """--dist loadgroup (make test, make test-e2e): the tests of one `xdist_group` run in one
    worker, so a module's server starts once, not once per worker. pytest-xdist marks them by
    suffixing the node id with @<group>, which it writes where pytest 9 no longer reads it
    (`item._nodeid`); this writes it where pytest does."""
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        suffix = f"@{'_'.join(groups)}"
        if groups and not item.nodeid.endswith(suffix):  # an id's parameter may hold an @
            item._id = NodeId.parse(f"{item.nodeid}{suffix}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001 - pytest's hook signature
    """With MLOPS_TEST_TIMES=<file>: one line per test (its id, CPU seconds of the worker and of
    the processes it waited for, wall seconds), appended by every worker: what a test costs on
    a shared machine, where wall time says more of the neighbours (docs/development.md, "Test
    tiers")."""
    target = os.environ.get("MLOPS_TEST_TIMES")
    if not target:
        return (yield)
    before, started = _cpu_seconds(), time.monotonic()
    try:
        return (yield)
    finally:
        line = f"{item.nodeid}\t{_cpu_seconds() - before:.2f}\t{time.monotonic() - started:.2f}\n"
        with open(target, "a") as times:
            times.write(line)


def _cpu_seconds() -> float:
    """This worker's CPU and that of the processes it has reaped: first those that ended since
    (subprocess reaps a process a test left behind only when the next one starts), so their
    seconds count for the test that left them rather than the next."""
    subprocess._cleanup()  # noqa: SLF001 - the standard library's reaper of left processes
    own, children = resource.getrusage(resource.RUSAGE_SELF), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_collection_finish(session):  # noqa: ARG001 - pytest's hook signature
    """What collection imported lives as long as the worker: frozen, it is left out of every
    full garbage collection, which would scan it about 20 times per worker."""
    _freeze()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):  # noqa: ARG001 - pytest's hook signature
    """A test that imported a heavy library (the unit tests import torch, MLflow, azure-ai-ml
    where they first need one: about a million objects each) is followed by a freeze too; a
    full collection scans what is not frozen, a third of a second at a time."""
    if len(sys.modules) >= _frozen_at[0] + FREEZE_AFTER_MODULES:
        _freeze()


FREEZE_AFTER_MODULES = 100  # torch loads about 1,500 modules, MLflow 900, a product module a few
_frozen_at = [0]


def _freeze() -> None:
    gc.freeze()
    _frozen_at[0] = len(sys.modules)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):  # noqa: ARG001 - pytest's hook signature
    """Python's exit scans every live object for cycles, several seconds in a worker that ran
    hundreds of tests; nothing the session leaves needs it (mlops.exit_with, for entry points)."""
    gc.freeze()
