"""Finished local jobs, by name, for `azureml://jobs/<name>/outputs/<output>`; and the outputs a
job declares with `name:` (and `version:`), registered when it completes, as Azure registers
them (a model type as a model, any other as a data asset).

A job's name is its spec's `name:` (Azure's job name, unique in a workspace: claimed when the
job starts), else its run folder's name (Azure would generate one). `<root>/jobs/<name>.json`
holds its run folder and, once it completed, each output's local path.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from mlops.errors import LocalError, LocalRunError
from mlops.specs import SpecData
from mlops.workspace import names
from mlops.workspace.records import (
    MAX_RECORD,
    AssetKind,
    AssetVersion,
    DamagedRecord,
    asset_kind,
    held,
    write_atomic,
)
from mlops.workspace.store import Draft, Workspace, workspace_root

JobEntry = dict[str, object]  # a job record: folder, outputs, completed[, artifacts]
# every job's default output on Azure: the run's artifacts (outputs/, logs/, user_logs/ and what
# the job logged through MLflow), `azureml://jobs/<name>/outputs/artifacts/paths/<path>`
ARTIFACTS = "artifacts"
MAX_FILE_NAME = 255  # bytes, on every file system a laptop has


def _index(workspace: Workspace) -> Path:
    return workspace.root / "jobs"


def _record_file(index: Path, name: str) -> Path:
    """`<name>.json`; a name too long for a file name of its own (Azure's run ids reach 256
    characters, a file name 255 bytes) is cut and told apart by its digest ('~' is in no job
    name)."""
    if len(name) <= MAX_FILE_NAME - len(".json"):
        return index / f"{name}.json"
    return index / f"{name[:200]}~{hashlib.sha256(name.encode()).hexdigest()[:16]}.json"


def _damaged(path: Path, what: str) -> DamagedRecord:
    return DamagedRecord(f"{path}: damaged job record ({what}); remove it (the job is then "
                         "unknown to azureml://jobs/ references: run it again to make one)")


def _entry(path: Path) -> JobEntry | None:
    """The job record at `path` (None when there is none), every field type-checked."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_RECORD + 1)
        entry = json.loads(text) if len(text) <= MAX_RECORD else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as err:
        raise _damaged(path, str(err)) from None
    wrong = _wrong(entry)
    if wrong:
        raise _damaged(path, wrong)
    return entry


def _wrong(entry: object) -> str:
    if not isinstance(entry, dict):
        return "not a JSON object" if entry is not None else f"over {MAX_RECORD} bytes"
    if not isinstance(entry.get("folder"), str) or not Path(entry["folder"]).is_absolute():
        return "its 'folder' is not an absolute path"
    if not isinstance(entry.get("completed"), bool):
        return "its 'completed' is not true or false"
    outputs = entry.get("outputs")
    if not isinstance(outputs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and Path(v).is_absolute()
            for k, v in outputs.items()):
        return "its 'outputs' is not a mapping of output names to absolute paths"
    artifacts = entry.get(ARTIFACTS, "/")
    if not isinstance(artifacts, str) or not Path(artifacts).is_absolute():
        return f"its {ARTIFACTS!r} is not an absolute path"
    return ""


def _write(folder: Path, name: str, entry: JobEntry) -> None:
    write_atomic(_record_file(folder, name), json.dumps({**entry, "name": name}, indent=2) + "\n")


def _valid(name: str) -> bool:
    try:
        names.job_name(name)
    except names.InvalidName:
        return False
    return True


def claim_name(workspace: Workspace, name: str, run_folder: Path) -> None:
    """A spec's `name:` taken for `run_folder` before the job runs: a job name is unique in a
    workspace, so Azure refuses a second job of that name (a run into the same folder resumes
    it; a name whose run folder is gone is free again here)."""
    names.job_name(name)
    index = _index(workspace)
    index.mkdir(parents=True, exist_ok=True)
    with held(index / ".lock"):
        entry = _entry(_record_file(index, name))
        if entry is not None and Path(str(entry.get("folder"))) != run_folder and \
                Path(str(entry.get("folder"))).exists():
            raise LocalRunError(f"job name {name!r} is taken by the local run "
                                f"{entry.get('folder')}: names are unique in a workspace, and "
                                "Azure refuses a second job of the same name. Give another "
                                "`name:` (or --set name=...), or leave it out")
        _write(index, name, {"folder": str(run_folder), "outputs": {}, "completed": False})


def record_job(workspace: Workspace, job_names: list[str], run_folder: Path,
               outputs: dict[str, str], artifacts: Path | None = None) -> None:
    """A completed job's outputs, by its spec's name and its run folder's name; `artifacts`:
    the folder of its default `artifacts` output (its MLflow run's artifacts)."""
    index = _index(workspace)
    index.mkdir(parents=True, exist_ok=True)
    entry: JobEntry = {"folder": str(run_folder), "outputs": outputs, "completed": True}
    if artifacts is not None:
        entry[ARTIFACTS] = str(artifacts)
    for name in dict.fromkeys(n for n in job_names if _valid(n)):
        _write(index, name, entry)


def job_output(workspace: Workspace, job: str, output: str, subpath: str | None) -> Path:
    """The local path of `azureml://jobs/<job>/outputs/<output>[/paths/<subpath>]`: within
    that output, whatever the subpath says; `artifacts`, unless the job declares an output of
    that name, is its default one (its MLflow run's artifacts)."""
    names.job_name(job)
    entry = _entry(_record_file(_index(workspace), job))
    if entry is None:
        known = sorted(p.stem for p in _index(workspace).glob("*.json"))[-10:]
        raise LocalRunError(f"azureml://jobs/{job}: no finished local job of that name in "
                            f"{workspace.root} (the newest: {', '.join(known) or 'none'})")
    if not entry["completed"]:
        raise LocalRunError(f"azureml://jobs/{job}: the local job of that name has not "
                            f"completed (its run: {entry['folder']})")
    outputs = {**entry["outputs"]}
    if output == ARTIFACTS and ARTIFACTS not in outputs and ARTIFACTS in entry:
        outputs[ARTIFACTS] = str(entry[ARTIFACTS])  # a declared output of that name wins
    if output not in outputs:
        unrecorded = (" (its default artifacts were not recorded: its MLflow run's artifacts "
                      "are not a local folder, or it ran before azml recorded them)"
                      if output == ARTIFACTS else "")
        raise LocalRunError(f"azureml://jobs/{job}: it has no output {output!r} (it has "
                            f"{', '.join(sorted(outputs)) or 'none'}){unrecorded}")
    local = Path(outputs[output])
    if not subpath:
        return local
    inside = Path(os.path.realpath(local / subpath))
    if ".." in Path(subpath).parts or not inside.is_relative_to(os.path.realpath(local)):
        raise LocalRunError(f"azureml://jobs/{job}/outputs/{output}/paths/{subpath}: the path "
                            f"leaves the output {output!r} ({inside}); a path under an output "
                            "names a file or folder inside it")
    return local / subpath


def register_outputs(workspace: Workspace, declared: SpecData | None,
                     paths: dict[str, str], origin: str) -> list[AssetVersion]:
    """Register each output declared with `name:` that the job wrote."""
    done = []
    for output, spec in (declared or {}).items():
        if not isinstance(spec, dict) or not spec.get("name") or output not in paths:
            continue
        kind = str(spec.get("type") or "uri_folder")
        source = Path(paths[output])
        if not source.exists():
            continue
        version = spec.get("version")
        done.append(workspace.create(Draft(
            kind=AssetKind.parse(asset_kind(kind)), name=str(spec["name"]), source=source,
            version=None if version is None else str(version), type=kind,
            description=str(spec.get("description") or ""), origin=f"{origin}: {output}",
            uploaded=False)))
    return done


def register_named(declared: SpecData | None, paths: dict[str, str], *, origin: str,
                   label: str) -> int:
    """register_outputs in the workspace of this checkout, each registration on a line; 1 when
    the workspace refused one (a version that exists with other content), with the reason."""
    if not any(isinstance(v, dict) and v.get("name") for v in (declared or {}).values()):
        return 0
    try:
        for record in register_outputs(Workspace(workspace_root()), declared, paths, origin):
            print(f"{label}: registered {record.kind.noun} {record.reference} in the local "
                  "workspace", flush=True)
    except (LocalError, OSError) as err:
        print(f"error: {label} completed, but registering its outputs failed: {err}",
              file=sys.stderr)
        return 1
    return 0


def job_folder(workspace: Workspace, name: str) -> Path | None:
    """The run folder of the local job `name` (None when the workspace knows no such job)."""
    if not _valid(name):
        return None
    entry = _entry(_record_file(_index(workspace), name))
    return Path(str(entry["folder"])) if entry is not None else None


def job_names(workspace: Workspace) -> list[str]:
    """Every job name the workspace holds (a run folder may hold two: the spec's `name:` and
    the folder's own, for jobs recorded before names were claimed at start)."""
    index = _index(workspace)
    if not index.is_dir():
        return []
    return sorted(p.stem if "~" not in p.stem else str((_entry(p) or {}).get("name", p.stem))
                  for p in index.glob("*.json"))


def completed_outputs(workspace: Workspace, name: str) -> dict[str, str]:
    """A completed job's outputs by name (empty when it has not completed)."""
    entry = _entry(_record_file(_index(workspace), name)) if _valid(name) else None
    return dict(entry["outputs"]) if entry and entry.get("completed") else {}
