"""Benchmark the local endpoint's front: what auth, routing, the body spool, mirroring and the
424 rule cost a request, side by side with the deployment's server alone, in one run.

    python scripts/bench_endpoint.py [--seconds 4] [--rounds 2]

Serves tests/fixtures/endpoint's blue and green (a scorer that answers who it is, so the figures
are the front's and the server's, not a model's) and measures requests/s, latency and the CPU
each process spent per request at concurrency 1 and 4, each client on a kept-alive connection:
blue's server directly, through a bare byte relay (scripts/bench/relay.py: the least a front in
Python on uvloop adds, two loopback hops and no HTTP) and through the front, alternately for
`rounds` rounds (the best round of each is shown, so a burst of another process's work on a
shared machine counts against none), then through the front with half of the requests
mirrored to green. Then: the front's peak memory after an endless chunked body (refused at
16 MiB), and how long stop takes.
CPU per request is the figure a shared machine changes least: the front's overhead is its CPU
time on each request's path plus two loopback hops.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_load import concurrent_load  # noqa: E402

from mlops.endpoints import endpoint_actions, endpoint_stop, local_endpoint, online  # noqa: E402
from mlops.endpoints.endpoint_state import EndpointState  # noqa: E402
from mlops.runtime.launch import free_port  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "endpoint"
RELAY = ROOT / "scripts" / "bench" / "relay.py"
TICK = os.sysconf("SC_CLK_TCK")


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


def group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) of every process in the group (a server's workers too)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += int(fields[11]) + int(fields[12])
    return total / TICK


def measured(port: int, headers: dict[str, str], clients: int, *, seconds: float,
             groups: tuple[int, int]) -> dict:
    """A load's figures, with the front's and the server's CPU ms per request."""
    before = [group_cpu(g) for g in groups]
    row = load(port, headers, clients, seconds)
    done = max(row["requests"], 1)
    row["front_cpu"], row["server_cpu"] = (1000 * (group_cpu(g) - b) / done
                                           for g, b in zip(groups, before, strict=True))
    return row


def wait_for_port(port: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


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
                try:
                    count = sock.send(pending)
                    sent, pending = sent + count, pending[count:]
                except BlockingIOError:
                    pass
                except OSError:  # closed after its answer: read what came
                    sock.setblocking(True)
                    answer = sock.recv(64)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    return sent / 2**20


def side_by_side(state: EndpointState, relay: tuple[int, int], args) -> list:
    """Each path's best round at concurrency 1 and 4: the server alone, the bare relay (the
    floor of a front in Python) and the front; then the front with half mirrored."""
    key = {"Authorization": f"Bearer {state.credential()}"}
    blue = state.deployments["blue"]
    paths = (("server alone", blue.port, {}, state.front_pid),
             ("bare relay (floor)", relay[0], {}, relay[1]),
             ("through the front", state.port, key, state.front_pid))
    rows = []
    for clients in (1, 4):
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name, port, headers, pgid in paths:
                row = measured(port, headers, clients, seconds=args.seconds,
                               groups=(pgid, blue.pid))
                if name not in best or row["rps"] > best[name]["rps"]:
                    best[name] = row
        rows += [(name, clients, row) for name, row in best.items()]
    endpoint_actions.update(None, traffic=None, mirror="green=50")
    for clients in (1, 4):
        rows.append(("front, 50 % mirrored", clients,
                     measured(state.port, key, clients, seconds=args.seconds,
                              groups=(state.front_pid, blue.pid))))
    return rows


def report(rows: list[tuple[str, int, dict]]) -> None:
    print(f"\n{'path':22} {'conc':>4} {'req/s':>8} {'mean ms':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'failed':>6} {'front CPU ms/req':>17} {'server CPU ms/req':>18}")
    for name, clients, r in rows:
        front = f"{r['front_cpu']:.3f}" if name != "server alone" else "-"
        print(f"{name:22} {clients:4d} {r['rps']:8.1f} {1000 * clients / r['rps']:8.3f} "
              f"{r['p50']:7.3f} {r['p99']:7.3f} {r['failed']:6d} {front:>17} "
              f"{r['server_cpu']:18.3f}")
    for clients in (1, 4):
        alone, relay, front = (r for n, c, r in rows[:6] if c == clients)
        for name, row in (("the bare relay", relay), ("the front", front)):
            added = 1000 * clients * (1 / row["rps"] - 1 / alone["rps"])
            print(f"concurrency {clients}: {name} passes on {row['rps'] / alone['rps']:.2f} of "
                  f"the server's own rate; it adds {added:.3f} ms a request (mean), "
                  f"{row['p50'] - alone['p50']:.3f} ms at the median, and spends "
                  f"{row['front_cpu']:.3f} ms of CPU on each")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="alternate rounds per pair")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        local_endpoint.ENDPOINTS = Path(tmp)
        port = free_port()
        for spec in ("blue.yml", "green.yml"):
            request = online.ServeRequest(deployment=FIXTURE / spec, port=port)
            assert endpoint_actions.start(request) == 0
        try:
            measure(EndpointState.read(Path(tmp) / "rollout-local"), args)
        finally:  # the servers never outlive the benchmark
            started = time.perf_counter()
            endpoint_stop.stop()
            print(f"stop (front drained, two servers stopped): "
                  f"{time.perf_counter() - started:.1f} s")
    return 0


def measure(state: EndpointState, args) -> None:
    load_before = os.getloadavg()[0]
    port = free_port()
    relay = subprocess.Popen([sys.executable, str(RELAY), str(port),
                              str(state.deployments["blue"].port)], start_new_session=True)
    try:
        wait_for_port(port)
        report(side_by_side(state, (port, relay.pid), args))
    finally:
        relay.kill()
        relay.wait()
    before = peak_mb(state.front_pid)
    sent = endless_body(state.port, state.credential())
    after = peak_mb(state.front_pid)
    print(f"endless chunked body: 413 after {sent:.0f} MB sent (limit 16 MiB); the front's "
          f"peak memory {before:.0f} -> {after:.0f} MB")
    print(f"machine: {os.cpu_count()} cores, load average {load_before:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    sys.exit(main())
