"""Scoring: the init()/run() contract in-process, ONNX parity, and the real inference server."""

from __future__ import annotations

import base64
import io
import json
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import train_args
from PIL import Image

from image_classifier import score
from image_classifier.export import export_model_dir
from image_classifier.train import main as train_main
from mlops.serve import server_command, server_env, wait_healthy
from mlops.specs import ROOT

SAMPLE = ROOT / "endpoints" / "sample-request.json"


@pytest.fixture(scope="session")
def model_dir(tiny_data, tmp_path_factory) -> Path:
    """A model trained on tiny data, exported to ONNX by the trainer's own flag."""
    root = tmp_path_factory.mktemp("trained")
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        assert train_main(train_args(tiny_data, root / "out", epochs=1, export_onnx="True")) == 0
    return root / "out" / "model"


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def images_of(data: Path, count: int) -> list[Path]:
    return sorted((data / "val").rglob("*.jpg"))[:count]


@pytest.fixture
def service(model_dir, monkeypatch):
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(model_dir))
    monkeypatch.setenv("SCORE_BACKEND", "torch")
    score.init()
    return score


def test_run_returns_labels_and_probabilities_for_several_images(service, tiny_data):
    paths = images_of(tiny_data, 3)
    out = service.run(json.dumps({"images": [b64(p) for p in paths]}))
    assert len(out["predictions"]) == 3
    for prediction in out["predictions"]:
        probabilities = prediction["probabilities"]
        assert set(probabilities) == {"chickens", "turkeys"}
        assert all(isinstance(v, float) for v in probabilities.values())
        assert abs(sum(probabilities.values()) - 1) < 1e-5
        assert prediction["label"] == max(probabilities, key=probabilities.get)


def test_init_finds_the_model_in_the_registered_layout(model_dir, tmp_path, monkeypatch):
    nested = tmp_path / "azureml-models" / "fowl-classifier" / "3" / "model"
    shutil.copytree(model_dir, nested)
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(tmp_path / "azureml-models" / "fowl-classifier"
                                                 / "3"))
    score.init()
    assert score._service.classes == ["chickens", "turkeys"]
    assert score._service.backend == "onnx"  # model.onnx travelled with the folder


def test_onnx_is_served_when_present_and_agrees_with_torch(model_dir, tiny_data, monkeypatch):
    path, difference = export_model_dir(str(model_dir), str(tiny_data))
    assert path.name == "model.onnx" and difference <= 1e-4
    body = json.dumps({"images": [b64(p) for p in images_of(tiny_data, 4)]})
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(model_dir))
    results = {}
    for backend in ("torch", "onnx"):
        monkeypatch.setenv("SCORE_BACKEND", backend)
        score.init()
        assert score._service.backend == backend
        results[backend] = [[p["probabilities"][c] for c in ("chickens", "turkeys")]
                            for p in score.run(body)["predictions"]]
    assert np.allclose(results["torch"], results["onnx"], atol=1e-4)


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims a huge image: a decompression bomb is caught before decoding."""
    buffer = io.BytesIO()
    Image.new("L", (8, 8)).save(buffer, format="PNG")
    data = bytearray(buffer.getvalue())
    ihdr = struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return bytes(data)


def _gif() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="GIF")
    return base64.b64encode(buffer.getvalue()).decode()


BAD_REQUESTS = {
    "malformed JSON": ('{"images": [', 400, "not valid JSON"),
    "not an object": ('["abc"]', 400, 'expected a JSON object {"images"'),
    "wrong key": ('{"data": [[0.1, 0.2]]}', 400, 'expected a JSON object {"images"'),
    "empty list": ('{"images": []}', 400, "at least one image"),
    "wrong item type": ('{"images": [42]}', 400, "images[0] must be a base64 string"),
    "bad base64": ('{"images": ["not base64!!"]}', 400, "images[0] is not valid base64"),
    "not an image": (json.dumps({"images": [base64.b64encode(b"hello world").decode()]}), 400,
                     "images[0] is not a readable JPEG or PNG image"),
    "unsupported format": (json.dumps({"images": [_gif()]}), 415, "send JPEG or PNG"),
    "too many images": (json.dumps({"images": ["aGk="] * 17}), 413, "17 images"),
    "body over the cap": (json.dumps({"images": ["A" * (16 * 2**20)]}), 413, "the limit is"),
    "decompression bomb": (json.dumps({"images": [base64.b64encode(
        _png_header_only(30000, 30000)).decode()]}), 413, "decompression bomb protection"),
    "bomb just over the limit": (json.dumps({"images": [base64.b64encode(
        _png_header_only(6001, 6000)).decode()]}), 413, "larger than the limit of 36000000"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_bad_requests_get_a_4xx_with_a_message_in_process(service, case):
    body, status, message = BAD_REQUESTS[case]
    response = service.run(body)
    assert response.status_code == status
    assert message in json.loads(response.get_data())["error"]


# ---- the real inference server (gunicorn + azureml-inference-server-http) on loopback ----

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    port = _free_port()
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    env = server_env(ROOT / "endpoints" / "blue.yml", model_dir, {"SCORE_BACKEND": "torch"})
    process = subprocess.Popen(server_command(port), env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def post(url: str, body: bytes | str, timeout: float = 30) -> tuple[int, dict]:
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(f"{url}/score", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_http_round_trip_with_the_sample_request(server):
    assert SAMPLE.stat().st_size < 64_000  # a small real JPEG, not a float tensor
    status, body = post(server, SAMPLE.read_text())
    assert status == 200
    (prediction,) = body["predictions"]
    assert prediction["label"] in ("chickens", "turkeys")


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_bad_requests_over_http_leave_the_server_healthy(server, case):
    body, status, message = BAD_REQUESTS[case]
    got, answer = post(server, body)
    assert got == status and message in answer["error"]
    with urllib.request.urlopen(f"{server}/", timeout=10) as response:
        assert response.status == 200
    assert post(server, SAMPLE.read_text())[0] == 200


def test_body_that_is_not_utf8_is_a_400(server):
    assert post(server, b"\xff\xfe\x00garbage")[0] == 400


@pytest.mark.slow
def test_load_smoke_four_clients_twenty_seconds(server):
    body = SAMPLE.read_text()
    deadline = time.monotonic() + 20
    counts, failures = [0] * 4, []

    def client(index: int) -> None:
        while time.monotonic() < deadline:
            status, answer = post(server, body)
            if status != 200 or "predictions" not in answer:
                failures.append(status)
            counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures and all(c > 0 for c in counts), (counts, failures)
