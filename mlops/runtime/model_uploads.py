"""Azure's model registry taking a model from a local folder, answered by the warm tracking
server (inside its process: mlflow_serve.py wraps MLflow's app with `local_sources`).

A job that registers an MLflow model it saved to a folder, `MlflowClient().create_model_version(
name, source="file:///<folder>")` with no run, is registered on Azure: azureml-mlflow's registry
store (`AzureMLflowModelRegistry.create_model_version`) uploads the folder under
`LocalUpload/<yymmddTHHMMSS>-<8 hex>/<folder's name>` of the workspace's artifacts and registers
the version on that copy (source `azureml://artifacts/LocalUpload/...`); a folder with no
`MLmodel` is refused ("Model source must be a directory containing an mlflow MLmodel, ...").
MLflow's own server refuses every local source that is not inside the artifacts of a run the
request names, so here the same request is answered as Azure does: the folder copied under the
server's artifact root (`<artifacts>/LocalUpload/...`, whole, then renamed into place) and the
version created on the copy in MLflow's registry, answered as MLflow's create answers. What
differs: the version's source is the copy's local path, not an `azureml://artifacts/` URI.

Every other request, and a `file://` source sent with a run or a logged model (MLflow's own
rules then), goes to MLflow's app as it came.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from datetime import datetime
from pathlib import Path

from mlops.runtime.mlflow_rest import local_folder
from mlops.runtime.run_history import Environ, Json, WsgiApp, json_answer

CREATE = ("/api/2.0/mlflow/model-versions/create", "/ajax-api/2.0/mlflow/model-versions/create")
LOCAL = "file://"
MAX_BODY = 1 << 20
NOT_A_MODEL = ("Model source must be a directory containing an mlflow MLmodel, as is produced by "
               "an mlflow save_model function.")  # azureml-mlflow's words


class Refused(Exception):
    """MLflow's error answer: its HTTP status and error code."""

    def __init__(self, message: str, status: int = 400, code: str = "INVALID_PARAMETER_VALUE"):
        super().__init__(message)
        self.status, self.code = status, code


def local_sources(inner: WsgiApp, artifacts: str) -> WsgiApp:
    """`inner` (MLflow's app), registering a model version from a local folder as Azure's
    registry does (this module's docstring); `artifacts`: the server's artifact root."""
    root = local_folder(artifacts)

    def routed(environ, start_response):
        body = uploaded_request(environ) if root is not None else None
        if body is None:
            return inner(environ, start_response)
        try:
            status, answer = 200, register(body, root)
        except Refused as refused:
            status, answer = refused.status, {"error_code": refused.code,
                                              "message": str(refused)}
        return json_answer(start_response, status, answer)
    return routed


def uploaded_request(environ: Environ) -> Json | None:
    """The body of a create-model-version request this layer answers (a `file://` source, no
    run and no logged model), else None, with the request left readable for MLflow's app."""
    if environ.get("REQUEST_METHOD") != "POST" or environ.get("PATH_INFO") not in CREATE:
        return None
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if not 0 < length <= MAX_BODY:
        return None
    raw = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(raw)  # MLflow's app reads it as it came
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return None
    source = body.get("source")
    if not isinstance(source, str) or not source.startswith(LOCAL):
        return None
    return None if body.get("run_id") or body.get("model_id") else body


def register(body: Json, root: Path) -> Json:
    """The folder `body` names copied under `root`, and its version created on the copy."""
    folder = Path(str(body["source"])[len(LOCAL):])  # as azureml-mlflow reads it
    if not folder.is_dir() or not (folder / "MLmodel").exists():
        raise Refused(NOT_A_MODEL)
    copy = upload(folder, root)
    try:
        return create_version(body, copy)
    except Refused:
        shutil.rmtree(copy.parent, ignore_errors=True)  # a version not made keeps no upload
        raise


def upload(folder: Path, root: Path) -> Path:
    """`folder` whole at `root/LocalUpload/<time>-<8 hex>/<its name>` (copied beside, then
    renamed into place: a half copy is never registered)."""
    container = f"{datetime.now().strftime('%y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    target = root / "LocalUpload" / container / folder.resolve().name
    staging = target.with_name(f".{target.name}.partial")
    try:
        shutil.copytree(folder, staging)
        os.replace(staging, target)
    except (OSError, shutil.Error) as err:
        shutil.rmtree(target.parent, ignore_errors=True)
        raise Refused(f"the model folder {folder} could not be uploaded to {target}: {err}",
                      status=500, code="INTERNAL_ERROR") from None
    return target


def create_version(body: Json, source: Path) -> Json:
    """MLflow's registry creating the version, answered as MLflow's create answers."""
    from mlflow.entities.model_registry import ModelVersionTag
    from mlflow.exceptions import MlflowException
    from mlflow.protos.model_registry_pb2 import CreateModelVersion
    from mlflow.server.handlers import _get_model_registry_store
    from mlflow.utils.proto_json_utils import message_to_json

    given = body.get("tags") or []
    if not isinstance(given, list) or not all(
            isinstance(t, dict) and isinstance(t.get("key"), str) for t in given):
        raise Refused("tags is not a list of {key, value} objects")
    tags = [ModelVersionTag(t["key"], str(t.get("value", ""))) for t in given]
    try:
        version = _get_model_registry_store().create_model_version(
            name=body["name"], source=str(source), run_id=None, tags=tags,
            run_link=body.get("run_link") or None, description=body.get("description") or None)
    except MlflowException as err:
        raise Refused(err.message, status=err.get_http_status_code(),
                      code=err.error_code) from None
    return json.loads(message_to_json(CreateModelVersion.Response(
        model_version=version.to_proto())))
