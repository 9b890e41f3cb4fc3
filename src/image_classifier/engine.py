"""One epoch of training and one pass of evaluation; metrics as all-reduced sums and counts.

Batches are (images, targets, problems): unreadable samples arrive as Problems (loading.py).
With --skip_bad_images they are skipped and counted; without it the pass stops with an error
naming the file, on every rank at the same step (training syncs a two-number flag per step, so no
rank waits on one that stopped; evaluation, whose shards may differ by a batch, decides at its
final all-reduce).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .checkpoint import TrainState
from .config import TrainConfig
from .data import DataBundle, DataError, Loaders
from .distributed import DistContext, all_reduce_sum
from .loading import Problem


class BadSampleError(DataError):
    """An image could not be read during a pass and --skip_bad_images is off."""


@dataclass(kw_only=True)
class PassResult:
    loss: float
    acc: float
    count: int
    confusion: list[list[int]] | None = None
    skipped: int = 0


@dataclass(frozen=True)
class Fast:
    """How a pass runs on this hardware: its precision (fp32, bf16, fp16) and memory format."""

    precision: str = "fp32"
    channels_last: bool = False


@dataclass(kw_only=True)
class Training:
    """Everything one training run works on, built once by train.setup()."""

    bundle: DataBundle
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None  # fp16 only
    loaders: Loaders
    state: TrainState
    fast: Fast
    ddp: nn.Module | None = None  # the model wrapped for DistributedDataParallel (or itself)
    criterion: nn.Module = field(default_factory=nn.CrossEntropyLoss)

    def parts(self) -> dict[str, object]:
        """What a checkpoint saves and restores."""
        return {"model": self.model, "optimizer": self.optimizer, "scheduler": self.scheduler,
                "scaler": self.scaler}


def seed_epoch(seed: int, epoch: int, rank: int = 0) -> None:
    """Every (epoch, rank) draws from its own streams: ranks augment independently, and a
    resumed run repeats an uninterrupted one exactly."""
    digest = hashlib.sha256(f"{seed}:{epoch}:{rank}".encode()).digest()
    value = int.from_bytes(digest[:8], "little") % 2**63
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.manual_seed(value)


def autocast(ctx: DistContext, fast: Fast):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(fast.precision)
    return torch.autocast(ctx.device.type, dtype=dtype or torch.float32,
                          enabled=dtype is not None)


def _to_device(images, targets, ctx: DistContext, fast: Fast):
    fmt = torch.channels_last if fast.channels_last else torch.contiguous_format
    non_blocking = ctx.device.type == "cuda"
    images = images.to(ctx.device, non_blocking=non_blocking, memory_format=fmt)
    return images, targets.to(ctx.device, non_blocking=non_blocking)


def _raise_bad(problems: list[Problem], ctx: DistContext) -> None:
    """Every rank raises with the first bad file any rank found."""
    found = list(problems)
    if ctx.is_distributed:
        gathered = [None] * ctx.world_size
        dist.all_gather_object(gathered, found)
        found = [p for part in gathered for p in (part or [])]
    first = found[0] if found else None
    where = f"{first.path}: {first.message}" if first else "an image on another rank"
    raise BadSampleError(f"{where} (found while reading it for training). Remove or replace it, "
                         "or pass --skip_bad_images True to skip such files.")


def _step_ready(count: int, problems: list[Problem], skip_bad: bool, ctx: DistContext) -> bool:
    """Whether every rank can take this step; raises everywhere if any rank must stop."""
    fatal = 0 if skip_bad else len(problems)
    if not ctx.is_distributed:
        if fatal:
            _raise_bad(problems, ctx)
        return count > 0
    flags = all_reduce_sum(torch.tensor([fatal, int(count == 0)], dtype=torch.float64), ctx)
    if flags[0] > 0:
        _raise_bad(problems if fatal else [], ctx)
    return flags[1] == 0  # a rank with nothing left in this batch: all skip the step together


def _reduce(loss_sum, correct, *, count, ctx, confusion=None, skipped=0) -> PassResult:
    parts = [torch.tensor([loss_sum, correct, count, skipped], dtype=torch.float64)]
    if confusion is not None:
        parts.append(confusion.flatten().to(torch.float64))
    totals = all_reduce_sum(torch.cat(parts), ctx)
    loss_sum, correct, count, skipped = totals[:4].tolist()
    matrix = None
    if confusion is not None:
        matrix = totals[4:].round().long().view_as(confusion).tolist()
    count = int(count)
    return PassResult(loss=loss_sum / max(count, 1), acc=correct / max(count, 1), count=count,
                      confusion=matrix, skipped=int(skipped))


def train_one_epoch(run: Training, cfg: TrainConfig, ctx: DistContext,
                    progress=None) -> PassResult:
    """One pass over this process's training shard (`progress`: a tqdm bar, or None)."""
    model, optimizer, scaler = run.ddp or run.model, run.optimizer, run.scaler
    model.train()
    loss_sum, correct, count, skipped = 0.0, 0, 0, 0
    for images, targets, problems in run.loaders.train:
        if not _step_ready(targets.numel(), problems, cfg.skip_bad_images, ctx):
            skipped += len(problems)
            continue
        skipped += len(problems)
        images, targets = _to_device(images, targets, ctx, run.fast)
        optimizer.zero_grad(set_to_none=True)
        with autocast(ctx, run.fast):
            logits = model(images)
            loss = run.criterion(logits, targets)
        if scaler is not None:  # fp16: scale the loss so small gradients do not underflow
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        batch = targets.numel()
        loss_sum += loss.item() * batch
        correct += (logits.argmax(1) == targets).sum().item()
        count += batch
        if progress is not None:
            progress.update(1)
            progress.set_postfix(loss=f"{loss_sum / count:.4f}", acc=f"{correct / count:.3f}")
    return _reduce(loss_sum, correct, count=count, ctx=ctx, skipped=skipped)


@torch.no_grad()
def evaluate(model: nn.Module, loader, ctx: DistContext, *, num_classes: int,
             fast: Fast = Fast(), skip_bad: bool = False) -> PassResult:
    """One pass over `loader` without gradients: cross-entropy loss (the training loss),
    accuracy and the confusion matrix."""
    criterion = nn.CrossEntropyLoss()
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.long)
    bad: list[Problem] = []
    for images, targets, problems in loader:
        bad += problems
        if targets.numel() == 0:
            continue
        images, targets = _to_device(images, targets, ctx, fast)
        with autocast(ctx, fast):
            logits = model(images)
            loss = criterion(logits.float(), targets)
        predictions = logits.argmax(1)
        loss_sum += loss.item() * targets.numel()
        correct += (predictions == targets).sum().item()
        count += targets.numel()
        pairs = targets.cpu() * num_classes + predictions.cpu()
        confusion += torch.bincount(pairs, minlength=num_classes**2).view(num_classes, num_classes)
    result = _reduce(loss_sum, correct, count=count, ctx=ctx, confusion=confusion, skipped=len(bad))
    if not skip_bad and result.skipped:  # every rank sees the same total: all raise together
        _raise_bad(bad, ctx)
    return result
