"""Scoring script for Azure ML online endpoints: the init()/run() contract.

Request:  {"images": ["<base64 JPEG or PNG>", ...]}   (the server preprocesses; one forward pass)
Response: {"predictions": [{"label": "chickens", "probabilities": {"chickens": 0.93, ...}}, ...]}

init() finds model.pt under AZUREML_MODEL_DIR (a registered model nests it; a job output does
not), rebuilds the network with the training code's builders and loads weights with
weights_only=True; with model.onnx beside it, onnxruntime serves instead (SCORE_BACKEND=torch
or onnx forces one). SCORE_THREADS caps threads per server worker (WORKER_COUNT workers).
Bad requests get a 4xx JSON error, never a 500, and leave the worker healthy.

The inference server loads this file by path, so imports are absolute (code: ../src is on
sys.path as the app root).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import os
import time
import warnings

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from image_classifier.data import build_transforms, resize_size
from image_classifier.inference import find_model_file, load_model

MAX_IMAGES = int(os.environ.get("SCORE_MAX_IMAGES", "16"))
MAX_BODY_BYTES = int(os.environ.get("SCORE_MAX_BODY_BYTES", str(16 * 2**20)))
MAX_PIXELS = int(os.environ.get("SCORE_MAX_PIXELS", str(36_000_000)))  # per image (6000 x 6000)
Image.MAX_IMAGE_PIXELS = MAX_PIXELS  # Pillow's bomb guard, at our limit (warns above, errs 2x)
log = logging.getLogger("image_classifier.score")
_service = None


class RequestError(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Service:
    """The loaded model: classes, eval transform and a batch -> probabilities function."""

    def __init__(self, model_dir: str, backend: str = "auto"):
        folder = find_model_file(model_dir).parent
        onnx_path = folder / "model.onnx"
        threads = int(os.environ.get("SCORE_THREADS", "0"))  # per worker; 0: the library default
        if threads:
            torch.set_num_threads(threads)
        self.backend = "onnx" if backend == "onnx" or (backend == "auto" and
                                                       onnx_path.is_file()) else "torch"
        if self.backend == "onnx":
            import onnxruntime

            meta = json.loads((folder / "model.json").read_text())
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            self.session = onnxruntime.InferenceSession(str(onnx_path), options,
                                                        providers=["CPUExecutionProvider"])
        else:
            loaded = load_model(folder)
            self.model, meta = loaded.model, loaded.metadata
        self.classes = list(meta["classes"])
        self.min_side = resize_size(meta["image_size"])
        self.transform = build_transforms(meta["image_size"], train=False, mean=meta["mean"],
                                          std=meta["std"])

    def probabilities(self, batch: torch.Tensor) -> np.ndarray:
        if self.backend == "onnx":
            logits = self.session.run(["logits"], {"input": batch.numpy()})[0]
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            return shifted / shifted.sum(axis=1, keepdims=True)
        with torch.inference_mode():
            return torch.softmax(self.model(batch).float(), dim=1).numpy()


def parse_request(raw) -> list[bytes]:
    if isinstance(raw, bytes | bytearray):
        raw = raw.decode("utf-8", errors="strict")
    if len(raw) > MAX_BODY_BYTES:
        raise RequestError(413, f"request body is {len(raw)} bytes; the limit is "
                                f"{MAX_BODY_BYTES}. Send fewer or smaller images per request")
    try:
        body = json.loads(raw)
    except ValueError as err:
        raise RequestError(400, f"request body is not valid JSON ({err})") from None
    images = body.get("images") if isinstance(body, dict) else None
    if not isinstance(images, list) or not images:
        raise RequestError(400, 'expected a JSON object {"images": ["<base64 JPEG or PNG>", '
                                '...]} with at least one image')
    if len(images) > MAX_IMAGES:
        raise RequestError(413, f"{len(images)} images in one request; the limit is "
                                f"{MAX_IMAGES}")
    decoded = []
    for index, item in enumerate(images):
        if not isinstance(item, str):
            raise RequestError(400, f"images[{index}] must be a base64 string, got "
                                    f"{type(item).__name__}")
        payload = item.split(",", 1)[1] if item.startswith("data:") else item  # data URLs too
        try:
            decoded.append(base64.b64decode(payload, validate=True))
        except (binascii.Error, ValueError):
            raise RequestError(400, f"images[{index}] is not valid base64") from None
    return decoded


def decode_image(data: bytes, index: int, min_side: int = 0) -> Image.Image:
    """Reject non-images and decompression bombs before decoding any pixels; decode large
    JPEGs at a reduced scale still at least ``min_side`` (the eval resize) on both sides."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))  # reads the header only
            if image.format not in ("JPEG", "PNG"):
                raise RequestError(415, f"images[{index}] is {image.format}; send JPEG or PNG")
            if min_side and image.format == "JPEG":
                image.draft("RGB", (min_side, min_side))
            return image.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise RequestError(413, f"images[{index}] is larger than the limit of {MAX_PIXELS} "
                                "pixels (decompression bomb protection)") from None
    except UnidentifiedImageError:
        raise RequestError(400, f"images[{index}] is not a readable JPEG or PNG image") from None
    except OSError as err:
        raise RequestError(400, f"images[{index}] could not be decoded ({err})") from None


def predict(service: Service, images: list[Image.Image]) -> list[dict]:
    """Pure: PIL images -> labels and per-class probabilities, one forward pass."""
    batch = torch.stack([service.transform(image) for image in images])
    probabilities = service.probabilities(batch)
    return [{"label": service.classes[int(row.argmax())],
             "probabilities": {c: round(float(p), 6) for c, p in zip(service.classes, row,
                                                                     strict=True)}}
            for row in probabilities]


def init() -> None:
    global _service
    model_dir = os.environ.get("AZUREML_MODEL_DIR", "")
    _service = Service(model_dir, os.environ.get("SCORE_BACKEND", "auto"))
    log.info("loaded %s model for %s from %s", _service.backend, _service.classes, model_dir)


def run(raw_data):
    started = time.perf_counter()
    try:
        images = [decode_image(data, i, _service.min_side)
                  for i, data in enumerate(parse_request(raw_data))]
        result = {"predictions": predict(_service, images)}
    except (RequestError, UnicodeDecodeError) as err:
        status = getattr(err, "status", 400)
        log.warning("rejected request (%d): %s", status, err)
        from azureml_inference_server_http.api.aml_response import AMLResponse

        return AMLResponse({"error": str(err)}, status, json_str=True)
    log.info("scored %d image(s) in %.1f ms", len(images), (time.perf_counter() - started) * 1e3)
    return result
