"""Start, watch and stop the processes of one task, as Azure ML's launchers start them.

How many processes and what each is told comes from placement.py. Each process runs
under bash in its own process group: when it ends, whatever it left behind (a launcher's workers,
a background job) is stopped too, as Azure tears down the container. When one process fails, the
others are stopped, as a distributed job fails as a whole.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.runtime import readonly_inputs

STOP_GRACE_S = 10
LOCALHOST = "127.0.0.1"


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP reached the runner: stop everything, as Ctrl-C does."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_pending: list[int] = []


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's limit sets it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def share_cores(env: dict[str, str], processes: int) -> None:
    """The processes that run at once here (a distributed job's, every simulated node being
    this machine; a sweep's concurrent trials) share its cores: each gets OMP_NUM_THREADS =
    cores / processes unless the spec or the shell set it (torchrun too sets it when it starts
    several). On Azure each node has cores of its own; here torch's default of a thread per core
    would put several spinning threads on every core."""
    if processes > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, usable_cores() // processes))


def install_signal_handlers() -> dict[int, object]:
    """Signals only record themselves; the runner acts on them at its next safe point (an
    exception thrown at an arbitrary line could land inside subprocess or MLflow internals and
    lose track of a child). A second signal acts at once."""

    def handler(signum, frame):  # noqa: ARG001 - the signal module's signature
        if _pending:
            raise Interrupted(signum)
        _pending.append(signum)

    _pending.clear()
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM,
                                                         signal.SIGHUP)}


def restore_signal_handlers(previous: dict[int, object]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def check_interrupt() -> None:
    if _pending:
        raise Interrupted(_pending.pop())


_held = [0]  # how deep in signals_held() the main thread is


def _interrupt(signum, frame):  # noqa: ARG001 - the signal module's signature
    if _held[0]:
        _pending.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible():
    """SIGINT, SIGTERM and SIGHUP raise Interrupted where the program is, as Ctrl-C raises
    KeyboardInterrupt (a start waiting on a server ends at once, and what it started is
    stopped as it unwinds), except inside signals_held(). Only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _pending.clear()
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM,
                                                                signal.SIGHUP)}
    try:
        yield
    finally:
        restore_signal_handlers(previous)


@contextlib.contextmanager
def signals_held():
    """Under interruptible(), a signal that arrives inside waits until it ends: a process
    started here is recorded, and a cleanup run here finishes, before anything unwinds."""
    _held[0] += 1
    try:
        yield
    finally:
        _held[0] -= 1
        if not _held[0] and _pending and signal.getsignal(signal.SIGTERM) is _interrupt:
            raise Interrupted(_pending.pop())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return sock.getsockname()[1]


def stop_group(pgid: int, grace: float) -> None:
    """TERM the process group, KILL whatever is left after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def _signal(pid: int, sig: int) -> None:
    """A process's group when it leads one (every process but pdb's, which shares the
    runner's terminal group), else the process alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _shell_code(code: int | None) -> int | None:
    """Killed by signal N reads as 128 + N, as a shell reports it."""
    return 128 - code if code is not None and code < 0 else code


def ending(code: int) -> str:
    """How a process ended, from its shell exit code: "exit 1", "killed by SIGKILL (exit 137)"."""
    try:
        name = signal.Signals(code - 128).name if 128 < code < 160 else ""
    except ValueError:
        name = ""
    return f"killed by {name} (exit {code})" if name else f"exit {code}"


def mounts(env: dict[str, str]) -> list[str]:
    """The task's rw_mount output folders (mlops/runtime/readonly_inputs.py's MOUNTED)."""
    return [p for p in env.get(readonly_inputs.MOUNTED, "").split(os.pathsep) if p]


# Linux's limit for one string a process starts with, an argument or a "NAME=value"
# (MAX_ARG_STRLEN): past it the start fails (E2BIG, "Argument list too long")
ARG_STRLEN_MAX = 32 * 4096


def too_long(command: str, envs: list[dict[str, str]]) -> None:
    """The input's error, before anything starts, for a command (its inputs substituted) or a
    variable (AZURE_ML_INPUT_<name> carries a literal input) no process can start with."""
    sizes = [("the command, its inputs substituted,", len(command.encode()) + 1)]
    sizes += [(f"variable {name}", len(name.encode()) + len(value.encode()) + 2)
              for name, value in (envs[0] if envs else {}).items()]
    for what, size in sizes:
        if size > ARG_STRLEN_MAX:
            raise LocalRunError(f"{what} is {size:,} bytes, past the {ARG_STRLEN_MAX:,} Linux "
                                "lets one argument or variable of a starting process be: no "
                                "process can start with it. Fix: pass a large value as a file "
                                "(a uri_file input), not as a literal")


def keeping_mounts(command: str, env: dict[str, str]) -> str:
    """`command` with its rw_mount outputs kept as Azure's mount points stay: `rm -rf out`
    empties a mount but cannot remove it, so the next command writes into it. Here the folder
    is removed, and bash's DEBUG trap, run before each of the command's own commands, makes it
    again (only when it is gone: a test, no process). `rm` itself ends with 0 here, where on a
    mount it reports "Device or resource busy"."""
    paths = mounts(env)
    if not paths:
        return command
    keep = ('for _mlops_m in "${_mlops_mounts[@]}"; do [[ -d $_mlops_m ]] || '
            'mkdir -p -- "$_mlops_m"; done')
    return (f"_mlops_mounts=({' '.join(map(shlex.quote, paths))}); "
            f"trap {shlex.quote(keep)} DEBUG\n{command}")


@dataclass(kw_only=True)
class Launch:
    """The processes of one task, and its combined log (appended, never overwritten). The one
    launcher: jobs, trials, steps and workers run under a runner that waits for them; a server
    runs `detached` (its output straight into a fresh log, nothing of the runner's holding it,
    left running when the runner exits). Building one starts nothing: `start()` does."""

    command: str
    cwd: Path
    envs: list[dict[str, str]]
    log: Path
    _: KW_ONLY
    label: str = ""
    echo: bool = True
    terminal: int | None = None  # the process that keeps this terminal (pdb's); the others: log
    header: str = ""  # written at the start of the log
    detached: bool = False
    procs: list[subprocess.Popen] = field(default_factory=list)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=40))
    first_failure: int | None = None
    first_failed: int | None = None  # which process (its index in procs) failed first
    reaped: set[int] = field(default_factory=set)
    ended_ms: int | None = None  # when the last process ended
    log_error: OSError | None = None  # the log could not be written (a full disk): echo only
    fail_fast: bool = True  # one failed process stops the others (False: its owner decides)

    def start(self) -> Launch:
        """Open the log and start the processes; the launch itself, to wait on."""
        too_long(self.command, self.envs)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        attempt = self.log.exists() and not self.detached
        self._handle = self.log.open("w" if self.detached else "a", buffering=1)
        if attempt:
            self._handle.write(f"\n==== attempt at {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n")
        self._handle.write(self.header)
        self._handle.flush()
        self._lock = threading.Lock()
        self._readers: list[threading.Thread] = []
        if self.detached:
            self.procs.append(subprocess.Popen(
                ["bash", "-c", keeping_mounts(f"exec {self.command}", self.envs[0])],
                cwd=self.cwd, env=self.envs[0],
                stdin=subprocess.DEVNULL, stdout=self._handle, stderr=subprocess.STDOUT,
                start_new_session=True))
            self._handle.close()
            return self
        for rank, env in enumerate(self.envs):
            self._start(rank, env)
        return self

    def restart(self, rank: int) -> int:
        """A fresh process in place of the one at `rank`, which ended (the mini-batch driver's
        agent starts a worker again); its pid. Its end is no longer the launch's failure."""
        self._start(rank, self.envs[rank])
        self.procs[rank] = self.procs.pop()
        if self.first_failed == rank:
            self.first_failed = self.first_failure = None
        return self.procs[rank].pid

    def _start(self, rank: int, env: dict[str, str]) -> None:
        if rank == self.terminal:  # in the runner's own group: the terminal's foreground
            self.procs.append(subprocess.Popen(["bash", "-c", keeping_mounts(self.command, env)],
                                               cwd=self.cwd, env=env))
            return
        popen = subprocess.Popen(["bash", "-c", keeping_mounts(self.command, env)], cwd=self.cwd,
                                 env=env,
                                 text=True, errors="replace", stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(popen)
        prefix = f"[process {rank}] " if len(self.envs) > 1 else ""
        echo = self.echo and self.terminal is None  # pdb's terminal: no one else prints
        reader = threading.Thread(target=self._pump, args=(popen, prefix, echo), daemon=True)
        reader.start()
        self._readers.append(reader)

    def _pump(self, popen: subprocess.Popen, prefix: str, echo: bool) -> None:
        shown = f"[{self.label}] {prefix}" if self.label else prefix
        for line in popen.stdout:
            with self._lock:
                self._write(prefix + line)
                self.tail.append((prefix + line).rstrip("\n"))
                if echo:
                    sys.stdout.write(shown + line)
                    sys.stdout.flush()

    def poll(self) -> int | None:
        """None while any process runs; the job's exit code once all ended (or one failed)."""
        codes = [_shell_code(p.poll()) for p in self.procs]
        seen_ms = int(time.time() * 1000)  # before the orphans' grace below delays us
        for popen, code in zip(self.procs, codes, strict=True):
            if code is not None and popen.pid not in self.reaped:
                stop_group(popen.pid, 2)  # orphans of a finished process
                self.reaped.add(popen.pid)  # never signal a group id again: it may be reused
            if code not in (None, 0) and self.first_failure is None:
                self.first_failure = code
                self.first_failed = self.procs.index(popen)
        if self.first_failure is not None and any(c is None for c in codes) and \
                self.fail_fast:
            self.stop()  # one process failed: the distributed job fails as a whole
            self.ended_ms = seen_ms
            return self.first_failure
        if any(c is None for c in codes):
            return None
        self.ended_ms = self.ended_ms or seen_ms
        return self.first_failure or 0

    def wait(self, until: float | None = None) -> int | None:
        """The exit code once the job ended; None if time.monotonic() passed `until` first."""
        while (code := self.poll()) is None:
            check_interrupt()
            if until is not None and time.monotonic() >= until:
                return None
            self.nap(0.1)
        return code

    def nap(self, seconds: float) -> None:
        """Up to `seconds`, back at once when one of the processes ends (a pidfd of each turns
        readable when it exits, on Linux), so a job's end is not a tenth of a second late."""
        fds = []
        try:
            watch = select.poll()
            for popen in self.procs:
                if popen.returncode is None:
                    fds.append(os.pidfd_open(popen.pid))
                    watch.register(fds[-1], select.POLLIN)
            watch.poll(seconds * 1000)
        except (AttributeError, OSError):  # not Linux 5.3+ (or a process already reaped)
            time.sleep(seconds)
        finally:
            for fd in fds:
                os.close(fd)

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        for popen in self.procs:
            if popen.poll() is None:
                _signal(popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for popen in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            if popen.pid not in self.reaped:
                stop_group(popen.pid, 0)
                self.reaped.add(popen.pid)
        self.ended_ms = int(time.time() * 1000)

    def _write(self, text: str) -> None:
        """Into the log; once the disk refuses, the output still reaches the terminal and the
        outcome says what was lost."""
        if self.log_error is not None:
            return
        try:
            self._handle.write(text)
        except OSError as err:
            self.log_error = err
            print(f"\nwarning: {self.log}: {err.strerror}; the job's output is no longer "
                  "logged", file=sys.stderr, flush=True)

    def close(self) -> None:
        for path in mounts(self.envs[0] if self.envs else {}):  # a mount point outlives the job
            with contextlib.suppress(OSError):
                Path(path).mkdir(parents=True, exist_ok=True)
        for reader in self._readers:
            reader.join(timeout=5)
        try:
            self._handle.close()
        except OSError as err:  # the last buffered lines did not fit
            self.log_error = self.log_error or err
