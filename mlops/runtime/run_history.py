"""Azure ML's run-history REST calls on a run, answered by the warm tracking server (inside its
process: mlflow_serve.py wraps MLflow's app with `routes`).

On Azure a job reaches run history on its tracking URI's host:
`https://<host>/history/v1.0/subscriptions/<s>/resourceGroups/<g>/providers/
Microsoft.MachineLearningServices/workspaces/<w>/experimentids/<experiment id>/runs/<run id>`
(the `experiments/<name>` form too). responsible-AI's gather and score-card components end by
PATCHing the run's properties there (azureml-assets' rai_component_utilities.
add_properties_to_gather_run, through azure-core's RequestsTransport). Here:

    GET    the run, as run history shows it: runId, experimentId, status (Azure's words),
           displayName, times, properties, tags
    PATCH  {"properties": {...}, "tags": {...}} recorded on the job's MLflow run, then the run:
           a property as the local Run stand-in records add_properties (azureml_run.py), the
           MLflow tag `properties.<key>`; a tag as itself

The run is found by its id (a job's name: unique in a workspace, as on Azure); the scope and the
experiment segment are taken as they come (jobs here have no subscription, and Azure's own client
may send an experiment id it fell back on). An unknown run is 404 as Azure answers it; a body
that is not such an object is 400. Both calls go to MLflow's own REST API in this process
(runs/get, runs/log-batch), so the store is only ever MLflow's to write.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable

ROUTE = re.compile(r"^/history/v1\.0(?:/.*)?/(?:experimentids|experiments)/[^/]+"
                   r"/runs/(?P<run>[^/]+)/?$")
API = "/api/2.0/mlflow/"
PROPERTY = "properties."  # the MLflow tag a run property is kept as (azureml_run.add_properties)
HIDDEN = ("mlflow.", PROPERTY)  # MLflow's own tags, and properties: not run history's tags
MAX_BODY = 1 << 20
BATCH = 100  # MLflow's log-batch takes at most 100 tags
# MLflow's run status in run history's words
STATUS = {"RUNNING": "Running", "SCHEDULED": "NotStarted", "FINISHED": "Completed",
          "FAILED": "Failed", "KILLED": "Canceled"}
Json = dict[str, object]
Environ = dict[str, object]  # a WSGI request's variables
WsgiApp = Callable[[Environ, Callable], Iterable[bytes]]


class Refused(Exception):
    """An answer other than 200: its status and message."""

    def __init__(self, status: int, message: str, code: str = "UserError"):
        super().__init__(message)
        self.status, self.code = status, code


def routes(inner: WsgiApp) -> WsgiApp:
    """`inner` (MLflow's app), also answering run history's calls on a run."""
    def routed(environ, start_response):
        found = ROUTE.match(environ.get("PATH_INFO", ""))
        if found is None:
            return inner(environ, start_response)
        try:
            body = answer(inner, environ, found.group("run"))
            status = 200
        except Refused as refused:
            status, body = refused.status, error_body(refused)
        return respond(start_response, status, body)
    return routed


def answer(inner: WsgiApp, environ: Environ, run_id: str) -> Json:
    method = environ.get("REQUEST_METHOD", "GET")
    body = read_body(environ)  # read whole before any answer: the connection stays usable
    if method not in ("GET", "PATCH"):
        raise Refused(405, f"{method} is not answered here: GET or PATCH")
    run = mlflow_call(inner, "GET", "runs/get", {"run_id": run_id})["run"]
    if method == "PATCH":
        tags = changes(body)
        for start in range(0, len(tags), BATCH):
            mlflow_call(inner, "POST", "runs/log-batch",
                        {"run_id": run_id, "tags": tags[start:start + BATCH]})
        run = mlflow_call(inner, "GET", "runs/get", {"run_id": run_id})["run"]
    return run_view(run)


def read_body(environ: Environ) -> Json:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise Refused(400, "Content-Length is not a number") from None
    if length > MAX_BODY:
        raise Refused(413, f"the body is over {MAX_BODY} bytes")
    try:
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
    except ValueError as err:
        raise Refused(400, f"the body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise Refused(400, "the body is not a JSON object")
    return body


def changes(body: Json) -> list[dict[str, str]]:
    """The MLflow tags a PATCH body's properties and tags are kept as."""
    tags = []
    for field, prefix in (("properties", PROPERTY), ("tags", "")):
        given = body.get(field) or {}
        if not isinstance(given, dict):
            raise Refused(400, f"{field} is not a JSON object of strings")
        for key, value in given.items():
            if isinstance(value, (dict, list)) or value is None:
                raise Refused(400, f"{field}.{key} is not a string")
            tags.append({"key": f"{prefix}{key}", "value": str(value)})
    return tags


def run_view(run: Json) -> Json:
    """An MLflow run (REST JSON) as run history shows it."""
    info = run.get("info") or {}
    tags = {t["key"]: t["value"] for t in (run.get("data") or {}).get("tags") or []}
    view = {"runId": info.get("run_id"), "runUuid": info.get("run_uuid") or info.get("run_id"),
            "experimentId": info.get("experiment_id"), "displayName": info.get("run_name"),
            "status": STATUS.get(str(info.get("status")), info.get("status")),
            "startTimeUtc": utc(info.get("start_time")), "endTimeUtc": utc(info.get("end_time")),
            "parentRunId": tags.get("mlflow.parentRunId"),
            "properties": {k[len(PROPERTY):]: v for k, v in tags.items()
                           if k.startswith(PROPERTY)},
            "tags": {k: v for k, v in tags.items() if not k.startswith(HIDDEN)}}
    return view


def utc(ms: object) -> str | None:
    try:
        moment = datetime.datetime.fromtimestamp(int(ms) / 1000, datetime.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    return moment.isoformat().replace("+00:00", "Z")


def mlflow_call(inner: WsgiApp, method: str, endpoint: str, payload: Json) -> Json:
    """One call to MLflow's REST API on `inner`, in this process; its JSON. Refused: MLflow's
    own error (a run it does not have: 404, as run history answers it)."""
    from werkzeug.test import Client

    client = Client(inner)
    if method == "GET":
        response = client.get(API + endpoint, query_string=payload)
    else:
        response = client.post(API + endpoint, json=payload)
    try:
        data = json.loads(response.get_data() or b"{}")
    except ValueError:
        data = {}
    if response.status_code == 200 and isinstance(data, dict):
        return data
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(data, dict) and data.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
        raise Refused(404, f"Run {payload.get('run_id')} was not found", "UserError")
    raise Refused(response.status_code if 400 <= response.status_code < 500 else 500,
                  str(message or f"MLflow answered {response.status_code}"),
                  "UserError" if response.status_code < 500 else "SystemError")


def error_body(refused: Refused) -> Json:
    inner = {404: "NotFoundError", 405: "MethodNotAllowed", 413: "RequestTooLarge"}
    return {"error": {"code": refused.code, "message": str(refused),
                      "innerError": {"code": inner.get(refused.status, "BadArgument")}}}


def respond(start_response, status: int, body: Json) -> list[bytes]:
    return json_answer(start_response, status, body,
                       content_type="application/json; charset=utf-8",
                       extra=[("Allow", "GET, PATCH")] if status == 405 else [])


def json_answer(start_response, status: int, body: Json, *, content_type: str = "application/json",
                extra: list[tuple[str, str]] | None = None) -> list[bytes]:
    """A WSGI answer of `body` as JSON, with its length (and `extra` headers)."""
    from werkzeug.http import HTTP_STATUS_CODES

    data = json.dumps(body).encode()
    headers = [("Content-Type", content_type), ("Content-Length", str(len(data))), *(extra or [])]
    start_response(f"{status} {HTTP_STATUS_CODES.get(status, '')}".rstrip(), headers)
    return [data]
