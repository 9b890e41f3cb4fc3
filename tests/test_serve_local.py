"""The local endpoint: a taken port is an error, and the default model is one that exists."""

from __future__ import annotations

import os
import socket
import time

import pytest

from mlops import serve
from mlops.serve import ServeError, latest_model


def test_a_port_another_process_holds_is_an_error_not_a_healthy_server(capsys):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(ServeError, match=f"port {port} on 127.0.0.1 is already in use"):
            serve.start(serve.ROOT / "endpoints" / "blue.yml", None, port)


def test_the_default_model_is_the_newest_folder_that_holds_one(tmp_path):
    older = tmp_path / "train-1" / "outputs" / "model"
    older.mkdir(parents=True)
    (older / "model.pt").write_bytes(b"x")
    time.sleep(0.01)
    empty = tmp_path / "train-2" / "outputs" / "model"  # a failed run's empty model folder
    empty.mkdir(parents=True)
    os.utime(empty)
    assert latest_model(tmp_path) == older
    with pytest.raises(ServeError, match="no trained model"):
        latest_model(tmp_path / "nothing-here")
