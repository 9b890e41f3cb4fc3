"""What the local twins of `az ml <kind> create|list|show|archive|restore` do; each prints what
`az ml` would print (JSON) and returns the exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mlops.runtime.uris import AssetMap
from mlops.workspace.drafts import default_type, draft_of, resolve_path
from mlops.workspace.records import AssetKind, AssetVersion
from mlops.workspace.store import LATEST, Draft, Workspace, workspace_root


@dataclass(frozen=True)
class Selection:
    """Which versions an action is about: one name, and a version or the label."""

    kind: AssetKind
    name: str
    version: str | None = None
    label: str | None = None


def _print(records: list[AssetVersion] | AssetVersion) -> None:
    shown = [r.summary() for r in records] if isinstance(records, list) else records.summary()
    print(json.dumps(shown, indent=2, default=str))


def _workspace() -> Workspace:
    return Workspace(workspace_root())


def create(spec: Path, *, kind: str | None, version: str | None, asset_file: Path) -> int:
    """`az ml <kind> create -f <spec>`."""
    with draft_of(spec, kind=kind, assets=AssetMap(asset_file), version=version) as draft:
        return create_from(draft)


def create_from(draft: Draft, *, path: str | None = None,
                asset_file: Path | None = None) -> int:
    """Register `draft` (`az ml model create --name --path`: `path` a local one, a job's
    output or a mapped URI); a new model is registered in MLflow too (mlflow_models.py)."""
    if path is not None:
        draft.source = resolve_path(path, asset_file)
    draft.type = draft.type or default_type(draft.kind)
    record = _workspace().create(draft)
    if draft.kind == AssetKind.MODEL and record.new:
        from mlops.workspace.mlflow_models import register_in_mlflow

        register_in_mlflow(record)
    _print(record)
    return 0


def listed(kind: AssetKind | None, name: str | None, archived: bool) -> int:
    """Every version of `name`, or the latest version of every name (as `az ml <kind> list`)."""
    workspace = _workspace()
    shown = []
    for each in [kind] if kind else list(AssetKind):
        names = [name] if name else workspace.names(each)
        if each == AssetKind.MODEL:
            from mlops.workspace.mlflow_models import registered_names, take_in

            names = [name] if name else sorted({*names, *registered_names()})
            for one in names:
                take_in(workspace, one)
        for one in names:
            versions = [v for v in workspace.versions(each, one) if archived or not v.archived]
            shown += versions if name else versions[-1:]
    _print(shown)
    return 0


def show(selection: Selection) -> int:
    from mlops.workspace.references import registered

    ref = f"azureml:{selection.name}" + (f":{selection.version}" if selection.version
                                         else f"@{selection.label or LATEST}")
    record = registered(ref, selection.kind, _workspace())
    if record is None:
        from mlops.errors import LocalRunError

        raise LocalRunError(f"{selection.kind.noun} {selection.name} is not in the local "
                            f"workspace {workspace_root()}")
    _print(record)
    return 0


def archive(selection: Selection, archived: bool) -> int:
    _print(_workspace().set_archived(selection.kind, selection.name, selection.version,
                                     archived))
    return 0
