"""The unit tests (make test-quick): no process, server or training. A test here that starts a
process fails at once and says where it belongs."""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import subprocess

import pytest


@pytest.fixture(scope="session", autouse=True)
def processes_started_once() -> None:
    """What starts a process the first time only, done before the guard below (a session
    fixture is set up before any test's own), so that the test that happens to come first is not
    taken for one that starts a process: the lookup of libdl that torch's first import makes
    (cuda.pathfinder, which CUDA builds of torch load, runs `ldconfig -p` once), and
    platform.processor(), which runs `uname -p` once and keeps the answer (MLflow asks it for
    every run it creates). The lookup alone, not torch (3 s of CPU): a worker that runs no test
    of torch's never imports it."""
    if importlib.util.find_spec("cuda") and importlib.util.find_spec("cuda.pathfinder"):
        importlib.import_module("cuda.pathfinder")
    platform.processor()


@pytest.fixture(autouse=True)
def no_processes(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started a process: move the test to tests/e2e/")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)


@pytest.fixture(autouse=True)
def own_workspace(tmp_path, monkeypatch):
    """A local workspace of the test's own (mlops/workspace), and no MLflow registry to take
    models in from: MLflow's client starts a process to learn the platform."""
    monkeypatch.setenv("MLOPS_WORKSPACE_DIR", str(tmp_path / "workspace"))
    monkeypatch.setattr("mlops.workspace.mlflow_models._client", lambda: None)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A user's repository: azml.toml at its root, the current folder, its own state folder."""
    from mlops.project import forget

    (tmp_path / "azml.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AZML_STATE_DIR", raising=False)
    monkeypatch.delenv("MLOPS_STATE_DIR", raising=False)
    forget()
    yield tmp_path
    forget()
