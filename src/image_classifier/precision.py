"""`--precision auto` and `--channels_last auto`: the fast path on the hardware the job lands on.

- Ampere and newer GPUs (compute capability 8+) and CPUs with AMX (Sapphire Rapids and newer):
  bf16 autocast, which needs no loss scaling.
- Volta and Turing GPUs (V100 7.0, T4 7.5 — this repo's default GPU): fp16 autocast with a
  GradScaler; fp16 tensor cores are their main speed lever.
- Anything else: fp32. That includes CPUs with AVX512-BF16 but no AMX: measured on such a CPU
  (this repo's 2-core build machine, ResNet-18 training at 224 px, batch 32), bf16 autocast ran
  at 10.7-12.5 images/s against 13.0 in fp32 and 17.4 in fp32 with channels-last.
Channels-last (NHWC): on for CPUs (oneDNN's convolutions prefer it: 17.4 vs 13.0 images/s
above), and on GPUs with reduced precision (tensor cores prefer it); off for fp32 on GPUs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .config import str2bool


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """AMX bf16 tiles: where bf16 autocast beats fp32 on a CPU."""
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return False
    return "amx_bf16" in flags


def resolve_precision(requested: str, device: torch.device) -> tuple[str, str]:
    """(precision, why)."""
    if requested != "auto":
        return requested, "as requested"
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if major >= 8:
            return "bf16", f"{name} (compute {major}.{minor}) runs bf16 natively"
        if major == 7:
            return "fp16", f"{name} (compute {major}.{minor}) has fp16 tensor cores, no bf16"
        return "fp32", f"{name} (compute {major}.{minor}) has no tensor cores"
    if device.type == "cpu" and cpu_has_amx():
        return "bf16", "this CPU has AMX bf16"
    return "fp32", f"no faster reduced precision on this {device.type}"


def resolve_channels_last(requested: str, precision: str, device: torch.device) -> bool:
    if requested != "auto":
        return str2bool(requested)
    return device.type == "cpu" or precision != "fp32"


def grad_scaler(precision: str, device: torch.device):
    """fp16 on a GPU needs loss scaling; bf16 and fp32 do not."""
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None
