"""Each spec runs in the environment it names, built as layers over .venv; .venv is never written.

These install small packages from PyPI (six, pyjokes: a few kB each) into a cached layer in a
temporary folder, so each CI run builds them from scratch.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlops import run as local
from mlops.envspec import EnvMap, image_key, plan_for
from mlops.specs import ROOT

ENVS = ROOT / "tests" / "fixtures" / "envs"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store", "env_cache")


@pytest.fixture
def env_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LOCAL_ENVS_DIR", str(tmp_path_factory.getbasetemp() / "envs"))


def freeze() -> str:
    return subprocess.run([sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True,
                          text=True, check=True).stdout


def run(spec: Path, run_dir: Path, envs: Path | None = None) -> int:
    argv = [str(spec), "--run-dir", str(run_dir)] + (["--envs", str(envs)] if envs else [])
    return local.main(argv)


def test_an_inline_conda_file_gets_its_own_pins_and_leaves_venv_alone(tmp_path, capsys):
    assert importlib.metadata.version("six") != "1.16.0"  # the fixture needs a different pin
    before = freeze()
    assert run(ENVS / "pinned-conda.yml", tmp_path / "run") == 0
    version, prefix = (tmp_path / "run/outputs/seen/six.txt").read_text().split()
    assert version == "1.16.0" and prefix == str(tmp_path / "run" / "env")  # the top layer
    assert "asks for Python 3.10" in capsys.readouterr().err  # one warning, not a failure
    assert not (tmp_path / "run/env").exists()  # the top layer went with the run
    assert freeze() == before


def test_what_a_job_installs_lands_in_its_throwaway_layer(tmp_path, monkeypatch):
    before = freeze()
    monkeypatch.setenv("KEEP_ENV", "1")
    assert run(ENVS / "pip-install.yml", tmp_path / "run") == 0
    assert (tmp_path / "run/outputs/seen/pyjokes.txt").read_text().strip() == "0.6.0"
    kept = tmp_path / "run/env/lib"
    assert list(kept.glob("python3*/site-packages/pyjokes"))  # KEEP_ENV=1 keeps it
    assert freeze() == before
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("pyjokes")


def test_a_curated_name_through_the_mapping_file(tmp_path):
    mapping = tmp_path / "local-envs.yml"
    mapping.write_text(yaml.safe_dump({"azureml:AzureML-tiny-test": ["six==1.16.0"]}))
    assert run(ENVS / "curated.yml", tmp_path / "run", mapping) == 0
    assert (tmp_path / "run/outputs/seen/six.txt").read_text().strip() == "1.16.0"


def test_an_unmapped_environment_runs_in_venv_with_a_notice(tmp_path, capsys):
    assert run(ENVS / "unmapped.yml", tmp_path / "run") == 0
    seen = (tmp_path / "run/outputs/seen/six.txt").read_text().strip()
    assert seen == importlib.metadata.version("six")
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if "no local stand-in" in line)
    assert "not-mapped-anywhere" in line and "local-envs.yml" in line and "running in .venv" in line


def test_a_docker_context_installs_what_its_dockerfile_pip_installs(tmp_path):
    assert run(ENVS / "docker-build.yml", tmp_path / "run") == 0
    assert (tmp_path / "run/outputs/seen/six.txt").read_text().strip() == "1.16.0"


def test_every_environment_form_resolves_to_a_plan(tmp_path):
    env_map = EnvMap(ROOT / "assets" / "local-envs.yml")
    base = ROOT / "jobs"
    project = plan_for("azureml:image-classifier@latest", base, env_map)
    assert "torch==2.14.1" in project.requirements  # this repo's environment, by name
    registry = plan_for("azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
                        base, env_map)
    curated = plan_for("azureml:AzureML-sklearn-1.5:33", base, env_map)
    assert registry.requirements == curated.requirements and registry.python == "3.10"
    assert plan_for({"image": "docker.io/library/python:3.11"}, base, env_map).notice is None
    assert image_key("mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:latest") == \
        "image:mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04"
    conda = tmp_path / "conda.yml"
    conda.write_text("dependencies:\n  - python=3.9\n  - numpy=1.26\n  - conda-forge::pytorch\n"
                     "  - cudatoolkit=11.8\n  - pip:\n    - scikit-learn==1.5.2\n")
    plan = plan_for({"image": "x", "conda_file": "conda.yml"}, tmp_path, env_map)
    assert plan.requirements == ["numpy==1.26.*", "torch", "scikit-learn==1.5.2"]
    assert plan.python == "3.9" and plan.skipped == ["cudatoolkit=11.8"]
