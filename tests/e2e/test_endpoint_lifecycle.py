"""Starting and stopping the local endpoint when things go wrong, with real processes: a
signal at a step of `python -m mlops.serve start` leaves no process that nothing records, and
stop-local finds every server of an endpoint from its run folders even when endpoint.json is
gone or damaged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from endpoint_client import SERVER, Endpoints, servers_of, use_root
from support import ROOT, until

from mlops import serve
from mlops.endpoints.endpoint_state import EndpointState

FIXTURE = ROOT / "tests" / "fixtures" / "endpoint"
BLUE, GREEN = FIXTURE / "blue.yml", FIXTURE / "green.yml"


@pytest.mark.parametrize(("sig", "held"), [
    (signal.SIGTERM, SERVER),  # blue's server started, not yet ready
    (signal.SIGHUP, "front.py"),  # blue recorded; the front started, not yet listening
])
def test_a_signal_during_a_start_stops_what_it_started(tmp_path, sig, held):
    gate = tmp_path / "open"
    env = {**os.environ, "MLOPS_STATE_DIR": str(tmp_path), "PYTHONPATH": str(FIXTURE / "gate"),
           "ENDPOINT_TEST_GATE": str(gate), "ENDPOINT_TEST_GATE_FOR": held}
    folder = tmp_path / "runs" / "endpoints" / "rollout-local"
    step = folder / ("blue-1" if held == SERVER else "front") / "status.json"
    start = subprocess.Popen([sys.executable, "-m", "mlops.serve", "start", "--deployment",
                              str(BLUE), "--port", str(Endpoints(tmp_path).port)], env=env,
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        until(lambda: step.exists() or start.poll() is not None, 240, f"{held} started")
        os.kill(start.pid, sig)  # the start waits on the held process: it cannot be done
        out = start.communicate(timeout=60)[0]
        assert start.returncode == 128 + sig, out
        assert "what this start started was stopped" in out
        until(lambda: not servers_of(folder), 15, "no server of the endpoint left")
        state = EndpointState.read(folder)
        assert state is None or (not state.deployments and not state.front_pid), state
    finally:
        gate.touch()
        start.kill()
        if servers_of(folder):  # the test failed: nothing outlives it
            subprocess.run([sys.executable, "-m", "mlops.serve", "stop"], env=env, cwd=ROOT,
                           capture_output=True, timeout=120)


@pytest.mark.parametrize("damage", ["gone", "wrongly typed"])
def test_stop_finds_every_server_when_endpoint_json_is_gone_or_damaged(tmp_path, monkeypatch,
                                                                       capsys, damage):
    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    endpoints.start(BLUE)
    endpoints.start(GREEN)
    folder = tmp_path / "endpoints" / "rollout-local"
    assert len(servers_of(folder)) >= 3  # the front, blue's and green's servers
    state = folder / "endpoint.json"
    if damage == "gone":
        state.unlink()
    else:
        state.write_text(state.read_text().replace('"traffic": {', '"traffic": [0], "x": {'))
    capsys.readouterr()
    assert serve.main(["stop"]) == 0  # no name: found from the run folders
    out = capsys.readouterr()
    assert "blue-1 (pid" in out.out and "green-1 (pid" in out.out, out
    until(lambda: not servers_of(folder), 15, "no server of the endpoint left")
    if damage != "gone":
        assert "endpoint.json is damaged" in out.err
        assert (folder / "endpoint.json.damaged").is_file() and not state.exists()
    assert serve.main(["stop"]) == 0 and "no local endpoint running" in capsys.readouterr().out


@pytest.mark.proof
def test_a_server_a_killed_start_left_is_stopped_by_the_next_start(tmp_path, monkeypatch, capsys):
    gate = tmp_path / "open"
    env = {**os.environ, "MLOPS_STATE_DIR": str(tmp_path), "PYTHONPATH": str(FIXTURE / "gate"),
           "ENDPOINT_TEST_GATE": str(gate), "ENDPOINT_TEST_GATE_FOR": SERVER}
    endpoints = use_root(monkeypatch, tmp_path / "runs" / "endpoints")
    folder = endpoints.root / "rollout-local"
    start = subprocess.Popen([sys.executable, "-m", "mlops.serve", "start", "--deployment",
                              str(BLUE), "--port", str(endpoints.port)], env=env, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until(lambda: (folder / "blue-1" / "status.json").exists(), 240, "blue's server")
        start.kill()  # SIGKILL while it waits on the server: nothing of the start's own runs
        start.wait(30)
    finally:
        gate.touch()
    assert servers_of(folder)  # blue-1's server, recorded in its run folder only
    endpoints.start(BLUE)
    assert "blue-1's server" in capsys.readouterr().err
    assert {line.split("--port ")[1].split()[0] for line in servers_of(folder)
            if SERVER in line} == {str(endpoints.state().deployments["blue"].port)}
    endpoints.stop()
    until(lambda: not servers_of(folder), 15, "no server of the endpoint left")


def test_a_killed_front_is_started_again_by_the_next_command(tmp_path, monkeypatch, capsys):
    """Azure's endpoint is always up in front of its deployments: `kill -9` of the local
    front left `invoke` saying the endpoint is not running while blue's server still ran."""
    from mlops.endpoints import endpoint_actions
    from mlops.runtime.service import alive

    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    endpoints.start(BLUE)
    front = endpoints.state().front_pid
    os.kill(front, signal.SIGKILL)
    until(lambda: not alive(front), 15, "the front gone")
    capsys.readouterr()
    answer = endpoint_actions.post(b"{}", name="rollout-local", deployment=None)
    assert answer.body == b'{"who": "blue"}'
    assert "front was gone (killed?); its deployments run: started it again" in \
        capsys.readouterr().err
    assert endpoints.state().front_pid not in (0, front)
    endpoints.stop()
    until(lambda: not servers_of(endpoints.root / "rollout-local"), 15, "nothing left")
