"""The conformance harness with real processes: a repository taken at its commit from a mirror
(a snapshot that lacks a blob too), and a case run from its checkout to a verdict."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import ROOT

from mlops.project import cache_root

sys.path.insert(0, str(ROOT / "scripts"))

from corpus import manifest, sources  # noqa: E402
from corpus.cases import Group, run_group  # noqa: E402
from corpus.verdict import Verdict, classify  # noqa: E402

pytestmark = pytest.mark.slow


def git(folder, *args):
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def mirror(tmp_path):
    """A mirror holding owner/demo as `owner+demo/repo/.git`: a job spec, its script, data."""
    work = tmp_path / "mirror" / "owner+demo" / "repo"
    (work / "src").mkdir(parents=True)
    (work / "job.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
        "command: python hello.py ${{inputs.data}}\ncode: src\n"
        "environment:\n  image: mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04\n"
        "  conda_file: {dependencies: [python=3.11, pip]}\n"
        "inputs:\n  data:\n    type: uri_file\n    path: azureml:demo-data@latest\n")
    (work / "src" / "hello.py").write_text("import sys\nprint(open(sys.argv[1]).read())\n")
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "run.sh").chmod(0o755)
    (work / "big.bin").write_bytes(b"x" * 1000)
    git(work, "init", "-q")
    git(work, "add", ".")
    git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return tmp_path / "mirror", git(work, "rev-parse", "HEAD"), work


@pytest.mark.proof
def test_a_commit_is_unpacked_from_a_mirror_and_a_lacking_blob_is_named(tmp_path, mirror):
    folder, commit, work = mirror
    found = sources.Sources(cache=tmp_path / "cache", mirror=folder)
    assert found.checkout("owner/demo", commit, tmp_path / "a") == []
    assert (tmp_path / "a" / "src" / "hello.py").is_file()
    oid = git(work, "rev-parse", f"{commit}:big.bin")
    (work / ".git" / "objects" / oid[:2] / oid[2:]).unlink()  # as a snapshot leaves it out
    assert found.checkout("owner/demo", commit, tmp_path / "b") == ["big.bin"]
    assert (tmp_path / "b" / "job.yml").is_file() and not (tmp_path / "b" / "big.bin").exists()
    assert (tmp_path / "b" / "run.sh").stat().st_mode & 0o111
    with pytest.raises(sources.MachineError, match="no commit"):
        found.checkout("owner/demo", "0" * 40, tmp_path / "c")


def test_a_case_runs_from_its_checkout_with_its_stand_in_to_a_verdict(tmp_path, mirror):
    folder, commit, _ = mirror
    case = manifest.parse_case({
        "id": "demo/job", "repo": "owner/demo", "commit": commit, "path": "job.yml",
        "kind": "command", "python": "3.11", "timeout": 300,
        "standins": {"azureml:demo-data": {"text": "stand-in data"}},
        "expect": {"outcome": "completes", "reason": "prints its input"}}, "test")
    group = Group(cases=(case,), folder=tmp_path / "work" / "demo",
                  sources=sources.Sources(cache=tmp_path / "cache", mirror=folder),
                  cache=cache_root())
    [ran] = run_group(group)
    assert classify(case, ran.outcome)[0] is Verdict.PASSED, ran.outcome.output[-2000:]
    assert "stand-in data" in ran.log.read_text()
    assert (tmp_path / "work" / "demo" / "checkout" / "demo" / "job.yml").is_file()
