"""What the local twins of `az ml <kind> create|list|show|archive|restore` do on the local
workspace (mlops/workspace); each returns the versions it registered, found or changed
(assets.py shows them as az prints them)."""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mlops.api.drafts import (
    Overrides,
    default_type,
    draft_of,
    path_matches_type,
    resolve_path,
)
from mlops.errors import LocalRunError
from mlops.runtime import AssetMap
from mlops.workspace import names
from mlops.workspace.records import AssetKind, AssetVersion, DamagedRecord
from mlops.workspace.store import LATEST, Draft, Workspace, workspace_root


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which versions an action is about: one name, and a version or the label."""

    kind: AssetKind
    name: str
    version: str | None = None
    label: str | None = None
    registry: str | None = None  # --registry-name: that registry's local store


def _workspace(registry: str | None = None) -> Workspace:
    """The local workspace, or with `registry` (`--registry-name`) the store of that registry
    here, which `azureml://registries/<registry>/...` resolves from (workspace/registry.py)."""
    if registry is None:
        return Workspace(workspace_root())
    from mlops.workspace.registry import REGISTRY_NAME, local_store

    if not re.fullmatch(REGISTRY_NAME, registry):
        raise LocalRunError(f"--registry-name {registry!r}: a registry's name is 3 to 33 "
                            "letters, digits, '-' or '_', starting with a letter or digit")
    return Workspace(local_store(registry))


def workspace_of(selection: Selection) -> Workspace:
    """The store a selection's versions are in: the workspace, or --registry-name's."""
    return _workspace(selection.registry)


def create(spec: Path | None, *, kind: str | None, overrides: Overrides,
           asset_file: Path | None, registry: str | None = None) -> AssetVersion:
    """`az ml <kind> create -f <spec> [--set K=V] [--name ...] [--registry-name <r>]`, or an
    environment from the command line's flags alone (`spec` None)."""
    with draft_of(spec, kind=kind, assets=AssetMap(asset_file), overrides=overrides) as draft:
        return create_from(draft, registry=registry)


def create_from(draft: Draft, *, path: str | None = None, asset_file: Path | None = None,
                registry: str | None = None) -> AssetVersion:
    """Register `draft` (`az ml model create --name --path`: `path` a local one, a job's
    output or a mapped URI); a new model is registered in MLflow too (mlflow_models.py), unless
    it goes into a registry."""
    if path is not None:
        draft.source = resolve_path(path, asset_file)
    draft.type = draft.type or default_type(draft.kind)
    if path is not None:
        path_matches_type(draft, path, "--path")
    record = _workspace(registry).create(draft)
    if draft.kind == AssetKind.MODEL and record.new and registry is None:
        from mlops.workspace.mlflow_models import register_in_mlflow

        register_in_mlflow(record)
    return record


def _named(kind: AssetKind, name: str) -> str:
    """A name from the command line, refused with Azure's rule before the disk is read."""
    return names.asset_name(kind.value, name, kind.noun)


def listed(kind: AssetKind | None, name: str | None, archived: bool,
           registry: str | None = None) -> list[AssetVersion]:
    """Every version of `name`, or the latest version of every name (as `az ml <kind> list`);
    a name with a damaged record is left out of the second with a warning."""
    workspace = _workspace(registry)
    shown = []
    for each in [kind] if kind else list(AssetKind):
        held = workspace.names(each) if registry else _held_names(workspace, each)
        for one in [_named(each, name)] if name else held:
            if name and each == AssetKind.MODEL and registry is None:
                from mlops.workspace.mlflow_models import take_in

                take_in(workspace, one)
            try:
                versions = [v for v in workspace.versions(each, one)
                            if archived or not v.archived]
            except DamagedRecord as err:
                if name:  # the one asked for: said as the error it is
                    raise
                print(f"WARNING: {err}; {each.noun} {one} is left out of the list",
                      file=sys.stderr)  # one damaged record hides no other name
                continue
            shown += versions if name else versions[-1:]
    return shown


def _held_names(workspace: Workspace, kind: AssetKind) -> list[str]:
    """The names of `kind` the workspace holds; for models, with those MLflow's registry holds
    taken in first (a name Azure refuses is said on stderr and left out)."""
    found = workspace.names(kind)
    if kind != AssetKind.MODEL:
        return found
    from mlops.workspace.mlflow_models import registered_names, take_in

    for one in sorted(set(registered_names()) - set(found)):
        if not workspace.holds(kind, one):
            print(f"warning: MLflow's registry holds a model named {one!r}, a name Azure "
                  "refuses for a model; it is not taken into the local workspace",
                  file=sys.stderr)
    found = sorted({*found, *(n for n in registered_names() if workspace.holds(kind, n))})
    for one in found:
        with contextlib.suppress(DamagedRecord):  # listed() says so, and leaves it out
            take_in(workspace, one)
    return found


def show(selection: Selection) -> AssetVersion:
    from mlops.workspace.references import registered

    _named(selection.kind, selection.name)
    ref = f"azureml:{selection.name}" + (f":{selection.version}" if selection.version
                                         else f"@{selection.label or LATEST}")
    from mlops.errors import NotFound
    from mlops.workspace.store import MissingVersion

    workspace = _workspace(selection.registry)
    try:
        record = workspace.find(selection.kind, selection.name, version=selection.version,
                                label=selection.label) if selection.registry else \
            registered(ref, selection.kind, workspace)
    except MissingVersion as err:  # az: the service's 404, exit 3, as for an unknown name
        raise NotFound(str(err)) from None
    if record is None:
        raise NotFound(f"{selection.kind.noun} {selection.name} is not in the local "
                       f"{'registry' if selection.registry else 'workspace'} {workspace.root}")
    return record


def archive(selection: Selection, archived: bool) -> list[AssetVersion]:
    _named(selection.kind, selection.name)
    return _workspace(selection.registry).set_archived(selection.kind, selection.name,
                                                       selection.version, archived)


def download(selection: Selection, target: Path) -> Path:
    """`az ml model download`: the version's files, checked against their digest, under
    `<target>/<name>/`, as azure-ai-ml's ModelOperations.download lays them out: a folder model
    as `<name>/<its folder's name>/...`, a file model as `<name>/<its file>`; files already
    there are overwritten, and the copies are the user's to change (not read-only)."""
    import shutil

    record = show(selection)
    source = _workspace(selection.registry).checked(record)
    into = target / record.name / (source.name if source.is_dir() else "")
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for file in files:
        destination = into / (file.name if file == source else file.relative_to(source))
        destination.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            destination.unlink()  # a read-only file from an earlier download is replaced too
        shutil.copyfile(file, destination)
    return into

