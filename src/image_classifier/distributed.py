"""One distributed setup for 1..N processes, driven by the env:// variables.

Azure ML's ``distribution: type: pytorch`` and ``torchrun`` both set RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT. With WORLD_SIZE unset or 1 the same code runs without a
process group. The rank-0 policy (who logs, who writes files) lives here and nowhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True, kw_only=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 alone tracks metrics, writes checkpoints and exports the model."""
        return self.rank == 0

    @property
    def local_world_size(self) -> int:
        """Processes on this node (torchrun and Azure ML set LOCAL_WORLD_SIZE)."""
        return int(os.environ.get("LOCAL_WORLD_SIZE", 1))


def setup() -> DistContext:
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            init_method="env://",
            rank=rank,
            world_size=world_size,
        )
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Sum per-rank totals (loss sums, correct counts, sample counts) across processes."""
    if ctx.is_distributed:
        tensor = tensor.to(ctx.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.cpu()


def sync_buffers(model: torch.nn.Module, ctx: DistContext) -> None:
    """Give every rank rank 0's buffers (BatchNorm running stats).

    DDP averages gradients, so parameters agree, but each rank updates its running stats from its
    own last batches. Without this, ranks would evaluate a model that differs from the one saved.
    """
    if ctx.is_distributed:
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)


def broadcast_object(obj, ctx: DistContext):
    """Rank 0's value on every rank: how the others learn of a rank-0-only failure."""
    if not ctx.is_distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
