"""What a deployment's environment sets for scoring: one dataclass, read once in init().

Azure hands a deployment's settings to its scoring script as environment variables (the spec's
`environment_variables`, and AZUREML_MODEL_DIR, WORKER_COUNT and AZUREML_BI_OUTPUT_PATH from the
platform). score.py (online) and batch_score.py (batch) read them here, in init(), never at
import: a worker that imports the module before its variables are set still gets them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ScoreConfig:
    model_dir: str = ""  # AZUREML_MODEL_DIR: where Azure mounted the model
    backend: str = "auto"  # SCORE_BACKEND: auto, torch, onnx or int8
    max_images: int = 16  # SCORE_MAX_IMAGES: images in one request
    max_body_bytes: int = 16 * 2**20  # SCORE_MAX_BODY_BYTES: a request's body
    max_request_pixels: int = 64_000_000  # SCORE_MAX_REQUEST_PIXELS: what a request decodes
    batching: bool = True  # SCORE_BATCHING=0: each request runs its own forward pass
    lanes: int = 0  # SCORE_LANES: forward passes at once (0: one per core the worker owns)
    threads: int = 0  # SCORE_THREADS: threads per pass (0: the cores a lane owns)
    workers: int = 1  # WORKER_COUNT: the server's workers, which share the cores
    batch: int = 16  # SCORE_BATCH: images per forward pass of a batch deployment
    output_path: str = ""  # AZUREML_BI_OUTPUT_PATH: a batch deployment's output folder
    logging_level: str = "INFO"  # LOGGING_LEVEL: a batch deployment's logging_level

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ScoreConfig:
        def number(name: str, default: int) -> int:
            text = environ.get(name, "").strip()
            try:
                return int(text) if text else default
            except ValueError:
                raise ValueError(f"{name}={text!r}: give a whole number") from None

        base = cls()
        return cls(model_dir=environ.get("AZUREML_MODEL_DIR", ""),
                   backend=environ.get("SCORE_BACKEND", base.backend),
                   max_images=number("SCORE_MAX_IMAGES", base.max_images),
                   max_body_bytes=number("SCORE_MAX_BODY_BYTES", base.max_body_bytes),
                   max_request_pixels=number("SCORE_MAX_REQUEST_PIXELS",
                                             base.max_request_pixels),
                   batching=environ.get("SCORE_BATCHING", "1") != "0",
                   lanes=number("SCORE_LANES", 0), threads=number("SCORE_THREADS", 0),
                   workers=max(1, number("WORKER_COUNT", 1)),
                   batch=max(1, number("SCORE_BATCH", base.batch)),
                   output_path=environ.get("AZUREML_BI_OUTPUT_PATH", ""),
                   logging_level=environ.get("LOGGING_LEVEL", "INFO").upper())

    def lanes_and_threads(self, cores: int) -> tuple[int, int]:
        """Forward passes at once in this worker, and threads for each.

        Default: one single-threaded lane per core the worker owns (cores / WORKER_COUNT).
        Measured side by side on 2 cores (make bench-score): under concurrent load two
        one-thread lanes serve 1.1-1.3x the images/s of one two-thread pass, because a
        multi-threaded pass waits at every layer for a thread whose core a request thread took
        to decode an image. A pass that runs alone still gets every core (ONNX models; see
        Service.widen), so a lone request stays quick. SCORE_LANES=1 gives one pass on every
        core always; SCORE_THREADS sets threads per pass; SCORE_BATCHING=0 runs each request
        alone."""
        share = max(1, cores // self.workers)
        lanes = (self.lanes or share) if self.batching else 1
        threads = self.threads or max(1, share // lanes)
        return max(1, lanes), threads
