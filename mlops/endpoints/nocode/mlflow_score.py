"""The scoring script of an online MLflow deployment without code (Azure's "no-code" deployment).

Azure serves such a model with a script of its own, mlflow_score_script.py in its MLflow
inference images (Azure/azureml-assets, commit 4b41f8ccbc:
assets/inference/environments/mlflow-py312-inference/context/mlflow_score_script.py). This is
the runtime's own implementation of that script's rules, each cited below by the script's names:
  * `run(input_data, params=None)` is decorated with inference-schema's input_schema("input_data",
    ...), input_schema("params", ..., optional=True) and output_schema(...), so the inference
    server parses the body itself, in its own words under `message`: 0.7 and later (ObjectInput)
    answer 415 for a content type other than JSON, 400 for a body that is not JSON, not an
    object or without `input_data`, and ignore other keys; 0.1-0.6 answer 415 alike and pass
    the body's keys as run()'s arguments, so a missing or extra key is a 500 there;
  * the parameter types come from a sample of the model's input (get_parameter_type): the
    model's saved input example if it has one, else one built from its signature (a frame for
    columns, read in split orientation; an array, or a dict of arrays, for tensors); a model
    with neither takes `input_data` as sent (NoSampleParameterType);
  * `params` are checked against the signature's params (a dict) and passed to predict() where
    the MLflow release takes them;
  * input the types do not convert, or the model refuses (its signature), is an exception: the
    server answers 500 and the endpoint 424 (mlops/endpoints/front_wire.py);
  * predictions are MLflow's JSON (a frame in records orientation).
Not followed here: the LLM flavors' rules (transformers, langchain, openai, hftransformersv2)
and Azure's data collectors. This file runs inside the deployment's environment, on every
Python (3.6 and up), MLflow (1.x to 3.x) and azureml-inference-server-http line (0.1.5 to 1.x)
Azure's images hold. Every server release requires inference-schema (0.1.5: ==1.1.0; 0.4:
==1.3.0; 0.7: ~=1.5; 0.8: ~=1.7; 1.x: ~=1.8), as Azure's script does; where it is missing
anyway the import fails and the deployment does not start, as Azure's would. Releases before
inference-schema 1.7 have no optional inputs: `params` then reach run() unchecked; before 1.3
no split orientation: `input_data` then passes as sent and run() reads it as Azure's script
reads an unsampled input.
"""

import inspect
import io
import json
import logging
import os

log = logging.getLogger("mlflow_score")
model = None  # the pyfunc model, loaded by init()


def model_path():
    return os.path.join(os.environ["AZUREML_MODEL_DIR"], os.environ.get("MLFLOW_MODEL_FOLDER", ""))


def batch_of_one(shape):
    """A tensor spec's shape with a leading -1 (any batch size) made 1, as Azure's samples make
    it (create_tensor_spec_sample_io); any other -1 stays, and numpy refuses it there."""
    shape = list(shape or ())
    if shape and shape[0] == -1:
        shape[0] = 1
    return tuple(shape)


def tensor_sample(schema):
    """Zeros of each tensor's shape and type: one array, or a dict of them for named tensors."""
    import numpy as np

    specs = schema.inputs
    if not schema.has_input_names():
        return np.zeros(batch_of_one(specs[0].shape), dtype=specs[0].type)
    return {spec.name: np.zeros(batch_of_one(spec.shape), dtype=spec.type) for spec in specs}


def column_sample(schema):
    """An empty frame with the signature's columns and their pandas types
    (create_col_spec_sample_io; MLflow before 1.24 names them column_names)."""
    import pandas as pd

    names = schema.input_names() if hasattr(schema, "input_names") else schema.column_names()
    types = dict(zip(names, schema.pandas_types()))  # noqa: B905 (no strict= before 3.10)
    return pd.DataFrame(columns=names).astype(dtype=types)


SCALARS = {"boolean": True, "string": "sample string", "integer": 42, "long": 42,
           "float": 0.15, "double": 0.15}


def other_sample(schema):
    """The sample of columns pandas cannot type (create_other_sample_io): named ones give a dict
    of scalars (which no array type takes, so such a deployment fails to start, as on Azure),
    unnamed ones a list."""
    specs = schema.inputs
    if getattr(specs[0], "name", None) is not None:
        return {spec.name: SCALARS.get(_type_name(spec.type)) for spec in specs}
    return ["sample string"] if _type_name(getattr(specs[0], "type", None)) == "string" else []


def _type_name(dtype):
    return getattr(dtype, "name", str(dtype))


def schema_sample(schema):
    if schema.is_tensor_spec():
        return tensor_sample(schema)
    try:
        return column_sample(schema)
    except Exception as err:  # Azure's script falls back on any failure here
        log.warning("the signature's columns make no frame (%s): the other sample", err)
        return other_sample(schema)


def example_sample(metadata, path):
    """The model's saved input example as a sample (get_sample_input_from_loaded_example): a
    frame (split if it has columns, else values), arrays for an ndarray example, else the
    object itself; None when there is none or it does not load (Azure logs a warning)."""
    info = getattr(metadata, "saved_input_example_info", None)
    if not info:
        return None
    try:
        with open(os.path.join(path, info["artifact_path"])) as handle:
            loaded = json.load(handle)
        if info["type"] == "dataframe":
            import pandas as pd

            orient = "split" if "columns" in loaded else "values"
            return pd.read_json(io.StringIO(json.dumps(loaded)), orient=orient, dtype=False)
        if info["type"] == "ndarray":
            import numpy as np

            inputs = loaded["inputs"]
            if isinstance(inputs, dict):
                return {name: np.asarray(value) for name, value in inputs.items()}
            return np.asarray(inputs)
        return loaded
    except Exception as err:
        log.warning("the model's input example does not load (%s); using its signature", err)
        return None


def params_sample(signature):
    """A dict of the signature's params (create_param_sample): each one's default, else a value
    of its type; None for a signature without params (MLflow before 2.6 has none)."""
    schema = getattr(signature, "params", None)
    if schema is None or not hasattr(schema, "params"):
        return None
    sample = {}
    for param in schema.params:
        value = param.default if param.default is not None else SCALARS.get(
            _type_name(param.dtype))
        if value is not None:
            sample[param.name] = value
    return sample


def samples(path):
    """The input, output and params samples Azure's script types `run` with: the input example
    first, else the signature (get_samples_from_signature); None where there is neither."""
    from mlflow.models import Model

    metadata = Model.load(path)
    signature = metadata.signature
    sample = example_sample(metadata, path)
    if signature is None:
        log.warning("the model has no signature: its input example, if any, types input_data")
        return sample, None, None
    if sample is None and signature.inputs:
        sample = schema_sample(signature.inputs)
    schema, outputs = signature.outputs, None
    if schema:
        outputs = tensor_sample(schema) if schema.is_tensor_spec() else column_sample(schema)
    return sample, outputs, params_sample(signature)


def passthrough():
    """A parameter type that takes the value as sent (Azure's NoSampleParameterType)."""
    from inference_schema.parameter_types.abstract_parameter_type import AbstractParameterType

    class AsSent(AbstractParameterType):
        def __init__(self):
            super().__init__(None)

        def deserialize_input(self, input_data):
            return input_data

        def input_to_swagger(self):
            return {"type": "object", "example": {}}

    return AsSent()


def array_type(sample, orient):
    """The inference-schema type of an array, a frame (in `orient`) or a dict of arrays; None
    for anything else. A frame passes as sent where inference-schema has no orient (< 1.3)."""
    import numpy as np
    from inference_schema.parameter_types.numpy_parameter_type import NumpyParameterType
    from inference_schema.parameter_types.standard_py_parameter_type import (
        StandardPythonParameterType,
    )

    if isinstance(sample, np.ndarray):
        return NumpyParameterType(sample, enforce_shape=False)
    if isinstance(sample, dict):
        return StandardPythonParameterType(
            {name: NumpyParameterType(value, enforce_shape=False) for name, value in
             sample.items()})
    if type(sample).__name__ == "DataFrame":
        from inference_schema.parameter_types.pandas_parameter_type import PandasParameterType

        if "orient" not in inspect.signature(PandasParameterType.__init__).parameters:
            return passthrough()
        return PandasParameterType(sample, enforce_shape=False, orient=orient)
    return None


def parameter_types(sample, outputs, params):
    """Azure's get_parameter_type: input_data's type (split frames), the output's (records
    frames) and params' (a dict); a type that takes the value as sent where there is no sample
    or the sample is none of those."""
    from inference_schema.parameter_types.standard_py_parameter_type import (
        StandardPythonParameterType,
    )

    inputs = None if sample is None else array_type(sample, "split")
    output = None if outputs is None else array_type(outputs, "records")
    params_type = None if params is None else StandardPythonParameterType(params)
    return inputs or passthrough(), output or passthrough(), params_type or passthrough()


def decorated(function, types):
    """`function` as Azure's `run` is decorated (input_data, then params, then the output);
    params left as sent where input_schema has no optional inputs (inference-schema < 1.7)."""
    from inference_schema.schema_decorators import input_schema, output_schema

    inputs, output, params = types
    wrapped = output_schema(output)(function)
    if "optional" in inspect.signature(input_schema).parameters:
        wrapped = input_schema("params", params, optional=True)(wrapped)
    return input_schema("input_data", inputs)(wrapped)


def as_model_input(data):
    """Input no type converted, as Azure reads it (parse_model_input_from_input_data_traditional):
    a JSON string is parsed and an inner `input_data` taken; a list becomes an array, a dict with
    columns, index and data a frame (split), any other dict a dict of arrays. Anything else
    raises, as there."""
    import numpy as np

    if isinstance(data, str):
        data = json.loads(data)
    if "input_data" in data:
        data = data["input_data"]
    if isinstance(data, list):
        return np.asarray(data)
    if isinstance(data, dict) and "columns" in data and "index" in data and "data" in data:
        import pandas as pd

        return pd.read_json(io.StringIO(json.dumps(data)), orient="split", dtype=False)
    return {name: np.asarray(value) for name, value in data.items()}


def converted(data):
    """Whether inference-schema made `data` an array, a frame or a dict of arrays (run's test)."""
    import numpy as np

    if isinstance(data, np.ndarray) or type(data).__name__ == "DataFrame":
        return True
    return isinstance(data, dict) and bool(data) and isinstance(list(data.values())[0],
                                                                 np.ndarray)


def jsonable(result):
    try:
        from mlflow.pyfunc.scoring_server import _get_jsonable_obj
    except ImportError:
        from mlflow.utils.proto_json_utils import _get_jsonable_obj
    return _get_jsonable_obj(result, pandas_orient="records")


def init():
    global model
    import mlflow.pyfunc

    model = mlflow.pyfunc.load_model(model_path())
    log.info("loaded MLflow model %s", model_path())


def run(input_data, params=None):
    """The model's predictions for input_data (with params where its predict() takes them);
    whatever it raises reaches the server, which answers 500."""
    data = input_data if converted(input_data) else as_model_input(input_data)
    if "params" in inspect.signature(model.predict).parameters:
        return jsonable(model.predict(data, params=params))
    return jsonable(model.predict(data))


if os.environ.get("AZUREML_MODEL_DIR"):  # the inference server imports it to serve the model
    run = decorated(run, parameter_types(*samples(model_path())))
