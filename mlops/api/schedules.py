"""`az ml schedule create|show|list|update|enable|disable|delete|trigger` against the local
workspace.

A schedule's YAML (the schedule.schema.json kind) is loaded by azure-ai-ml's load_schedule, as
the ml extension loads it, with --set and --name as its params_override; its `create_job` is
checked as `job create` checks a job (mlops/checks/prepare.py), and the schedule is kept in the
local workspace (workspace/resources.py) with what its trigger runs (schedule_plans.py). Nothing
here fires it on its cron or recurrence: a laptop keeps no always-on service, so create says so
and `trigger` runs its job once, now, through `job create`'s own path.
"""

from __future__ import annotations

import copy
import getpass
import io
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from mlops.api import generic_update
from mlops.api.schedule_plans import Plan, plan_of, rerun_sets
from mlops.api.views import GROUP, resource_id
from mlops.checks.overrides import apply_sets, parse_sets
from mlops.errors import LocalRunError, NotFound
from mlops.specs import SpecData, load_spec
from mlops.workspace import resources
from mlops.workspace.resources import SCHEDULES
from mlops.workspace.store import Workspace, workspace_root

View = dict[str, object]
NOT_FIRED = ("WARNING: schedule {name} is kept in the local workspace; nothing here fires it on "
             "its trigger (no always-on service runs on this machine): azml schedule trigger -n "
             "{name} runs its job once, now")
SCHEDULE_KEYS = ("description", "display_name", "properties", "tags", "trigger")  # update's


@dataclass(frozen=True, kw_only=True)
class ScheduleRequest:
    """`az ml schedule create -f S [-n N] [--set k=v ...]`, and the maps its job is checked
    with."""

    spec: Path
    name: str | None = None
    sets: tuple[str, ...] = ()
    asset_file: Path | None = None
    env_file: Path | None = None


def _loaded(source: Path | io.StringIO, override: list[dict[str, object]], what: str,
            origin: Path | None = None):
    """azure-ai-ml's JobSchedule of `source`, or its refusal in its words (exit 2)."""
    from azure.ai.ml.entities import JobSchedule
    from azure.ai.ml.entities._load_functions import load_schedule

    logging.getLogger("azure.ai.ml").setLevel(logging.ERROR)
    try:
        entity = load_schedule(source, relative_origin=str(origin) if origin else None,
                               params_override=override)
    except Exception as err:  # noqa: BLE001 - marshmallow's and azure-ai-ml's refusals
        raise LocalRunError(f"{what}: {str(err).strip()}") from None
    if not isinstance(entity, JobSchedule):
        raise LocalRunError(f"{what}: a {type(entity).__name__} has nothing to run here: azml "
                            "keeps job schedules (create_job) only")
    return entity


def create(request: ScheduleRequest, root: Path | None = None) -> View:
    """The schedule, loaded and its job checked, kept (created again over one of its name)."""
    from mlops.checks.prepare import prepare_job
    from mlops.runtime import AssetMap

    spec = load_spec(request.spec)  # the project's limits first (a YAML bomb)
    override = [*parse_sets(list(request.sets), request.spec),
                *([{"name": request.name}] if request.name else [])]
    entity = _loaded(request.spec, override, "schedule create")
    raw = apply_sets(copy.deepcopy(spec.data), override, request.spec)
    plan = plan_of(raw.get("create_job"), request.spec)
    if plan.job_file is not None:  # what job create checks, before anything is kept
        try:
            prepare_job(plan.job_file, list(plan.sets), [], AssetMap(request.asset_file),
                        env_file=request.env_file)
        except LocalRunError as err:
            raise LocalRunError(f"schedule create: create_job: {err}") from None
    kept = {"schedule": entity._to_dict(), "is_enabled": True, "run": plan.record()}  # noqa: SLF001
    record = resources.write(Workspace(root or workspace_root()), SCHEDULES, entity.name, kept)
    print(NOT_FIRED.format(name=entity.name), file=sys.stderr)
    return _view(record)


def _view(record: resources.ResourceRecord) -> View:
    """The schedule as az prints it (azure-ai-ml's JobSchedule dumped), with what the service
    adds: its id, state and creation context, and its tags and properties ({} when none)."""
    user = getpass.getuser()
    return {"tags": {}, "properties": {}, **dict(record.spec["schedule"]),
            "is_enabled": bool(record.spec["is_enabled"]),
            "provisioning_state": "Succeeded", "id": resource_id("schedules", record.name),
            "creation_context": {"created_at": record.created, "created_by": user,
                                 "created_by_type": "User",
                                 "last_modified_at": record.modified,
                                 "last_modified_by": user, "last_modified_by_type": "User"},
            "resourceGroup": GROUP}



def show(name: str, root: Path | None = None) -> View:
    return _view(resources.required(root, SCHEDULES, name))


def every(enabled: bool | None = True, root: Path | None = None) -> list[View]:
    """`az ml schedule list`: the enabled ones (None: all; False: the disabled ones)."""
    found = [_view(r) for r in resources.every(Workspace(root or workspace_root()), SCHEDULES)]
    return [v for v in found if enabled is None or v["is_enabled"] == enabled]


def enable(name: str, enabled: bool, root: Path | None = None) -> View:
    """`az ml schedule enable|disable`: the schedule, kept again with its new state."""
    record = resources.required(root, SCHEDULES, name)
    kept = {**record.spec, "is_enabled": enabled}
    return _view(resources.write(Workspace(root or workspace_root()), SCHEDULES, name, kept))


def delete(name: str, root: Path | None = None) -> None:
    """`az ml schedule delete`: the jobs it triggered stay, as on Azure."""
    if not resources.remove(Workspace(root or workspace_root()), SCHEDULES, name):
        raise NotFound(f"schedule {name!r} is not in the local workspace")


def update(name: str, edits: list[generic_update.Edit], *, force_string: bool = False,
           root: Path | None = None) -> View:
    """`az ml schedule update -n N --set ...`: az's generic update over the schedule as shown;
    its own fields loaded again by load_schedule (a trigger it refuses: exit 2)."""
    record = resources.required(root, SCHEDULES, name)
    before = _view(record)
    after = generic_update.apply(copy.deepcopy(before), edits, force_string=force_string)
    if after.get("name") != name:
        raise LocalRunError("schedule update: a schedule's name cannot change; create another")
    if after.get("create_job") != before.get("create_job"):
        raise LocalRunError("schedule update: azml changes a schedule's trigger, display_name, "
                            "description, tags and properties; to change the job it runs, "
                            "create it again: azml schedule create -f <spec>")
    own = {k: after[k] for k in SCHEDULE_KEYS if after.get(k) is not None}
    probe = yaml.safe_dump({"name": name, **own, "create_job": "azureml:probe"})
    loaded = _loaded(io.StringIO(probe), [], "schedule update")._to_dict()  # noqa: SLF001
    schedule = {k: v for k, v in record.spec["schedule"].items() if k not in SCHEDULE_KEYS}
    schedule.update({k: loaded[k] for k in SCHEDULE_KEYS if k in loaded})
    kept = {**record.spec, "schedule": schedule}  # is_enabled: dump-only, dropped as az drops it
    return _view(resources.write(Workspace(root or workspace_root()), SCHEDULES, name, kept))


@dataclass(frozen=True, kw_only=True)
class Trigger:
    """`az ml schedule trigger -n N`, and how its job runs (as Session's job create runs)."""

    name: str
    asset_file: Path | None = None
    env_file: Path | None = None
    max_procs: int = 1


def trigger(request: Trigger, root: Path | None = None) -> View:
    """The schedule's job created once, now, as `job create` creates one; what az prints
    (azure-ai-ml's ScheduleTriggerResult)."""
    from mlops.api import jobs

    record = resources.required(root, SCHEDULES, request.name)
    plan = Plan.of(record.spec.get("run"))
    spec, sets = _job_spec(plan, request.name)
    created = jobs.create(jobs.Submission(
        spec=Path(spec), sets=sets, asset_file=request.asset_file, env_file=request.env_file,
        max_procs=request.max_procs))
    print(f"WARNING: schedule {request.name} triggered once: job {created.name} runs in the "
          "background (azml job stream -n " + created.name + ")", file=sys.stderr)
    return {"job_name": created.name, "schedule_action_type": "CreateJob"}


def _job_spec(plan: Plan, schedule: str) -> tuple[str, list[str]]:
    """The spec file and --set values the schedule's job is created from."""
    if plan.job_file is not None:
        return plan.job_file, list(plan.sets)
    from mlops.api.records import find_job
    from mlops.specs import read_yaml

    try:
        job = find_job(str(plan.job))
    except NotFound as err:
        raise NotFound(f"schedule {schedule}: its create_job names job {plan.job}: {err}") \
            from None
    if not job.run or not job.run.spec:
        raise LocalRunError(f"schedule {schedule}: job {plan.job}'s run folder records no spec "
                            "to run again")
    ran = read_yaml((job.folder / "spec.yml").read_text(encoding="utf-8"))
    written = load_spec(job.run.spec).data
    return job.run.spec, [*rerun_sets(_mapping(ran), _mapping(written)), *plan.sets]


def _mapping(data: object) -> SpecData:
    return data if isinstance(data, dict) else {}
