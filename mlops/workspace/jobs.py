"""Finished local jobs, by name, for `azureml://jobs/<name>/outputs/<output>`; and the outputs a
job declares with `name:` (and `version:`), registered when it completes, as Azure registers
them (a model type as a model, any other as a data asset).

A job's name is its spec's `name:` (Azure's job name), else its run folder's name (Azure would
generate one). `<root>/jobs/<name>.json` maps each output to its local path.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.runtime.values import MODEL_TYPES
from mlops.specs import SpecData
from mlops.workspace.records import AssetKind, AssetVersion
from mlops.workspace.store import Draft, Workspace, workspace_root


def _index(workspace: Workspace) -> Path:
    return workspace.root / "jobs"


def record_job(workspace: Workspace, names: list[str], outputs: dict[str, str]) -> None:
    folder = _index(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"outputs": outputs}, indent=2) + "\n"
    for name in dict.fromkeys(n for n in names if n and "/" not in n and not n.startswith(".")):
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / f"{name}.json")


def job_output(workspace: Workspace, job: str, output: str, subpath: str | None) -> Path:
    path = _index(workspace) / f"{job}.json"
    try:
        outputs = json.loads(path.read_text())["outputs"]
    except FileNotFoundError:
        known = sorted(p.stem for p in _index(workspace).glob("*.json"))[-10:]
        raise LocalRunError(f"azureml://jobs/{job}: no finished local job of that name in "
                            f"{workspace.root} (the newest: {', '.join(known) or 'none'})"
                            ) from None
    except (OSError, ValueError, KeyError) as err:
        raise LocalRunError(f"{path}: damaged job record ({err})") from None
    if output not in outputs:
        raise LocalRunError(f"azureml://jobs/{job}: it has no output {output!r} (it has "
                            f"{', '.join(sorted(outputs)) or 'none'})")
    local = Path(outputs[output])
    return local / subpath if subpath else local


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
            AssetKind.MODEL if kind in MODEL_TYPES else AssetKind.DATA, str(spec["name"]), source,
            version=None if version is None else str(version), type=kind,
            description=str(spec.get("description") or ""), origin=f"{origin}: {output}")))
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
    except (LocalRunError, OSError) as err:
        print(f"error: {label} completed, but registering its outputs failed: {err}",
              file=sys.stderr)
        return 1
    return 0
