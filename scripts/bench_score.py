"""Scoring benchmark through the real inference server on loopback.

Serves a ResNet-18 (224 px) model folder with azureml-inference-server-http under gunicorn on
127.0.0.1 and measures requests/s, p50/p99 latency and failures at concurrency 1 and 4, with 1
and 8 real JPEGs per request, for fp32 torch, fp32 ONNX and int8 ONNX (onnxruntime). Beside
them, in the same run: the upstream request design (client-preprocessed 1x3x224x224 float JSON,
parsed per request) and each backend's in-process compute-bound rate (the model alone at its
best batch size). The model is untrained (serving speed does not depend on what it learned), so
its int8 copy is kept whatever the gate says and the gate's figures are printed for reference.

    python scripts/bench_score.py --data ../shared/data/hymenoptera_data
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_common import compute_bound  # noqa: E402
from bench_load import concurrent_load  # noqa: E402

from image_classifier import checkpoint, usable_cores  # noqa: E402
from image_classifier.data import IMAGENET_MEAN, IMAGENET_STD, build_datasets  # noqa: E402
from image_classifier.export import export_onnx, quantize_int8  # noqa: E402
from image_classifier.model import build_model  # noqa: E402
from image_classifier.model_files import ONNX_FILE  # noqa: E402
from image_classifier.preprocess import Preprocess  # noqa: E402
from mlops.endpoints import online  # noqa: E402
from mlops.runtime.service import stop_service  # noqa: E402


def make_model_dir(folder: Path, val_batch: torch.Tensor, bundle) -> Path:
    """Untrained ResNet-18 weights: serving speed does not depend on what the model learned."""
    model = build_model("resnet18", 2, weights="none").eval()
    best = {"model": model.state_dict(), "arch": "resnet18", "classes": ["ants", "bees"],
            "image_size": 224, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
            "epoch": 0, "best_val_acc": 0.0}
    checkpoint.write_model_dir(best, folder)
    print(f"onnx parity: {export_onnx(model, val_batch, folder / ONNX_FILE, metadata=best):.2e}")
    report = quantize_int8(folder, bundle, bundle.val.transform, keep=True)
    print(f"int8 gate (untrained model, for reference): agreement {report.agreement:.3f}")
    return folder


class Server:
    """blue's server alone (no endpoint front: the server's own rate), through the runtime as
    serve-local starts it."""

    def __init__(self, model_dir: Path, env: dict, script: str | None = None):
        extra = dict(env)
        if script:
            extra.update({"AML_APP_ROOT": str(ROOT / "scripts" / "bench"),
                          "AZUREML_ENTRY_SCRIPT": script, "PYTHONPATH": str(ROOT / "src")})
        self.state = Path(tempfile.mkdtemp(prefix="bench-score-"))
        request = online.ServeRequest(deployment=ROOT / "endpoints" / "blue.yml",
                                      model=str(model_dir))
        plan = online.prepare(request, online.load_deployment(request), folder=self.state,
                              extra=extra)
        self.slot = online.launch_server(plan)
        self.url = f"http://127.0.0.1:{self.slot.port}"

    def close(self) -> None:
        stop_service(self.slot.pid, grace=30)
        shutil.rmtree(self.state, ignore_errors=True)


def load(url: str, body: bytes, clients: int, seconds: float) -> dict:
    def make_client():
        def call() -> bool:
            request = urllib.request.Request(url + "/score", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    response.read()
            except (urllib.error.URLError, OSError):
                return False
            return True
        return call

    return concurrent_load(make_client, clients, seconds)


def preprocessing_seconds(jpegs: list[bytes], transform, repeats: int = 5) -> float:
    """CPU seconds the server spends per image before the model: header checks, decode,
    resize, crop, normalize (one thread, as one request thread does it)."""
    from image_classifier.images import inspect, open_image

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.process_time()
    for _ in range(repeats):
        for blob in jpegs:
            inspect(blob, 256)
            transform(open_image(blob, 256))
    torch.set_num_threads(threads)
    return (time.process_time() - started) / (repeats * len(jpegs))


def upstream_client_seconds(jpeg: Path, transform, repeats: int = 20) -> float:
    """What every upstream client pays per image before sending: decode, preprocess, JSON."""
    from PIL import Image

    started = time.perf_counter()
    for _ in range(repeats):
        tensor = transform(Image.open(jpeg).convert("RGB")).unsqueeze(0)
        json.dumps({"data": tensor.tolist()})
    return (time.perf_counter() - started) / repeats


BACKENDS = ("torch", "onnx", "int8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/hymenoptera_data"))
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    args = parser.parse_args(argv)
    bundle = build_datasets(args.data, 224)
    jpegs = [Path(p).read_bytes() for p, _ in bundle.val.samples[:8]]
    val_batch = torch.stack([bundle.val[i][0] for i in range(8)])
    bodies = {n: json.dumps({"images": [base64.b64encode(j).decode() for j in jpegs[:n]]})
              .encode() for n in (1, 8)}
    upstream = json.dumps({"data": val_batch[:1].tolist()}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_model_dir(Path(tmp) / "model", val_batch, bundle)
        rates = {}
        for backend in BACKENDS:
            batches = [val_batch.repeat(4, 1, 1, 1)[:size].numpy() for size in (1, 8, 32)]
            rates[backend], how = compute_bound(model_dir, backend, batches, seconds=3)
            print(f"compute-bound ({backend} in-process, best: {how}): "
                  f"{rates[backend]:.1f} images/s")
        client_s = upstream_client_seconds(Path(bundle.val.samples[0][0]), bundle.val.transform)
        prep_s = preprocessing_seconds(jpegs, Preprocess(224, IMAGENET_MEAN, IMAGENET_STD))
        print(f"server-side preprocessing per image (headers, decode, resize, normalize): "
              f"{prep_s * 1e3:.1f} ms of CPU")
        print(f"upstream client cost per image (decode, preprocess, float JSON): "
              f"{client_s * 1e3:.1f} ms\n")
        rows = []
        baseline_server = Server(model_dir, {"SCORE_BACKEND": "torch"}, "upstream_score.py")
        base = load(baseline_server.url, upstream, 1, args.seconds)
        baseline_server.close()
        rows.append(("upstream float JSON", "torch", 1, 1, len(upstream), base))
        # the default (a one-thread lane per core), one pass on every core, two server workers
        configs = [(f"{backend}{label}", {"SCORE_BACKEND": backend, **env})
                   for backend in BACKENDS for label, env in (
                       ("", {}), (" 1 lane", {"SCORE_LANES": "1"}),
                       (" 2 workers", {"WORKER_COUNT": "2"}))]
        for name, env in configs:
            server = Server(model_dir, env)
            for images in (1, 8):
                for clients in (1, 4):
                    result = load(server.url, bodies[images], clients, args.seconds)
                    rows.append(("base64 JPEG", name, clients, images, len(bodies[images]),
                                 result))
            server.close()
    print(f"{'request design':20} {'backend':16} {'conc':>4} {'img/req':>7} {'bytes/req':>10} "
          f"{'req/s':>7} {'img/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'failed':>6}")
    for design, backend, clients, images, size_bytes, r in rows:
        print(f"{design:20} {backend:16} {clients:4d} {images:7d} {size_bytes:10d} "
              f"{r['rps']:7.1f} {r['rps'] * images:7.1f} {r['p50']:7.1f} {r['p99']:7.1f} "
              f"{r['failed']:6d}")
    ours_c1 = max(r["rps"] for d, _, c, i, _, r in rows if d == "base64 JPEG" and c == 1
                  and i == 1)
    for backend in BACKENDS:
        c1 = max(r["rps"] for d, b, c, i, _, r in rows if d == "base64 JPEG" and c == 1
                 and i == 1 and b.split()[0] == backend)
        print(f"concurrency 1, 1 image/request, {backend}: {c1:.1f} req/s = "
              f"{c1 / base['rps']:.1f}x the upstream design's")
    failed = sum(r["failed"] for *_, r in rows)
    end_to_end = 1 / (1 / base["rps"] + client_s)
    print(f"\nconcurrency 1, 1 image/request: {ours_c1:.1f} req/s = {ours_c1 / base['rps']:.1f}x "
          f"the upstream design's server-side rate; {ours_c1 / end_to_end:.1f}x counting the "
          f"upstream client's preprocessing ({end_to_end:.1f} req/s) (target >= 5x)")
    cores = usable_cores()
    for backend in BACKENDS:
        best = max(r["rps"] * i for d, b, c, i, _, r in rows
                   if d == "base64 JPEG" and c == 4 and b.split()[0] == backend)
        compute_cpu = cores / rates[backend]  # CPU seconds per image at the compute-bound rate
        ceiling = compute_cpu / (compute_cpu + prep_s)
        print(f"concurrency 4, {backend}: best {best:.1f} images/s through the server = "
              f"{best / rates[backend]:.2f} of its compute-bound rate (target >= 0.9); bound: "
              f"the model takes {compute_cpu * 1e3:.1f} ms of CPU an image, decoding and "
              f"preprocessing {prep_s * 1e3:.1f} ms, so the {cores} cores top out at "
              f"{ceiling:.2f}")
    print(f"failed requests: {failed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
