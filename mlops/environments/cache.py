"""The cache of built layers: what `make envs` lists and `make clean-envs` removes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mlops.environments.layers import cache_dir


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink())


def describe() -> list[str]:
    """One entry per cached layer: its folder, size, label, requirements and the specs that
    used it."""
    cache = cache_dir()
    layers = sorted(cache.glob("*/layer.json")) if cache.is_dir() else []
    if not layers:
        return [f"no cached environments in {cache}"]
    entries = []
    for record in layers:
        info = json.loads(record.read_text())
        used = record.parent / "used_by.txt"
        specs = sorted(set(used.read_text().split("\n")) - {""}) if used.is_file() else []
        entries.append(f"{record.parent.name}  {_size(record.parent) / 2**20:8.1f} MB  "
                       f"{info['label']}\n    requirements: {' '.join(info['requirements'])}\n"
                       f"    used by: {', '.join(specs) or '-'}")
    return entries


def clean() -> Path:
    """Remove every cached layer (each is rebuilt when next needed); the folder it emptied."""
    shutil.rmtree(cache_dir(), ignore_errors=True)
    return cache_dir()
