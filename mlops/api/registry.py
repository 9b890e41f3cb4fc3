"""What the local twins of `az ml <kind> create|list|show|archive|restore` do on the local
workspace (mlops/workspace); each returns the versions it registered, found or changed
(assets.py shows them as az prints them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlops.api.drafts import default_type, draft_of, resolve_path
from mlops.runtime.uris import AssetMap
from mlops.workspace.records import AssetKind, AssetVersion
from mlops.workspace.store import LATEST, Draft, Workspace, workspace_root


@dataclass(frozen=True)
class Selection:
    """Which versions an action is about: one name, and a version or the label."""

    kind: AssetKind
    name: str
    version: str | None = None
    label: str | None = None


def _workspace() -> Workspace:
    return Workspace(workspace_root())


def create(spec: Path, *, kind: str | None, version: str | None,
           asset_file: Path | None) -> AssetVersion:
    """`az ml <kind> create -f <spec>`."""
    with draft_of(spec, kind=kind, assets=AssetMap(asset_file), version=version) as draft:
        return create_from(draft)


def create_from(draft: Draft, *, path: str | None = None,
                asset_file: Path | None = None) -> AssetVersion:
    """Register `draft` (`az ml model create --name --path`: `path` a local one, a job's
    output or a mapped URI); a new model is registered in MLflow too (mlflow_models.py)."""
    if path is not None:
        draft.source = resolve_path(path, asset_file)
    draft.type = draft.type or default_type(draft.kind)
    record = _workspace().create(draft)
    if draft.kind == AssetKind.MODEL and record.new:
        from mlops.workspace.mlflow_models import register_in_mlflow

        register_in_mlflow(record)
    return record


def listed(kind: AssetKind | None, name: str | None, archived: bool) -> list[AssetVersion]:
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
    return shown


def show(selection: Selection) -> AssetVersion:
    from mlops.workspace.references import registered

    ref = f"azureml:{selection.name}" + (f":{selection.version}" if selection.version
                                         else f"@{selection.label or LATEST}")
    record = registered(ref, selection.kind, _workspace())
    if record is None:
        from mlops.errors import NotFound

        raise NotFound(f"{selection.kind.noun} {selection.name} is not in the local "
                       f"workspace {workspace_root()}")
    return record


def archive(selection: Selection, archived: bool) -> list[AssetVersion]:
    return _workspace().set_archived(selection.kind, selection.name, selection.version,
                                     archived)
