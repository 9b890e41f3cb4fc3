"""The Python a Dockerfile's final stage runs `python` with (docker_python.py): a job built
from it runs on that version here too, as a published spec on a `python:3.9-slim` image or
a `uv venv` put on PATH expects."""

from __future__ import annotations

import pytest

from mlops.environments.docker_python import build_python, image_python
from mlops.environments.dockerfiles import read_installs
from mlops.environments.envspec import EnvMap, plan_for

UV_STAGES = """FROM mcr.microsoft.com/devcontainers/base:jammy AS base
ARG PYTHON_VERSION=3.12
ENV UV_PYTHON=${PYTHON_VERSION}
RUN uv python install ${PYTHON_VERSION}
FROM base AS tools
RUN apt-get update && apt-get install -y shellcheck
FROM base AS runner
ARG VENV_PATH=/home/vscode/venv
RUN uv venv ${VENV_PATH}
ENV VIRTUAL_ENV="${VENV_PATH}"
ENV PATH="${VENV_PATH}/bin:$PATH"
RUN uv pip install -r requirements.txt
"""


@pytest.mark.parametrize(("dockerfile", "python"), [
    (UV_STAGES, "3.12"),
    ("FROM python:3.9-slim\nRUN pip install six\n", "3.9"),
    ("FROM docker.io/library/python:3.10.4-bullseye@sha256:ab\nRUN pip install six\n", "3.10"),
    ("FROM continuumio/miniconda3\nRUN conda install -y python=3.8 && pip install six\n", "3.8"),
    ("FROM ubuntu:22.04\nRUN conda create -p /envs/e python=3.7 pip -y\n"
     "ENV PATH=/envs/e/bin:$PATH\nRUN pip install six\n", "3.7"),
    ("FROM ubuntu:22.04\nRUN mamba create -n e python=3.11 -y\n"
     "ENV PATH=/opt/conda/envs/e/bin:$PATH\n", "3.11"),
    ("FROM ubuntu:22.04\nRUN python3.10 -m venv /opt/venv\nENV PATH=\"/opt/venv/bin:${PATH}\"\n",
     "3.10"),
    ("FROM ubuntu:22.04\nWORKDIR /app\nRUN UV_PYTHON=3.13 uv venv\nENV PATH=/app/.venv/bin:$PATH\n",
     "3.13"),
    ("FROM ubuntu\nRUN sudo pyenv install 3.8.18 && pyenv global 3.8.18\n", "3.8"),
    ("FROM ubuntu\nRUN uv python install 3.12 --default\n", "3.12"),
    ("FROM continuumio/miniconda3\nRUN conda install -y 'python<3.11'\n", "3.10"),
    ("FROM ubuntu\nRUN conda create -y -p /env 'python>=3.8,<3.10'\nENV PATH=/env/bin:$PATH\n",
     "3.9"),
    # what leaves the image's own Python, not known here: None (the runtime's default)
    ("FROM ubuntu:22.04\nRUN conda create -p /envs/e python=3.7 -y\nRUN pip install six\n", None),
    ("FROM ubuntu:22.04\nRUN apt-get install -y python3.10 python3-pip && pip3 install six\n",
     None),
    ("FROM ubuntu:22.04\nRUN uv python install 3.12\n", None),
    ("FROM python:3.9 AS build\nRUN pip wheel .\nFROM ubuntu\nRUN pip install six\n", None),
], ids=["uv-stages", "slim", "docker-io", "conda-base", "conda-prefix", "mamba-name", "venv",
        "relative-venv", "pyenv", "uv-default", "conda-range", "conda-create-range",
        "env-not-on-path", "deadsnakes-beside",
        "uv-fetched-only", "other-stage"])
def test_the_python_a_dockerfile_runs_is_read_from_what_fixes_it(dockerfile, python):
    found = read_installs(dockerfile)
    assert build_python(found.image, found.commands, found.envs) == python


@pytest.mark.parametrize(("image", "python"), [
    ("python:3.9", "3.9"), ("python:3.11-slim-bookworm", "3.11"), ("python", None),
    ("python:latest", None), ("mcr.microsoft.com/devcontainers/python:1-3.12-bookworm", "3.12"),
    ("myreg.io:5000/team/python:3.10", "3.10"), ("pythonic:3.9", None), ("ubuntu:22.04", None),
])
def test_a_python_images_tag_names_its_version(image, python):
    assert image_python(image) == python


def test_a_job_on_a_python_image_asks_for_that_python(tmp_path):
    """`image: python:3.8-slim` and a build FROM one: the plan asks for 3.8 (else the job would
    run on this machine's Python)."""
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM python:3.8-slim\nRUN pip install six\n")
    assert plan_for({"build": {"path": "ctx"}}, tmp_path, EnvMap(), "job").python == "3.8"
    assert plan_for({"image": "python:3.8-slim"}, tmp_path, EnvMap(), "job").python == "3.8"
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM ubuntu:22.04\nRUN pip install six\n")
    assert plan_for({"build": {"path": "ctx"}}, tmp_path, EnvMap(), "job").python is None
