"""DEBUG= names one process of a run: parsed, matched against task addresses, refused clearly."""

from __future__ import annotations

import socket

import pytest

from mlops.errors import LocalRunError
from mlops.runtime.debugging import DebugRequest, free_or_refuse


@pytest.mark.parametrize(("value", "path", "process", "mode"), [
    ("1", ("1",), 0, "debugpy"), ("true", (), 0, "debugpy"), ("pdb", (), 0, "pdb"),
    ("train", ("train",), 0, "debugpy"), ("outer/train", ("outer", "train"), 0, "debugpy"),
    ("pdb:train", ("train",), 0, "pdb"), ("rank:1", (), 1, "debugpy"),
    ("tune/trial:3", ("tune", "trial:3"), 0, "debugpy"), ("worker:2", (), 2, "debugpy"),
    ("3", ("3",), 0, "debugpy"),
])
def test_debug_values_name_a_path_a_process_and_a_mode(value, path, process, mode):
    request = DebugRequest.parse(value)
    assert (request.path, request.process, request.mode) == (path, process, mode)


@pytest.mark.parametrize("value", ["", "0", "false", "no", None])
def test_no_debug(value):
    assert DebugRequest.parse(value) is None


def test_a_request_matches_the_job_a_step_or_a_trial():
    assert DebugRequest.parse("1").matches(())
    assert not DebugRequest.parse("1").matches(("train",))
    assert DebugRequest.parse("outer/train").matches(("outer", "train"))
    assert not DebugRequest.parse("train").matches(("outer", "train"))
    assert DebugRequest.parse("1").matches(("trial:1",))  # a sweep's trial index
    assert DebugRequest.parse("tune/2").matches(("tune", "trial:2"))
    assert DebugRequest.parse("tune/trial:2").matches(("tune", "trial:2"))


def test_a_name_that_matches_no_task_is_refused_with_the_names():
    with pytest.raises(LocalRunError,
                       match=r"DEBUG=trian names no task.*prep, train, tune/trial:0"):
        DebugRequest.parse("trian").check([("prep",), ("train",), ("tune", "trial:0")])


def test_a_port_in_use_is_named():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(LocalRunError, match=f"DEBUG_PORT={port}: 127.0.0.1:{port} is already"):
            free_or_refuse(port)
