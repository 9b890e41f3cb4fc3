"""The local online endpoint: a deployment spec served on 127.0.0.1 without Docker.

`start` runs azureml-inference-server-http's own app (what azmlinfsrv runs) under gunicorn, with
the deployment's code_configuration, environment_variables and model, bound to 127.0.0.1
(azmlinfsrv itself always binds 0.0.0.0), and waits until the server is healthy. The server is
one task of the runtime (mlops/runtime/service.py): the same snapshot, environment layers,
variables, read-only model and process-group cleanup as a job.

On Azure a proxy sits in front of the server and holds slow clients; locally front.py does
(a deadline for each request's head and body, answered 408; pipelined requests answered in
order), so a stalled client never holds one of gunicorn's threads (gthread, SERVER_THREADS per
worker, default 4). The port is checked before the server starts: a port another process holds
is an error, not a "healthy" answer from that process.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from mlops.endpoints.deployment import Deployment, load
from mlops.endpoints.models import lay_out, newest_trained
from mlops.environments.activation import Environments
from mlops.environments.envspec import ENV_MAP
from mlops.errors import LocalRunError
from mlops.project import project
from mlops.runtime.aliases import safe_root
from mlops.runtime.debugging import DebugRequest
from mlops.runtime.engine import Runtime, start_service
from mlops.runtime.launch import free_port
from mlops.runtime.records import Status, TaskRecord
from mlops.runtime.service import Service, running, stop_service
from mlops.runtime.tasks import Task, Workdir, variables
from mlops.runtime.uris import ASSET_MAP

STATE = project().runs_dir / "serve-local"
APP = "azureml_inference_server_http.server.entry:app"
FRONT = Path(__file__).with_name("front.py")


class ServerFailed(Exception):
    """The server started and then failed (the deployment's own failure, not an input error)."""


@dataclass
class ServerPlan:
    """A server ready to start: its task and what it serves, for the log."""

    task: Task
    environments: Environments
    about: list[str]
    debug: DebugRequest | None = None


def latest_model() -> Path:
    return newest_trained("no model given").path


def server_command(port: int, workers: int = 1, threads: int | None = None,
                   debug: bool = False) -> str:
    """The front on `port`, and gunicorn behind it on a port of its own, both from the
    deployment's environment (the top layer's python is first on PATH). Debugged: one worker,
    which takes the debugger after the fork (the run's top layer holds the hook), and no worker
    timeout (a worker paused at a breakpoint is not hung)."""
    threads = threads or int(os.environ.get("SERVER_THREADS", "4"))
    timeout = 0 if debug else int(os.environ.get("WORKER_TIMEOUT", "300"))
    hook = " --config python:_mlops_debug" if debug else ""
    inner = free_port()
    return (f"python {shlex.quote(str(FRONT))} {port} {inner} -- python -m gunicorn --bind "
            f"127.0.0.1:{inner} "
            f"--workers {1 if debug else workers} --worker-class gthread --threads {threads} "
            f"--timeout {timeout}{hook} --access-logfile - {APP}")



def port_taken(port: int) -> bool:
    """Whether another socket listens on the port. SO_REUSEADDR, as gunicorn binds: the
    TIME_WAIT connections a stopped server leaves behind for a minute do not hold the port."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def wait_healthy(url: str, service: Service, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(service):
            raise ServerFailed("the server exited before it was healthy")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    raise ServerFailed(f"{url} not healthy after {timeout:.0f}s")


def server_task(deployment: Deployment, state: Path, *, port: int,
                extra: dict[str, str] | None = None, debug: bool = False) -> Task:
    """The server as a task, laid out as Azure's inference image lays it out: the code under
    AML_APP_ROOT in a folder of its own name (AZUREML_SOURCE_DIRECTORY, on sys.path), the entry
    script by its path, the model under AZUREML_MODEL_DIR (read-only); the spec's
    environment_variables under those."""
    app = state / "app"
    layout = lay_out(deployment.model, app)
    name = deployment.code.name
    spec_vars = variables(deployment.spec.data.get("environment_variables"))
    chosen = {**spec_vars, **(extra or {})}
    workers = int(chosen.get("WORKER_COUNT") or os.environ.get("WORKER_COUNT") or 1)
    env_vars = {**spec_vars, "AML_APP_ROOT": str(app), "AZUREML_SOURCE_DIRECTORY": name,
                "AZUREML_ENTRY_SCRIPT": str(app / name / deployment.scoring_script),
                **layout.env(), **(extra or {})}
    return Task(name=deployment.name, command=server_command(port, workers, debug=debug),
                where=f"{deployment.spec.path}: environment", folder=state, code=deployment.code,
                environment=deployment.environment,
                env_vars=env_vars, read_only=[Path(p) for p in layout.read_only()],
                workdir=Workdir("app", name))


@dataclass(frozen=True, kw_only=True)
class ServeRequest:
    """What `make serve-local` asks for: a deployment spec, its model, the port."""

    deployment: Path
    model: str | None = None  # MODEL_DIR: a model folder instead of the spec's model
    port: int = 5001
    asset_file: Path = ASSET_MAP
    env_file: Path = ENV_MAP
    debug: DebugRequest | None = None


def prepare(request: ServeRequest, *, state: Path,
            extra: dict[str, str] | None = None) -> ServerPlan:
    """The server as a task of the runtime, with what the log says about it first."""
    debug, path = request.debug, request.deployment
    if debug is not None:
        debug.check([()])
        if debug.mode == "pdb":
            raise LocalRunError("DEBUG=pdb: the local endpoint runs in the background, with no "
                                "terminal for pdb; use DEBUG=1 and attach a debugger")
    deployment = load(path, "online-deployment", request.model, request.asset_file)
    state.mkdir(parents=True, exist_ok=True)
    task = server_task(deployment, state, port=request.port, extra=extra,
                       debug=debug is not None)
    kind = deployment.spec.kind + (", no-code MLflow scoring" if deployment.nocode else "")
    about = [f"deployment: {path} ({kind})",
             f"model: {deployment.model.describe()} -> AZUREML_MODEL_DIR="
             f"{task.env_vars['AZUREML_MODEL_DIR']}"]
    return ServerPlan(task, Environments(request.env_file), about, debug)


def launch_server(plan: ServerPlan, port: int) -> Service:
    """Start the planned server through the runtime and wait until it is healthy; a server that
    fails is stopped, and ServerFailed says why."""
    rt = Runtime(plan.task.folder, 1, environments=plan.environments, debug=plan.debug)
    service = start_service(plan.task, rt, plan.about)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/", service)
    except ServerFailed:
        stop_service(service.pid, service.folder)
        raise
    return service


def start(request: ServeRequest) -> int:
    """make serve-local: 0 once healthy; 1 when the server failed (its log's tail shown)."""
    _stop_running()
    port = request.port
    if port_taken(port):
        raise LocalRunError(f"port {port} on 127.0.0.1 is already in use by another process: "
                            "stop it, or pick another port (PORT=5002)")
    STATE.mkdir(parents=True, exist_ok=True)
    plan = prepare(request, state=safe_root(STATE))
    print("\n".join(plan.about), flush=True)
    try:
        service = launch_server(plan, port)
    except ServerFailed as err:
        tail = (STATE / "log.txt").read_text(errors="replace").splitlines()[-25:]
        print(f"error: {err}\n" + "\n".join(f"  | {line}" for line in tail), file=sys.stderr)
        return 1
    print(f"environment: {service.environment}\nserving {request.deployment.name} on "
          f"http://127.0.0.1:{port}/score (log {STATE / 'log.txt'}; stop: make stop-local)")
    return 0


def _stop_running() -> int | None:
    """Stop the local server if one runs; its pid (None: none ran)."""
    record = TaskRecord.read(STATE)
    if record is None or record.status != Status.RUNNING or not record.pid:
        return None
    stop_service(record.pid, STATE)
    return record.pid


def stop() -> int:
    pid = _stop_running()
    print(f"stopped the local server (pid {pid})" if pid else "no local server running")
    return 0


def invoke(request: Path, port: int) -> int:
    body = request.read_bytes()
    call = urllib.request.Request(f"http://127.0.0.1:{port}/score", data=body, method="POST",
                                  headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(call, timeout=60) as response:
            print(json.dumps(json.loads(response.read()), indent=2))
            return 0
    except urllib.error.HTTPError as err:
        print(f"HTTP {err.code}: {err.read().decode(errors='replace')}", file=sys.stderr)
    except urllib.error.URLError as err:
        print(f"cannot reach 127.0.0.1:{port} ({err.reason}): make serve-local first",
              file=sys.stderr)
    return 1
