"""Distinct GPUs for the simulated nodes of a distributed task.

On Azure each node has its own GPUs, and LOCAL_RANK (what Azure sets: the rank within the node)
picks one of them. Every simulated node here is this one machine, so two nodes' LOCAL_RANK 0
would both pick cuda:0, and NCCL refuses two ranks on one device. So each simulated node sees
only its own slice of this machine's GPUs (CUDA_VISIBLE_DEVICES), and LOCAL_RANK indexes into
that slice exactly as on a node. With fewer GPUs than processes no slicing can keep them apart:
the GPUs are hidden, so code that picks its backend from torch.cuda.is_available() runs on the
CPU with gloo, and a notice says so. Under mpirun (one launcher for every process) Open MPI's
local ranks already count across the machine, so every process keeps the full set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU while the driver is loaded
NODE_KEYS = ("NODE_RANK", "OMPI_COMM_WORLD_NODE_RANK")


def visible_gpus(env: dict[str, str] | None = None, driver: Path = NVIDIA_GPUS) -> list[str]:
    """The GPUs this machine lets the job use: CUDA_VISIBLE_DEVICES when the user set it, else
    every GPU the NVIDIA driver lists (read from /proc: importing torch here would cost seconds
    on every run)."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    if not driver.is_dir():
        return []
    return [str(i) for i in range(len(list(driver.iterdir())))]


def _node_of(overlay: dict[str, str], index: int) -> str:
    for key in NODE_KEYS:
        if key in overlay:
            return overlay[key]
    return f"process-{index}"  # TF_CONFIG names no node: each process stands alone


class Assigned(NamedTuple):
    envs: list[dict[str, str]]  # each process's overlay with its CUDA_VISIBLE_DEVICES
    notice: str  # "" unless the GPUs had to be hidden


def assign(overlays: list[dict[str, str]], gpus: list[str]) -> Assigned:
    """The overlays with each simulated node's CUDA_VISIBLE_DEVICES, and a notice (or "")."""
    if len(overlays) < 2 or not gpus:
        return Assigned(overlays, "")
    if len(gpus) < len(overlays):
        hidden = [{**o, "CUDA_VISIBLE_DEVICES": ""} for o in overlays]
        return Assigned(hidden, f"note: {len(overlays)} processes but {len(gpus)} GPU(s) here: "
                        "the GPUs are hidden so no two processes share one (they run on the "
                        "CPU; torch.distributed needs gloo there)")
    nodes: dict[str, list[int]] = {}
    for index, overlay in enumerate(overlays):
        nodes.setdefault(_node_of(overlay, index), []).append(index)
    assigned = [dict(o) for o in overlays]
    start = 0
    for members in nodes.values():
        devices = ",".join(gpus[start:start + len(members)])
        for index in members:
            assigned[index]["CUDA_VISIBLE_DEVICES"] = devices
        start += len(members)
    return Assigned(assigned, "")
