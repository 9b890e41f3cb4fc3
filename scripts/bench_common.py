"""What the benchmark scripts share: the in-process rate of a model's forward pass."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def images_per_second(forward: Callable, inputs: torch.Tensor, seconds: float) -> float:
    """Images/s of `forward(inputs)` repeated for `seconds`, after one warm-up pass (which
    pays for lazy initialisation: oneDNN primitives, ONNX Runtime's first-run allocations)."""
    with torch.inference_mode():
        forward(inputs)
        started, runs = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            forward(inputs)
            runs += 1
    return runs * len(inputs) / (time.perf_counter() - started)
