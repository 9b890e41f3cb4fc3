"""Repo policy for GitHub workflows, beside actionlint and zizmor (mlops.workflow_lint):

- a top-level `permissions:` block (least privilege by default);
- every job that uses azure/login can mint an OIDC token (`id-token: write`);
- every action pinned to a full commit SHA with its version in a comment;
- every `make <target>` a step runs exists in the Makefile.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from mlops.specs import ROOT, read_yaml

USES = re.compile(r"^\s*-?\s*uses:\s*([^\s#]+)(\s*#\s*(\S+))?", re.MULTILINE)
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
MAKE = re.compile(r"\bmake\s+(?:-s\s+)?([a-z][\w-]*)")


def make_targets(workflow: dict[str, object]) -> set[str]:
    runs = [str(step.get("run", "")) for job in (workflow.get("jobs") or {}).values()
            for step in job.get("steps") or []]
    return {target for run in runs for target in MAKE.findall(run)}


def target_exists(target: str) -> bool:
    if target.startswith("print-"):
        return True  # the print-% pattern rule
    result = subprocess.run(["make", "-n", target, "AZ_JOB=x", "MODEL_DIR=x"], cwd=ROOT,
                            capture_output=True, text=True)
    return result.returncode == 0


def check(path: Path) -> list[str]:
    text = path.read_text()
    try:
        workflow = read_yaml(text) or {}
    except yaml.YAMLError as err:
        return [f"{path}: not valid YAML ({err})"]
    problems = []
    if "permissions" not in workflow:
        problems.append(f"{path}: no top-level permissions: block; add `permissions: contents: "
                        "read` and widen per job")
    for name, job in (workflow.get("jobs") or {}).items():
        steps = job.get("steps") or []
        logs_in = any(str(s.get("uses", "")).startswith("azure/login@") for s in steps)
        granted = {**(workflow.get("permissions") or {}), **(job.get("permissions") or {})} \
            if isinstance(job.get("permissions", {}), dict) else {}
        if logs_in and granted.get("id-token") != "write":
            problems.append(f"{path}: job {name} uses azure/login without `id-token: write`; "
                            "OIDC login needs it in the job's permissions")
    for action, _, version in USES.findall(text):
        if action.startswith("./"):
            continue
        if not PINNED.match(action) or not version:
            problems.append(f"{path}: {action} is not pinned to a full commit SHA with its "
                            "version in a comment (uses: owner/repo@<40-hex sha> # vX.Y.Z)")
    for target in sorted(make_targets(workflow)):
        if not target_exists(target):
            problems.append(f"{path}: runs `make {target}`, which the Makefile does not have")
    return problems
