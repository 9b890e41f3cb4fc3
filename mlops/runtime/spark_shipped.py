"""The Python packages Azure's Spark runtimes ship, for the modules a Spark job's code imports.

Azure's serverless Spark runs a job on a Synapse runtime whose default Python environment
already holds hundreds of packages (MLflow, azureml-mlflow, scikit-learn, XGBoost, ...): a job
with no `environment:` imports them and runs. The lists are the runtimes' own
(microsoft/synapse-spark-runtime: Synapse-Python310-CPU.yml for 3.4, Synapse-Python311-CPU.yml
for 3.5, the 3.3 release notes' "Python Modules" table). Installing all of one here (TensorFlow,
PyTorch, CUDA libraries: gigabytes) for every job is not done: the job's own `.py` files under
`code:` are read (parsed, never run) and the shipped packages they import join its environment,
at the runtime's versions, where the environment does not name them itself. A module only a
library imports, or one named in a string (importlib), is not seen: give it in the environment.
"""

from __future__ import annotations

import ast
from pathlib import Path

MAX_FILES = 400  # a code folder's .py files read, at most
MAX_BYTES = 1 << 20  # a larger .py file is not read

# import name (dotted where the top name is a namespace) -> the requirement, per runtime line
SHIPPED: dict[str, dict[str, str]] = {
    "3.3": {
        "mlflow": "mlflow-skinny==1.30.0", "azureml.mlflow": "azureml-mlflow==1.47.0",
        "azureml.core": "azureml-core==1.47.0", "sklearn": "scikit-learn==1.1.3",
        "xgboost": "xgboost==1.7.1", "lightgbm": "lightgbm==3.2.1",
        "matplotlib": "matplotlib==3.6.2", "seaborn": "seaborn==0.11.1",
        "statsmodels": "statsmodels==0.13.5", "joblib": "joblib==1.2.0",
        "yaml": "pyyaml==6.0", "requests": "requests==2.28.1", "tqdm": "tqdm==4.64.1",
        "plotly": "plotly==4.14.3", "shap": "shap==0.39.0", "PIL": "pillow==9.2.0",
        "openpyxl": "openpyxl==3.0.7", "sqlalchemy": "sqlalchemy==1.4.43",
        "nltk": "nltk==3.6.2", "networkx": "networkx==2.8.8", "onnx": "onnx==1.12.0",
        "onnxruntime": "onnxruntime==1.13.1", "torch": "torch==1.13.0",
        "torchvision": "torchvision==0.14.0", "tensorflow": "tensorflow==2.8.0",
        "skimage": "scikit-image==0.19.3", "pmdarima": "pmdarima==2.0.1",
        "gensim": "gensim==4.2.0", "h5py": "h5py==3.7.0", "numba": "numba==0.56.3",
        "dill": "dill==0.3.6", "cloudpickle": "cloudpickle==2.2.0",
        "bs4": "beautifulsoup4==4.9.3", "lxml": "lxml==4.8.0", "fsspec": "fsspec==2022.10.0",
        "adlfs": "adlfs==0.7.7", "azure.storage.blob": "azure-storage-blob==12.13.0",
        "azure.identity": "azure-identity==1.7.0",
    },
    "3.4": {
        "mlflow": "mlflow-skinny==2.9.2", "azureml.mlflow": "azureml-mlflow==1.55.0",
        "azureml.core": "azureml-core==1.55.0", "azure.ai.ml": "azure-ai-ml==1.12.1",
        "mltable": "mltable==1.6.1", "sklearn": "scikit-learn==1.3.2",
        "xgboost": "xgboost==2.0.3", "lightgbm": "lightgbm==4.2.0",
        "matplotlib": "matplotlib==3.8.2", "seaborn": "seaborn==0.13.1",
        "statsmodels": "statsmodels==0.14.1", "joblib": "joblib==1.3.2",
        "yaml": "pyyaml==6.0.1", "requests": "requests==2.31.0", "tqdm": "tqdm==4.66.2",
        "plotly": "plotly==5.18.0", "shap": "shap==0.44.0", "PIL": "pillow==10.2.0",
        "openpyxl": "openpyxl==3.1.2", "sqlalchemy": "sqlalchemy==2.0.28",
        "networkx": "networkx==3.2.1", "onnx": "onnx==1.15.0", "torch": "torch==2.0.1",
        "tensorflow": "tensorflow==2.15.0", "keras": "keras==2.15.0", "h5py": "h5py==3.10.0",
        "numba": "numba==0.59.0", "dill": "dill==0.3.8", "cloudpickle": "cloudpickle==2.2.1",
        "bs4": "beautifulsoup4==4.12.2", "lxml": "lxml==5.1.0", "fsspec": "fsspec==2024.2.0",
        "adlfs": "adlfs==2023.10.0", "azure.storage.blob": "azure-storage-blob==12.19.0",
        "azure.identity": "azure-identity==1.15.0",
    },
    "3.5": {
        "mlflow": "mlflow-skinny==2.18.0", "azureml.mlflow": "azureml-mlflow==1.60.0",
        "azureml.core": "azureml-core==1.60.0", "azure.ai.ml": "azure-ai-ml==1.28.1",
        "mltable": "mltable==1.6.1", "sklearn": "scikit-learn==1.6.1",
        "xgboost": "xgboost==3.0.1", "lightgbm": "lightgbm==4.6.0",
        "matplotlib": "matplotlib==3.10.0", "seaborn": "seaborn==0.13.2",
        "statsmodels": "statsmodels==0.14.4", "joblib": "joblib==1.4.2",
        "yaml": "pyyaml==6.0.2", "requests": "requests==2.32.3", "tqdm": "tqdm==4.67.1",
        "plotly": "plotly==6.0.1", "shap": "shap==0.47.2", "PIL": "pillow==11.1.0",
        "openpyxl": "openpyxl==3.1.5", "sqlalchemy": "sqlalchemy==2.0.37",
        "nltk": "nltk==3.9.1", "networkx": "networkx==3.4.2", "onnx": "onnx==1.18.0",
        "torch": "torch==2.5.1", "transformers": "transformers==4.49.0",
        "datasets": "datasets==3.3.2", "skimage": "scikit-image==0.25.0",
        "numba": "numba==0.61.0", "dask": "dask==2024.12.1", "dill": "dill==0.3.8",
        "cloudpickle": "cloudpickle==2.2.1", "bs4": "beautifulsoup4==4.12.3",
        "lxml": "lxml==5.3.0", "fsspec": "fsspec==2024.12.0", "adlfs": "adlfs==2024.12.0",
        "azure.storage.blob": "azure-storage-blob==12.19.0",
    },
}


def _imports(source: str) -> set[str]:
    """Every absolute module a file imports, dotted ("azureml.core.run" and its parents)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in found:
            parts = name.split(".")
            names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def imported_modules(folder: Path) -> set[str]:
    """The modules the .py files under `folder` import (bounded: MAX_FILES, MAX_BYTES)."""
    names: set[str] = set()
    files = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder]
    for path in files[:MAX_FILES]:
        try:
            if path.is_file() and path.stat().st_size <= MAX_BYTES:
                names |= _imports(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return names


# the runtime's setuptools: pkg_resources, which the shipped packages of their day import
# (mlflow-skinny 1.30's autologging does at `import mlflow`); uv's environments have none
SETUPTOOLS = {"3.3": "setuptools==70.2.0", "3.4": "setuptools==69.2.0",
              "3.5": "setuptools==75.8.0"}


def shipped_for(version: str, folder: Path | None) -> tuple[str, ...]:
    """The runtime's requirements for what the code under `folder` imports, sorted, with the
    runtime's setuptools beside any of them (or where the code imports it itself)."""
    table = SHIPPED.get(version, {})
    if folder is None or not table:
        return ()
    imported = imported_modules(folder)
    found = {line for module, line in table.items() if module in imported}
    if found or imported & {"setuptools", "pkg_resources"}:
        found.add(SETUPTOOLS[version])
    return tuple(sorted(found))
