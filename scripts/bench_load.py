"""What the HTTP benchmarks share: clients calling at once for a while, and the rate and
latencies they saw."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable


def concurrent_load(make_client: Callable[[], Callable[[], bool]], clients: int,
                    seconds: float) -> dict:
    """`clients` threads, each calling its own `make_client()` until `seconds` pass (a call says
    whether it succeeded): requests/s, p50 and p99 latency in ms, failures, requests."""
    latencies, failures = [], [0]
    deadline = time.monotonic() + seconds

    def run() -> None:
        call = make_client()
        while time.monotonic() < deadline:
            started = time.perf_counter()
            if call():
                latencies.append(time.perf_counter() - started)
            else:
                failures[0] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {"rps": len(latencies) / elapsed, "p50": statistics.median(latencies) * 1e3,
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
            "failed": failures[0], "requests": len(latencies)}
