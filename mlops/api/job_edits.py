"""What `az ml job update|archive|restore` changed on a job, kept beside its run as
`job-edits.json` (the runner never writes it, so an update while the job runs races nothing).

The service lets a job's description, tags, display name, properties and archived state change
after it is created, and nothing else ("Only description, tags, displayName, properties, and
isArchived can be updated", its refusal of any other change: MicrosoftDocs/azure-docs#122250).
Once updated, the four values here stand for the spec's in `job show` (None: the key is gone);
`archived` hides the job from `job list` unless --include-archived or --archived-only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mlops.workspace.records import DamagedRecord, held, write_atomic

EDITS = "job-edits.json"
MUTABLE = ("description", "display_name", "properties", "tags")
LOCAL_PROPERTIES = ("azml.", "mlflow.run_id")  # what the local run adds to `properties`


@dataclass(frozen=True, kw_only=True)
class JobEdits:
    values: dict[str, object] = field(default_factory=dict)  # MUTABLE keys, once updated
    archived: bool = False

    @classmethod
    def read(cls, folder: Path) -> JobEdits:
        """The job's edits (none: nothing was changed); DamagedRecord naming the file."""
        path = folder / EDITS
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as err:
            raise _damaged(path, str(err)) from None
        wrong = _wrong(data)
        if wrong:
            raise _damaged(path, wrong)
        return cls(values=dict(data["values"]), archived=data["archived"])

    def write(self, folder: Path) -> None:
        write_atomic(folder / EDITS, json.dumps({"values": self.values,
                                                 "archived": self.archived}, indent=2) + "\n")

    def over(self, view: dict[str, object]) -> dict[str, object]:
        """`view` (as the spec made it) with the updated values in place of the spec's."""
        for key, value in self.values.items():
            if value is None:
                view.pop(key, None)
            else:
                view[key] = dict(value) if isinstance(value, dict) else value
        return view


def edited(folder: Path, change) -> JobEdits:
    """`change(edits)` -> the new edits, written under the job's lock; the new edits."""
    with held(folder / ".edits.lock"):
        new = change(JobEdits.read(folder))
        new.write(folder)
    return new


def own_properties(properties: object) -> object:
    """A job's properties less what the local run adds (shown again from the run itself)."""
    if not isinstance(properties, dict):
        return properties
    return {k: v for k, v in properties.items()
            if not any(k == p or (p.endswith(".") and k.startswith(p))
                       for p in LOCAL_PROPERTIES)}


def _wrong(data: object) -> str:
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict):
        return "not an object with 'values'"
    if not isinstance(data.get("archived"), bool):
        return "its 'archived' is not true or false"
    for key, value in data["values"].items():
        if key not in MUTABLE:
            return f"{key!r} is not a value a job's update changes"
        if key in ("tags", "properties"):
            if value is not None and not (isinstance(value, dict) and all(
                    isinstance(v, str | None) for v in value.values())):
                return f"its {key!r} is not a mapping of text"
        elif not isinstance(value, str | None):
            return f"its {key!r} is not text"
    return ""


def _damaged(path: Path, what: str) -> DamagedRecord:
    return DamagedRecord(f"{path}: damaged job edits ({what}); remove it (the job then shows "
                         "its spec's description, tags, display name and properties again)")
