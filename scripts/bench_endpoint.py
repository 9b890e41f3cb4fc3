"""Benchmark the local endpoint's front: what auth, routing, the body spool, mirroring and the
424 rule cost a request, side by side with the deployment's server alone, in one run.

    python scripts/bench_endpoint.py [--seconds 5]

Serves tests/fixtures/endpoint's blue and green (a scorer that answers who it is, so the figures
are the front's and the server's, not a model's) and measures requests/s and p50/p99 latency at
concurrency 1 and 4, each client on a kept-alive connection: blue's server directly, through the
front, and through the front with half of the requests mirrored to green. Then: the front's peak
memory after an endless chunked body (refused at 16 MiB) and how long stop takes under load.
The limit is the machine's: the rate of the server alone is what the front can at best pass on.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_load import concurrent_load  # noqa: E402

from mlops.endpoints import endpoint_actions, local_endpoint, online  # noqa: E402
from mlops.endpoints.endpoint_state import EndpointState  # noqa: E402
from mlops.runtime.launch import free_port  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "endpoint"


def load(port: int, headers: dict[str, str], clients: int, seconds: float) -> dict:
    """Each client on a kept-alive connection of its own (a new one after a failure)."""

    def make_client():
        connection = [http.client.HTTPConnection("127.0.0.1", port, timeout=30)]

        def call() -> bool:
            try:
                connection[0].request("POST", "/score", body=b"{}", headers=headers)
                response = connection[0].getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                connection[0].close()
                connection[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                return False
            return response.status == 200
        return call

    return concurrent_load(make_client, clients, seconds)


def peak_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM"))
               .split()[1]) / 1024


def endless_body(port: int, key: str) -> float:
    """Send chunk after chunk until the front answers; the MB sent by then."""
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"Authorization: Bearer " + key.encode() + b"\r\n\r\n")
        sock.setblocking(False)
        sent, pending, answer = 0, b"", b""
        while not answer:
            try:
                answer = sock.recv(64)
            except BlockingIOError:
                pending = pending or chunk
                with contextlib.suppress(BlockingIOError):
                    count = sock.send(pending)
                    sent, pending = sent + count, pending[count:]
    assert answer.startswith(b"HTTP/1.1 413"), answer
    return sent / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        local_endpoint.ENDPOINTS = Path(tmp)
        port = free_port()
        for spec in ("blue.yml", "green.yml"):
            request = online.ServeRequest(deployment=FIXTURE / spec, port=port)
            assert endpoint_actions.start(request) == 0
        state = EndpointState.read(Path(tmp) / "rollout-local")
        key = {"Authorization": f"Bearer {state.credential()}"}
        blue = state.deployments["blue"]
        rows = []
        for clients in (1, 4):
            rows.append(("server alone", clients, load(blue.port, {}, clients, args.seconds)))
            rows.append(("through the front", clients, load(port, key, clients, args.seconds)))
        endpoint_actions.update(None, traffic=None, mirror="green=50")
        for clients in (1, 4):
            rows.append(("front, 50 % mirrored", clients,
                         load(port, key, clients, args.seconds)))
        before = peak_mb(state.front_pid)
        sent = endless_body(port, state.credential())
        after = peak_mb(state.front_pid)
        print(f"\n{'path':22} {'conc':>4} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'failed':>6}")
        for name, clients, r in rows:
            print(f"{name:22} {clients:4d} {r['rps']:8.1f} {r['p50']:7.2f} {r['p99']:7.2f} "
                  f"{r['failed']:6d}")
        for clients in (1, 4):
            alone, front = (r["rps"] for n, c, r in rows[:4] if c == clients)
            print(f"concurrency {clients}: the front passes on {front / alone:.2f} of the "
                  "server's own rate")
        print(f"endless chunked body: 413 after {sent:.0f} MB sent (limit 16 MiB); the front's "
              f"peak memory {before:.0f} -> {after:.0f} MB")
        started = time.perf_counter()
        endpoint_actions.stop()
        print(f"stop (front drained, two servers stopped): {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
