"""Scoring script for Azure ML online endpoints: init()/run(), with raw HTTP access.

Every client Azure's documentation shows (`make serve-local`;
docs/serving-and-batch.md has a curl line and a Python client for each):
  POST application/json   {"images": ["<base64 image>", ...]}        (data: URLs too)
  POST application/json   {"data": [N x 3 x S x S floats]}          (already preprocessed, as
                          the Azure fowl notebook sends it; S is the model's image size)
  POST image/jpeg, image/png, ...   one raw image (curl --data-binary @img.jpg)
  POST multipart/form-data          one or more image files (requests.post(url, files=...))
Response: {"predictions": [{"label": "chickens", "probabilities": {"chickens": 0.93, ...}}]}

No request can hurt the worker: the body is capped while it is read; JSON that is not UTF-8 or
nests too deeply is a 400; images are checked from their headers (format, width, height, aspect
ratio, and the pixels a request would decode) before any is decoded; every decoder error is a
4xx (src/image_classifier/images.py, the decoder training uses too). init() loads model.pt with
weights_only=True, or model.onnx / model.int8.onnx with onnxruntime (SCORE_BACKEND=auto|torch|
onnx|int8; auto serves the int8 model when export kept it, else fp32 ONNX, else torch); with an
ONNX model the worker never imports torch (predict.py), so it starts in well under a second.
Its settings (score_config.py) are read once, in init().
The inference server loads this file by path: imports are absolute (code: ../src is the root).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import sys
import time

import numpy as np

from image_classifier import usable_cores
from image_classifier.images import ImageError, Limits, inspect, open_image
from image_classifier.predict import Batcher, Service, predict, predict_array
from image_classifier.score_config import ScoreConfig

LIMITS = Limits()
IMAGE_TYPES = {"image/jpeg", "image/jpg", "image/png", "image/webp", "image/tiff", "image/bmp",
               "image/x-portable-pixmap", "image/mpo", "application/octet-stream"}
USAGE = ('POST {"images": ["<base64 image>", ...]} or {"data": [N x 3 x S x S floats]} as '
         "application/json, a raw image body (Content-Type: image/jpeg or image/png), or "
         "multipart/form-data files")
log = logging.getLogger("image_classifier.score")
_config = ScoreConfig()  # init() reads the deployment's settings
_service: Service | None = None
_batcher: Batcher | None = None


class RequestError(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _log_to_stdout() -> None:
    """The server keeps its own loggers; these lines ("loaded ...", "scored ...") reach its log."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def init() -> None:
    global _config, _service, _batcher
    _log_to_stdout()
    _config = ScoreConfig.from_env()
    lanes, threads = _config.lanes_and_threads(usable_cores())
    _service = Service(_config.model_dir, _config.backend, threads)
    # concurrent requests of this worker share forward passes (SCORE_BATCHING=0: one each)
    _batcher = Batcher(_service, lanes=lanes) if _config.batching else None
    if lanes > 1:
        _service.widen(lanes * threads)
    log.info("loaded %s model (%s) for %s from %s; %d lane(s) x %d thread(s)", _service.backend,
             _service.model_file, _service.classes, _config.model_dir, lanes, threads)


def _json_body(raw: bytes):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError(400, "the request body is not UTF-8 text; send JSON, or an image "
                                "with Content-Type: image/jpeg") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise RequestError(400, "the request JSON nests too deeply") from None
    except ValueError as err:
        raise RequestError(400, f"the request body is not valid JSON ({err})") from None


def _base64_images(items) -> list[bytes]:
    if not isinstance(items, list) or not items:
        raise RequestError(400, f"'images' must be a non-empty list. {USAGE}")
    if len(items) > _config.max_images:
        raise RequestError(413, f"{len(items)} images in one request; the limit is "
                                f"{_config.max_images}")
    decoded = []
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise RequestError(400, f"images[{index}] must be a base64 string, got "
                                    f"{type(item).__name__}")
        payload = item.split(",", 1)[1] if item.startswith("data:") and "," in item else item
        try:
            decoded.append(base64.b64decode(payload, validate=True))
        except (binascii.Error, ValueError):
            raise RequestError(400, f"images[{index}] is not valid base64") from None
    return decoded


def _array(data, size: int) -> np.ndarray:
    """{"data": N x 3 x S x S}: checked for shape, count and finite numbers before any work."""
    if not isinstance(data, list) or not data:
        raise RequestError(400, f"'data' must be a non-empty N x 3 x {size} x {size} list")
    if len(data) > _config.max_images:
        raise RequestError(413, f"{len(data)} images in one request; the limit is "
                                f"{_config.max_images}")
    try:
        array = np.asarray(data, dtype=np.float32)
    except (ValueError, TypeError):
        raise RequestError(400, f"'data' must be N x 3 x {size} x {size} numbers (a ragged or "
                                "non-numeric list was sent)") from None
    if array.ndim != 4 or array.shape[1:] != (3, size, size):
        raise RequestError(400, f"'data' has shape {list(array.shape)}; this model takes "
                                f"[N, 3, {size}, {size}] (N up to {_config.max_images}), "
                                "normalized as in training")
    if not np.isfinite(array).all():
        raise RequestError(400, "'data' holds NaN or infinite values")
    return array


def parse(request) -> list[bytes] | np.ndarray:
    """The request -> image bytes to decode, or an already preprocessed batch."""
    if request.method != "POST":
        raise RequestError(405, f"use POST. {USAGE}")
    request.max_content_length = _config.max_body_bytes
    mimetype = (request.mimetype or "").lower()
    if mimetype == "multipart/form-data":
        files = [f.read(_config.max_body_bytes + 1) for f in request.files.values()]
        if not files:
            raise RequestError(400, f"the multipart request holds no file. {USAGE}")
        if len(files) > _config.max_images:
            raise RequestError(413, f"{len(files)} images in one request; the limit is "
                                    f"{_config.max_images}")
        return files
    body = request.get_data(cache=False)
    if mimetype in IMAGE_TYPES:
        return [body]
    if mimetype not in ("application/json", "text/json", "text/plain", ""):
        raise RequestError(415, f"Content-Type {mimetype} is not accepted. {USAGE} (curl: "
                                "-H 'Content-Type: application/json' --data-binary @file.json)")
    payload = _json_body(body)
    if isinstance(payload, dict) and "images" in payload:
        return _base64_images(payload["images"])
    if isinstance(payload, dict) and "data" in payload:
        return _array(payload["data"], _service.image_size)
    raise RequestError(400, f"expected a JSON object with 'images' or 'data'. {USAGE}")


def decode(blobs: list[bytes]) -> list:
    """Every header first (the whole request refused before any pixel is decoded), then the
    pixels, at a reduced scale for large JPEGs."""
    side, cost = _service.min_side, 0
    for index, blob in enumerate(blobs):
        try:
            cost += inspect(blob, side, LIMITS)
        except ImageError as err:
            raise RequestError(err.status, f"images[{index}] {err}") from None
    if cost > _config.max_request_pixels:
        raise RequestError(413, f"the images would decode to {cost} pixels; the limit per "
                                f"request is {_config.max_request_pixels}. Send fewer or "
                                "smaller images")
    try:
        return [open_image(blob, side, LIMITS) for blob in blobs]
    except ImageError as err:
        raise RequestError(err.status, f"an image {err}") from None


def _error(status: int, message: str):
    from azureml_inference_server_http.api.aml_response import AMLResponse

    log.warning("rejected request (%d): %s", status, message)
    return AMLResponse({"error": message}, status, json_str=True)


def _rawhttp(func):
    """The server's @rawhttp when it is installed (it is in the serving image)."""
    try:
        from azureml_inference_server_http.api.aml_request import rawhttp
    except ImportError:
        return func
    return rawhttp(func)


@_rawhttp
def run(request):
    started = time.perf_counter()
    try:
        parsed = parse(request)
        if isinstance(parsed, np.ndarray):
            predictions = predict_array(_service, parsed, _batcher)
        else:
            predictions = predict(_service, decode(parsed), _batcher)
    except RequestError as err:
        return _error(err.status, str(err))
    except Exception as err:  # noqa: BLE001 - werkzeug's 413 and other client-side failures
        status = getattr(err, "code", None)
        if isinstance(status, int) and 400 <= status < 500:
            return _error(status, getattr(err, "description", str(err)))
        raise
    log.info("scored %d image(s) in %.1f ms", len(predictions),
             (time.perf_counter() - started) * 1e3)
    return {"predictions": predictions}
