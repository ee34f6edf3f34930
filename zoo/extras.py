"""Optional dependencies: each is imported through ``require``, which names the pip extra that installs it.

Every command and API call that needs one calls ``require`` before any work (before weights are read or
an image is decoded), so a missing package is one ``error:`` line at the start, not a traceback after
minutes of computing.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from .errors import ZooError

# import name -> (the package pip installs, the mlx-zoo extra that brings it)
EXTRAS = {
    "cv2": ("OpenCV", "sam"),
    "av": ("PyAV", "video"),
    "matplotlib": ("matplotlib", "validate"),
    "ray": ("Ray", "ray"),
    "pyarrow": ("pyarrow", "ray"),
    "pandas": ("pandas", "pandas"),
}


def install_hint(module: str) -> str:
    return f'pip install "mlx-zoo[{EXTRAS[module.partition(".")[0]][1]}]"'


def require(module: str, purpose: str) -> ModuleType:
    """``module`` imported, or a ZooError: '<purpose> needs <package>: pip install "mlx-zoo[<extra>]"'."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ZooError(f"{purpose} needs {EXTRAS[module.partition('.')[0]][0]}: {install_hint(module)}") from None
