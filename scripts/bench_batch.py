"""Benchmark batch-local: images/s over a real folder against the in-process compute-bound rate.

    python scripts/bench_batch.py --data ../shared/data/hymenoptera_data [--processes 2]

Scores the validation split (153 JPEGs for hymenoptera) with the repo's batch deployment spec
through `python -m mlops.batch`, `--processes` scoring processes with cores / processes threads
each and mini-batches of --mini_batch_size, on an untrained ResNet-18 (224 px, torch fp32:
throughput does not depend on what the model learned). The compute-bound rate is the same
backend in this process, with every core, on batches already decoded and preprocessed. A first
run over one mini-batch's images warms what a user's session keeps warm (the tracking server,
the spec's verdict); the second is timed. Printed: end-to-end images/s (batch-local's start to
its last row, the processes' start and init() included) and steady-state images/s (first
mini-batch start to last mini-batch end), each as a ratio to the compute-bound rate.
Targets (issue 64): end to end >= 0.6, steady state >= 0.9, with 2 processes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_common import compute_bound  # noqa: E402

from image_classifier import checkpoint, usable_cores  # noqa: E402
from image_classifier.data import IMAGENET_MEAN, IMAGENET_STD, build_datasets  # noqa: E402
from image_classifier.model import build_model  # noqa: E402
from mlops import batch  # noqa: E402


def model_dir(folder: Path) -> Path:
    model = build_model("resnet18", 2, weights="none").eval()
    checkpoint.write_model_dir({"model": model.state_dict(), "arch": "resnet18",
                                "classes": ["ants", "bees"], "image_size": 224,
                                "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
                                "epoch": 0, "best_val_acc": 0.0}, folder)
    return folder


def deployment(tmp: Path, processes: int, mini_batch: int) -> Path:
    spec = yaml.safe_load((ROOT / "endpoints/batch/deployment.yml").read_text())
    spec["code_configuration"]["code"] = str(ROOT / "src")
    spec["resources"]["instance_count"] = 1
    spec["settings"].update(max_concurrency_per_instance=processes, mini_batch_size=mini_batch)
    threads = max(1, usable_cores() // processes)
    spec["settings"]["environment_variables"] = {"SCORE_THREADS": str(threads),
                                                 "SCORE_BACKEND": "torch",
                                                 "OMP_NUM_THREADS": str(threads)}
    path = tmp / "deployment.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/hymenoptera_data"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--mini_batch_size", type=int, default=8)
    args = parser.parse_args(argv)
    source = Path(args.data) / "val"
    count = sum(1 for p in source.rglob("*") if p.is_file())
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        tmp = Path(tmp)
        folder = model_dir(tmp / "model")
        val = build_datasets(args.data, 224).val
        images = torch.stack([val[i][0] for i in range(16)])
        rate, how = compute_bound(folder, "torch", [images], seconds=5)
        spec = deployment(tmp, args.processes, args.mini_batch_size)
        warm = tmp / "warm-up"
        warm.mkdir()
        for path in sorted(p for p in source.rglob("*") if p.is_file())[:args.mini_batch_size]:
            shutil.copyfile(path, warm / path.name)
        batch.main([str(spec), "--input", str(warm), "--model", str(folder), "--run-dir",
                    str(tmp / "warm-run"), "--max-procs", str(args.processes)])
        started = time.perf_counter()
        code = batch.main([str(spec), "--input", str(source), "--model", str(folder),
                           "--run-dir", str(tmp / "run"), "--max-procs", str(args.processes)])
        total = time.perf_counter() - started
        done = [json.loads(p.read_text()) for p in (tmp / "run/work/results").glob("*.json")]
    steady = max(o["ended"] for o in done) - min(o["started"] for o in done)
    scored = sum(o["returned"] for o in done)
    print(f"\nbench-batch: {count} files ({scored} scored), {args.processes} processes, "
          f"mini-batches of {args.mini_batch_size}, exit {code}")
    print(f"compute-bound (torch fp32 in-process, best: {how}): {rate:.1f} images/s")
    print(f"batch-local end to end (startup and init() included): {count / total:.1f} images/s"
          f" = {count / total / rate:.2f} of compute-bound   target >= 0.6")
    print(f"batch-local steady state (first mini-batch to last): {count / steady:.1f} images/s"
          f" = {count / steady / rate:.2f} of compute-bound   target >= 0.9")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
