"""PyTorch image classification for Azure ML: training, scoring and export share these modules."""

from __future__ import annotations

import errno
import gc
import os
import sys
from collections.abc import Callable
from typing import NoReturn

__version__ = "0.1.0"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's limit sets it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# an entry point's OSErrors that are the machine's, not the code's: said in a line, exit 1
MACHINE_FAULTS = {errno.ENOSPC: "the disk is full: free some space there and run again",
                  errno.EDQUOT: "the disk quota is used up: free some and run again",
                  errno.EROFS: "that folder is read-only: write the outputs elsewhere"}


def exit_with(main: Callable[[], int | None]) -> NoReturn:
    """`sys.exit(main())` for the entry points, without the garbage collection of shutdown.

    Python's exit scans every object still alive for cycles, several times; torch, torchvision
    and MLflow leave about a million from their imports, so each job process spends about a
    second of CPU on it after its work is done (a one-epoch tiny training run on this project's
    2-core test machine: 7.4 s of CPU, 6.0 s with this). Frozen objects are never scanned.
    Nothing depends on that scan: main closes its files, MLflow runs and process groups, and
    atexit handlers run as before. An OSError that is the machine's (MACHINE_FAULTS: a full
    disk, a quota, a read-only folder) is said in one line with what to do, exit 1."""
    try:
        code = main()
    except OSError as err:
        if err.errno not in MACHINE_FAULTS:
            raise
        where = err.filename2 or err.filename or "a file"  # a copy's: the one written
        print(f"error: {where}: {err.strerror}; {MACHINE_FAULTS[err.errno]}", file=sys.stderr,
              flush=True)
        code = 1
    finally:
        gc.freeze()  # on failure too: the traceback is printed the same
    sys.exit(code)
