"""Started in a task's process at interpreter start (copied into the run's top layer as
_mlops_debug.py, loaded by a .pth file) when the runtime chose that process for a debugger.

MLOPS_DEBUG holds what the runtime decided (JSON): the port, the mode, the snapshot folder (`wd`)
and the source folder the spec's `code:` names. Only the first Python process of the task that
runs code from the snapshot takes it (a `pip install` before the job's own script does not), and
it removes the variable so no child inherits it. The runtime's own processes call activate()
themselves: the mini-batch worker before it imports the scoring script, the inference server's
worker from gunicorn's post_fork (-c python:_mlops_debug). Modes:
- debugpy: listen on 127.0.0.1:<port>, the snapshot mapped to the source folder (a client that
  sets a breakpoint on the source file hits it in the snapshot's copy), and wait for a client,
  with a reminder each minute;
- pdb: stop at the first line of the job's own code, on the terminal; post-mortem on an uncaught
  exception.
Standard library only, besides debugpy itself: it runs in every environment's Python.
"""

from __future__ import annotations

import json
import os
import sys
import time

VARIABLE = "MLOPS_DEBUG"
ACTIVE = "MLOPS_DEBUGGING"  # set once a debugger is in: the runtime's timeouts stand aside
REMIND_S = 60
TOOLS_FILE = "_mlops_debug_tools.txt"  # written beside this hook: where its debugpy is


def _settings() -> dict[str, object]:
    try:
        return json.loads(os.environ.get(VARIABLE, "") or "{}")
    except ValueError:
        return {}


def _command_line() -> list[str]:
    """The interpreter's arguments as given (sys.orig_argv from 3.10; before, the kernel's copy
    of them; where there is none, sys.argv, which holds a script's path as given)."""
    if hasattr(sys, "orig_argv"):
        return list(sys.orig_argv)[1:]
    try:
        with open("/proc/self/cmdline", "rb") as cmdline:
            return [os.fsdecode(arg) for arg in cmdline.read().split(b"\0") if arg][1:]
    except OSError:
        return list(sys.argv)


def _runs_snapshot_code(wd: str) -> bool:
    """The process runs a script or module from the snapshot (not pip, not a tool of the
    image)."""
    argv = _command_line()
    while argv and argv[0].startswith("-") and argv[0] not in ("-m", "-c"):
        argv.pop(0)
    if not argv or argv[0] == "-c":
        return False
    if argv[0] == "-m" and len(argv) > 1:
        base = os.path.join(os.getcwd(), *argv[1].split("."))
        return os.getcwd().startswith(wd) and (os.path.isfile(base + ".py") or
                                               os.path.isdir(base))
    return os.path.realpath(argv[0]).startswith(os.path.realpath(wd) + os.sep)


def install() -> None:
    """At interpreter start: take the debugger if this is the chosen process."""
    settings = _settings()
    if settings and _runs_snapshot_code(settings["wd"]):
        activate(settings, wait=True)


def activate(settings: dict[str, object] | None = None, wait: bool = True) -> None:
    """Take the debugger in this process (nothing when the runtime chose none)."""
    settings = settings or _settings()
    if not settings:
        return
    os.environ.pop(VARIABLE, None)  # this process only: no child inherits it
    os.environ[ACTIVE] = "1"
    if settings.get("mode") == "pdb":
        _pdb(settings["wd"])
    else:
        _debugpy(settings, wait)


def _debugpy(settings: dict[str, object], wait: bool) -> None:
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # frozen stdlib: no warning
    if settings.get("source"):  # pydevd reads the mapping when it is imported
        os.environ["PATHS_FROM_ECLIPSE_TO_PYTHON"] = json.dumps(
            [[settings["source"], settings["code"]]])
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), TOOLS_FILE)) as found:
        sys.path.append(found.read().strip())  # debugpy for this Python (debugging.tools)
    import debugpy

    # in-process adapter: no second process to start (a second of start-up) or to outlive the
    # job (it held the job's output open after the job ended); debugpy 1.7 (Python 3.7) has none
    address = ("127.0.0.1", int(settings["port"]))
    try:
        debugpy.listen(address, in_process_debug_adapter=True)
    except TypeError:
        debugpy.listen(address)
    where = f"127.0.0.1:{settings['port']}"
    print(f"debug: pid {os.getpid()} listens on {where}", file=sys.stderr, flush=True)
    if not wait:
        return
    waited = 0.0
    while not debugpy.is_client_connected():
        time.sleep(0.1)
        waited += 0.1
        if waited >= REMIND_S:
            waited = 0.0
            print(f"debug: still waiting for a debugger on {where} (Ctrl-C stops the run)",
                  file=sys.stderr, flush=True)
    debugpy.wait_for_client()  # returns at once: the client's configuration is done


def _pdb(wd: str) -> None:
    import pdb

    root = os.path.realpath(wd) + os.sep

    def first_user_line(frame, event, arg):  # noqa: ARG001 - sys.settrace's signature
        name = frame.f_code.co_filename  # "<frozen codecs>" and the like are not files
        if event == "call" and os.path.isabs(name) and os.path.realpath(name).startswith(root):
            debugger = pdb.Pdb()
            debugger.set_trace(frame)  # stops at the frame's first line
            return debugger.trace_dispatch
        return None

    def post_mortem(kind, value, traceback):
        sys.__excepthook__(kind, value, traceback)
        pdb.post_mortem(traceback)

    sys.excepthook = post_mortem
    sys.settrace(first_user_line)


def post_fork(server, worker) -> None:  # noqa: ARG001 - gunicorn's hook signature
    """gunicorn's config hook (-c python:_mlops_debug): the server's worker takes the debugger;
    it does not wait, so the server turns healthy and a client may attach at any time."""
    activate(wait=False)
