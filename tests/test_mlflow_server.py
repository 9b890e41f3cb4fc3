"""The local tracking server: its URI is known before it has started, and a dead server means
jobs log to the store directly (mlops/runtime/mlflow_server.py)."""

import os
import signal
import time
import urllib.request

from mlops.runtime.mlflow_server import Server


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
