"""Inside the warm tracking server's process (mlflow_server.py starts it): MLflow's own tracking
app on one store, and the watch that stops it once no run has held it for the idle time.

The app is configured through MLflow's public initialize_backend_stores (what `mlflow server`
calls) and served by werkzeug in this process. `mlflow server` itself (a CLI process that starts
uvicorn in another, with a job-execution consumer by default) was measured ready in 10-20 s on
2 cores against 3-6 s for this; its app is the same. The same port also answers HTTPS (each
connection sniffed: local_tls.py) and Azure's run-history calls on a run (run_history.py), which
jobs make on their tracking URI's host with `https://`; a model version created from a local
folder is registered as Azure's registry does it (model_uploads.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __name__ == "__main__":  # run by path: the project root in place of this file's folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from mlops.project import sqlite_file
from mlops.runtime.local_tls import LocalTls, Sniffing
from mlops.runtime.mlflow_store import creating
from mlops.runtime.model_uploads import local_sources
from mlops.runtime.run_history import routes

IDLE_ENV = "AZML_TRACKING_IDLE_S"
IDLE_S = 900.0
PROTOCOL = 3  # what a record means; a server of another protocol is replaced
POLL_S = 5.0
KEPT: list = []  # a forked server's inherited streams
# MLflow 1.x clients (the newest for Python 3.7 is 1.30) call the model registry under
# /api/2.0/preview/mlflow/ (registered-models/create, model-versions/create, ...); MLflow's server
# answers those only under /api/2.0/mlflow/ since 2.0, with the same messages. Azure's store
# answers both, so the job's own client registers whatever its release.
PREVIEW_ROUTES = ("/api/2.0/preview/mlflow/", "/ajax-api/2.0/preview/mlflow/")


def idle_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(IDLE_ENV, IDLE_S)))
    except ValueError:
        return IDLE_S


@dataclass(frozen=True, kw_only=True)
class Record:
    """A running server, as the run that started it wrote it down."""

    pid: int
    port: int
    store: str
    artifacts: str
    python: str
    mlflow: str
    tls: str = ""  # the fingerprint of the local authority whose certificate it serves ("": none)
    protocol: int = PROTOCOL

    @classmethod
    def read(cls, folder: Path) -> Record | None:
        """The record, or None when there is none or it is damaged (any field missing or of
        another type)."""
        try:
            data = json.loads((folder / "record.json").read_text())
            record = cls(**data)
        except (OSError, ValueError, TypeError):
            return None
        typed = all(isinstance(getattr(record, k), t) for k, t in (
            ("pid", int), ("port", int), ("store", str), ("artifacts", str), ("python", str),
            ("mlflow", str), ("tls", str), ("protocol", int)))
        return record if typed and 0 < record.port < 65536 and record.pid > 0 else None

    def write(self, folder: Path) -> None:
        staged = folder / f".record.{os.getpid()}.tmp"
        staged.write_text(json.dumps(asdict(self)))
        os.replace(staged, folder / "record.json")


def stable_routes(wsgi_app):
    """The app, answering MLflow 1.x's preview routes with the stable ones' handlers."""
    def routed(environ, start_response):
        path = environ.get("PATH_INFO", "")
        for prefix in PREVIEW_ROUTES:
            if path.startswith(prefix):
                environ["PATH_INFO"] = prefix.replace("preview/", "") + path[len(prefix):]
        return wsgi_app(environ, start_response)
    return routed


def drop_inherited_connections() -> None:
    """In a forked server: every SQLAlchemy engine the runner had open (MLflow keeps one per
    store, so the runner's store may be among them) gets a fresh pool without touching the
    runner's connections, SQLAlchemy's own recipe for os.fork(); an sqlite connection must not
    cross it."""
    engine_module = sys.modules.get("sqlalchemy.engine")
    if engine_module is not None:
        for found in gc.get_objects():
            if isinstance(found, engine_module.Engine):
                found.dispose(close=False)


class Watch:
    """When the server stops: after `idle` seconds in which no run held a lease and no request
    came, or at once when its record is gone or names another server (its folder was deleted,
    or a run replaced it), never while a run holds a lease."""

    def __init__(self, folder: Path, idle: float):
        self.folder, self.idle = folder, idle
        self.last_request = time.monotonic()
        self.free_since: float | None = None

    def mine(self) -> bool:
        record = Record.read(self.folder)
        return record is not None and record.pid == os.getpid()

    def should_stop(self, lease: int) -> bool:
        """True with the lease locked exclusively (kept until the process ends)."""
        try:
            fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.free_since = None  # a run holds it
            return False
        now = time.monotonic()
        self.free_since = self.free_since or now
        if not self.mine() or now - max(self.free_since, self.last_request) >= self.idle:
            return True
        fcntl.flock(lease, fcntl.LOCK_UN)
        return False

    def run(self) -> None:
        try:
            lease = os.open(self.folder / "lease", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:  # its folder was deleted as it started: no run can find it, it ends
            os._exit(0)
        poll = max(0.05, min(POLL_S, self.idle / 4))
        while not self.should_stop(lease):
            time.sleep(poll)
        if self.mine():
            (self.folder / "record.json").unlink(missing_ok=True)
        os._exit(0)  # the lease and the alive lock go with the process


def open_stores(store: str, artifacts: str) -> None:
    """MLflow's stores on `store`, created (tables, migrations) under the lock every process
    that creates a store takes: two processes migrating one new sqlite file race."""
    from mlflow.server import handlers
    from mlflow.server.handlers import initialize_backend_stores

    # MLflow's handlers keep the stores they first opened in module globals, and
    # initialize_backend_stores keeps any it finds: a server forked from a process that served
    # MLflow's app in-process (the test suite) would answer from that process's store
    for cached in ("_tracking_store", "_model_registry_store", "_job_store", "_artifact_repo"):
        if hasattr(handlers, cached):
            setattr(handlers, cached, None)
    path = sqlite_file(store)
    if path is None:
        initialize_backend_stores(store, store, artifacts)
        return
    with creating(path):
        initialize_backend_stores(store, store, artifacts)


def serve_forked(args: list[str], log: int) -> None:
    """In the forked server: the runner's objects stay as they are (none is collected: a
    finalizer could close a descriptor number the server reuses), its database connections are
    left to it, and only the pipes the server needs stay open."""
    drop_inherited_connections()
    gc.freeze()
    keep = {int(args[2]), int(args[3])}
    null = os.open(os.devnull, os.O_RDONLY)
    for target, source in ((0, null), (1, log), (2, log)):
        os.dup2(source, target)
    for fd in range(3, max(keep) + 1):
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    os.closerange(max(keep) + 1, os.sysconf("SC_OPEN_MAX"))
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    KEPT.extend((sys.stdin, sys.stdout, sys.stderr))  # never finalized: their fds are reused
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the server's whole life
    sys.stdout, sys.stderr = (open(n, "w", closefd=False) for n in (1, 2))  # noqa: SIM115
    main(args)


def dual_server(listener: int, app, tls: str):
    """werkzeug's threaded server on the handed-over socket, each connection plain HTTP or,
    where `tls` names the local certificate's folder, TLS (local_tls.Sniffing)."""
    import ssl

    from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

    class Handler(WSGIRequestHandler):
        def make_environ(self):
            environ = super().make_environ()
            if isinstance(self.request, ssl.SSLSocket):
                environ["wsgi.url_scheme"] = "https"
            return environ

    class Server(Sniffing, ThreadedWSGIServer):
        pass

    server = Server("127.0.0.1", 0, app, handler=Handler, fd=listener)
    server.tls_context = LocalTls(Path(tls)).server_context() if tls else None
    return server


def wire(app, watch: Watch, artifacts: str) -> None:
    """The server's layers around MLflow's app: WSGI ones, not Flask's before_request, which a
    server forked from a process whose copy of the app has served requests (the test suite)
    may no longer add."""
    app.wsgi_app = watched(routes(stable_routes(local_sources(app.wsgi_app, artifacts))), watch)


def watched(wsgi_app, watch: Watch):
    """`wsgi_app`, telling `watch` when each request comes (the idle time counts from it)."""

    def app(environ, start_response):
        watch.last_request = time.monotonic()
        return wsgi_app(environ, start_response)

    return app


def main(args: list[str]) -> None:
    store, artifacts, listener, _alive, folder, tls = args
    from mlflow.server import app

    watch = Watch(Path(folder), idle_seconds())
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    wire(app, watch, artifacts)
    open_stores(store, artifacts)
    server = dual_server(int(listener), app, tls)
    threading.Thread(target=watch.run, daemon=True).start()
    try:
        server.serve_forever()
    finally:
        os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
