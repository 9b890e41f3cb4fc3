"""Each spec runs in the environment it names: for .venv's Python, built as layers over .venv;
for another Python, a complete environment of an interpreter of that version. .venv is never
written.

These install small packages from PyPI (six, pyjokes: a few kB each) into cached layers of the
user's environment cache, as a user's runs do: built on a machine's first run, reused after. One
test builds its layer into a folder of its own on every run (a curated name through the mapping
file), so a layer's build is proven however warm the cache is.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from mlops import run as local
from mlops.environments.envspec import EnvMap, image_key, plan_for
from mlops.environments.interpreters import find, how_to_get
from mlops.environments.layers import cache_dir
from mlops.project import project
from mlops.specs import ROOT

ENVS = ROOT / "tests" / "fixtures" / "envs"
pytestmark = pytest.mark.usefixtures("sources_unchanged", "mlflow_store")


def freeze() -> set[str]:
    """What `pip freeze --all` says of .venv, read from its site-packages instead of in a pip
    process of its own: each distribution's metadata folder, named with its version (a job
    that installed into .venv, or changed a release there, changes it)."""
    sites = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    return {entry.name for site in sites for entry in os.scandir(site)
            if entry.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth"))}


def run(spec: Path, run_dir: Path, envs: Path | None = None) -> int:
    argv = [str(spec), "--run-dir", str(run_dir)] + (["--envs", str(envs)] if envs else [])
    return local.main(argv)


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_an_inline_conda_file_gets_its_own_pins_and_leaves_venv_alone(tmp_path, capsys):
    assert importlib.metadata.version("six") != "1.16.0"  # the fixture needs a different pin
    before = freeze()
    assert run(ENVS / "pinned-conda.yml", tmp_path / "run") == 0
    version, prefix = (tmp_path / "run/outputs/seen/six.txt").read_text().split()
    assert version == "1.16.0" and prefix == str(tmp_path / "run" / "env")  # the top layer
    assert "runs on Python 3.10." in capsys.readouterr().err  # its own interpreter, said once
    assert not (tmp_path / "run/env").exists()  # the top layer went with the run
    assert freeze() == before


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
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


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_curated_name_through_the_mapping_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_ENVS_DIR", str(tmp_path / "envs"))  # built here, every time
    mapping = tmp_path / "local-envs.yml"
    mapping.write_text(yaml.safe_dump({"azureml:AzureML-tiny-test": ["six==1.16.0"]}))
    assert run(ENVS / "curated.yml", tmp_path / "run", mapping) == 0
    assert (tmp_path / "run/outputs/seen/six.txt").read_text().strip() == "1.16.0"


@pytest.mark.proof
def test_an_unmapped_environment_runs_in_venv_with_a_notice(tmp_path, capsys):
    assert run(ENVS / "unmapped.yml", tmp_path / "run") == 0
    seen = (tmp_path / "run/outputs/seen/six.txt").read_text().strip()
    assert seen == importlib.metadata.version("six")
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if "no local stand-in" in line)
    assert "not-mapped-anywhere" in line and "running in .venv" in line
    assert "to an environment map (env_map = " in line  # the setting that would name one


@pytest.mark.proof
def test_a_module_missing_because_the_environment_was_not_found_is_explained(tmp_path, capsys):
    """The job ran in .venv because nothing here defines its environment, and failed importing
    what that environment would have had: after the log, the runner says so and which mapping
    line would define it."""
    spec = yaml.safe_load((ENVS / "unmapped.yml").read_text())
    spec["command"] = "python -c 'import a_module_only_that_environment_has'"
    spec.pop("outputs", None)
    spec["code"] = str(ENVS / spec["code"]) if spec.get("code") else None
    path = tmp_path / "missing-module.yml"
    path.write_text(yaml.safe_dump({k: v for k, v in spec.items() if v is not None}))
    assert run(path, tmp_path / "run") != 0
    err = capsys.readouterr().err
    assert "was not found here, so the job ran in .venv" in err
    assert "'azureml://registries/azureml/environments/not-mapped-anywhere: [<package>" in err


@pytest.mark.proof
@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_docker_context_installs_what_its_dockerfile_pip_installs(tmp_path):
    assert run(ENVS / "docker-build.yml", tmp_path / "run") == 0
    assert (tmp_path / "run/outputs/seen/six.txt").read_text().strip() == "1.16.0"


@pytest.mark.network  # a cold cache: domonic (300 kB) and requests' closure from the registry
def test_a_no_deps_pin_a_later_install_conflicts_with_builds_as_azures_image_does(tmp_path):
    """Merged into one resolution, domonic 0.9.10 (requests<2.28) and requests>=2.32.4 have no
    solution; installed in turn, as the Dockerfile's RUN lines run on Azure, they build."""
    assert run(ENVS / "docker-steps.yml", tmp_path / "run") == 0
    domonic, requests = (tmp_path / "run/outputs/seen/versions.txt").read_text().split()
    assert domonic == "0.9.10" and tuple(map(int, requests.split(".")[:2])) >= (2, 32)


@pytest.mark.proof
def test_every_environment_form_resolves_to_a_plan(tmp_path):
    env_map = EnvMap(ROOT / "mlops" / "environments" / "catalog" / "local-envs.yml")
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
    assert plan.requirements == ["numpy==1.26.*", "torch", "pip", "setuptools", "wheel",
                                 "--install-step --upgrade", "scikit-learn==1.5.2"]
    # conda's install (with its pip, in every environment), then the pip section's, upgrading
    assert plan.python == "3.9" and plan.skipped == ["cudatoolkit=11.8"]


@pytest.mark.proof
def test_a_requirement_this_machine_cannot_fetch_is_skipped_and_the_rest_built(
        tmp_path, capsys, monkeypatch):
    """A display name with spaces and parentheses is a label: the run folder is a slug of it,
    the MLflow run keeps it; a git+/URL requirement or private index is one warning each."""
    from dataclasses import replace

    from mlflow.tracking import MlflowClient

    from mlops.runtime import job

    monkeypatch.setattr(job, "project", lambda: replace(project(), runs_dir=tmp_path / "runs"))
    assert local.main([str(ROOT / "tests/fixtures/thirdparty/gpu-check.yml")]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.startswith("GPU-check-NCCL-tests-")
    err = capsys.readouterr().err
    for skipped in ("git+https://github.com/example-org/nccl-tests-helper.git@main",
                    "helper @ https://example.com/helper-0.1.tar.gz",
                    "--extra-index-url https://pkgs.example.com/simple"):
        assert f"skipped '{skipped}': this machine cannot fetch it" in err
    experiment = MlflowClient().get_experiment_by_name("thirdparty-gpu-check")
    (run,) = MlflowClient().search_runs([experiment.experiment_id])
    assert run.info.run_name == "GPU check (NCCL tests)"


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_a_workspace_environment_registered_from_the_jobs_own_repository(tmp_path, capsys):
    """`azureml:<name>@latest` / `:<version>` whose spec lives in the job's own repository (a
    conda file, or a Docker build context) is built from that spec, and the notice names it."""
    import shutil

    repo = shutil.copytree(ENVS.parent / "template", tmp_path / "template")
    (repo / ".git").mkdir()  # the job's repository root
    assert local.main([str(repo / "jobs/train.yml"), "--run-dir", str(tmp_path / "a")]) == 0
    assert local.main([str(repo / "jobs/score-check.yml"), "--run-dir", str(tmp_path / "b")]) \
        == 0
    err = capsys.readouterr().err
    assert f"azureml:template-train-env:2: built from its spec {repo / 'environments'}" \
           "/train-env.yml" in err
    assert f"built from its spec {repo / 'environments/serve-env.yml'}" in err
    assert f"pyjokes from {cache_dir()}/" in (tmp_path / "b/log.txt").read_text()


@pytest.mark.network  # a cold cache: its environment from the registry
def test_an_environment_for_another_python_runs_on_that_python_as_resolved(tmp_path, capsys):
    """A conda file for Python 3.8 (numpy 1.21.2, pandas 1.3.5: no wheels for 3.11) runs on an
    interpreter of 3.8 with exactly those releases, and a second run resolves nothing."""
    if find("3.8") is None:
        pytest.skip(f"no Python 3.8 on this machine: {how_to_get('3.8')}")
    before = freeze()
    assert local.main([str(ENVS / "old-python-pins.yml"), "--run-dir", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"runs on Python {find('3.8').version} ({find('3.8').executable})" in err
    assert "numpy 1.21.2 pandas 1.3.5 float 1.5" in (tmp_path / "r/log.txt").read_text()
    assert local.main([str(ENVS / "old-python-pins.yml"), "--run-dir", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "resolving" not in out and "environment ready" not in out
    assert freeze() == before


@pytest.mark.network  # a cold cache: its environment layer from the registry
def test_without_an_interpreter_of_its_python_the_closure_moves_here_with_one_line_each(
        tmp_path, capsys, monkeypatch):
    """No interpreter of Python 3.8 to be had: its closure for 3.8 moves to the lowest releases
    that install here together, one line says why and how to get one, one warning line per
    moved package."""
    from mlops.environments import activation

    monkeypatch.setattr(activation, "find", lambda minor: None)
    before = freeze()
    assert local.main([str(ENVS / "old-python-pins.yml"), "--run-dir", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "no interpreter of Python 3.8 is on this machine" in err and "uv python install" in err
    assert "command: numpy 1.21.2 -> 1.23." in err and "command: pandas 1.3.5 -> 1.5." in err
    assert "Azure's image build for that Python fails" not in err
    assert "float 1.5" in (tmp_path / "r/log.txt").read_text()
    assert freeze() == before


@pytest.mark.network  # a cold cache: its environment layer (or debugpy) from the registry
def test_the_environment_decides_its_mlflow_and_a_2x_client_logs_to_the_local_server(
        tmp_path, capsys):
    """An environment pinning mlflow-skinny 2.x gets it alone (no .venv MLflow 3 beside it),
    and logs params, metrics, an artifact and a model through the local tracking server."""
    from mlflow.tracking import MlflowClient

    before = freeze()
    assert local.main([str(ENVS / "mlflow2-client.yml"), "--run-dir", str(tmp_path / "r")]) == 0
    log = (tmp_path / "r/log.txt").read_text()
    assert "client mlflow-skinny 2.22." in log and "full mlflow beside it: no" in log
    client = MlflowClient()
    experiment = client.get_experiment_by_name("envs-mlflow2")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.params == {"alpha": "0.5"} and run.data.metrics["loss"] == pytest.approx(1 / 3)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"notes", "doubler"} <= artifacts
    assert "MLmodel" in {Path(a.path).name for a in client.list_artifacts(run.info.run_id,
                                                                          "doubler")}
    assert freeze() == before


@pytest.mark.proof
def test_every_curated_name_has_its_images_pins_and_local_envs_overrides():
    """The generated catalogue (mlops/environments/catalog/) knows current and retired curated
    names, with MLflow among the pins; hand-written local-envs.yml entries win."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from gen_curated_envs import keys

    env_map = EnvMap()
    old = plan_for("azureml:AzureML-sklearn-0.24-ubuntu18.04-py37-cpu@latest", ROOT, env_map)
    assert old.notice is None and old.python == "3.7"
    assert any(r.startswith("numpy") for r in old.requirements)
    assert "azureml-mlflow" in old.requirements
    assert plan_for("azureml:azureml-SKLEARN-1.0-ubuntu20.04-py38-cpu", ROOT, env_map).notice \
        is None  # names match without regard to case
    overridden = plan_for("azureml:AzureML-sklearn-1.5@latest", ROOT, env_map)
    assert overridden.requirements[:-3] == env_map.get("azureml:AzureML-sklearn-1.5")["pip"]
    assert overridden.requirements[-3:] == ["pip", "setuptools", "wheel"]  # conda's pip
    assert "no local stand-in" in plan_for("azureml:AzureML-not-a-curated-env@latest", ROOT,
                                           env_map).notice
    assert keys("sklearn-1.0", {"OS": "Ubuntu20.04", "Python": "3.8"}) == [
        "azureml://registries/azureml/environments/sklearn-1.0", "azureml:AzureML-sklearn-1.0",
        "azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu"]


@pytest.mark.proof
def test_a_dockerfile_from_a_curated_image_adds_to_that_images_packages_and_python():
    from mlops.environments import curated

    plan = plan_for({"build": {"path": "curated-base"}}, ENVS, EnvMap())
    key = "azureml://registries/azureml/environments/sklearn-1.0-ubuntu20.04-py38-cpu"
    chosen = curated.choose(key, None, "base")  # :latest: its last release record, if any
    image = chosen.entry if chosen is not None else EnvMap().get(key)
    assert plan.notice is None and plan.python == "3.8"
    assert plan.requirements[:len(image["pip"])] == image["pip"]
    assert not any(line.startswith("--exclude-newer") for line in plan.requirements)
    assert plan.requirements[-2:] == ["mlflow", "torch==1.13.0"]


@pytest.mark.heavy
@pytest.mark.network
def test_a_curated_base_with_unpinned_mlflow_saves_a_torch_model_as_on_azure(tmp_path, capsys):
    """The retired Python 3.8 scikit-learn image plus `mlflow` unpinned: Azure's build takes
    MLflow 2.17.2 (the last for 3.8), whose save_model needs no input example."""
    before = freeze()
    spec = ENVS / "curated-base-mlflow.yml"
    assert local.main([str(spec), "--run-dir", str(tmp_path / "r")]) == 0
    log = (tmp_path / "r/log.txt").read_text()
    assert "mlflow 2.17.2 skinny 2.17.2" in log and "'MLmodel'" in log
    assert freeze() == before


@pytest.mark.heavy
@pytest.mark.network
def test_a_release_built_for_numpy_1_gets_numpy_1_as_azures_conda_build_gives_it(tmp_path):
    """scikit-learn 1.2.2 asks pip only for numpy>=1.17.3, and fails to import under NumPy 2
    ("numpy.dtype size changed"); conda-forge pairs it with numpy<2, so the layer does too."""
    from mlops.environments.activation import Environments
    from mlops.environments.envspec import EnvironmentRef

    (tmp_path / "conda.yml").write_text(
        "dependencies:\n- python=3.11\n- pip\n- pip:\n  - scikit-learn==1.2.2\n")
    (layer,
     ) = Environments().layers(EnvironmentRef(value={"conda_file": "conda.yml"}, base=tmp_path),
                               "job").layers
    imported = subprocess.run([str(layer / "bin/python"), "-c",
                               "import sklearn, numpy; print(numpy.__version__)"],
                              capture_output=True, text=True, check=True)
    assert imported.stdout.startswith("1.")
    assert "numpy -> numpy<2: sklearn" in " ".join(
        yaml.safe_load((layer / "layer.json").read_text())["moved"])


@pytest.mark.proof
def test_what_an_environment_installs_follows_installed_requirements_and_no_further():
    """The closure of what .venv has installed (scripts/lock.py writes constraints.txt from it)
    follows installed requirements and extras, and no further: never torch for MLflow."""
    from mlops.environments.layers import BASE_SITE, closure

    names = closure(["mlflow==3.17.2"], [str(BASE_SITE)])
    assert {"mlflow", "mlflow-skinny", "pandas", "numpy"} <= names
    assert "torch" not in names and "image-classifier" not in names


CLOSURES = [  # a fixture of each shape, its Python, and what its job prints
    ("py38-azureml-mlflow", "3.8", "mlflow 2.17.2 logged"),
    ("py38-dask", "3.8", "numpy 1.24.4 sum 8"),
    ("py38-torch-pair", "3.8", "torch 1.13.0"),  # the environment's own torch, for 3.8
    ("py38-mltable", "3.8", "mltable 1.0.0"),
    ("py37-azureml-defaults", "3.7", "server 0.4.14"),
    ("py38-azureml-sdk", "3.8", "azureml-core 1.38.0"),  # none of it installs on 3.11
]


@pytest.mark.heavy
@pytest.mark.network
@pytest.mark.parametrize(("name", "python", "printed"), CLOSURES, ids=[c[0] for c in CLOSURES])
def test_an_environment_for_an_old_python_completes_as_its_closure_does_on_azure(
        name, python, printed, tmp_path, capsys):
    """Each environment's whole closure, resolved for its Python 3.7/3.8 and installed as is on
    an interpreter of that version: what a per-pin build got wrong (MLflow 3 for
    azureml-mlflow 1.42, NumPy 2 under dask, a 3.7 server pinned against azureml-defaults,
    rslex left behind by mltable) and what a move to 3.11 changed (torch 1.13 for 2.14)
    completes with Azure's releases, .venv untouched."""
    if find(python) is None:
        pytest.skip(f"no Python {python} on this machine: {how_to_get(python)}")
    before = freeze()
    assert local.main([str(ENVS / f"{name}.yml"), "--run-dir", str(tmp_path / "r")]) == 0
    assert printed in (tmp_path / "r/log.txt").read_text()
    assert f"runs on Python {find(python).version}" in capsys.readouterr().err
    assert freeze() == before


@pytest.mark.heavy
@pytest.mark.network
def test_a_curated_image_at_a_version_holds_what_that_image_holds(tmp_path, capsys):
    """AzureML-lightgbm-3.3-ubuntu20.04-py38-cpu:1 is that version's image: Python 3.8 with
    matplotlib 3.3, from its release record, resolved as PyPI was when it was built."""
    if find("3.8") is None:
        pytest.skip(f"no Python 3.8 on this machine: {how_to_get('3.8')}")
    spec = ENVS / "curated-lightgbm-v1.yml"
    assert local.main([str(spec), "--run-dir", str(tmp_path / "r")]) == 0
    log = (tmp_path / "r/log.txt").read_text()
    assert "python 3.8." in log and "matplotlib 3.3." in log and "lightgbm 3.3." in log
    assert "not in Azure/azureml-assets' release records" not in capsys.readouterr().err
