"""SDK v1 calls that need a live workspace, inside a local job (mlops/runtime/azureml_run.py):
one line naming the call and the asset map entry that stands in; Model.get_model_path answered
from that entry. tests/e2e/test_local_runtime.py runs them through azureml-core itself."""

from __future__ import annotations

import json
import types

import pytest

from mlops.runtime import azureml_run

AZUREML_CORE = """
import functools

def track(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper

class Dataset:
    @staticmethod
    @track
    def get_by_name(workspace, name, version="latest"):
        return workspace._auth

class Model:
    @staticmethod
    def get_model_path(model_name, version=None, _workspace=None):
        return _workspace._service_context
"""


@pytest.fixture
def core(monkeypatch):
    """A module of azureml's (its name is what marks its frames), decorated as azureml-core's
    telemetry decorates its public calls."""
    namespace = {"__name__": "azureml.core.dataset"}
    exec(compile(AZUREML_CORE, "dataset.py", "exec"), namespace)  # noqa: S102 - a test module
    monkeypatch.setenv(azureml_run.ASSET_FILE, "assets/local-paths.yml")
    monkeypatch.setenv(azureml_run.STAND_INS, json.dumps({"azureml:titanic": "/data/titanic",
                                                          "azureml:fowl:2": "/models/fowl"}))
    monkeypatch.delenv("AZUREML_MODEL_DIR", raising=False)
    return types.SimpleNamespace(**namespace)


def test_a_workspace_call_is_refused_by_name_with_the_entry_that_stands_in(core):
    with pytest.raises(AttributeError) as caught:
        core.Dataset.get_by_name(azureml_run.LocalWorkspace(), "titanic")
    message = str(caught.value)
    assert message.startswith("Dataset.get_by_name (at test_sdk_v1.py:")
    assert "needs a live Azure ML workspace (workspace._auth)" in message
    assert "assets/local-paths.yml maps azureml:titanic to /data/titanic" in message
    with pytest.raises(AttributeError, match="an entry `azureml:census: <local path>` in"):
        core.Dataset.get_by_name(azureml_run.LocalWorkspace(), "census")
    assert not hasattr(azureml_run.LocalWorkspace(), "_auth")  # hasattr() stays false


def test_model_get_model_path_answers_from_the_asset_map(core, monkeypatch):
    azureml_run.patch_model(core)
    assert core.Model.get_model_path("fowl", 2) == "/models/fowl"
    with pytest.raises(AttributeError, match=r"Model.get_model_path .*azureml:other"):
        core.Model.get_model_path("other", _workspace=azureml_run.LocalWorkspace())
    monkeypatch.setenv("AZUREML_MODEL_DIR", "/var/azureml-app/azureml-models")  # read first
    with pytest.raises(AttributeError):
        core.Model.get_model_path("fowl", 2, _workspace=azureml_run.LocalWorkspace())
