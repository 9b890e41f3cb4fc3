"""The local MLflow tracking server of a store, kept warm for a working session: the first local
run starts it, later runs find it, and it stops itself once no run has used it for a while.

Azure gives each job a tracking URI over HTTP; so does the local runtime. Jobs log through
MLflow's REST API whatever MLflow version their environment has (a job that runs
`pip install 'mlflow<2.19'` still logs to the same store, as on Azure), concurrent trials never
contend for the database file, and the runner itself speaks the same API (mlflow_rest.py), so a
run never imports MLflow (seconds of CPU, on every run, before this server was kept).

One server per sqlite store, in the folder `<store file>.server/` beside it:
    record.json  its port, pid, store, Python, MLflow version and certificate authority (written
                 atomically by the run that started it; a damaged or foreign one is never
                 trusted)
    alive        locked (flock, exclusive) by the server for its whole life: a server killed
                 with -9 leaves it unlocked, so a stale record is told apart from a live one
                 without trusting a pid; it holds the server's pid
    lease        each run that uses the server holds a shared lock on it while it runs; the
                 server counts the idle time only while nobody does, and stops itself after
                 AZML_TRACKING_IDLE_S seconds of it (default 900), holding the lock
                 exclusively while it leaves, so a run never finds a server that is stopping
    start.lock   held while a run finds or starts the server: two runs at once start one
    log.txt      the server's output (MLflow's warnings, a failed start)
A server that dies while a run holds it is started again on its port by that run's keeper (a
thread that looks every KEEP_S seconds): the run's jobs were given that port.
The server serves on 127.0.0.1 only, from a socket the starting run binds and hands over: the
URI is known at once, and the first requests wait in the socket's backlog while it imports.

    python mlops/runtime/mlflow_serve.py <store> <artifacts> <listen fd> <alive fd> <folder> <tls>

The port answers HTTPS too, with a certificate of a local authority made once in the cache
(local_tls.py; <tls> its folder, "" for plain HTTP only), which the jobs' environments trust
(trust_store.py): Azure's run-history calls on a job's run come to it (run_history.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from mlops.project import installed, sqlite_file
from mlops.runtime import local_tls, mlflow_serve
from mlops.runtime.local_tls import LocalTls
from mlops.runtime.mlflow_serve import Record
from mlops.runtime.mlflow_store import artifact_root

SERVER_MODULE = "mlflow.server.handlers"
STOP_WAIT_S = 10
KEEP_S = 0.5  # how often a run that holds the server looks that it still runs
RESTARTS = 3  # how many times a run starts it again (one that keeps dying: its log says why)


def server_folder(store: str) -> Path | None:
    """Where the server of `store` keeps its record and locks; None for a store that is not a
    local sqlite file (a remote server, a file store: jobs are given its URI itself)."""
    path = sqlite_file(store)
    return path.with_name(path.name + ".server") if path else None


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    handle = _open(path)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def running(folder: Path) -> int | None:
    """The pid of the live server of `folder` (its alive lock is held), else None."""
    try:
        handle = os.open(folder / "alive", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(handle, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        return None
    finally:
        os.close(handle)


def stop(folder: Path) -> None:
    """End the live server of `folder` (TERM, then KILL), and wait until it is gone."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        pid = running(folder)
        if pid is None:
            return
        if pid > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        deadline = time.monotonic() + STOP_WAIT_S
        while running(folder) is not None and time.monotonic() < deadline:
            time.sleep(0.02)


def take_alive(alive: int) -> None:
    """The alive lock, for the server about to start: free, since none runs (a reader that
    looks at it holds it for an instant)."""
    deadline = time.monotonic() + STOP_WAIT_S
    while True:
        try:
            fcntl.flock(alive, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise OSError(errno.EBUSY, "another local MLflow server of this store does "
                              "not stop") from None
            time.sleep(0.02)


class Server:
    """A run's handle on the warm server of its store. Building one finds, starts and locks
    nothing: `connect()` does (the launch stage's first MLflow call); `close()` lets the server
    go (it keeps running for the next run)."""

    def __init__(self, store: str, artifacts: Path | None = None):
        """artifacts: the default root of the experiments the server creates (None: beside the
        store, as the runner's own, mlflow_runs.artifact_root)."""
        self.store, self.artifacts = store, str(artifacts or artifact_root(store))
        self.folder = server_folder(store)
        self.port = 0
        self.pid: int | None = None
        self.started = False  # this run started it (else it found it warm)
        self._lease: int | None = None
        self.tls: LocalTls | None = None  # the certificate it serves, once connected
        self._kept: threading.Event | None = None  # set: this run's keeper stops (_keep)

    def wanted(self) -> Record:
        return Record(pid=0, port=0, store=self.store, artifacts=self.artifacts,
                      python=sys.executable, mlflow=installed("mlflow"),
                      tls=self.tls.fingerprint if self.tls else "")

    def _local_tls(self) -> LocalTls | None:
        """The certificate the server answers HTTPS with (made once, in the cache); None, and
        plain HTTP alone, where it cannot be made (an unwritable cache)."""
        try:
            return local_tls.ensure()
        except OSError as err:
            print(f"warning: the local tracking server answers plain HTTP only: {err}",
                  file=sys.stderr)
            return None

    def connect(self) -> str | None:
        """http://127.0.0.1:<port> of the store's server, found warm or started now, held for
        this run until close(); None for a store no local server serves."""
        if self.folder is None:
            return None
        if self._lease is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.tls = self._local_tls()
            lease = _open(self.folder / "lease")
            try:
                fcntl.flock(lease, fcntl.LOCK_SH)  # waits while a server stops itself
                with _locked(self.folder / "start.lock"):
                    self._find_or_start(self.folder)
            except BaseException:
                os.close(lease)
                raise
            self._lease = lease
            self._keep()
        return f"http://127.0.0.1:{self.port}"

    def _keep(self) -> None:
        """While this run holds the server, one that died (killed, crashed) is started again on
        its port, which the run's jobs were given as MLFLOW_TRACKING_URI: their MLflow calls
        retry until it answers, and the sqlite store keeps what they logged before."""
        self._kept = threading.Event()
        threading.Thread(target=self._keeping, args=(self._kept,), daemon=True,
                         name="tracking-server-keeper").start()

    def _keeping(self, stop: threading.Event) -> None:
        restarts = 0
        while not stop.wait(KEEP_S):
            if running(self.folder) is not None:
                continue
            if restarts == RESTARTS:
                print(f"warning: the local tracking server stopped {RESTARTS + 1} times; its "
                      f"log: {self.folder / 'log.txt'}", file=sys.stderr, flush=True)
                return
            restarts += 1
            try:
                with _locked(self.folder / "start.lock"):
                    if running(self.folder) is not None or stop.is_set():
                        continue
                    self._start(self.folder, self.wanted(), port=self.port)
            except OSError as err:  # its port taken meanwhile, the folder gone
                print(f"warning: the local tracking server stopped and cannot start again on"
                      f" port {self.port}: {err}", file=sys.stderr, flush=True)
                return
            print(f"note: the local tracking server had stopped; started again on port "
                  f"{self.port} (pid {self.pid})", file=sys.stderr, flush=True)

    def _find_or_start(self, folder: Path) -> None:
        wanted, found = self.wanted(), Record.read(folder)
        pid = running(folder)
        if pid is not None and found is not None and found.pid == pid and \
                {**asdict(found), "pid": 0, "port": 0} == asdict(wanted):
            self.port, self.pid = found.port, found.pid
            return
        if pid is not None:  # another MLflow, Python or store, or its record is damaged
            stop(folder)
        self._start(folder, wanted)

    def _start(self, folder: Path, wanted: Record, *, port: int = 0) -> None:
        """A server of `wanted` on `port` (0: any free one); `port`: again after it died, by
        the keeper's thread, which never forks (spawn)."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        alive = _open(folder / "alive")
        try:
            take_alive(alive)
            with open(folder / "log.txt", "a" if port else "w") as log:
                self.pid = spawn(self, listener.fileno(), alive, log.fileno(), fork=not port)
            os.ftruncate(alive, 0)
            os.pwrite(alive, f"{self.pid}\n".encode(), 0)
            self.port, self.started = listener.getsockname()[1], self.started or not port
            Record(**{**asdict(wanted), "pid": self.pid, "port": self.port}).write(folder)
        finally:
            os.close(alive)  # the server's copy holds the lock from here
            listener.close()  # the server's copy alone: if it dies, connections are refused

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.folder / "log.txt").read_text(errors="replace")
        except (OSError, TypeError):
            return ""
        return "\n  ".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Let the server go: it stops itself once no run has held it for the idle time."""
        if self._kept is not None:
            self._kept.set()
            self._kept = None
        if self._lease is not None:
            os.close(self._lease)
            self._lease = None


def spawn(server: Server, listener: int, alive: int, log: int, *, fork: bool = True) -> int:
    """Start the server process on the listening socket (in a session of its own: a signal to
    the run's terminal does not reach it); its pid. A runner that has MLflow's server code
    loaded already (a process that runs many local runs: the test suite) forks it instead of
    starting a Python that imports it again (about 3.5 s of CPU)."""
    args = [server.store, server.artifacts, str(listener), str(alive), str(server.folder),
            str(server.tls.folder) if server.tls else ""]
    if fork and SERVER_MODULE in sys.modules:
        return fork_server(args, log)
    return subprocess.Popen([sys.executable, mlflow_serve.__file__, *args], cwd=server.folder,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            pass_fds=(listener, alive), start_new_session=True).pid


def fork_server(args: list[str], log: int) -> int:
    """The server in a grandchild of this process (its child leaves at once, so it is never a
    zombie of a long-lived runner); the grandchild's pid."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild:
                os.write(write, f"{grandchild}\n".encode())
                os._exit(0)
            os.close(read)
            os.close(write)
            mlflow_serve.serve_forked(args, log)
        except BaseException:  # in the server's log (its stderr by then), not lost with it
            with contextlib.suppress(BaseException):
                traceback.print_exc()
                sys.stderr.flush()
        finally:
            os._exit(1)
    os.close(write)
    with os.fdopen(read) as answer:
        pid = int(answer.read().strip() or 0)
    os.waitpid(child, 0)
    return pid
