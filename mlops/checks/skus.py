"""Azure VM sizes this repo's specs may use, with their GPU counts (0 = CPU only).

A typo in a size is only reported by Azure at submission; the lint checks against this list.
Add a size here (with its GPU count) when you need one that is missing.
"""

from __future__ import annotations

import difflib

_CPU = [
    *(f"Standard_DS{n}_v2" for n in (1, 2, 3, 4, 5, 11, 12, 13, 14, 15)),
    *(f"Standard_D{n}s_v3" for n in (2, 4, 8, 16, 32, 48, 64)),
    *(f"Standard_D{n}as_v4" for n in (2, 4, 8, 16, 32, 48, 64, 96)),
    *(f"Standard_D{n}ds_v4" for n in (2, 4, 8, 16, 32, 48, 64)),
    *(f"Standard_D{n}s_v5" for n in (2, 4, 8, 16, 32, 48, 64, 96)),
    *(f"Standard_E{n}s_v3" for n in (2, 4, 8, 16, 20, 32, 48, 64)),
    *(f"Standard_F{n}s_v2" for n in (2, 4, 8, 16, 32, 48, 64, 72)),
]
_GPU = {
    "Standard_NC4as_T4_v3": 1, "Standard_NC8as_T4_v3": 1, "Standard_NC16as_T4_v3": 1,
    "Standard_NC64as_T4_v3": 4,
    "Standard_NC6s_v3": 1, "Standard_NC12s_v3": 2, "Standard_NC24s_v3": 4,
    "Standard_NC24rs_v3": 4, "Standard_ND40rs_v2": 8,
    "Standard_NC24ads_A100_v4": 1, "Standard_NC48ads_A100_v4": 2, "Standard_NC96ads_A100_v4": 4,
    "Standard_ND96asr_v4": 8, "Standard_ND96amsr_A100_v4": 8,
    "Standard_NC40ads_H100_v5": 1, "Standard_NC80adis_H100_v5": 2, "Standard_ND96isr_H100_v5": 8,
    "Standard_NV36ads_A10_v5": 1, "Standard_NV72ads_A10_v5": 2,
}
GPUS: dict[str, int] = {**dict.fromkeys(_CPU, 0), **_GPU}
_BY_LOWER = {name.lower(): name for name in GPUS}


def canonical(size: str) -> str | None:
    """Azure treats sizes case-insensitively."""
    return _BY_LOWER.get(str(size).lower())


def suggestion(size: str) -> str:
    close = difflib.get_close_matches(str(size), list(GPUS), n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""
