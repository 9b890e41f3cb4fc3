"""Computes as the local workspace keeps them: one JSON file a name, `computes/<name>.json`,
holding the spec `az ml compute create` was given (after its flags) and when it was made.

Nothing is provisioned: every job runs on this machine whatever `compute:` it names, so a
compute here is a checked record that `show`, `list`, `update` and `delete` answer from. Names
follow Azure's resource rule (names.RESOURCE) before any file is touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mlops.specs import SpecData
from mlops.workspace import names
from mlops.workspace.records import DamagedRecord, held, write_atomic
from mlops.workspace.store import Workspace

FOLDER = "computes"


@dataclass(frozen=True, kw_only=True)
class ComputeRecord:
    name: str
    spec: SpecData  # the spec as loaded, after --set and the flags
    created: str  # ISO time
    modified: str


def _file(workspace: Workspace, name: str) -> Path:
    names.check(name, names.RESOURCE, "compute name")
    return workspace.root / FOLDER / f"{name}.json"


def read(workspace: Workspace, name: str) -> ComputeRecord | None:
    """The compute of that name; None when there is none; DamagedRecord when its file is not
    one this module wrote."""
    path = _file(workspace, name)
    try:
        data = json.loads(path.read_text())
        return ComputeRecord(name=name, spec=dict(data["spec"]), created=str(data["created"]),
                             modified=str(data["modified"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DamagedRecord(f"{path}: not a compute record ({err}); remove it and create the "
                            "compute again") from None


def write(workspace: Workspace, name: str, spec: SpecData) -> ComputeRecord:
    """Create or replace (as az ml compute create does for an existing name) `name`'s record."""
    path = _file(workspace, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).isoformat()
    with held(path.parent / ".lock"):
        earlier = read(workspace, name)
        record = ComputeRecord(name=name, spec=spec, modified=now,
                               created=earlier.created if earlier else now)
        write_atomic(path, json.dumps({"spec": spec, "created": record.created,
                                       "modified": now}, indent=2, default=str) + "\n")
    return record


def every(workspace: Workspace) -> list[ComputeRecord]:
    """Every compute, by name; a damaged file is skipped (show names it)."""
    found = []
    for path in sorted((workspace.root / FOLDER).glob("*.json")):
        try:
            record = read(workspace, path.stem)
        except (DamagedRecord, names.InvalidName):
            continue
        if record is not None:
            found.append(record)
    return found


def remove(workspace: Workspace, name: str) -> bool:
    """Whether there was a compute of that name to remove."""
    path = _file(workspace, name)
    if not path.parent.is_dir():
        return False
    with held(path.parent / ".lock"):
        try:
            path.unlink()
        except FileNotFoundError:
            return False
    return True
