"""What the benchmark scripts share: the in-process rate of a model's forward pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from image_classifier import usable_cores


def images_per_second(forward: Callable, inputs: np.ndarray, seconds: float,
                      lanes: int = 1) -> float:
    """Images/s of `forward(inputs)` repeated for `seconds` by `lanes` threads at once, after
    one warm-up pass (which pays for lazy initialisation: oneDNN primitives, ONNX Runtime's
    first-run allocations)."""
    runs = [0] * lanes

    def lane(index: int, deadline: float) -> None:
        while time.perf_counter() < deadline:
            forward(inputs)
            runs[index] += 1

    forward(inputs)
    started = time.perf_counter()
    threads = [threading.Thread(target=lane, args=(i, started + seconds)) for i in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(runs) * len(inputs) / (time.perf_counter() - started)


def compute_bound(model_dir: Path, backend: str, batches: list[np.ndarray],
                  seconds: float) -> tuple[float, str]:
    """Images/s of the model alone (no HTTP, no decoding): the best of one pass on every core and
    one single-threaded pass per core at once (how the server's lanes and the batch processes
    run), each batch size tried, so that neither arrangement flatters a ratio against it."""
    from image_classifier.predict import Service

    cores, best = usable_cores(), (0.0, "")
    for lanes, threads in ((1, cores), (cores, 1)):
        forward = Service(model_dir, backend, threads).probabilities
        for inputs in batches:
            rate = images_per_second(forward, inputs, seconds, lanes)
            best = max(best, (rate, f"{lanes} pass(es) x {threads} thread(s), "
                                    f"batch {len(inputs)}"))
    if backend == "torch":
        from image_classifier.inference import set_threads

        set_threads(cores)
    return best
