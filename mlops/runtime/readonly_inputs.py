"""Read-only data inputs inside a local job, as Azure's `ro_mount` makes them.

Azure mounts a job's data inputs read-only (`ro_mount`, the default mode of uri_file and
uri_folder inputs): writing, creating, deleting or renaming under one fails with
`OSError: [Errno 30] Read-only file system`. Locally an input is a folder of links to the user's
own files, so a write would change them. This module is copied into every task's top layer
(mlops/envs.py) and installed by a .pth file at interpreter start; where MLOPS_READONLY_INPUTS
names paths, an audit hook (PEP 578) refuses each write under them with that same error.
It covers what Python itself does (open, os, shutil, and libraries that write through them);
native code writing with its own C calls is not seen. Standard library only: it runs in every
environment's Python, 3.7 included (which has no audit hooks: there nothing is caught, and the
runtime says so when it activates such an environment).
"""

from __future__ import annotations

import errno
import os
import sys

VARIABLE = "MLOPS_READONLY_INPUTS"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit event -> positions of its path arguments that must not lie under a read-only input
PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,),
               "os.chown": (0,), "os.utime": (0,), "os.truncate": (0,), "shutil.rmtree": (0,),
               "os.rename": (0, 1), "os.link": (1,), "os.symlink": (1,), "os.mkfifo": (0,),
               "os.mknod": (0,), "os.setxattr": (0,), "os.removexattr": (0,)}


def _roots() -> tuple[str, ...]:
    paths = [p for p in os.environ.get(VARIABLE, "").split(os.pathsep) if p]
    return tuple({os.path.realpath(p) for p in paths} | {os.path.abspath(p) for p in paths})


def _under(path, roots: tuple[str, ...]) -> bool:
    if isinstance(path, int) or path is None:
        return False  # a file descriptor: its open() was checked
    try:
        text = os.fsdecode(path)
    except TypeError:
        return False
    for candidate in {os.path.abspath(text), os.path.realpath(text)}:
        if any(candidate == root or candidate.startswith(root + os.sep) for root in roots):
            return True
    return False


def _writes(mode, flags) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def _hook(roots: tuple[str, ...]):
    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            targets = (path,) if _writes(mode, flags) else ()
        elif event in PATH_EVENTS:
            targets = tuple(args[i] for i in PATH_EVENTS[event] if i < len(args))
        else:
            return
        for path in targets:
            if _under(path, roots):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
    return hook


def install() -> None:
    roots = _roots()
    if roots and hasattr(sys, "addaudithook"):
        sys.addaudithook(_hook(roots))

