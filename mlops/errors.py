"""The one error family of the local tooling, and its two kinds.

- `LocalRunError` (and its kinds, such as `mlops.specs.SpecError`): **the input is wrong**: a spec
  Azure would refuse, a flag, a path, a name, a run folder in use. Nothing has run; the message
  says what to change; every front door prints it and exits INPUT_ERROR (2).
- `MachineError`: **the machine stopped it**: the network, a cache, a compiler, the disk, an
  interpreter that cannot be found or fetched. The input may be fine; the message says what to
  do about the machine; every front door prints it and exits MACHINE_ERROR (1).

A job, step, batch run or server that started and then failed is neither: its front door exits
with its status (1, or the job's own code). An OSError that is the machine's fault (a full disk,
a quota, a read-only or forbidden folder) becomes a MachineError with what to do
(`machine_fault`), and a link that leads back to itself a LocalRunError naming it (`link_loop`), at
every front door alike: `python -m mlops.<name>` and `azml`.
"""

from __future__ import annotations

import errno
import os

INPUT_ERROR = 2
MACHINE_ERROR = 1
NOT_FOUND = 3  # az's exit code for a resource that does not exist


class LocalError(Exception):
    """The family: every error the tooling raises on purpose is one of its two kinds."""

    exit_code = INPUT_ERROR


class LocalRunError(LocalError):
    """The input cannot run locally (or Azure would refuse it); the message names the spec, the
    key and the fix."""

    exit_code = INPUT_ERROR


class MachineError(LocalError):
    """This machine stopped the work (network, cache, compiler, disk, interpreter); the message
    says what to do about it."""

    exit_code = MACHINE_ERROR


class NotFound(LocalRunError):
    """What the input names does not exist (a job, an endpoint, an asset): `az`'s exit 3."""

    exit_code = NOT_FOUND


# what to do about each OSError that is the machine's fault (its real reason, not just a full disk)
WHERE = "runs and the MLflow store go to AZML_STATE_DIR, caches to MLOPS_CACHE_DIR"
ADVICE = {errno.ENOSPC: f"free some space there, or write elsewhere ({WHERE}), and run again",
          errno.EDQUOT: f"free some of your quota, or write elsewhere ({WHERE}), and run again",
          errno.EROFS: f"it is on a read-only file system: write elsewhere ({WHERE})",
          errno.EACCES: f"you may not write there: write elsewhere ({WHERE})",
          errno.EPERM: "it is protected (immutable: `lsattr` shows an i; or another user's in "
                       f"a sticky folder): make it writable (chattr -i), or write elsewhere "
                       f"({WHERE})"}


def machine_fault(err: OSError) -> MachineError | None:
    """The MachineError an OSError stands for when the machine stopped the work (a full disk, a
    quota, a read-only or forbidden folder), saying what to do; None for any other."""
    if err.errno not in ADVICE or (err.errno == errno.EPERM and err.filename is None):
        return None  # (an EPERM without a file is a process's, not the disk's)
    where = err.filename if err.filename is not None else "a file"
    if err.filename2 is not None:  # a copy or a rename: the second name is the one written
        where = err.filename2
    return MachineError(f"{where}: {err.strerror}; {ADVICE[err.errno]}")


def write_holder(handle: int, text: str, path: str | os.PathLike) -> None:
    """`text` (who holds it) in place of what the lock file `path`, open as `handle`, held. A
    write to a descriptor names no file: a full disk's OSError is given the lock's name, so
    machine_fault says which file could not be written (it said "a file")."""
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, text.encode(), 0)
    except OSError as err:
        err.filename = err.filename or os.fspath(path)
        raise


LOOP = "Symlink loop from "  # pathlib's RuntimeError for a link that leads back to itself


def link_loop(err: Exception) -> LocalRunError | None:
    """The LocalRunError a link that leads back to itself stands for (an OSError ELOOP, or the
    RuntimeError Python 3.11's Path.resolve raises for it), naming the link; None for any other.
    azure-ai-ml's loader stops at such a link too (its Path.resolve), so az ml refuses it."""
    if isinstance(err, OSError) and err.errno == errno.ELOOP:
        where = err.filename if err.filename is not None else "a path"
    elif isinstance(err, RuntimeError) and str(err).startswith(LOOP):
        where = str(err).removeprefix(LOOP).strip("'\"")
    else:
        return None
    return LocalRunError(f"{where}: a symbolic link that leads back to itself (a loop of links); "
                         "point it at a real file or folder, or remove it")


def machine_faults_raised(call):
    """call(), with an OSError that is the machine's fault raised as its MachineError, and a
    loop of links as its LocalRunError (link_loop), so the front doors' LocalError handling
    says them; any other error as it is."""
    try:
        return call()
    except (OSError, RuntimeError) as err:
        fault = machine_fault(err) if isinstance(err, OSError) else None
        fault = fault or link_loop(err)
        if fault is None:
            raise
        raise fault from err
