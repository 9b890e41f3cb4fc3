"""Entry point: ``python -m image_classifier.train --data ... [--flag value ...]``.

The same command runs as one process, under ``torchrun``, and as an Azure ML command job with
``distribution: type: pytorch``. Re-running it with the same ``--output_dir`` resumes from the last
checkpoint (Azure low-priority nodes get preempted) and continues the same MLflow run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from . import checkpoint, distributed, exit_with, usable_cores
from .checkpoint import DamagedFile, ResumeError, TrainState, make_checkpoint, restore
from .config import TrainConfig, parse_config
from .data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DataBundle,
    DataError,
    build_datasets,
    build_loaders,
    build_transforms,
)
from .engine import (
    BadSampleError,
    Fast,
    Training,
    evaluate,
    seed_epoch,
    train_one_epoch,
)
from .model import ModelError, build_model
from .precision import grad_scaler, resolve_channels_last, resolve_precision
from .tracking import MlflowTracker, NullTracker, confusion_figure, curves_figure

log = logging.getLogger("image_classifier")
USER_ERRORS = (DataError, ModelError, ResumeError, BadSampleError, DamagedFile)


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
    return min(8, max(1, usable_cores() // ctx.local_world_size - 1))


def cache_mb(cfg: TrainConfig, workers: int) -> int:
    """The decoded-image cache lives in the reading process: with loader workers each would
    keep its own copy and lose it every epoch, so it is off there (their parallel decoding is
    what hides decode time on GPU nodes)."""
    if workers and cfg.cache_images_mb:
        log.info("decoded-image cache off: %d loader workers would each hold a copy", workers)
        return 0
    return cfg.cache_images_mb


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.SGD(params, lr=cfg.learning_rate, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay)


def weights_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def run_epoch(epoch: int, cfg: TrainConfig, *, ctx: distributed.DistContext, run: Training,
              tracker) -> None:
    state, loaders = run.state, run.loaders
    seed_epoch(cfg.seed, epoch, ctx.rank)
    loaders.sampler.set_epoch(epoch)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("epoch %d rank %d sample indices %s", epoch, ctx.rank, list(loaders.sampler))
    started = time.perf_counter()
    show = ctx.is_main and sys.stderr.isatty()
    bar = _progress(len(loaders.train), f"epoch {epoch}/{cfg.epochs}") if show else nullcontext()
    with bar as progress:
        train = train_one_epoch(run, cfg, ctx, progress)
    lr = run.optimizer.param_groups[0]["lr"]
    run.scheduler.step()  # after the optimizer, once per epoch
    distributed.sync_buffers(run.model, ctx)
    val = evaluate(run.model, loaders.val, ctx, num_classes=len(run.bundle.classes),
                   fast=run.fast, skip_bad=cfg.skip_bad_images)
    seconds = time.perf_counter() - started
    state.epoch = epoch
    improved = val.acc > state.best_val_acc
    if improved:
        state.best_val_acc, state.best_confusion = val.acc, val.confusion
    row = {"epoch": epoch, "train_loss": train.loss, "train_acc": train.acc, "val_loss": val.loss,
           "val_acc": val.acc, "best_val_acc": state.best_val_acc, "lr": lr,
           "epoch_seconds": seconds, "train_images_per_s": train.count / seconds,
           "skipped_images": train.skipped + val.skipped}
    state.history.append(row)
    if ctx.is_main:
        ckpt = make_checkpoint(run.parts(), state, cfg=cfg, classes=run.bundle.classes,
                               mean=IMAGENET_MEAN, std=IMAGENET_STD)
        folder = checkpoint.checkpoint_dir(cfg.output_dir)
        if improved:  # best before last: last is the commit point a resume starts from
            checkpoint.atomic_save(ckpt, folder / checkpoint.BEST)
        checkpoint.atomic_save(ckpt, folder / checkpoint.LAST)
        # after the commit: a kill in between is repaired on resume (tracker.complete)
        tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=epoch)
    log.info("epoch %d/%d  train loss %.4f acc %.3f | val loss %.4f acc %.3f | best %.3f | %.1fs",
             epoch, cfg.epochs, train.loss, train.acc, val.loss, val.acc, state.best_val_acc,
             seconds)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)


def export(model, best: dict[str, object], *, bundle: DataBundle, model_dir, int8: bool) -> None:
    """model.onnx beside model.pt, checked against torch on real validation images; with int8,
    the gated int8 model too (export.py)."""
    from .export import export_onnx, quantize_int8, sample_batch
    from .model_files import INT8_FILE, ONNX_FILE

    model.load_state_dict(best["model"])
    transform = build_transforms(best["image_size"], train=False)
    model = model.cpu().to(memory_format=torch.contiguous_format)
    difference = export_onnx(model, sample_batch(bundle.val, transform), model_dir / ONNX_FILE,
                             metadata=best)
    checkpoint.record_file(model_dir, ONNX_FILE)
    log.info("wrote %s; parity max |onnxruntime - torch| = %.2e", model_dir / ONNX_FILE,
             difference)
    if int8 and quantize_int8(model_dir, bundle, transform).kept:
        checkpoint.record_file(model_dir, INT8_FILE)


def finalize(cfg: TrainConfig, model, *, state: TrainState, bundle: DataBundle, tracker) -> None:
    """Rank 0: the servable model folder, plots, and (optionally) ONNX and an MLflow model."""
    classes = bundle.classes
    best = checkpoint.load(checkpoint.checkpoint_dir(cfg.output_dir) / checkpoint.BEST)
    model_dir = checkpoint.write_model_dir(best, cfg.resolved_model_dir)
    if cfg.export_onnx or cfg.export_int8:
        export(model, best, bundle=bundle, model_dir=model_dir, int8=cfg.export_int8)
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


def finalize_on_rank0(cfg, ctx, *, model, state, bundle, tracker) -> None:
    """Rank 0 finalizes; every rank learns the outcome, whatever it was (a full disk, the ONNX
    exporter's RuntimeError, an MLflow error), so none waits on a rank 0 that failed."""
    error = None
    if ctx.is_main:
        try:
            finalize(cfg, model, state=state, bundle=bundle, tracker=tracker)
        except Exception as err:  # noqa: BLE001 - broadcast first, then re-raise it as it was
            error = err
    failure = distributed.broadcast_object(f"{type(error).__name__}: {error}" if error else "",
                                           ctx)
    if error:
        raise error
    if failure:
        raise ModelError(f"rank 0 failed to write the model: {failure}")


def log_run_config(tracker, cfg: TrainConfig, state: TrainState) -> None:
    """The run gets its params and every epoch it lacks; a resume is recorded as a tag (MLflow
    params are immutable)."""
    tracker.complete(cfg.to_dict(), state.history)
    if state.epoch:
        changed = {k: v for k, v in cfg.to_dict().items() if state.config.get(k) != v}
        tracker.set_tags({f"resumed_at_epoch_{state.epoch}": json.dumps(changed)})


def resume(cfg: TrainConfig, parts: dict[str, object], classes: list[str]) -> TrainState:
    """The state of the last checkpoint; a damaged one is named, and training resumes from
    best.pt instead, else starts afresh (a checkpoint is checked whole before any of it loads)."""
    last = checkpoint.find_resumable(cfg.output_dir)
    if last is None:
        return TrainState()
    best = last.with_name(checkpoint.BEST)
    for path in (last, best):
        try:
            state = restore(path, parts, cfg, classes)
        except FileNotFoundError:
            continue
        except DamagedFile as err:
            log.warning("%s; %s", err, "trying best.pt" if path == last else "starting afresh")
            continue
        log.info("resuming from %s (epoch %d done)", path, state.epoch)
        return state
    return TrainState()


def setup(cfg: TrainConfig, ctx: distributed.DistContext) -> Training:
    """Data, model, optimizer and the fast path for this hardware, restored from a checkpoint."""
    workers = cfg.num_workers if cfg.num_workers >= 0 else default_num_workers(ctx)
    bundle = build_datasets(cfg.data, cfg.image_size, skip_bad_images=cfg.skip_bad_images,
                            cache_images_mb=cache_mb(cfg, workers))
    log.info("data %s: %d train / %d val images, classes %s, %d unreadable skipped",
             bundle.root, len(bundle.train), len(bundle.val), bundle.classes, bundle.skipped)
    precision, why = resolve_precision(cfg.precision, ctx.device)
    channels_last = resolve_channels_last(cfg.channels_last, precision, ctx.device)
    log.info("precision %s, channels_last %s (%s)", precision, channels_last, why)
    model = build_model(cfg.arch, len(bundle.classes), weights=cfg.weights,
                        freeze_backbone=cfg.freeze_backbone, image_size=cfg.image_size)
    model.to(ctx.device, memory_format=torch.channels_last if channels_last else
             torch.contiguous_format)
    optimizer = build_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, cfg.step_size, cfg.gamma)
    scaler = grad_scaler(precision, ctx.device)
    state = resume(cfg, {"model": model, "optimizer": optimizer, "scheduler": scheduler,
                         "scaler": scaler}, bundle.classes)
    return Training(bundle=bundle, model=model, optimizer=optimizer, scheduler=scheduler,
                    scaler=scaler, loaders=build_loaders(bundle, cfg, ctx, workers), state=state,
                    fast=Fast(precision, channels_last))


def train(cfg: TrainConfig, ctx: distributed.DistContext) -> TrainState:
    torch.manual_seed(cfg.seed)
    run = setup(cfg, ctx)
    model, state = run.model, run.state
    run.ddp = (DistributedDataParallel(model, device_ids=[ctx.local_rank] if ctx.device.type ==
                                       "cuda" else None) if ctx.is_distributed else model)
    tracker = MlflowTracker(state.mlflow_run_id or None) if ctx.is_main else NullTracker()
    state.mlflow_run_id = tracker.run_id or ""
    ok = False
    try:
        log_run_config(tracker, cfg, state)
        for epoch in range(state.epoch + 1, cfg.epochs + 1):
            run_epoch(epoch, cfg, ctx=ctx, run=run, tracker=tracker)
        if ctx.is_distributed:
            log.info("rank %d final weights digest %s", ctx.rank, weights_digest(model))
        finalize_on_rank0(cfg, ctx, model=model, state=state, bundle=run.bundle, tracker=tracker)
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
    except USER_ERRORS as err:
        log.error("%s", err)
        return 2
    finally:
        distributed.cleanup()


if __name__ == "__main__":
    exit_with(main)
