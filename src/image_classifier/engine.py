"""One epoch of training and one pass of evaluation; metrics as all-reduced sums and counts."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .distributed import DistContext, all_reduce_sum


@dataclass
class PassResult:
    loss: float
    acc: float
    count: int
    confusion: list[list[int]] | None = None


def seed_epoch(seed: int, epoch: int) -> None:
    """Every epoch draws from its own streams, so a resumed run repeats an uninterrupted one."""
    value = seed * 10_007 + epoch
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.manual_seed(value)


def _autocast(ctx: DistContext, precision: str):
    return torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def _to_device(images, targets, ctx: DistContext, channels_last: bool):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    non_blocking = ctx.device.type == "cuda"
    images = images.to(ctx.device, non_blocking=non_blocking, memory_format=fmt)
    return images, targets.to(ctx.device, non_blocking=non_blocking)


def _reduce(loss_sum, correct, count, ctx, confusion=None) -> PassResult:
    parts = [torch.tensor([loss_sum, correct, count], dtype=torch.float64)]
    if confusion is not None:
        parts.append(confusion.flatten().to(torch.float64))
    totals = all_reduce_sum(torch.cat(parts), ctx)
    loss_sum, correct, count = totals[:3].tolist()
    matrix = None
    if confusion is not None:
        matrix = totals[3:].round().long().view_as(confusion).tolist()
    count = int(count)
    return PassResult(loss_sum / max(count, 1), correct / max(count, 1), count, matrix)


def train_one_epoch(model: nn.Module, loader, optimizer, criterion, ctx: DistContext,
                    precision: str = "fp32", channels_last: bool = False,
                    progress=None) -> PassResult:
    model.train()
    loss_sum, correct, count = 0.0, 0, 0
    for images, targets in loader:
        images, targets = _to_device(images, targets, ctx, channels_last)
        optimizer.zero_grad(set_to_none=True)
        with _autocast(ctx, precision):
            logits = model(images)
            loss = criterion(logits, targets)
        loss.backward()
        optimizer.step()
        batch = targets.numel()
        loss_sum += loss.item() * batch
        correct += (logits.argmax(1) == targets).sum().item()
        count += batch
        if progress is not None:
            progress.update(1)
            progress.set_postfix(loss=f"{loss_sum / count:.4f}", acc=f"{correct / count:.3f}")
    return _reduce(loss_sum, correct, count, ctx)


@torch.no_grad()
def evaluate(model: nn.Module, loader, criterion, ctx: DistContext, num_classes: int,
             precision: str = "fp32", channels_last: bool = False) -> PassResult:
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.long)
    for images, targets in loader:
        images, targets = _to_device(images, targets, ctx, channels_last)
        with _autocast(ctx, precision):
            logits = model(images)
            loss = criterion(logits.float(), targets)
        predictions = logits.argmax(1)
        loss_sum += loss.item() * targets.numel()
        correct += (predictions == targets).sum().item()
        count += targets.numel()
        pairs = targets.cpu() * num_classes + predictions.cpu()
        confusion += torch.bincount(pairs, minlength=num_classes**2).view(num_classes, num_classes)
    return _reduce(loss_sum, correct, count, ctx, confusion)
