"""Registered versions as `az ml <kind> show` prints them: azure-ai-ml's own entity (Model,
Data, Environment, a component) of the version, with the id and creation context a workspace
gives it; `path` is where the local workspace keeps its files."""

from __future__ import annotations

import getpass
import logging
from datetime import UTC, datetime

from mlops.api.views import GROUP, resource_id
from mlops.workspace.records import AssetKind, AssetVersion

AssetView = dict[str, object]


def _created(record: AssetVersion):
    from azure.ai.ml.entities._system_data import SystemData

    try:
        stamp = datetime.fromisoformat(record.created) if record.created else None
    except ValueError:
        stamp = None
    user = getpass.getuser()
    return SystemData(created_at=stamp or datetime.now(UTC), created_by=user,
                      created_by_type="User", last_modified_by=user,
                      last_modified_by_type="User")


def _entity(record: AssetVersion):
    """azure-ai-ml's entity of the version (a spec-registered environment or component from
    its registered spec, so every field it declares shows)."""
    from azure.ai.ml import entities, load_component, load_environment

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)  # after import: it sets its own
    common = {"name": record.name, "version": record.version,
              "description": record.description or None, "tags": dict(record.tags),
              "properties": dict(record.properties)}
    if record.kind == AssetKind.MODEL:
        return entities.Model(path=str(record.path), type=record.type or "custom_model",
                              stage=record.stage or None, **common)
    if record.kind == AssetKind.DATA:
        return entities.Data(path=str(record.path), type=record.type or "uri_folder", **common)
    spec = record.path / "spec.yml" if record.path.is_dir() else record.path
    if record.kind == AssetKind.COMPONENT:
        return load_component(source=spec, params_override=[{"name": record.name},
                                                             {"version": record.version}])
    environment = load_environment(source=spec, params_override=[{"name": record.name},
                                                                 {"version": record.version}])
    environment.description = record.description or None  # the spec's, or `update`'s
    environment.tags = dict(record.tags)
    return environment


def asset_view(record: AssetVersion) -> AssetView:
    """The version as `az ml <kind> show` prints it; its spec's own keys where azure-ai-ml
    cannot load the registered spec again (azure-ai-ml's experimental-class notes unsaid: az
    prints none with --only-show-errors, and they are no part of the output)."""
    try:
        entity = _entity(record)
        entity._creation_context = _created(record)  # noqa: SLF001 - as the service sets it
        view = entity._to_dict()  # noqa: SLF001 - what az ml prints
    except Exception:  # noqa: BLE001 - whatever the loader refuses, the record stands in
        view = {k: v for k, v in record.summary().items() if k not in ("kind", "sequence")}
    view["id"] = resource_id(f"{record.kind.value}/{record.name}/versions", record.version)
    if record.kind in (AssetKind.MODEL, AssetKind.DATA):
        view["path"] = str(record.path)
    view["resourceGroup"] = GROUP
    return view
