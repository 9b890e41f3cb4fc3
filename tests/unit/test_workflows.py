"""GitHub workflows: linted offline, planted mistakes caught, every make target they call exists."""

from __future__ import annotations

import re

import yaml

from mlops.specs import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def test_ci_runs_setup_lint_validate_and_every_tier_ci_runs_with_least_privilege():
    ci = yaml.safe_load((WORKFLOWS / "ci.yml").read_text())
    runs = [s.get("run") for s in ci["jobs"]["test"]["steps"] if s.get("run")]
    assert runs == ["make setup", "make lint", "make validate", "make test", "make test-e2e"]
    assert ci["permissions"] == {"contents": "read"}
    assert ci["concurrency"]["cancel-in-progress"] is True


def test_untrusted_inputs_never_reach_run_scripts():
    for path in WORKFLOWS.glob("*.yml"):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in job["steps"]:
                script = str(step.get("run", ""))
                assert not re.search(r"\$\{\{\s*(inputs|github\.event)", script), \
                    f"{path.name}: {step.get('name')}"


def test_deploy_workflow_deletes_after_the_idle_check_and_rolls_back_any_later_failure():
    steps = yaml.safe_load((WORKFLOWS / "deploy.yml").read_text())["jobs"]["deploy"]["steps"]
    names = [step["name"] for step in steps]
    shift, idle = names.index("Shift traffic in steps"), names.index(
        "Confirm the old deployment is idle")
    delete, rollback = names.index("Delete the old deployment"), names.index(
        "Roll back to the old deployment")
    assert shift < idle < delete < rollback  # a failed delete is still rolled back
    assert steps[rollback]["if"] == "failure() && steps.shift.outputs.shifted == 'true'"
    assert "rollout.py steps" in steps[shift]["run"]
    assert 'echo "shifted=true"' in steps[shift]["run"].split("make shift")[0]
    assert "rollout.py idle" in steps[idle]["run"]
    assert "success()" not in str(steps[delete].get("if"))  # it follows the idle check
