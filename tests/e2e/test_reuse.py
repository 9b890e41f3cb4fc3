"""Pipeline steps are reused as Azure reuses them: same definition, code, environment and inputs
(by content) as an earlier completed step; never when told not to or when an input changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops import run as local
from mlops.runtime.reuse import code_digest, data_digest, deterministic
from mlops.specs import ROOT

PIPELINE = ROOT / "tests" / "fixtures" / "hello" / "hello-pipeline.yml"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store")


def run(folder: Path, *args: str) -> tuple[int, str]:
    code = local.main([str(PIPELINE), "--run-dir", str(folder), "--max-procs", "2", *args])
    return code, (folder / "steps").as_posix()


def statuses(folder: Path) -> dict[str, str]:
    import json

    return {step: json.loads((folder / "steps" / step / "status.json").read_text())["status"]
            for step in ("prep", "train", "register")}


def result(folder: Path, step: str, output: str) -> str:
    return (folder / "steps" / step / "outputs" / output / "result.txt").read_text()


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_an_unchanged_pipeline_reuses_every_step_and_a_changed_input_reruns_only_its_step(
        tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    assert run(tmp_path / "first")[0] == 0
    assert run(tmp_path / "again")[0] == 0
    out = capsys.readouterr().out
    assert "step prep: reused (from first prep)" in out
    assert "reused 3 step(s): prep, train, register" in out
    assert statuses(tmp_path / "again") == dict.fromkeys(("prep", "train", "register"), "Reused")
    assert result(tmp_path / "again", "register", "decision") == \
        result(tmp_path / "first", "register", "decision")
    assert not (tmp_path / "again/steps/train/log.txt").exists()  # nothing started
    reused = MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("hello-pipeline").experiment_id],
        filter_string="tags.`mlops.reused_from` != ''")
    assert len(reused) == 3 and all(r.info.status == "FINISHED" for r in reused)

    assert run(tmp_path / "third", "--set", "inputs.threshold=0.9")[0] == 0
    assert statuses(tmp_path / "third") == {"prep": "Reused", "train": "Reused",
                                            "register": "Completed"}


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_nothing_is_reused_when_forced_or_not_deterministic(tmp_path):
    assert run(tmp_path / "first")[0] == 0
    assert statuses(run_and(tmp_path / "forced", "--force-rerun")) == \
        dict.fromkeys(("prep", "train", "register"), "Completed")
    assert statuses(run_and(tmp_path / "setting", "--set", "settings.force_rerun=true")) == \
        dict.fromkeys(("prep", "train", "register"), "Completed")
    stamped = ("--set", "jobs.train.component=file:train-stamped-component.yml")
    run_and(tmp_path / "stamped", *stamped)
    # is_deterministic: false reruns the step; its new output reruns what reads it
    assert statuses(run_and(tmp_path / "stamped-again", *stamped)) == {
        "prep": "Reused", "train": "Completed", "register": "Completed"}


def run_and(folder: Path, *args: str) -> Path:
    assert run(folder, *args)[0] == 0
    return folder


@pytest.mark.proof
def test_identity_is_content_and_determinism_defaults_to_true(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "x.txt").write_text("same")
    assert data_digest(a, {}) == data_digest(b, {})
    (b / "sub" / "x.txt").write_text("changed")
    assert data_digest(a, {}) != data_digest(b, {})
    assert deterministic({}) and deterministic({"is_deterministic": True})
    assert not deterministic({"is_deterministic": False})
    assert not deterministic({"is_deterministic": "false"})


@pytest.mark.proof
def test_the_code_identity_is_what_azure_uploads_and_follows_the_ignore_file(tmp_path):
    code, cache = tmp_path / "code", {}
    code.mkdir()
    (code / "train.py").write_text("print(1)")
    first = code_digest(code, cache)
    (code / "notes.tmp").write_text("scratch")
    (code / ".amlignore").write_text("*.tmp\n")
    ignored = code_digest(code, cache)  # .amlignore itself is uploaded; the scratch file is not
    (code / "notes.tmp").write_text("other scratch")
    assert code_digest(code, cache) == ignored != first
    (code / ".amlignore").write_text("")
    assert code_digest(code, cache) != ignored  # now uploaded: part of the identity
    (code / "train.py").write_text("print(2)")
    assert code_digest(code, {}) == code_digest(code, cache)  # remembered lists stay exact
