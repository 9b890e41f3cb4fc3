"""The batch driver of an MLflow model deployed to a batch endpoint without code.

As Azure's generated driver: each file of a mini-batch is read by its type - .csv, .parquet and
.pqt as a table (for models with a column signature), images (.png .jpg .jpeg .tiff .bmp .gif)
as arrays (for tensor signatures) - and predicted with mlflow.pyfunc; a file of another type fails
its mini-batch ("File type '<ext>' is not supported"), which is retried and then counted against
error_threshold. Each prediction is one row `<row>,<prediction...>,<file name>`: Azure's
predictions.csv, read back with names=["row", "prediction", "file"]. A table (an mltable input)
arrives as DataFrames of its rows, predicted as they are; their rows have no file name.
"""

import os

import pandas as pd

TABLES = {".csv": pd.read_csv, ".parquet": pd.read_parquet, ".pqt": pd.read_parquet}
IMAGES = (".png", ".jpg", ".jpeg", ".tiff", ".bmp", ".gif")
model = None


def init():
    global model
    import mlflow.pyfunc

    path = os.path.join(os.environ["AZUREML_MODEL_DIR"], os.environ.get("MLFLOW_MODEL_FOLDER", ""))
    model = mlflow.pyfunc.load_model(path)
    print(f"loaded MLflow model {path}", flush=True)


def read(path: str):
    extension = os.path.splitext(path)[1].lower()
    if extension in TABLES:
        return TABLES[extension](path)
    if extension in IMAGES:
        import numpy as np
        from PIL import Image

        with Image.open(path) as image:
            return np.asarray(image)[None, ...]
    raise ValueError(f"Error processing input file: '{path}'. File type "
                     f"'{extension.lstrip('.')}' is not supported.")


def rows(predictions, name: str) -> pd.DataFrame:
    frame = predictions if isinstance(predictions, pd.DataFrame) else \
        pd.DataFrame(list(predictions) if not hasattr(predictions, "ndim") or
                     predictions.ndim > 0 else [predictions])
    frame = frame.reset_index(drop=True)
    frame.insert(0, "row", range(len(frame)))
    frame["file"] = name
    return frame


def run(mini_batch):
    """CSV lines (Azure's MLflow driver writes commas; a custom run()'s DataFrame, spaces). A
    table's mini-batch (an mltable input) is one DataFrame: its rows are predicted at once."""
    if isinstance(mini_batch, pd.DataFrame):
        return rows(model.predict(mini_batch), "").to_csv(header=False, index=False).splitlines()
    lines = []
    for path in mini_batch:
        frame = rows(model.predict(read(path)), os.path.basename(path))
        lines += frame.to_csv(header=False, index=False).splitlines()
    return lines
