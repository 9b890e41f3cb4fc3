"""The scoring script of an online MLflow deployment without code (Azure's "no-code" deployment).

Azure serves such a model with a scoring script of its own over mlflow.pyfunc: the model is
loaded from AZUREML_MODEL_DIR/$MLFLOW_MODEL_FOLDER, a request is
    {"input_data": {"columns": [...], "index": [...], "data": [[...]]}}   (pandas split)
    {"input_data": [{"column": value, ...}, ...]}                          (records)
    {"input_data": [[...]]} or {"input_data": {"name": [...]}}             (tensors)
or one of the formats MLflow's scoring server documents (dataframe_split, dataframe_records,
instances, inputs), with optional "params"; the answer is the predictions as JSON (a DataFrame in
records orientation). Parsing and answers are MLflow's own (mlflow.pyfunc.scoring_server).
Input the model cannot take is answered 400 with MLflow's message. This file runs inside the
deployment's environment, so it needs only what that environment has (mlflow, the server), and
runs on every Python and release Azure's images hold: Python 3.7 and up, MLflow 1.x (which parses
a JSON string: split or records frames, `instances`/`inputs`) to 3.x, and every release line of
azureml-inference-server-http (AMLResponse moved between them).
"""

import importlib
import json
import logging
import os

model = None
log = logging.getLogger("mlflow_score")


def init():
    global model
    import mlflow.pyfunc

    path = os.path.join(os.environ["AZUREML_MODEL_DIR"], os.environ.get("MLFLOW_MODEL_FOLDER", ""))
    model = mlflow.pyfunc.load_model(path)
    log.info("loaded MLflow model %s (flavor %s)", path, model.metadata.flavors.get(
        "python_function", {}).get("loader_module", "?"))


def as_mlflow_request(body):  # unannotated: it runs on the model's Python, 3.6 too
    """Azure's `input_data` envelope in the vocabulary of MLflow's scoring server."""
    if not isinstance(body, dict):
        raise ValueError("the request is a JSON object with an input_data key")
    if "input_data" not in body:
        return body
    data = body["input_data"]
    if isinstance(data, dict) and "data" in data and set(data) <= {"columns", "index", "data"}:
        request = {"dataframe_split": data}
    elif isinstance(data, list) and data and all(isinstance(row, dict) for row in data):
        request = {"dataframe_records": data}
    else:
        request = {"inputs": data}
    if "params" in body:
        request["params"] = body["params"]
    return request


# Where each release line of azureml-inference-server-http keeps AMLResponse: 0.8 and later in
# api/; 0.7 in server/azureml_contrib_services; 0.1-0.6 put server/ itself on sys.path; the
# azureml-contrib-services package last.
RESPONSE_MODULES = ("azureml_inference_server_http.api.aml_response",
                    "azureml_inference_server_http.server.azureml_contrib_services.aml_response",
                    "azureml_contrib_services.aml_response",
                    "azureml.contrib.services.aml_response")


def _error(status: int, message: str):
    for name in RESPONSE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.AMLResponse({"error": message}, status, json_str=True)
    raise RuntimeError(f"{status}: {message} (no AMLResponse in this inference server)")


def parse(request, schema):
    """The request as MLflow's own scoring server parses it, in the MLflow this environment has:
    infer_and_parse_data (2.9 and later); a JSON string in 2.0-2.8; MLflow 1.x's older vocabulary
    (a records list, a split frame, or `instances`/`inputs`)."""
    from mlflow.pyfunc import scoring_server

    if hasattr(scoring_server, "infer_and_parse_data"):
        return scoring_server.infer_and_parse_data(request, schema)
    import mlflow

    if int(mlflow.__version__.split(".")[0]) >= 2:
        return scoring_server.infer_and_parse_json_input(json.dumps(request), schema)
    if "dataframe_split" in request:
        legacy = request["dataframe_split"]
    elif "dataframe_records" in request:
        legacy = request["dataframe_records"]
    else:
        legacy = request
    return scoring_server.infer_and_parse_json_input(json.dumps(legacy), schema)


def run(raw_data):
    from mlflow.exceptions import MlflowException
    from mlflow.utils.proto_json_utils import _get_jsonable_obj

    try:
        body = json.loads(raw_data) if isinstance(raw_data, (str, bytes)) else raw_data
        request = as_mlflow_request(body)
        params = request.pop("params", None)
        data = parse(request, model.metadata.get_input_schema())
    except (ValueError, TypeError, MlflowException) as err:
        message = err.message if isinstance(err, MlflowException) else str(err)
        return _error(400, f"bad request: {message}")
    try:
        result = model.predict(data, params=params) if params else model.predict(data)
    except MlflowException as err:  # schema enforcement: the input does not fit the signature
        return _error(400, f"the input does not match the model's signature: {err.message}")
    return _get_jsonable_obj(result, pandas_orient="records")
