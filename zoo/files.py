"""Output files, for the models and the CLIs alike: checked before any work, written whole or not at all."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from PIL import Image

from .errors import ZooError


def temporary_path(path: Path) -> Path:
    """Where ``path`` is written before it is renamed: a hidden sibling, so the rename stays on one file system."""
    return path.with_name(f".{path.name}.part")


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` to a temporary sibling name, then rename it over ``path``.

    A failure, or an interrupted run, never leaves half a file under the real name
    nor the temporary file; an OSError becomes a one-line ZooError naming ``path``.
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise ZooError(f"cannot write {path}: {e.strerror or e}; check the folder exists and is writable") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def check_output_file(path: str | Path, what: str) -> Path:
    """Fail now, before any work, when ``path`` cannot become a file: it is a folder, or its folder is missing."""
    path = Path(path)
    if path.is_dir():
        raise ZooError(f"{what} {path} is a folder: pass a file path")
    if not path.parent.is_dir():
        raise ZooError(f"{what} {path}: folder {path.parent} does not exist; create it or pass another path")
    return path


def check_output_folder(path: str | Path, what: str) -> Path:
    """Fail now, before any work, when ``path`` exists but is not a folder (it is created later)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ZooError(f"{what} {path} exists and is not a folder: pass a folder")
    return path


def writable_format(path: str | Path) -> str | None:
    """Pillow's format name that writes ``path``, from its suffix; None when Pillow cannot write it."""
    fmt = Image.registered_extensions().get(Path(path).suffix.lower())
    return fmt if fmt in Image.SAVE else None  # some formats Pillow only reads (.psd)


def image_format(path: str | Path, what: str | None = None) -> str:
    """writable_format, or a ZooError that names ``what`` (default: the path)."""
    path = Path(path)
    fmt = writable_format(path)
    if fmt is None:
        known = Image.registered_extensions().get(path.suffix.lower())
        problem = f"Pillow only reads {known}" if known else "unknown image suffix" if path.suffix else "no image suffix"
        raise ZooError(f"{what or path}: {problem}: cannot write {path.suffix or 'a file without suffix'}; use .png")
    return fmt
