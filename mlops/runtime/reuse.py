"""Pipeline step reuse, as Azure reuses a step whose work would be the same.

Azure reuses a pipeline step (shows it "Reused", links the earlier outputs, starts nothing) when
its component is deterministic (`is_deterministic`, true by default) and the step's definition,
code snapshot, environment and inputs match an earlier completed step. Here a step's key hashes:
the task as resolved (command, distribution, resources, environment variables, declared outputs),
the content of its code snapshot (the files Azure would upload), its environment's packages and
Python, each literal input's text and each data input's content (a file's bytes, or every file
of a folder by relative path: an upstream step that ran again and wrote the same bytes is still
the same input). Not reused: `is_deterministic: false`, the pipeline's `settings.force_rerun`,
or `--force-rerun` (make ... FORCE=1).

The index lives beside the run folders (`<runs>/.reuse/<key>.json`), so every run of this
repository's pipelines can reuse every earlier one; a record whose step folder is gone, or did
not complete, is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mlops.environments.envspec import EnvMap, plan_for
from mlops.runtime.binding import publish
from mlops.runtime.mlflow_runs import Tracking
from mlops.runtime.records import RunStatus, Status, TaskRecord
from mlops.runtime.snapshot import code_files
from mlops.runtime.tasks import Task
from mlops.specs import SpecData, flag

INDEX = ".reuse"


@dataclass(frozen=True)
class Earlier:
    """A completed step whose key a new step has."""

    folder: Path
    run_id: str
    key: str


@dataclass(frozen=True)
class Linked:
    """A reused step: its own MLflow run, and where its outputs are."""

    run_id: str
    outputs: dict[str, str]


def file_digest(path: Path, cache: dict[str, str]) -> str:
    """sha256 of a file's bytes, remembered by (path, size, mtime) for this index."""
    stat = path.stat()
    memo = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    if memo not in cache:
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        cache[memo] = digest.hexdigest()
    return cache[memo]


def data_digest(path: Path, cache: dict[str, str]) -> str:
    """A data input's identity: its content, wherever it lives."""
    if path.is_file():
        return file_digest(path, cache)
    if not path.is_dir():
        return f"missing:{path}"
    digest = hashlib.sha256()
    for full, relative in sorted_files(path):
        digest.update(f"{relative}\0{file_digest(full, cache)}\n".encode())
    return digest.hexdigest()


def sorted_files(folder: Path):
    """(file, path relative to folder) for every file below it, in a stable order."""
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            full = Path(root) / name
            yield full, full.relative_to(folder)


IGNORE_FILES = (".amlignore", ".gitignore")


def tree_identity(code: Path, cache: dict[str, str]) -> str:
    """What decides which files Azure uploads: every path under the folder and the ignore
    files' text. The same identity gives the same upload list."""
    digest = hashlib.sha256()
    for full, relative in sorted_files(code):
        digest.update(f"{relative}\n".encode())
        if full.name in IGNORE_FILES:
            digest.update(file_digest(full, cache).encode())
    return digest.hexdigest()


def code_digest(code: Path | None, cache: dict[str, str | list[Path]]) -> str:
    """The snapshot's content. The upload list comes from azure-ai-ml's helpers (importing it
    costs a second, most of an all-reused rerun), so it is remembered by the tree's identity."""
    if code is None:
        return "none"
    if code.is_file():
        return file_digest(code, cache)
    memo = f"files|{code}|{tree_identity(code, cache)}"
    if memo not in cache:
        cache[memo] = sorted(relative for _, relative in code_files(code))
    digest = hashlib.sha256()
    for relative in cache[memo]:
        digest.update(f"{relative}\0{file_digest(code / relative, cache)}\n".encode())
    return digest.hexdigest()


class StepIndex:
    """Completed steps by key, for one folder of runs."""

    def __init__(self, runs: Path):
        self.folder = runs / INDEX
        self._hashes: dict[str, object] | None = None

    @property
    def hashes(self) -> dict[str, object]:
        if self._hashes is None:
            try:
                self._hashes = json.loads((self.folder / "hashes.json").read_text())
            except (OSError, ValueError):
                self._hashes = {}
        return self._hashes

    def key(self, task: Task, env_map: EnvMap) -> str:
        """The step's identity: everything that decides what it computes."""
        plan = plan_for(task.environment.value, task.environment.base, env_map, task.where)
        inputs = {name: (f"data:{data_digest(Path(value.path), self.hashes)}" if value.is_data
                         else f"text:{value.text}") for name, value in task.inputs.items()}
        outputs = {name: {k: v for k, v in asdict(spec).items() if k != "target"}
                   for name, spec in task.outputs.items()}
        identity = {"command": task.command, "code": code_digest(task.code, self.hashes),
                    "includes": [code_digest(p, self.hashes) for p in task.includes],
                    "environment": [sorted(plan.requirements), plan.python,
                                    sorted(task.environment.adds),
                                    sorted(task.environment.fixed)],
                    "inputs": inputs, "outputs": outputs, "placement": asdict(task.placement),
                    "env": task.env_vars}
        self._save_hashes()
        text = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def _save_hashes(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f"hashes.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(self.hashes))
        os.replace(tmp, self.folder / "hashes.json")

    def find(self, key: str) -> Earlier | None:
        """The earlier completed step with this key, if its folder still holds it."""
        try:
            record = json.loads((self.folder / f"{key}.json").read_text())
            folder = Path(record["folder"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        status = TaskRecord.read(folder)
        if status is None or status.status != Status.COMPLETED or \
                status.mlflow_run_id != record.get("run_id"):
            return None
        return Earlier(folder, record["run_id"], key)

    def record(self, key: str, folder: Path, run_id: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f"{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"folder": str(folder.resolve()), "run_id": run_id}))
        os.replace(tmp, self.folder / f"{key}.json")


def deterministic(definition: SpecData) -> bool:
    return flag(definition.get("is_deterministic"), default=True)


def link_step(task: Task, earlier: Earlier, tracking: Tracking) -> Linked:
    """Azure's reused step: the earlier outputs linked into this step's places, nothing started,
    a FINISHED MLflow child run that names the original."""
    folder = task.folder
    folder.mkdir(parents=True, exist_ok=True)
    same = folder.resolve() == earlier.folder.resolve()
    recorded = TaskRecord.read(earlier.folder)
    paths = (recorded.outputs if recorded else {}) if same else \
        publish(earlier.folder, task.outputs, folder)
    tags = {**task.tags, "mlops.reused_from": earlier.run_id,
            "mlops.reused_from_folder": str(earlier.folder)}
    with tracking.open(task.experiment, task.name, tags, parent=task.parent_run) as run:
        run.close(RunStatus.FINISHED)
    if not same:
        TaskRecord(Status.REUSED, run.run_id, exit_code=0, outputs=paths,
                   reused_run=earlier.run_id, reused_from=str(earlier.folder)).write(folder)
    print(f"step {task.name}: Reused (from {earlier.folder})", flush=True)
    return Linked(run.run_id, paths)
