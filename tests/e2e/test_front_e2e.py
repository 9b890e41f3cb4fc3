"""The endpoint's front as a real process on 127.0.0.1, in front of a stub deployment server (a
few milliseconds to start, no environment): hostile streams over real sockets, an endless
body, descriptors running out, a damaged endpoint.json. The full table of streams is
tests/unit/test_front_wire.py's; here, that a socket gets the same answer and is closed."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import closing, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support import until

from mlops.endpoints import local_endpoint
from mlops.endpoints.endpoint_state import EndpointState, Slot
from mlops.runtime.launch import free_port

LIMIT = 64 * 1024


class Stub(BaseHTTPRequestHandler):
    """A deployment's server: answers every POST with who it is and the body's length."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    seen: list[bytes] = []
    connections = 0

    def setup(self):
        Stub.connections += 1
        super().setup()

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Stub.seen.append(body)
        out = json.dumps({"who": "stub", "length": len(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):  # noqa: N802 - http.server's name
        size = int(self.path.rpartition("/")[2])  # GET /<n>: an answer of n bytes
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with suppress(OSError):  # (the front cut a client off)
            for at in range(0, size, 1 << 16):
                self.wfile.write(b"y" * min(1 << 16, size - at))

    def log_message(self, *args):
        pass


@dataclass(kw_only=True)
class Front:
    port: int
    proc: subprocess.Popen
    key: str
    folder: Path

    def log(self) -> str:
        return (self.folder / "front.log").read_text(errors="replace")

    def ask(self, data: bytes, wait: float = 5.0) -> tuple[bytes, bool]:
        """Send raw bytes; what came back and whether the front closed the connection."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=wait) as sock:
            with suppress(OSError):
                sock.sendall(data)
            got, deadline = b"", time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    break
                except ConnectionResetError:
                    return got, True
                if not chunk:
                    return got, True
                got += chunk
                if b"\r\n\r\n" in got and b'"who"' in got:  # a whole answer of the stub's
                    return got, False
        return got, False

    def post(self, *fields: bytes, body: bytes = b"{}") -> bytes:
        lines = [b"POST /score HTTP/1.1", b"Host: x", b"Authorization: Bearer " +
                 self.key.encode(), *fields]
        return b"\r\n".join(lines) + b"\r\n\r\n" + body


def start_front(folder: Path, *, nofile: int | None = None, **env: str) -> Front:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    slot = Slot(name="blue", port=server.server_address[1], pid=os.getpid(), folder=str(folder),
                spec="", model="", environment="", max_body=LIMIT, timeout_ms=3000,
                max_pending=8)
    state = EndpointState(name="wire", port=port, deployments={"blue": slot},
                          traffic={"blue": 100})
    state.ensure_credentials()
    state.write(folder)

    def limit() -> None:
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(folder / "front.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(local_endpoint.FRONT), str(folder)],
                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit,
                                env={**os.environ, **env})
    front = Front(port=port, proc=proc, key=state.keys["primaryKey"], folder=folder)

    def listening() -> bool:
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        assert proc.poll() is None, front.log()
        return False

    until(listening, 30, "the front listening")
    return front


@pytest.fixture
def front(tmp_path):
    Stub.seen, Stub.connections = [], 0
    started = start_front(tmp_path)
    yield started
    started.proc.send_signal(signal.SIGTERM)
    started.proc.wait(20)


@pytest.mark.proof
@pytest.mark.parametrize(("stream", "status"), [
    ([b"Content-Length: 5", b"Transfer-Encoding: chunked"], b"400"),  # smuggling
    ([b"Transfer-Encoding: chunked, identity"], b"501"),
    ([b"Content-Length: 2", b"Content-Length: 3"], b"400"),
    ([b"X-A: 1", b" Authorization: Bearer nope", b"Content-Length: 2"], b"400"),  # folded
    ([b"Authorization: Bearer nope", b"Content-Length: 2"], b"400"),  # a second one
])
def test_a_refused_stream_gets_its_answer_and_the_connection_closes(front, stream, status):
    answer, closed = front.ask(front.post(*stream, body=b"0\r\n\r\nGET /x HTTP/1.1\r\n\r\n"))
    assert answer.startswith(b"HTTP/1.1 " + status + b" "), answer[:80]
    assert closed and answer.count(b"HTTP/1.1") == 1 and not Stub.seen


@pytest.mark.proof
def test_lf_only_lines_and_a_minus_one_chunk_get_prompt_answers(front):
    started = time.monotonic()
    answer, _ = front.ask(front.post(b"Content-Length: 2").replace(b"\r\n", b"\n"))
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"length": 2' in answer
    answer, closed = front.ask(front.post(b"Transfer-Encoding: chunked", body=b"-1\r\n" +
                                          b"x" * 100_000))
    assert answer.startswith(b"HTTP/1.1 400 ") and closed
    answer, closed = front.ask(front.post(b"Transfer-Encoding: chunked", body=b"ffffffff\r\nxx"))
    assert answer.startswith(b"HTTP/1.1 413 ") and closed  # announced past the cap
    assert time.monotonic() - started < 5  # no wait for a deadline


@pytest.mark.proof
def test_a_request_asking_to_upgrade_is_answered_with_its_body_read_as_its_own(front):
    hidden = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    answer, _ = front.ask(front.post(b"Connection: Upgrade, HTTP2-Settings", b"Upgrade: h2c",
                                     b"Content-Length: %d" % len(hidden), body=hidden))
    assert answer.startswith(b"HTTP/1.1 200 ") and Stub.seen == [hidden]
    assert "Fatal error" not in front.log()


@pytest.mark.proof
def test_an_endless_chunked_body_is_refused_at_the_cap_and_not_read_on(front):
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
    with socket.create_connection(("127.0.0.1", front.port), timeout=30) as sock:
        sock.sendall(front.post(b"Transfer-Encoding: chunked", body=b""))
        sock.setblocking(False)
        answer, sent, deadline = b"", 0, time.monotonic() + 30
        while time.monotonic() < deadline:
            with suppress(BlockingIOError):
                answer += sock.recv(4096)
                if answer.endswith(b"}") or not answer:
                    break
            try:
                sent += sock.send(chunk)
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):  # closed after its answer
                sock.setblocking(True)
                with suppress(OSError):
                    answer += sock.recv(4096)
                break
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
    assert sent < LIMIT + 16 * 2**20  # the cap, the sockets' buffers and a bounded linger
    assert not Stub.seen


@pytest.mark.proof
def test_a_damaged_endpoint_json_keeps_the_last_good_state(front):
    data = json.loads((front.folder / "endpoint.json").read_text())
    data["deployments"]["blue"]["port"] = "not a port"
    (front.folder / "endpoint.json").write_text(json.dumps(data))
    for _ in range(3):
        answer, _ = front.ask(front.post(b"Content-Length: 2"))
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
    until(lambda: "keeping the last good state" in front.log(), 5, "the front saying so")
    assert front.log().count("keeping the last good state") == 1


def idle_connections(port: int, count: int) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        with suppress(OSError):
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return opened


@pytest.mark.parametrize("cap", ["", "1000"])  # the front's own cap; past the file limit
def test_idle_connections_past_the_file_limit_do_not_end_the_front(tmp_path, cap):
    Stub.seen = []
    front = start_front(tmp_path, nofile=64, FRONT_MAX_CONNECTIONS=cap)
    try:
        held = idle_connections(front.port, 100)
        answer = b""
        deadline = time.monotonic() + 20
        while not answer.startswith(b"HTTP/1.1 200 ") and time.monotonic() < deadline:
            answer, _ = front.ask(front.post(b"Content-Length: 2"), wait=3)
        assert answer.startswith(b"HTTP/1.1 200 "), front.log()
        assert front.proc.poll() is None
        if cap:  # accept() itself ran out of descriptors: said, and survived
            assert "accept failed: EMFILE" in front.log()
        for sock in held:
            sock.close()
    finally:
        front.proc.send_signal(signal.SIGTERM)
        front.proc.wait(20)
    assert front.proc.returncode == 0, front.log()


@pytest.mark.proof
def test_keep_alive_requests_share_one_upstream_connection(front):
    with closing(socket.create_connection(("127.0.0.1", front.port), timeout=10)) as sock:
        for _ in range(20):
            sock.sendall(front.post(b"Content-Length: 2"))
            answer = b""
            while b"}" not in answer:
                chunk = sock.recv(65536)
                assert chunk, f"the front closed the connection after {answer!r}"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert b"azureml-model-deployment: blue" in answer
    assert len(Stub.seen) == 20 and Stub.connections <= 2  # kept alive, not one per request


def memory_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


@pytest.mark.proof
def test_clients_that_never_read_long_answers_hold_none_of_them_in_the_front(front):
    """Each answer (32 MB) waits in a file and is written as its client reads: four clients
    that read nothing leave the front's memory where it was (it held each answer whole)."""
    before, size, held = memory_mb(front.proc.pid), 32 << 20, []
    for _ in range(4):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", front.port))
        sock.sendall(b"GET /%d HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
                     % (size, front.key.encode()))
        held.append(sock)
    until(lambda: f"GET /{size} -> blue 200" in front.log(), 30, "the answers handed on")
    assert memory_mb(front.proc.pid) < before + 32, front.log()
    answer, _ = front.ask(front.post(b"Content-Length: 2"))  # others are served meanwhile
    assert answer.startswith(b"HTTP/1.1 200 ")
    for sock in held:
        sock.close()
