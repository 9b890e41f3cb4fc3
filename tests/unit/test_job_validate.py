"""`azml job validate`: azure-ai-ml's validate_job with --set as its params_override, printed
as az prints the ValidationResult; a failed validation is printed with exit 0, as az's is."""

from __future__ import annotations

import json

from mlops.cli import run


def _validate(argv: list[str], capsys) -> tuple[int, object, str]:
    code = run(["job", "validate", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_a_job_validates_and_a_set_that_breaks_it_is_reported_by_path(tmp_path, capsys):
    spec = tmp_path / "job.yml"
    spec.write_text("type: command\ncommand: python x.py\n"
                    "environment: azureml:AzureML-sklearn-1.5@latest\n")
    assert _validate(["-f", str(spec)], capsys)[:2] == (0, {"result": "Succeeded"})
    code, result, _ = _validate(["-f", str(spec), "--set", "limits.timeout=soon"], capsys)
    assert code == 0 and result["result"] == "Failed"
    assert "Not a valid integer" in json.dumps(result["errors"])


def test_a_pipeline_step_without_environment_or_compute_is_named(tmp_path, capsys):
    spec = tmp_path / "p.yml"
    spec.write_text("type: pipeline\njobs:\n  a:\n    type: command\n    command: echo 1\n")
    code, result, _ = _validate(["-f", str(spec)], capsys)
    paths = {error["path"] for error in result["errors"]}
    assert code == 0 and paths == {"jobs.a.component.environment", "jobs.a.compute"}
    code, result, err = _validate(["-f", str(tmp_path / "none.yml")], capsys)
    assert code == 2 and result is None and "is not a file" in err
