"""Where an environment's own Python comes from (mlops/environments/interpreters.py), what its
closure is resolved for (own_python.resolved_for), what a task's top layer goes over
(activation.Stack), and the runtime's helpers that run inside any environment's Python. Stand-in
interpreters are small shell scripts that answer the probe: no real Python is started."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from support import ROOT

from mlops.environments import activation, interpreters, layers
from mlops.environments.interpreters import HERE, Python
from mlops.environments.own_python import own_key, resolved_for


def fake_python(folder: Path, version: str, name: str = "python", implementation="CPython",
                code: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {implementation} {version}\nexit {code}\n")
    path.chmod(0o755)
    return path


def read_probe(executable) -> Python | None:
    """What the real probe would answer for a fake_python file (None: it fails)."""
    import shutil

    found = shutil.which(str(executable))
    if found is None:
        return None
    words = Path(found).read_text().split()
    if words[-1] != "0" or words[2] != "CPython":
        return None
    return Python(Path(os.path.realpath(found)), words[3])


@pytest.fixture
def no_interpreters(tmp_path, monkeypatch):
    """A machine with no other Python: an empty pyenv, nothing on PATH, no fetching."""
    monkeypatch.setattr(interpreters, "probe", read_probe)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("MLOPS_FETCH_PYTHON", "0")
    monkeypatch.setattr(interpreters, "_uv", lambda minor, *extra, **kw: [])
    interpreters.find.cache_clear()
    yield tmp_path
    interpreters.find.cache_clear()


def test_an_interpreter_knows_its_minor_version_and_venv_layout():
    found = Python(Path("/p/python3.8"), "3.8.18")
    assert (found.minor, found.lib, found.info) == ("3.8", "python3.8", (3, 8))
    assert found.site(Path("/v")) == Path("/v/lib/python3.8/site-packages")
    assert interpreters.minor_of("3.7.5") == "3.7" and interpreters.minor_of("3.10.*") == "3.10"
    assert interpreters.minor_of("3.8,<3.11") == "3.8"  # a conda range: its lower bound


def test_pyenv_versions_are_read_directly_newest_patch_first(no_interpreters):
    root = no_interpreters / "pyenv" / "versions"
    for version in ("3.8.2", "3.8.18", "3.9.1", "3.8.10"):
        fake_python(root / version / "bin", version, name="python3.8"
                    if version.startswith("3.8") else "python3.9")
    found = interpreters.find("3.8")
    assert found is not None and found.version == "3.8.18"
    assert interpreters.find("3.10") is None  # none: no fetch when MLOPS_FETCH_PYTHON=0


def test_a_named_interpreter_wins_and_one_of_another_version_is_passed_over(no_interpreters,
                                                                          monkeypatch):
    fake_python(no_interpreters / "pyenv/versions/3.9.18/bin", "3.9.18", name="python3.9")
    wrong = fake_python(no_interpreters / "wrong", "3.10.2")
    monkeypatch.setenv("MLOPS_PYTHON_3_9", str(wrong))
    assert interpreters.find("3.9").version == "3.9.18"  # the named one is 3.10: passed over
    interpreters.find.cache_clear()
    right = fake_python(no_interpreters / "right", "3.9.7")
    monkeypatch.setenv("MLOPS_PYTHON_3_9", str(right))
    assert interpreters.find("3.9") == Python(right, "3.9.7")


def test_pythonx_y_on_path_is_found_and_this_machines_minor_is_this_python(no_interpreters):
    fake_python(no_interpreters / "bin", "3.12.1", name="python3.12")
    assert interpreters.find("3.12").version == "3.12.1"
    assert interpreters.find(HERE.minor) is HERE
    assert interpreters.find("3.5") is None  # older than the runtime's helpers run on (3.6)
    assert "uv python install 3.8" in interpreters.how_to_get("3.8")


def test_a_failed_fetch_is_not_tried_again_within_the_hour(no_interpreters, monkeypatch):
    monkeypatch.setenv("MLOPS_CACHE_DIR", str(no_interpreters / "cache"))
    tries = []
    monkeypatch.setattr(interpreters.subprocess, "run",
                        lambda argv, **kw: tries.append(argv) or
                        interpreters.subprocess.CompletedProcess(argv, 1, "", "dns error"))
    assert interpreters.fetch("3.9") is None and len(tries) == 1
    assert interpreters.fetch("3.9") is None and len(tries) == 1  # remembered
    os.utime(no_interpreters / "cache/pythons/fetch-failed-3.9", (0, 0))
    assert interpreters.fetch("3.9") is None and len(tries) == 2  # an hour later: again


def test_a_python_uv_cannot_download_is_neither_fetched_nor_advised_from_uv(no_interpreters,
                                                                            monkeypatch):
    tries = []
    monkeypatch.setattr(interpreters.subprocess, "run", lambda argv, **kw: tries.append(argv))
    assert interpreters.fetch("3.6") is None and interpreters.fetch("3.7") is None
    assert tries == []  # uv's downloads start at 3.8: nothing to wait 300 s for
    advice = interpreters.how_to_get("3.6")
    assert "pyenv install 3.6" in advice and "uv python install" not in advice
    assert "MLOPS_PYTHON_3_6=" in advice
    assert "uv python install 3.9" in interpreters.how_to_get("3.9")


def test_the_closure_is_resolved_for_the_patch_release_the_spec_names_else_the_interpreters():
    py38 = Python(Path("/p/python3.8"), "3.8.18")
    assert resolved_for("3.7.5", Python(Path("/p/python3.7"), "3.7.16")) == "3.7.5"
    assert resolved_for("3.8", py38) == "3.8.18" and resolved_for("3.8.*", py38) == "3.8.18"
    assert resolved_for("3.8", None) == "3.8" and resolved_for("3.7.5", None) == "3.7.5"
    assert resolved_for("3.8,<3.11", py38) == "3.8.18"  # a range: the interpreter's own
    assert resolved_for("3.8.*", None) == "3.8"
    assert own_key(["a==1"], "3.8.18", py38) != own_key(["a==1"], "3.8.5", py38)
    assert own_key(["a==1"], "3.8.18", py38) != own_key(
        ["a==1"], "3.8.18", Python(Path("/q/python3.8"), "3.8.18"))


def test_an_environment_of_its_own_python_sees_nothing_of_venv(tmp_path):
    py38 = Python(Path("/p/python3.8"), "3.8.18")
    own = activation.Stack([tmp_path / "env"], py38, own=True)
    assert own.sites() == [tmp_path / "env/lib/python3.8/site-packages"]
    assert own.bins() == [tmp_path / "env/bin"]
    over = activation.Stack([])
    assert over.sites() == [layers.BASE_SITE] and over.bins() == [layers.VENV_BIN]


def test_an_environment_with_an_interpreter_is_built_on_it_not_moved(tmp_path, monkeypatch,
                                                                      capsys):
    py37 = Python(Path("/p/python3.7"), "3.7.16")
    built = []
    monkeypatch.setattr(activation, "find", lambda minor: py37)
    monkeypatch.setattr(activation, "build_own_environment",
                        lambda lines, version, python, *, label, adds: built.append(
                            (version, python)) or tmp_path)
    monkeypatch.setattr(activation, "build_closure_layer", lambda *a: pytest.fail("moved"))
    (tmp_path / "conda.yml").write_text(
        "dependencies:\n- python=3.7.5\n- pip:\n  - pandas==1.2.1\n")
    envs = activation.Environments()
    stack = envs.layers(activation.EnvironmentRef(value={"conda_file": "conda.yml"}, base=tmp_path),
                        "job")
    assert stack == activation.Stack([tmp_path], py37, own=True)
    assert built == [("3.7.5", py37)] and envs.caveat("job") == ""
    err = capsys.readouterr().err
    assert "runs on Python 3.7.16 (/p/python3.7)" in err
    assert "Python 3.7 has no audit hooks" in err


HELPERS = [path for path, _ in activation.HELPERS] + [ROOT / "mlops/runtime/debug_hook.py"]


@pytest.mark.parametrize("helper", HELPERS, ids=[p.name for p in HELPERS])
def test_the_runtimes_helpers_in_a_process_parse_as_python_3_7_and_import_the_stdlib_only(
        helper):
    import sys

    tree = ast.parse(helper.read_text(), feature_version=(3, 7))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    # imported inside the functions that need them, which run where the environment has them
    outside = imported - set(sys.stdlib_module_names) - {"_mlops_debug", "_mlops_entry_script",
                                                         "debugpy", "pandas",
                                                         "mltable", "yaml",
                                                         "azureml_inference_server_http"}
    assert not outside, f"{helper.name} imports {outside}"
    future = [node for node in tree.body if isinstance(node, ast.ImportFrom)
              and node.module == "__future__"]
    assert future, f"{helper.name}: annotations like tuple[str, ...] need "\
        "`from __future__ import annotations` before Python 3.9"
