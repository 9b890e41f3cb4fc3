"""A local online endpoint from a deployment spec, without Docker.

    python -m mlops.serve start  [--deployment endpoints/blue.yml] [--model DIR] [--port 5001]
    python -m mlops.serve invoke [--request endpoints/sample-request.json] [--port 5001]
    python -m mlops.serve stop

`start` runs azureml-inference-server-http's own app (what azmlinfsrv runs) under gunicorn, with
the deployment's code_configuration, environment_variables and model, bound to 127.0.0.1
(azmlinfsrv itself always binds 0.0.0.0), and waits until the server is healthy.

On Azure a proxy sits in front of the server and holds slow clients. Locally gunicorn runs
threaded workers (gthread, SERVER_THREADS per worker, default 4): a client that opens a
connection and sends nothing (or half a request) ties up one thread, never the worker, so the
others keep serving. The port is checked before the server starts: a port another process holds
is an error, not a "healthy" answer from that process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from mlops import exit_with
from mlops.endpoints.deployment import Deployment, load
from mlops.endpoints.models import lay_out, newest_trained
from mlops.environments.envspec import ENV_MAP
from mlops.envs import Environments
from mlops.errors import LocalRunError
from mlops.runtime import DROPPED_ENV, readonly_inputs, snapshot
from mlops.runtime.uris import ASSET_MAP
from mlops.specs import ROOT, SpecError

STATE = ROOT / "runs" / "serve-local"
APP = "azureml_inference_server_http.server.entry:app"


class ServeError(RuntimeError):
    pass


def latest_model() -> Path:
    return newest_trained("no model given").path


def server_env(deployment: Deployment, state: Path, envs: Environments) -> dict[str, str]:
    """The server's variables, as Azure's inference image sets them: the code under
    AML_APP_ROOT in a folder of its own name (AZUREML_SOURCE_DIRECTORY, on sys.path), the entry
    script by its path, the model laid out under AZUREML_MODEL_DIR; the deployment's environment
    activated as a job's is; the spec's environment_variables."""
    app = state / "app"
    if app.exists():
        shutil.rmtree(app)  # links and copies only: never follows a link into the user's files
    snapshot.take(deployment.code, app / deployment.code.name)
    layout = lay_out(deployment.model, app)
    env = {k: v for k, v in os.environ.items() if not DROPPED_ENV.match(k)}
    env.update(envs.activate(deployment.environment, deployment.env_base, state,
                             f"{deployment.spec.path}: environment",
                             deployment.image_packages()))
    env.update({str(k): str(v) for k, v in
                (deployment.spec.data.get("environment_variables") or {}).items()})
    env.update({"AML_APP_ROOT": str(app), "AZUREML_SOURCE_DIRECTORY": deployment.code.name,
                "AZUREML_ENTRY_SCRIPT": str(app / deployment.code.name /
                                            deployment.scoring_script),
                **layout.env(), readonly_inputs.VARIABLE: os.pathsep.join(layout.read_only())})
    return env


def server_command(port: int, workers: int = 1, threads: int | None = None,
                   python: Path | None = None) -> list[str]:
    """gunicorn from the deployment's environment (`python`: its top layer's interpreter)."""
    threads = threads or int(os.environ.get("SERVER_THREADS", "4"))
    return [str(python or sys.executable), "-m", "gunicorn", "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers),
            "--worker-class", "gthread", "--threads", str(threads), "--keep-alive", "5",
            "--timeout", os.environ.get("WORKER_TIMEOUT", "300"), "--access-logfile", "-", APP]


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


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServeError(f"the server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    raise ServeError(f"{url} not healthy after {timeout:.0f}s")


@dataclass
class Prepared:
    """A server ready to start: its variables, interpreter, directory, and what it serves."""

    env: dict[str, str]
    python: Path
    cwd: Path
    about: list[str]


def prepare(path: Path, model: str | None, state: Path, assets: Path = ASSET_MAP,
            env_map: Path = ENV_MAP, extra: dict | None = None) -> Prepared:
    deployment = load(path, "online-deployment", model, assets)
    state.mkdir(parents=True, exist_ok=True)
    envs = Environments(env_map)
    env = {**server_env(deployment, state, envs), **(extra or {})}
    kind = deployment.spec.kind + (", no-code MLflow scoring" if deployment.nocode else "")
    about = [f"deployment: {path} ({kind})",
             f"model: {deployment.model.describe()} -> AZUREML_MODEL_DIR="
             f"{env['AZUREML_MODEL_DIR']}",
             f"environment: {next(iter(envs.labels.values()))}"]
    return Prepared(env, state / "env" / "bin" / "python", state / "app", about)


def start(path: Path, model: str | None, port: int, assets: Path = ASSET_MAP,
          env_map: Path = ENV_MAP) -> int:
    if (STATE / "pid").is_file():
        stop()
    if port_taken(port):
        raise ServeError(f"port {port} on 127.0.0.1 is already in use by another process: stop "
                         "it, or pick another port (PORT=5002)")
    ready = prepare(path, model, STATE, assets, env_map)
    print("\n".join(ready.about), flush=True)
    log = (STATE / "server.log").open("w")
    log.write("".join(f"mlops.serve: {line}\n" for line in ready.about))
    log.flush()
    command = server_command(port, int(ready.env.get("WORKER_COUNT", 1)), python=ready.python)
    process = subprocess.Popen(command, env=ready.env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True, cwd=ready.cwd)
    (STATE / "pid").write_text(str(process.pid))
    (STATE / "port").write_text(str(port))
    try:
        wait_healthy(f"http://127.0.0.1:{port}/", process)
    except ServeError as err:
        stop()
        tail = (STATE / "server.log").read_text().splitlines()[-25:]
        print(f"error: {err}\n" + "\n".join(f"  | {line}" for line in tail), file=sys.stderr)
        return 1
    print(f"serving {path.name} on http://127.0.0.1:{port}/score "
          f"(log {STATE / 'server.log'}; stop: make stop-local)")
    return 0


def stop() -> int:
    pid_file = STATE / "pid"
    if not pid_file.is_file():
        print("no local server running")
        return 0
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(50):
            _reap(pid)
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pid_file.unlink(missing_ok=True)
    print(f"stopped the local server (pid {pid})")
    return 0


def _reap(pid: int) -> None:
    """A server this process started stays a zombie (and "alive") until it is waited for."""
    with contextlib.suppress(ChildProcessError):  # another process started it: exit is enough
        os.waitpid(pid, os.WNOHANG)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Local online endpoint (no Docker).")
    parser.add_argument("action", choices=["start", "stop", "invoke", "latest"])
    parser.add_argument("--deployment", type=Path, default=ROOT / "endpoints" / "blue.yml")
    parser.add_argument("--model", help="model folder (default: the newest local run's)")
    parser.add_argument("--request", type=Path,
                        default=ROOT / "endpoints" / "sample-request.json")
    parser.add_argument("--port", type=int, default=5001)
    parser.add_argument("--assets", type=Path, default=ASSET_MAP)
    parser.add_argument("--envs", type=Path, default=ENV_MAP)
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            return start(args.deployment, args.model, args.port, args.assets, args.envs)
        if args.action == "invoke":
            return invoke(args.request, args.port)
        if args.action == "latest":
            print(latest_model())
            return 0
        return stop()
    except (ServeError, LocalRunError, SpecError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    exit_with(main)
