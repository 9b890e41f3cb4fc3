"""What an `azureml:` reference names in the workspace, and its local files.

The forms Azure resolves in a workspace (a registry's resolve in registry.py, from the folder
the asset map names for it):
- `azureml:<name>:<version>`, `azureml:<name>@latest`;
- `azureml://locations/<l>/workspaces/<w>/<kind>/<name>/versions/<v>` (and `/labels/latest`),
  and the same under `azureml://subscriptions/<s>/resourcegroups/<g>/workspaces/<w>/`;
- `azureml://jobs/<job name>/outputs/<output>[/paths/<path>]`: a local run's output.
A name the workspace does not hold resolves to None (the mapping file is asked next); a name it
holds without the version asked for is an error that lists the versions it has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mlops.workspace.records import AssetKind, AssetVersion
from mlops.workspace.store import LATEST, Workspace, workspace_root

SHORT = re.compile(r"^azureml:(?!//)([^@:/]+)(?::([^@:/]+)|@([^@:/]+))?$")
LONG = re.compile(r"^azureml://(?:locations/[^/]+|subscriptions/[^/]+/resource[gG]roups/[^/]+"
                  r"(?:/providers/[^/]+)?)/workspaces/[^/]+/(models|data|environments|"
                  r"components)/([^/]+)(?:/(versions|labels)/([^/]+))?/?$")
JOB_OUTPUT = re.compile(r"^azureml://jobs/([^/]+)/outputs/([^/]+)(?:/paths/(.*))?$")


@dataclass(frozen=True, kw_only=True)
class AssetRef:
    """A reference to one version (or the label) of a named asset."""

    kind: AssetKind | None  # None: the short form, whose kind the place it is used in gives
    name: str
    version: str | None = None
    label: str | None = None


def parse(reference: str) -> AssetRef | None:
    """The named asset `reference` points at; None for anything else (datastores, URLs)."""
    short = SHORT.match(reference)
    if short:
        name, version, label = short.groups()
        return AssetRef(kind=None, name=name, version=version,
                        label=label if version is None else None)
    long = LONG.match(reference)
    if long:
        kind, name, by, value = long.groups()
        if by == "versions":
            return AssetRef(kind=AssetKind(kind), name=name, version=value)
        return AssetRef(kind=AssetKind(kind), name=name, label=value or LATEST)
    return None


def registered(reference: str, kind: AssetKind,
               workspace: Workspace | None = None) -> AssetVersion | None:
    """The version `reference` names among the workspace's assets of `kind` (or of the kind
    the URI names), None when the workspace holds no such name."""
    ref = parse(reference)
    if ref is None:
        return None
    workspace = workspace or Workspace(workspace_root())
    if kind == AssetKind.MODEL:
        from mlops.workspace.mlflow_models import take_in

        take_in(workspace, ref.name)
    return workspace.find(ref.kind or kind, ref.name, version=ref.version, label=ref.label)


def local_path(reference: str, kind: AssetKind,
               workspace: Workspace | None = None) -> Path | None:
    """The checked files of the registered version `reference` names, or a finished local
    job's output; None when the workspace knows neither."""
    workspace = workspace or Workspace(workspace_root())
    output = JOB_OUTPUT.match(reference)
    if output:
        from mlops.workspace.jobs import job_output

        return job_output(workspace, *output.groups())
    record = registered(reference, kind, workspace)
    return workspace.checked(record) if record is not None else None
