"""Scoring: the init()/run() contract in-process and through the real inference server.

Every client the Azure docs show (base64 JSON, the notebook's preprocessed float tensor, a raw
image body, multipart files) and hostile requests, each a 4xx that leaves the worker healthy and
costs it at most ~1 s of CPU and 200 MB of RAM.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
import socket
import struct
import threading
import time
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from endpoint_client import use_root
from PIL import Image
from support import until
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from image_classifier import score
from image_classifier.export import ExportConfig, export_model_dir
from mlops.specs import ROOT

SAMPLE = ROOT / "endpoints" / "sample-request.json"
# the tests that share the module's server run in one xdist worker (make test: --dist
# loadgroup), which starts it once
pytestmark = pytest.mark.xdist_group("score-server")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def images_of(data: Path, count: int) -> list[Path]:
    return sorted((data / "val").rglob("*.jpg"))[:count]


def request(body, content_type="application/json", method="POST") -> Request:
    """A request as the server hands it to run() (@rawhttp)."""
    if isinstance(body, str):
        body = body.encode()
    builder = EnvironBuilder(method=method, data=body, content_type=content_type)
    return Request(builder.get_environ())


def answer(response) -> tuple[int, dict]:
    if isinstance(response, dict):
        return 200, response
    return response.status_code, json.loads(response.get_data())


@pytest.fixture
def service(model_dir, monkeypatch):
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(model_dir))
    monkeypatch.setenv("SCORE_BACKEND", "torch")
    score.init()
    return score


def encoded(image: Image.Image, fmt: str, **save) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    return buffer.getvalue()


@pytest.mark.proof
def test_run_returns_labels_and_probabilities_for_several_images(service, tiny_data):
    body = json.dumps({"images": [b64(p.read_bytes()) for p in images_of(tiny_data, 3)]})
    status, out = answer(service.run(request(body)))
    assert status == 200 and len(out["predictions"]) == 3
    for prediction in out["predictions"]:
        probabilities = prediction["probabilities"]
        assert set(probabilities) == {"chickens", "turkeys"}
        assert abs(sum(probabilities.values()) - 1) < 1e-5
        assert prediction["label"] == max(probabilities, key=probabilities.get)


@pytest.mark.proof
def test_the_notebook_tensor_a_raw_body_and_multipart_agree(service, tiny_data):
    path = images_of(tiny_data, 1)[0]
    reference = answer(service.run(request(json.dumps({"images": [b64(path.read_bytes())]}))))
    tensor = service._service.preprocess.batch([Image.open(path).convert("RGB")])
    notebook = answer(service.run(request(json.dumps({"data": tensor.tolist()}))))
    raw = answer(service.run(request(path.read_bytes(), "image/jpeg")))
    builder = EnvironBuilder(method="POST", data={"a": (io.BytesIO(path.read_bytes()), "a.jpg"),
                                                  "b": (io.BytesIO(path.read_bytes()), "b.jpg")})
    multipart = answer(service.run(Request(builder.get_environ())))
    assert reference[0] == notebook[0] == raw[0] == multipart[0] == 200
    expected = reference[1]["predictions"][0]
    assert notebook[1]["predictions"][0]["label"] == expected["label"]
    assert raw[1]["predictions"] == [expected] and multipart[1]["predictions"] == [expected] * 2


@pytest.mark.proof
@pytest.mark.parametrize("fmt", ["WEBP", "TIFF", "BMP", "PNG"])
def test_every_format_training_reads_is_served(service, fmt):
    image = Image.new("RGB", (80, 60), (200, 50, 50))
    assert answer(service.run(request(encoded(image, fmt), "application/octet-stream")))[0] == 200


@pytest.mark.proof
def test_a_sixteen_bit_png_is_scored_as_training_sees_it(service):
    ramp = np.linspace(0, 65535, 96 * 96).reshape(96, 96).astype(np.uint16)
    png16 = encoded(Image.fromarray(ramp), "PNG")
    png8 = encoded(Image.fromarray((ramp >> 8).astype(np.uint8)), "PNG")
    sixteen = answer(service.run(request(png16, "image/png")))[1]["predictions"][0]
    eight = answer(service.run(request(png8, "image/png")))[1]["predictions"][0]
    for label, p in sixteen["probabilities"].items():
        assert abs(p - eight["probabilities"][label]) < 1e-3


@pytest.mark.proof
def test_init_finds_the_model_in_the_registered_layout(model_dir, tmp_path, monkeypatch):
    nested = tmp_path / "azureml-models" / "fowl-classifier" / "3" / "model"
    shutil.copytree(model_dir, nested)
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(tmp_path / "azureml-models" / "fowl-classifier"
                                                 / "3"))
    monkeypatch.setenv("SCORE_BACKEND", "auto")
    score.init()
    assert score._service.classes == ["chickens", "turkeys"]
    assert score._service.backend == "onnx"  # model.onnx travelled with the folder


def test_onnx_and_int8_are_served_and_agree_with_torch(model_dir, tiny_data, monkeypatch,
                                                       tmp_path, caplog):
    caplog.set_level("INFO", logger="image_classifier.export")
    folder = shutil.copytree(model_dir, tmp_path / "model")
    exported = export_model_dir(ExportConfig(model_dir=str(folder), data=str(tiny_data),
                                             int8=True))
    path, difference, report = exported.path, exported.difference, exported.int8
    assert path.name == "model.onnx" and difference <= 1e-4
    assert "int8 gate on 16 val images: top-1 agreement" in caplog.text
    assert (folder / "model.int8.onnx").is_file() == report.kept
    body = json.dumps({"images": [b64(p.read_bytes()) for p in images_of(tiny_data, 4)]})
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(folder))
    results = {}
    for backend in ("torch", "onnx") + (("int8",) if report.kept else ()):
        monkeypatch.setenv("SCORE_BACKEND", backend)
        score.init()
        assert score._service.backend == backend
        results[backend] = [[p["probabilities"][c] for c in ("chickens", "turkeys")]
                            for p in answer(score.run(request(body)))[1]["predictions"]]
    assert np.allclose(results["torch"], results["onnx"], atol=1e-4)
    if report.kept:
        agree = np.argmax(results["torch"], 1) == np.argmax(results["int8"], 1)
        assert agree.all()


def test_the_int8_gate_removes_a_model_that_fails_it(model_dir, tiny_data, tmp_path,
                                                     monkeypatch):
    from image_classifier import export
    from image_classifier.data import build_datasets
    from image_classifier.inference import load_model

    folder = shutil.copytree(model_dir, tmp_path / "model")  # model.onnx is there already
    monkeypatch.setattr(export, "AGREEMENT", 1.01)  # an impossible gate
    loaded = load_model(folder)
    bundle = build_datasets(str(tiny_data), loaded.image_size)
    report = export.quantize_int8(folder, bundle, loaded.transform)
    assert report.kept is False and not (folder / "model.int8.onnx").exists()
    monkeypatch.setenv("AZUREML_MODEL_DIR", str(folder))
    monkeypatch.setenv("SCORE_BACKEND", "int8")
    with pytest.raises(FileNotFoundError, match="model.int8.onnx does not exist"):
        score.init()


@pytest.mark.proof
def test_the_model_file_is_readable_by_the_server_user(model_dir):
    assert (model_dir / "model.pt").stat().st_mode & 0o044 == 0o044  # not mkstemp's 0600


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims a huge image: refused before any pixel is decoded."""
    data = bytearray(encoded(Image.new("L", (8, 8)), "PNG"))
    ihdr = struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return bytes(data)


def _png_with_icc(megabytes: int) -> bytes:
    """A tiny PNG carrying a huge compressed ICC profile chunk."""
    data = encoded(Image.new("RGB", (8, 8)), "PNG")
    profile = zlib.compress(b"\0" * megabytes * 2**20, 9)
    chunk = b"iCCP" + b"icc\0\0" + profile
    iccp = struct.pack(">I", len(chunk) - 4) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return data[:33] + iccp + data[33:]


def _thin_png() -> bytes:
    return encoded(Image.new("L", (1, 100_000)), "PNG")  # 177 bytes


def _gif() -> bytes:
    return encoded(Image.new("RGB", (8, 8)), "GIF")


def j(body) -> str:
    return json.dumps(body)


HOSTILE = {
    "malformed JSON": ('{"images": [', "application/json", 400, "not valid JSON"),
    "not an object": ('["abc"]', "application/json", 400, "with 'images' or 'data'"),
    "wrong key": (j({"pixels": [1]}), "application/json", 400, "with 'images' or 'data'"),
    "empty list": (j({"images": []}), "application/json", 400, "non-empty list"),
    "wrong item type": (j({"images": [42]}), "application/json", 400, "must be a base64 string"),
    "bad base64": (j({"images": ["not base64!!"]}), "application/json", 400, "not valid base64"),
    "data URL without data": (j({"images": ["data:x"]}), "application/json", 400,
                              "not valid base64"),
    "not an image": (j({"images": [b64(b"hello world")]}), "application/json", 400,
                     "not a readable image"),
    "GIF": (j({"images": [b64(_gif())]}), "application/json", 415, "send JPEG, PNG"),
    "too many images": (j({"images": ["aGk="] * 17}), "application/json", 413, "17 images"),
    "body over the cap": (j({"images": ["A" * (16 * 2**20)]}), "application/json", 413, ""),
    "decompression bomb": (j({"images": [b64(_png_header_only(30000, 30000))]}),
                           "application/json", 413, "larger than"),
    "thin strip 1 x 100000": (_thin_png(), "image/png", 400, "aspect ratio"),
    "2 MB ICC profile": (j({"images": [b64(_png_with_icc(2))]}), "application/json", 400,
                         "not a readable image"),
    "deeply nested JSON": ("[" * 100_000 + "]" * 100_000, "application/json", 400,
                           "nests too deeply"),
    "not UTF-8": (b"\xff\xfe\x00garbage", "application/json", 400, "not UTF-8"),
    "form content type": (j({"images": []}), "application/x-www-form-urlencoded", 415,
                          "Content-Type application/x-www-form-urlencoded is not accepted"),
    "ragged data": (j({"data": [[[1, 2], [3]]]}), "application/json", 400, "ragged"),
    "data of the wrong shape": (j({"data": [[[[0.0] * 8] * 8] * 3]}), "application/json", 400,
                                "this model takes [N, 3, 32, 32]"),
    "too many pixels in one request": (
        j({"images": [b64(encoded(Image.new("L", (5000, 5000)), "PNG"))] * 3}),
        "application/json", 413, "the limit per request"),
}


@pytest.mark.proof
@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_requests_get_a_4xx_with_a_message_in_process(service, case):
    body, content_type, status, message = HOSTILE[case]
    got, out = answer(service.run(request(body, content_type)))
    assert got == status and message in out["error"]


# ---- the real inference server (gunicorn + azureml-inference-server-http) on loopback ----

@dataclass(kw_only=True)
class Served:
    """The endpoint (its front, with its key) and blue's server behind it."""

    url: str  # http://127.0.0.1:<front port>
    headers: dict[str, str]  # its key
    pid: int  # blue's server (gunicorn's master)
    log: Path
    direct: str  # blue's server itself, for its health


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SCORE_BACKEND", "torch")
        monkeypatch.setenv("FRONT_HEAD_TIMEOUT_S", "3")
        endpoints = use_root(monkeypatch, tmp_path_factory.mktemp("endpoints"))
        endpoints.start(ROOT / "endpoints" / "blue.yml", "--model", str(model_dir))
        slot = endpoints.state().deployments["blue"]
        try:
            yield Served(url=f"http://127.0.0.1:{endpoints.port}", headers=endpoints.headers(),
                         pid=slot.pid, log=slot.log, direct=f"http://127.0.0.1:{slot.port}")
        finally:
            endpoints.stop()


def post(served: Served, body: bytes | str, content_type="application/json",
         timeout: float = 30) -> tuple[int, dict]:
    """POST as curl does: the front may answer 413 and close before the upload ends, and the
    answer is still read. The status is the scorer's: Azure answers its errors with 424 and
    the scorer's status in ms-azureml-model-error-statuscode."""
    import http.client

    data = body.encode() if isinstance(body, str) else body
    host, port = served.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.putrequest("POST", "/score")
        connection.putheader("Content-Type", content_type)
        connection.putheader("Content-Length", str(len(data)))
        for name, value in served.headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.send(data)  # the front may refuse the body before it all arrives
        response = connection.getresponse()
        status = response.status
        if status == 424:
            status = int(response.getheader("ms-azureml-model-error-statuscode"))
        return status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def _worker(master: int) -> int:
    """The scoring worker: gunicorn's master's child."""
    return int(Path(f"/proc/{master}/task/{master}/children").read_text().split()[0])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def _peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]
               ) / 1024


@pytest.mark.proof
def test_http_round_trip_with_the_sample_request(server):
    assert SAMPLE.stat().st_size < 64_000  # a small real JPEG, not a float tensor
    status, body = post(server, SAMPLE.read_text())
    assert status == 200 and body["predictions"][0]["label"] in ("chickens", "turkeys")


@pytest.mark.proof
def test_every_documented_client_over_http(server, tiny_data):
    path = images_of(tiny_data, 1)[0]
    assert post(server, path.read_bytes(), "image/jpeg")[0] == 200  # curl --data-binary @img.jpg
    boundary = "xYzBoundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jpg\""
            f"\r\nContent-Type: image/jpeg\r\n\r\n").encode() + path.read_bytes() + \
        f"\r\n--{boundary}--\r\n".encode()
    status, out = post(server, body, f"multipart/form-data; boundary={boundary}")
    assert status == 200 and len(out["predictions"]) == 1
    tensor = [[[[0.0] * 32] * 32] * 3]
    assert post(server, json.dumps({"data": tensor}))[0] == 200


@pytest.mark.proof
def test_hostile_requests_over_http_cost_little_and_leave_the_worker_healthy(server):
    worker = _worker(server.pid)
    assert post(server, SAMPLE.read_text())[0] == 200
    baseline = _peak_rss_mb(worker)
    for case, (body, content_type, status, message) in HOSTILE.items():
        before = _cpu_seconds(worker)
        got, out = post(server, body, content_type)
        assert got == status and message in out.get("error", ""), (case, got, out)
        assert _cpu_seconds(worker) - before < 1.5, case  # ~1 s of one worker's CPU at most
        with urllib.request.urlopen(f"{server.direct}/", timeout=10) as response:
            assert response.status == 200
    assert _peak_rss_mb(worker) - baseline < 200
    assert _worker(server.pid) == worker  # the same worker: none died or was recycled
    assert post(server, SAMPLE.read_text())[0] == 200


@pytest.mark.proof
def test_an_idle_connection_does_not_stall_other_clients(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as idle:
        idle.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\n")  # and then nothing more
        started = time.monotonic()
        assert post(server, SAMPLE.read_text(), timeout=20)[0] == 200
        assert time.monotonic() - started < 10


def test_sixty_four_stalled_clients_stop_no_one_and_get_a_408(server):
    """More half-sent requests than the worker has threads (4): the front holds them, every
    real request is answered within 5 s meanwhile, and each stalled one gets a 408 once its
    head's deadline passes (3 s here)."""
    host, port = server.url.removeprefix("http://").split(":")
    stalled = [socket.create_connection((host, int(port)), timeout=15) for _ in range(64)]
    try:
        for sock in stalled:
            sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Le")
        answered = 0
        for _ in range(8):
            started = time.monotonic()
            status, _ = post(server, SAMPLE.read_text(), timeout=20)
            answered += status == 200 and time.monotonic() - started < 5
        assert answered == 8
        assert all(sock.recv(64).startswith(b"HTTP/1.1 408") for sock in stalled)
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.proof
def test_fifty_pipelined_requests_on_one_connection_are_all_answered(server):
    host, port = server.url.removeprefix("http://").split(":")
    body = SAMPLE.read_bytes()
    key = server.headers["Authorization"].encode()
    request = (b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Authorization: " + key + b"\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(request * 50)
        reader = sock.makefile("rb")
        statuses = []
        for _ in range(50):
            statuses.append(reader.readline().split()[1])
            length = 0
            while (line := reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
    assert statuses == [b"200"] * 50


@pytest.mark.proof
def test_the_scoring_scripts_log_lines_reach_the_server_log(server):
    log_path = server.log
    assert post(server, SAMPLE.read_text())[0] == 200
    until(lambda: "scored 1 image(s)" in log_path.read_text(), 10, "the scored line in the log")
    assert "loaded torch model" in log_path.read_text()
    # the probe that shows an ONNX model's worker without torch sees it where it is loaded
    assert "libtorch" in Path(f"/proc/{_worker(server.pid)}/maps").read_text()


def test_an_onnx_model_is_served_by_a_worker_that_never_loads_torch(model_dir, tmp_path,
                                                                     monkeypatch):
    """model.onnx beside model.pt (the trainer's --export_onnx): blue serves it with no setting,
    and its worker process maps no torch library."""
    monkeypatch.delenv("SCORE_BACKEND", raising=False)
    endpoints = use_root(monkeypatch, tmp_path / "endpoints")
    endpoints.start(ROOT / "endpoints" / "blue.yml", "--model", str(model_dir))
    slot = endpoints.state().deployments["blue"]
    try:
        served = Served(url=f"http://127.0.0.1:{endpoints.port}", headers=endpoints.headers(),
                        pid=slot.pid, log=slot.log, direct=f"http://127.0.0.1:{slot.port}")
        status, body = post(served, SAMPLE.read_text())
        maps = Path(f"/proc/{_worker(slot.pid)}/maps").read_text()
        assert status == 200 and body["predictions"][0]["label"] in ("chickens", "turkeys")
        assert "loaded onnx model" in slot.log.read_text()
        assert "onnxruntime" in maps and "libtorch" not in maps and "torchvision" not in maps
    finally:
        endpoints.stop()


@pytest.mark.slow
def test_load_smoke_four_clients_bounded_in_count_and_time(server):
    """Four clients at once, 10 requests each or 20 seconds, whichever ends first."""
    body = SAMPLE.read_text()
    deadline = time.monotonic() + 20
    counts, failures = [0] * 4, []

    def client(index: int) -> None:
        while counts[index] < 10 and time.monotonic() < deadline:
            status, answer_ = post(server, body)
            if status != 200 or "predictions" not in answer_:
                failures.append(status)
            counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures and all(c > 0 for c in counts), (counts, failures)
