"""How a case runs: the one place that turns a case into the commands a user would type.

Jobs, deployments and the assets a repository's workflow creates go through `azml`, az ml's
verbs on this machine (`azml job run -f`, `azml data|environment|model|component create -f`,
`azml online-endpoint create`, `azml online-deployment create -f --all-traffic`, `azml
online-endpoint invoke`, `azml batch-endpoint create`, `azml batch-deployment create -f
--set-default`, `azml batch-endpoint invoke --input --stream`, and each endpoint's `delete`): a
user's script changes `az ml` to `azml`. The asset map that stands in for the workspace's data
is azml's one setting: `asset_map` in an `azml.toml` at the checkout's root, written for each
case (as a user adds it to their repository). azml is the console script beside this Python,
so a repository's own `mlops/` folder, which every mlops-v2 template has, never hides the
runtime's package.

Each command runs from the case's folder with the case's variables, in a session of its own,
writing to the case's log; past its deadline its whole process group is stopped (SIGTERM,
then SIGKILL), and a log growing past `max_log_bytes` stops it too, so a case can neither hang
the corpus nor fill the disk.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from corpus.manifest import Case

GRACE_S = 15  # SIGTERM -> SIGKILL: the runtime stops its job and ends its MLflow runs first
TAIL_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where a case runs: its checkout, its folder, its stand-in map, its variables, its log."""

    root: Path  # the repository's checkout
    cwd: Path
    asset_map: Path
    env: dict[str, str]
    log: Path
    max_log_bytes: int = 50 * 1024 * 1024


@dataclass(frozen=True)
class Finished:
    code: int | None  # None: stopped (deadline, or the log's limit)
    seconds: float
    stopped: str = ""  # why it was stopped: "timeout", "log limit"


def azml(*args: str) -> list[str]:
    """An azml command: the console script beside this Python (the installed tool)."""
    script = Path(sys.executable).parent / "azml"
    return [str(script) if script.exists() else shutil.which("azml") or "azml", *args]


SCHEMA_KINDS = {"data": "data", "model": "model", "environment": "environment"}


def asset_kind(spec: Path) -> str:
    """The verb's kind for an asset spec, from its $schema (what `az ml <kind> create` a
    repository's workflow runs); "" when the $schema names none."""
    try:
        schema = str((yaml.safe_load(spec.read_text()) or {}).get("$schema", ""))
    except (OSError, yaml.YAMLError, AttributeError):
        return ""
    name = schema.rsplit("/", 1)[-1].removesuffix(".schema.json").removesuffix(".json")
    return "component" if name.lower().endswith("component") else SCHEMA_KINDS.get(name, "")


def setup_command(spec: str, place: Place) -> list[str]:
    """`azml <kind> create -f <spec>`: the kind as the manifest says it ("data:x.yml"), else as
    the spec's $schema says it."""
    kind, _, path = spec.rpartition(":")
    kind = kind or asset_kind(place.cwd / path) or "data"
    return azml(kind, "create", "-f", path, "-o", "none")


def job_command(case: Case, place: Place) -> list[str]:
    return azml("job", "run", "-f", case.path, *_sets(case))


def _sets(case: Case) -> list[str]:
    """The manifest's `sets` as az ml's `--set`: what a user's workflow fills into the spec
    (a template's placeholders a script substitutes, a job's inputs)."""
    return [arg for value in case.sets for arg in ("--set", value)]


def write_settings(place: Place) -> Path:
    """azml's settings at the checkout's root: the case's asset map."""
    settings = place.root / "azml.toml"
    settings.write_text(f"# conformance: this case's stand-ins (scripts/corpus/standins.py)\n"
                        f"asset_map = {json.dumps(str(place.asset_map))}\n")
    return settings


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """An endpoint case's commands, in order; `delete` runs whatever happened before it."""

    create: list[str]
    deploy: list[str]
    invoke: list[str]
    delete: list[str]


def _mapping(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def endpoint_file(deployment: Path, name: str, kind: str = "onlineendpoint") -> Path | None:
    """The endpoint spec (`kind`: what its $schema names) beside the deployment that its
    endpoint_name names, else the only one there: what the repository's workflow creates the
    endpoint from. A spec with no $schema (az ml reads it all the same) counts where its name
    is the endpoint_name and it is no deployment (it has no endpoint_name of its own)."""
    found = []
    for path in sorted([*deployment.parent.glob("*.yml"), *deployment.parent.glob("*.yaml")]):
        data = _mapping(path)
        schema = str(data.get("$schema", "")).lower()
        given = str(data.get("name") or "")
        if kind in schema or (not schema and given == name and "endpoint_name" not in data):
            found.append((path, given))
    named = [path for path, given in found if given == name]
    return named[0] if named else (found[0][0] if len(found) == 1 else None)


def online_commands(case: Case, place: Place, port: int, request: str) -> Endpoint:
    """`az ml online-endpoint create`, `online-deployment create --all-traffic`,
    `online-endpoint invoke`, `online-endpoint delete`, as azml; the endpoint from its spec
    beside the deployment where there is one, named as the deployment's endpoint_name."""
    deployment = place.cwd / case.path
    name = str(_mapping(deployment).get("endpoint_name") or "conformance-endpoint")
    spec = endpoint_file(deployment, name)
    given = ["-f", os.path.relpath(spec, place.cwd)] if spec else []
    return Endpoint(create=azml("online-endpoint", "create", *given, "-n", name, "--port",
                                str(port), "-o", "none"),
                    deploy=azml("online-deployment", "create", "-f", case.path, "-e", name,
                                *_sets(case), "--all-traffic", "-o", "none"),
                    invoke=azml("online-endpoint", "invoke", "-n", name, "-r", request),
                    delete=azml("online-endpoint", "delete", "-n", name, "--yes"))


def batch_commands(case: Case, place: Place, input_path: str) -> Endpoint:
    """`az ml batch-endpoint create`, `batch-deployment create --set-default`, `batch-endpoint
    invoke --input` followed to its end (`--stream`: exit 1 when the job does not complete, as
    `az ml job stream`), `batch-endpoint delete`, as azml."""
    deployment = place.cwd / case.path
    name = str(_mapping(deployment).get("endpoint_name") or "conformance-batch")
    spec = endpoint_file(deployment, name, "batchendpoint")
    given = ["-f", os.path.relpath(spec, place.cwd)] if spec else []
    kind = ["--input-type", case.input_type] if case.input_type == "mltable" else []
    return Endpoint(create=azml("batch-endpoint", "create", *given, "-n", name, "-o", "none"),
                    deploy=azml("batch-deployment", "create", "-f", case.path, "-e", name,
                                *_sets(case), "--set-default", "-o", "none"),
                    invoke=azml("batch-endpoint", "invoke", "-n", name, "--input", input_path,
                                *kind, "--stream"),
                    delete=azml("batch-endpoint", "delete", "-n", name, "--yes"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def execute(argv: list[str], place: Place, deadline: float) -> Finished:
    """Run one command to its end or its deadline (time.monotonic()), output to the log."""
    started = time.monotonic()
    place.log.parent.mkdir(parents=True, exist_ok=True)
    with open(place.log, "ab") as log:
        shown = [Path(argv[0]).name, *argv[1:]]
        log.write(f"\n$ {' '.join(shown)}\n".encode())
        log.flush()
        process = subprocess.Popen(argv, cwd=place.cwd, env=place.env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    stopped = watch(process, place, deadline)
    code = process.wait() if not stopped else None
    return Finished(code, time.monotonic() - started, stopped)


def watch(process: subprocess.Popen, place: Place, deadline: float) -> str:
    """Wait for the process; stop its group at the deadline or the log's limit ("" if it
    ended by itself)."""
    while True:
        try:
            process.wait(timeout=1.0)
            return ""
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() > deadline:
            stop_group(process)
            return "timeout"
        if place.log.stat().st_size > place.max_log_bytes:
            stop_group(process)
            return "log limit"


def stop_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(log: Path, size: int = TAIL_BYTES) -> str:
    """The end of a log, at most `size` bytes of it."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - size))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def head(log: Path, size: int = TAIL_BYTES) -> str:
    """The start of a log, at most `size` bytes of it."""
    try:
        with open(log, "rb") as handle:
            return handle.read(size).decode(errors="replace")
    except OSError:
        return ""
