"""`environment: file:<spec>.yml` is the job's own environment, defined in that file, as
azure-ai-ml loads it (not a workspace environment named "file")."""

from __future__ import annotations

import pytest

from mlops.environments.envspec import ENV_MAP, EnvMap, plan_for
from mlops.errors import LocalRunError


def test_a_file_reference_reads_the_environment_spec_it_names(tmp_path):
    folder = tmp_path / "environments" / "azureml"
    folder.mkdir(parents=True)
    (folder / "conda.yml").write_text("dependencies:\n  - python=3.11\n  - pip:\n"
                                      "    - pyjokes==0.6.0\n")
    (folder / "env.yml").write_text("name: mine\nimage: mcr.microsoft.com/azureml/"
                                    "openmpi4.1.0-ubuntu22.04\nconda_file: conda.yml\n")
    plan = plan_for("file:./environments/azureml/env.yml", tmp_path, EnvMap(ENV_MAP), "job")
    assert "pyjokes==0.6.0" in plan.requirements and plan.python == "3.11"
    assert plan.label == "file:./environments/azureml/env.yml"


def test_a_file_reference_to_something_else_is_refused_by_name(tmp_path):
    (tmp_path / "job.yml").write_text("command: echo\n")
    with pytest.raises(LocalRunError, match="job.yml is not an environment spec"):
        plan_for("file:job.yml", tmp_path, EnvMap(ENV_MAP), "job")
    with pytest.raises(LocalRunError, match="cannot read"):
        plan_for("file:missing.yml", tmp_path, EnvMap(ENV_MAP), "job")
