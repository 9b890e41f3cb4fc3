"""The runner's side of MLflow's REST API (https://mlflow.org/docs/latest/api_reference/rest-api.html)
against the local tracking server: the few calls a runner makes for a job (find or create its
experiment, create, reopen and end its run, find the runs it opened below it, tags, metrics),
spoken with the standard library's HTTP client, so a run never imports MLflow itself (about
3 s of CPU). Proxies are never used: the server is on 127.0.0.1.

Artifacts are not sent through the server: it keeps them in a local folder (its default
artifact root), so the runner copies a job's outputs/ and logs/ into the run's artifact folder,
as MLflow's own local artifact repository does.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

API = "/api/2.0/mlflow/"
FIRST_TIMEOUT_S = 300  # the first call may wait for a server that is still importing
TIMEOUT_S = 60
Json = dict[str, object]  # a request's or an answer's JSON object


class RestError(Exception):
    """The server answered with an error (`code`: MLflow's error code, such as
    RESOURCE_DOES_NOT_EXIST), or could not be reached (`code` "UNREACHABLE")."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass(frozen=True, kw_only=True)
class RunView:
    """What the runner reads of a run."""

    run_id: str
    status: str
    start_time: int = 0
    end_time: int | None = None
    artifact_uri: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def run_view(run: Json) -> RunView:
    """A run as MLflow's JSON spells it (int64 fields as numbers or strings)."""
    info, data = run.get("info", {}), run.get("data", {})
    end = info.get("end_time")
    return RunView(run_id=info["run_id"], status=info.get("status", ""),
                   start_time=int(info.get("start_time") or 0),
                   end_time=int(end) if end not in (None, "") else None,
                   artifact_uri=info.get("artifact_uri", ""),
                   tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
                   metrics={m["key"]: float(m["value"]) for m in data.get("metrics", [])})


def local_folder(artifact_uri: str) -> Path | None:
    """The folder of a local artifact URI (a path, or file://); None for any other scheme."""
    parsed = urllib.parse.urlparse(artifact_uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(urllib.parse.unquote(parsed.path))
    return Path(artifact_uri) if not parsed.scheme and artifact_uri.startswith("/") else None


class RestStore:
    """MLflow's tracking API on one server (`uri`: http://127.0.0.1:<port>). Building one
    connects to nothing."""

    def __init__(self, uri: str):
        parsed = urllib.parse.urlparse(uri)
        self.uri, self.host, self.port = uri, parsed.hostname or "127.0.0.1", parsed.port or 80
        self.answered = False  # the server has answered once: later calls need not wait long

    def call(self, method: str, endpoint: str, body: Json | None = None) -> Json:
        """One call: GET with `body` as its query, POST with it as JSON."""
        path, payload = API + endpoint, None
        if method == "GET" and body:
            path += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            payload = json.dumps(body).encode()
        timeout = TIMEOUT_S if self.answered else FIRST_TIMEOUT_S
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.request(method, path, body=payload,
                               headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            text = answer.read()
        except OSError as err:  # refused, reset, timed out: the server is gone or stuck
            raise RestError("UNREACHABLE", f"{self.uri}: {err}") from None
        finally:
            connection.close()
        self.answered = True
        try:
            reply = json.loads(text or b"{}")
        except ValueError:
            reply = {"message": text[:200].decode(errors="replace")}
        if answer.status >= 400:
            raise RestError(str(reply.get("error_code", answer.status)),
                            str(reply.get("message", "")))
        return reply

    def experiment_by_name(self, name: str) -> str | None:
        try:
            found = self.call("GET", "experiments/get-by-name", {"experiment_name": name})
        except RestError as err:
            if err.code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        return found["experiment"]["experiment_id"]

    def create_experiment(self, name: str) -> str:
        return self.call("POST", "experiments/create", {"name": name})["experiment_id"]

    def experiment_ids(self) -> list[str]:
        ids, token = [], None
        while True:
            page = self.call("POST", "experiments/search",
                             {"max_results": 1000, **({"page_token": token} if token else {})})
            ids += [e["experiment_id"] for e in page.get("experiments", [])]
            token = page.get("next_page_token")
            if not token:
                return ids

    def create_run(self, experiment_id: str, name: str, tags: dict[str, str],
                   start_ms: int) -> RunView:
        return run_view(self.call("POST", "runs/create", {
            "experiment_id": experiment_id, "run_name": name, "start_time": start_ms,
            "user_id": tags.get("mlflow.user", "unknown"),
            "tags": [{"key": k, "value": v} for k, v in tags.items()]})["run"])

    def get_run(self, run_id: str) -> RunView:
        return run_view(self.call("GET", "runs/get", {"run_id": run_id})["run"])

    def update_run(self, run_id: str, status: str, end_ms: int | None) -> None:
        self.call("POST", "runs/update", {"run_id": run_id, "run_uuid": run_id,
                                          "status": status,
                                          **({"end_time": end_ms} if end_ms else {})})

    def search_runs(self, experiment_ids: list[str], where: str,
                    max_results: int) -> list[RunView]:
        found = self.call("POST", "runs/search", {"experiment_ids": experiment_ids,
                                                  "filter": where, "max_results": max_results})
        return [run_view(run) for run in found.get("runs", [])]

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.call("POST", "runs/set-tag", {"run_id": run_id, "run_uuid": run_id, "key": key,
                                           "value": value})

    def log_metric(self, run_id: str, key: str, value: float, timestamp_ms: int) -> None:
        self.call("POST", "runs/log-metric", {"run_id": run_id, "run_uuid": run_id, "key": key,
                                              "value": value, "timestamp": timestamp_ms,
                                              "step": 0})

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, int, float]]:
        points, token = [], None
        while True:
            page = self.call("GET", "metrics/get-history", {
                "run_id": run_id, "run_uuid": run_id, "metric_key": key, "max_results": 25000,
                **({"page_token": token} if token else {})})
            points += [(int(m.get("step") or 0), int(m.get("timestamp") or 0), float(m["value"]))
                       for m in page.get("metrics", [])]
            token = page.get("next_page_token")
            if not token:
                return points

    def log_artifacts(self, run_id: str, source: Path, under: str) -> None:
        """`source` (a folder's files, or one file) into the run's artifacts under `under`."""
        artifact_uri = self.get_run(run_id).artifact_uri
        root = local_folder(artifact_uri)
        if root is None:
            raise RestError("UNSUPPORTED", f"artifacts at {artifact_uri} are not a local folder")
        copy_artifacts(source, root / under)


def copy_artifacts(source: Path, target: Path) -> None:
    """As MLflow's local artifact repository logs them: a folder walked without following its
    links to folders, each file copied with its times (copy2); each file written beside its
    place and renamed into it, so a reader never sees half of one, and a copy the disk refused
    leaves no part of that file behind."""
    target.mkdir(parents=True, exist_ok=True)
    if not source.is_dir():
        _copy_whole(source, target / source.name)
        return
    for folder, dirs, files in os.walk(source):
        here = target / os.path.relpath(folder, source)
        for name in dirs:
            (here / name).mkdir(exist_ok=True)
        for name in files:
            _copy_whole(Path(folder, name), here / name)


def _copy_whole(source: Path, target: Path) -> None:
    staged = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        shutil.copy2(source, staged)
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)
