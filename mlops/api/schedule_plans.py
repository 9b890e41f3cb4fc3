"""What `azml schedule trigger` runs for a job schedule's `create_job`, as azure-ai-ml's schedule
schema reads it (azure/ai/ml/_schema/schedule/create_job.py):

- a job spec's path (relative to the schedule's file): that spec, as `job create -f` takes it;
- `azureml:<job>` (a name or a job's ARM id): that job again, its spec with what it was created
  with (`--set` at create), read back from its run folder;
- a mapping `{job: <path or azureml:...>, type: ..., <key>: <value>, ...}`: that job with the
  mapping's values over it, as azure-ai-ml merges them (merge_dict) - given here to the job's
  spec as `job create --set` values, one per leaf.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mlops.errors import LocalRunError
from mlops.specs import SpecData

ARM_PREFIX = "azureml:"


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The job a trigger creates: a spec file, or an existing job's name, and --set values."""

    job_file: str | None = None
    job: str | None = None
    sets: tuple[str, ...] = ()

    def record(self) -> dict[str, object]:
        return {"job_file": self.job_file, "job": self.job, "sets": list(self.sets)}

    @classmethod
    def of(cls, data: object) -> Plan:
        data = data if isinstance(data, dict) else {}
        return cls(job_file=data.get("job_file"), job=data.get("job"),
                   sets=tuple(str(s) for s in data.get("sets") or ()))


def plan_of(create_job: object, spec: Path) -> Plan:
    """The plan for a schedule's `create_job` (as its YAML says it, after --set)."""
    if isinstance(create_job, dict):
        updates = {k: v for k, v in create_job.items() if k not in ("job", "type")}
        base = plan_of(create_job.get("job"), spec)
        return Plan(job_file=base.job_file, job=base.job,
                    sets=tuple(leaf_sets(updates, "create_job")))
    if not isinstance(create_job, str) or not create_job:
        raise LocalRunError(f"{spec}: create_job: give a job spec's path, azureml:<job name>, "
                            "or a mapping with job: and the values over it")
    if create_job.startswith(ARM_PREFIX):
        return Plan(job=create_job[len(ARM_PREFIX):].rstrip("/").rsplit("/jobs/", 1)[-1])
    return Plan(job_file=str((spec.parent / create_job).resolve()))


def leaf_sets(data: SpecData, where: str, prefix: str = "") -> list[str]:
    """`{"inputs": {"x": 5}}` -> ["inputs.x=5"]: each leaf as `--set` gives it (text)."""
    found = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            found += leaf_sets(value, where, f"{path}.")
        elif isinstance(value, list):
            raise LocalRunError(f"{where}.{path}: a list over the scheduled job is not a value "
                                "azml can give the job (it gives each value as job create's "
                                "--set); put it in the job's own spec")
        else:
            found.append(f"{path}={value if isinstance(value, str) else json.dumps(value)}")
    return found


def rerun_sets(ran: SpecData, written: SpecData) -> list[str]:
    """The --set values that make the spec as `written` into the spec as it `ran` (the run
    folder's spec.yml): its leaves that differ, each as text, as job create's --set gave
    them."""
    def leaves(data: SpecData, prefix: str = "") -> dict[str, object]:
        flat: dict[str, object] = {}
        for key, value in data.items():
            if isinstance(value, dict) and value:
                flat.update(leaves(value, f"{prefix}{key}."))
            else:
                flat[f"{prefix}{key}"] = value
        return flat

    before = leaves(written)
    return [f"{k}={v if isinstance(v, str) else json.dumps(v)}"
            for k, v in leaves(ran).items()
            if k != "name" and not isinstance(v, list | dict)
            and (k not in before or before[k] != v)]  # (a triggered job takes a name of its own)
