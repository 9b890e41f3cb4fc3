"""The repository the tooling works on is found from the current folder, and what a run writes
goes to that repository's state folder (mlops/project.py)."""

from __future__ import annotations

import pytest

from mlops.errors import LocalRunError
from mlops.project import CONFIG, forget, project, repository


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    for name in ("AZML_STATE_DIR", "MLOPS_STATE_DIR", "MLOPS_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    forget()
    yield
    forget()


def test_a_folder_with_azml_toml_is_the_repository_and_its_state_is_dot_azml(tmp_path,
                                                                           monkeypatch):
    (tmp_path / CONFIG).write_text('own_models = ["m"]\nasset_map = "maps/paths.yml"\n')
    (tmp_path / "specs" / "deep").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "specs" / "deep")
    settings = project()
    assert settings.root == tmp_path.resolve() and settings.config == tmp_path.resolve() / CONFIG
    assert settings.state == tmp_path.resolve() / ".azml"
    assert settings.runs_dir == tmp_path.resolve() / ".azml" / "runs"
    assert settings.asset_map == tmp_path.resolve() / "maps" / "paths.yml"
    assert settings.own_models == ("m",) and settings.env_map is None


def test_pyproject_tool_azml_is_read_and_a_pyproject_without_it_is_passed_over(tmp_path):
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    (outer / "pyproject.toml").write_text('[tool.azml]\nstate_dir = "."\nruns_dir = "r"\n')
    (inner / "pyproject.toml").write_text('[project]\nname = "x"\n')
    root, config, table = repository(inner)
    assert root == outer.resolve() and config == outer.resolve() / "pyproject.toml"
    assert table == {"state_dir": ".", "runs_dir": "r"}


def test_without_settings_the_git_top_is_the_repository_else_the_folder(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "a" / "b").mkdir(parents=True)
    assert repository(tmp_path / "repo" / "a" / "b")[0] == (tmp_path / "repo").resolve()
    (tmp_path / "loose").mkdir()
    assert repository(tmp_path / "loose") == ((tmp_path / "loose").resolve(), None, {})


def test_the_environment_names_the_state_folder_first(tmp_path, monkeypatch):
    (tmp_path / CONFIG).write_text('state_dir = "elsewhere"\n')
    monkeypatch.chdir(tmp_path)
    assert project().state == tmp_path.resolve() / "elsewhere"
    monkeypatch.setenv("MLOPS_STATE_DIR", str(tmp_path / "old"))
    assert project().state == tmp_path / "old"
    monkeypatch.setenv("AZML_STATE_DIR", str(tmp_path / "new"))
    assert project().state == tmp_path / "new"


def test_damaged_settings_are_refused_with_the_file_named(tmp_path, monkeypatch):
    (tmp_path / CONFIG).write_text("state_dir = [unclosed\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LocalRunError, match=rf"{CONFIG}: not readable TOML"):
        project()


def test_a_repositorys_env_map_overlays_the_tools_stand_ins(tmp_path, monkeypatch):
    """Its own entries win; the curated catalogue and the tool's stand-ins still answer."""
    from mlops.environments.envspec import EnvMap

    (tmp_path / CONFIG).write_text('env_map = "envs.yml"\n')
    (tmp_path / "envs.yml").write_text("azureml:my-team-env: [six]\n"
                                       "azureml:AzureML-sklearn-1.5: [scikit-learn==1.5.2]\n")
    monkeypatch.chdir(tmp_path)
    env_map = EnvMap()
    assert env_map.file == tmp_path.resolve() / "envs.yml"
    assert env_map.get("azureml:my-team-env") == ["six"]
    assert env_map.get("azureml:azureml-sklearn-1.5") == ["scikit-learn==1.5.2"]
    assert env_map.get("azureml:AzureML-minimal-ubuntu22.04-py39-cpu-inference") is not None


def test_a_state_folder_inside_the_repository_keeps_itself_out_of_git(repo):
    from mlops.project import keep_state_out_of_git

    keep_state_out_of_git()
    assert (repo / ".azml" / ".gitignore").read_text().endswith("*\n")
    (repo / "azml.toml").write_text('state_dir = "."\n')  # the repository itself: untouched
    (repo / ".azml" / ".gitignore").unlink()
    forget()
    keep_state_out_of_git()
    assert not (repo / ".gitignore").exists()
