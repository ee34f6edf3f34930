"""An optimized BLAS for MLX's Linux CPU backend, chosen before mlx is imported.

MLX's Linux CPU wheel (``mlx[cpu]``) calls a reference (netlib) BLAS: matmul and
the GEMM behind convolution run 20-40x slower than with an optimized one. The
three functions MLX uses (``cblas_sgemm/dgemm/cgemm``) are bound when mlx's
library loads, to the first library in the process's global scope that defines
them. So, once per process and before ``import mlx``:

1. load scipy-openblas32 (the OpenBLAS build numpy and SciPy ship; no Fortran
   runtime needed) with RTLD_GLOBAL: it defines ``scipy_cblas_sgemm`` ...;
2. load ``zoo/native/cblas_forward`` (compiled at install) with RTLD_GLOBAL:
   it defines the unprefixed names and forwards them to (1).

OpenBLAS's idle worker threads spin for a while after each call and slowed the
next MLX op 2-3x on 2 cores; OPENBLAS_THREAD_TIMEOUT (read when the library
loads) makes them sleep sooner. A value the user set is kept.

MLX's Linux CPU allocator is plain malloc, and glibc serves every block over 32 MB with
a fresh mmap that it unmaps on free: each large activation then pays its page faults
again (a ReLU over 16.7M floats took 39 ms, 13 ms with the memory kept; the MobileSAM
encoder 2.3 s -> 1.5 s). ``keep_freed_memory`` (called by preload on glibc) has malloc
serve large blocks from its heap and keep up to 1 GiB of freed memory for reuse.
``ZOO_MALLOC=system`` leaves malloc as it is.

macOS keeps Accelerate. ``ZOO_BLAS=reference`` keeps MLX's own BLAS (to compare).
Nothing here raises: without the pieces, MLX keeps its own BLAS and ``info()`` says why.

``preload`` logs one line at debug level (logger "zoo"): the BLAS (with OpenBLAS's kernel set and
threads) and which clone of zoo/native/cpu_ops' routines this CPU takes (avx512, avx2 or generic).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from pathlib import Path

THREAD_TIMEOUT = "4"  # 2^4 cycles, OpenBLAS's minimum (its default, 2^28, is ~0.1 s of spinning)

_state = {"blas": "mlx's own", "reason": "not tried", "malloc": "system"}

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters
KEEP_FREED_BYTES = 1 << 30


@functools.lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (musl has no mallopt parameters or malloc_trim)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def keep_freed_memory() -> None:
    """glibc: large blocks from the heap (no mmap per block), freed memory kept up to 1 GiB."""
    if os.environ.get("ZOO_MALLOC", "").lower() == "system" or not sys.platform.startswith("linux"):
        return
    libc = _glibc()
    if libc is not None and libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES) == 1:
        _state["malloc"] = "glibc, freed memory kept for reuse (M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB)"


def return_freed_memory() -> None:
    """Hand freed heap memory back to the system now (glibc's malloc_trim; elsewhere nothing).

    keep_freed_memory keeps up to 1 GiB of freed blocks for reuse, fragmented between live ones;
    a caller that frees much and will not reuse it (the validator, dropping each layer once
    judged) calls this so its resident memory does not keep every block it dropped."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


_library: ctypes.CDLL | None = None


def _forwarder() -> Path | None:
    from zoo.native import built

    return built("cblas_forward")


def preload() -> dict:
    """Bind MLX's BLAS calls to OpenBLAS, if this is Linux and mlx is not imported yet (the first
    call; ``describe()`` logged at debug level). Returns info()."""
    if _library is None and _state["reason"] == "not tried":
        keep_freed_memory()
        _bind_openblas()
        logging.getLogger("zoo").debug(describe())
    return info()


def _bind_openblas() -> None:
    global _library
    if not sys.platform.startswith("linux"):
        _state["reason"] = "not Linux: MLX uses the platform's BLAS (Accelerate on macOS)"
    elif os.environ.get("ZOO_BLAS", "").lower() == "reference":
        _state["reason"] = "ZOO_BLAS=reference"
    elif "mlx.core" in sys.modules:
        _state["reason"] = "mlx was imported before zoo: import zoo first to give MLX OpenBLAS"
    else:
        # before the import: it loads the library, which reads the variable then
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", THREAD_TIMEOUT)
        try:
            import scipy_openblas32
        except ImportError:
            _state["reason"] = "scipy-openblas32 is not installed (pip install scipy-openblas32)"
            return
        forwarder = _forwarder()
        if forwarder is None:
            _state["reason"] = "zoo.native.cblas_forward was not compiled at install (no C compiler?)"
            return
        try:
            path = Path(scipy_openblas32.get_lib_dir()) / f"lib{scipy_openblas32.get_library()}.so"
            library = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL(str(forwarder), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            _state["reason"] = f"could not load OpenBLAS ({e})"
            return
        _library = library
        _state.update(blas=f"OpenBLAS {scipy_openblas32.__version__} (scipy-openblas32)", reason="")


# what zoo_packs says: the form of the products of packed weights (zoo.kernels.cpu.pack)
PACKED_FORMS = {0: "OpenBLAS's", 1: "zoo's, half panels (AVX2)", 2: "zoo's, whole panels (AVX-512)"}


def cpu_forms() -> str | None:
    """Which clone of zoo/native/cpu_ops' routines this CPU takes, e.g. "avx512 (x86-64-v4)", "avx2
    (x86-64-v3)", "generic (x86-64)", and whose products the convolutions' weights take
    (PACKED_FORMS); None where the library was not compiled."""
    from zoo.native import built

    path = built("cpu_ops")
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
    except OSError:
        return None
    library.zoo_cpu_forms.restype = ctypes.c_char_p
    return f"{library.zoo_cpu_forms().decode()}, weight products {PACKED_FORMS[library.zoo_packs()]}"


def describe() -> str:
    """One line: the BLAS MLX's CPU backend calls (OpenBLAS's kernel set and threads) and the C forms in use."""
    if _library is None:
        blas = f"MLX's own BLAS ({_state['reason']})"
    else:
        _library.scipy_openblas_get_corename.restype = ctypes.c_char_p
        blas = (f"{_state['blas']}, {_library.scipy_openblas_get_corename().decode()} kernels, "
                f"{_library.scipy_openblas_get_num_threads()} threads")
    forms = cpu_forms()
    return f"CPU: BLAS {blas}; C forms {forms or 'not compiled, or older than their source (MLX ops instead)'}"


def info() -> dict:
    """Which BLAS MLX's CPU backend calls, and why not OpenBLAS when it is not."""
    out = dict(_state)
    if _library is not None:
        out["threads"] = _library.scipy_openblas_get_num_threads()
    return out


def sgemm_address() -> int | None:
    """Address of OpenBLAS's cblas_sgemm (for zoo.native.cpu_ops' convolution), None without OpenBLAS."""
    if _library is None:
        return None
    return ctypes.cast(_library.scipy_cblas_sgemm, ctypes.c_void_p).value


def threads_addresses() -> tuple[int | None, int | None]:
    """Addresses of OpenBLAS's openblas_get_num_threads and openblas_set_num_threads (for
    zoo.native.cpu_ops, which runs independent products one per thread), None without OpenBLAS."""
    if _library is None:
        return None, None
    return tuple(ctypes.cast(getattr(_library, f"scipy_openblas_{verb}_num_threads"), ctypes.c_void_p).value
                 for verb in ("get", "set"))


def set_threads(n: int) -> None:
    """OpenBLAS threads for MLX's CPU matmul/conv (e.g. one Ray actor's CPUs); no-op without OpenBLAS."""
    if _library is not None:
        _library.scipy_openblas_set_num_threads(ctypes.c_int(max(1, int(n))))
