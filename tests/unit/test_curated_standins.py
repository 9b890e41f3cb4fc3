"""The hand-written stand-ins for Azure's CPU training images (catalog/local-envs.yml) keep the
packages jobs import without naming them: matplotlib (a training script's plots) and
azureml-defaults, whose azureml-dataset-runtime installs pyarrow (pandas' parquet engine), in
every image that has them."""

import json

import pytest
import yaml

from mlops.environments import curated, envspec

REGISTRY = "azureml://registries/azureml/environments/"


def _base(line: str) -> str:
    for stop in "=~<>[ ;!":
        line = line.split(stop)[0]
    return line.strip().lower()


def _cpu_standins() -> dict[str, list[str]]:
    standins = yaml.safe_load(envspec.ENV_MAP.read_text())
    return {key[len(REGISTRY):]: (value["pip"] if isinstance(value, dict) else value)
            for key, value in standins.items()
            if key.startswith(REGISTRY) and "cuda" not in key and isinstance(value, (dict, list))}


@pytest.mark.parametrize("package", ["azureml-defaults", "matplotlib"])
def test_a_cpu_images_stand_in_keeps_what_jobs_import_where_the_image_installs_it(package):
    versions = json.loads(curated.VERSIONS.read_text())["versions"]
    checked = []
    for name, pip in _cpu_standins().items():
        images = [entry["pip"] for _, entry in versions.get(name, [])]
        if images and any(package in map(_base, lines) for lines in images):
            checked.append(name)
            assert package in map(_base, pip), name
    assert "sklearn-1.5" in checked  # the shape met: prep.py's to_parquet, train.py's plots
