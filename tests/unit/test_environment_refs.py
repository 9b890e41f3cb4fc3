"""`environment: file:<spec>.yml` is the job's own environment, defined in that file, as
azure-ai-ml loads it (not a workspace environment named "file")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlops.environments.envspec import EnvMap, plan_for
from mlops.errors import LocalRunError


def test_a_file_reference_reads_the_environment_spec_it_names(tmp_path):
    folder = tmp_path / "environments" / "azureml"
    folder.mkdir(parents=True)
    (folder / "conda.yml").write_text("dependencies:\n  - python=3.11\n  - pip:\n"
                                      "    - pyjokes==0.6.0\n")
    (folder / "env.yml").write_text("name: mine\nimage: mcr.microsoft.com/azureml/"
                                    "openmpi4.1.0-ubuntu22.04\nconda_file: conda.yml\n")
    plan = plan_for("file:./environments/azureml/env.yml", tmp_path, EnvMap(), "job")
    assert "pyjokes==0.6.0" in plan.requirements and plan.python == "3.11"
    assert plan.label == "file:./environments/azureml/env.yml"


def test_a_file_reference_to_something_else_is_refused_by_name(tmp_path):
    (tmp_path / "job.yml").write_text("command: echo\n")
    with pytest.raises(LocalRunError, match="job.yml is not an environment spec"):
        plan_for("file:job.yml", tmp_path, EnvMap(), "job")
    with pytest.raises(LocalRunError, match="cannot read"):
        plan_for("file:missing.yml", tmp_path, EnvMap(), "job")


def test_a_curated_environment_named_with_a_version_gets_that_versions_packages(
        tmp_path, monkeypatch):
    import json

    from mlops.environments import curated

    history = tmp_path / "versions.json"
    history.write_text(json.dumps({
        "names": {"azureml:azureml-tabular": "tabular",
                  "azureml://registries/azureml/environments/tabular": "tabular"},
        "versions": {"tabular": [["1", {"pip": ["pandas==1.1.5"], "python": "3.7"}],
                                 ["5", {"pip": ["pandas==1.3.5"], "python": "3.8"}]]}}))
    monkeypatch.setattr(curated, "VERSIONS", history)
    (tmp_path / "curated.yml").write_text("azureml:AzureML-tabular:\n  python: '3.10'\n"
                                          "  pip: [pandas==2.2.3]\n"
                                          "azureml://registries/azureml/environments/tabular:\n"
                                          "  python: '3.10'\n  pip: [pandas==2.2.3]\n")
    env_map = EnvMap(tmp_path / "none.yml", tmp_path / "curated.yml")
    at_4 = plan_for("azureml:AzureML-tabular:4", tmp_path, env_map)
    assert "pandas==1.1.5" in at_4.requirements and at_4.python == "3.7"
    at_7 = plan_for("azureml://registries/azureml/environments/tabular/versions/7", tmp_path,
                    env_map)
    assert "pandas==1.3.5" in at_7.requirements and at_7.python == "3.8"
    latest = plan_for("azureml:AzureML-tabular@latest", tmp_path, env_map)
    assert "pandas==2.2.3" in latest.requirements and latest.python == "3.10"
    (tmp_path / "own.yml").write_text("azureml:AzureML-tabular: [pandas==0.25.3]\n")
    own = plan_for("azureml:AzureML-tabular:4", tmp_path,
                   EnvMap(tmp_path / "own.yml", tmp_path / "curated.yml"))
    assert "pandas==0.25.3" in own.requirements  # a hand-written entry wins over history


def test_a_conda_files_variables_are_part_of_its_plan(tmp_path):
    from mlops.environments.envspec import EnvMap, plan_for

    conda = tmp_path / "conda.yml"
    conda.write_text("name: x\ndependencies:\n  - python=3.11\nvariables:\n  GREETING: hi\n"
                     "  RETRIES: 3\n")
    plan = plan_for({"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04",
                     "conda_file": "conda.yml"}, tmp_path, EnvMap(tmp_path / "none.yml"))
    assert plan.variables == {"GREETING": "hi", "RETRIES": "3"}


@pytest.mark.parametrize("entry", ["-r requirements.txt", "--requirement=requirements.txt",
                                   "-rrequirements.txt", "-c requirements.txt"])
def test_a_conda_files_pip_entry_naming_a_local_file_fails_as_azures_image_build_does(
        tmp_path, entry):
    # Azure's build has the conda file's contents alone, not the file beside it here
    (tmp_path / "requirements.txt").write_text("pandas\n")
    conda = {"dependencies": ["python=3.11", "pip", {"pip": ["numpy", entry]}]}
    image = "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04"
    for definition in ({"image": image, "conda_file": conda},
                       {"image": image, "conda_file": "conda.yml"}):
        (tmp_path / "conda.yml").write_text(yaml.safe_dump(conda))
        with pytest.raises(LocalRunError, match=r"names a file Azure's image build does not "
                                                r"have.*requirements\.txt is not"):
            plan_for(definition, tmp_path, EnvMap(tmp_path / "none.yml"))


def test_a_conda_files_requirements_url_and_a_docker_contexts_file_are_not_refused(tmp_path):
    from mlops.environments.envfiles import refuse_file_option

    refuse_file_option("-r https://example.com/pins.txt", "env")  # pip fetches it there too
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "requirements.txt").write_text("pandas\n")
    (tmp_path / "ctx" / "conda.yml").write_text(
        "dependencies:\n- python=3.11\n- pip:\n  - -r requirements.txt\n")
    (tmp_path / "ctx" / "Dockerfile").write_text(
        "FROM ubuntu:22.04\nCOPY conda.yml requirements.txt /tmp/\n"
        "RUN conda env create -f /tmp/conda.yml\n")
    plan = plan_for({"build": {"path": "ctx"}}, tmp_path, EnvMap(tmp_path / "none.yml"))
    assert "pandas" in plan.requirements  # the build copied it beside the conda file


def test_a_conda_file_is_conda_s_install_then_pip_s_upgrading_install_into_it(tmp_path):
    # conda env create: the conda packages first, then pip install -U of the pip section,
    # which keeps conda's releases where they satisfy and replaces what conflicts
    from mlops.environments import steps

    conda = {"dependencies": ["python=3.9", "pip", "pandas", "pyarrow",
                              {"pip": ["azureml-mlflow", "mlflow"]}]}
    image = "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04"
    plan = plan_for({"image": image, "conda_file": conda}, tmp_path, EnvMap(tmp_path / "n.yml"))
    conda_install, pip_install = steps.split(plan.requirements)
    assert set(conda_install.lines) == {"pip", "pandas", "pyarrow", "setuptools", "wheel"}
    assert pip_install.lines == ("azureml-mlflow", "mlflow") and pip_install.upgrade
    only_pip = {"dependencies": ["python=3.9", "pip", {"pip": ["mlflow"]}]}
    plan = plan_for({"image": image, "conda_file": only_pip}, tmp_path, EnvMap(tmp_path / "n.yml"))
    assert not steps.has_steps(plan.requirements)  # nothing of conda's own to yield: one set


def _env(path: Path, name: str, conda: str, version: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"name: {name}\n" + (f"version: {version}\n" if version else "") +
                    f"image: mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04:latest\n"
                    f"conda_file: {conda}\n")
    (path.parent / conda).write_text("dependencies:\n- python=3.11\n")


def test_an_environment_by_name_is_the_definition_nearest_the_spec_and_the_log_names_it(
        tmp_path):
    """As a name resolves in the workspace it was registered in: the spec's own project's
    definition, never another project's of the same repository; the file is named."""
    from mlops.environments.envspec import EnvMap, job_repo_environment, plan_for

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    _env(repo / "project-a/environments/env.yml", "shared-env", "a.yml")
    _env(repo / "project-b/environments/env.yml", "shared-env", "b.yml")
    _env(repo / "environments/common.yml", "common-env", "c.yml")
    _env(repo / "tools/deep/down/common.yml", "common-env", "d.yml")
    (repo / "project-b/jobs").mkdir(parents=True)
    found = job_repo_environment("shared-env", None, repo / "project-b/jobs")
    assert found.file == repo / "project-b/environments/env.yml" and found.others == ()
    common = job_repo_environment("common-env", None, repo / "project-b/jobs")
    assert common.file == repo / "environments/common.yml"  # nearer than tools/deep/down
    assert common.others == (repo / "tools/deep/down/common.yml",)
    plan = plan_for("azureml:common-env@latest", repo / "project-b/jobs", EnvMap(tmp_path / "x"))
    assert plan.notice == (f"azureml:common-env@latest: built from its spec {common.file} "
                           f"(nearest of 2 definitions of common-env; not {common.others[0]})")
    assert job_repo_environment("shared-env", None, tmp_path / "elsewhere") is None


def test_a_version_named_picks_that_version_among_the_nearest(tmp_path):
    from mlops.environments.envspec import job_repo_environment

    (tmp_path / ".git").mkdir()
    _env(tmp_path / "envs/one.yml", "train-env", "1.yml", version="1")
    _env(tmp_path / "envs/two.yml", "train-env", "2.yml", version="2")
    assert job_repo_environment("train-env", "2", tmp_path / "jobs").file == \
        tmp_path / "envs/two.yml"


def test_a_curated_version_is_that_versions_image_and_one_the_records_lack_is_named(
        tmp_path, monkeypatch, capsys):
    """Each version is one image: exactly its release record; a version the records do not
    hold is named with the one that stands in, never silently today's; @latest is the last
    version published (for a legacy name, the last under that name)."""
    import json

    from mlops.environments import curated

    history = tmp_path / "versions.json"
    history.write_text(json.dumps({
        "names": {"azureml:azureml-sklearn-1.0": "sklearn-1.0",
                  "azureml:azureml-sklearn-1.0-ubuntu20.04-py38-cpu": "sklearn-1.0",
                  "azureml://registries/azureml/environments/sklearn-1.0": "sklearn-1.0"},
        "versions": {"sklearn-1.0": [["2", {"pip": ["mlflow==1.30.0"], "python": "3.8"}],
                                     ["9", {"pip": ["mlflow==2.9.2"], "python": "3.8"}],
                                     ["40", {"pip": ["mlflow==3.1.0"], "python": "3.9"}]]},
        "published": {"sklearn-1.0": "2-7,9-12,40-41"},
        "legacy": {"azureml:azureml-sklearn-1.0-ubuntu20.04-py38-cpu": ["sklearn-1.0", "12"]},
        "dates": {"sklearn-1.0": {"10": 1743586353}}}))
    monkeypatch.setattr(curated, "VERSIONS", history)
    env_map = EnvMap(tmp_path / "none.yml", tmp_path / "none.yml")
    legacy = "azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu"
    exact = plan_for(f"{legacy}:10", tmp_path, env_map)
    assert "mlflow==2.9.2" in exact.requirements and exact.notice is None
    assert exact.requirements[-1] == "--exclude-newer 2025-04-03T09:32:33Z"  # built the day after
    before = plan_for(f"{legacy}:1", tmp_path, env_map)
    assert before.python == "3.8" and "mlflow==1.30.0" in before.requirements
    assert before.notice == (f"{legacy}:1: version 1 of curated environment sklearn-1.0 is not "
                             "in Azure/azureml-assets' release records (published under this "
                             "name: 2-7,9-12); version 2's definition stands in")
    gap = plan_for(f"{legacy}:8", tmp_path, env_map)
    assert "mlflow==1.30.0" in gap.requirements and "version 7's definition" in gap.notice
    past = plan_for(f"{legacy}:41", tmp_path, env_map)  # the name ended with 12
    assert past.python == "3.8" and "version 12's definition stands in" in past.notice
    assert "mlflow==2.9.2" in plan_for(f"{legacy}@latest", tmp_path, env_map).requirements
    latest = plan_for("azureml:AzureML-sklearn-1.0@latest", tmp_path, env_map)
    assert latest.python == "3.9" and latest.notice is None
    assert curated.expand("1-3,5") == [1, 2, 3, 5]
    image = plan_for({"image": "mcr.microsoft.com/azureml/curated/sklearn-1.0:10"}, tmp_path,
                     env_map)  # a curated image's tag is its version
    assert "mlflow==2.9.2" in image.requirements and image.notice is None


def test_a_prebuilt_azure_ml_image_is_the_curated_environment_of_its_name(tmp_path):
    """`image: mcr.microsoft.com/azureml/minimal-ubuntu20.04-py38-cpu-inference:latest` alone
    (a prebuilt inference image) runs on that curated environment's Python and packages, as
    Azure runs it: not on .venv's, whose pandas the image lacks. A base image no curated
    environment is named after stays as the map has it."""
    minimal = plan_for({"image": "mcr.microsoft.com/azureml/minimal-ubuntu20.04-py38-cpu-"
                        "inference:latest"}, tmp_path, EnvMap(), "step")
    assert minimal.python == "3.8.13" and minimal.undefined == ""
    assert any(line.startswith("azureml-inference-server-http==")
               for line in minimal.requirements)
    assert not any(line.startswith("pandas") for line in minimal.requirements)
    base = plan_for({"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04:latest"},
                    tmp_path, EnvMap(), "step")
    assert (base.python, base.requirements) == (None, ["pip", "setuptools", "wheel"])


def test_a_definition_az_ml_could_not_register_is_passed_over(tmp_path):
    """A spec kept to show a refusal (its conda file missing) was never registered: the one
    further up that could be stands in for the name."""
    from mlops.environments.envspec import job_repo_environment

    (tmp_path / ".git").mkdir()
    _env(tmp_path / "environments/env.yml", "train-env", "conda.yml")
    bad = tmp_path / "tests/invalid/env.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("name: train-env\nimage: python:3.11\nconda_file: gone.yml\n")
    assert job_repo_environment("train-env", None, tmp_path / "tests/fixtures").file == \
        tmp_path / "environments/env.yml"


@pytest.mark.parametrize(("dockerfile", "undefined"), [
    # R from Docker Hub, its packages installed by R: nothing here reads them
    ("FROM rocker/tidyverse:latest\nRUN R -e \"install.packages('optparse')\"\n",
     "image:rocker/tidyverse"),
    # a Python image whose pip installs are read: an environment is built, nothing undefined
    ("FROM python:3.11-slim\nRUN pip install pyjokes==0.6.0\n", ""),
    # an Azure ML image the catalogue knows, nothing installed on it: that image's packages
    ("FROM mcr.microsoft.com/azureml/curated/sklearn-1.5:20\n", ""),
])
def test_a_docker_build_on_an_image_nothing_here_describes_is_named_as_undefined(
        tmp_path, dockerfile, undefined):
    (tmp_path / "context").mkdir()
    (tmp_path / "context" / "Dockerfile").write_text(dockerfile)
    plan = plan_for({"build": {"path": "context"}}, tmp_path, EnvMap(), "job")
    assert plan.undefined == undefined
    if undefined:
        assert "rocker/tidyverse:latest, which has no local stand-in" in plan.notice


@pytest.mark.parametrize(("conda", "said"), [
    ({"dependencies": "python=3.11"}, "the conda file's dependencies: is not a list"),
    ({"dependencies": ["python=3.11", {"pip": "six"}]},
     "the conda file's pip: under dependencies: is not a list"),
])
def test_a_conda_file_whose_dependencies_are_a_string_is_refused_not_read_per_character(
        tmp_path, conda, said):
    """conda reads such a string one character at a time, each a package, and the image build
    fails; read so here, its '.' installed the folder (was a uv error about a project)."""
    from mlops.environments.envfiles import EnvPlan, read_environment_conda

    plan = EnvPlan(label="env")
    with pytest.raises(LocalRunError, match=f"env: {said}: conda reads a string there one "
                                            "character at a time"):
        read_environment_conda(conda, tmp_path, plan)
    assert plan.requirements == []
    read_environment_conda({"dependencies": ["python=3.11", {"pip": ["six"]}]}, tmp_path, plan)
    assert plan.python == "3.11" and "six" in plan.requirements


def test_a_retired_curated_environment_resolves_as_pypi_was_when_it_was_removed(
        tmp_path, monkeypatch):
    """No release record holds it, but azureml-assets removed its definition on a known day:
    every image of it was built by then, so its unpinned packages are that day's (joblib 1.1,
    whose pickles the joblib 1.0 of a scoring environment reads), never today's."""
    from mlops.environments import curated

    monkeypatch.setattr(curated, "VERSIONS", tmp_path / "no-records.json")
    catalogue = tmp_path / "curated.yml"
    catalogue.write_text(yaml.safe_dump({
        "azureml:AzureML-sklearn-0.24-ubuntu18.04-py37-cpu":
            {"pip": ["scikit-learn==0.24.1", "joblib"], "python": "3.7", "retired": 1655726400},
        "azureml:AzureML-current": {"pip": ["joblib"], "python": "3.10"}}))
    env_map = EnvMap(tmp_path / "none.yml", catalogue)
    retired = plan_for("azureml:AzureML-sklearn-0.24-ubuntu18.04-py37-cpu:1", tmp_path, env_map)
    assert retired.requirements[-1] == "--exclude-newer 2022-06-20T12:00:00Z"
    assert not any(r.startswith("--exclude-newer")
                   for r in plan_for("azureml:AzureML-current:3", tmp_path, env_map).requirements)


@pytest.mark.parametrize("reference, python, framework", [
    ("azureml:AzureML-pytorch-1.10-ubuntu18.04-py37-cpu-inference@latest", "3.7", "torch~=1.10"),
    ({"image": "mcr.microsoft.com/azureml/pytorch-1.10-ubuntu18.04-py37-cpu-inference:latest"},
     "3.7", "torch~=1.10"),
    ("azureml:AzureML-sklearn-0.24.1-ubuntu18.04-py37-cpu-inference:1", "3.7",
     "scikit-learn==0.24.1"),
    ({"image": "mcr.microsoft.com/azureml/minimal-ubuntu18.04-py37-cpu-inference"}, "3.7",
     "azureml-inference-server-http")])
def test_a_2022_prebuilt_inference_image_runs_on_its_python_with_its_framework(
        tmp_path, reference, python, framework):
    """Azure's prebuilt inference images of 2022 (py37, in no azureml-assets record) are their
    Python and documented packages, by curated name and by image, never .venv's Python."""
    plan = plan_for(reference, tmp_path, EnvMap(), "deployment")
    assert plan.python == python and plan.notice is None and not plan.undefined
    assert any(line.startswith(framework) for line in plan.requirements)


@pytest.mark.parametrize("line, python", [
    ("python=3.9", "3.9"), ("python 3.9", "3.9"), ("python==3.10.9", "3.10.9"),
    ("python=3.10.*", "3.10"), ("python=3.9=h12debd9_1", "3.9"),
    ("python>=3.8,<3.10", "3.9"), ("python<3.11", "3.10"), ("python<=3.10", "3.10"),
    ("conda-forge::python=3.8", "3.8")])
def test_a_conda_files_python_line_is_the_release_line_conda_gives(tmp_path, line, python):
    """A range under an upper bound is the newest release line it allows (conda's solver
    prefers the newest), never the bound itself (`python<3.11` is not 3.11)."""
    (tmp_path / "conda.yml").write_text(f'dependencies:\n  - "{line}"\n  - pip:\n    - six\n')
    plan = plan_for({"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04",
                     "conda_file": "conda.yml"}, tmp_path, EnvMap(), "job")
    assert plan.python == python


@pytest.mark.parametrize("line, requirement", [
    ("numpy 1.24.3 py310h5f9d8c6_1", "numpy==1.24.3"), ("numpy=1.24.3=py310h5f9d8c6_1",
                                                        "numpy==1.24.3"),
    ("numpy >=1.20, <1.24", "numpy>=1.20,<1.24"), ("numpy 1.2*", "numpy==1.2.*"),
    ("numpy=1.24", "numpy==1.24.*")])
def test_a_conda_match_spec_becomes_the_pip_requirement_of_its_versions(tmp_path, line,
                                                                          requirement):
    """conda's `name version build` form drops the build string (it was run into the
    version: `numpy==1.24.3py310h5f9d8c6_1`, no requirement at all)."""
    (tmp_path / "conda.yml").write_text(f'dependencies:\n  - python=3.10\n  - "{line}"\n')
    plan = plan_for({"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04",
                     "conda_file": "conda.yml"}, tmp_path, EnvMap(), "job")
    assert requirement in plan.requirements
