"""The local endpoint's rules that need no server: a taken port is an error, the default model
is one that exists, and a start that a signal or a failure stops leaves nothing of itself."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time

import pytest

from mlops.endpoints import endpoint_actions, local_endpoint, online
from mlops.endpoints.endpoint_state import AuthMode, EndpointState, Slot
from mlops.endpoints.models import newest_trained
from mlops.endpoints.traffic import NewTraffic
from mlops.errors import LocalRunError
from mlops.runtime import launch
from mlops.runtime.launch import Interrupted, interruptible, signals_held


def test_a_port_another_process_holds_is_an_error_not_a_healthy_server(tmp_path, monkeypatch):
    monkeypatch.setattr(local_endpoint, "ENDPOINTS", tmp_path)  # never the user's endpoints
    spec = local_endpoint.EndpointSpec("fowl-classifier", AuthMode.KEY)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(LocalRunError, match=f"port {port} on 127.0.0.1 is already in use "
                                                "by another process"):
            local_endpoint.open_state(tmp_path / "fowl-classifier", spec, port)


def test_the_default_model_is_the_newest_folder_that_holds_one(tmp_path):
    older = tmp_path / "train-1" / "outputs" / "model"
    older.mkdir(parents=True)
    (older / "model.pt").write_bytes(b"x")
    os.utime(older / "model.pt", (1_000, 1_000))
    empty = tmp_path / "train-2" / "outputs" / "model"  # a failed run's empty model folder
    empty.mkdir(parents=True)
    os.utime(empty, (2_000, 2_000))
    assert newest_trained("test", tmp_path).path == older
    with pytest.raises(LocalRunError, match="no trained model"):
        newest_trained("test", tmp_path / "nothing-here")


def test_a_deployments_copy_of_a_model_is_not_taken_for_a_trained_one(tmp_path):
    """A local deployment lays out any model it serves under runs/ (an MLflow or third-party
    one too), and a pipeline step's inputs link to an earlier step's model: the newest trained
    model is still the one training wrote."""
    trained = tmp_path / "train-1" / "outputs" / "model"
    trained.mkdir(parents=True)
    (trained / "model.pt").write_bytes(b"x")
    os.utime(trained / "model.pt", (1_000, 1_000))
    copy = tmp_path / "batch-other-1" / "azureml-models" / "mnist" / "1" / "model"
    copy.mkdir(parents=True)
    (copy / "model.pt").write_bytes(b"not ours")  # newer: a layout is written at serve time
    step_input = tmp_path / "pipeline-1" / "steps" / "register" / "inputs" / "model"
    step_input.mkdir(parents=True)
    (step_input / "model.pt").write_bytes(b"a step's input: another run's model")
    assert newest_trained("test", tmp_path).path == trained
    shutil.rmtree(tmp_path / "train-1")
    with pytest.raises(LocalRunError, match="run `make train-local` first"):
        newest_trained("test", tmp_path)


def test_a_stopped_servers_time_wait_sockets_do_not_hold_the_port():
    """`make stop-local && make serve-local` right after traffic: nothing listens, only the old
    server's side of its closed connections waits in TIME_WAIT. gunicorn binds over them
    (SO_REUSEADDR), so the port check must too."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server closes first: its end enters TIME_WAIT on `port`
    assert client.recv(1) == b""
    client.close()
    listener.close()
    with socket.socket() as plain, pytest.raises(OSError):  # the state the old check tripped on
        plain.bind(("127.0.0.1", port))
    assert not online.port_taken(port)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_start_unwinds_it_but_waits_out_a_held_section(sig):
    """serve-local's start runs interruptible(): each of the three signals raises where the
    start is (as Ctrl-C does), except inside signals_held(), which finishes first."""
    done = []
    with pytest.raises(Interrupted) as raised, interruptible():
        with signals_held():
            os.kill(os.getpid(), sig)
            done.append("recorded")  # the section goes on after the signal
        done.append("never")
    assert raised.value.signum == sig and done == ["recorded"]
    with pytest.raises(Interrupted), interruptible():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # unreachable: the signal ends the wait
    assert signal.getsignal(signal.SIGTERM) is not launch._interrupt  # put back as it was


def test_a_start_that_fails_after_its_server_started_stops_it_and_puts_the_state_back(
        tmp_path, monkeypatch):
    state = EndpointState(name="e", port=5001)
    state.ensure_credentials()
    state.write(tmp_path)
    retired = []
    monkeypatch.setattr(endpoint_actions, "retire", retired.append)

    def no_front(*args):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(endpoint_actions, "ensure_front", no_front)
    slot = Slot(name="blue", port=1, pid=1, folder=str(tmp_path), spec="", model="",
                environment="", max_body=1, timeout_ms=1, max_pending=2)
    with pytest.raises(Interrupted):
        endpoint_actions._enter(state, slot, tmp_path, NewTraffic.AUTO)
    assert retired == [slot]
    assert EndpointState.read(tmp_path).deployments == {}  # as it was before the start


def test_stop_reads_no_run_record_that_would_block_it(tmp_path):
    """A FIFO or a device where a run folder's status.json or endpoint.json goes is passed
    over (status.json) or damage (endpoint.json), never read until it ends."""
    (tmp_path / "blue-1").mkdir()
    os.mkfifo(tmp_path / "blue-1" / "status.json")
    os.mkfifo(tmp_path / "endpoint.json")
    assert local_endpoint.running_servers(tmp_path) == {}
    with pytest.raises(LocalRunError, match="not a regular file"):
        local_endpoint.live_state(tmp_path)
