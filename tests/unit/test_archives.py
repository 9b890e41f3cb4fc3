"""Archives given as inputs are bounded before they are written, and lose no member
(mlops/runtime/archives.py; make batch-local INPUT=x.zip)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from mlops.endpoints.batch_deployment import input_files
from mlops.errors import LocalRunError
from mlops.runtime.archives import ArchiveLimits, check, extract


def zipped(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_a_zip_bomb_is_refused_by_name_before_a_byte_is_written(tmp_path):
    """100 MB of zeros in about 100 kB: refused from the directory alone, in a moment."""
    bomb = zipped(tmp_path / "bomb.zip", {"images/a.jpg": b"\0" * (100 << 20)})
    assert bomb.stat().st_size < 200_000
    with pytest.raises(LocalRunError, match=r"bomb.zip: member 'images/a.jpg' inflates [\d,]+ "
                                            r"stored bytes to 104,857,600, a zip bomb's ratio; "
                                            r"the limit is 200 \(ARCHIVE_MAX_RATIO=<n> raises"):
        extract(bomb, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_limits_name_their_variable_and_can_be_raised(tmp_path, monkeypatch):
    many = zipped(tmp_path / "many.zip", {f"f{n}.txt": b"x" for n in range(30)})
    monkeypatch.setenv("ARCHIVE_MAX_MEMBERS", "20")
    with pytest.raises(LocalRunError, match=r"30 members; the limit is 20 "
                                            r"\(ARCHIVE_MAX_MEMBERS=<n> raises it\)"):
        extract(many, tmp_path / "out")
    monkeypatch.setenv("ARCHIVE_MAX_MEMBERS", "40")
    assert extract(many, tmp_path / "out").files == 30
    big = zipped(tmp_path / "big.zip", {"a.bin": bytes(range(256)) * 4096})
    with pytest.raises(LocalRunError, match="ARCHIVE_MAX_BYTES"):
        extract(big, tmp_path / "big", ArchiveLimits(max_bytes=1000))


def test_a_member_that_inflates_past_what_its_directory_states_is_stopped(tmp_path):
    """A forged directory entry (a small stated size) cannot write more than it states: the
    stream stops there (zipfile's own reader stops at the stated size and fails the CRC)."""
    source = zipped(tmp_path / "forged.zip", {"a.txt": b"y" * 5000})
    data = bytearray(source.read_bytes())
    for header, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size
        at = data.index(header) + offset
        data[at:at + 4] = (100).to_bytes(4, "little")
    source.write_bytes(bytes(data))
    with pytest.raises(LocalRunError, match=r"forged.zip: (member 'a.txt' inflates past the 100 "
                                            r"bytes|not a readable zip \(Bad CRC-32)"):
        extract(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_members_of_one_name_are_each_kept_and_named_in_a_warning(tmp_path):
    source = tmp_path / "twice.zip"
    with zipfile.ZipFile(source, "w") as archive, pytest.warns(UserWarning, match="Duplicate"):
        archive.writestr("imgs/a.jpg", b"first")
        archive.writestr("imgs/a.jpg", b"second")
        archive.writestr("../imgs/a.jpg", b"third")  # the same place once sanitized
    got = extract(source, tmp_path / "out")
    kept = sorted(p.name for p in (tmp_path / "out" / "imgs").iterdir())
    assert kept == ["a.jpg", "a~2.jpg", "a~3.jpg"] and got.files == 3
    assert {(tmp_path / "out/imgs" / n).read_bytes() for n in kept} == {b"first", b"second",
                                                                       b"third"}
    assert "2 archive member(s) share a name" in got.notice() and "kept as imgs/a~2.jpg" in \
        got.notice()


def test_a_batch_input_zip_goes_through_the_limits(tmp_path):
    # 4 MB of zeros in 4 kB: over the 1 MB a member's ratio is checked from, a ratio of 1,000
    bomb = zipped(tmp_path / "input.zip", {"x.jpg": b"\0" * (4 << 20)})
    with pytest.raises(LocalRunError, match="a zip bomb's ratio"):
        input_files(bomb, tmp_path / "run")
    ok = zipped(tmp_path / "ok.zip", {"a/1.jpg": b"1", "a/2.jpg": b"2"})
    assert [Path(f).name for f in input_files(ok, tmp_path / "run2").files] == ["1.jpg", "2.jpg"]


def test_a_batch_input_of_one_other_file_is_a_uri_file_of_one_mini_batch(tmp_path):
    """`az ml batch-endpoint invoke --input taxi-batch.csv --input-type uri_file`: Azure scores
    that one file (azure-ai-ml sends it as UriFile); it is not refused as a folder would be."""
    (tmp_path / "taxi-batch.csv").write_text("a,b\n1,2\n")
    listing = input_files(tmp_path / "taxi-batch.csv", tmp_path / "run")
    assert listing.files == [str(tmp_path / "taxi-batch.csv")] and listing.skipped == []
    with pytest.raises(LocalRunError, match="no such file"):
        input_files(tmp_path / "gone.csv", tmp_path / "run")


def test_the_directory_check_alone_needs_no_extraction():
    info = zipfile.ZipInfo("a")
    info.file_size, info.compress_size = 10 << 20, 1000
    with pytest.raises(LocalRunError, match="a zip bomb's ratio"):
        check(Path("x.zip"), [info], ArchiveLimits())


def test_the_trainers_zip_input_is_refused_as_a_bomb_too(tmp_path):
    from image_classifier.data import DataError, resolve_data_root

    bomb = zipped(tmp_path / "data.zip", {"train/a/x.jpg": b"\0" * (4 << 20)})  # ratio 1,000
    with pytest.raises(DataError, match=r"data.zip: refused as a zip bomb: ratio [\d,]+ is over "
                                        r"the limit 200 \(ARCHIVE_MAX_RATIO=<n> raises it\)"):
        resolve_data_root(bomb, cache_root=tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("data-*"))
