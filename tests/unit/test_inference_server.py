"""A deployment's server is started as its azureml-inference-server-http release starts on
Azure's image (mlops/runtime/inference_server.py): the release's own azmlinfsrv, on 127.0.0.1,
for every release line. tests/e2e/test_own_python.py starts 0.4 on Python 3.7, 0.7 and 1.3 on
3.8; here the launcher's decisions, with a stand-in release in place of the server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mlops.endpoints import online
from mlops.runtime import inference_server

RELEASE_RUN = """
import os, sys
from .constants import DEFAULT_HOST
seen = {}
def run():
    seen.update(argv=list(sys.argv), host=DEFAULT_HOST, cwd=os.getcwd(),
                root=os.environ.get("AML_APP_ROOT"),
                gunicorn=os.environ.get("GUNICORN_CMD_ARGS"))
"""


def fake_release(tmp_path: Path, version: str, monkeypatch) -> object:
    """A package laid out as a release of that line: 0.1-0.6 keep VERSION in a file, 0.7 and
    later have __version__; amlserver imports DEFAULT_HOST from its constants, as they all do."""
    package = tmp_path / "site" / inference_server.PACKAGE
    package.mkdir(parents=True)
    if version < "0.7":
        (package / "__init__.py").write_text("")
        (package / "VERSION").write_text(version + "\n")
    else:
        (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (package / "constants.py").write_text('DEFAULT_HOST = "0.0.0.0"\n')
    (package / "amlserver.py").write_text(RELEASE_RUN)
    for name in [n for n in sys.modules if n.startswith(inference_server.PACKAGE)]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return package


@pytest.fixture
def app(tmp_path, monkeypatch):
    """AML_APP_ROOT with the code under its folder's name, as the runtime lays it out."""
    root = tmp_path / "app"
    (root / "onlinescoring").mkdir(parents=True)
    (root / "onlinescoring" / "score.py").write_text("def init(): pass\n")
    monkeypatch.setenv("AML_APP_ROOT", str(root))
    monkeypatch.setenv("AZUREML_ENTRY_SCRIPT", str(root / "onlinescoring" / "score.py"))
    monkeypatch.setenv("GUNICORN_CMD_ARGS", "--keep-alive 7")
    monkeypatch.chdir(tmp_path)
    return root


@pytest.mark.parametrize("version", ["0.4.14", "0.7.7", "1.4.1"])
def test_every_release_line_starts_through_its_own_azmlinfsrv_on_loopback(
        tmp_path, monkeypatch, app, version):
    fake_release(tmp_path, version, monkeypatch)
    inference_server.main(["--port", "31311", "--threads", "3"])
    from azureml_inference_server_http import amlserver

    seen = amlserver.seen
    script = str(app / "onlinescoring" / "score.py")
    assert seen["argv"] == ["azmlinfsrv", "--entry_script", script, "--port", "31311"]
    assert seen["host"] == "127.0.0.1" and seen["cwd"] == str(app)  # as runit: cd AML_APP_ROOT
    assert seen["gunicorn"] == "--worker-class gthread --threads 3 --keep-alive 7"
    # 0.1-0.6 load the entry script by its basename under AML_APP_ROOT: the script's folder
    assert seen["root"] == (str(app / "onlinescoring") if version < "0.7" else str(app))
    os.environ.pop("AZUREML_SERVER_VERSION", None)


def test_release_numbers_come_from_the_version_attribute_or_file(tmp_path, monkeypatch):
    fake_release(tmp_path, "0.4.14", monkeypatch)
    import azureml_inference_server_http as old

    assert inference_server.release(old) == (0, 4, 14) < inference_server.BASENAME_RELEASES
    assert inference_server.release(type("P", (), {"__version__": "1.3.4"})) == (1, 3, 4)


def test_a_debugged_server_gets_the_hook_one_worker_and_no_worker_timeout():
    assert inference_server.gunicorn_args(4, True, "").endswith("--config python:_mlops_debug")
    assert online.server_command(5001, 2, debug=True) == \
        "python -m _mlops_inference_server --port 5001 --threads 2 --debug"
    assert online.server_settings({"WORKER_COUNT": "3"}, True) == {"WORKER_COUNT": "1",
                                                                   "WORKER_TIMEOUT": "0"}
    assert online.server_settings({"WORKER_COUNT": "3", "WORKER_TIMEOUT": "60"}, False) == \
        {"WORKER_COUNT": "3", "WORKER_TIMEOUT": "60"}


def test_an_environment_without_the_server_stops_as_azures_container_does(monkeypatch, capsys):
    """Azure's runit/gunicorn/run: its line, then exit 100."""
    monkeypatch.setitem(sys.modules, inference_server.PACKAGE, None)
    with pytest.raises(SystemExit) as stopped:
        inference_server.main(["--port", "1"])
    assert stopped.value.code == 100
    assert "A required package azureml-inference-server-http is missing. Please install " \
        "azureml-inference-server-http before trying again" in capsys.readouterr().err
