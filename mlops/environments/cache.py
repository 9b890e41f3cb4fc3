"""The cache of built environments (layers over .venv, and complete environments of another
Python): what `make envs` lists and `make clean-envs` removes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mlops.environments.interpreters import HERE, minor_of
from mlops.environments.layers import cache_dir


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_symlink())


def describe() -> list[str]:
    """One entry per cached environment: its folder, size, label, Python (its own interpreter,
    or .venv's for a layer over it), requirements and the specs that used it."""
    cache = cache_dir()
    layers = sorted(cache.glob("*/layer.json")) if cache.is_dir() else []
    if not layers:
        return [f"no cached environments in {cache}"]
    return [_entry(record) for record in layers]


def _entry(record: Path) -> str:
    """One environment's lines; a record that cannot be read is said so, with what to do."""
    try:
        info = json.loads(record.read_text())
        used = record.parent / "used_by.txt"
        specs = sorted(set(used.read_text().split("\n")) - {""}) if used.is_file() else []
        return (f"{record.parent.name}  {_size(record.parent) / 2**20:8.1f} MB  "
                f"{info['label']}\n    python: {_python(info)}\n"
                f"    requirements: {' '.join(map(str, info['requirements']))}\n"
                f"    used by: {', '.join(specs) or '-'}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return (f"{record.parent.name}  damaged record {record} ({type(err).__name__}: {err}): "
                "it is built again when next needed, or make clean-envs removes it")


def _python(info: dict[str, object]) -> str:
    if info.get("own_python"):
        return (f"{info['interpreter_version']} ({info['interpreter']}), resolved for "
                f"{info['python']}")
    asked = str(info.get("python") or HERE.minor)
    moved = f", resolved for {asked} and moved here" if minor_of(asked) != HERE.minor else ""
    return f"{HERE.version} (.venv's){moved}"


def clean() -> Path:
    """Remove every cached layer (each is rebuilt when next needed); the folder it emptied."""
    shutil.rmtree(cache_dir(), ignore_errors=True)
    return cache_dir()
