"""`az ml job update|archive|restore|show-services|list` against the local jobs.

`update` is az's generic update (generic_update.py) over the job as `job show` prints it, then
what the ml extension's _ml_job_update does with the result: azure-ai-ml's job schema loads it
(a dump-only or unknown key such as `status` or `id` is dropped; a value of the wrong type is
refused in the schema's words), and the service takes a change of the description, tags,
display name or properties only, refusing any other in its words. `archive`/`restore` set the
job's archived state (RunHistory's `hidden`, azure-ai-ml's _archive_or_restore), which `list`
reads as azure-ai-ml's list view types do.
"""

from __future__ import annotations

import copy
import json
import sys
from enum import StrEnum
from pathlib import Path

from mlops.api import generic_update
from mlops.api.job_edits import MUTABLE, JobEdits, edited, own_properties
from mlops.api.records import all_jobs, find_job
from mlops.api.views import JobView, job_view
from mlops.errors import LocalRunError

# keys azure-ai-ml's job schema drops on load (dump-only, or no field: az's resourceGroup)
DROPPED = ("creation_context", "id", "log_files", "resourceGroup", "status")
INTERACTIVE = ("jupyter_lab", "ssh", "tensor_board", "vs_code")  # a job's `services:` types
REFUSED = ("(UserError) A job with this name already exists. If you are trying to create a new "
           "job, use a different name. If you are trying to update an existing job, the "
           "existing job's {keys} cannot be changed. Only description, tags, displayName, "
           "properties, and isArchived can be updated.")


class ListView(StrEnum):
    """azure-ai-ml's ListViewType for `job list`."""

    ACTIVE_ONLY = "ActiveOnly"
    ARCHIVED_ONLY = "ArchivedOnly"
    ALL = "All"

    @classmethod
    def of(cls, include_archived: bool, archived_only: bool) -> ListView:
        """The ml extension's get_list_view_type, its refusal in its words."""
        if include_archived and archived_only:
            raise LocalRunError("Cannot provide both archived-only and include-archived.")
        return cls.ALL if include_archived else cls.ARCHIVED_ONLY if archived_only else \
            cls.ACTIVE_ONLY


def update(name: str, edits: list[generic_update.Edit], *, force_string: bool = False
           ) -> JobView:
    """`az ml job update -n N [--set ...] [--add ...] [--remove ...] [--force-string]`."""
    record = find_job(name)
    before = job_view(record)
    after = generic_update.apply(copy.deepcopy(before), edits, force_string=force_string)
    changed = [k for k in sorted({*before, *after}) if k not in (*MUTABLE, *DROPPED)
               and before.get(k) != after.get(k)]
    if changed:
        raise LocalRunError(REFUSED.format(keys=", ".join(changed)) + " (azml job create "
                            "makes a new job with those)")
    values = {key: _loaded(key, after[key]) if key in after else None for key in MUTABLE}
    values["properties"] = own_properties(values["properties"])
    edited(record.folder, lambda kept: JobEdits(values=values, archived=kept.archived))
    shown = job_view(record.refreshed())
    if record.mlflow_run_id:
        _retag(record.mlflow_run_id, before, shown)
    return shown


def _retag(run_id: str, before: JobView, after: JobView) -> None:
    """The job's MLflow run takes the new tags and display name (a warning where its store
    cannot be written: the job's own record is updated already)."""
    from mlops.errors import MachineError
    from mlops.workspace.mlflow_models import retag_run

    old, new = dict(before.get("tags") or {}), dict(after.get("tags") or {})
    changed = {k: str(v) for k, v in new.items() if old.get(k) != v}
    name = after.get("display_name")
    try:
        retag_run(run_id, tags=changed, removed=[k for k in old if k not in new],
                  name=str(name) if name and name != before.get("display_name") else None)
    except MachineError as err:
        print(f"warning: the job's MLflow run {run_id} keeps its tags: {err}", file=sys.stderr)


def _loaded(key: str, value: object) -> object:
    """`value` as azure-ai-ml's job schema (BaseJobSchema's field) loads it; its refusal."""
    from azure.ai.ml._schema.job.base_job import BaseJobSchema
    from marshmallow import ValidationError

    try:
        return BaseJobSchema._declared_fields[key].deserialize(value)  # noqa: SLF001
    except ValidationError as err:
        raise LocalRunError(f"job update: {key}: {json.dumps(err.messages)} (azure-ai-ml's job "
                            "schema; --set parses a value as JSON: --force-string keeps it "
                            "text)") from None


def archive(name: str, archived: bool) -> None:
    """`az ml job archive|restore -n N`: hidden from `job list` (or listed again)."""
    record = find_job(name)
    if archived and not record.status.terminal:
        print(f"WARNING: job {name} is {record.status}: az ml's help says only completed jobs "
              "can be archived; it is archived here and runs on", file=sys.stderr)
    edited(record.folder, lambda kept: JobEdits(values=kept.values, archived=archived))


def listed(limit: int | None, view: ListView = ListView.ACTIVE_ONLY) -> list[JobView]:
    """`az ml job list`: newest first, the list view's jobs, at most `limit` (None: all)."""
    shown = []
    for record in all_jobs():
        archived = JobEdits.read(record.folder).archived
        if view == ListView.ALL or archived == (view == ListView.ARCHIVED_ONLY):
            shown.append(record)
    return [job_view(r) for r in (shown if limit is None else shown[:limit])]


def services(name: str, node_index: int = 0) -> None:
    """`az ml job show-services -n N [-i I]`: the interactive services (JupyterLab, SSH,
    TensorBoard, VS Code) running on the job's node; azure-ai-ml returns None, printed as
    nothing, where a node runs none, as every local job's does."""
    record = find_job(name)
    if node_index < 0:
        raise LocalRunError(f"--node-index {node_index}: a node's index is 0 or more")
    declared = _spec(record.folder).get("services") or {}
    wanted = sorted({str(s.get("type")) for s in declared.values()
                     if isinstance(s, dict) and s.get("type") in INTERACTIVE})
    if wanted:
        print(f"WARNING: job {name} asks for {', '.join(wanted)}: a local job runs on this "
              "machine without them (nothing listens for them here)", file=sys.stderr)


def _spec(folder: Path) -> dict[str, object]:
    from mlops.specs import read_yaml

    try:
        data = read_yaml((folder / "spec.yml").read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - no spec or a damaged one: no services asked for
        return {}
    return data if isinstance(data, dict) else {}


class JobVerbs:
    """Session's job verbs beyond create/run/show/stream/cancel/download."""

    def list_jobs(self, max_results: int | None = None,
                  view: ListView = ListView.ACTIVE_ONLY) -> list[JobView]:
        return listed(max_results, view)

    def update_job(self, name: str, edits: list[generic_update.Edit], *,
                   force_string: bool = False) -> JobView:
        return update(name, edits, force_string=force_string)

    def archive_job(self, name: str, *, archived: bool = True) -> None:
        archive(name, archived)

    def job_services(self, name: str, node_index: int = 0) -> None:
        services(name, node_index)
