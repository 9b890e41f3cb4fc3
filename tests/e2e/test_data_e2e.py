import shutil
import zipfile

import pytest

from image_classifier.data import DataError, build_datasets, resolve_data_root


def _zip_folder(folder, zip_path, prefix=""):
    with zipfile.ZipFile(zip_path, "w") as archive:
        for path in sorted(folder.rglob("*")):
            archive.write(path, f"{prefix}{path.relative_to(folder)}")
    return zip_path


@pytest.mark.proof
def test_folder_with_splits(tiny_data):
    bundle = build_datasets(tiny_data, image_size=32)
    assert bundle.classes == ["chickens", "turkeys"]
    assert (len(bundle.train), len(bundle.val)) == (48, 16)
    image, label = bundle.train[0]
    assert image.shape == (3, 32, 32) and label == 0


@pytest.mark.proof
def test_parent_with_single_child(tiny_data, tmp_path):
    shutil.copytree(tiny_data, tmp_path / "fowl_data")
    assert resolve_data_root(tmp_path) == tmp_path / "fowl_data"


@pytest.mark.proof
@pytest.mark.parametrize("prefix", ["", "fowl_data/"])
def test_zip_is_extracted_once_into_the_cache(tiny_data, tmp_path, prefix):
    archive = _zip_folder(tiny_data, tmp_path / "fowl.zip", prefix)
    cache = tmp_path / "cache"
    root = resolve_data_root(archive, cache)
    assert root.is_relative_to(cache) and (root / "train" / "turkeys").is_dir()
    marker = root / "extracted-once"
    marker.touch()
    assert resolve_data_root(archive, cache) == root and marker.exists()
    assert len(build_datasets(archive, 32, cache_root=cache).train) == 48


@pytest.mark.proof
def test_class_mismatch_between_splits(tiny_data, tmp_path):
    data = shutil.copytree(tiny_data, tmp_path / "d")
    (data / "val" / "turkeys").rename(data / "val" / "ducks")
    with pytest.raises(DataError, match=r"only in train: \['turkeys'\], only in val: \['ducks'\]"):
        build_datasets(data, 32)


@pytest.mark.proof
def test_empty_split_names_the_folder(tiny_data, tmp_path):
    data = shutil.copytree(tiny_data, tmp_path / "d")
    shutil.rmtree(data / "val")
    (data / "val").mkdir()
    with pytest.raises(DataError, match=f"{data / 'val'}: no images found"):
        build_datasets(data, 32)


@pytest.mark.proof
def test_a_class_with_no_image_in_one_split_is_an_error_naming_it(tiny_data, tmp_path):
    """As torchvision's ImageFolder refuses it: a class only val/ has images of would be a
    class the model can never learn."""
    data = shutil.copytree(tiny_data, tmp_path / "d")
    (data / "train" / "ducks").mkdir()
    shutil.copytree(data / "val" / "turkeys", data / "val" / "ducks")
    with pytest.raises(DataError, match=f"{data / 'train'}: no images found .*class.*ducks"):
        build_datasets(data, 32)


@pytest.mark.proof
def test_a_class_left_empty_by_skipped_images_is_an_error(tiny_data, tmp_path):
    data = shutil.copytree(tiny_data, tmp_path / "d")
    for image in (data / "val" / "turkeys").iterdir():
        image.write_bytes(b"not an image")
    with pytest.raises(DataError, match=f"{data / 'val'}: every image of class.*turkeys"):
        build_datasets(data, 32, skip_bad_images=True)


@pytest.mark.proof
def test_corrupt_image_is_an_error_naming_it_unless_skipped(tiny_data, tmp_path):
    data = shutil.copytree(tiny_data, tmp_path / "d")
    bad = data / "train" / "chickens" / "broken.jpg"
    bad.write_bytes(b"this is not a jpeg")
    with pytest.raises(DataError, match=f"{bad}: is not a readable image.*--skip_bad_images"):
        build_datasets(data, 32)
    bundle = build_datasets(data, 32, skip_bad_images=True)
    assert bundle.skipped == 1 and len(bundle.train) == 48
    assert str(bad) not in [path for path, _ in bundle.train.samples]


@pytest.mark.proof
def test_files_imagefolder_cannot_read_are_reported(tiny_data, tmp_path, caplog):
    data = shutil.copytree(tiny_data, tmp_path / "d")
    (data / "train" / "chickens" / "notes.txt").write_text("not an image")
    assert len(build_datasets(data, 32).train) == 48
    assert "ignored 1 file(s)" in caplog.text and "notes.txt" in caplog.text
