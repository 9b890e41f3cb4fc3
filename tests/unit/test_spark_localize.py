"""A Spark job's `files` and `archives` in the working directory (mlops/runtime/localize.py):
Azure's Spark copies files into, and extracts archives into, the working directory of each
executor, by their names or their `#alias`; here the executors share the driver's `wd/`."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from mlops.runtime.localize import Localized, localized, place


def _code(tmp_path: Path) -> Path:
    wd = tmp_path / "wd"
    (wd / "data").mkdir(parents=True)
    (wd / "data" / "lookup.csv").write_text("a,b\n")
    (wd / "libs").mkdir()
    with tarfile.open(wd / "libs" / "env.tar.gz", "w:gz") as tar:
        (tmp_path / "bin.txt").write_text("python")
        tar.add(tmp_path / "bin.txt", arcname="bin/python")
    with zipfile.ZipFile(wd / "models.zip", "w") as zipped:
        zipped.writestr("model/weights.txt", "1 2 3")
    return wd


def test_entries_take_their_alias_or_their_own_name_and_uris_stay_azures():
    assert localized(["data/lookup.csv", "abfss://c@a.dfs.core.windows.net/x.txt"],
                     ["libs/env.tar.gz#env", "models.zip"]) == (
        Localized("data/lookup.csv", "lookup.csv", unpack=False),
        Localized("libs/env.tar.gz", "env", unpack=True),
        Localized("models.zip", "models.zip", unpack=True))


def test_files_are_copied_and_archives_extracted_into_the_working_directory(tmp_path):
    wd = _code(tmp_path)
    entries = localized(["data/lookup.csv"], ["libs/env.tar.gz#env", "models.zip#m",
                                              "libs/env.tar.gz"])
    assert place(entries, wd, "job.yml: spark") == []
    assert (wd / "lookup.csv").read_text() == "a,b\n"
    assert (wd / "env" / "bin" / "python").read_text() == "python"
    assert (wd / "m" / "model" / "weights.txt").read_text() == "1 2 3"
    assert (wd / "env.tar.gz" / "bin" / "python").is_file()  # no alias: the archive's name
    assert (wd / "libs" / "env.tar.gz").is_file()  # spark-submit still reads it there


def test_a_name_the_code_already_has_is_kept_with_a_warning(tmp_path):
    wd = _code(tmp_path)
    (wd / "env").mkdir()
    warnings = place(localized([], ["libs/env.tar.gz#env", "models.zip"]), wd, "job.yml")
    assert not (wd / "env" / "bin").exists()
    assert any("libs/env.tar.gz is not placed as env" in w for w in warnings)
    assert (wd / "models.zip").is_file()  # spark-submit reads it by that very name
    assert any("models.zip#name" in w for w in warnings)


def test_a_missing_entry_is_left_to_spark_submit_and_an_unknown_kind_is_copied(tmp_path):
    wd = _code(tmp_path)
    (wd / "notes.whl").write_text("wheel")
    assert place(localized(["gone.txt"], ["notes.whl#w"]), wd, "job.yml") == []
    assert not (wd / "gone.txt").exists()
    assert (wd / "w").read_text() == "wheel"  # Spark copies what it cannot unpack


def test_an_archive_member_naming_a_path_outside_is_kept_inside(tmp_path):
    """A tar member `../escape.txt` or an absolute one never lands outside the folder."""
    import io
    import tarfile

    from mlops.runtime.localize import localized, place

    wd = tmp_path / "wd"
    wd.mkdir()
    with tarfile.open(wd / "deps.tar.gz", "w:gz") as tar:
        for name in ("../escape.txt", "ok.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
    from mlops.errors import LocalRunError

    with pytest.raises(LocalRunError, match="deps.tar.gz cannot be unpacked into deps/"):
        place(localized([], ["deps.tar.gz#deps"]), wd, "spark")
    assert not (tmp_path / "escape.txt").exists() and not (wd / "escape.txt").exists()
