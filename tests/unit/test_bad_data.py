"""Bad data never kills a run: it is a clear error naming the file, or skipped and counted."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from support import huge_jpeg_header

from image_classifier.images import ImageError, open_image


def png(array) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(array)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_sixteen_bit_and_other_modes_decode_as_a_viewer_shows_them():
    ramp = np.linspace(0, 65535, 64 * 64).reshape(64, 64).astype(np.uint16)
    assert Image.open(io.BytesIO(png(ramp))).mode.startswith("I")  # a 16-bit PNG
    grey = np.asarray(open_image(png(ramp)))
    assert grey.min() < 5 and grey.max() > 250 and 100 < grey.mean() < 155  # not all white
    rgba = np.zeros((8, 8, 4), np.uint8)  # fully transparent black: white on a viewer
    assert np.asarray(open_image(png(rgba))).min() == 255
    for image in (Image.new("P", (8, 8)), Image.new("1", (8, 8)), Image.new("CMYK", (8, 8)),
                  Image.new("LA", (8, 8))):
        buffer = io.BytesIO()
        image.save(buffer, format="TIFF" if image.mode == "CMYK" else "PNG")
        assert open_image(buffer.getvalue()).mode == "RGB"


def test_an_upright_phone_photo_is_turned_by_its_exif_orientation():
    buffer = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees
    Image.new("RGB", (60, 20)).save(buffer, format="JPEG", exif=exif)
    assert open_image(buffer.getvalue()).size == (20, 60)


@pytest.mark.parametrize(("payload", "status"), [
    (b"GIF89a" + b"\x00" * 32, 400), (huge_jpeg_header(30000, 30000), 413),
    (png(np.zeros((1, 2000), np.uint8)), 400)])
def test_every_decoder_failure_is_an_image_error_with_a_status(payload, status):
    with pytest.raises(ImageError) as err:
        open_image(payload)
    assert err.value.status == status
