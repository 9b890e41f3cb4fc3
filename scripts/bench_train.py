"""Training benchmark: our data/compute settings vs the PyTorch tutorial's, side by side.

ResNet-18 from scratch, 224 px, 2 epochs on a real ImageFolder (default: ../shared's
hymenoptera_data). For each setting it prints epoch seconds, train and val images/s, the
compute-bound images/s (forward+backward on one pre-decoded batch of the same size) and their
ratio (data-pipeline efficiency), then the speed-up of ours over the tutorial and both val
accuracies. It uses the trainer's own builders and engine, so it measures what `make train-local`
runs.

    python scripts/bench_train.py --data ../shared/data/hymenoptera_data
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader
from torchvision.datasets.folder import default_loader

from image_classifier.data import build_datasets
from image_classifier.distributed import DistContext
from image_classifier.engine import evaluate, seed_epoch, train_one_epoch
from image_classifier.model import build_model


@dataclass
class Setting:
    name: str
    batch_size: int
    num_workers: int
    draft_decode: bool
    precision: str
    channels_last: bool
    cache_images_mb: int


def compute_bound_rate(model, batch, setting: Setting, ctx, steps: int) -> float:
    """Images/s of forward+backward+step alone, on one batch already decoded in memory."""
    images, targets = batch
    fmt = torch.channels_last if setting.channels_last else torch.contiguous_format
    images = images.to(memory_format=fmt)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    model.train()
    for step in range(steps + 1):
        if step == 1:  # the first step warms up kernels and allocator
            started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=setting.precision == "bf16"):
            loss = criterion(model(images), targets)
        loss.backward()
        optimizer.step()
    return steps * images.shape[0] / (time.perf_counter() - started)


def run_setting(setting: Setting, args, ctx) -> dict:
    bundle = build_datasets(args.data, 224, cache_images_mb=setting.cache_images_mb)
    if not setting.draft_decode:
        bundle.train.loader = bundle.val.loader = default_loader  # full-size decode
    loaders = [DataLoader(ds, batch_size=setting.batch_size, shuffle=shuffle,
                          num_workers=setting.num_workers)
               for ds, shuffle in ((bundle.train, True), (bundle.val, False))]
    torch.manual_seed(args.seed)
    model = build_model("resnet18", len(bundle.classes), "none")
    if setting.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    epochs = []
    for epoch in range(1, args.epochs + 1):
        seed_epoch(args.seed, epoch)
        started = time.perf_counter()
        train = train_one_epoch(model, loaders[0], optimizer, criterion, ctx, setting.precision,
                                setting.channels_last)
        train_s = time.perf_counter() - started
        val = evaluate(model, loaders[1], criterion, ctx, len(bundle.classes), setting.precision,
                       setting.channels_last)
        epoch_s = time.perf_counter() - started
        epochs.append({"epoch_s": epoch_s, "train_ips": train.count / train_s,
                       "val_ips": val.count / (epoch_s - train_s), "val_acc": val.acc})
        print(f"  {setting.name} epoch {epoch}: {epoch_s:.1f}s, train {train.count / train_s:.1f}"
              f" img/s, val {val.count / (epoch_s - train_s):.1f} img/s, val acc {val.acc:.3f}",
              flush=True)
    batch = next(iter(loaders[0]))
    compute = compute_bound_rate(model, batch, setting, ctx, args.compute_steps)
    steady = epochs[-1]  # epoch 1 is printed above: it also fills the decoded-image cache
    return {**steady, "compute_ips": compute, "efficiency": steady["train_ips"] / compute,
            "first_efficiency": epochs[0]["train_ips"] / compute,
            "total_s": sum(e["epoch_s"] for e in epochs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/hymenoptera_data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compute_steps", type=int, default=8)
    parser.add_argument("--ours_batch_size", type=int, default=32)
    parser.add_argument("--ours_workers", type=int, default=0, help="the trainer's CPU default")
    parser.add_argument("--ours_precision", default="bf16")
    parser.add_argument("--ours_channels_last", type=int, default=1)
    parser.add_argument("--ours_cache_images_mb", type=int, default=1024)
    args = parser.parse_args(argv)
    ctx = DistContext(0, 1, 0, torch.device("cpu"))
    settings = [
        Setting("ours", args.ours_batch_size, args.ours_workers, True, args.ours_precision,
                bool(args.ours_channels_last), args.ours_cache_images_mb),
        Setting("tutorial", 4, 4, False, "fp32", False, 0),
    ]
    print(f"bench-train: resnet18 from scratch, 224 px, {args.epochs} epochs, {args.data}, "
          f"{torch.get_num_threads()} threads")
    results = {s.name: run_setting(s, args, ctx) for s in settings}
    print(f"\n{'setting':10} {'batch':>5} {'workers':>7} {'decode':>6} {'prec':>5} {'NHWC':>5} "
          f"{'epoch s':>8} {'train/s':>8} {'val/s':>7} {'compute/s':>9} {'data eff':>8} "
          f"{'val acc':>7}")
    for s in settings:
        r = results[s.name]
        print(f"{s.name:10} {s.batch_size:5d} {s.num_workers:7d} "
              f"{'draft' if s.draft_decode else 'full':>6} {s.precision:>5} "
              f"{'yes' if s.channels_last else 'no':>5} {r['epoch_s']:8.1f} {r['train_ips']:8.1f} "
              f"{r['val_ips']:7.1f} {r['compute_ips']:9.1f} {r['efficiency']:8.2f} "
              f"{r['val_acc']:7.3f}")
    ours, tutorial = results["ours"], results["tutorial"]
    speedup = tutorial["total_s"] / ours["total_s"]
    print(f"\nspeed-up (total time, tutorial / ours): {speedup:.2f}x   target >= 2x")
    print(f"data-pipeline efficiency (ours, last epoch): {ours['efficiency']:.2f}   target >= 0.95"
          f"  (first epoch, decoding every image: {ours['first_efficiency']:.2f})")
    print(f"val acc: ours {ours['val_acc']:.3f} vs tutorial {tutorial['val_acc']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
