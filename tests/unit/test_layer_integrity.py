"""A cached environment records what it holds and is checked before its first use in each run: a
damaged one is named and built again (mlops/environments/integrity.py)."""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
from pathlib import Path

import pytest

from mlops.environments import integrity as layers
from mlops.environments.integrity import MANIFEST, cached_layer, damage
from mlops.errors import MachineError


def builder(calls: list[Path]):
    def build(folder: Path) -> None:
        calls.append(folder)
        site = folder / "lib" / "site-packages" / "pkg"
        site.mkdir(parents=True)
        (site / "__init__.py").write_text("x = 1\n")
        (site / "data.bin").write_bytes(b"abc")
        (folder / "layer.json").write_text(json.dumps({"label": "test"}))

    return build


def test_a_layer_that_lost_a_file_is_named_and_built_again(tmp_path, capsys):
    calls: list[Path] = []
    layer = cached_layer(tmp_path / "layer", builder(calls))
    assert (layer / MANIFEST).is_file() and len(calls) == 1
    (layer / "lib/site-packages/pkg/__pycache__").mkdir()  # what its users write: not damage
    (layer / "lib/site-packages/pkg/__pycache__/x.pyc").write_bytes(b"0")
    (layer / "used_by.txt").write_text("job.yml\n")
    assert cached_layer(layer, builder(calls)) == layer and len(calls) == 1
    (layer / "lib/site-packages/pkg/__init__.py").unlink()
    (layer / "lib/site-packages/pkg/data.bin").write_bytes(b"abcd")
    assert damage(layer) == ["lib/site-packages/pkg/__init__.py missing",
                             "lib/site-packages/pkg/data.bin changed"]
    assert cached_layer(layer, builder(calls)) == layer and len(calls) == 1  # checked once
    layers.CHECKED.clear()  # the next run (a new process) checks it before its first use
    cached_layer(layer, builder(calls))
    err = capsys.readouterr().err
    assert f"warning: the cached environment {layer} is damaged (lib/site-packages/pkg/" \
           "__init__.py missing, lib/site-packages/pkg/data.bin changed); building it again" in err
    assert len(calls) == 2 and (layer / "lib/site-packages/pkg/__init__.py").is_file()
    assert damage(layer) == []


def test_a_layer_built_before_manifests_gets_one_and_is_trusted(tmp_path):
    layer = tmp_path / "old"
    (layer / "lib").mkdir(parents=True)
    (layer / "lib" / "m.py").write_text("")
    (layer / "layer.json").write_text("{}")
    assert damage(layer) == [] and (layer / MANIFEST).is_file()
    recorded = json.loads((layer / MANIFEST).read_text())
    assert recorded["format"] == 2 and recorded["files"]["lib/m.py"][0] == 0


def test_a_change_of_the_same_size_and_a_file_added_are_damage(tmp_path):
    layer = cached_layer(tmp_path / "layer", builder([]))
    data = layer / "lib/site-packages/pkg/data.bin"
    built = data.stat().st_mtime_ns - 10**9
    os.utime(data, ns=(built, built))  # built a second ago (a file system's clock is coarse)
    layers.write_manifest(layer)
    data.write_bytes(b"xyz")  # the same size: its modification time moved
    (layer / "lib/site-packages/pkg/shadow.py").write_text("import os\n")
    assert damage(layer) == ["lib/site-packages/pkg/data.bin changed",
                             "lib/site-packages/pkg/shadow.py added"]


def wheel_builder(calls: list[str], damaged_builds: int):
    """A layer holding one installed package whose RECORD gives its file's sha256; the first
    `damaged_builds` builds install a damaged copy (as a damaged package cache would)."""

    def build(folder: Path) -> None:
        calls.append(os.environ.get("UV_NO_CACHE", ""))
        site = folder / "lib" / "python3.11" / "site-packages"
        (site / "pkg-1.0.dist-info").mkdir(parents=True)
        good = b"x = 1\n"
        digest = base64.urlsafe_b64encode(hashlib.sha256(good).digest()).rstrip(b"=").decode()
        damaged = f"x = {665 + len(calls)}\n".encode()  # a damaged copy differs each time
        (site / "pkg.py").write_bytes(damaged if len(calls) <= damaged_builds else good)
        (site / "pkg-1.0.dist-info" / "RECORD").write_text(
            f"pkg.py,sha256={digest},6\npkg-1.0.dist-info/RECORD,,\n")
        (folder / "layer.json").write_text("{}")

    return build


def test_a_build_from_a_damaged_package_cache_is_built_again_from_fresh_downloads(tmp_path,
                                                                                 capsys):
    calls: list[str] = []
    layer = cached_layer(tmp_path / "layer", wheel_builder(calls, damaged_builds=1))
    assert calls == ["", "1"] and "UV_NO_CACHE" not in os.environ  # the second: no cache
    assert (layer / "lib/python3.11/site-packages/pkg.py").read_bytes() == b"x = 1\n"
    assert "differ from their packages' digests (lib/python3.11/site-packages/pkg.py): uv's " \
           "package cache may be damaged; building it again from freshly downloaded packages" in \
           capsys.readouterr().err


def test_a_build_that_stays_damaged_is_the_machines_error(tmp_path):
    with pytest.raises(MachineError, match="built twice, the second time from freshly "
                                           "downloaded packages"):
        cached_layer(tmp_path / "layer", wheel_builder([], damaged_builds=2))
    assert not (tmp_path / "layer").exists()


def test_a_wheel_whose_own_record_misstates_a_digest_is_installed_as_pip_installs_it(
        tmp_path, capsys):
    """The same bytes from the package cache and from fresh downloads, unlike the RECORD's
    digest: the wheel was published so (torch 1.10.2 cp37's METADATA); pip checks no RECORD
    digest, so Azure's image holds it: built, with a note, and trusted afterwards."""
    calls: list[str] = []

    def build(folder: Path) -> None:
        calls.append(os.environ.get("UV_NO_CACHE", ""))
        info = folder / "lib" / "python3.7" / "site-packages" / "torch-1.10.2.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_bytes(b"Name: torch\n")
        (info / "RECORD").write_text("torch-1.10.2.dist-info/METADATA,sha256=4GP4_qtp,24834\n")
        (folder / "layer.json").write_text("{}")

    layer = cached_layer(tmp_path / "layer", build)
    assert calls == ["", "1"] and (layer / MANIFEST).is_file()
    assert "the wheels were published so, and pip installs them as they are" in \
        capsys.readouterr().err
    layers.CHECKED.clear()
    assert cached_layer(tmp_path / "layer", build) == layer and calls == ["", "1"]


def test_a_cache_that_cannot_be_written_serves_what_it_holds_and_names_what_it_lacks(
        tmp_path, monkeypatch):
    layer = cached_layer(tmp_path / "cache" / "layer", builder([]))
    layers.CHECKED.clear()

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(layers, "write_manifest", refuse)
    (layer / MANIFEST).unlink()  # a layer from before manifests: checked as it is
    assert cached_layer(layer, builder([])) == layer
    monkeypatch.setattr(layers.fcntl, "flock", refuse)
    with pytest.raises(MachineError, match=r"cache .*cache cannot be written \(Read-only file "
                                           r"system\) and other needs building there"):
        cached_layer(tmp_path / "cache" / "other", builder([]))


def test_a_read_only_cache_skips_its_bookkeeping_with_one_note(tmp_path, monkeypatch, capsys):
    from mlops.environments.activation import Environments
    from mlops.environments.layers import Stack

    layer = tmp_path / "cache" / "layer"
    layer.mkdir(parents=True)
    real_open = open

    def read_only(path, mode="r", *args, **kwargs):
        if "a" in mode or "w" in mode:
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", read_only)
    envs = Environments()
    envs._note_use(Stack([layer]), "job.yml")
    envs._note_use(Stack([layer]), "other.yml")
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert err.count("cannot be written (Read-only file system): its environments are used as "
                     "they are") == 1


def test_make_envs_names_a_damaged_record_instead_of_failing(tmp_path, monkeypatch):
    from mlops.environments import cache

    monkeypatch.setenv("LOCAL_ENVS_DIR", str(tmp_path))
    (tmp_path / "abc").mkdir()
    (tmp_path / "abc" / "layer.json").write_text('{"label": 3, "requirements": 5}')
    assert "abc  damaged record" in cache.describe()[0]


def test_a_file_two_wheels_ship_and_installer_bytecode_are_not_damage(tmp_path):
    """azureml-* wheels each ship azureml/__init__.py (the last installed stays, as with pip);
    uv's --compile-bytecode rewrites the .pyc a wheel lists (numpy's distutils)."""
    site = tmp_path / "lib/python3.10/site-packages"
    (site / "azureml").mkdir(parents=True)
    (site / "pkg/__pycache__").mkdir(parents=True)
    (site / "azureml/__init__.py").write_bytes(b"second\n")
    (site / "pkg/__pycache__/m.cpython-310.pyc").write_bytes(b"recompiled")

    def sha(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    for name, data in (("a", b"first\n"), ("b", b"second\n")):
        info = site / f"azureml_{name}-1.dist-info"
        info.mkdir()
        (info / "RECORD").write_text(f"azureml/__init__.py,sha256={sha(data)},1\n"
                                     f"pkg/__pycache__/m.cpython-310.pyc,sha256={sha(b'x')},1\n")
    assert layers.unverified(tmp_path) == []
    (site / "azureml/__init__.py").write_bytes(b"neither\n")
    assert layers.unverified(tmp_path) == ["lib/python3.10/site-packages/azureml/__init__.py"]


def test_a_layer_with_its_own_pip_keeps_its_scripts_as_the_wheel_wrote_them(tmp_path):
    """A set that pins pip (an image's pip) installs bin/pip; the venv made around the layer
    writes its shim only where none is, so the digest check finds pip's own script."""
    from mlops.environments.layers import make_venv

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/pip").write_text("#!/python\nfrom pip._internal.cli.main import main\n")
    make_venv(tmp_path, [])
    assert "pip._internal" in (tmp_path / "bin/pip").read_text()
    assert '-m pip "$@"' in (tmp_path / "bin/pip3").read_text()


def test_a_shared_file_two_wheels_wrote_at_once_is_mended_from_one_of_them(tmp_path,
                                                                           monkeypatch):
    """uv installs wheels in parallel: two that ship one namespace __init__.py (opencensus and
    opencensus-ext-azure, 66 and 65 bytes) can leave a mix of both, which is neither wheel's
    (astral-sh/uv#4831). One owner is installed again alone; a file one wheel alone ships and
    that differs is damage, for the digest check."""
    from types import SimpleNamespace

    from mlops.environments import closures, resolve

    site = tmp_path / "lib/python3.8/site-packages"
    (site / "opencensus").mkdir(parents=True)

    def sha(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    for name, data in (("opencensus", b"ns\r\n"), ("opencensus_ext_azure", b"ns\n")):
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "RECORD").write_text(f"opencensus/__init__.py,sha256={sha(data)},1\n")
    (site / "opencensus/__init__.py").write_bytes(b"ns\n\n")  # the 65 bytes over the 66
    assert layers.torn(tmp_path) == [["opencensus==1.0", "opencensus_ext_azure==1.0"]]
    calls = []

    def reinstall(argv):
        calls.append(argv)
        (site / "opencensus/__init__.py").write_bytes(b"ns\n")  # that wheel's, alone
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(resolve, "run_uv", reinstall)
    closures.mend_torn(tmp_path, "env")
    assert calls[0][-2:] == ["--reinstall", "opencensus_ext_azure==1.0"]
    assert layers.unverified(tmp_path) == [] and layers.torn(tmp_path) == []
    (site / "opencensus/__init__.py").write_bytes(b"damaged\n")
    (site / "opencensus_ext_azure-1.0.dist-info/RECORD").write_text("")  # one owner left
    assert layers.torn(tmp_path) == [] and layers.unverified(tmp_path)


def test_files_a_run_wrote_into_a_layer_are_removed_not_rebuilt(tmp_path, capsys):
    """deepchecks writes .user_id into its own folder at import: the next run found the layer
    'damaged' and built it again (minutes). What a run added goes; a changed file is still
    damage, built again."""
    calls: list[Path] = []
    layer = cached_layer(tmp_path / "layer", builder(calls))
    (layer / "lib/site-packages/pkg/.user_id").write_text("abc")
    layers.CHECKED.clear()  # a new process
    assert cached_layer(layer, builder(calls)) == layer and len(calls) == 1
    assert not (layer / "lib/site-packages/pkg/.user_id").exists() and damage(layer) == []
    assert "removed 1 file(s) a run wrote" in capsys.readouterr().err
    (layer / "lib/site-packages/pkg/.user_id").write_text("abc")
    (layer / "lib/site-packages/pkg/data.bin").write_bytes(b"changed!")
    layers.CHECKED.clear()
    cached_layer(layer, builder(calls))
    assert len(calls) == 2 and (layer / "lib/site-packages/pkg/data.bin").read_bytes() == b"abc"


def test_a_build_killed_during_its_digest_check_is_checked_before_it_is_trusted(tmp_path,
                                                                               capsys):
    """A build writes its layer.json last and its manifest after the digest check: a layer
    killed between the two is checked against its wheels' digests before any run uses it, and
    built again when a file differs (it was trusted as a layer from before manifests)."""
    calls: list[str] = []
    layer = tmp_path / "layer"
    wheel_builder(calls, damaged_builds=1)(layer)  # the build, killed before its check
    assert not (layer / MANIFEST).exists()
    assert cached_layer(layer, wheel_builder(calls, damaged_builds=0)) == layer
    assert (layer / "lib/python3.11/site-packages/pkg.py").read_bytes() == b"x = 1\n"
    assert len(calls) == 2 and (layer / MANIFEST).is_file()
    assert "pkg.py differs from its package's digest); building it again" in \
           capsys.readouterr().err
    layers.CHECKED.clear()
    assert cached_layer(layer, wheel_builder(calls, damaged_builds=0)) == layer
    assert len(calls) == 2  # whole and sealed: not built again


def test_a_manifest_is_replaced_whole_never_seen_half_written(tmp_path, monkeypatch):
    layer = cached_layer(tmp_path / "layer", builder([]))
    before = (layer / MANIFEST).read_text()

    def full(path: Path, text: str, *args, **kwargs):  # the disk fills half-way through
        with open(path, "w") as handle:
            handle.write(text[:len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        layers.write_manifest(layer)
    monkeypatch.undo()
    assert (layer / MANIFEST).read_text() == before
    assert [p.name for p in layer.iterdir() if p.name.endswith(".tmp")] == []
