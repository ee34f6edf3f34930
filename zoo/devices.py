"""One device decision per process, and the dtype boundary of every model.

MLX arrays carry no device: every op runs on the default device. So the
decision is made once (``use``) and a later, different request raises instead
of silently moving half the work elsewhere. Dtypes are checked where data
enters a model: MLX would otherwise promote float16 * float32 to float32 and
compute quietly in a precision nobody asked for.
"""
from __future__ import annotations

import os

import mlx.core as mx
import numpy as np

from .errors import ZooError, option

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}

_chosen: str | None = None


def host_memory() -> int:
    """Bytes of this machine's physical memory, where numpy arrays live (unified memory on Apple silicon)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# The share of the device's memory (a GPU's; the host's on the CPU and on Apple silicon's unified memory) that one
# --batch, or one LaMa pass on a GPU, may plan to use: what the process holds besides (the weights, MLX's buffers,
# the decoded images) takes the rest
MEMORY_SHARE = 0.8


def device_memory() -> int:
    """Bytes of memory of the device MLX runs on (unified memory on Apple silicon)."""
    if mx.default_device().type == mx.gpu:
        info = mx.device_info()
        size = info.get("memory_size") or info.get("total_memory")  # Metal's key, CUDA's key
        if size:
            return int(size)
    return host_memory()


def gpu_backend() -> str | None:
    """'metal', 'cuda' or None: which GPU backend this MLX build can use."""
    if mx.metal.is_available():
        return "metal"
    cuda = getattr(mx, "cuda", None)
    if cuda is not None and cuda.is_available():
        return "cuda"
    return None


def use(device: str | None = None) -> str:
    """Choose the process-wide device ('gpu' or 'cpu'; None: GPU when there is one).

    The first call decides; later calls with None keep it, with another name raise.
    """
    global _chosen
    if device is None:
        if _chosen is not None:
            return _chosen
        device = "gpu" if gpu_backend() else "cpu"
    if device not in ("gpu", "cpu"):
        raise ZooError(f"unknown device {device!r}: use {option('device', 'gpu')} or {option('device', 'cpu')}")
    if device == "gpu" and gpu_backend() is None:
        raise ZooError(
            f"no GPU backend in this MLX build: use {option('device', 'cpu')}, or install mlx with Metal "
            "(macOS) or MLX's CUDA build, e.g. `pip install 'mlx[cuda13]'` (Linux with an NVIDIA GPU)"
        )
    if _chosen is not None and device != _chosen:
        raise ZooError(
            f"this process already runs on {_chosen}; one device per process: "
            f"start a new process for {device}"
        )
    first = _chosen is None
    if first and device == "gpu" and gpu_backend() == "cuda" and cuda_pool_choice() == "keep":
        keep_cuda_pool()
    mx.set_default_device(mx.gpu if device == "gpu" else mx.cpu)
    _chosen = device
    return device


# MLX's CUDA allocator takes its buffers from the device's default memory pool (cudaMallocAsync),
# whose release threshold is 0: at every synchronisation in the process the driver hands back to
# the system what MLX freed, and MLX maps it again on its next forward. A PyTorch model in the same
# process paid for those releases inside its own torch.cuda.synchronize(): beside MLX's eager
# YOLOv8 b16 float32 it ran 1.6-1.7x slower (H200, 2026-11-27 17:10 UTC, docs/speed-gpu.md); with
# the pool kept, as PyTorch's caching allocator keeps its own blocks, it ran as fast as without MLX.
POOL_VAR = "ZOO_CUDA_POOL"
POOL_CHOICES = ("keep", "release")


def cuda_pool_choice() -> str:
    """``ZOO_CUDA_POOL``: 'keep' (default) what MLX frees in the CUDA pool, or 'release' it at each
    synchronisation (the driver's default)."""
    value = os.environ.get(POOL_VAR, "").strip().lower() or "keep"
    if value not in POOL_CHOICES:
        raise ZooError(f"{POOL_VAR}={value!r}: use 'keep' (default) or 'release'")
    return value


def keep_cuda_pool() -> None:
    """Set the release threshold of the GPU's default memory pool (the one MLX allocates from) to
    its maximum: freed memory stays in the pool for MLX's next allocations."""
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise ZooError(f"keeping the CUDA memory pool: cannot load the CUDA driver ({e}); "
                       f"set {POOL_VAR}=release to leave the pool as it is") from e
    device, pool = ctypes.c_int(), ctypes.c_void_p()
    threshold = ctypes.c_uint64(2**64 - 1)
    release_threshold = 4  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    for name, call in (("cuInit", lambda: driver.cuInit(0)),
                       ("cuDeviceGet", lambda: driver.cuDeviceGet(ctypes.byref(device), 0)),
                       ("cuDeviceGetDefaultMemPool", lambda: driver.cuDeviceGetDefaultMemPool(ctypes.byref(pool), device)),
                       ("cuMemPoolSetAttribute",
                        lambda: driver.cuMemPoolSetAttribute(pool, release_threshold, ctypes.byref(threshold)))):
        status = call()
        if status:
            raise ZooError(f"keeping the CUDA memory pool: {name} returned CUDA error {status}; "
                           f"set {POOL_VAR}=release to leave the pool as it is")


def describe() -> str:
    """The device in words, e.g. 'gpu (cuda: NVIDIA H100 80GB HBM3)' or 'cpu'."""
    device = use()
    if device == "cpu":
        return "cpu"
    backend = gpu_backend()
    try:
        name = mx.device_info().get("device_name", "")
    except (AttributeError, RuntimeError):
        name = ""
    return f"gpu ({backend}{': ' + name if name else ''})"


def tf32_enabled() -> bool:
    """Whether float32 matmul/conv may run as TF32 (MLX on CUDA and new Apple GPUs)."""
    return use() == "gpu" and os.environ.get("MLX_ENABLE_TF32", "1") != "0"


def parse_dtype(dtype: str | mx.Dtype) -> mx.Dtype:
    if isinstance(dtype, mx.Dtype):
        if dtype not in DTYPES.values():
            raise ZooError(f"unsupported dtype {dtype}: use one of {', '.join(DTYPES)}")
        return dtype
    if dtype not in DTYPES:
        raise ZooError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def dtype_name(dtype: mx.Dtype) -> str:
    return next(name for name, d in DTYPES.items() if d == dtype)


def as_model_input(x, dtype: mx.Dtype, what: str = "input", channels: int | None = None) -> mx.array:
    """Bring a model input to the model's dtype at the boundary.

    numpy arrays are converted once here. An mx.array of another float dtype is
    rejected: converting it would hide a dtype mix-up in the caller's pipeline.
    ``channels``: the input must be an (N, H, W, channels) image batch; an NCHW one (timm's and
    torch's layout) is refused with the transpose that makes it NHWC, never read as another image.
    """
    if isinstance(x, (np.ndarray, mx.array)) and channels is not None and (x.ndim != 4 or x.shape[-1] != channels):
        nchw = x.ndim == 4 and x.shape[1] == channels
        raise ZooError(f"{what} has shape {tuple(x.shape)}: expected (N, H, W, {channels}), channels last"
                       + (" (this looks like NCHW: pass x.transpose(0, 2, 3, 1))" if nchw else ""))
    if isinstance(x, (np.ndarray, mx.array)) and channels is not None and 0 in x.shape[1:3]:
        # ResNet returned logits of uninitialised memory (5e10 in one run, 2.8e32 in the next)
        raise ZooError(f"{what} has shape {tuple(x.shape)}: an image of no pixels, pass images of 1x1 or more")
    if isinstance(x, np.ndarray):
        if x.dtype.kind != "f":  # uint8 pixels went in as 0-255 where the network takes 0-1 or normalised values
            raise ZooError(f"{what} has dtype {x.dtype}: pass floats, scaled as the network takes them (an integer "
                           "image is not scaled here)")
        return mx.array(x.astype(np.float32)).astype(dtype)
    if not isinstance(x, mx.array):
        raise ZooError(f"{what} must be an mx.array or numpy array, got {type(x).__name__}")
    if x.dtype not in DTYPES.values():  # integers or bool: no model dtype would take them as they are
        raise ZooError(f"{what} is {x.dtype}, not floats: convert with x.astype(mx.{dtype_name(dtype)})")
    if x.dtype != dtype:
        raise ZooError(
            f"{what} is {dtype_name(x.dtype)} but the model runs in {dtype_name(dtype)}: convert with "
            f"x.astype(mx.{dtype_name(dtype)}) or load the model with dtype='{dtype_name(x.dtype)}'"
        )
    return x
