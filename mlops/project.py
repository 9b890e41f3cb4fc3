"""What the generic local tooling knows about this project: `[tool.mlops]` in pyproject.toml; and
where it writes: the run folders and the MLflow store (the checkout, or MLOPS_STATE_DIR), and its
caches (never the checkout).

One setting makes a read-only checkout work: MLOPS_STATE_DIR=<a writable folder> puts runs/,
mlflow.db (with its mlruns/) and the caches there. The caches alone: MLOPS_CACHE_DIR, else
$XDG_CACHE_HOME/mlops-local, else ~/.cache/mlops-local (the environment layers: LOCAL_ENVS_DIR).
"""

from __future__ import annotations

import os
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
    # "3.8" -> an interpreter of that version for environments that ask for it (interpreters.py)
    pythons: dict[str, str] = field(default_factory=dict)


@cache
def project(pyproject: Path = ROOT / "pyproject.toml") -> Project:
    try:
        table = tomllib.loads(pyproject.read_text()).get("tool", {}).get("mlops", {})
    except (OSError, tomllib.TOMLDecodeError):
        table = {}
    return Project(own_models=tuple(table.get("own_models", ())),
                   model_file=str(table.get("model_file", "model.pt")),
                   runs_dir=state_dir() / str(table.get("runs_dir", "runs")),
                   entry_packages=tuple(table.get("entry_packages", ())),
                   metrics={k: set(v) for k, v in (table.get("metrics") or {}).items()},
                   hints=dict(table.get("hints") or {}),
                   pythons={str(k): os.path.expanduser(str(v))
                            for k, v in (table.get("pythons") or {}).items()})


def state_dir() -> Path:
    """Where run folders and the local MLflow store live: MLOPS_STATE_DIR, else the checkout."""
    return Path(os.environ["MLOPS_STATE_DIR"]).expanduser() \
        if os.environ.get("MLOPS_STATE_DIR") else ROOT


def cache_root() -> Path:
    """Where the caches go (environment layers, validation verdicts, tools): never the sources.
    MLOPS_CACHE_DIR, else <MLOPS_STATE_DIR>/cache, else $XDG_CACHE_HOME/mlops-local, else
    ~/.cache/mlops-local."""
    if os.environ.get("MLOPS_CACHE_DIR"):
        return Path(os.environ["MLOPS_CACHE_DIR"]).expanduser()
    if os.environ.get("MLOPS_STATE_DIR"):
        return state_dir() / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mlops-local"
