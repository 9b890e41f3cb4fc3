"""The local endpoint is Azure's managed online endpoint: blue and green side by side behind one
address, routed by traffic weights, the deployment header and mirror traffic; auth by key; bodies
bounded at the front; starts serialised and stops that answer what was accepted.

The deployments are tests/fixtures/endpoint's: a scorer that says who answered (no model), in an
environment .venv satisfies, so a server starts in ~2 s."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from endpoint_client import Endpoints, post, servers_of, use_root
from support import ROOT, until

from mlops import serve
from mlops.endpoints import endpoint_actions
from mlops.runtime.records import Status, TaskRecord

FIXTURE = ROOT / "tests" / "fixtures" / "endpoint"
BLUE, GREEN = FIXTURE / "blue.yml", FIXTURE / "green.yml"
# the tests that share the module's endpoint run in one xdist worker (make test: --dist
# loadgroup), which starts it once
pytestmark = pytest.mark.xdist_group("endpoint-rollout")


@pytest.fixture(scope="module")
def rollout(tmp_path_factory):
    """blue (100 %) and green (0 %) of endpoint rollout-local, for the tests that only route."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        endpoints = use_root(monkeypatch, tmp_path_factory.mktemp("endpoints"))
        url = endpoints.start(BLUE)
        endpoints.start(GREEN)
        yield endpoints, url
        endpoints.stop()


@pytest.fixture
def own(tmp_path, monkeypatch):
    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    yield endpoints
    endpoints.stop()


def set_traffic(weights: str, mirror: str | None = None) -> None:
    argv = ["traffic", weights] + (["--mirror-traffic", mirror] if mirror is not None else [])
    assert serve.main(argv) == 0


@pytest.mark.proof
def test_blue_and_green_are_served_side_by_side_on_one_address(rollout):
    endpoints, url = rollout
    state = endpoints.state()
    assert set(state.deployments) == {"blue", "green"} and state.traffic == {"blue": 100,
                                                                             "green": 0}
    blue = post(url, {}, endpoints.headers())
    assert (blue.status, blue.body, blue.deployment) == (200, {"who": "blue"}, "blue")
    green = post(url, {}, {**endpoints.headers(), "azureml-model-deployment": "green"})
    assert (green.status, green.body, green.deployment) == (200, {"who": "green"}, "green")
    assert post(url, {}, {**endpoints.headers(), "azureml-model-deployment": "purple"}
                ).status == 404


def test_ninety_ten_weights_split_a_thousand_requests(rollout):
    endpoints, url = rollout
    set_traffic("blue=90 green=10")
    try:
        host, port = "127.0.0.1", endpoints.port
        connection = http.client.HTTPConnection(host, port, timeout=30)  # kept alive
        counts: Counter[str] = Counter()
        for _ in range(1000):
            connection.request("POST", "/score", body=b"{}", headers=endpoints.headers())
            response = connection.getresponse()
            response.read()
            counts[response.getheader("azureml-model-deployment")] += 1
        connection.close()
    finally:
        set_traffic("blue=100 green=0")
    assert counts["blue"] + counts["green"] == 1000
    assert 840 <= counts["blue"] <= 960, counts


@pytest.mark.proof
def test_mirrored_copies_reach_green_and_their_answers_are_dropped(rollout):
    endpoints, url = rollout
    before = endpoints.log("green").count("\"POST /score")
    set_traffic("blue=100 green=0", mirror="green=50")
    try:
        answers = [post(url, {}, endpoints.headers()) for _ in range(60)]
        named = post(url, {}, {**endpoints.headers(), "azureml-model-deployment": "blue"})
    finally:
        set_traffic("blue=100 green=0", mirror="green=0")
    assert all(a.status == 200 and a.body == {"who": "blue"} for a in answers)
    assert named.deployment == "blue"
    def copies() -> int:
        return endpoints.log("green").count("\"POST /score") - before

    until(lambda: copies() >= 10, 10, "mirrored copies in green's log")
    assert copies() <= 50, copies()  # ~30 of 60; header-named requests are never mirrored


@pytest.mark.proof
def test_traffic_rules_are_azures(rollout, capsys):
    for argv, message in ((["traffic", "blue=90 green=20"], "adds up to 110"),
                          (["traffic", "blue=100 purple=0"], "has no deployment purple"),
                          (["mirror", "green=60"], "at most 50"),
                          (["mirror", "blue=10"], "takes 100 % of live traffic")):
        assert serve.main(argv) == 2, argv
        assert message in capsys.readouterr().err
    assert rollout[0].state().traffic == {"blue": 100, "green": 0}


@pytest.mark.proof
def test_key_auth_as_azure_answers_it(rollout):
    endpoints, url = rollout
    keys = endpoints.state().keys
    missing = post(url, {})
    assert (missing.status, missing.body) == (401, "key_auth_bad_header_forbidden")
    wrong = post(url, {}, {"Authorization": "Bearer not-the-key"})
    assert (wrong.status, wrong.body) == (401, "key_auth_access_denied")
    for key in (keys["primaryKey"], keys["secondaryKey"]):
        assert post(url, {}, {"Authorization": f"Bearer {key}"}).status == 200
    endpoint_actions.regenerate_key(endpoints.state().name, "primary")  # regenerate-keys
    new = endpoints.state().keys["primaryKey"]
    assert post(url, {}, {"Authorization": f"Bearer {new}"}).status == 200
    assert post(url, {}, {"Authorization": f"Bearer {keys['primaryKey']}"}).status == 401
    assert post(url, {}, {"Authorization": f"Bearer {keys['secondaryKey']}"}).status == 200


@pytest.mark.proof
def test_a_deployments_error_is_a_424_with_its_status_in_the_headers(rollout):
    endpoints, url = rollout
    answer = post(url, {"fail": 418}, endpoints.headers())
    assert answer.status == 424 and answer.body == {"error": "asked to fail"}
    assert answer.headers["ms-azureml-model-error-statuscode"] == "418"
    assert answer.deployment == "blue"


@pytest.mark.proof
def test_a_request_past_request_timeout_ms_gets_a_408(rollout):
    endpoints, url = rollout  # the fixture's request_timeout_ms: 3000
    answer = post(url, {"sleep": 4}, endpoints.headers())
    assert answer.status == 408 and "request_timeout_ms" in answer.body["message"]


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]
               ) / 1024


@pytest.mark.proof
def test_an_endless_chunked_body_gets_a_413_and_the_front_stays_small(rollout):
    endpoints, _ = rollout
    front = endpoints.state().front_pid
    before = _rss_mb(front)
    key = endpoints.headers()["Authorization"]
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=30) as sock:
        sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"Authorization: " + key.encode() + b"\r\n\r\n")
        sock.setblocking(False)
        answer, sent, pending, deadline = b"", 0, b"", time.monotonic() + 60
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            try:
                answer += sock.recv(4096)
            except BlockingIOError:
                pending = pending or chunk  # chunk after chunk, without end
                try:
                    count = sock.send(pending)
                except BlockingIOError:
                    time.sleep(0.001)
                    continue
                except BrokenPipeError:  # its answer, end and reset came between recv and send:
                    answer += _rest(sock)  # the answer is still to be read
                    break
                sent, pending = sent + count, pending[count:]
            except ConnectionResetError:
                break
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert sent < 64 * 2**20  # refused as it passed the limit (16 MiB), not at the end
    assert _rss_mb(front) - before < 50


def _rest(sock: socket.socket) -> bytes:
    """What the socket still holds to read, up to its end (or a reset after it)."""
    sock.settimeout(10)
    got = b""
    with contextlib.suppress(ConnectionResetError):
        while piece := sock.recv(4096):
            got += piece
    return got


@pytest.mark.proof
def test_an_announced_body_over_the_limit_is_refused_before_it_is_sent(rollout):
    endpoints, _ = rollout
    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=10) as sock:
        sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n"
                     b"Authorization: " + endpoints.headers()["Authorization"].encode() +
                     b"\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 413")


def test_two_starts_at_once_leave_one_server_and_stop_stops_it(tmp_path):
    env = {**os.environ, "MLOPS_STATE_DIR": str(tmp_path)}
    port = str(Endpoints(tmp_path).port)
    starts = [subprocess.Popen([sys.executable, "-m", "mlops.serve", "start", "--deployment",
                                str(BLUE), "--port", port], env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    folder = tmp_path / "runs" / "endpoints" / "rollout-local"
    try:
        outs = [p.communicate(timeout=120)[0] for p in starts]
        assert [p.returncode for p in starts] == [0, 0], outs
        assert any("is busy (pid" in out and "serve-local blue" in out for out in outs), outs
        lines = servers_of(folder)
        assert sum("front.py" in line for line in lines) == 1, lines
        assert len({line.split("--port ")[1].split()[0] for line in lines
                    if "_mlops_inference_server" in line}
                   ) == 1, lines  # one server (its master and worker share its address)
        records = [TaskRecord.read(d) for d in folder.glob("blue-*")]  # the replaced one is
        assert [r.status for r in records].count(Status.RUNNING) == 1, records  # kept: its log
    finally:
        stop = subprocess.run([sys.executable, "-m", "mlops.serve", "stop"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0 and "stopped local endpoint rollout-local" in stop.stdout
    until(lambda: not servers_of(folder), 10, "no server of the endpoint left")


def test_stop_under_load_answers_every_accepted_request(own):
    url = own.start(BLUE)
    headers = own.headers()
    done, dropped, refused = [], [], []

    def client() -> None:
        while True:
            try:
                answer = post(url, {"sleep": 0.2}, headers, timeout=30)
            except ConnectionRefusedError:
                refused.append(1)
                return
            except (OSError, http.client.HTTPException) as err:
                dropped.append(repr(err))
                return
            (done if answer.status == 200 else dropped).append(answer.status)

    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in clients:
        thread.start()
    until(lambda: len(done) >= 8, 30, "requests answered before the stop")
    own.stop()
    for thread in clients:
        thread.join(60)
    assert not dropped, dropped
    assert len(done) >= 8 and len(refused) == 4


def test_a_killed_front_is_started_again_by_the_next_start_and_stop_leaves_nothing(own):
    url = own.start(BLUE)
    front, headers = own.state().front_pid, own.headers()
    os.killpg(front, signal.SIGKILL)  # its server runs on, unanswered
    until(lambda: post_or_none(url, headers) is None, 10, "the front gone")
    own.start(GREEN)
    state = own.state()
    assert state.front_pid != front and set(state.deployments) == {"blue", "green"}
    assert post(url, {}, own.headers()).body == {"who": "blue"}
    own.stop()
    until(lambda: not servers_of(own.root), 10, "no server of the endpoints left")


def post_or_none(url: str, headers: dict[str, str]):
    try:
        return post(url, {}, headers, timeout=5)
    except OSError:
        return None
