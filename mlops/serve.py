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
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .specs import ROOT, load_spec
from .uris import ASSET_MAP, asset_key, load_map

STATE = ROOT / "runs" / "serve-local"
APP = "azureml_inference_server_http.server.entry:app"


class ServeError(RuntimeError):
    pass


def latest_model(root: Path = ROOT / "runs") -> Path:
    """The newest folder under runs/ that holds a model (a failed run leaves an empty one)."""
    found = sorted(root.glob("**/model.pt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ServeError(f"no trained model under {root}: run `make train-local` first, or "
                         "pass MODEL_DIR=<folder with model.pt>")
    return found[-1].parent


def resolve_model(deployment: dict, override: str | None, assets: Path = ASSET_MAP) -> Path:
    """MODEL_DIR if given; else the deployment's model through the mapping file; else the
    newest local model."""
    if override:
        return Path(override).resolve()
    model = deployment.get("model")
    reference = model if isinstance(model, str) else (model or {}).get("path", "")
    local = load_map(assets).get(asset_key(reference)) \
        if reference.startswith("azureml:") else None
    return (ROOT / local).resolve() if local else latest_model()


def server_command(port: int, workers: int = 1, threads: int | None = None) -> list[str]:
    gunicorn = Path(sys.executable).with_name("gunicorn")
    threads = threads or int(os.environ.get("SERVER_THREADS", "4"))
    return [str(gunicorn), "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
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


def server_env(deployment_spec: Path, model_dir: Path, extra: dict | None = None) -> dict:
    spec = load_spec(deployment_spec)
    config = spec.data.get("code_configuration") or {}
    code = (spec.path.parent / config.get("code", ".")).resolve()
    env = {**os.environ, **{k: str(v) for k, v in (spec.data.get("environment_variables")
                                                   or {}).items()}}
    env.update({"AML_APP_ROOT": str(code), "AZUREML_ENTRY_SCRIPT": config["scoring_script"],
                "AZUREML_MODEL_DIR": str(model_dir), **(extra or {})})
    return env


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


def start(deployment: Path, model: str | None, port: int) -> int:
    if (STATE / "pid").is_file():
        stop()
    if port_taken(port):
        raise ServeError(f"port {port} on 127.0.0.1 is already in use by another process: stop "
                         "it, or pick another port (PORT=5002)")
    model_dir = resolve_model(load_spec(deployment).data, model)
    STATE.mkdir(parents=True, exist_ok=True)
    log = (STATE / "server.log").open("w")
    env = server_env(deployment, model_dir)
    process = subprocess.Popen(server_command(port, int(env.get("WORKER_COUNT", 1))), env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               cwd=ROOT)
    (STATE / "pid").write_text(str(process.pid))
    (STATE / "port").write_text(str(port))
    try:
        wait_healthy(f"http://127.0.0.1:{port}/", process)
    except ServeError as err:
        stop()
        tail = (STATE / "server.log").read_text().splitlines()[-25:]
        print(f"error: {err}\n" + "\n".join(f"  | {line}" for line in tail), file=sys.stderr)
        return 1
    print(f"serving {model_dir} ({deployment.name}) on http://127.0.0.1:{port}/score "
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
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pid_file.unlink(missing_ok=True)
    print(f"stopped the local server (pid {pid})")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Local online endpoint (no Docker).")
    parser.add_argument("action", choices=["start", "stop", "invoke", "latest"])
    parser.add_argument("--deployment", type=Path, default=ROOT / "endpoints" / "blue.yml")
    parser.add_argument("--model", help="model folder (default: the newest local run's)")
    parser.add_argument("--request", type=Path,
                        default=ROOT / "endpoints" / "sample-request.json")
    parser.add_argument("--port", type=int, default=5001)
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            return start(args.deployment, args.model, args.port)
        if args.action == "invoke":
            return invoke(args.request, args.port)
        if args.action == "latest":
            print(latest_model())
            return 0
        return stop()
    except ServeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
