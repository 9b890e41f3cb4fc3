"""Resolve a job spec as `az ml job create` would before submitting it: load it, apply --set and
--remove as the CLI does, run Azure's checks; what Azure would only warn about is printed."""

from __future__ import annotations

import sys
from pathlib import Path

from mlops.checks.overrides import apply_removals, apply_sets, parse_sets
from mlops.checks.validation import check
from mlops.errors import LocalRunError
from mlops.runtime.job import Job
from mlops.runtime.uris import AssetMap
from mlops.specs import JOB_TYPES, load_spec


def prepare_job(spec_path: str | Path, sets: list[str], removes: list[str],
                assets: AssetMap) -> Job:
    """The job, or a LocalRunError naming what Azure would refuse."""
    spec = load_spec(spec_path, role="job")
    apply_removals(apply_sets(spec.data, parse_sets(sets, spec.path), spec.path), removes,
                   spec.path)
    if spec.kind not in JOB_TYPES.values():
        raise LocalRunError(f"{spec_path}: a {spec.kind or 'spec of unknown type'} is not a job; "
                            "run a command, sweep or pipeline job spec (a component runs as a "
                            "pipeline step)")
    findings = check(spec, for_run=True)
    for finding in findings:
        if not finding.is_error:
            print(finding, file=sys.stderr)
    errors = [str(f) for f in findings if f.is_error]
    if errors:
        raise LocalRunError("\n".join(errors) + "\nAzure would refuse this spec: fix it first")
    return Job(spec, assets)
