"""The local online endpoint: one per endpoint spec, holding any number of its deployments.

Each deployment is its own server (online.py) started through the one runtime; the endpoint is
the front (front.py) on the endpoint's port, which applies the endpoint's auth_mode, traffic and
mirror traffic and each deployment's request rules. `start` adds a deployment to its endpoint or
replaces it (as `az ml online-deployment create`/`update` do), starting the front when it is
not running; the deployment it replaces stops only once the new one is ready. Everything about
the endpoint is in runs/endpoints/<name>/: endpoint.json (endpoint_state.py), the front's
folder, one folder per deployment server. Commands on one endpoint take its lock in turn; a
second one waits, naming the first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mlops.endpoints import online
from mlops.endpoints.deployment import Deployment
from mlops.endpoints.endpoint_state import AuthMode, DamagedState, EndpointState, Slot
from mlops.environments.activation import Environments
from mlops.errors import LocalRunError, write_holder
from mlops.project import project
from mlops.runtime import (
    STATUS_FILE,
    Runtime,
    Service,
    Status,
    Task,
    TaskRecord,
    alive,
    running,
    safe_root,
    signals_held,
    start_service,
    stop_service,
)
from mlops.specs import load_spec, schema_kind

ENDPOINTS = project().runs_dir / "endpoints"  # tests point it at a folder of their own
FRONT = Path(__file__).with_name("front.py")
# Azure's rule for endpoint and deployment names: a letter, then letters, digits and hyphens,
# 3 to 32 characters in all.
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{1,30}[A-Za-z0-9]$")
ENDPOINT_KINDS = ("managedOnlineEndpoint", "kubernetesOnlineEndpoint")


@dataclass(frozen=True)
class EndpointSpec:
    """The endpoint a deployment goes to: its name, auth mode and spec (None: no spec found)."""

    name: str
    auth_mode: AuthMode
    path: Path | None = None


def endpoint_folder(name: str) -> Path:
    return ENDPOINTS / checked_name(name, "endpoint")


def endpoint_folders() -> list[Path]:
    return sorted(p for p in ENDPOINTS.iterdir() if p.is_dir()) if ENDPOINTS.is_dir() else []


def checked_name(name: str, what: str) -> str:
    if not NAME.match(name):
        raise LocalRunError(f"{what} name {name!r}: Azure's names start with a letter and hold "
                            "letters, digits and hyphens, 3 to 32 characters")
    return name


def _endpoint_specs(folder: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")]):
        try:
            spec = load_spec(path)
        except LocalRunError:
            continue
        if schema_kind(spec.data.get("$schema")) in ENDPOINT_KINDS:
            yield path, str(spec.data.get("name") or "")


def endpoint_spec(request: online.ServeRequest, deployment: Deployment) -> EndpointSpec:
    """The endpoint spec asked for (ENDPOINT_SPEC), else the one beside the deployment whose
    name is its endpoint_name (or the only one there), else an endpoint of that name with
    Azure's default auth_mode, key."""
    wanted = str(deployment.spec.data.get("endpoint_name") or "")
    path = request.endpoint
    if path is None:
        found = list(_endpoint_specs(deployment.spec.path.parent))
        named = [p for p, n in found if n == wanted]
        path = named[0] if named else (found[0][0] if len(found) == 1 and not wanted else None)
    if path is None:
        if not wanted:
            raise LocalRunError(f"{request.deployment}: no endpoint_name, and no endpoint spec "
                                "beside it; name one: ENDPOINT_SPEC=<endpoint spec>")
        mode = AuthMode(request.auth or AuthMode.KEY.value)
        return EndpointSpec(checked_name(wanted, "endpoint"), mode)
    data = load_spec(path).data
    if schema_kind(data.get("$schema")) not in ENDPOINT_KINDS and request.endpoint is not None:
        raise LocalRunError(f"{path}: not an online endpoint spec (its $schema names "
                            f"{data.get('$schema')!r})")
    name = str(data.get("name") or wanted)
    try:
        mode = AuthMode.of_spec(request.auth or str(data.get("auth_mode") or "key"))
    except ValueError:
        raise LocalRunError(f"{path}: auth_mode {data.get('auth_mode')!r}; an online endpoint "
                            "takes key, aml_token or aad_token") from None
    return EndpointSpec(checked_name(name, "endpoint"), mode, path)


HELD: set[Path] = set()  # the endpoints whose lock this process holds (taken again at once)


@contextlib.contextmanager
def endpoint_lock(folder: Path, doing: str) -> Iterator[None]:
    """One command on the endpoint at a time; a second one waits and says for whom. A process
    that holds it already goes on (flock would wait on itself through a second descriptor)."""
    if folder.resolve() in HELD:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    handle = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 200, 0).decode(errors="replace").strip() or "another"
            print(f"endpoint {folder.name} is busy ({holder}); waiting for it to finish",
                  file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        write_holder(handle, f"pid {os.getpid()}: {doing}, since {time.strftime('%H:%M:%S')}",
                     folder / ".lock")
        HELD.add(folder.resolve())
        yield
    finally:
        HELD.discard(folder.resolve())
        os.close(handle)


def read_state(folder: Path) -> EndpointState | None:
    try:
        return EndpointState.read(folder)
    except DamagedState as err:
        raise LocalRunError(str(err)) from None


def live_state(folder: Path) -> EndpointState | None:
    """The endpoint's state with what no longer runs taken out of it (a killed server)."""
    state = read_state(folder)
    if state is None:
        return None
    if not alive(state.front_pid):
        state.front_pid = 0
    for name, slot in list(state.deployments.items()):
        if not alive(slot.pid):
            print(f"note: deployment {name}'s server (pid {slot.pid}) is no longer running; "
                  "removed from the endpoint", file=sys.stderr)
            del state.deployments[name]
            state.traffic.pop(name, None)
            state.mirror_traffic.pop(name, None)
    return state


def holder_of(port: int) -> str:
    lost = []
    for folder in endpoint_folders():
        with contextlib.suppress(LocalRunError):  # a damaged state is said where it matters
            state = read_state(folder)
            if state is not None and state.port == port and alive(state.front_pid):
                return f"local endpoint {state.name} (make stop-local ENDPOINT={state.name})"
            if state is None and running_servers(folder):
                lost.append(folder.name)
    if lost:
        return (f"another process (local endpoint {', '.join(lost)} has servers running and no "
                f"endpoint.json: make stop-local ENDPOINT={lost[0]})")
    return "another process"


def open_state(folder: Path, spec: EndpointSpec, port: int) -> EndpointState:
    """The endpoint's state for a start: as it runs, or new on `port`."""
    state = live_state(folder) or EndpointState(name=spec.name)
    if state.front_pid and state.port != port:
        raise LocalRunError(f"endpoint {spec.name} already serves on port {state.port}, not "
                            f"{port}: use PORT={state.port}, or make stop-local first")
    if not state.front_pid:
        if online.port_taken(port):
            raise LocalRunError(f"port {port} on 127.0.0.1 is already in use by "
                                f"{holder_of(port)}: stop it, or pick another port (PORT=5002)")
        state.port = port
    state.auth_mode, state.spec = spec.auth_mode, str(spec.path or "")
    state.ensure_credentials()
    return state


def next_folder(folder: Path, name: str) -> Path:
    taken = [int(p.name.rsplit("-", 1)[1]) for p in folder.glob(f"{name}-*")
             if p.name.rsplit("-", 1)[1].isdigit()]
    return folder / f"{name}-{max(taken, default=0) + 1}"


def prune(folder: Path, name: str, keep: Path) -> None:
    """Remove the stopped servers' folders of a deployment but the one replaced last (`keep`),
    whose log may say what happened."""
    for old in folder.glob(f"{name}-*"):
        if old.name.rsplit("-", 1)[1].isdigit() and old.resolve() != keep.resolve():
            record = TaskRecord.read(old)
            if record is None or record.status != Status.RUNNING or not alive(record.pid or 0):
                shutil.rmtree(old, ignore_errors=True)


def grace(slot: Slot) -> float:
    return slot.timeout_ms / 1000 + 5 if slot.timeout_ms else 30


def retire(slot: Slot) -> None:
    """Stop a deployment's server, the requests it holds answered first; its folder stays."""
    stop_service(slot.pid, Path(slot.folder), grace=grace(slot))


def wait_listening(port: int, service: Service, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running(service):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    tail = "".join(service.log.read_text(errors="replace").splitlines(True)[-10:])
    raise LocalRunError(f"the endpoint's front did not start listening on {port}:\n{tail}")


def ensure_front(state: EndpointState, folder: Path) -> None:
    """Start the endpoint's front through the runtime, unless it runs."""
    if state.front_pid:
        return
    root = safe_root(folder)
    task = Task(name="front", command=f"python {shlex.quote(str(FRONT))} "
                f"{shlex.quote(str(root))}", where=f"endpoint {state.name}: front",
                folder=root / "front")
    service = start_service(task,
                            Runtime(root=task.folder, max_procs=1, environments=Environments()),
                            [f"endpoint: {state.name}"])
    try:
        wait_listening(state.port, service)
    except BaseException:  # failed, or interrupted (a signal): not left running
        with signals_held():
            stop_service(service.pid, service.folder)
        raise
    state.front_pid = service.pid


def ours(pid: int, run: Path) -> bool:
    """Whether `pid` is still the server that `run` recorded (not a process that took its
    number since): a process group's leader, of that folder's environment (where /proc
    tells)."""
    try:
        if os.getpgid(pid) != pid:
            return False
    except (ProcessLookupError, PermissionError):
        return False
    return _environment_of(pid) in (None, run.resolve())


def _environment_of(pid: int) -> Path | None:
    """The run folder whose environment the process runs in (its VIRTUAL_ENV, the run's top
    layer); None where /proc does not tell."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(b"VIRTUAL_ENV="):
            return Path(os.fsdecode(entry[12:])).resolve().parent
    return Path("/")  # no environment of the runtime's


def _leaders_under(folder: Path) -> dict[int, Path]:
    """pid -> run folder of each process group leader that runs in the environment of one of
    `folder`'s run folders: the servers a record no longer names (its status.json damaged)."""
    found: dict[int, Path] = {}
    real = folder.resolve()
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        with contextlib.suppress(OSError, ValueError):
            if os.getpgid(pid) == pid and pid != os.getpgid(0):
                run = _environment_of(pid)
                if run is not None and run.parent == real:
                    found[pid] = folder / run.name
    return found


def running_servers(folder: Path) -> dict[int, Path]:
    """pid -> run folder of every server of the endpoint that runs (its front, each
    deployment's): found from the run folders' records and, where /proc tells, from the
    processes themselves, whatever endpoint.json says."""
    found = {}
    runs = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    for run in runs:
        if not (run / STATUS_FILE).is_file():  # none, or a FIFO or device that would block
            continue
        record = TaskRecord.read(run)
        if record is not None and record.status == Status.RUNNING and record.pid and \
                alive(record.pid) and ours(record.pid, run):
            found[record.pid] = run
    return {**_leaders_under(folder), **found}
