"""Azure's no-code MLflow scoring (mlops/endpoints/nocode/mlflow_score.py) as a client meets it:
the script served by .venv's azureml-inference-server-http in this process (its Flask app, no
socket), one request of each class against models with a column, a tensor or no signature and
with params; and the parameter types it gives `run`, picked from the model's input example or
signature as Azure's mlflow_score_script.py picks them (azureml-assets, commit 4b41f8ccbc:
assets/inference/environments/mlflow-py312-inference/context/mlflow_score_script.py). The
endpoint then answers any status other than 200 as 424 (tests/unit/test_front_wire.py)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from support import ROOT

SCORER = ROOT / "mlops" / "endpoints" / "nocode" / "mlflow_score.py"
# loaded by its path, as the server loads it (outside the environment it runs in, it serves no
# model: only its functions are called here)
_spec = importlib.util.spec_from_file_location("mlflow_score", SCORER)
scorer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scorer)

WEIGHTS = np.array([1.0, 2.0, 3.0])  # every model here predicts a + 2b + 3c + 4
SPLIT = {"columns": ["a", "b", "c"], "index": [0], "data": [[1, 2, 3]]}
FAILED = "An unexpected error occurred in scoring script. Check the logs for more info."


def save(folder, signature=None, example=None):
    """A pyfunc model (a PythonModel of this module) with that signature and input example."""
    import mlflow.pyfunc

    class Weighted(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input, params=None):
            frame = getattr(model_input, "to_numpy", None)
            values = frame() if frame else np.asarray(model_input, dtype=float)
            return list((values @ WEIGHTS + 4) * (params or {}).get("scale", 1))

    mlflow.pyfunc.save_model(folder, python_model=Weighted(), signature=signature,
                             input_example=example, pip_requirements=["mlflow"])
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import pandas as pd
    from mlflow.models import infer_signature

    root = tmp_path_factory.mktemp("models")
    frame = pd.DataFrame([[1.0, 2.0, 3.0]], columns=["a", "b", "c"])
    save(root / "columns", infer_signature(frame, np.array([18.0]), params={"scale": 1}))
    save(root / "tensor", infer_signature(frame.to_numpy(), np.array([18.0])))
    save(root / "unsigned")
    return root


@pytest.fixture
def post(models, monkeypatch):
    """post(model folder, body[, content type]) -> (status, JSON answer) from the server."""
    from azureml_inference_server_http.api import aml_request
    from azureml_inference_server_http.server import aml_blueprint, create_app
    from azureml_inference_server_http.server.config import config
    from inference_schema import schema_util

    # a server process imports one script: a @rawhttp script another test of this worker
    # imported (src/image_classifier/score.py) must not be taken for this one's decorator
    monkeypatch.setattr(aml_request, "_rawHttpRequested", False)
    monkeypatch.setattr(config, "entry_script", str(SCORER))
    monkeypatch.setattr(config, "app_root", str(SCORER.parent))
    # the server's print redirection would take this test process's output
    monkeypatch.setattr(aml_blueprint.AMLInferenceBlueprint, "_init_logger", lambda self: None)
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(models))
    clients = {}

    def call(folder, body, content_type="application/json"):
        if folder not in clients:
            monkeypatch.setenv("MLFLOW_MODEL_FOLDER", folder)
            # inference-schema keeps each decorated function's schemas for its process, and a
            # server imports its script once: a second model's here replaces the first's
            for registry in (schema_util.__functions_schema__, schema_util.__versions__):
                registry.pop("entry_module.run", None)
            clients[folder] = create_app.create().test_client()
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        answer = clients[folder].post("/score", data=data, content_type=content_type)
        return answer.status_code, answer.get_json()

    yield call
    for registry in (schema_util.__functions_schema__, schema_util.__versions__):
        registry.pop("entry_module.run", None)  # no schema left for a later test's script


def test_valid_input_of_each_signature_is_predicted(post):
    assert post("columns", {"input_data": SPLIT}) == (200, [18.0])
    unindexed = {key: value for key, value in SPLIT.items() if key != "index"}
    assert post("columns", {"input_data": unindexed}) == (200, [18.0])
    assert post("columns", {"input_data": SPLIT, "params": {"scale": 10}}) == (200, [180.0])
    assert post("tensor", {"input_data": [[1, 2, 3], [0, 0, 0]]}) == (200, [18.0, 4.0])
    assert post("unsigned", {"input_data": [[1, 2, 3]]}) == (200, [18.0])
    assert post("unsigned", {"input_data": SPLIT}) == (200, [18.0])


@pytest.mark.parametrize(("body", "content_type", "status", "message"), [
    ({"input_data": SPLIT}, "text/plain", 415, "Expects Content-Type to be application/json"),
    (b"not json", "application/json", 400,
     "POST body could not be decoded as JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"", "application/json", 400, "POST body is empty. Expecting a JSON dictionary."),
    ([SPLIT], "application/json", 400, "POST body should be a JSON dictionary."),
    (SPLIT, "application/json", 400, "A value is not provided for the 'input_data' parameter."),
    ({"dataframe_split": SPLIT}, "application/json", 400,
     "A value is not provided for the 'input_data' parameter.")],
    ids=["content-type", "not-json", "empty", "not-an-object", "no-input_data", "mlflow-format"])
def test_the_server_refuses_what_it_cannot_parse_in_its_own_words(post, body, content_type,
                                                                   status, message):
    assert post("columns", body, content_type) == (status, {"message": message})


@pytest.mark.parametrize(("folder", "body"), [
    ("columns", {"input_data": [{"a": 1, "b": 2, "c": 3}]}),  # records: the type reads split
    ("columns", {"input_data": {"columns": ["a", "b"], "data": [[1, 2]]}}),  # a missing column
    ("columns", {"input_data": {"columns": ["a", "b", "c"], "data": [["x", 2, 3]]}}),
    ("columns", {"input_data": SPLIT, "params": 5}),  # params are a dict
    ("columns", {"input_data": SPLIT, "params": {"scale": "x"}}),  # MLflow checks their types
    ("tensor", {"input_data": [[1, 2]]}),  # the signature's shape
    ("tensor", {"input_data": SPLIT}),  # an array is a list
    ("unsigned", {"input_data": {"columns": ["a", "b", "c"], "data": [[1, 2, 3]]}}),
    ("unsigned", {"input_data": 5})],
    ids=["records", "column-missing", "column-type", "params-not-dict", "params-type",
         "tensor-shape", "tensor-frame", "unsigned-split-without-index", "unsigned-number"])
def test_input_the_model_cannot_take_is_an_exception_the_server_answers_500(post, folder, body):
    assert post(folder, body) == (500, {"message": FAILED})


# ---- the types `run` is given, from the model alone (no server) ----

def types_of(folder):
    return scorer.parameter_types(*scorer.samples(str(folder)))


def test_columns_are_a_split_frame_tensors_arrays_and_params_a_dict(models):
    inputs, output, params = types_of(models / "columns")
    assert (type(inputs).__name__, inputs.orient) == ("PandasParameterType", "split")
    assert list(inputs.sample_input.columns) == ["a", "b", "c"]
    assert type(output).__name__ == "NumpyParameterType"
    assert (type(params).__name__, params.sample_input) == ("StandardPythonParameterType",
                                                            {"scale": 1})
    inputs, _, params = types_of(models / "tensor")
    assert type(inputs).__name__ == "NumpyParameterType" and inputs.sample_input.shape == (1, 3)
    assert type(params).__name__ == "AsSent"


def test_a_model_without_signature_takes_input_data_as_sent(models):
    assert [type(kind).__name__ for kind in types_of(models / "unsigned")] == ["AsSent"] * 3


def test_the_input_example_is_the_sample_before_the_signature(tmp_path):
    import pandas as pd
    from mlflow.models import infer_signature

    example = pd.DataFrame([[1, 2, 3]], columns=["a", "b", "c"], dtype="int32")
    save(tmp_path / "m", infer_signature(example.astype(float)), example=example)
    inputs, _, _ = types_of(tmp_path / "m")
    assert type(inputs).__name__ == "PandasParameterType"
    # the example's row and integers (as read back from its JSON), not the signature's empty
    # frame of doubles
    assert len(inputs.sample_input) == 1 and str(inputs.sample_input.dtypes["a"]) == "int64"


def test_named_tensors_are_a_dict_of_arrays_and_only_a_leading_batch_is_sized(tmp_path):
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    named = Schema([TensorSpec(np.dtype("float64"), (-1, 3), "x"),
                    TensorSpec(np.dtype("int64"), (-1,), "n")])
    inputs = scorer.array_type(scorer.schema_sample(named), "split")
    assert {name: kind.sample_input.shape for name, kind in inputs.sample_input.items()} == {
        "x": (1, 3), "n": (1,)}
    assert scorer.batch_of_one([-1, -1]) == (1, -1)
    ragged = Schema([TensorSpec(np.dtype("float64"), (-1, -1))])
    with pytest.raises(ValueError, match="negative dimensions"):  # Azure's script fails alike
        scorer.samples(str(save(tmp_path / "r", ModelSignature(ragged))))


@pytest.mark.parametrize(("data", "kind"), [
    ([[1, 2, 3]], "ndarray"), ('{"input_data": [[1, 2, 3]]}', "ndarray"),
    (SPLIT, "DataFrame"), ({"x": [1, 2]}, "dict")])
def test_input_no_type_converted_is_read_as_azures_script_reads_it(data, kind):
    assert type(scorer.as_model_input(data)).__name__ == kind


def test_before_inference_schema_1_7_params_and_before_1_3_frames_pass_as_sent(models,
                                                                               monkeypatch):
    """inference-schema 1.1-1.5 (servers 0.1-0.7) have no optional inputs, and before 1.3 no
    frame orient: `run` then takes params unchecked, and a frame as Azure reads unsampled input."""
    import mlflow.pyfunc
    from inference_schema import schema_decorators, schema_util
    from inference_schema.parameter_types import pandas_parameter_type

    original = schema_decorators.input_schema

    def input_schema(param_name, param_type, convert_to_provided_type=True):
        return original(param_name, param_type, convert_to_provided_type)

    class Before13(pandas_parameter_type.PandasParameterType):
        def __init__(self, sample_input, enforce_column_type=True, enforce_shape=True):
            super().__init__(sample_input, enforce_column_type, enforce_shape)

    monkeypatch.setattr(schema_decorators, "input_schema", input_schema)
    monkeypatch.setattr(pandas_parameter_type, "PandasParameterType", Before13)
    for registry in ("__functions_schema__", "__versions__"):  # this test's run only
        fresh = {}
        monkeypatch.setattr(schema_decorators, registry, fresh)
        monkeypatch.setattr(schema_util, registry, fresh)
    types = types_of(models / "columns")
    assert type(types[0]).__name__ == "AsSent"
    monkeypatch.setattr(scorer, "model", mlflow.pyfunc.load_model(str(models / "columns")))
    run = scorer.decorated(scorer.run, types)
    # as sent: JSON's 1.0 stays a double (1 would be an integer, which the signature refuses)
    floats = dict(SPLIT, data=[[1.0, 2.0, 3.0]])
    assert run(input_data=floats, params={"scale": 10}) == [180.0]
    schema = schema_util.get_input_schema(run)["properties"]
    assert schema["input_data"] == {"type": "object"} and schema["params"] == {}
