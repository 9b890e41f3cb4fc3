"""A Dockerfile's RUN lines as the ordered installs its build runs (dockerfiles.py, steps.py):
the plan a resolver gets. How the resolver takes them: tests/unit/test_resolve.py; a real
two-install Dockerfile: tests/e2e/test_install_steps.py."""

from __future__ import annotations

import pytest

from mlops.environments import steps
from mlops.environments.dockerfiles import (
    CondaFile,
    PipInstall,
    command_installs,
    read_installs,
    shell_commands,
)
from mlops.environments.envspec import EnvMap, plan_for

STEP, NO_DEPS = steps.STEP, f"{steps.STEP} --no-deps"


@pytest.mark.parametrize(("command", "expected"), [
    ("pip install a && pip install b; echo c", [["pip", "install", "a"], ["pip", "install", "b"],
                                                ["echo", "c"]]),
    ("pip install 'numpy>=1.2' scipy>=1 2>&1 | tee log", [["pip", "install", "numpy>=1.2",
                                                           "scipy"], ["tee", "log"]]),
    ("set -e\npip install x \\\n  y\n# a comment\npip install z",
     [["set", "-e"], ["pip", "install", "x", "y"], ["pip", "install", "z"]]),
    ("pip install \"h[x]>=1; python_version > '3'\" || true",
     [["pip", "install", "h[x]>=1; python_version > '3'"], ["true"]]),
])
def test_a_run_command_is_split_as_a_shell_splits_it(command, expected):
    assert shell_commands(command) == expected


def test_each_pip_install_keeps_its_packages_files_and_flags():
    found = command_installs(
        "python3 -m pip --no-cache-dir install -U --pre -r req.txt -c pins.txt x==1 "
        "--index-url=https://i/simple --extra-index-url https://e/simple -t /opt/x && "
        "/opt/conda/bin/pip3 install --no-deps --quiet 'y<2' && uv pip install --system z && "
        "conda env create -n env -f /tmp/conda.yml && conda install -y pip")
    assert found == [
        PipInstall(packages=("x==1",), requirements=("req.txt",), constraints=("pins.txt",),
                   indexes=("--index-url https://i/simple", "--extra-index-url https://e/simple"),
                   upgrade=True, pre=True),
        PipInstall(packages=("y<2",), no_deps=True),
        PipInstall(packages=("z",)),
        CondaFile("/tmp/conda.yml"),
    ]


DOCKERFILE = """\
FROM python:3.10 AS build
RUN apt-get update && apt-get install -y git
FROM build AS final
ARG TORCH=2.1.0
ENV PIP=/opt/conda/bin/pip
# the pins first
RUN $PIP install 'responsible==0.18.1' \\
        'plotly==5.6.0' \\
    # a comment inside the continuation
        "torch==${TORCH}"
RUN ["pip", "install", "--pre", "azure-ai-ml"]
RUN --mount=type=cache,target=/root/.cache pip install --no-deps 'domonic==0.9.10'
RUN <<EOF
pip install 'requests>=2.32.4'
pip install -U pip
EOF
"""


def test_a_dockerfiles_installs_come_in_the_order_its_build_runs_them():
    found = read_installs(DOCKERFILE)
    assert found.image == "python:3.10"  # the final stage, back through the one it is FROM
    assert found.steps == [
        PipInstall(packages=("responsible==0.18.1", "plotly==5.6.0", "torch==2.1.0")),
        PipInstall(packages=("azure-ai-ml",), pre=True),
        PipInstall(packages=("domonic==0.9.10",), no_deps=True),
        PipInstall(packages=("requests>=2.32.4",)),
        PipInstall(packages=("pip",), upgrade=True),
    ]


def test_only_the_final_stage_and_the_stages_it_is_built_from_count():
    found = read_installs("FROM python:3.11 AS wheels\nRUN pip install builder\n"
                          "FROM ubuntu:22.04\nRUN pip install kept\n")
    assert found.image == "ubuntu:22.04" and found.steps == [PipInstall(packages=("kept",))]
    assert read_installs("FROM $BASE\nRUN pip install x\n").image is None


def test_variables_take_the_value_the_line_sees_else_their_default_and_a_last_line_ends():
    found = read_installs("FROM a\nARG V=1\nRUN pip install x==${V:-2} y==${W:-3} z==$U \\\n")
    assert found.steps == [PipInstall(packages=("x==1", "y==3", "z==$U"))]


def test_a_from_line_sees_the_args_declared_above_the_first_from_and_no_others():
    """Docker: FROM lines may use the ARGs declared before the first FROM (their defaults,
    where az ml passes no build argument); an ARG inside a stage is not seen by a later FROM."""
    found = read_installs("ARG PYTHON_VERSION=3.9\nFROM python:${PYTHON_VERSION}-slim\n"
                          "RUN pip install x\n")
    assert found.image == "python:3.9-slim"
    assert read_installs("FROM a\nARG TAG=1\nFROM b:${TAG}\n").image is None


def test_a_variable_is_kept_as_written_where_the_shell_keeps_it():
    """Docker hands a RUN line to the shell, which expands variables outside single quotes and
    not after a backslash."""
    found = read_installs("FROM a\nARG V=1\nRUN pip install \"x==$V\" 'y==$V' z==\\$V w==${V}\n")
    assert found.steps == [PipInstall(packages=("x==1", "y==$V", "z==$V", "w==1"))]


def test_the_plan_keeps_each_install_apart_with_its_flags(tmp_path):
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "requirements.txt").write_text("pandas==2.2.3\n# note\n")
    (context / "pins.txt").write_text("numpy<2\n")
    (context / "Dockerfile").write_text(
        "FROM ubuntu:22.04\n"
        "COPY requirements.txt pins.txt /tmp/\n"
        "RUN pip install -r /tmp/requirements.txt -c /tmp/pins.txt && \\\n"
        "    pip install --no-deps 'domonic==0.9.10' 'cssselect==1.1.0'\n"
        "RUN pip install 'requests>=2.32.4'\n")
    plan = plan_for({"build": {"path": "ctx"}}, tmp_path, EnvMap(), "job")
    assert plan.requirements == [
        STEP, "pandas==2.2.3", f"{steps.CONSTRAINT} numpy<2",
        NO_DEPS, "domonic==0.9.10", "cssselect==1.1.0",
        STEP, "requests>=2.32.4"]
    installs = steps.split(plan.requirements)
    assert installs[0] == steps.Step()  # nothing held before them on an image unknown here
    assert installs[2] == steps.Step(lines=("domonic==0.9.10", "cssselect==1.1.0"),
                                     no_deps=True)
    assert installs[1].constraints == ("numpy<2",) and not installs[3].no_deps


def test_a_curated_image_below_is_what_the_first_install_starts_from(tmp_path):
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        "FROM mcr.microsoft.com/azureml/curated/sklearn-1.5:20\nRUN pip install pyjokes\n")
    plan = plan_for({"build": {"path": "ctx"}}, tmp_path, EnvMap(), "job")
    first, *later = steps.split(plan.requirements)
    assert any(line.startswith("scikit-learn") for line in first.lines)
    assert [step.lines for step in later] == [("pyjokes",)]


def test_the_curated_catalogue_keeps_each_install_in_order_and_drops_empty_ones():
    from gen_curated_envs import entry  # scripts/ is on the path (conftest)

    from mlops.environments.envfiles import EnvPlan

    plan = EnvPlan(label="rai", requirements=[
        "pip", "pytorch==1.13", STEP, "a==1", "a==1", "--index-url https://x/simple",
        f"{STEP} --upgrade", "b=={{latest-pypi-version}}", NO_DEPS, "domonic==0.9.10",
        STEP, "requests>=2.32.4", f"{steps.CONSTRAINT} numpy<2", "pip"])
    assert entry(plan)["pip"] == [
        "pip", "torch", STEP, "a==1", NO_DEPS, "domonic==0.9.10",
        STEP, "requests>=2.32.4", f"{steps.CONSTRAINT} numpy<2", "pip"]


def test_an_installs_file_is_the_context_file_the_copy_lines_put_at_its_path(tmp_path):
    """`conda env create -f /tmp/conda.yaml` after `COPY environment/conda.yaml /tmp/conda.yaml`
    reads environment/conda.yaml (not a context-root file of that name); after `COPY . /app`
    and `WORKDIR /app`, `-r reqs/prod.txt` is the context's reqs/prod.txt, as Docker builds."""
    context = tmp_path / "ctx"
    (context / "environment").mkdir(parents=True)
    (context / "reqs").mkdir()
    (context / "environment" / "conda.yaml").write_text(
        "dependencies:\n  - python=3.11\n  - pip\n  - pip:\n    - joblib==1.2.0\n")
    (context / "conda.yaml").write_text("dependencies:\n  - python=3.8\n")  # not copied
    (context / "reqs" / "prod.txt").write_text("pandas==2.2.3\n")
    (context / "Dockerfile").write_text(
        "FROM ubuntu:22.04 AS build\nFROM ubuntu:22.04\n"
        "COPY ./environment/conda.yaml /tmp/conda.yaml\n"
        "COPY --from=build /etc/hosts /tmp/conda.yaml.bak\n"
        "RUN conda env create -n userenv -f /tmp/conda.yaml\n"
        "ENV PATH=/opt/conda/envs/userenv/bin:$PATH\n"
        "COPY . /app\nWORKDIR /app\nRUN pip install -r reqs/prod.txt\n")
    plan = plan_for({"build": {"path": "ctx"}}, tmp_path, EnvMap(), "job")
    assert plan.python == "3.11"
    assert "joblib==1.2.0" in plan.requirements and "pandas==2.2.3" in plan.requirements
    found = read_installs((context / "Dockerfile").read_text())
    assert [step.path if hasattr(step, "path") else step.requirements
            for step in found.steps] == ["/tmp/conda.yaml", ("/app/reqs/prod.txt",)]


def test_a_stage_the_final_one_copies_files_from_brings_its_installs(tmp_path):
    """`FROM ubuntu` + `COPY --from=compile-image /opt/conda /opt/conda` holds the conda
    environment the compile stage created (its Python, its packages), where the copy happens;
    a stage nothing copies from still counts for nothing."""
    found = read_installs("FROM python:3.11 AS unused\nRUN pip install not-copied\n"
                          "FROM condaforge/mambaforge AS compile-image\nCOPY environment.yaml .\n"
                          "RUN mamba env create --name core --file environment.yaml\n"
                          "FROM ubuntu:22.04\nRUN pip install before\n"
                          "COPY --from=compile-image /opt/conda /opt/conda\n"
                          "ENV PATH /opt/conda/envs/core/bin:$PATH\nRUN pip install after\n")
    assert found.image == "ubuntu:22.04"
    assert found.steps == [PipInstall(packages=("before",)), CondaFile("/environment.yaml"),
                           PipInstall(packages=("after",))]
    context = tmp_path / "environment"
    context.mkdir()
    (context / "environment.yaml").write_text(
        "channels: [conda-forge]\ndependencies:\n  - python=3.10.12\n  - pandas=2.0.3\n")
    (context / "Dockerfile").write_text(
        "FROM condaforge/mambaforge:latest AS compile-image\nCOPY environment.yaml .\n"
        "RUN mamba env create --name core --file environment.yaml\n"
        "FROM ubuntu:22.04 AS build-image\nCOPY --from=compile-image /opt/conda /opt/conda\n"
        "ENV PATH /opt/conda/envs/core/bin:/opt/conda/bin:$PATH\n")
    plan = plan_for({"build": {"path": "./environment"}}, tmp_path, EnvMap(), "job")
    assert plan.python == "3.10.12" and "pandas==2.0.3" in plan.requirements
    assert plan.notice is None and not plan.undefined
