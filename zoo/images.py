"""Image input for every model: anything a user holds becomes an RGB uint8 array.

Accepts a path, a PIL image or an HxW / HxWx{1,3,4} array. EXIF orientation is
applied (phones store photos sideways), and every Pillow mode (L, LA, P, RGBA,
CMYK, I;16, I, F, ...) becomes RGB.
"""
from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from .errors import ZooError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")

PIXEL_LIMIT_ENV = "ZOO_MAX_IMAGE_PIXELS"


def max_image_pixels() -> int | None:
    """The most pixels an image file may have, checked from its header before it is decoded.

    A decompression bomb (a small file that decodes to gigabytes) is refused. The limit is
    Pillow's ``PIL.Image.MAX_IMAGE_PIXELS`` (89,478,485 by default: 256 MiB of RGBA, about
    9459x9459); the environment variable ZOO_MAX_IMAGE_PIXELS sets it for the process (a
    positive number, or ``none`` for no limit). Pillow only warns up to twice its limit; here
    anything above it is refused.
    """
    value = os.environ.get(PIXEL_LIMIT_ENV)
    if value is not None:
        if value.strip().lower() == "none":
            Image.MAX_IMAGE_PIXELS = None
        elif value.strip().isdigit() and int(value) > 0:
            Image.MAX_IMAGE_PIXELS = int(value)  # Pillow's own check at open must agree
        else:
            raise ZooError(f"{PIXEL_LIMIT_ENV}={value!r} is not a number of pixels: use a positive "
                           "integer, e.g. 200000000, or none")
    return Image.MAX_IMAGE_PIXELS


@contextmanager
def reading_errors(path: Path):
    """Pillow's failures while reading ``path`` -> one-line ZooErrors naming the file and the fix."""
    if not path.exists():
        raise ZooError(f"image not found: {path}")
    if path.is_dir():
        raise ZooError(f"{path} is a directory, not an image file")
    if path.stat().st_size == 0:
        raise ZooError(f"cannot read {path}: the file is empty (0 bytes)")
    try:
        yield
    except ZooError:
        raise
    except UnidentifiedImageError:
        raise ZooError(f"cannot read {path}: not an image file Pillow recognises") from None
    except Image.DecompressionBombError:
        raise ZooError(too_many_pixels(path)) from None
    except (OSError, SyntaxError, ValueError) as e:
        raise ZooError(f"cannot read {path}: the file is damaged or truncated ({e})") from None
    except Exception as e:  # Pillow's decoders raise many kinds on malformed data (its fuzzers accept any)
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        raise ZooError(f"cannot read {path}: the file is damaged ({reason})") from None


def too_many_pixels(path: Path, size: tuple[int, int] | None = None) -> str:
    shape = f"{size[0]}x{size[1]} ({size[0] * size[1]:,} pixels), above" if size else "larger than"
    return (f"{path} is {shape} the limit of {Image.MAX_IMAGE_PIXELS:,} pixels that guards against "
            f"decompression bombs: set {PIXEL_LIMIT_ENV} to a larger number (or none) if you trust the file")


@contextmanager
def opened(path: Path):
    """``path`` opened (its header read, nothing decoded), refused if it has too many pixels."""
    limit = max_image_pixels()
    with reading_errors(path):
        with warnings.catch_warnings():
            # Pillow warns between its limit and twice it; those are refused below, as one line
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(path)
        with img:
            if limit is not None and img.width * img.height > limit:
                raise ZooError(too_many_pixels(path, img.size))
            yield img


def local_path(path: str | Path) -> Path:
    """``path`` as a Path; a URL (which Path would turn into a missing file, ``https:/host/x.jpg``) is refused."""
    if isinstance(path, str) and "://" in path:
        raise ZooError(f"{path} is a URL: images are read from files here; download it and pass the file")
    return Path(path)


def open_image(path: str | Path) -> Image.Image:
    """Open and fully decode an image file, with EXIF orientation applied."""
    path = local_path(path)
    with opened(path) as img:
        img.load()  # decode now: truncated files fail here, not later
        frames = getattr(img, "n_frames", 1)
        if frames > 1:  # Pillow decodes an animation's (or a multi-page file's) first frame: said, not silent
            print(f"note: {path} holds {frames} frames (an animation or pages): the first is used; ultralytics reads "
                  "an animated GIF as a video: convert it to .mp4 to process every frame", file=sys.stderr)
        ImageOps.exif_transpose(img, in_place=True)  # in place: a copy of a 64-megapixel photo is 183 MiB more
        return img


def image_size(path: str | Path) -> tuple[int, int]:
    """(height, width) of an image file as open_image returns it (EXIF orientation applied), from its header."""
    path = Path(path)
    with opened(path) as img:
        w, h = img.size
        # orientations 5-8 turn the picture by a quarter
        return (w, h) if img.getexif().get(ExifTags.Base.Orientation) in (5, 6, 7, 8) else (h, w)


def _to_rgb(img: Image.Image, what: str) -> Image.Image:
    if img.mode == "RGB":
        return img
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        # 16-bit and float images: scale the full range to 8 bits instead of clipping.
        a = np.asarray(img, dtype=np.float64)
        refuse_non_finite(a, what)
        top = 65535.0 if img.mode.startswith("I;16") or a.max() > 255 else 255.0
        if img.mode == "F":
            top = max(float(a.max()), 1e-12)
        img = Image.fromarray(np.clip(np.rint(a / top * 255.0), 0, 255).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        # Composite on white: dropping alpha would show whatever colour hides in transparent pixels.
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def load_image(source, what: str = "image") -> np.ndarray:
    """Return the image as an (H, W, 3) uint8 RGB array."""
    if isinstance(source, (str, Path)):
        img = open_image(source)
    elif isinstance(source, Image.Image):
        img = source
    elif isinstance(source, np.ndarray):
        return _array_to_rgb(source, what)
    else:
        raise ZooError(f"{what} must be a path, a PIL image or a numpy array, got {type(source).__name__}")
    if img.width == 0 or img.height == 0:
        raise ZooError(f"{what} is empty (0 pixels)")
    return np.asarray(_to_rgb(img, str(source) if isinstance(source, (str, Path)) else what), dtype=np.uint8)


def refuse_non_finite(a: np.ndarray, what: str) -> None:
    """ZooError for floats holding NaN or infinity: cast to 8 bits they became arbitrary pixels (NaN passed
    the [0, 1] range check, its comparisons all false) and the model answered for an image nobody gave."""
    low, high = a.min(), a.max()  # NaN anywhere makes both NaN
    if not (np.isfinite(low) and np.isfinite(high)):
        kind = "NaN" if np.isnan(low) else "infinite"
        raise ZooError(f"{what} holds {kind} values: replace them (e.g. numpy.nan_to_num) and pass uint8 0-255 "
                       "or floats in [0, 1]")


def _array_to_rgb(a: np.ndarray, what: str) -> np.ndarray:
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] not in (3, 4):
        raise ZooError(f"{what} array has shape {a.shape}: expected (H, W), (H, W, 3) or (H, W, 4)")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ZooError(f"{what} is empty (shape {a.shape})")
    if a.shape[2] == 4:
        a = a[:, :, :3]
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a)
    if a.dtype.kind == "f":
        refuse_non_finite(a, what)
        if a.min() < 0 or a.max() > 1:
            raise ZooError(f"{what} is a float array outside [0, 1]: pass uint8 0-255 or floats in [0, 1]")
        return np.rint(a * 255.0).astype(np.uint8)
    if a.dtype == np.uint16:
        return np.rint(a / 257.0).astype(np.uint8)
    raise ZooError(f"{what} array has dtype {a.dtype}: pass uint8, uint16 or float in [0, 1]")


def image_files(path: str | Path) -> list[Path]:
    """The images to process for a CLI argument: a file, or the image files in a directory."""
    path = local_path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ZooError(f"no images in directory {path} (looked for {', '.join(IMAGE_SUFFIXES)})")
        return files
    if not path.exists():
        raise ZooError(f"image not found: {path}")
    return [path]


def check_resized_pixels(size: tuple[int, int], resized: tuple[int, int], rule: str) -> None:
    """Refuse, before allocating it, a resize whose result has more pixels than the pixel limit.

    The limit that guards decoding guards what a model resizes an image to as well: a strip of a
    few bytes (1x100000) passes the first and, with its shorter side enlarged to 256, would take
    gigabytes. ``size`` and ``resized`` are (height, width); ``rule`` says what the model does.
    """
    limit = max_image_pixels()
    (h, w), (new_h, new_w) = size, resized
    if limit is not None and new_h * new_w > limit:
        ratio = limit // (min(new_h, new_w) ** 2)
        raise ZooError(f"the image is {w}x{h}: {rule} makes it {new_w}x{new_h} ({new_h * new_w:,} pixels), above "
                       f"the limit of {limit:,} pixels: crop it to an aspect ratio of at most 1:{ratio}, or set "
                       f"{PIXEL_LIMIT_ENV} to a larger number if you have the memory")


def resize_shorter_side(img: np.ndarray, size: int) -> np.ndarray:
    """Resize so the shorter side is ``size`` (torchvision's rule: the long side is truncated).

    Pillow's bilinear filter, antialiased when shrinking: what torchvision does on PIL images.
    """
    h, w = img.shape[:2]
    if h <= w:
        new_h, new_w = size, int(size * w / h)
    else:
        new_h, new_w = int(size * h / w), size
    check_resized_pixels((h, w), (new_h, new_w), f"resizing its shorter side to {size}")
    return np.asarray(Image.fromarray(img).resize((new_w, new_h), Image.BILINEAR))


def center_crop(img: np.ndarray, size: int) -> np.ndarray:
    h, w = img.shape[:2]
    if h < size or w < size:
        raise ZooError(f"image of {w}x{h} is smaller than the {size}x{size} crop")
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return img[top : top + size, left : left + size]
