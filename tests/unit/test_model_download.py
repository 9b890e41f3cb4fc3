"""`azml model download`: a version's files under <path>/<name>/, laid out as azure-ai-ml's
ModelOperations.download lays them (a folder keeps its name, a file sits directly there)."""

from __future__ import annotations

import os
import stat

import pytest

from mlops.cli import run


@pytest.fixture
def registered(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLOPS_WORKSPACE_DIR", str(tmp_path / "ws"))
    folder = tmp_path / "my model"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.pkl").write_bytes(b"weights")
    (folder / "sub" / "conf.json").write_text("{}")
    assert run(["model", "create", "-n", "clf", "-v", "1", "-p", str(folder)]) == 0
    assert run(["model", "create", "-n", "one", "-v", "3", "-p",
                str(folder / "model.pkl")]) == 0
    capsys.readouterr()
    return tmp_path


def test_a_folder_keeps_its_name_and_a_file_sits_under_the_models_name(registered, capsys):
    out = registered / "dl"
    assert run(["model", "download", "-n", "clf", "-v", "1", "-p", str(out)]) == 0
    assert capsys.readouterr().out == ""  # az prints nothing
    assert (out / "clf" / "my model" / "sub" / "conf.json").read_text() == "{}"
    assert run(["model", "download", "-n", "one", "--version", "3",
                "--download-path", str(out)]) == 0
    copy = out / "one" / "model.pkl"
    assert copy.read_bytes() == b"weights" and os.stat(copy).st_mode & stat.S_IWUSR
    copy.chmod(0o444)  # downloaded again over a read-only copy: overwritten, as az writes
    assert run(["model", "download", "-n", "one", "-v", "3", "-p", str(out)]) == 0


def test_an_unknown_version_is_not_found_and_damaged_files_are_refused(registered, capsys):
    assert run(["model", "download", "-n", "clf", "-v", "9", "-p", str(registered)]) == 3
    assert "has no version 9" in capsys.readouterr().err
    stored = next((registered / "ws" / "models" / "clf").rglob("model.pkl"))
    stored.chmod(0o644)
    stored.write_bytes(b"changed")
    assert run(["model", "download", "-n", "clf", "-v", "1", "-p", str(registered)]) == 1
    assert "damaged" in capsys.readouterr().err
