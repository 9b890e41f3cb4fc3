
import pytest
from support import lazy

# torchvision (the datasets) loads with the first test (support.lazy)
data = lazy("image_classifier.data")


def test_folder_without_splits_names_what_it_found(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    with pytest.raises(data.DataError, match="expected train/ and val/.*images, labels"):
        data.resolve_data_root(tmp_path)


def test_missing_path_and_non_zip_file(tmp_path):
    with pytest.raises(data.DataError, match="no such file"):
        data.resolve_data_root(tmp_path / "nope")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(data.DataError, match="must be a .zip"):
        data.resolve_data_root(tmp_path / "notes.txt")


def test_large_jpeg_is_decoded_at_reduced_scale(tmp_path):
    from PIL import Image


    path = tmp_path / "big.jpg"
    Image.new("RGB", (2400, 1800), (120, 80, 40)).save(path)
    image = data.ImageLoader(min_side=256)(str(path))
    assert image.mode == "RGB" and min(image.size) >= 256 and image.size[0] <= 600


def test_real_imagefolder_with_odd_names_and_a_gif(caplog):
    """Optional: the real hymenoptera data (398 files; a GIF ImageFolder skips, with a warning)."""
    from support import HYMENOPTERA

    if not HYMENOPTERA.is_dir():
        pytest.skip("../shared/data/hymenoptera_data is not here")
    bundle = data.build_datasets(HYMENOPTERA, 64)
    assert bundle.classes == ["ants", "bees"]
    assert (len(bundle.train), len(bundle.val), bundle.skipped) == (244, 153, 0)
    assert "ignored 1 file(s)" in caplog.text and "imageNotFound.gif" in caplog.text
    paths = [path for path, _ in bundle.train.samples]
    assert str(HYMENOPTERA / "train" / "ants" / "ant photos.jpg") in paths
    assert bundle.train[0][0].shape == (3, 64, 64)


def test_the_data_download_copies_every_byte_behind_a_progress_bar(tmp_path, capsys):
    from download_data import download  # scripts/ is on the path (conftest)

    source = tmp_path / "source.zip"
    source.write_bytes(bytes(range(256)) * 1000)
    out = tmp_path / "data" / "copy.zip"
    download(source.as_uri(), out, timeout=5)
    assert out.read_bytes() == source.read_bytes()
    assert "copy.zip" in capsys.readouterr().err  # tqdm's bar, on stderr
    assert not list(out.parent.glob("*.part"))
