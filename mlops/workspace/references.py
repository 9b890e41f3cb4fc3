"""What an `azureml:` reference names in the workspace, and its local files.

The forms Azure resolves in a workspace (a registry's resolve in registry.py, from the folder
the asset map names for it):
- `azureml:<name>:<version>`, `azureml:<name>@latest`;
- `azureml://locations/<l>/workspaces/<w>/<kind>/<name>/versions/<v>` (and `/labels/latest`),
  and the same under `azureml://subscriptions/<s>/resourcegroups/<g>/workspaces/<w>/`;
- `azureml://jobs/<job name>/outputs/<output>[/paths/<path>]`: a local run's output.
A name the workspace does not hold resolves to None (the mapping file is asked next); a name it
holds without the version asked for is an error that lists the versions it has.

Of these, `az ml job create` resolves the short names itself when a job is submitted
(azure-ai-ml's OperationOrchestrator.get_asset_arm_id): a label is looked up at once, a version
becomes the workspace's asset id, which Azure must find to accept the job; `azure_refusal` says
how it refuses a name its workspace lacks. The `azureml://` forms pass through it unresolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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


def submitted_name(reference) -> AssetRef | None:
    """The workspace asset a short name (`azureml:<name>[:<version>|@<label>]`) names: what
    az ml job create resolves at submission; None for anything else (URIs, paths, URLs)."""
    if not isinstance(reference, str) or not SHORT.match(reference):
        return None
    return parse(reference)


class Submission(NamedTuple):
    """The az ml command that resolves a spec's short names, and what it refuses."""

    command: str
    subject: str


JOB = Submission("az ml job create", "the job")


def submission(verb: str) -> Submission:
    """`online-deployment` -> az ml online-deployment create, which refuses the deployment (its
    upload_dependencies resolves the names, _utils/_endpoint_utils.py); `component` -> az ml
    component create, which refuses the component (_component_operations.py)."""
    return Submission(f"az ml {verb} create", f"the {verb.split('-')[-1]}")


def azure_refusal(reference: str, kind: AssetKind, by: Submission = JOB) -> str:
    """How `by` (az ml job create, unless a deployment's) refuses a short name its workspace
    does not hold, in azure-ai-ml's words where it says them itself ("" for a reference that is
    not a short name)."""
    ref = submitted_name(reference)
    if ref is None:
        return ""
    if ref.label == LATEST:
        return (f"{by.command} looks it up and refuses {by.subject}: 'Asset {ref.name} does not "
                "exist in workspace <workspace>.'")
    if ref.label is not None:
        return (f"{by.command} looks it up and refuses {by.subject}: 'Asset {ref.name} with "
                f"version label {ref.label} does not exist in workspace.'")
    if ref.version is None:
        return (f"{by.command} refuses a name without a version: 'Failed to extract version "
                f"when parsing asset {reference} of type {kind.value} as arm id. Version must "
                "be provided.'")
    return (f"{by.command} submits it as the workspace's {kind.value}/{ref.name}/versions/"
            f"{ref.version}, and Azure refuses {by.subject} when the workspace holds no such "
            "version")


def versionless_refusal(reference: str, kind: AssetKind) -> str:
    """How az ml job create refuses a short name with neither a version nor a label, whether or
    not the workspace holds it ("" for any other reference). azure-ai-ml's get_asset_arm_id
    turns each name into an asset id and asks the name for its version; its job schemas strip
    `azureml:` from an environment and a component (not from an input's path) before, and pass
    a curated `AzureML-` environment on for the service to expand."""
    ref = submitted_name(reference)
    if ref is None or ref.version is not None or ref.label is not None:
        return ""
    if kind == AssetKind.ENVIRONMENT and ref.name.startswith("AzureML-"):
        return ""
    asset = ref.name if kind in (AssetKind.ENVIRONMENT, AssetKind.COMPONENT) else reference
    return (f"az ml job create refuses {reference}: 'Failed to extract version when parsing "
            f"asset {asset} of type {kind.value} as arm id. Version must be provided.' Name a "
            f"version (azureml:{ref.name}:<version>) or a label (azureml:{ref.name}@latest)")


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
