"""The one set-up of a local run, whatever runs in it: a job of any kind (orchestrators/jobs.py)
and a batch deployment's job (endpoints/batch_run.py) alike.

`guarded()` turns SIGINT and SIGTERM into KeyboardInterrupt for the whole run (launch.py: a
signal stops the run's processes, and the run ends Canceled) and names the warm tracking server
(nothing starts until a run connects). `run_in_folder()` then holds the run folder for this run
alone (job.locked: a second run into it is refused at once), claims the job's name in the local
workspace (unique, as on Azure), builds the runtime, connects the tracking, records the run
Running in run.json, runs the body, and records how it ended: Completed (0), Canceled (a signal:
128 + its number), else Failed. A folder this run made is removed again when nothing started.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mlops.environments.activation import Environments
from mlops.project import tracking_uri
from mlops.runtime import engine, launch
from mlops.runtime.aliases import safe_root
from mlops.runtime.debugging import DebugRequest
from mlops.runtime.job import Identity, end_record, locked, write_record
from mlops.runtime.mlflow_runs import Tracking
from mlops.runtime.mlflow_server import Server
from mlops.runtime.selection import Selection

Body = Callable[[engine.Runtime], int]  # what runs in the folder: its exit code


@dataclass(frozen=True, kw_only=True)
class Setup:
    """A run's folder, what it records itself as, and the runtime's settings."""

    folder: Path
    identity: Identity
    max_procs: int = 1
    env_file: Path | None = None  # curated, registry, image environments (else the tool's)
    debug: DebugRequest | None = None  # the one process to debug
    force_rerun: bool = False
    explain: bool = False
    selection: Selection | None = None


@contextlib.contextmanager
def guarded() -> Iterator[Server]:
    """Signals handled and the tracking server named for everything inside: preparing the run
    (a Ctrl-C while an environment builds is a clean stop) and the run itself."""
    handlers = launch.install_signal_handlers()
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # the lint imports entry
    server = Server(tracking_uri())  # points: no .pyc into the sources; nothing starts yet
    try:
        yield server
    finally:
        server.close()
        sys.dont_write_bytecode = bytecode
        launch.restore_signal_handlers(handlers)


def claim(name: str, folder: Path) -> None:
    """The job's name, unique in the workspace as on Azure (mlops/workspace/jobs.py): `azml job
    show -n <name>` finds it from the start."""
    from mlops.workspace.jobs import claim_name
    from mlops.workspace.store import Workspace, workspace_root

    claim_name(Workspace(workspace_root()), name, folder.resolve())


@contextlib.contextmanager
def in_folder(folder: Path) -> Iterator[None]:
    """A write the machine refused without naming its file names the run folder."""
    try:
        yield
    except OSError as err:
        if err.filename is None:
            err.filename = str(folder)
        raise


def run_in_folder(setup: Setup, server: Server, body: Body) -> int:
    """The body's exit code, run in the set-up folder (module docstring)."""
    folder = setup.folder
    created, held = not folder.exists(), False
    try:
        with in_folder(folder), locked(folder):
            held = True
            return _held(setup, server, body, created=created)
    except OSError:  # the lock itself not written (a full disk): the folder made for it goes
        if created and not held:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _held(setup: Setup, server: Server, body: Body, *, created: bool) -> int:
    """run_in_folder's body, with the folder locked."""
    folder = setup.folder
    rt = None
    try:
        claim(setup.identity.name, folder)
        rt = engine.Runtime(root=safe_root(folder), max_procs=max(1, setup.max_procs),
                            tracking=Tracking(server),
                            environments=Environments(setup.env_file),
                            force_rerun=setup.force_rerun, debug=setup.debug,
                            explain=setup.explain, selection=setup.selection)
        rt.tracking.connect()  # the warm server (started now if none is) or the store
        return recorded(setup.identity, rt, body)
    except BaseException:
        if created and not (rt and rt.started):  # nothing ran: leave nothing behind
            shutil.rmtree(folder, ignore_errors=True)
        raise


def recorded(identity: Identity, rt: engine.Runtime, body: Body) -> int:
    """run.json Running, the body, then how it ended (an interrupt: Canceled). A failure while
    a stop signal waits is that stop: the Ctrl-C that reached the terminal's whole group also
    killed a tool the body was waiting on (uv building an environment), whose failure came
    first."""
    write_record(identity, rt.root)
    try:
        code = body(rt)
    except KeyboardInterrupt as err:
        end_record(rt.root, 128 + getattr(err, "signum", 2))
        raise
    except BaseException:
        try:
            launch.check_interrupt()
        except launch.Interrupted as stop:
            end_record(rt.root, 128 + stop.signum)
            raise stop from None
        end_record(rt.root, 1)
        raise
    end_record(rt.root, code)
    return code
