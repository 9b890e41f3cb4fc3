"""A test's own local endpoints: started as make serve-local starts them (serve.main), under the
test's folder (never the user's runs/), called with their key, stopped after the test."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from pathlib import Path

from mlops import serve
from mlops.endpoints import endpoint_stop, local_endpoint
from mlops.endpoints.endpoint_state import EndpointState
from mlops.runtime.launch import free_port


@dataclass
class Answer:
    status: int
    body: object
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def deployment(self) -> str:
        return self.headers.get("azureml-model-deployment", "")


@dataclass
class Endpoints:
    """The endpoints of one test, all under `root`."""

    root: Path
    port: int = field(default_factory=free_port)

    def start(self, spec: Path, *extra: str) -> str:
        """serve.main start for a deployment spec; the endpoint's scoring URL."""
        assert serve.main(["start", "--deployment", str(spec), "--port", str(self.port),
                           *extra]) == 0
        return f"http://127.0.0.1:{self.port}/score"

    def state(self, name: str | None = None) -> EndpointState:
        folder = endpoint_stop.chosen(name)
        state = EndpointState.read(folder)
        assert state is not None
        return state

    def slot_folder(self, deployment: str, name: str | None = None) -> Path:
        return Path(self.state(name).deployments[deployment].folder)

    def log(self, deployment: str, name: str | None = None) -> str:
        return (self.slot_folder(deployment, name) / "log.txt").read_text()

    def headers(self, name: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.state(name).credential()}"}

    def stop(self) -> None:
        endpoint_stop.stop()


def post(url: str, body, headers: dict[str, str] | None = None, *,
         content_type: str = "application/json", timeout: float = 60) -> Answer:
    """POST on a connection of its own; the answer even when it is an error."""
    data = body if isinstance(body, bytes) else (
        body.encode() if isinstance(body, str) else json.dumps(body).encode())
    host, _, rest = url.removeprefix("http://").partition(":")
    port, _, path = rest.partition("/")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request("POST", "/" + path, body=data,
                           headers={"Content-Type": content_type, **(headers or {})})
        response = connection.getresponse()
        raw = response.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Answer(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})
    finally:
        connection.close()


def use_root(monkeypatch, root: Path) -> Endpoints:
    monkeypatch.setattr(local_endpoint, "ENDPOINTS", root)
    return Endpoints(root)


SERVER = "_mlops_inference_server"  # a deployment's server, as the runtime starts it


def servers_of(folder: Path) -> list[str]:
    """The command lines of the fronts and deployment servers (azmlinfsrv) still running whose
    command or variables name `folder`: every process an endpoint under it started, recorded or
    not."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                environ = (proc / "environ").read_bytes()
            except OSError:
                continue
            if str(folder).encode() in environ + line.encode() and (
                    "front.py" in line or SERVER in line):
                found.append(line)
    return found
