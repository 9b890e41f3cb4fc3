"""Entry point: ``python -m image_classifier.train --data ... [--flag value ...]``.

The same command runs as one process, under ``torchrun``, and as an Azure ML command job with
``distribution: type: pytorch``. Re-running it with the same ``--output_dir`` resumes from the last
checkpoint (Azure low-priority nodes get preempted).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset

from . import checkpoint, distributed
from .config import TrainConfig, parse_config
from .data import IMAGENET_MEAN, IMAGENET_STD, DataBundle, DataError, build_datasets
from .engine import evaluate, seed_epoch, train_one_epoch
from .model import ModelError, build_model
from .tracking import MlflowTracker, NullTracker, confusion_figure, curves_figure

log = logging.getLogger("image_classifier")


def setup_logging(ctx: distributed.DistContext) -> None:
    """Rank 0 speaks at INFO; other ranks only warn unless LOG_LEVEL asks for more."""
    level = os.environ.get("LOG_LEVEL", "INFO" if ctx.is_main else "WARNING").upper()
    logging.basicConfig(
        level=level, force=True, stream=sys.stdout,
        format=f"%(asctime)s rank{ctx.rank} %(levelname)s %(message)s", datefmt="%H:%M:%S",
    )


def default_num_workers(ctx: distributed.DistContext) -> int:
    """GPU nodes: spare cores decode ahead. CPU training: the compute threads already use every
    core, and a worker process stealing one stalls them all (measured on 2 cores: 43 img/s
    inline vs 31 img/s with one worker), while draft decoding costs only a few ms an image."""
    if ctx.device.type != "cuda":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(8, max(1, (cores or 1) // ctx.local_world_size - 1))


def build_loaders(bundle: DataBundle, cfg: TrainConfig, ctx: distributed.DistContext):
    workers = cfg.num_workers if cfg.num_workers >= 0 else default_num_workers(ctx)
    # drop_last keeps rank shards disjoint (no padding duplicates); no effect with one process.
    sampler = DistributedSampler(bundle.train, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=cfg.seed, drop_last=True)
    # Validation is sharded without padding so every image counts exactly once in the sums.
    val_shard = Subset(bundle.val, range(ctx.rank, len(bundle.val), ctx.world_size))
    common = {"batch_size": cfg.batch_size, "num_workers": workers,
              "pin_memory": ctx.device.type == "cuda"}
    train = DataLoader(bundle.train, sampler=sampler, drop_last=False, **common)
    val = DataLoader(val_shard, shuffle=False, **common)
    return train, val, sampler


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.SGD(params, lr=cfg.learning_rate, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay)


@dataclass
class TrainState:
    epoch: int = 0
    best_val_acc: float = -1.0
    history: list[dict] = field(default_factory=list)
    best_confusion: list[list[int]] = field(default_factory=list)
    mlflow_run_id: str = ""
    config: dict = field(default_factory=dict)  # the config the checkpoint was trained with


def make_checkpoint(model, optimizer, scheduler, state: TrainState, cfg, classes) -> dict:
    return {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "epoch": state.epoch,
        "best_val_acc": state.best_val_acc, "history": state.history,
        "best_confusion": state.best_confusion, "mlflow_run_id": state.mlflow_run_id,
        "arch": cfg.arch, "classes": list(classes), "image_size": cfg.image_size,
        "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD), "config": cfg.to_dict(),
    }


def restore(path, model, optimizer, scheduler, cfg: TrainConfig, classes) -> TrainState:
    ckpt = checkpoint.load(path)
    mismatch = [key for key, ours in (("arch", cfg.arch), ("classes", list(classes)),
                                      ("image_size", cfg.image_size)) if ckpt[key] != ours]
    if mismatch:
        raise DataError(f"{path}: checkpoint differs from this run in {', '.join(mismatch)}. "
                        "Use a new --output_dir, or delete the old one to start over.")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    log.info("resuming from %s (epoch %d done)", path, ckpt["epoch"])
    return TrainState(ckpt["epoch"], ckpt["best_val_acc"], ckpt["history"],
                      ckpt["best_confusion"], ckpt["mlflow_run_id"], ckpt["config"])


def weights_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def run_epoch(epoch, cfg, ctx, parts, state: TrainState, tracker) -> None:
    model, ddp, optimizer, scheduler, criterion, loaders, bundle = parts
    train_loader, val_loader, sampler = loaders
    seed_epoch(cfg.seed, epoch)
    sampler.set_epoch(epoch)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("epoch %d rank %d sample indices %s", epoch, ctx.rank, list(sampler))
    started = time.perf_counter()
    show = ctx.is_main and sys.stderr.isatty()
    bar = _progress(len(train_loader), f"epoch {epoch}/{cfg.epochs}") if show else nullcontext()
    with bar as progress:
        train = train_one_epoch(ddp, train_loader, optimizer, criterion, ctx, cfg.precision,
                                cfg.channels_last, progress)
    lr = optimizer.param_groups[0]["lr"]
    scheduler.step()  # after the optimizer, once per epoch
    distributed.sync_buffers(model, ctx)
    val = evaluate(model, val_loader, criterion, ctx, len(bundle.classes), cfg.precision,
                   cfg.channels_last)
    seconds = time.perf_counter() - started
    state.epoch = epoch
    improved = val.acc > state.best_val_acc
    if improved:
        state.best_val_acc, state.best_confusion = val.acc, val.confusion
    row = {"epoch": epoch, "train_loss": train.loss, "train_acc": train.acc, "val_loss": val.loss,
           "val_acc": val.acc, "best_val_acc": state.best_val_acc, "lr": lr,
           "epoch_seconds": seconds, "train_images_per_s": train.count / seconds}
    state.history.append(row)
    if ctx.is_main:
        ckpt = make_checkpoint(model, optimizer, scheduler, state, cfg, bundle.classes)
        folder = checkpoint.checkpoint_dir(cfg.output_dir)
        if improved:  # best before last: last is the commit point a resume starts from
            checkpoint.atomic_save(ckpt, folder / checkpoint.BEST)
        checkpoint.atomic_save(ckpt, folder / checkpoint.LAST)
        tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=epoch)
    log.info("epoch %d/%d  train loss %.4f acc %.3f | val loss %.4f acc %.3f | best %.3f | %.1fs",
             epoch, cfg.epochs, train.loss, train.acc, val.loss, val.acc, state.best_val_acc,
             seconds)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


def export(model, best: dict, val_dataset, model_dir) -> None:
    """model.onnx beside model.pt, checked against torch on real validation images."""
    from .export import ONNX_FILE, export_onnx

    model.load_state_dict(best["model"])
    batch = torch.stack([val_dataset[i][0] for i in range(min(16, len(val_dataset)))])
    model = model.cpu().to(memory_format=torch.contiguous_format)
    difference = export_onnx(model, batch, model_dir / ONNX_FILE)
    log.info("wrote %s; parity max |onnxruntime - torch| = %.2e", model_dir / ONNX_FILE,
             difference)


def finalize(cfg: TrainConfig, model, state: TrainState, bundle: DataBundle, tracker) -> None:
    """Rank 0: the servable model folder, plots, and (optionally) ONNX and an MLflow model."""
    classes = bundle.classes
    best = checkpoint.load(checkpoint.checkpoint_dir(cfg.output_dir) / checkpoint.BEST)
    model_dir = checkpoint.write_model_dir(best, cfg.resolved_model_dir)
    if cfg.export_onnx:
        export(model, best, bundle.val, model_dir)
    tracker.log_figure(curves_figure(state.history), "training_curves.png")
    tracker.log_figure(confusion_figure(np.array(state.best_confusion), classes),
                       "confusion_matrix.png")
    if cfg.register_name:
        model.load_state_dict(best["model"])
        tracker.register_model(model, model_dir, cfg.register_name)
    log.info("best val acc %.3f (epoch %d); model written to %s", best["best_val_acc"],
             best["epoch"], model_dir)
    if tracker.run_id:
        log.info("MLflow run %s; browse with: make mlflow-ui", tracker.run_id)


def finalize_on_rank0(cfg, ctx, model, state, bundle, tracker) -> None:
    """Rank 0 finalizes; every rank learns the outcome, so none waits on a rank 0 that failed."""
    error = None
    if ctx.is_main:
        try:
            finalize(cfg, model, state, bundle, tracker)
        except (ModelError, OSError) as err:
            error = err
    failure = distributed.broadcast_object(str(error) if error else "", ctx)
    if error:
        raise error
    if failure:
        raise ModelError(f"rank 0 failed to write the model: {failure}")


def log_run_config(tracker, cfg: TrainConfig, state: TrainState) -> None:
    """Params once per run (MLflow params are immutable); a resume is recorded as tags."""
    if state.epoch == 0:
        tracker.log_params(cfg.to_dict())
        tracker.log_dict(cfg.to_dict(), "config.json")
        return
    changed = {k: v for k, v in cfg.to_dict().items() if state.config.get(k) != v}
    tracker.set_tags({f"resumed_at_epoch_{state.epoch}": json.dumps(changed)})


def train(cfg: TrainConfig, ctx: distributed.DistContext) -> TrainState:
    torch.manual_seed(cfg.seed)
    bundle = build_datasets(cfg.data, cfg.image_size, cfg.skip_bad_images,
                            cache_images_mb=cfg.cache_images_mb)
    log.info("data %s: %d train / %d val images, classes %s, %d unreadable skipped",
             bundle.root, len(bundle.train), len(bundle.val), bundle.classes, bundle.skipped)
    model = build_model(cfg.arch, len(bundle.classes), cfg.weights, cfg.freeze_backbone)
    model.to(ctx.device, memory_format=torch.channels_last if cfg.channels_last else
             torch.contiguous_format)
    optimizer = build_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, cfg.step_size, cfg.gamma)
    resume_from = checkpoint.find_resumable(cfg.output_dir)
    state = (restore(resume_from, model, optimizer, scheduler, cfg, bundle.classes)
             if resume_from else TrainState())
    ddp = (DistributedDataParallel(model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda"
                                   else None) if ctx.is_distributed else model)
    tracker = MlflowTracker(state.mlflow_run_id or None) if ctx.is_main else NullTracker()
    state.mlflow_run_id = tracker.run_id or ""
    ok = False
    try:
        log_run_config(tracker, cfg, state)
        parts = (model, ddp, optimizer, scheduler, nn.CrossEntropyLoss(),
                 build_loaders(bundle, cfg, ctx), bundle)
        for epoch in range(state.epoch + 1, cfg.epochs + 1):
            run_epoch(epoch, cfg, ctx, parts, state, tracker)
        if ctx.is_distributed:
            log.info("rank %d final weights digest %s", ctx.rank, weights_digest(model))
        finalize_on_rank0(cfg, ctx, model, state, bundle, tracker)
        ok = True
    finally:
        tracker.close(ok)
    return state


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    ctx = distributed.setup()
    setup_logging(ctx)
    try:
        train(cfg, ctx)
        return 0
    except (DataError, ModelError) as err:
        log.error("%s", err)
        return 2
    finally:
        distributed.cleanup()


if __name__ == "__main__":
    sys.exit(main())
