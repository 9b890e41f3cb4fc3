"""Read-only data inputs and mounted outputs inside a local job, as Azure's mounts make them.

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

Each input and output is a mount of its own on Azure, so the innermost mount decides: an output
written to the datastore folder an input also reads (`azureml://datastores/…/paths/x/` as both)
is written through its own read-write mount, while the input's path stays read-only
(MLOPS_OUTPUTS: every output folder; a path under an output at least as deep as the read-only
place that holds it is writable). An output mounted `rw_mount` (the default) is a mount point:
the job can empty it but not remove or move it (MLOPS_MOUNTED_OUTPUTS), `rmdir` and `rename` of
it fail with `OSError: [Errno 16] Device or resource busy`, so `shutil.rmtree(out)` empties it
and raises, as there; the shell's `rm -rf` is met in the launcher (mlops/runtime/launch.py).
"""

from __future__ import annotations

import errno
import os
import sys

VARIABLE = "MLOPS_READONLY_INPUTS"
OUTPUTS = "MLOPS_OUTPUTS"
MOUNTED = "MLOPS_MOUNTED_OUTPUTS"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit event -> positions of its path arguments that must not lie under a read-only input
PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,),
               "os.chown": (0,), "os.utime": (0,), "os.truncate": (0,), "shutil.rmtree": (0,),
               "os.rename": (0, 1), "os.link": (1,), "os.symlink": (1,), "os.mkfifo": (0,),
               "os.mknod": (0,), "os.setxattr": (0,), "os.removexattr": (0,)}


def _roots(variable: str = VARIABLE) -> tuple[str, ...]:
    paths = [p for p in os.environ.get(variable, "").split(os.pathsep) if p]
    return tuple({os.path.realpath(p) for p in paths} | {os.path.abspath(p) for p in paths})


def _depth(path, roots: tuple[str, ...]) -> int:
    """The length of the deepest root holding `path` (-1: none does)."""
    if isinstance(path, int) or path is None:
        return -1  # a file descriptor: its open() was checked
    try:
        text = os.fsdecode(path)
    except TypeError:
        return -1
    found = -1
    for candidate in {os.path.abspath(text), os.path.realpath(text)}:
        for root in roots:
            if candidate == root or candidate.startswith(root + os.sep):
                found = max(found, len(root))
    return found


def _under(path, roots: tuple[str, ...]) -> bool:
    return _depth(path, roots) >= 0


def _is_root(path, roots: tuple[str, ...]) -> bool:
    if isinstance(path, int) or path is None:
        return False
    text = os.fsdecode(path)
    return os.path.abspath(text) in roots or os.path.realpath(text) in roots


def _writes(mode, flags) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


class Places:
    """Where the job may not write, where its outputs are, and which are mount points."""

    def __init__(self, read_only: tuple, outputs: tuple = (), mounted: tuple = ()) -> None:
        self.read_only, self.outputs, self.mounted = read_only, outputs, mounted

    def refused(self, event: str, path, first: bool):
        """The OSError Azure's mounts give for this write, or None."""
        if first and event in ("os.rmdir", "os.rename") and _is_root(path, self.mounted):
            return OSError(errno.EBUSY, os.strerror(errno.EBUSY), os.fsdecode(path))
        held = _depth(path, self.read_only)
        if held >= 0 and held > _depth(path, self.outputs):
            return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
        return None


def _hook(places: Places):
    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            targets = (path,) if _writes(mode, flags) else ()
        elif event in PATH_EVENTS:
            targets = tuple(args[i] for i in PATH_EVENTS[event] if i < len(args))
        else:
            return
        for index, path in enumerate(targets):
            error = places.refused(event, path, index == 0)
            if error is not None:
                raise error
    return hook


def install() -> None:
    places = Places(_roots(), _roots(OUTPUTS), _roots(MOUNTED))
    if (places.read_only or places.mounted) and hasattr(sys, "addaudithook"):
        sys.addaudithook(_hook(places))
