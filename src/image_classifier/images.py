"""One way to turn a file or a request body into an RGB image: training and scoring share it.

- Every format training reads is served (JPEG and phone MPO, PNG, WebP, TIFF, BMP, PPM/PGM);
  anything else is refused by name.
- The header is checked before any pixel is decoded: width, height, aspect ratio and pixel count
  (a 1 x 100000 PNG is 177 bytes and would become 256 x 25,600,000 after the eval resize).
- Large JPEGs are decoded at a reduced scale (libjpeg's draft mode) still at least `min_side`.
- Modes become RGB faithfully: 16-bit and 32-bit grey are scaled (not clipped to white),
  transparency is composited on white, palette, CMYK and the rest are converted; the EXIF
  orientation of phone photos is applied.
- Every error a decoder can raise becomes an ImageError with a status a server can answer
  (400 unreadable, 413 too large, 415 unsupported format).
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

# Pillow's format names for ImageFolder's extensions (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff
# .webp); MPO is how Pillow names a JPEG from a phone camera with an embedded preview.
FORMATS = {"JPEG", "MPO", "PNG", "WEBP", "TIFF", "BMP", "PPM"}
DRAFTABLE = {"JPEG", "MPO"}
ORIENTATION = 0x0112  # the EXIF tag


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one image may cost. max_pixels applies to what is decoded (a JPEG's draft scale)."""

    max_pixels: int = int(os.environ.get("IMAGE_MAX_PIXELS", 36_000_000))
    max_header_pixels: int = int(os.environ.get("IMAGE_MAX_HEADER_PIXELS", 180_000_000))
    max_side: int = int(os.environ.get("IMAGE_MAX_SIDE", 20_000))
    max_aspect: float = float(os.environ.get("IMAGE_MAX_ASPECT", 20))


# Pillow's own bomb guard (a warning above this many header pixels, an error above twice as
# many) is aligned with ours: check_header refuses first, with the image's size in the message.
Image.MAX_IMAGE_PIXELS = Limits().max_header_pixels


class ImageError(ValueError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def check_header(image: Image.Image, limits: Limits) -> None:
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageError(400, f"has no pixels ({width} x {height})")
    if max(width, height) / min(width, height) > limits.max_aspect:
        raise ImageError(400, f"is {width} x {height} pixels: an aspect ratio above "
                              f"{limits.max_aspect:g}:1 is refused")
    if max(width, height) > limits.max_side or width * height > limits.max_header_pixels:
        raise ImageError(413, f"is {width} x {height} pixels, larger than the limit "
                              f"({limits.max_side} px a side, {limits.max_header_pixels} pixels)")


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB without losing what a viewer would show."""
    mode = image.mode
    if mode.startswith("I;16") or mode in ("I", "F"):
        values = np.asarray(image, dtype=np.float64)
        top = 1.0 if mode == "F" and values.max(initial=0) <= 1.0 else \
            (255.0 if values.max(initial=0) <= 255 else 65535.0)
        grey = np.clip(values * (255.0 / top), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if mode == "P" and "transparency" in image.info:
        image, mode = image.convert("RGBA"), "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image if mode == "RGB" else image.convert("RGB")


def _opened(source, min_side: int, limits: Limits) -> Image.Image:
    """The header read and checked, the decoder set to its draft scale; no pixel decoded."""
    data = io.BytesIO(source) if isinstance(source, bytes | bytearray) else source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # check_header says it
        image = Image.open(data)
    if image.format not in FORMATS:
        raise ImageError(415, f"is {image.format or 'an unknown format'}; send JPEG, PNG, WebP, "
                              "TIFF or BMP")
    check_header(image, limits)
    if min_side and image.format in DRAFTABLE:
        image.draft("RGB", (min_side, min_side))
    if image.size[0] * image.size[1] > limits.max_pixels:
        raise ImageError(413, f"would decode to {image.size[0]} x {image.size[1]} pixels, more "
                              f"than the limit of {limits.max_pixels}")
    return image


def _guarded(action):
    """Every error a decoder raises, as an ImageError with a status."""
    try:
        return action()
    except ImageError:
        raise
    except Image.DecompressionBombError as err:
        raise ImageError(413, f"is larger than the decompression-bomb limit ({err})") from None
    except Exception as err:  # noqa: BLE001 - decoders raise OSError, SyntaxError, ValueError,
        # struct.error, EOFError, IndexError, ...: all mean "this is not a readable image"
        raise ImageError(400, f"is not a readable image ({type(err).__name__}: "
                              f"{str(err)[:200]})") from None


def inspect(source, min_side: int = 0, limits: Limits = Limits()) -> int:
    """Check an image from its header alone; return the pixels decoding it would produce."""
    image = _guarded(lambda: _opened(source, min_side, limits))
    return image.size[0] * image.size[1]


def open_image(source, min_side: int = 0, limits: Limits = Limits()) -> Image.Image:
    """A path or bytes -> a decoded RGB image, or ImageError (see the module docstring)."""

    def decode() -> Image.Image:
        image = _opened(source, min_side, limits)
        image.load()  # decodes now (and closes a file it opened)
        if image.getexif().get(ORIENTATION, 1) != 1:  # phone photos: turn them upright
            image = ImageOps.exif_transpose(image)
        return to_rgb(image)

    return _guarded(decode)
