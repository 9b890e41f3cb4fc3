"""A deployment's server, as Azure runs one behind its endpoint: the environment's own release of
azureml-inference-server-http, started as Azure's image starts it (azmlinfsrv, through
mlops/runtime/inference_server.py: every release line, 0.x included, on the environment's
Python), with the deployment's code_configuration, environment_variables and model, bound to
127.0.0.1 on a port of its own (azmlinfsrv itself always binds 0.0.0.0). The server is one
task of the runtime (mlops/runtime/service.py): the same snapshot, environment layers,
variables, read-only model and process-group cleanup as a job.
The endpoint that holds it (auth, traffic, limits) is local_endpoint.py and front.py.

The request rules the front applies for it come from its spec, with Azure's defaults:
request_settings.request_timeout_ms (5000), 2 * max_concurrent_requests_per_instance (1) *
instance_count (1) requests at once, and the readiness probe's path (/) to know it is up.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from mlops.endpoints.deployment import Deployment, load
from mlops.endpoints.endpoint_state import Slot
from mlops.endpoints.models import lay_out, newest_trained
from mlops.environments.activation import Environments
from mlops.errors import LocalRunError
from mlops.runtime import (
    DebugRequest,
    Runtime,
    Service,
    Task,
    Workdir,
    free_port,
    running,
    signals_held,
    start_service,
    stop_service,
    variables,
)

LAUNCHER = "_mlops_inference_server"  # mlops/runtime/inference_server.py, in the top layer
# The front refuses a longer body (413) before it reaches a deployment that sets no
# SCORE_MAX_BODY_BYTES: Azure documents no request-size limit for managed online endpoints that
# this could follow, so the local one is this repository's scorer's own default.
MAX_BODY = int(os.environ.get("LOCAL_MAX_BODY_BYTES", str(16 * 2**20)))


class ServerFailed(Exception):
    """The server started and then failed (the deployment's own failure, not an input error)."""


@dataclass(frozen=True, kw_only=True)
class Rules:
    """What the front applies for a deployment, from its spec (Azure's defaults where unset)."""

    max_body: int
    timeout_ms: int
    max_pending: int
    ready_path: str
    ready_s: float  # how long Azure's readiness probe gives the server to come up


@dataclass(kw_only=True)
class ServerPlan:
    """A server ready to start: its task, what it serves (for the log), its rules."""

    task: Task
    environments: Environments
    about: list[str]
    rules: Rules
    port: int
    model: str  # what it serves, as `show` names it
    spec: Path  # the deployment spec
    debug: DebugRequest | None = None
    sets: tuple[str, ...] = ()  # az's --set over it


@dataclass(frozen=True, kw_only=True)
class ServeRequest:
    """What `make serve-local` asks for: a deployment spec and its model, the endpoint to hold
    it (its spec, port, auth and how much traffic the deployment gets)."""

    deployment: Path
    model: str | None = None  # MODEL_DIR: a model folder instead of the spec's model
    port: int = 5001
    endpoint: Path | None = None  # the endpoint's spec (default: found beside the deployment)
    auth: str = ""  # AUTH=none: no auth, as `--local`; "" keeps the endpoint's auth_mode
    all_traffic: str = "auto"  # traffic.NewTraffic's values
    asset_file: Path | None = None
    env_file: Path | None = None
    debug: DebugRequest | None = None
    sets: tuple[str, ...] = ()  # az's --set over the deployment spec (--name's and -e's last)


def latest_model() -> Path:
    return newest_trained("no model given").path


def server_command(port: int, threads: int | None = None, debug: bool = False) -> str:
    """The environment's azmlinfsrv on 127.0.0.1:port, from the deployment's environment (the
    top layer's python is first on PATH), with threaded workers. Debugged, the worker takes
    the debugger after the fork (the run's top layer holds the hook)."""
    threads = threads or int(os.environ.get("SERVER_THREADS", "4"))
    return f"python -m {LAUNCHER} --port {port} --threads {threads}" + \
        (" --debug" if debug else "")


def server_settings(chosen: dict[str, str], debug: bool) -> dict[str, str]:
    """What azmlinfsrv reads for its gunicorn: WORKER_COUNT and WORKER_TIMEOUT (the spec's
    environment_variables, else this shell's, else 1 and 300). Debugged: one worker and no
    worker timeout (a worker paused at a breakpoint is not hung)."""
    workers = chosen.get("WORKER_COUNT") or os.environ.get("WORKER_COUNT") or "1"
    timeout = chosen.get("WORKER_TIMEOUT") or os.environ.get("WORKER_TIMEOUT") or "300"
    return {"WORKER_COUNT": "1" if debug else str(workers),
            "WORKER_TIMEOUT": "0" if debug else str(timeout)}


def port_taken(port: int) -> bool:
    """Whether another socket listens on the port. SO_REUSEADDR, as the front binds: the
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
            raise ServerFailed("the server exited before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    raise ServerFailed(f"{url} not ready after {timeout:.0f}s")


def _number(value, default: int, where: str) -> int:
    try:
        return int(default if value in (None, "") else value)
    except (TypeError, ValueError):
        raise LocalRunError(f"{where}: {value!r} is not a whole number") from None


def rules_of(deployment: Deployment, env_vars: dict[str, str], debug: bool) -> Rules:
    data, where = deployment.spec.data, str(deployment.spec.path)
    settings = data.get("request_settings") or {}
    probe = data.get("readiness_probe") or {}
    concurrent = _number(settings.get("max_concurrent_requests_per_instance"), 1, where)
    instances = _number(data.get("instance_count"), 1, where)
    ready = _number(probe.get("initial_delay"), 10, where) + \
        _number(probe.get("period"), 10, where) * _number(probe.get("failure_threshold"), 30, where)
    return Rules(max_body=_number(env_vars.get("SCORE_MAX_BODY_BYTES"), MAX_BODY, where),
                 timeout_ms=0 if debug else _number(settings.get("request_timeout_ms"), 5000,
                                                    where),
                 max_pending=2 * max(concurrent, 1) * max(instances, 1),
                 ready_path=str(probe.get("path") or "/"), ready_s=max(ready, 180))


def server_task(deployment: Deployment, folder: Path, *, port: int,
                extra: dict[str, str] | None = None, debug: bool = False) -> Task:
    """The server as a task, laid out as Azure's inference image lays it out: the code under
    AML_APP_ROOT in a folder of its own name (AZUREML_SOURCE_DIRECTORY, on sys.path), the entry
    script by its path, the model under AZUREML_MODEL_DIR (read-only); the spec's
    environment_variables under those."""
    app = folder / "app"
    layout = lay_out(deployment.model, app)
    name = deployment.code.name
    spec_vars = variables(deployment.spec.data.get("environment_variables"))
    chosen = {**spec_vars, **(extra or {})}
    env_vars = {**spec_vars, "AML_APP_ROOT": str(app), "AZUREML_SOURCE_DIRECTORY": name,
                "AZUREML_ENTRY_SCRIPT": str(app / name / deployment.scoring_script),
                **layout.env(), **(extra or {}), **server_settings(chosen, debug)}
    return Task(name=deployment.name, command=server_command(port, debug=debug),
                where=f"{deployment.spec.path}: environment", folder=folder,
                code=deployment.code, environment=deployment.environment,
                env_vars=env_vars, read_only=[Path(p) for p in layout.read_only()],
                workdir=Workdir("app", name))


def load_deployment(request: ServeRequest) -> Deployment:
    debug = request.debug
    if debug is not None:
        debug.check([()])
        if debug.mode == "pdb":
            raise LocalRunError("DEBUG=pdb: the local endpoint runs in the background, with no "
                                "terminal for pdb; use DEBUG=1 and attach a debugger")
    return load(request.deployment, "online-deployment", request.model, request.asset_file,
                sets=list(request.sets))


def prepare(request: ServeRequest, deployment: Deployment, *, folder: Path,
            extra: dict[str, str] | None = None) -> ServerPlan:
    """The server as a task of the runtime, with what the log says about it first."""
    folder.mkdir(parents=True, exist_ok=True)
    port, debug = free_port(), request.debug is not None
    task = server_task(deployment, folder, port=port, extra=extra, debug=debug)
    kind = deployment.spec.kind + (", no-code MLflow scoring" if deployment.nocode else "")
    about = [f"deployment: {request.deployment} ({kind})",
             f"model: {deployment.model.describe()} -> AZUREML_MODEL_DIR="
             f"{task.env_vars['AZUREML_MODEL_DIR']}"]
    rules = rules_of(deployment, task.env_vars, debug)
    return ServerPlan(task=task, environments=Environments(request.env_file), about=about,
                      rules=rules, port=port, model=deployment.model.describe(),
                      spec=request.deployment, debug=request.debug, sets=request.sets)


def launch_server(plan: ServerPlan) -> Slot:
    """Start the planned server through the runtime and wait until its readiness probe
    answers; a server that fails is stopped, and ServerFailed says why."""
    rt = Runtime(root=plan.task.folder, max_procs=1, environments=plan.environments,
                 debug=plan.debug)
    service = start_service(plan.task, rt, plan.about)
    try:
        wait_healthy(f"http://127.0.0.1:{plan.port}{plan.rules.ready_path}", service,
                     plan.rules.ready_s)
    except BaseException:  # failed, or interrupted (a signal): no server is left behind
        with signals_held():
            stop_service(service.pid, service.folder)
        raise
    rules = plan.rules
    return Slot(name=plan.task.name, port=plan.port, pid=service.pid, folder=str(service.folder),
                spec=str(plan.spec), sets=list(plan.sets), model=plan.model,
                environment=service.environment, max_body=rules.max_body,
                timeout_ms=rules.timeout_ms, max_pending=rules.max_pending)
