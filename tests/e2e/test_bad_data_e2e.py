"""Bad data never kills a run: it is a clear error naming the file, or skipped and counted."""

from __future__ import annotations

import errno
import os
import shutil
import zipfile
from dataclasses import replace

import pytest
import torch
from support import SMALL_ARCH, huge_jpeg_header, jpeg_bytes, train_args
from torch.utils.data import DataLoader

from image_classifier import loading
from image_classifier.config import TrainConfig
from image_classifier.data import DataError, build_datasets, extract_zip
from image_classifier.distributed import DistContext
from image_classifier.engine import BadSampleError, train_one_epoch
from image_classifier.loading import collate
from image_classifier.train import main, setup

CPU = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


@pytest.fixture
def data(tiny_data, tmp_path):
    return shutil.copytree(tiny_data, tmp_path / "d")


@pytest.mark.proof
def test_a_truncated_jpeg_fails_the_check_by_name_or_is_skipped(data):
    good = sorted((data / "train" / "chickens").glob("*.jpg"))[0]
    full = jpeg_bytes((640, 480))
    half = data / "train" / "chickens" / "half.jpg"
    half.write_bytes(full[: len(full) // 2])  # Image.verify() accepts this file
    with pytest.raises(DataError, match=f"{half}: is not a readable image.*--skip_bad_images"):
        build_datasets(data, 32)
    bundle = build_datasets(data, 32, skip_bad_images=True)
    assert bundle.skipped == 1 and str(good) in [p for p, _ in bundle.train.samples]


@pytest.mark.proof
def test_a_200_megapixel_jpeg_is_refused_by_name_before_decoding(data):
    big = data / "val" / "turkeys" / "huge.jpg"
    big.write_bytes(huge_jpeg_header(20000, 10000))
    with pytest.raises(DataError, match=f"{big}: is 20000 x 10000 pixels"):
        build_datasets(data, 32)
    assert build_datasets(data, 32, skip_bad_images=True).skipped == 1


@pytest.mark.proof
def test_a_decode_error_during_training_names_the_file_or_is_counted(data, tmp_path):
    cfg = TrainConfig(data=str(data), output_dir=str(tmp_path / "out"), arch=SMALL_ARCH,
                      weights="none", image_size=32, batch_size=8, cache_images_mb=0)
    run = setup(cfg, CPU)  # the trainer's own setup: data checked, model, loaders
    victim = run.bundle.train.samples[0][0]
    open(victim, "wb").close()  # the file breaks after the check, under a running job
    with pytest.raises(BadSampleError, match=f"{victim}: is not a readable image"):
        train_one_epoch(run, cfg, CPU)
    skipping = replace(cfg, skip_bad_images=True)
    result = train_one_epoch(run, skipping, CPU)
    assert result.skipped == 1 and result.count == len(run.bundle.train) - 1


@pytest.mark.proof
def test_a_symlink_loop_neither_multiplies_nor_mislabels_images(data):
    (data / "train" / "chickens" / "loop").symlink_to(data / "train" / "chickens")
    (data / "train" / "chickens" / "other").symlink_to(data / "train" / "turkeys")
    bundle = build_datasets(data, 32)
    assert len(bundle.train) == 48
    labels = {os.path.basename(os.path.dirname(p)): t for p, t in bundle.train.samples}
    assert labels == {"chickens": 0, "turkeys": 1}


@pytest.mark.proof
def test_a_full_disk_during_extraction_leaves_no_temp_folder(tiny_data, tmp_path, monkeypatch):
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in sorted(tiny_data.rglob("*.jpg")):
            handle.write(path, str(path.relative_to(tiny_data)))
    cache = tmp_path / "cache"
    (cache / "old.tmp-999999999").mkdir(parents=True)  # left by a process that died

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "extractall", full)
    with pytest.raises(DataError, match="No space left on device.*XDG_CACHE_HOME"):
        extract_zip(archive, cache)
    assert list(cache.iterdir()) == []
    monkeypatch.undo()
    assert (extract_zip(archive, cache) / "train").is_dir()


def test_a_last_batch_of_one_image_at_a_small_size_trains(data, tmp_path, mlflow_store):
    extra = data / "train" / "turkeys" / "one-more.jpg"
    shutil.copy(next((data / "train" / "turkeys").glob("*.jpg")), extra)  # 49 = 6 x 8 + 1
    # the default arch: at 32 px its last batch norm sees one value per channel
    assert main(train_args(data, tmp_path / "out", epochs=1, image_size=32, arch="resnet18")) == 0


@pytest.mark.proof
def test_the_check_fills_the_cache_so_epoch_one_decodes_nothing(data, monkeypatch):
    calls = []
    real = loading.open_image
    monkeypatch.setattr(loading, "open_image", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    bundle = build_datasets(data, 32, cache_images_mb=64)
    checked = len(calls)
    assert checked == 64  # every image decoded once, by the check
    for _ in DataLoader(bundle.train, batch_size=8, collate_fn=collate):
        pass
    assert len(calls) == checked


def test_with_loader_workers_the_cache_is_off_and_says_so(tiny_data, tmp_path, mlflow_store,
                                                          capsys):
    args = train_args(tiny_data, tmp_path / "out", epochs=1, num_workers=1,
                      cache_images_mb=64)
    assert main(args) == 0
    assert "decoded-image cache off: 1 loader workers would each hold a copy" in \
        capsys.readouterr().out
