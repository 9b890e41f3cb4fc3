"""A job's local paths as `az ml job show` prints them: az ml uploads every input given as a
local path to the workspace's blob datastore at create, and the job keeps the upload's URI,
`azureml://datastores/<datastore>/paths/LocalUpload/<hash>/<name>` (a folder's with a `/` at
its end), the hash azure-ai-ml's own `get_object_hash` of the file or folder, less what the
folder's .amlignore or .gitignore leaves out (`_upload_to_datastore`). Here the input is read
where it lies; the URI is computed as az ml computes it, once, on the job's first view (at
create, as Azure fixes it then), and kept in the run folder (`uploads.json`).

A command job also shows the output Azure gives every job, `default`: its run's artifacts at
`azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.<job name>`.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from mlops.workspace.records import write_atomic

CACHE = "uploads.json"
BLOB_STORE = "workspaceblobstore"
DEFAULT_OUTPUT = {"mode": "rw_mount", "type": "uri_folder",
                  "path": "azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.{}"}


def is_local(path: object) -> bool:
    """A path az ml uploads (job operations' `_resolve_job_input`): neither a URI, an
    `azureml:` reference, a data binding nor a name with `@`, `:` or `$`."""
    return isinstance(path, str) and bool(path) and "${{" not in path and (
        os.path.isabs(path) or (":" not in path and "@" not in path))


def upload_uri(path: Path, kind: str, datastore: str | None = None) -> str:
    """The URI az ml gives `path` once uploaded (FileNotFoundError when it is not there)."""
    from azure.ai.ml._utils._asset_utils import get_ignore_file, get_object_hash

    path = path.resolve()
    if not path.exists():
        raise FileNotFoundError(path)
    digest = get_object_hash(path, get_ignore_file(path))
    uri = f"azureml://datastores/{datastore or BLOB_STORE}/paths/LocalUpload/{digest}/{path.name}"
    return uri + "/" if kind == "uri_folder" and not uri.endswith("/") else uri


def _inputs(job) -> list:
    """The job's inputs and its steps', as azure-ai-ml's Input objects."""
    holders = [job, *(getattr(job, "jobs", None) or {}).values()]
    found = []
    for holder in holders:
        for value in (getattr(holder, "inputs", None) or {}).values():
            data = getattr(value, "_data", value)
            if hasattr(data, "path") and hasattr(data, "type"):
                found.append(data)
    return found


def as_uploaded(job, origin: Path, folder: Path) -> None:
    """Every local input path of `job` (relative to `origin`, the spec's folder) replaced by
    its upload's URI, computed on the first call and read from `folder` after it."""
    known = _read(folder / CACHE)
    changed = False
    for entry in _inputs(job):
        if not is_local(entry.path):
            continue
        key = f"{entry.type}|{entry.path}"
        if key not in known:
            try:
                known[key] = upload_uri(origin / entry.path, str(entry.type),
                                        getattr(entry, "datastore", None))
            except (OSError, ValueError):
                continue  # (gone since: shown as the spec gave it)
            changed = True
        entry.path = known[key]
    if changed:
        _write(folder / CACHE, known)


def with_default_output(view: dict[str, object], name: str) -> None:
    """A command job's `default` output, as the service adds it."""
    if view.get("type") == "command":
        outputs = view.setdefault("outputs", {})
        if isinstance(outputs, dict) and "default" not in outputs:
            outputs["default"] = {**DEFAULT_OUTPUT, "path": DEFAULT_OUTPUT["path"].format(name)}


def _read(path: Path) -> dict[str, str]:
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in known.items() if isinstance(v, str)} \
        if isinstance(known, dict) else {}


def _write(path: Path, known: dict[str, str]) -> None:
    """Replaced atomically; not kept where the run folder cannot be written (computed again)."""
    with contextlib.suppress(OSError):
        write_atomic(path, json.dumps(known, indent=2))
