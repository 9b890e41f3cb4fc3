"""The repository the tooling works on, what it knows about it, and where it writes.

The repository is found from the current folder, as git finds its own: the nearest folder
upwards holding `azml.toml`, or a `pyproject.toml` with a `[tool.azml]` table, else the nearest
git work tree's top, else the current folder. Its settings (all optional, keys below) come from
that file; `azml.toml` holds them at its top level.

Where a run writes (run folders, the MLflow store, the local workspace): AZML_STATE_DIR, else
MLOPS_STATE_DIR (its older name), else the settings' `state_dir` (relative to the repository),
else `<repository>/.azml`. The caches (environment layers, validation verdicts, tools) never go
into the sources: MLOPS_CACHE_DIR, else <state>/cache when a state folder is named by the
environment, else $XDG_CACHE_HOME/mlops-local, else ~/.cache/mlops-local.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from mlops.errors import LocalRunError

CONFIG = "azml.toml"
# the local workspace's identity, wherever Azure names a workspace (resource ids, a job's
# AZUREML_ARM_* variables, azureml-core's run.experiment.workspace)
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
RESOURCE_GROUP = WORKSPACE_NAME = "local"
STATE_ENV = ("AZML_STATE_DIR", "MLOPS_STATE_DIR")  # the first set wins


@dataclass(frozen=True, kw_only=True)
class Project:
    """A repository's settings: where it is and writes, and what the local tooling should know
    of its own models, entry points and hints."""

    root: Path  # the repository
    config: Path | None = None  # the file its settings came from
    state: Path  # run folders, the MLflow store, the local workspace
    asset_map: Path | None = None  # `azureml:` assets and URLs -> local paths (uris.py)
    env_map: Path | None = None  # environments -> local stand-ins, over the tool's own
    own_models: tuple[str, ...] = ()  # registered model names the local trainer produces
    model_file: str = "model.pt"  # the file that marks a trained model's folder
    runs_dir: Path  # where run folders go (<state>/runs unless set)
    entry_packages: tuple[str, ...] = ()  # `python -m <package>.x` commands lint checks flags of
    # entry module -> the metric names it logs
    metrics: dict[str, set[str]] = field(default_factory=dict)
    hints: dict[str, str] = field(default_factory=dict)  # texts that name this project's targets
    # "3.8" -> an interpreter of that version for environments that ask for it (interpreters.py)
    pythons: dict[str, str] = field(default_factory=dict)


def settings_file(folder: Path) -> tuple[Path, dict[str, object]] | None:
    """The settings `folder` holds itself: its azml.toml, or its pyproject.toml's [tool.azml]."""
    own = folder / CONFIG
    if own.is_file():
        return own, _toml(own)
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        table = _toml(pyproject).get("tool", {})
        if isinstance(table, dict) and isinstance(table.get("azml"), dict):
            return pyproject, table["azml"]
    return None


def _toml(path: Path) -> dict[str, object]:
    import tomllib  # where there is a settings file to read

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise LocalRunError(f"{path}: not readable TOML ({err}): fix it, or remove it to use "
                            "the defaults") from None


def repository(start: Path) -> tuple[Path, Path | None, dict[str, object]]:
    """The repository holding `start`: its folder, its settings file and settings."""
    start = start.resolve()
    for folder in (start, *start.parents):
        found = settings_file(folder)
        if found is not None:
            return folder, found[0], found[1]
    top = next((f for f in (start, *start.parents) if (f / ".git").exists()), start)
    return top, None, {}


@cache
def _project(start: Path, state_env: str) -> Project:
    root, config, table = repository(start)
    state = Path(state_env).expanduser() if state_env else \
        root / str(table.get("state_dir", ".azml"))
    maps = {key: (root / str(table[key])) if table.get(key) else None
            for key in ("asset_map", "env_map")}
    return Project(root=root, config=config, state=state, **maps,
                   own_models=tuple(_list(table, "own_models")),
                   model_file=str(table.get("model_file", "model.pt")),
                   runs_dir=state / str(table.get("runs_dir", "runs")),
                   entry_packages=tuple(_list(table, "entry_packages")),
                   metrics={str(k): set(v) for k, v in _table(table, "metrics").items()},
                   hints={str(k): str(v) for k, v in _table(table, "hints").items()},
                   pythons={str(k): os.path.expanduser(str(v))
                            for k, v in _table(table, "pythons").items()})


def _list(table: dict[str, object], key: str) -> list[str]:
    value = table.get(key, [])
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _table(table: dict[str, object], key: str) -> dict[str, object]:
    value = table.get(key) or {}
    return value if isinstance(value, dict) else {}


def _state_env() -> str:
    return next((os.environ[name] for name in STATE_ENV if os.environ.get(name)), "")


def project() -> Project:
    """The settings of the repository the current folder is in (read once per folder and state
    setting)."""
    return _project(Path.cwd(), _state_env())


def forget() -> None:
    """Read the settings afresh on the next call (a test that rewrites them)."""
    _project.cache_clear()


def state_dir() -> Path:
    """Where run folders, the local MLflow store and the local workspace live."""
    return project().state


def keep_state_out_of_git() -> None:
    """A state folder inside the repository (`.azml/` by default) keeps itself out of git, as
    .venv and .pytest_cache do: a `.gitignore` of `*` in it, written once; the repository's own
    files are never touched. A state folder that is the repository itself (state_dir = ".")
    or lies outside it is left alone; one that cannot be written is said by the run itself."""
    settings = project()
    if settings.state == settings.root or not settings.state.is_relative_to(settings.root):
        return
    marker = settings.state / ".gitignore"
    with contextlib.suppress(OSError):
        if not marker.exists():
            settings.state.mkdir(parents=True, exist_ok=True)
            marker.write_text("# written by azml: its runs, MLflow store and workspace\n*\n")


def cache_root() -> Path:
    """Where the caches go (environment layers, validation verdicts, tools): never the sources.
    MLOPS_CACHE_DIR, else <state>/cache when the environment names the state folder, else
    $XDG_CACHE_HOME/mlops-local, else ~/.cache/mlops-local."""
    if os.environ.get("MLOPS_CACHE_DIR"):
        return Path(os.environ["MLOPS_CACHE_DIR"]).expanduser()
    if _state_env():
        return state_dir() / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mlops-local"


@cache
def installed(package: str) -> str:
    """Which installation of `package` this process would import (its __init__'s path, size
    and time: an upgrade replaces it), without importing it or reading its metadata; "" when
    it is not installed."""
    from importlib.util import find_spec

    try:
        spec = find_spec(package)
        found = os.stat(spec.origin) if spec and spec.origin else None
    except (ImportError, ValueError, OSError):
        return ""
    return f"{spec.origin}:{found.st_size}:{found.st_mtime_ns}" if found else ""


def _entry(kind: str, key: object) -> tuple[Path, str]:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    return cache_root() / kind / f"{digest[:32]}.json", digest


def remembered(kind: str, key: object) -> object | None:
    """What remember(kind, key, ...) kept (a verdict that holds while its key does: a spec's
    bytes and what they refer to, a folder's listing), else None: never kept, kept for another
    key, or damaged (its checksum differs; it is then worked out and kept again)."""
    path, digest = _entry(kind, key)
    try:
        entry = json.loads(path.read_bytes())
        value = json.dumps(entry["value"], sort_keys=True)
        if entry["key"] == digest and entry["sum"] == hashlib.sha256(value.encode()).hexdigest():
            return entry["value"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def remember(kind: str, key: object, value: object) -> None:
    """Keep `value` (JSON) for `key` in the tool's cache, written beside its place and renamed
    into it (two runs writing at once leave one whole entry); a cache that cannot be written
    keeps nothing."""
    path, digest = _entry(kind, key)
    text = json.dumps(value, sort_keys=True)
    entry = {"key": digest, "sum": hashlib.sha256(text.encode()).hexdigest(), "value": value}
    staged = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(entry, sort_keys=True))
        os.replace(staged, path)
    with contextlib.suppress(OSError):
        staged.unlink(missing_ok=True)


SQLITE = "sqlite:///"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a sqlite store's URI (None: another kind of store)."""
    return Path(uri[len(SQLITE):]) if uri.startswith(SQLITE) else None


def tracking_uri() -> str:
    """The store every process of a run shares; a relative sqlite path is made absolute, because
    jobs run in their own working directory."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{state_dir() / 'mlflow.db'}"
    path = sqlite_file(uri)
    return f"{SQLITE}{path.resolve()}" if path and not path.is_absolute() else uri
