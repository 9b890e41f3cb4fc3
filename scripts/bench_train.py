"""Training benchmark: what a user gets by default against the PyTorch tutorial's settings.

ResNet-18 from scratch, 224 px, on a real ImageFolder (default: ../shared's hymenoptera_data),
both at the tutorial's learning-rate schedule (SGD 0.001, momentum 0.9, StepLR 7/0.1):
- ours: the trainer's defaults, through its own builders (build_datasets with the image check
  that fills the decoded-image cache, precision auto and channels_last auto, batch 32, inline
  loading on CPU);
- tutorial: batch 4, 4 loader workers, full-size decoding, fp32, no cache.
Per epoch it prints seconds, train images/s and the data-pipeline efficiency (train images/s
over the compute-bound rate: forward+backward on one decoded batch, same settings). At the end:
seconds per epoch, and time to the same validation accuracy (the best both reach), setup
included (for ours, the image check).

    python scripts/bench_train.py --data ../shared/data/hymenoptera_data [--epochs 6]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.datasets.folder import default_loader

from image_classifier.checkpoint import TrainState
from image_classifier.config import TrainConfig
from image_classifier.data import Loaders, build_datasets
from image_classifier.distributed import DistContext
from image_classifier.engine import Fast, Training, autocast, evaluate, seed_epoch, train_one_epoch
from image_classifier.loading import collate
from image_classifier.model import build_model
from image_classifier.precision import resolve_channels_last, resolve_precision


@dataclass(kw_only=True)
class Setting:
    name: str
    batch_size: int
    num_workers: int
    draft_decode: bool
    precision: str
    channels_last: bool
    cache_images_mb: int


def compute_bound_rate(model, batch, *, setting: Setting, ctx, steps: int) -> float:
    """Images/s of forward+backward+step alone, on one batch already decoded in memory."""
    images, targets, _ = batch
    fmt = torch.channels_last if setting.channels_last else torch.contiguous_format
    images = images.to(memory_format=fmt)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    model.train()
    for step in range(steps + 1):
        if step == 1:  # the first step warms up kernels and allocator
            started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast(ctx, Fast(setting.precision, setting.channels_last)):
            loss = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
    return steps * images.shape[0] / (time.perf_counter() - started)


def run_setting(setting: Setting, args, ctx) -> dict:
    started = time.perf_counter()
    bundle = build_datasets(args.data, 224, cache_images_mb=setting.cache_images_mb)
    if not setting.draft_decode:
        bundle.train.loader = bundle.val.loader = default_loader  # full-size decode
    setup = time.perf_counter() - started
    sampler = DistributedSampler(bundle.train, num_replicas=1, rank=0, shuffle=True,
                                 seed=args.seed)  # one process: a plain shuffle
    loaders = [DataLoader(ds, batch_size=setting.batch_size, sampler=shuffle,
                          num_workers=setting.num_workers, collate_fn=collate)
               for ds, shuffle in ((bundle.train, sampler), (bundle.val, None))]
    torch.manual_seed(args.seed)
    model = build_model("resnet18", len(bundle.classes), weights="none")
    if setting.channels_last:
        model = model.to(memory_format=torch.channels_last)
    compute = compute_bound_rate(build_model("resnet18", len(bundle.classes), weights="none").to(
        memory_format=torch.channels_last if setting.channels_last else torch.contiguous_format),
        next(iter(loaders[0])), setting=setting, ctx=ctx, steps=args.compute_steps)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 7, 0.1)
    fast = Fast(setting.precision, setting.channels_last)
    run = Training(bundle=bundle, model=model, optimizer=optimizer, scheduler=scheduler,
                   scaler=None, loaders=Loaders(*loaders, sampler), state=TrainState(), fast=fast)
    cfg = TrainConfig(data=args.data, batch_size=setting.batch_size)
    epochs, elapsed = [], setup
    for epoch in range(1, args.epochs + 1):
        seed_epoch(args.seed, epoch)
        sampler.set_epoch(epoch)
        begin = time.perf_counter()
        train = train_one_epoch(run, cfg, ctx)
        train_s = time.perf_counter() - begin
        scheduler.step()
        val = evaluate(model, loaders[1], ctx, num_classes=len(bundle.classes), fast=fast)
        epoch_s = time.perf_counter() - begin
        elapsed += epoch_s
        row = {"epoch_s": epoch_s, "train_ips": train.count / train_s, "val_acc": val.acc,
               "elapsed": elapsed, "efficiency": train.count / train_s / compute}
        epochs.append(row)
        print(f"  {setting.name} epoch {epoch}: {epoch_s:.1f}s, train {row['train_ips']:.1f} "
              f"img/s, data-pipeline efficiency {row['efficiency']:.2f}, val acc "
              f"{val.acc:.3f}", flush=True)
    return {"setup_s": setup, "compute_ips": compute, "epochs": epochs}


def time_to(result: dict, accuracy: float) -> tuple[float, int]:
    for index, row in enumerate(result["epochs"], start=1):
        if row["val_acc"] >= accuracy - 1e-9:
            return row["elapsed"], index
    return float("inf"), 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/hymenoptera_data")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compute_steps", type=int, default=8)
    args = parser.parse_args(argv)
    ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    precision, why = resolve_precision("auto", ctx.device)
    settings = [Setting(name="ours", batch_size=32, num_workers=0, draft_decode=True,
                        precision=precision,
                        channels_last=resolve_channels_last("auto", precision, ctx.device),
                        cache_images_mb=1024),
                Setting(name="tutorial", batch_size=4, num_workers=4, draft_decode=False,
                        precision="fp32", channels_last=False, cache_images_mb=0)]
    print(f"bench-train: resnet18 from scratch, 224 px, {args.epochs} epochs, {args.data}, "
          f"{torch.get_num_threads()} threads; defaults here: precision {precision} ({why})")
    results = {s.name: run_setting(s, args, ctx) for s in settings}
    ours, tutorial = results["ours"], results["tutorial"]
    for name, result in results.items():
        efficiency = " ".join(f"{row['efficiency']:.2f}" for row in result["epochs"])
        seconds = sum(row["epoch_s"] for row in result["epochs"]) / len(result["epochs"])
        print(f"{name:9} setup {result['setup_s']:5.1f}s  {seconds:5.1f} s/epoch  compute-bound "
              f"{result['compute_ips']:5.1f} img/s  efficiency per epoch: {efficiency}")
    target = min(max(r["val_acc"] for r in ours["epochs"]),
                 max(r["val_acc"] for r in tutorial["epochs"]))
    (ours_t, ours_e), (tut_t, tut_e) = time_to(ours, target), time_to(tutorial, target)
    print(f"\ntime to val acc {target:.3f} (the best both reach), setup included: ours "
          f"{ours_t:.1f}s (epoch {ours_e}), tutorial {tut_t:.1f}s (epoch {tut_e}): "
          f"{tut_t / ours_t:.2f}x")
    per_epoch = (sum(r["epoch_s"] for r in tutorial["epochs"]) /
                 sum(r["epoch_s"] for r in ours["epochs"]))
    print(f"seconds per epoch, tutorial / ours: {per_epoch:.2f}x   target >= 2x")
    first = ours["epochs"][0]["efficiency"]
    print(f"data-pipeline efficiency, ours: epoch 1 {first:.2f}, mean "
          f"{sum(r['efficiency'] for r in ours['epochs']) / len(ours['epochs']):.2f}   "
          "target >= 0.95 from the first epoch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
