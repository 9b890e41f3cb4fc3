"""Scoring script for Azure ML batch deployments: init() and run(mini_batch).

Each mini-batch is a list of file paths. run() returns one CSV line per image it could score:
    file,label,<probability of each class, in the model's class order>
which `output_action: append_row` appends to the deployment's output file (predictions.csv, no
header). A file that is not a readable image never crashes the mini-batch: it is left out of the
result, which Azure counts as a failed item against `error_threshold`, and its row
`file,error` goes to errors_<host>_<pid>.csv in the job's output folder (AZUREML_BI_OUTPUT_PATH).
The model loading and `predict` are the online endpoint's (predict.py): one model, one
preprocessing, two entry points. Images are decoded by images.open_image, as in training.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import socket
from pathlib import Path

from image_classifier.images import ImageError, open_image
from image_classifier.predict import Service, predict
from image_classifier.score_config import ScoreConfig

log = logging.getLogger("image_classifier.batch_score")
_config = ScoreConfig()  # init() reads the deployment's settings
_service: Service | None = None
_errors: Path | None = None


def _line(values: list) -> str:
    """One CSV row, without its line end; a field holding a line break is quoted (csv quotes
    what holds a character of its line terminator, so the terminator is written, then cut)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerow(values)
    return buffer.getvalue()[:-2]


def init() -> None:
    global _config, _service, _errors
    _config = ScoreConfig.from_env()
    logging.basicConfig(level=_config.logging_level)
    if not _config.model_dir:
        raise RuntimeError("AZUREML_MODEL_DIR is not set: Azure sets it to the mounted model")
    _service = Service(_config.model_dir, _config.backend, _config.threads)
    if _config.output_path:
        _errors = Path(_config.output_path) / f"errors_{socket.gethostname()}_{os.getpid()}.csv"
    log.info("loaded %s model for %s", _service.backend, _service.classes)


def _record_error(path: str, error: Exception) -> None:
    log.warning("%s: %s", path, error)
    if _errors is not None:  # a name that is not UTF-8 keeps its bytes, as in the rows
        with _errors.open("a", errors="surrogateescape") as handle:
            handle.write(_line([os.path.basename(path), str(error)]) + "\n")


def rows(paths: list[str], images: list) -> list[str]:
    lines = []
    size = _config.batch
    for start in range(0, len(images), size):
        for path, result in zip(paths[start:start + size],
                                predict(_service, images[start:start + size]), strict=True):
            probabilities = [result["probabilities"][c] for c in _service.classes]
            lines.append(_line([os.path.basename(path), result["label"], *probabilities]))
    return lines


def run(mini_batch: list[str]) -> list[str]:
    paths, images = [], []
    for path in mini_batch:
        try:  # one file's failure is its own error row, never the mini-batch's
            images.append(open_image(str(path), _service.min_side))
            paths.append(str(path))
        except (ImageError, OSError, ValueError) as err:
            _record_error(str(path), err)
    return rows(paths, images)
