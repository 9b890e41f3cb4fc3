"""Named workspace resources the local workspace keeps as records: computes, datastores and
schedules.
One JSON file a name, `<kind>/<name>.json` (`computes/cpu-cluster.json`), holding the spec
`az ml <kind> create` was given (after its flags) and when it was made.

Nothing is provisioned or connected: every job runs on this machine whatever `compute:` it
names, and a datastore's URIs reach a local folder only through the asset map; a record here
is what `show`, `list`, `update` and `delete` answer from. Names follow Azure's resource rule
(names.RESOURCE) before any file is touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mlops.errors import NotFound
from mlops.specs import SpecData
from mlops.workspace import names
from mlops.workspace.records import DamagedRecord, held, write_atomic
from mlops.workspace.store import Workspace, workspace_root

COMPUTES, DATASTORES, SCHEDULES = "computes", "datastores", "schedules"  # folders, by kind


@dataclass(frozen=True, kw_only=True)
class ResourceRecord:
    name: str
    spec: SpecData  # the spec as loaded, after --set and the flags
    created: str  # ISO time
    modified: str


def _file(workspace: Workspace, kind: str, name: str) -> Path:
    names.check(name, names.RESOURCE, f"{kind.rstrip('s')} name")
    return workspace.root / kind / f"{name}.json"


def read(workspace: Workspace, kind: str, name: str) -> ResourceRecord | None:
    """The resource of that kind and name; None when there is none; DamagedRecord when its
    file is not one this module wrote."""
    path = _file(workspace, kind, name)
    try:
        data = json.loads(path.read_text())
        return ResourceRecord(name=name, spec=dict(data["spec"]), created=str(data["created"]),
                             modified=str(data["modified"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DamagedRecord(f"{path}: not a {kind.rstrip('s')} record ({err}); remove it and "
                            "create it again") from None


def required(root: Path | None, kind: str, name: str) -> ResourceRecord:
    """The resource of that kind and name in the workspace at `root` (else the project's);
    NotFound, saying how to make it, when there is none."""
    workspace = Workspace(root or workspace_root())
    record = read(workspace, kind, name)
    if record is None:
        noun = kind.rstrip("s")
        raise NotFound(f"{noun} {name!r} is not in the local workspace ({workspace.root}); "
                       f"create it: azml {noun} create -f <spec>")
    return record


def write(workspace: Workspace, kind: str, name: str, spec: SpecData) -> ResourceRecord:
    """Create or replace (as az ml <kind> create does for an existing name) `name`'s record."""
    path = _file(workspace, kind, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).isoformat()
    with held(path.parent / ".lock"):
        earlier = read(workspace, kind, name)
        record = ResourceRecord(name=name, spec=spec, modified=now,
                               created=earlier.created if earlier else now)
        write_atomic(path, json.dumps({"spec": spec, "created": record.created,
                                       "modified": now}, indent=2, default=str) + "\n")
    return record


def every(workspace: Workspace, kind: str) -> list[ResourceRecord]:
    """Every resource of the kind, by name; a damaged file is skipped (show names it)."""
    found = []
    for path in sorted((workspace.root / kind).glob("*.json")):
        try:
            record = read(workspace, kind, path.stem)
        except (DamagedRecord, names.InvalidName):
            continue
        if record is not None:
            found.append(record)
    return found


def remove(workspace: Workspace, kind: str, name: str) -> bool:
    """Whether there was a resource of that kind and name to remove."""
    path = _file(workspace, kind, name)
    if not path.parent.is_dir():
        return False
    with held(path.parent / ".lock"):
        try:
            path.unlink()
        except FileNotFoundError:
            return False
    return True
