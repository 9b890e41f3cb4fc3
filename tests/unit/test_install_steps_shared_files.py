"""Files two wheels of an environment both ship, left as Azure's installs in turn leave them: a
conda file's mlflow=1.26.1 (the conda install) and azureml-mlflow's mlflow-skinny 2.17 (the pip
install after it) share the mlflow/ package; pip wrote skinny's files over conda's, where uv's one
install of the set left a mix that fails at `import mlflow` (mlops/environments/closures.py)."""

from __future__ import annotations

from types import SimpleNamespace

from mlops.environments import closures, resolve, steps
from mlops.environments.resolve import Locked, Staged, StepSet


def test_the_install_that_brought_a_release_is_the_one_that_wrote_its_files():
    installs = [{"mlflow": Locked("1.26.1", False), "numpy": Locked("1.22.4", True)},
                {"mlflow": Locked("1.26.1", False), "mlflow-skinny": Locked("2.17.2", False),
                 "numpy": Locked("1.24.4", True)}]
    assert steps.written_in(installs) == {"mlflow": 0, "numpy": 1, "mlflow-skinny": 1}
    written = steps.written_in(installs)
    assert steps.rewritten(["mlflow", "mlflow-skinny"], written) == ["mlflow-skinny"]
    assert steps.rewritten(["mlflow-skinny", "numpy"], written) == []  # one install: pip's order
    assert steps.rewritten([], written) == []


def test_only_environments_built_by_installs_in_turn_change_their_cache_key():
    assert steps.stacked(["mlflow==1.26.1", "pandas"]) == []
    assert steps.stacked(["mlflow==1.26.1", "--install-step --upgrade", "azureml-mlflow"]) != []


def wheel(site, name: str, version: str, files: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{path},sha256=AAAA,1\n" for path in files))


def test_a_later_install_s_wheel_is_written_again_over_the_files_it_shares(tmp_path,
                                                                           monkeypatch):
    site = tmp_path / "lib/python3.8/site-packages"
    wheel(site, "mlflow", "1.26.1", ["mlflow/__init__.py", "mlflow/server/app.js"])
    wheel(site, "mlflow-skinny", "2.17.2", ["mlflow/__init__.py"])
    wheel(site, "pandas", "1.4.2", ["pandas/__init__.py"])
    calls = []
    monkeypatch.setattr(resolve, "run_uv", lambda argv: calls.append(argv) or
                        SimpleNamespace(returncode=0, stderr=""))
    conda = {"mlflow": Locked("1.26.1", False), "pandas": Locked("1.4.2", True)}
    pip = {**conda, "mlflow-skinny": Locked("2.17.2", False)}
    closures.restack(tmp_path, Staged([StepSet(conda), StepSet(pip)]), "env")
    assert [argv[-2:] for argv in calls] == [["--reinstall", "mlflow-skinny==2.17.2"]]
    calls.clear()
    closures.restack(tmp_path, Staged([StepSet(pip), StepSet(conda)]), "env")
    assert calls == []  # mlflow, first written, kept 1.26.1: the later install rewrote nothing
    closures.restack(tmp_path, pip, "env")  # one install: no order of installs to keep
    assert calls == []
