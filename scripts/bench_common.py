"""What the benchmark scripts share: the in-process rate of a model's forward pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch


def images_per_second(forward: Callable, inputs: torch.Tensor, seconds: float,
                      lanes: int = 1) -> float:
    """Images/s of `forward(inputs)` repeated for `seconds` by `lanes` threads at once, after
    one warm-up pass (which pays for lazy initialisation: oneDNN primitives, ONNX Runtime's
    first-run allocations)."""
    runs = [0] * lanes

    def lane(index: int, deadline: float) -> None:
        with torch.inference_mode():
            while time.perf_counter() < deadline:
                forward(inputs)
                runs[index] += 1

    with torch.inference_mode():
        forward(inputs)
    started = time.perf_counter()
    threads = [threading.Thread(target=lane, args=(i, started + seconds)) for i in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(runs) * len(inputs) / (time.perf_counter() - started)
