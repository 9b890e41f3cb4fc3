"""`az ml datastore create|show|list|delete` against the local workspace.

A spec is loaded by azure-ai-ml's own load_datastore with `--name` and `--set` as its
params_override, so what it refuses is refused here in its words; the datastore is kept
(workspace/resources.py) without its secrets (keys, SAS tokens, client secrets: the service
never returns them either). A workspace's own datastores (workspaceblobstore, ...) are always
there. Nothing is connected: `azureml://datastores/<name>/paths/...` reaches a local folder
only through the asset map (assets/local-paths.yml), which a note says.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlops.api.sdk_load import sdk_loaded
from mlops.api.views import GROUP, resource_id
from mlops.errors import LocalRunError, NotFound
from mlops.specs import SpecData, load_spec
from mlops.workspace import resources
from mlops.workspace.resources import DATASTORES
from mlops.workspace.store import Workspace, workspace_root

View = dict[str, object]
SECRETS = ("account_key", "sas_token", "client_secret", "certificate", "password")
# Every workspace's own datastores, as a new workspace has them
OWN: dict[str, SpecData] = {
    "workspaceblobstore": {"type": "azure_blob", "container_name": "azureml-blobstore"},
    "workspaceartifactstore": {"type": "azure_blob", "container_name": "azureml"},
    "workspacefilestore": {"type": "azure_file", "file_share_name": "azureml-filestore"},
    "workspaceworkingdirectory": {"type": "azure_file", "file_share_name": "code"},
}
NOT_CONNECTED = ("datastore {name} is kept in the local workspace; nothing is connected: "
                 "azureml://datastores/{name}/paths/... reaches a folder here through the asset "
                 "map (assets/local-paths.yml: 'azureml://datastores/{name}/paths/: <folder>/')")


def _without_secrets(spec: SpecData) -> SpecData:
    credentials = spec.get("credentials")
    return {**spec, "credentials": {k: v for k, v in (credentials.items() if isinstance(
        credentials, dict) else ()) if k not in SECRETS}}


def _view(name: str, spec: SpecData) -> View:
    return {"name": name, "account_name": "local", "endpoint": "core.windows.net",
            "protocol": "https", "tags": {}, **_without_secrets(spec),
            "id": resource_id("datastores", name), "resourceGroup": GROUP}


def create(spec: Path, overrides: list[dict[str, object]], root: Path | None = None) -> View:
    load_spec(spec)  # the project's limits first (a YAML bomb), before azure-ai-ml reads it
    loaded = sdk_loaded("datastore", spec, overrides, "datastore create")
    record = resources.write(Workspace(root or workspace_root()), DATASTORES,
                             str(loaded["name"]), _without_secrets(loaded))
    print(f"WARNING: {NOT_CONNECTED.format(name=record.name)}", file=sys.stderr)
    return _view(record.name, record.spec)


def show(name: str, root: Path | None = None) -> View:
    record = resources.read(Workspace(root or workspace_root()), DATASTORES, name)
    if record is not None:
        return _view(name, record.spec)
    if name in OWN:
        return _view(name, OWN[name])
    raise NotFound(f"datastore {name!r} is not in the local workspace; create it: azml "
                   "datastore create -f <spec>")


def every(root: Path | None = None) -> list[View]:
    kept = {r.name: r.spec for r in resources.every(Workspace(root or workspace_root()),
                                                     DATASTORES)}
    return [_view(name, spec) for name, spec in sorted({**OWN, **kept}.items())]


def delete(name: str, root: Path | None = None) -> None:
    if resources.remove(Workspace(root or workspace_root()), DATASTORES, name):
        return
    if name in OWN:
        raise LocalRunError(f"datastore {name} is one of the workspace's own; the local "
                            "workspace keeps it")
    raise NotFound(f"datastore {name!r} is not in the local workspace")
