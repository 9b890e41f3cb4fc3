"""Why each pipeline step ran or was reused, proved by the processes that start (each step of
tests/fixtures/reuse appends its name and pid to $REUSE_PIDS): a matrix of single changes, a
failed pipeline resumed in its own run folder, --from and --only."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import ROOT

from mlops import run as local
from mlops.cli import run as azml

FIXTURE = ROOT / "tests" / "fixtures" / "reuse"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store")


class Pipeline:
    """The fixture copied (so that a test may change it), run in-process into <tmp>/runs."""

    def __init__(self, tmp_path: Path, capsys, spec: str = "pipeline.yml"):
        self.folder = tmp_path / "fixture"
        shutil.copytree(FIXTURE, self.folder)
        self.spec, self.runs = self.folder / spec, tmp_path / "runs"
        self.pids = Path(os.environ["REUSE_PIDS"])  # shared: every process that starts
        self.capsys = capsys

    def run(self, name: str, *args: str) -> tuple[int, list[str], dict[str, str]]:
        """The exit code, the steps whose processes started, and each step's line."""
        before = self.started()
        code = local.main([str(self.spec), "--run-dir", str(self.runs / name),
                           "--max-procs", "1", *args])
        captured = self.capsys.readouterr()
        self.out, self.err = captured.out, captured.err
        lines = dict(re.findall(r"^step (\w+): (.*)$", self.out, flags=re.MULTILINE))
        return code, [line.split()[0] for line in self.started()[len(before):]], lines

    def started(self) -> list[str]:
        return self.pids.read_text().splitlines() if self.pids.exists() else []

    def edit(self, relative: str, text: str) -> Path:
        path = self.folder / relative
        path.write_text(text)
        return path


@pytest.fixture
def pipeline(tmp_path, capsys, monkeypatch) -> Pipeline:
    monkeypatch.setenv("REUSE_PIDS", str(tmp_path / "pids"))
    return Pipeline(tmp_path, capsys)


@pytest.mark.proof
def test_a_changed_code_file_reruns_its_step_and_what_reads_it_and_says_so(pipeline):
    assert pipeline.run("first") == (0, ["a", "b", "c"], dict.fromkeys("abc",
                                                                       "ran: no earlier run"))
    changed = pipeline.edit("b/main.py", "from reusestep import main\n\nmain()  # changed\n")
    assert pipeline.run("second") == (0, ["b", "c"], {
        "a": "reused (from first a)",
        "b": f"ran: code {changed} changed (since first b)",
        "c": "ran: input prev: its content changed (since first c)"})


@pytest.mark.slow
def test_each_single_change_names_itself_and_starts_only_the_steps_it_changes(pipeline):
    """Each run differs from the one before it by one change; the line of b (the step each
    change is made to) names it, a says reused, and only the expected processes start (c
    runs when b's output changed: the environment and determinism do not change it)."""
    assert pipeline.run("base")[:2] == (0, ["a", "b", "c"])
    pin = f"packaging=={importlib.metadata.version('packaging')}"
    note = pipeline.folder / "shared" / "note.txt"
    changes = [
        ("code", lambda: pipeline.edit("b/main.py", "from reusestep import main\nmain()\n"),
         [], ["b", "c"], f"code {pipeline.folder / 'b/main.py'} changed"),
        ("include", lambda: pipeline.edit("shared/note.txt", "another note\n"), [],
         ["b", "c"], f"additional include {note} changed"),
        ("input", lambda: pipeline.edit("data/extra.txt", "extra datA\n"), [], ["b", "c"],
         "input extra: its content changed"),
        ("environment", lambda: pipeline.edit("env-b.yml", (FIXTURE / "env-b.yml").read_text()
                                              + f"  - pip:\n      - {pin}\n"), [], ["b"],
         f"environment: {pin} added"),
        ("literal", lambda: None, ["--set", "inputs.word=two"], ["b", "c"],
         "input word: 'one' -> 'two'"),
        ("nondeterministic", lambda: pipeline.edit("b.yml", (FIXTURE / "b.yml").read_text()
                                                   + "is_deterministic: false\n"),
         ["--set", "inputs.word=two"], ["b"], "is_deterministic: false"),
        ("force", lambda: None, ["--set", "inputs.word=two", "--set",
                                 "settings.force_rerun=true"], ["a", "b", "c"],
         "settings.force_rerun")]
    before, table = "base", []
    for name, change, args, expected, why in changes:
        change()
        code, started, lines = pipeline.run(name, *args)
        table.append(f"{name}: started {' '.join(started)}\n" + "".join(
            f"  step {step}: {line}\n" for step, line in lines.items()))
        assert (code, started) == (0, expected), name
        assert lines["b"].startswith(f"ran: {why}"), (name, lines["b"])
        if name not in ("force", "nondeterministic"):
            assert lines["b"].endswith(f"(since {before} b)"), (name, lines["b"])
        if "a" not in expected:
            assert lines["a"] == "reused (from base a)"
        if "c" not in expected:
            assert lines["c"].startswith("reused (from "), (name, lines["c"])
        before = name
    print("".join(table))  # the matrix as run (pytest -s)


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.mark.slow
def test_a_failed_pipeline_resumes_in_its_folder_and_from_and_only_start_just_their_steps(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("REUSE_PIDS", str(tmp_path / "pids"))
    pipeline = Pipeline(tmp_path, capsys, "pipeline4.yml")
    failing = pipeline.edit("c/FAIL", "")
    code, started, _ = pipeline.run("failed")
    assert code != 0 and started == ["a", "b", "c"]
    parent = json.loads((pipeline.runs / "failed/run.json").read_text())["mlflow_run_id"]

    failing.unlink()  # fixed: the rerun into its folder starts c and d only
    assert pipeline.run("failed") == (0, ["c", "d"], {
        "a": "reused (from failed a)", "b": "reused (from failed b)",
        "c": "ran: it failed in this run", "d": "ran: no earlier run"})
    assert "resuming failed: 2 step(s) completed there" in pipeline.out
    ended = json.loads((pipeline.runs / "failed/run.json").read_text())
    assert ended["mlflow_run_id"] == parent and ended["status"] == "Completed"
    steps = {s: json.loads((pipeline.runs / f"failed/steps/{s}/status.json").read_text())["status"]
             for s in "abcd"}
    assert steps == dict.fromkeys("abcd", "Completed")  # kept as they ran, in place

    # killed while d ran (kill -9 leaves run.json and d's status.json Running, pids gone)
    gone = dead_pid()
    for record in ("run.json", "steps/d/status.json"):
        path = pipeline.runs / "failed" / record
        path.write_text(json.dumps({**json.loads(path.read_text()), "status": "Running",
                                    "pid": gone}))
    before = len(pipeline.started())  # resumed by its job name: its folder, its spec
    assert azml(["job", "run", "--resume", "failed", "--max-procs", "1"]) == 0
    assert [line.split()[0] for line in pipeline.started()[before:]] == ["d"]
    assert "step d: ran: it was killed in this run" in capsys.readouterr().out

    assert pipeline.run("from", "--from", "c") == (0, ["c", "d"], {
        "a": "reused (from failed a; --from c leaves it out)",
        "b": "reused (from failed b; --from c leaves it out)",
        "c": "ran: --from c", "d": "ran: --from c"})
    assert pipeline.run("only", "--only", "b") == (0, ["b"], {
        "a": "reused (from failed a; --only b leaves it out)", "b": "ran: --only b",
        "c": "left out (--only b)", "d": "left out (--only b)"})

    fresh = Pipeline(tmp_path / "fresh", capsys, "pipeline4.yml")
    code, started, _ = fresh.run("never", "--only", "b")
    assert (code, started) == (2, [])
    assert "step b reads the outputs of step a, which has never completed" in fresh.err
    assert not (fresh.runs / "never").exists()
