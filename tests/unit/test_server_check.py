"""An online deployment's environment must install azureml-inference-server-http: Azure's
inference container checks for it (`pip show`) before it starts the server, and stops with "A
required package azureml-inference-server-http is missing" (mlops/environments/startup.py). The
runtime no longer adds the server to a deployment that brings its own environment; it checks, on
what the environment itself installs, where it knows the whole package set."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops.endpoints.deployment import SERVER_PACKAGES
from mlops.environments.activation import Environments
from mlops.environments.envspec import EnvironmentRef, EnvMap, plan_for
from mlops.environments.startup import absent
from mlops.errors import LocalRunError

AZURE_LINE = "A required package azureml-inference-server-http is missing"


def conda(*pip: str) -> dict:
    return {"conda_file": {"dependencies": ["python=3.11", "pip", {"pip": list(pip)}]}}


def test_an_environment_that_does_not_install_the_server_stops_as_azures_container_does(tmp_path):
    """numpy alone: .venv below holds the server, but the environment itself does not install it."""
    ref = EnvironmentRef(value=conda("numpy"), base=tmp_path, requires=SERVER_PACKAGES)
    with pytest.raises(LocalRunError, match=AZURE_LINE) as caught:
        Environments().layers(ref, "deployment.yml: environment")
    assert "exits 100" in str(caught.value) and "pip dependencies" in str(caught.value)


def test_the_server_named_or_reached_through_another_package_starts(tmp_path):
    ref = EnvironmentRef(value=conda("azureml-inference-server-http"), base=tmp_path,
                         requires=SERVER_PACKAGES)
    assert Environments().layers(ref, "deployment.yml: environment").layers == []


class Site:
    """A stack whose only site-packages is a folder of distribution records."""

    def __init__(self, folder: Path):
        self.folder = folder

    def sites(self) -> list[Path]:
        return [self.folder]


def dist(site: Path, name: str, *requires: str) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = [f"Requires-Dist: {line}" for line in requires]
    (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.1", f"Name: {name}",
                                              "Version: 1.0", *lines]) + "\n")


def test_the_check_follows_requirements_and_ignores_what_the_environment_does_not_reach(tmp_path):
    dist(tmp_path, "azureml-defaults", "azureml-inference-server-http")
    dist(tmp_path, "azureml-inference-server-http")
    dist(tmp_path, "scikit-learn")
    stack = Site(tmp_path)
    assert absent(stack, ["azureml-defaults"], SERVER_PACKAGES) == []  # through its requirement
    assert absent(stack, ["scikit-learn"], SERVER_PACKAGES) == list(SERVER_PACKAGES)
    assert absent(stack, ["scikit-learn"], ()) == []  # a job: nothing checked


def test_only_a_package_set_known_whole_is_judged(tmp_path):
    """A conda file's and a curated environment's sets are Azure's; a hand-written stand-in, an
    unknown name (.venv) and a Docker build are known in part and never refused for it."""
    env_map = EnvMap()
    assert plan_for(conda("numpy"), tmp_path, env_map, "d").complete
    curated = "azureml://registries/azureml/environments/minimal-py311-inference/labels/latest"
    plan = plan_for(curated, tmp_path, env_map, "d")
    assert plan.complete and any("azureml-inference-server-http" in line
                                 for line in plan.requirements)
    own = "azureml:AzureML-minimal-ubuntu22.04-py39-cpu-inference@latest"  # local-envs.yml
    assert not plan_for(own, tmp_path, env_map, "d").complete
    assert not plan_for("azureml:nobody-knows:1", tmp_path, env_map, "d").complete
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM python:3.11\nRUN pip install numpy\n")
    assert not plan_for({"build": {"path": "ctx"}}, tmp_path, env_map, "d").complete


def test_an_online_deployment_checks_the_server_and_a_no_code_one_is_given_it(tmp_path):
    from mlops.endpoints.deployment import image_packages, server_check

    assert server_check("online-deployment") == SERVER_PACKAGES
    assert server_check("batch-deployment") == ()
    assert image_packages("online-deployment") == (*SERVER_PACKAGES, "mlflow")
    assert image_packages("batch-deployment") == ("mlflow",)
