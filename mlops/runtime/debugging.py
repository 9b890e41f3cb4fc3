"""Debug one process of a local run (make local ... DEBUG=<what>): the runtime's one switch.

DEBUG names the process: `1` the job (rank 0 of a distributed job, worker 0 of a batch run, the
local endpoint's server); a pipeline step by its name, nested steps by path (`outer/train`); a
sweep trial by its index (`3`, or `trial:3`, also below a step: `tune/trial:3`); a rank or worker
by `rank:N` / `worker:N` after any of those. `pdb` or `pdb:<what>` runs it under pdb on the
terminal instead of listening for a debugger. Every other process runs as usual.

The chosen process gets debugpy (from the package registry, cached under the layers' cache as a
tool folder: never in the spec's cached environment, never in .venv) through its top layer, and
keeps every property of the run: working directory, argv, variables, inputs and outputs, MLflow
run. limits.timeout and the mini-batch timeouts stand aside for it; Ctrl-C still stops the run.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from mlops.environments import resolve
from mlops.environments.helper_source import for_python
from mlops.environments.interpreters import HERE, Python
from mlops.environments.layers import cache_dir
from mlops.errors import LocalRunError
from mlops.runtime import debug_hook

# the newest release up to this one that supports the environment's Python (1.8.22 wants 3.10;
# 3.8 and 3.9 get 1.8.21, 3.7 gets 1.7.0)
DEBUGPY = "debugpy<=1.8.22"
TOOLS_FILE = debug_hook.TOOLS_FILE
HOOK = Path(debug_hook.__file__)
YES = {"1", "true", "yes", "on"}
PROCESS = re.compile(r"^(rank|worker):(\d+)$")
DEFAULT_PORT = 5678  # debugpy's and VS Code's usual one: .vscode/launch.json offers it


@dataclass(frozen=True, kw_only=True)
class DebugRequest:
    """What DEBUG= asks for."""

    path: tuple[str, ...]  # step names and trial indexes; () or ("1",): the run's own task
    process: int = 0  # the rank or worker within the task
    mode: str = "debugpy"  # or pdb
    port: int = 0  # 0: a free one

    @classmethod
    def parse(cls, value: str | None, port: int = 0) -> DebugRequest | None:
        text = (value or "").strip()
        if text.lower() in ("", "0", "false", "no", "off"):
            return None
        mode = "debugpy"
        if text.lower() == "pdb" or text.lower().startswith("pdb:"):
            mode, text = "pdb", text[4:]
        parts = [part for part in text.split("/") if part]
        process = 0
        if parts and (found := PROCESS.match(parts[-1])):
            process = int(found.group(2))
            parts.pop()
        path = () if not parts or (len(parts) == 1 and parts[0].lower() in YES
                                   and not parts[0].isdigit()) else tuple(parts)
        return cls(path=path, process=process, mode=mode, port=port)

    def matches(self, address: tuple[str, ...]) -> bool:
        """Whether the task at `address` (() for the run's own task) is the one asked for."""
        if not self.path or self.path == ("1",) and not address:
            return not address
        return len(self.path) == len(address) and all(
            wanted == got or (wanted.isdigit() and got == f"trial:{wanted}")
            or (wanted.startswith("trial:") and got == wanted)
            for wanted, got in zip(self.path, address, strict=True))

    def check(self, addresses: list[tuple[str, ...]]) -> None:
        """Refuse, before anything runs, a DEBUG= that names none of the run's tasks."""
        if not any(self.matches(address) for address in addresses):
            names = ", ".join("/".join(a) or "1" for a in addresses) or "none"
            raise LocalRunError(f"DEBUG={'/'.join(self.path) or '1'} names no task of this run; "
                                f"its tasks: {names}")


def trial_addresses(wanted: tuple[str, ...], trials: int,
                    above: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """A sweep's trial addresses (under `above`) that DEBUG=`wanted` is checked against, never
    all of a sweep of 10^9: the one it names where the sweep has it, else the first ten and the
    last (what a refusal lists)."""
    rest = wanted[len(above):] if wanted[:len(above)] == above else ()
    number = rest[0].removeprefix("trial:") if len(rest) == 1 else ""
    if number.isdigit() and str(int(number)) == number and int(number) < trials:
        return [(*above, f"trial:{number}")]
    first = [(*above, f"trial:{n}") for n in range(min(trials, 10))]
    return first + ([(*above, "..."), (*above, f"trial:{trials - 1}")] if trials > 10 else [])


def add_arguments(parser: argparse.ArgumentParser, *, bare: bool = False) -> None:
    """--debug and --debug-port, the same on every front door that starts processes. bare:
    `--debug` alone is taken too, as az's own --debug (its log level: no process debugged)."""
    parser.add_argument("--debug", nargs="?" if bare else None, const="" if bare else None,
                        help="debug one process: 1, a step (train, outer/train), a trial (3), "
                        "rank:N or worker:N; pdb or pdb:<what> for pdb on the terminal")
    parser.add_argument("--debug-port", type=int, default=0,
                        help="the debugger's port on 127.0.0.1 (default: 5678 if free, else any)")


@dataclass(frozen=True, kw_only=True)
class DebugPlan:
    """The chosen process of a task and what it is told."""

    index: int
    env: dict[str, str]
    port: int
    mode: str

    def notice(self, name: str) -> str:
        if self.mode == "pdb":
            return f"debug: {name} runs under pdb on this terminal (others' output: the log)"
        return (f"debug: {name} waits for a debugger on 127.0.0.1:{self.port}: attach with VS "
                f"Code's 'Attach to a local run' (port {self.port}) or any DAP client; "
                "breakpoints on your source files bind")


def free_or_refuse(port: int) -> int:
    """The port to listen on: the one asked for, refused if something holds it; with none asked
    for, DEFAULT_PORT if free, else any free one."""
    if port == 0:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", DEFAULT_PORT))
                return DEFAULT_PORT
            except OSError:
                sock.bind(("127.0.0.1", 0))
                return sock.getsockname()[1]
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise LocalRunError(f"DEBUG_PORT={port}: 127.0.0.1:{port} is already in use; pick "
                                "another port, or leave DEBUG_PORT empty for a free one") from None
        return sock.getsockname()[1]


def plan(request: DebugRequest, processes: int, *, wd: Path, code: Path,
         source: Path | None) -> DebugPlan:
    """The chosen process's index and its MLOPS_DEBUG variable (`code`: where the snapshot
    holds the source folder's files)."""
    if request.process >= processes:
        raise LocalRunError(f"DEBUG=.../rank:{request.process}: the task runs {processes} "
                            f"process(es): ranks or workers 0 to {processes - 1}")
    port = free_or_refuse(request.port)
    settings = {"port": port, "mode": request.mode, "wd": str(wd), "code": str(code),
                "source": str(source) if source and source.is_dir() else ""}
    return DebugPlan(index=request.process, env={debug_hook.VARIABLE: json.dumps(settings)},
                     port=port, mode=request.mode)


def install_hook(site: Path, python: Python, debug: DebugPlan) -> None:
    """The hook in a run's top layer (it does nothing unless MLOPS_DEBUG names its process), and
    for debugpy, where the release for the environment's Python is."""
    (site / "_mlops_debug.py").write_text(for_python(HOOK.read_text(), python.info))
    (site / "zz_debug.pth").write_text("import _mlops_debug; _mlops_debug.install()\n")
    if debug.mode == "debugpy":
        (site / TOOLS_FILE).write_text(str(tools(python)))


def tools(python: Python = HERE) -> Path:
    """debugpy for `python`, installed once into a folder of its own beside the cached layers
    (never into an environment)."""
    folder = cache_dir() / "tools" / f"debugpy-upto-1.8.22-py{python.minor}"
    if (folder / "debugpy").is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "debugpy").is_dir():
            return folder
        print(f"debug: installing {DEBUGPY} for Python {python.minor} (once) into {folder}",
              file=sys.stderr, flush=True)
        staging = folder.with_name(folder.name + f".{os.getpid()}.tmp")
        done = resolve.run_uv([resolve.uv_binary(), "pip", "install", "--quiet", "--python",
                               str(python.executable), "--target", str(staging), DEBUGPY])
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise LocalRunError(f"DEBUG: uv could not install {DEBUGPY} for Python "
                                f"{python.minor} from the package registry:\n"
                                f"{resolve.tail(done.stderr)}")
        os.replace(staging, folder)
    return folder


def overlay(debug: DebugPlan | None, base: dict[str, str],
            envs: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each process's variables: the task's, its own overlay, and the debugger's for the one."""
    return [{**base, **o, **(debug.env if debug and i == debug.index else {})}
            for i, o in enumerate(envs)]


def terminal(debug: DebugPlan | None) -> int | None:
    """The process that takes this terminal (pdb's), if any."""
    return debug.index if debug is not None and debug.mode == "pdb" else None
