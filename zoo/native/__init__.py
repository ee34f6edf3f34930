"""Compiled helpers (built at install, optional): cblas_forward (see zoo.blas), cpu_ops (see zoo.kernels.cpu)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_told: set[str] = set()


def built(name: str) -> Path | None:
    """The compiled module ``zoo.native.<name>``'s file; None where it was not compiled at install, or where its C
    source lies beside it, newer (an editable install after a pull: the library's functions may take other
    arguments than the Python calling them, which would read them wrong), said once in one line."""
    spec = importlib.util.find_spec(f"zoo.native.{name}")
    if spec is None or not spec.origin:
        return None
    library, source = Path(spec.origin), Path(spec.origin).with_name(f"{name}.c")
    if source.exists() and source.stat().st_mtime > library.stat().st_mtime:
        if name not in _told:
            _told.add(name)
            print(f"note: {source} is newer than its build {library.name}: run pip install -e . to rebuild it; "
                  "until then MLX's own CPU ops run in its place (slower; the same results to float32 rounding)",
                  file=sys.stderr)
        return None
    return library
