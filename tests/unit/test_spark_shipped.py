"""A Spark job with no environment imports what Azure's Spark runtime ships (MLflow,
scikit-learn, azureml-core, ...): the packages its code imports join its environment at the
runtime's versions (mlops/runtime/spark_shipped.py). Files are parsed, never run."""

from __future__ import annotations

from pathlib import Path

from mlops.environments.activation import image_adds
from mlops.runtime.spark import LINES, spark_task
from mlops.runtime.spark_shipped import SETUPTOOLS, SHIPPED, imported_modules, shipped_for
from mlops.runtime.tasks import TaskSource
from mlops.runtime.uris import AssetMap


def code(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "src"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_the_modules_a_code_folder_imports_are_read_without_running_it(tmp_path):
    folder = code(tmp_path, **{
        "main.py": "import mlflow, os\nfrom sklearn.ensemble import RandomForestClassifier\n"
                   "from . import helpers\nraise SystemExit('never run')\n",
        "pkg/helpers.py": "def f():\n    from azureml.core import Run\n",
        "broken.py": "def (:\n", "notes.txt": "import xgboost\n"})
    found = imported_modules(folder)
    assert {"mlflow", "os", "sklearn", "sklearn.ensemble", "azureml", "azureml.core",
            "azureml.core.Run"} <= found
    assert "xgboost" not in found and "helpers" not in found


def test_only_what_the_code_imports_comes_at_the_runtimes_versions(tmp_path):
    folder = code(tmp_path, **{"job.py": "import mlflow\nimport sklearn\nimport azureml.core\n"})
    assert shipped_for("3.4", folder) == (
        "azureml-core==1.55.0", "mlflow-skinny==2.9.2", "scikit-learn==1.3.2",
        "setuptools==69.2.0")
    assert shipped_for("3.3", folder) == (
        "azureml-core==1.47.0", "mlflow-skinny==1.30.0", "scikit-learn==1.1.3",
        "setuptools==70.2.0")
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "pkg.py").write_text("import pkg_resources\n")
    assert shipped_for("3.5", tmp_path / "own") == ("setuptools==75.8.0",)
    assert shipped_for("3.4", code(tmp_path, **{"other.py": "import json\n"}).parent / "x") == ()
    assert shipped_for("3.4", None) == ()


def test_every_spark_line_has_its_shipped_table():
    assert set(SHIPPED) == set(LINES) == set(SETUPTOOLS)
    for table in SHIPPED.values():
        assert all("==" in line for line in table.values())


def test_a_spark_job_without_an_environment_gets_what_its_code_imports(tmp_path):
    code(tmp_path, **{"prod.py": "import mlflow\nfrom pyspark.sql import SparkSession\n"})
    data = {"type": "spark", "code": "src", "entry": {"file": "prod.py"},
            "resources": {"runtime_version": "3.3"}}
    built = spark_task(TaskSource(definition=data, base=tmp_path, folder=tmp_path / "run",
                                  assets=AssetMap(None), where="job.yml: spark", name="taxis",
                                  experiment="e"))
    adds = built.task.environment.adds
    assert "mlflow-skinny==1.30.0" in adds and "pandas==1.5.1" in adds
    assert any("mlflow-skinny==1.30.0" in note for note in built.notes)


def test_an_environment_naming_a_package_or_its_family_keeps_its_own():
    adds = ("mlflow-skinny==2.9.2", "scikit-learn==1.3.2", "pandas==1.5.3")
    assert image_adds(["mlflow==2.12.1", "scikit-learn"], adds) == ("pandas==1.5.3",)
    assert image_adds([], adds) == adds
