"""The local tracking server: its URI is known before it has started, and a dead server means
jobs log to the store directly (mlops/runtime/mlflow_server.py)."""

import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mlops.runtime.mlflow_server import SERVER_MODULE, Forked, Server


@pytest.mark.proof
def test_the_uri_is_there_at_once_and_a_first_request_waits_for_the_server(tmp_path, capsys):
    server = Server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts")
    try:
        started = time.monotonic()
        uri = server.uri()
        assert uri.startswith("http://127.0.0.1:") and time.monotonic() - started < 0.5
        with urllib.request.urlopen(f"{uri}/health", timeout=60) as answer:
            assert answer.read() == b"OK"  # queued in the socket's backlog until it accepted
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=10)
        assert server.uri() is None  # jobs fall back to the store itself
        assert "server is not running" in capsys.readouterr().err
    finally:
        server.close()


@pytest.mark.proof
def test_a_runner_with_the_server_code_loaded_forks_it(tmp_path, capsys):
    import mlflow.server.handlers  # noqa: F401 - what makes the runner fork

    from mlops.runtime.mlflow_server import Forked

    server = Server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts")
    try:
        uri = server.uri()
        assert isinstance(server.process, Forked)
        with urllib.request.urlopen(f"{uri}/health", timeout=60) as answer:
            assert answer.read() == b"OK"
        assert server.serving()
    finally:
        server.close()
    assert server.process.poll() == 0  # ended by the runner's EOF, as a started server is


def test_a_forked_server_opens_its_own_connection_to_a_store_the_runner_has_open(tmp_path):
    import mlflow.server.handlers  # noqa: F401 - what makes the runner fork
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = MlflowClient(store).create_experiment("opened-first")  # the runner's engine
    server = Server(store, tmp_path / "artifacts")
    try:
        served = MlflowClient(server.uri()).get_experiment(experiment)
        assert served.name == "opened-first"
        assert MlflowClient(store).get_experiment_by_name("opened-first")  # the runner: still open
    finally:
        server.close()


@pytest.mark.proof
def test_a_run_that_never_asks_for_the_uri_starts_no_server(tmp_path):
    """Building the handle binds and starts nothing; a run that never asks starts nothing."""
    server = Server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts")
    server.store_ready()
    server.close()
    assert server.process is None and server.listener is None and server.log is None


def test_a_server_whose_runner_died_removes_its_log(tmp_path):
    """A killed runner never removes the server's log; the server does, once its stdin ends."""
    import mlflow.server.handlers  # noqa: F401 - loaded: the second server is forked

    for forked in (False, True):
        server = Server(f"sqlite:///{tmp_path / f'{forked}.db'}", tmp_path / "artifacts")
        if not forked:
            server_module = sys.modules.pop(SERVER_MODULE, None)  # as a runner without it
        try:
            server.uri()
        finally:
            if not forked and server_module is not None:
                sys.modules[SERVER_MODULE] = server_module
        assert isinstance(server.process, Forked) == forked
        assert Path(server.log.name).is_file()
        server.process.stdin.close()  # what a runner's death does to the server
        server.process.wait(timeout=60)
        assert not Path(server.log.name).exists()
        server.close()
