"""Where a pipeline step ran before: each step's completed runs, remembered beside the run
folders (`<runs>/.reuse/history/<lineage>.jsonl`, newest last), by two lineages: its path in
runs of the same pipeline spec (`outer/train`, `tune/trial:3`) and its component's name. reuse.py
compares a step with its nearest earlier run to say what changed, and --from / --only take a
step's outputs from its last run. An entry whose folder no longer holds that completed step is
passed over; a history past HISTORY_BYTES keeps its newer half.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from mlops.runtime.records import Status, TaskRecord

HISTORY_BYTES = 256 * 1024
DONE = (Status.COMPLETED, Status.REUSED)


@dataclass(frozen=True, kw_only=True)
class Earlier:
    """A completed step: where it is, its MLflow run, its key, and its run and path by name."""

    folder: Path
    run_id: str
    key: str
    run: str = ""
    step: str = ""

    @property
    def label(self) -> str:
        """`<run> <step>`, as a reader finds them (from the folder for a record that lacks
        them: <run>/steps/<step>[/steps/<nested>])."""
        if self.run:
            return f"{self.run} {self.step}".strip()
        parts = self.folder.parts
        if "steps" not in parts[1:]:
            return str(self.folder)
        at = parts.index("steps", 1)
        return f"{parts[at - 1]} {'/'.join(p for p in parts[at + 1:] if p != 'steps')}"

    def holds(self) -> bool:
        """Whether its folder still holds the completed step this names."""
        status = TaskRecord.read(self.folder)
        return status is not None and status.status in DONE and \
            status.mlflow_run_id == self.run_id


def lineages(spec: str, step: str, component: str = "") -> list[str]:
    """Where a step's runs are remembered: by spec and step path, and by component name."""
    names = [f"spec\0{spec}\0{step}"] + ([f"component\0{component}"] if component else [])
    return [hashlib.sha256(name.encode()).hexdigest()[:24] for name in names]


class StepHistory:
    """Each step's earlier runs, for one folder of runs (`folder`: its .reuse index)."""

    def __init__(self, folder: Path):
        self.folder = folder / "history"

    def runs(self, lineage: str) -> list[Earlier]:
        """A lineage's runs, newest first (those whose folders no longer hold them too)."""
        try:
            lines = (self.folder / f"{lineage}.jsonl").read_text().splitlines()
        except OSError:
            return []
        found = []
        for line in reversed(lines):
            try:
                entry = json.loads(line)
                found.append(Earlier(folder=Path(entry["folder"]), run_id=entry["run_id"],
                                     key=entry["key"], run=entry.get("run", ""),
                                     step=entry.get("step", "")))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def nearest(self, names: list[str]) -> Earlier | None:
        """The newest run still held, in the first lineage that has one."""
        for lineage in names:
            for earlier in self.runs(lineage):
                if earlier.holds():
                    return earlier
        return None

    def remember(self, earlier: Earlier, names: list[str]) -> None:
        entry = json.dumps({"folder": str(earlier.folder), "run_id": earlier.run_id,
                            "key": earlier.key, "run": earlier.run, "step": earlier.step})
        self.folder.mkdir(parents=True, exist_ok=True)
        for lineage in names:
            path = self.folder / f"{lineage}.jsonl"
            with open(path, "a") as stream:
                stream.write(entry + "\n")
            if path.stat().st_size > HISTORY_BYTES:
                lines = path.read_text().splitlines()
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text("\n".join(lines[len(lines) // 2:]) + "\n")
                os.replace(tmp, path)
