"""`az ml compute create|show|list|update|delete` against the local workspace.

A spec (or the flags alone) is loaded by azure-ai-ml's own load_compute, with az's flags as its
params_override, so what it refuses (an unknown type or field) is refused here with its words;
the loaded compute is kept (workspace/resources.py) and shown as az shows it: the entity's fields,
with the id a workspace gives it and `provisioning_state: Succeeded`. Nothing is provisioned:
every job runs on this machine whatever `compute:` it names, which a note says once.
"""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mlops.api.sdk_load import sdk_loaded
from mlops.api.views import GROUP, resource_id
from mlops.errors import LocalRunError, NotFound
from mlops.specs import SpecData, load_spec
from mlops.workspace import resources
from mlops.workspace.resources import COMPUTES
from mlops.workspace.store import Workspace, workspace_root

View = dict[str, object]
UPDATABLE = ("amlcompute", "kubernetes", "computeinstance", "synapsespark")  # the extension's
INSTANCE, RUNNING, STOPPED = "computeinstance", "Running", "Stopped"
# the service's refusals of a name, as users quote them (a cluster: MicrosoftLearning/DP100#50,
# MicrosoftDocs/mslearn-aml-labs#17; an instance: MicrosoftDocs/pipelines-azureml#19); the
# names of other kinds (attached computes) have no refusal on record here and are not checked
NAME_RULES = {
    "amlcompute": (r"[A-Za-z]([A-Za-z0-9-]{0,14}[A-Za-z0-9])?",
                   "Compute name is invalid. It can include letters, digits and dashes. It must "
                   "start with a letter, end with a letter or digit, and be between 2 and 16 "
                   "characters in length."),
    INSTANCE: (r"[A-Za-z][A-Za-z0-9-]{1,22}[A-Za-z0-9](?<!-[0-9])",
               "A name for an Azure ML Compute Instance must be between 3 and 24 characters in "
               "length and must use only numbers, letters and minus symbol (-), must start with "
               "letters. Numbers cannot be the ending of the name if the previous character is "
               "a minus symbol (-)."),
}
NOT_PROVISIONED = ("compute {name} is kept in the local workspace; nothing is provisioned: "
                   "jobs here run on this machine whatever compute: they name")


@dataclass(frozen=True, kw_only=True)
class ComputeRequest:
    """`az ml compute create [-f S] [--name N] [--type T] [--size ...] [--set k=v]`: az's
    params_override, in its order (--set, then each flag given); no spec: the flags alone."""

    spec: Path | None = None
    overrides: tuple[tuple[str, object], ...] = ()


def _load(source: Path | io.StringIO | None, override: list[dict[str, object]],
          verb: str) -> SpecData:
    """The compute as azure-ai-ml's load_compute makes it (from the spec, or from the flags
    alone where there is none, as az does), or its refusal in its words."""
    return sdk_loaded("compute", source, override, f"compute {verb}")


def _view(record: resources.ResourceRecord) -> View:
    return {"location": "local", **record.spec, "id": resource_id("computes", record.name),
            "provisioning_state": "Succeeded",
            "created_on": record.created, "resourceGroup": GROUP}


def _size_note(spec: SpecData) -> None:
    from mlops.checks import skus

    size = spec.get("size")
    if isinstance(size, str) and not skus.canonical(size):
        print(f"WARNING: size {size!r} is not a VM size the local checks know "
              f"(mlops/checks/skus.py). {skus.suggestion(size)}".rstrip(), file=sys.stderr)


def _check_name(spec: SpecData) -> None:
    """The name the service takes for the compute's kind (NAME_RULES), else its refusal."""
    rule = NAME_RULES.get(str(spec.get("type") or "").lower())
    name = str(spec["name"])
    if rule and (len(name) < 2 or not re.fullmatch(rule[0], name)):
        raise LocalRunError(f"compute create: Compute name '{name}' is not available. Reason: "
                            f"Invalid. {rule[1]} Fix: rename it")


def create(request: ComputeRequest, root: Path | None = None) -> View:
    if request.spec is not None:  # read with the project's limits first (a YAML bomb, a
        load_spec(request.spec)  # binary file) before azure-ai-ml reads it whole
    spec = _load(request.spec, [{k: v} for k, v in request.overrides], "create")
    if spec.get("type") == "synapsespark":  # the ml extension's ml_compute_create
        raise LocalRunError("Create operation not supported for synapsespark compute type. "
                            "Please try attach operation for attaching synapsespark compute")
    if not spec.get("name"):
        raise LocalRunError("compute create: the compute has no name; give name: in the spec "
                            "or --name")
    _check_name(spec)
    _size_note(spec)
    if spec.get("type") == INSTANCE:  # what the service reports once an instance is created
        spec["state"] = RUNNING
    print(f"WARNING: {NOT_PROVISIONED.format(name=spec['name'])}", file=sys.stderr)
    workspace = Workspace(root or workspace_root())
    return _view(resources.write(workspace, COMPUTES, str(spec["name"]), spec))


def show(name: str, root: Path | None = None) -> View:
    return _view(resources.required(root, COMPUTES, name))



def every(kind: str | None = None, root: Path | None = None) -> list[View]:
    """`az ml compute list [--type T]`."""
    found = [_view(r) for r in resources.every(Workspace(root or workspace_root()), COMPUTES)]
    return [v for v in found if kind is None or str(v.get("type")).lower() == kind.lower()]


def update(name: str, overrides: tuple[tuple[str, object], ...],
           root: Path | None = None) -> View:
    """`az ml compute update -n N [--min-instances ...] [--set ...]`: as the ml extension's
    _ml_compute_update, the kept compute's fields (less ssh_settings), its name, then the
    changes, loaded by load_compute; only the types it updates."""
    kept = resources.required(root, COMPUTES, name)
    if kept.spec.get("type") not in UPDATABLE:
        raise LocalRunError(f"Only AmlCompute/KubernetesCompute cluster properties are "
                            f"supported, compute name {name}, is {kept.spec.get('type')} type.")
    given = [{k: v} for k, v in kept.spec.items() if k not in ("ssh_settings", "state")]
    spec = _load(None, [*given, {"name": name}, *({k: v} for k, v in overrides)], "update")
    if spec.get("name") != name:
        raise LocalRunError("compute update: a compute's name cannot change; create another")
    _size_note(spec)
    if "state" in kept.spec:  # the instance's own (dump-only: no load sets it)
        spec["state"] = kept.spec["state"]
    return _view(resources.write(Workspace(root or workspace_root()), COMPUTES, name, spec))


def delete(name: str, root: Path | None = None) -> None:
    if not resources.remove(Workspace(root or workspace_root()), COMPUTES, name):
        raise NotFound(f"compute {name!r} is not in the local workspace")


def power(name: str, action: str, root: Path | None = None) -> None:
    """`az ml compute start|stop|restart -n N`: the compute instance's state, as its record keeps
    it (nothing runs: jobs run on this machine whatever the state). The service's Compute
    Start/Stop/Restart act on a compute instance (azure-ai-ml's begin_start: "Start a compute
    instance"); start is refused unless it is stopped, in the service's words."""
    kept = resources.required(root, COMPUTES, name)
    if kept.spec.get("type") != INSTANCE:
        raise LocalRunError(f"compute {action}: {name} is {kept.spec.get('type')}: the "
                            f"service's {action} acts on a compute instance (computeinstance) "
                            "only; a cluster scales with min_instances/max_instances (azml "
                            "compute update)")
    if action == "start" and kept.spec.get("state") != STOPPED:
        raise LocalRunError("(StartComputeInstanceOnlyAllowedInStoppedState) Start Azure ML "
                            f"Compute Instance is only allowed when the instance {name} is in "
                            "'stopped' state")
    spec = {**kept.spec, "state": STOPPED if action == "stop" else RUNNING}
    resources.write(Workspace(root or workspace_root()), COMPUTES, name, spec)
