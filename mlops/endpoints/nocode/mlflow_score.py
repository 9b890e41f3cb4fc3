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
deployment's environment, so it needs only what that environment has (mlflow, the server).
"""

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


def as_mlflow_request(body: dict[str, object]) -> dict[str, object]:
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


def _error(status: int, message: str):
    from azureml_inference_server_http.api.aml_response import AMLResponse

    return AMLResponse({"error": message}, status, json_str=True)


def run(raw_data):
    from mlflow.exceptions import MlflowException
    from mlflow.pyfunc.scoring_server import infer_and_parse_data
    from mlflow.utils.proto_json_utils import _get_jsonable_obj

    try:
        body = json.loads(raw_data) if isinstance(raw_data, (str, bytes)) else raw_data
        request = as_mlflow_request(body)
        params = request.pop("params", None)
        data = infer_and_parse_data(request, model.metadata.get_input_schema())
    except (ValueError, TypeError, MlflowException) as err:
        message = err.message if isinstance(err, MlflowException) else str(err)
        return _error(400, f"bad request: {message}")
    try:
        result = model.predict(data, params=params) if params else model.predict(data)
    except MlflowException as err:  # schema enforcement: the input does not fit the signature
        return _error(400, f"the input does not match the model's signature: {err.message}")
    return _get_jsonable_obj(result, pandas_orient="records")
