"""A local MLflow tracking server for the jobs of one local run, as Azure gives each job a tracking
URI over HTTP.

Jobs then log through MLflow's REST API, whatever MLflow version their environment has (a job
that runs `pip install 'mlflow<2.19'` still logs to the same store, as on Azure), and concurrent
trials never contend for the database file. The server writes the runner's store (sqlite);
artifacts go straight to its local artifact folder. It serves on 127.0.0.1 only, from a child
process started when the first job needs its URI (its imports overlap the job's own), and exits
when the runner does (its stdin closes).

    python -m mlops.runtime.mlflow_server <backend store uri> <artifact root> <listening fd> <log>
        (prints READY <port> once it accepts)
"""

from __future__ import annotations

import gc
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from mlops.runtime.mlflow_runs import artifact_root

SERVER_MODULE = "mlflow.server.handlers"
# MLflow 1.x clients (the newest for Python 3.7 is 1.30) call the model registry under
# /api/2.0/preview/mlflow/ (registered-models/create, model-versions/create, ...); MLflow's server
# answers those only under /api/2.0/mlflow/ since 2.0, with the same messages. Azure's store
# answers both, so the job's own client registers whatever its release.
PREVIEW_ROUTES = ("/api/2.0/preview/mlflow/", "/ajax-api/2.0/preview/mlflow/")
KEPT: list = []  # a forked server's inherited streams, never finalized


def stable_routes(wsgi_app):
    """The app, answering MLflow 1.x's preview routes with the stable ones' handlers."""
    def routed(environ, start_response):
        path = environ.get("PATH_INFO", "")
        for prefix in PREVIEW_ROUTES:
            if path.startswith(prefix):
                environ["PATH_INFO"] = prefix.replace("preview/", "") + path[len(prefix):]
        return wsgi_app(environ, start_response)
    return routed


def serve(store: str, artifacts: str, fd: int, log: str = "") -> None:
    """MLflow's own tracking app on the runner's store, configured through its public
    initialize_backend_stores (what `mlflow server` calls), served in this process.
    `mlflow server` itself (a CLI process that starts uvicorn in another, with a job-execution
    consumer by default) was measured ready in 10-20 s on 2 cores against 3-6 s for this, on
    every local run; its app is the same."""
    from mlflow.server import app
    from mlflow.server.handlers import initialize_backend_stores
    from werkzeug.serving import make_server

    ready = threading.Lock()
    opened: list[bool] = []

    @app.before_request
    def open_stores() -> None:
        # Not at start: the runner creates a fresh store's tables first, and two processes
        # migrating one new sqlite file race ("table ... already exists"). The runner says
        # "open" once its client has the store; a request before that opens them itself.
        with ready:
            if not opened:
                initialize_backend_stores(store, store, artifacts)
                opened.append(True)

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    app.wsgi_app = stable_routes(app.wsgi_app)
    server = make_server("127.0.0.1", 0, app, threaded=True, fd=fd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        print(f"READY {server.socket.getsockname()[1]}", flush=True)
        for line in sys.stdin:  # ends at EOF: the runner has ended
            if line.strip() == "open":
                threading.Thread(target=open_stores, daemon=True).start()
    except BrokenPipeError:
        pass  # the runner died before it read READY
    if log:  # nobody is left to read this server's log (a killed runner never removes it)
        Path(log).unlink(missing_ok=True)
    os._exit(0)


def drop_inherited_connections() -> None:
    """In a forked child: every SQLAlchemy engine the runner had open (MLflow keeps one per
    store, so the runner's store is among them) gets a fresh pool without touching the runner's
    connections, SQLAlchemy's own recipe for os.fork(); an sqlite connection must not cross it."""
    engine_module = sys.modules.get("sqlalchemy.engine")
    if engine_module is not None:
        for found in gc.get_objects():
            if isinstance(found, engine_module.Engine):
                found.dispose(close=False)


class Forked:
    """The same server, forked from a runner that has MLflow's server code loaded (a process
    that runs many local jobs, such as the test suite), instead of started as a new Python
    process that imports it again (about 3.5 s of CPU). The child keeps only its pipes, the log
    and the listening socket, and never returns into the runner's code. The handle offers what
    Server uses of a Popen."""

    def __init__(self, store: str, artifacts: str, fd: int, log_fd: int, log: str):
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        self.pid, self.returncode = os.fork(), None
        if self.pid == 0:
            try:
                drop_inherited_connections()
                # The runner's objects stay as they are: none is collected (a finalizer could
                # close a descriptor number the server has reused) and its streams are kept.
                gc.freeze()
                KEPT.extend((sys.stdin, sys.stdout, sys.stderr))
                os.setsid()  # as start_new_session: the runner ends it, not the terminal
                for target, source in ((0, stdin_r), (1, stdout_w), (2, log_fd)):
                    os.dup2(source, target)
                os.closerange(3, fd)
                os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_DFL)
                sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child's whole life
                sys.stdout, sys.stderr = (open(n, "w", closefd=False) for n in (1, 2))  # noqa: SIM115
                serve(store, artifacts, fd, log)
            finally:
                os._exit(1)
        os.close(stdin_r)
        os.close(stdout_w)
        self.stdin, self.stdout = open(stdin_w, "w"), open(stdout_r)  # noqa: SIM115 - the server's lifetime

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: it has ended
                pid, status = self.pid, 255 << 8
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self.stdin.close()
                self.stdout.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["mlflow server", str(self.pid)], timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


class Server:
    """The runner's handle. Building one binds and starts nothing: the server starts when a job
    first asks for its URI (a run refused, or a pipeline whose steps are all reused, starts
    none)."""

    def __init__(self, store: str, artifacts: Path | None = None):
        """artifacts: the default root of the experiments the server creates (None: beside the
        store, as the runner's own, mlflow_runs.artifact_root)."""
        self.store, self.artifacts = store, str(artifacts or artifact_root(store))
        self.log = None
        self.listener: socket.socket | None = None
        self.port = 0
        self.process: subprocess.Popen | Forked | None = None
        self._failed = self._store_open = False

    def _start(self) -> None:
        """Bind the port and start the server on it. The runner binds and hands the listening
        socket over, so the URI is known at once: a job starts without waiting for the server's
        imports (seconds; they overlap the job's own), and its first request waits in the
        socket's backlog until it accepts."""
        self.log = tempfile.NamedTemporaryFile(prefix="mlflow-server-", suffix=".log",  # noqa: SIM115 - kept open for the server's lifetime
                                               delete=False)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        fd = self.listener.fileno()
        if SERVER_MODULE in sys.modules:  # loaded already: a fork skips seconds of imports
            self.process = Forked(self.store, self.artifacts, fd, self.log.fileno(), self.log.name)
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mlops.runtime.mlflow_server", self.store, self.artifacts,
                 str(fd), self.log.name], pass_fds=(fd,), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.log, text=True,
                start_new_session=True)  # Ctrl-C reaches the runner, which ends the server last
        self.listener.close()  # the server's copy alone: if it dies, connections are refused
        if self._store_open:
            self.store_ready()

    def uri(self) -> str | None:
        """http://127.0.0.1:<port>, or None if the server has already failed (jobs then use
        the store directly)."""
        if self.process is None:
            self._start()
        if not self._failed and self.process.poll() is not None:
            self._failed = True
            tail = Path(self.log.name).read_text(errors="replace").splitlines()[-5:]
            print("warning: the local MLflow server is not running; jobs log to the store "
                  "directly:\n  " + "\n  ".join(tail), file=sys.stderr)
        return None if self._failed else f"http://127.0.0.1:{self.port}"

    def store_ready(self) -> None:
        """The runner's client has opened (and, if new, created) the store: the server may open
        it too, before the first job asks (at once, or as soon as it starts)."""
        self._store_open = True
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.stdin.write("open\n")
                self.process.stdin.flush()
            except OSError:
                pass

    def serving(self) -> bool:
        """The server has printed READY: it may hold requests to finish. Before that it has
        accepted nothing (a run refused early ends it while it still imports). The line is never
        read, so the pipe stays readable once it is written."""
        return bool(select.select([self.process.stdout], [], [], 0)[0])

    def close(self) -> None:
        if self.process is None:
            return  # never started: nothing bound, nothing to end
        if self.process.poll() is None and not self.serving():
            self.process.kill()  # still importing: nothing accepted, nothing to finish
            self.process.wait()
        elif self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        Path(self.log.name).unlink(missing_ok=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
