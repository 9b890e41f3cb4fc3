"""What the generic local tooling knows about this project: `[tool.mlops]` in pyproject.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from mlops.specs import ROOT


@dataclass(frozen=True)
class Project:
    own_models: tuple[str, ...] = ()  # registered model names the local trainer produces
    model_file: str = "model.pt"  # the file that marks a trained model's folder
    runs_dir: Path = field(default=ROOT / "runs")
    entry_packages: tuple[str, ...] = ()  # `python -m <package>.x` commands lint checks flags of
    # entry module -> the metric names it logs
    metrics: dict[str, set[str]] = field(default_factory=dict)
    hints: dict[str, str] = field(default_factory=dict)  # texts that name this project's targets


@cache
def project(pyproject: Path = ROOT / "pyproject.toml") -> Project:
    try:
        table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("mlops", {})
    except (OSError, tomllib.TOMLDecodeError):
        table = {}
    return Project(own_models=tuple(table.get("own_models", ())),
                   model_file=str(table.get("model_file", "model.pt")),
                   runs_dir=ROOT / str(table.get("runs_dir", "runs")),
                   entry_packages=tuple(table.get("entry_packages", ())),
                   metrics={k: set(v) for k, v in (table.get("metrics") or {}).items()},
                   hints=dict(table.get("hints") or {}))
