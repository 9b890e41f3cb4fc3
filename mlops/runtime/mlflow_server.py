"""A local MLflow tracking server for the jobs of one local run, as Azure gives each job a tracking
URI over HTTP.

Jobs then log through MLflow's REST API, whatever MLflow version their environment has (a job
that runs `pip install 'mlflow<2.19'` still logs to the same store, as on Azure), and concurrent
trials never contend for the database file. The server writes the runner's store (sqlite);
artifacts go straight to its local artifact folder. It serves on 127.0.0.1 only, from a child
process started before the spec is validated (its imports overlap that work), and exits when the
runner does (its stdin closes).

    python -m mlops.runtime.mlflow_server <backend store uri> <artifact root> <listening fd>
        (prints READY <port> once it accepts)
"""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

STARTUP_TIMEOUT_S = 90


def serve(store: str, artifacts: str, fd: int) -> None:
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
    server = make_server("127.0.0.1", 0, app, threaded=True, fd=fd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"READY {server.socket.getsockname()[1]}", flush=True)
    for line in sys.stdin:  # ends at EOF: the runner has ended
        if line.strip() == "open":
            threading.Thread(target=open_stores, daemon=True).start()
    os._exit(0)


class Server:
    """The runner's handle: started early, waited for when a job first needs its URI."""

    def __init__(self, store: str, artifacts: Path):
        self.log = tempfile.NamedTemporaryFile(prefix="mlflow-server-", suffix=".log",  # noqa: SIM115 - kept open for the server's lifetime
                                               delete=False)
        # The runner binds the port and hands the listening socket over, so the URI is known at
        # once: a job starts without waiting for the server's imports (seconds), and its first
        # request waits in the socket's backlog until the server accepts.
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlops.runtime.mlflow_server", store, str(artifacts),
             str(listener.fileno())], pass_fds=(listener.fileno(),),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            start_new_session=True)  # Ctrl-C reaches the runner, which ends the server last
        listener.close()  # the server's copy alone: if it dies, connections are refused
        self._failed = False

    def uri(self) -> str | None:
        """http://127.0.0.1:<port>, or None if the server has already failed (jobs then use
        the store directly)."""
        if not self._failed and self.process.poll() is not None:
            self._failed = True
            tail = Path(self.log.name).read_text(errors="replace").splitlines()[-5:]
            print("warning: the local MLflow server is not running; jobs log to the store "
                  "directly:\n  " + "\n  ".join(tail), file=sys.stderr)
        return None if self._failed else f"http://127.0.0.1:{self.port}"

    def store_ready(self) -> None:
        """The runner's client has opened (and, if new, created) the store: the server may open
        it too, before the first job asks."""
        if self.process.poll() is None:
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
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
