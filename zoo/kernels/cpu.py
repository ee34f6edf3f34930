"""CPU forms of the ops that MLX's CPU backend runs slowly; MLX's own op everywhere else.

Measured on Linux x86-64, 2 cores (docs/speed-cpu.md has the figures and ratios):

- sigmoid / SiLU (~20 ns per element) and exact GELU (~35 ns; an add takes 0.3 ns):
  MLX's x86 wheel is built for baseline x86-64, so its element-wise ops run one float
  at a time with exp/erf/fma/floor as library calls (mlx/backend/cpu/simd: no SIMD
  width on x86; unary.h). Here: one vectorised pass in C (zoo/native/cpu_ops.c);
- BatchNorm at inference: MLX's nn.BatchNorm makes four passes over the map
  ((x - mean) * rsqrt(var + eps) * weight + bias). Here: one pass of x * scale + shift;
- softmax: the same slow exp. Here: a vectorised row softmax in C;
- attention (MLX's CPU scaled_dot_product_attention is its unfused fallback: matmul, softmax,
  matmul, each matmul one sgemm per head that OpenBLAS splits over its threads). Here: per head
  both products on one OpenBLAS thread and the softmax between them, the heads over our threads;
- depthwise convolution (~0.5 GFLOP/s): any ``groups > 1`` takes MLX's naive
  ``slow_conv_2D`` loop (conv.cpp). Here: a channel-vectorised loop in C;
- transposed convolution (~1.2 GFLOP/s): MLX runs it as a convolution with input
  dilation, which also takes ``slow_conv_2D``. Here: ONE GEMM (input x all kernel taps),
  so OpenBLAS does the arithmetic, then one threaded C pass sums each output pixel's taps;
- 1x1 convolutions: MLX's explicit-GEMM convolution copies the input twice (a padded
  copy, then the patch matrix) even when the patch is one pixel. Here: a matmul;
- convolutions with few output channels (LaMa's last 7x7 conv 64->3): MLX's explicit
  GEMM first copies every input patch (im2col: H*W x 3136 floats, ~0.8 GB at 256 px) for
  a GEMM with 3 columns. Here: one GEMM of the input with all taps, then the same C pass
  sums each output pixel's taps.

Each function takes and returns mx.arrays in MLX's NHWC layouts. The C routines need
data: on the CPU they evaluate their input first; inside ``mx.compile``/``vmap`` (no data
yet) they fall back to MLX's op, as they do on the GPU, without the compiled library,
or with ``ZOO_KERNELS=fallback``. float16/bfloat16 inputs are computed in float32 and
rounded once. Models call these through zoo.models.layers.
"""
from __future__ import annotations

import ctypes
import functools
import os

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.kernels import coverage, winograd
from zoo.kernels.core import ACTIVATIONS, ENV_VAR, pair

_lib: ctypes.CDLL | None = None
_lib_tried = False
_PTR = ctypes.POINTER(ctypes.c_float)


def _library() -> ctypes.CDLL | None:
    global _lib, _lib_tried
    if not _lib_tried:
        _lib_tried = True
        from zoo.native import built

        path = built("cpu_ops")
        if path is not None:
            try:
                lib = ctypes.CDLL(str(path))
            except OSError:
                lib = None
            if lib is not None:
                size = ctypes.c_ssize_t
                for name in ("zoo_sigmoid_f32", "zoo_silu_f32", "zoo_gelu_f32"):
                    getattr(lib, name).argtypes = [_PTR, _PTR, size, ctypes.c_int]
                lib.zoo_channel_affine_f32.argtypes = [_PTR, _PTR, _PTR, _PTR, size, size, ctypes.c_int]
                lib.zoo_softmax_f32.argtypes = [_PTR, _PTR, size, ctypes.c_float, _PTR, size, size, ctypes.c_int]
                for name in ("zoo_window_partition_f32", "zoo_window_merge_f32"):
                    getattr(lib, name).argtypes = [_PTR, _PTR] + [size] * 5 + [ctypes.c_int]
                lib.zoo_split_heads_f32.argtypes = [_PTR] * 4 + [size] * 5 + [ctypes.c_int]
                lib.zoo_layer_norm_f32.argtypes = [_PTR, _PTR, _PTR, ctypes.c_float, _PTR, size, size, ctypes.c_int,
                                                   ctypes.c_int]
                lib.zoo_depthwise_conv2d_f32.argtypes = [_PTR, _PTR, _PTR, _PTR] + [ctypes.c_int] * 13
                lib.zoo_max_pool2d_f32.argtypes = [_PTR, _PTR] + [ctypes.c_int] * 10
                lib.zoo_pointwise_parts_f32.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, _PTR, _PTR, size, _PTR,
                                                                                _PTR, ctypes.c_int, _PTR] \
                    + [ctypes.c_int] * 6
                lib.zoo_box_decode_f32.argtypes = [_PTR] * 7 + [ctypes.c_int, _PTR] + [ctypes.c_int] * 12
                lib.zoo_conv2d_f32.argtypes = [_PTR] * 6 + [ctypes.c_int] * 15
                lib.zoo_conv2d_direct.argtypes = [ctypes.c_int] * 4
                lib.zoo_winograd_conv3x3_f32.argtypes = [_PTR, size, _PTR, _PTR, _PTR, _PTR, size, ctypes.c_int,
                                                         _PTR] + [ctypes.c_int] * 9
                lib.zoo_packed_floats.argtypes = [ctypes.c_int] * 3
                lib.zoo_packed_floats.restype = size
                lib.zoo_pack_f32.argtypes = [_PTR] + [size] * 3 + [ctypes.c_int] * 3 + [_PTR]
                lib.zoo_set_sgemm.argtypes = [ctypes.c_void_p] * 3
                lib.zoo_inverted_residual_f32.argtypes = [_PTR] * 8 + [ctypes.c_int] * 7
                lib.zoo_attention_f32.argtypes = ([_PTR] * 4 + [size, ctypes.c_float, _PTR, ctypes.POINTER(size)]
                                                  + [size] * 6 + [ctypes.c_int])
                lib.zoo_matmul_batched_f32.argtypes = [_PTR] * 3 + [size] + [ctypes.c_int] * 5
                lib.zoo_tap_sum_f32.argtypes = [_PTR] * 3 + [ctypes.c_int] * 14
                from zoo import blas

                # None (no OpenBLAS): zoo_conv2d_f32 declines
                lib.zoo_set_sgemm(blas.sgemm_address(), *blas.threads_addresses())
                _lib = lib
    return _lib


def on_cpu() -> bool:
    """Whether MLX's default device is the CPU (the one device decision of zoo.devices)."""
    return mx.default_device() == mx.cpu


def per_image(fn, x: mx.array, *more: mx.array) -> mx.array:
    """``fn(x, *more)`` with each image of a CPU batch computed apart (``more``: arrays of the same batch,
    sliced alike). OpenBLAS computes the last rows of a GEMM with another kernel (on an AMD EPYC,
    2026-11-27, those rows differed in their last bits), so a convolution whose GEMM spans the batch
    gave an image other bits in a batch than alone; zoo's batches give each image its batch-of-one
    result (docs/streams.md). Elsewhere: ``fn(x, *more)``."""
    if not on_cpu() or x.shape[0] < 2:
        return fn(x, *more)
    return mx.concatenate([fn(*(a[i:i + 1] for a in (x, *more))) for i in range(x.shape[0])])


def native_available() -> bool:
    """The compiled C routines are loaded and not switched off (ZOO_KERNELS=fallback)."""
    return os.environ.get(ENV_VAR, "").lower() != "fallback" and _library() is not None


def _fast_path() -> bool:
    return on_cpu() and os.environ.get(ENV_VAR, "").lower() != "fallback"


def _threads() -> int:
    from zoo import blas

    return int(blas.info().get("threads") or os.cpu_count() or 1)


def _host_view(x: mx.array, *outputs: mx.array) -> np.ndarray | None:
    """x (float32) as numpy where it lies, strided as MLX holds it; None while MLX is tracing."""
    if x.dtype != mx.float32:
        x = x.astype(mx.float32)
    try:
        mx.eval(x, *outputs)
    except ValueError:  # "Attempting to eval an array during function transformations"
        return None
    return np.asarray(x)


def _host(x: mx.array, *outputs: mx.array) -> np.ndarray | None:
    """x as a contiguous float32 numpy array sharing MLX's buffer where it can; None while
    MLX is tracing (compile/vmap/grad: there is no data to hand over yet). ``outputs`` (from
    ``_output``) are evaluated in the same ``mx.eval``: each evaluation is a round trip to MLX's
    CPU stream thread, which cost more than the small C routines themselves."""
    host = _host_view(x, *outputs)
    return None if host is None else np.ascontiguousarray(host)


def _ptr(a: np.ndarray | None):
    """a's buffer as a float pointer for the C routines; None (NULL: the routine's "none") for None."""
    return None if a is None else a.ctypes.data_as(_PTR)


# Outputs up to this size are copied from a read-only private anonymous mapping: its pages are all
# the kernel's one zero page, so the copy reads a cached page, on this thread. mx.zeros is evaluated on
# MLX's CPU stream thread: a round trip (~40 us) and a fill, which larger outputs repay (a fill
# outran the copy from 2 MB: 4 MB 224 against 298 us). Whole forwards, same process, interleaved
# (2026-11-29, 2-core AMD EPYC): ResNet-50 58.0 / 59.5 / 58.9 ms with every output copied / filled /
# copied up to 1 MB; YOLOv8n 67.8 / 68.7 / 68.5; SAM prompt + decoder 59.3 / 53.7 / 51.7; LaMa 256
# 608 / 595 / 604.
ZERO_MAPPING_BYTES = 1 << 20


@functools.cache
def _zero_floats() -> np.ndarray:
    import mmap

    zeros = mmap.mmap(-1, ZERO_MAPPING_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)
    return np.frombuffer(zeros, dtype=np.float32)


def _output(shape) -> mx.array:
    """A fresh float32 MLX array of zeros for a C routine to fill (made only where the C routine will
    run): up to ZERO_MAPPING_BYTES copied here, larger ones mx.zeros; pass it to ``_host`` with the
    input (which evaluates both), then write through ``_view``."""
    count = int(np.prod(shape))
    if 4 * count > ZERO_MAPPING_BYTES:
        return mx.zeros(shape, mx.float32)
    return mx.array(_zero_floats()[:count].reshape(shape))


def _view(out: mx.array) -> np.ndarray:
    """A writable numpy view of an evaluated ``_output`` array's buffer.

    Writing through the view is MLX's documented buffer-protocol behaviour; the array is new
    and referenced nowhere else. This avoids a copy of a numpy result into MLX (mx.array(...)),
    which costs as much as the routine itself on large maps."""
    return np.asarray(out)


def _ran(op: str, cpu_form) -> None:
    """Tell zoo.kernels.coverage which form of ``op`` runs (truthy: the CPU form)."""
    coverage.note(op, coverage.CPU_FORM if cpu_form is not None and cpu_form is not False else coverage.MLX_OP)


def _like(out: mx.array, x: mx.array) -> mx.array:
    return out if x.dtype == mx.float32 else out.astype(x.dtype)


def _unary(name: str, x: mx.array, mlx_op) -> mx.array:
    lib = _library() if _fast_path() else None
    out = _output(x.shape) if lib is not None else None
    host = _host(x, out) if lib is not None else None
    _ran(name[4:-4], host)
    if host is None:
        return mlx_op(x)
    getattr(lib, name)(_ptr(host), _ptr(_view(out)), host.size, _threads())
    return _like(out, x)


def sigmoid(x: mx.array) -> mx.array:
    return _unary("zoo_sigmoid_f32", x, mx.sigmoid)


def silu(x: mx.array) -> mx.array:
    return _unary("zoo_silu_f32", x, nn.silu)


def gelu(x: mx.array) -> mx.array:
    """Exact (erf) GELU, x * Phi(x)."""
    return _unary("zoo_gelu_f32", x, nn.gelu)


# The activations as ops, each its C form on the CPU where it has one (MLX's otherwise, and in traces):
# what the models apply after a convolution or a product that did not apply it itself.
ACTIVATION_OPS = {None: lambda y: y, "relu": nn.relu, "silu": silu, "gelu": gelu}


def channel_affine(x: mx.array, scale: mx.array, shift: mx.array) -> mx.array:
    """x * scale + shift over the last axis (per channel), computed in float32."""
    lib = _library() if _fast_path() else None
    out = _output(x.shape) if lib is not None else None
    host = _host(x, out, scale, shift) if lib is not None else None
    params = (_host(scale), _host(shift)) if host is not None else (None, None)
    _ran("batch_norm (channel affine)", params[0])
    if params[0] is None:
        return (x.astype(mx.float32) * scale + shift).astype(x.dtype)
    c = host.shape[-1]
    lib.zoo_channel_affine_f32(_ptr(host), _ptr(params[0]), _ptr(params[1]), _ptr(_view(out)), host.size // c, c,
                               _threads())
    return _like(out, x)


def softmax(x: mx.array, scale: float = 1.0, bias: mx.array | None = None) -> mx.array:
    """softmax(scale * x + bias) over the last axis (float32 maths for every dtype, as MLX's precise
    softmax); bias broadcasts against x's trailing axes (e.g. attention's per-head (H, N, N))."""
    lib = _library() if _fast_path() else None
    out = _output(x.shape) if lib is not None else None
    host = _host(x, out) if lib is not None and x.ndim else None
    fits = bias is None or (bias.ndim <= x.ndim and tuple(bias.shape) == tuple(x.shape[x.ndim - bias.ndim:]))
    b = _host(bias) if host is not None and bias is not None and fits else None
    _ran("softmax", host is not None and fits and (bias is None or b is not None))
    if host is None or not fits or (bias is not None and b is None):
        scores = x.astype(mx.float32) * scale if scale != 1.0 else x
        return mx.softmax(scores if bias is None else scores + bias, axis=-1, precise=True).astype(x.dtype)
    cols = host.shape[-1]
    lib.zoo_softmax_f32(_ptr(host), _ptr(b), 0 if b is None else b.size // cols, scale,
                        _ptr(_view(out)), host.size // cols, cols, _threads())
    return _like(out, x)


def layer_norm(x: mx.array, weight: mx.array | None, bias: mx.array | None, eps: float,
               activation: str | None = None) -> mx.array:
    """activation(mx.fast.layer_norm(x, weight, bias, eps)) over the last axis (float32 maths): one
    threaded pass per row in C on the CPU, the activation applied to each row in cache (MLX's runs one
    float at a time, on one thread)."""
    lib = _library() if _fast_path() else None
    out = _output(x.shape) if lib is not None else None
    host = _host(x, out) if lib is not None and x.ndim else None
    _ran("layer_norm", host)
    if host is None:
        return ACTIVATION_OPS[activation](mx.fast.layer_norm(x, weight, bias, eps))
    cols = host.shape[-1]
    w = _host(weight) if weight is not None else np.ones(cols, np.float32)
    b = _host(bias) if bias is not None else np.zeros(cols, np.float32)
    lib.zoo_layer_norm_f32(_ptr(host), _ptr(w), _ptr(b), eps, _ptr(_view(out)), host.size // cols, cols,
                           ACTIVATIONS[activation][0], _threads())
    return _like(out, x)


def split_heads(x: mx.array, heads: int, parts: int = 3) -> tuple[mx.array, ...]:
    """x (B, N, heads * parts * D), laid out (heads, parts, D) per token -> ``parts`` arrays
    (B, heads, N, D) (e.g. q, k, v of a fused qkv projection). On the CPU one threaded C copy:
    MLX copies a 5-D transpose one float at a time (~57 ms for TinyViT's first stage)."""
    b, n, width = x.shape
    d = width // (heads * parts)
    lib = _library() if _fast_path() and parts <= 3 else None
    outs = [_output((b, heads, n, d)) for _ in range(parts)] if lib is not None else []
    host = _host(x, *outs) if lib is not None else None
    _ran("split_heads", host)
    if host is None:
        # Views (slice, transpose), no copy: indexing the transposed 5-D array by an int was one
        # gather each, TinyViT's top GPU kernel in float16 (0.70 of 3.5 ms, H100, 2026-11-27);
        # MLX's attention reads strided q, k, v.
        split = x.reshape(b, n, heads, parts, d)
        return tuple(split[:, :, :, i].transpose(0, 2, 1, 3) for i in range(parts))
    views = [_ptr(_view(out)) for out in outs] + [None] * (3 - parts)
    lib.zoo_split_heads_f32(_ptr(host), *views, b, n, heads, parts, d, _threads())
    return tuple(_like(out, x) for out in outs)


def window_partition(x: mx.array, window: int) -> mx.array:
    """(B, H, W, C) -> (B * nh * nw, window**2, C): non-overlapping windows in row-major order,
    zero-padded at the bottom and right to whole windows (window attention). On the CPU one
    threaded C copy instead of MLX's pad and 6-D transpose copy."""
    b, h, w, c = x.shape
    nh, nw = -(-h // window), -(-w // window)
    lib = _library() if _fast_path() else None
    out = _output((b * nh * nw, window * window, c)) if lib is not None else None
    host = _host(x, out) if lib is not None else None
    _ran("window_partition", host)
    if host is None:
        x = mx.pad(x, ((0, 0), (0, nh * window - h), (0, nw * window - w), (0, 0)))
        return x.reshape(b, nh, window, nw, window, c).transpose(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)
    lib.zoo_window_partition_f32(_ptr(host), _ptr(_view(out)), b, h, w, c, window, _threads())
    return _like(out, x)


def window_merge(x: mx.array, size: tuple[int, int], window: int) -> mx.array:
    """The inverse of window_partition: windows -> (B, H, W, C) of the given (H, W), padding dropped."""
    h, w = size
    nh, nw = -(-h // window), -(-w // window)
    c = x.shape[-1]
    b = x.shape[0] // (nh * nw)
    lib = _library() if _fast_path() else None
    out = _output((b, h, w, c)) if lib is not None else None
    host = _host(x, out) if lib is not None else None
    _ran("window_merge", host)
    if host is None:
        x = x.reshape(b, nh, nw, window, window, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, nh * window, nw * window, c)
        return x[:, :h, :w]
    lib.zoo_window_merge_f32(_ptr(host), _ptr(_view(out)), b, h, w, c, window, _threads())
    return _like(out, x)


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None = None) -> mx.array:
    """mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask) for q (..., NQ, D), k
    (..., NK, D), v (..., NK, DV) and an additive mask (or none). On the CPU one C call: per (batch,
    head) the two products on one OpenBLAS thread and the softmax between them, the heads over our
    threads (zoo/native/cpu_ops.c says why); a mask that does not broadcast as trailing planes, or no
    C routine: MLX's unfused form (matmul, softmax() above, matmul). A boolean mask (keep / drop, not
    a bias): MLX's op."""
    if not _fast_path() or (mask is not None and mask.dtype == mx.bool_):
        _ran("attention", False)
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    *lead, nq, d = q.shape
    nk, dv = v.shape[-2], v.shape[-1]
    products = int(np.prod(lead))  # (batch, head) pairs
    fits = (q.ndim >= 3 and tuple(k.shape) == (*lead, nk, d) and tuple(v.shape[:-1]) == (*lead, nk)
            and (mask is None or (2 <= mask.ndim <= q.ndim and mask.shape[-2:] == (nq, nk)
                                  and tuple(mask.shape[:-2]) == tuple(lead[len(lead) - mask.ndim + 2:]))))
    lib = _library() if fits else None
    out = _output((*lead, nq, dv)) if lib is not None else None
    host = _host(q, out, k, v) if lib is not None else None
    keys, values = (_host(k), _host(v)) if host is not None else (None, None)
    # each (batch, head) pair one contiguous matrix: (batch, head, row) strides (NQ*D, 0, D) etc.
    done = host is not None and _attention_call(lib, host, keys, values, mask, scale, out,
                                                (nq * d, 0, d, nk * d, 0, d, nk * dv, 0, dv, nq * dv, 0, dv),
                                                products, 1, nq, nk, d, dv)
    _ran("attention (per-head products and softmax)", done)
    if not done:
        return softmax(q @ k.swapaxes(-1, -2), scale, mask) @ v
    return _like(out, q)


def qkv_attention(qkv: mx.array, heads: int, scale: float, mask: mx.array | None = None) -> mx.array:
    """Self-attention over the heads of a fused projection: qkv (B, N, heads * 3 * D) laid out (heads,
    (q, k, v), D) per token -> (B, N, heads * D), head h's softmax(scale * q k^T + mask[h]) v in its D
    columns; mask (N, N) or (heads or 1, N, N), additive. On the CPU one C call that reads q, k and v
    where they lie and writes each head into its columns: no split_heads copy before it and no
    transposing copy after. Elsewhere (or with another mask) split_heads, attention() and a transpose."""
    b, n, width = qkv.shape
    d = width // (3 * heads)
    fits = mask is None or (mask.dtype != mx.bool_ and mask.shape[-2:] == (n, n)
                            and (mask.ndim == 2 or (mask.ndim == 3 and mask.shape[0] in (1, heads))))
    lib = _library() if _fast_path() and fits and width == heads * 3 * d else None
    out = _output((b, n, heads * d)) if lib is not None else None
    host = _host(qkv, out) if lib is not None else None
    row = width  # floats from one token's q to the next's
    done = host is not None and _attention_call(
        lib, *(host.reshape(b, n, heads, 3, d)[:, :, :, part] for part in range(3)), mask, scale, out,
        (n * row, 3 * d, row) * 3 + (n * heads * d, d, heads * d), b, heads, n, n, d, d)
    _ran("attention (heads of a fused qkv, products and softmax)", done)
    if done:
        return _like(out, qkv)
    q, k, v = split_heads(qkv, heads)
    return attention(q, k, v, scale, mask).transpose(0, 2, 1, 3).reshape(b, n, -1)


def heads_attention(q: mx.array, k: mx.array, v: mx.array, heads: int, scale: float) -> mx.array | None:
    """Multi-head attention of tokens whose heads lie side by side: q (BQ, NQ, heads * D), k (BK, NK,
    heads * D), v (BK, NK, heads * DV), BQ and BK equal or one of them 1 (that side shared by every
    batch: the SAM decoder's image against many prompt sets) -> (max(BQ, BK), NQ, heads * DV), head h's
    softmax(scale * q k^T) v in its DV columns. On the CPU one C call that reads q, k and v where they lie
    (any row stride: column slices too) and writes each head into its columns: no split or broadcast
    copies before it, no transposing copy after. None where it cannot run (not the CPU, a trace, no library)."""
    (bq, nq, width), (bk, nk, _) = q.shape, k.shape
    batch, d, dv = max(bq, bk), width // heads, v.shape[-1] // heads
    fits = (bq == bk or 1 in (bq, bk)) and k.shape[-1] == width and v.shape[:2] == k.shape[:2]
    lib = _library() if _fast_path() and fits else None
    out = _output((batch, nq, heads * dv)) if lib is not None else None
    views = [_host_view(a, out) for a in (q, k, v)] if lib is not None else []
    if any(view is None or view.strides[-1] != 4 for view in views):
        views = [np.ascontiguousarray(view) for view in views] if all(view is not None for view in views) else []
    strides = []
    for view, step in zip(views, (d, d, dv)):  # (batch, head, row) in floats; a shared side's batch stride 0
        strides += [view.strides[0] // 4 if view.shape[0] > 1 else 0, step,
                    view.strides[1] // 4 if view.shape[1] > 1 else view.shape[2]]  # one row: any stride fits
    done = bool(views) and _attention_call(lib, *views, None, scale, out,
                                           (*strides, nq * heads * dv, dv, heads * dv), batch, heads, nq, nk, d, dv)
    _ran("attention (heads where they lie, products and softmax)", done)
    return _like(out, q) if done else None


def shared_keys_attention(q: mx.array, k: mx.array, v: mx.array, scale: float) -> mx.array:
    """softmax(scale * q k^T) v for many rows of queries against the same keys and values: q (B, M, D), k
    (BK, N, D), v (BK, N, DV), BK 1 (shared by every batch) or B -> (B, M, DV). On the CPU one C call, the
    rows cut in one share per thread (each share's two products on one OpenBLAS thread, k and v read where
    they lie); elsewhere MLX's products and softmax()."""
    (b, m, d), (bk, nk, _), dv = q.shape, k.shape, v.shape[-1]
    shares = _threads() if m % _threads() == 0 else 1
    lib = _library() if _fast_path() and bk in (1, b) and v.shape[:2] == k.shape[:2] else None
    out = _output((b, m, dv)) if lib is not None else None
    host = _host(q, out, k, v) if lib is not None else None
    keys, values = (_host(k), _host(v)) if host is not None else (None, None)
    rows = m // shares
    shared = 0 if bk == 1 else 1  # a batch stride of 0: every batch reads the one k and v
    done = host is not None and _attention_call(
        lib, host, keys, values, None, scale, out,
        (m * d, rows * d, d, shared * nk * d, 0, d, shared * nk * dv, 0, dv, m * dv, rows * dv, dv),
        b, shares, rows, nk, d, dv)
    _ran("attention (rows against shared keys, products and softmax)", done)
    return _like(out, q) if done else softmax(q @ k.swapaxes(-1, -2), scale) @ v


def _attention_call(lib, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: mx.array | None, scale: float,
                    out: mx.array, strides, batches: int, heads: int, nq: int, nk: int, d: int, dv: int) -> bool:
    """zoo_attention_f32 over batches x heads (batch, head) pairs, q, k, v host arrays (or views: their
    first element is where the matrices start), ``strides`` the (batch, head, row) strides of q, k, v
    and out in floats; False where it could not run (the caller falls back)."""
    bias = _host(mask) if mask is not None else None
    return lib.zoo_attention_f32(
        _ptr(q), _ptr(k), _ptr(v), _ptr(bias), 0 if bias is None else bias.size // (nq * nk),
        scale, _ptr(_view(out)), (ctypes.c_ssize_t * 12)(*strides), batches, heads, nq, nk, d, dv, _threads()) == 0


def batched_matmul(a: mx.array, b: mx.array) -> mx.array:
    """a @ b for a (M, K) or (B, M, K) and b (B, K, N): (B, M, N). On the CPU one C call that cuts the
    products in tiles over its threads, each tile on one OpenBLAS thread (MLX's calls OpenBLAS per
    product, which splits each over its threads and waits for them, or for its sleeping thread to
    wake: zoo/native/cpu_ops.c); MLX's matmul where the C form cannot run."""
    out = _batched_product(a, b)
    _ran("matmul (batched)", out is not None)
    return a @ b if out is None else out


def _batched_product(a: mx.array, b: mx.array) -> mx.array | None:
    """``batched_matmul``'s C form, or None where it cannot run (not the CPU, a trace, no OpenBLAS)."""
    batch, k, n = b.shape
    m = a.shape[-2]
    fits = a.shape[-1] == k and (a.ndim == 2 or (a.ndim == 3 and a.shape[0] == batch))
    lib = _library() if _fast_path() and fits else None
    out = _output((batch, m, n)) if lib is not None else None
    host = _host(b, out, a) if lib is not None else None
    left = _host(a) if host is not None else None
    done = left is not None and lib.zoo_matmul_batched_f32(_ptr(left), _ptr(host), _ptr(_view(out)), batch,
                                                           int(a.ndim == 2), m, n, k, _threads()) == 0
    return _like(out, b) if done else None


def biased_activation(y: mx.array, bias: mx.array | None, activation: str | None) -> mx.array:
    """activation(y + bias) (ACTIVATION_OPS): what the C convolutions add where MLX's convolution runs."""
    return ACTIVATION_OPS[activation](y if bias is None else y + bias)


def depthwise_conv2d(x: mx.array, weight: mx.array, stride=1, padding=0, bias: mx.array | None = None,
                     activation: str | None = None) -> mx.array:
    """activation(mx.conv2d(x, weight, stride, padding, groups=C) + bias) for weight (C, KH, KW, 1),
    no dilation; activation None, "relu", "silu" or "gelu" (exact)."""
    sh, sw = pair(stride)
    ph, pw = pair(padding)
    c, kh, kw, _ = weight.shape
    n, h, w, _ = x.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    lib = _library() if _fast_path() and sh == sw and min(oh, ow) > 0 else None
    out = _output((n, oh, ow, c)) if lib is not None else None
    host = _host(x, out) if lib is not None else None
    wt = _host(weight.reshape(c, kh * kw).T) if host is not None else None
    b = _host(bias) if wt is not None and bias is not None else None
    _ran("depthwise conv2d", wt)
    if wt is None:
        return biased_activation(mx.conv2d(x, weight, stride=(sh, sw), padding=(ph, pw), groups=c), bias, activation)
    lib.zoo_depthwise_conv2d_f32(_ptr(host), _ptr(wt), _ptr(b), _ptr(_view(out)), n, h, w, c,
                                 kh, kw, sh, ph, pw, oh, ow, ACTIVATIONS[activation][0], _threads())
    return _like(out, x)


def _rows(x: mx.array) -> tuple[np.ndarray, int] | None:
    """NHWC x as numpy where it lies with its pixels' stride in floats, where its pixels are evenly
    strided (a channel slice of a map: C2f's halves); else a contiguous copy; None while tracing."""
    host = _host_view(x)
    if host is None:
        return None
    n, h, w, c = host.shape
    s = host.strides
    ld = s[2] // 4
    if s[3] == 4 and s[2] % 4 == 0 and ld >= c and (h == 1 or s[1] == w * s[2]) and (n == 1 or s[0] == h * s[1]):
        return host, ld
    return np.ascontiguousarray(host), c


def pointwise_parts(parts, offsets, weight: mx.array, bias: mx.array | None = None, activation: str | None = None,
                    half: mx.array | None = None, packed: np.ndarray | None = None) -> mx.array:
    """activation(y + bias + upsample2x(half)) for NHWC ``parts`` of one size, where y is the 1x1
    convolution (weight (O, 1, 1, I)) of their channel concatenation with part i's channels at
    ``offsets[i]`` of I (columns of the weight no part reads belong to a part the caller multiplied
    itself: ``half``, an (N, H/2, W/2, O) product whose nearest 2x upsampling is added); ``packed``: the
    weight's ``pack``, or None. One C call reading each part where it lies; MLX's products where it cannot
    run (not the CPU, a trace, no OpenBLAS to call for a weight without ``packed``)."""
    n, h, w, _ = parts[0].shape
    lib = _library() if _fast_path() and 1 <= len(parts) <= 8 else None
    out = _output((n, h, w, weight.shape[0])) if lib is not None else None
    rows = [_rows(p) for p in parts] if out is not None else None
    wt = None if rows is None or None in rows else _host(weight)
    if wt is None:
        _ran("conv2d 1x1 of a concatenation (parts)", False)
        return _pointwise_parts_mlx(parts, offsets, weight, bias, activation, half)
    b = _host(bias) if bias is not None else None
    add = _host(half) if half is not None else None
    pointers = (ctypes.c_void_p * len(parts))(*(r[0].ctypes.data for r in rows))
    lds, widths, starts = ((ctypes.c_ssize_t * len(parts))(*values) for values in
                           ([r[1] for r in rows], [p.shape[3] for p in parts], offsets))
    done = lib.zoo_pointwise_parts_f32(pointers, lds, widths, starts, len(parts), _ptr(wt), _ptr(packed), wt.shape[-1],
                                       _ptr(b), _ptr(add), int(add is not None), _ptr(_view(out)), n, h, w,
                                       weight.shape[0], ACTIVATIONS[activation][0], _threads()) == 0
    _ran("conv2d 1x1 of a concatenation (parts)", done)
    return _like(out, parts[0]) if done else _pointwise_parts_mlx(parts, offsets, weight, bias, activation, half)


def _pointwise_parts_mlx(parts, offsets, weight: mx.array, bias: mx.array | None, activation: str | None,
                         half: mx.array | None) -> mx.array:
    """pointwise_parts' values with MLX's ops: each part times its columns of the weight, the products added."""
    columns = weight.reshape(weight.shape[0], -1)
    y = None
    for part, start in zip(parts, offsets):
        product = part @ columns[:, start:start + part.shape[-1]].T
        y = product if y is None else y + product
    if half is not None:
        y = add_upsampled(y, half)
    return biased_activation(y, bias, activation)


def add_upsampled(full: mx.array, half: mx.array) -> mx.array:
    """full + half's nearest 2x upsampling, NHWC, without making the upsampled map: half added to each
    pixel of its 2x2 block."""
    n, h, w, c = full.shape
    return (full.reshape(n, h // 2, 2, w // 2, 2, c) + half[:, :, None, :, None, :]).reshape(n, h, w, c)


def box_decode(boxes, classes, bins: mx.array, strides) -> mx.array | None:
    """zoo.kernels.box_decode.decode's result (N, A, 4 + classes) as one threaded C pass over the three
    levels' maps, computed in float32 and returned in the maps' dtype; None where it cannot run (not
    the CPU, a trace, no C library): the caller runs its other form."""
    lib = _library() if _fast_path() else None
    n, nc = boxes[0].shape[0], classes[0].shape[3]
    out = _output((n, sum(b.shape[1] * b.shape[2] for b in boxes), 4 + nc)) if lib is not None else None
    maps = [_host(m, *(() if i else (out,))) for i, m in enumerate((*boxes, *classes))] if lib is not None else [None]
    weights = _host(bins.reshape(-1)) if all(m is not None for m in maps) else None
    done = weights is not None and lib.zoo_box_decode_f32(
        *(_ptr(m) for m in maps), _ptr(weights), weights.size, _ptr(_view(out)), n, nc,
        *(side for b in boxes for side in b.shape[1:3]), *strides, _threads()) == 0
    _ran("box decode", done)
    return _like(out, boxes[0]) if done else None


def max_pool2d(x: mx.array, kernel: int, stride: int, padding: int) -> mx.array:
    """nn.MaxPool2d(kernel, stride, padding)(x) for NHWC x, square windows (torch's max_pool2d: the
    padding never wins, NaN does); on the CPU one threaded C pass, else MLX's pooling."""
    n, h, w, c = x.shape
    oh, ow = (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1
    lib = _library() if _fast_path() and min(oh, ow) > 0 and padding < kernel else None
    out = _output((n, oh, ow, c)) if lib is not None else None
    host = _host(x, out) if lib is not None else None
    _ran("max_pool2d", host)
    if host is None:
        return nn.MaxPool2d(kernel, stride, padding)(x)
    lib.zoo_max_pool2d_f32(_ptr(host), _ptr(_view(out)), n, h, w, c, kernel, stride, padding, oh, ow, _threads())
    return _like(out, x)


def conv2d(x: mx.array, weight: mx.array, bias: mx.array | None = None, stride=1, padding=0,
           reflect: bool = False, activation: str | None = None, *, residual: mx.array | None = None,
           packed: np.ndarray | None = None, op: str = "conv2d") -> mx.array:
    """activation(mx.conv2d(x, weight, stride, padding) + bias + residual) for weight (O, KH, KW, I), no
    groups or dilation; ``reflect``: the padding is torch's reflect padding instead of zeros (it must be
    smaller than the input); activation None, "relu", "silu" or "gelu" (exact); ``residual`` (an
    array of the output's shape, or None) added before the activation. On the CPU: patch rows
    gathered in C and one OpenBLAS sgemm per chunk (patch rows of at most 32 floats into at most 64
    channels, or of a kernel larger than 1x1 up to 256 floats into 16, 32, 48 or 64, multiplied in C; a
    1x1 stride-1 convolution multiplies the input itself, in blocks of rows over the threads), the bias
    plus the residual its initial C, the activation applied to each chunk after its product; with
    ``packed`` (the weight's ``pack``) the products are the C library's own instead of sgemm. ``op``:
    what zoo.kernels.coverage calls the caller's op."""
    sh, sw = pair(stride)
    ph, pw = pair(padding)
    co, kh, kw, ci = weight.shape
    n, h, w, _ = x.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    # reflect padding reads in place only where it is defined (smaller than the map); sizes that
    # leave no output, or an undefined reflection, go to MLX, whose pad and conv say what is wrong
    fits = min(oh, ow) > 0 and not (reflect and max(ph - h, pw - w) >= 0)
    if residual is not None and tuple(residual.shape) != (n, oh, ow, co):
        raise ValueError(f"conv2d: residual {tuple(residual.shape)} is not the output's shape {(n, oh, ow, co)}")
    lib = _library() if _fast_path() and sh == sw and fits else None
    out = _output((n, oh, ow, co)) if lib is not None else None
    host = _host(x, out, *(() if residual is None else (residual,))) if lib is not None else None
    wt = _host(weight) if host is not None else None
    b = _host(bias) if wt is not None and bias is not None else None
    add = _host(residual) if wt is not None and residual is not None else None
    done = wt is not None and lib.zoo_conv2d_f32(
        _ptr(host), _ptr(wt), _ptr(packed), _ptr(b), _ptr(add), _ptr(_view(out)), n, h, w, ci, co, kh, kw, sh, ph,
        pw, int(reflect), oh, ow, ACTIVATIONS[activation][0], _threads()) == 0
    _ran(op, done)
    if not done:  # MLX's (a trace, another device), or no OpenBLAS to call, or no memory for the patch rows
        y = _mlx_conv2d(x, weight, bias, (sh, sw), (ph, pw), reflect)
        return biased_activation(y if residual is None else y + residual, None, activation)
    return _like(out, x)


def inverted_residual(x: mx.array, expand: dict, depthwise: dict, project: dict, activation: str) -> mx.array | None:
    """activation(x + project(activation(depthwise(activation(expand(x)))))) for NHWC x: MobileNetV2's
    inverted residual (TinyViT's MBConv), each convolution a {weight, bias} (its BatchNorm folded in):
    expand (E, 1, 1, C), depthwise (E, 3, 3, 1) (stride 1, padding 1), project (C, 1, 1, E). On the CPU
    one C call that keeps three expanded rows per thread in cache instead of the expanded map in memory
    (zoo/native/cpu_ops.c says why). None where it cannot run (no OpenBLAS, no memory, a trace): the
    caller runs the convolutions apart."""
    n, h, w, c = x.shape
    e = expand["weight"].shape[0]
    lib = _library() if _fast_path() else None
    out = _output(x.shape) if lib is not None else None
    host = _host(x, out) if lib is not None else None
    if host is None:
        return None
    w1, b1 = _host(expand["weight"]), _host(expand["bias"])
    wd, bd = _host(depthwise["weight"].reshape(e, 9).T), _host(depthwise["bias"])
    w3, b3 = _host(project["weight"]), _host(project["bias"])
    done = lib.zoo_inverted_residual_f32(_ptr(host), _ptr(w1), _ptr(b1), _ptr(wd), _ptr(bd), _ptr(w3), _ptr(b3),
                                         _ptr(_view(out)), n, h, w, c, e, ACTIVATIONS[activation][0], _threads())
    _ran("inverted residual (expand, depthwise, project)", done == 0)
    return _like(out, x) if done == 0 else None


# The CPU's Winograd form where both channel counts reach this (min(C_in, C_out)): thinner GEMMs
# gained less than the transforms cost. 16 since 2026-11-29 (YOLOv8n's 16 -> 16 at 160x160: 1.6-1.7 ms
# against 2.7-3.5 as patch rows; it was slower before its products ran one per thread: docs/speed-cpu.md)
WINOGRAD_MIN_CHANNELS = 16


def winograd_suits(weight_shape, stride, padding, groups, dilation) -> bool:
    """Whether a convolution takes ``winograd_conv3x3`` on the CPU: zoo.kernels.winograd.fits (3x3,
    stride 1, padding 0 or 1) with WINOGRAD_MIN_CHANNELS a side, where the C routines run and
    ``conv2d``'s register-held direct form (zoo_conv2d_direct) does not take it: a 3x3 over 16
    channels into 16 ran there in 1.22 ms against Winograd's 1.52-1.75 (YOLOv8n at 160x160; 16 -> 32:
    2.03 against 2.48; 2026-11-29)."""
    o, kh, kw, c = weight_shape
    return (_fast_path() and native_available() and winograd.fits(weight_shape, stride, padding, groups, dilation)
            and min(o, c) >= WINOGRAD_MIN_CHANNELS and not _library().zoo_conv2d_direct(o, kh, kw, c))


def pack(weight: mx.array) -> np.ndarray | None:
    """A convolution's weight (O, KH, KW, I), or a Linear's (O, I), packed for the C library's own
    products (zoo_pack_f32: panels of output channels, each read in order by a block of sums held in
    registers; packed once, as OpenBLAS packs both matrices at every call): float32, on hosts whose
    CPU takes them (AVX-512 or AVX2: zoo_packs), outside traces; else None (the products stay OpenBLAS's)."""
    o = weight.shape[0]
    k = int(np.prod(weight.shape[1:]))
    return _pack(weight, 1, 0, k, 1, o, k)


def pack_winograd(u: mx.array) -> np.ndarray | None:
    """``pack`` of Winograd's transformed weight (16, C_in, C_out): its 16 matrices, each C_out by C_in."""
    _, c, o = u.shape
    return _pack(u, 16, c * o, 1, o, o, c)


def _pack(weight: mx.array, batch: int, batch_step: int, n_step: int, k_step: int, n: int, k: int) -> np.ndarray | None:
    if not _fast_path() or not native_available() or not _library().zoo_packs():
        return None
    host = _host(weight)
    if host is None:
        return None
    packed = np.empty(_library().zoo_packed_floats(batch, n, k), np.float32)
    _library().zoo_pack_f32(_ptr(host), batch_step, n_step, k_step, batch, n, k, _ptr(packed))
    return packed


def winograd_conv3x3(x: mx.array, u: mx.array | None, bias: mx.array | None, padding: int, reflect: bool = False,
                     activation: str | None = None, *, residual: mx.array | None = None,
                     skip: mx.array | None = None, packed: np.ndarray | None = None,
                     outputs: int | None = None) -> mx.array | None:
    """activation(conv3x3(x) + bias + residual) + skip, stride 1, as Winograd F(2x2, 3x3) in C
    (zoo.kernels.winograd has the maths): the input transform, 16 products with ``u``
    (winograd.transform_weight: (16, C_in, C_out); OpenBLAS sgemm, one product per thread, each on one
    OpenBLAS thread; or the C library's own with ``packed``, u's ``pack_winograd``, where u may be None
    and ``outputs`` is its C_out), the output transform with the bias, the residual, the activation
    and the skip (each an array of the output's shape, or None: one of them; YOLO's Bottleneck adds
    its input after the SiLU); zero or (``reflect``) torch's reflect padding of 0 or 1. x and the skip
    are read where they lie where their pixels are evenly strided (C2f's halves). None where it cannot
    run (no OpenBLAS, no memory, a trace): the caller runs its other form."""
    if residual is not None and skip is not None:
        raise ValueError("winograd_conv3x3: a residual or a skip, not both")
    n, h, w, c = x.shape
    o = u.shape[-1] if u is not None else outputs
    oh, ow = h + 2 * padding - 2, w + 2 * padding - 2
    add = residual if residual is not None else skip
    if add is not None and tuple(add.shape) != (n, oh, ow, o):
        raise ValueError(f"winograd_conv3x3: {tuple(add.shape)} is not the output's shape {(n, oh, ow, o)}")
    lib = _library() if _fast_path() and min(oh, ow) > 0 and (not reflect or padding < min(h, w)) else None
    out = _output((n, oh, ow, o)) if lib is not None else None
    rows = _rows(x) if lib is not None else None
    added = _rows(add) if rows is not None and add is not None else None
    ut = _host(u) if rows is not None and u is not None else None
    b = _host(bias) if rows is not None and bias is not None else None
    if rows is None or (ut is None and packed is None) or (add is not None and added is None):
        return None
    (host, ldx), (add_host, ld_add) = rows, added or (None, 0)
    done = lib.zoo_winograd_conv3x3_f32(_ptr(host), ldx, _ptr(ut), _ptr(packed), _ptr(b), _ptr(add_host), ld_add,
                                        int(skip is not None), _ptr(_view(out)), n, h, w, c, o, padding, int(reflect),
                                        ACTIVATIONS[activation][0], _threads())
    _ran("conv2d 3x3 (Winograd)", done == 0)
    return _like(out, x) if done == 0 else None


# Below this many input elements a Linear stays MLX's lazy addmm: the C form evaluates its input
# first, a round trip to MLX's CPU stream that costs more than a small product (the SAM decoder's
# prompt tokens)
LINEAR_MIN_ELEMENTS = 1 << 16
# unless its weight has this many: ResNet-50's head (2048 -> 1000, one row an image) took 3.6 ms
# through MLX's addmm after the forward and 1.0 ms as the C form's sgemm (2026-11-29)
LINEAR_MIN_WEIGHT = 1 << 20


def linear_in_c(x: mx.array, weight: mx.array) -> bool:
    """Whether ``linear`` of x by weight runs in C: on the CPU, from LINEAR_MIN_ELEMENTS inputs or
    LINEAR_MIN_WEIGHT weights."""
    return (_fast_path() and _library() is not None and x.size > 0  # an empty batch: MLX's (0, out), no C call
            and (x.size >= LINEAR_MIN_ELEMENTS or weight.size >= LINEAR_MIN_WEIGHT))


def linear(x: mx.array, weight: mx.array, bias: mx.array | None = None, activation: str | None = None,
           residual: mx.array | None = None, packed: np.ndarray | None = None) -> mx.array:
    """activation(nn.Linear's x @ weight.T + bias + residual) over the last axis (``residual``: an array of
    the output's shape, or None); where ``linear_in_c``, one product whose initial C is the bias plus the
    residual (MLX's addmm first copies the broadcast bias with a strided loop), the activation applied by
    the same C call (``packed``: the weight's ``pack``, or None: OpenBLAS's sgemm); else MLX's ops."""
    if not linear_in_c(x, weight):
        y = x @ weight.T if bias is None else mx.addmm(bias, x, weight.T)
        return ACTIVATION_OPS[activation](y if residual is None else y + residual)
    out, k = weight.shape
    rows = conv2d(x.reshape(1, 1, -1, k), weight.reshape(out, 1, 1, k), bias, activation=activation,
                  residual=None if residual is None else residual.reshape(1, 1, -1, out), packed=packed, op="linear")
    return rows.reshape(*x.shape[:-1], out)


def _mlx_conv2d(x, weight, bias, stride, padding, reflect):
    if reflect and any(padding):
        x = reflect_pad(x, *padding)
        padding = (0, 0)
    y = mx.conv2d(x, weight, stride=stride, padding=padding)
    return y if bias is None else y + bias


@functools.lru_cache(maxsize=64)
def _reflect_index(h: int, w: int, ph: int, pw: int) -> mx.array:
    """Flat source pixel (row * w + column) of each pixel of the reflect-padded map; pads of the
    map's size or more keep reflecting, as mx.pad does."""
    def rows(n: int, pad: int) -> np.ndarray:
        i = np.arange(-pad, n + pad)
        if n == 1:
            return np.zeros_like(i)
        i = np.mod(i, 2 * (n - 1))
        return np.where(i < n, i, 2 * (n - 1) - i)

    return mx.array((rows(h, ph)[:, None] * w + rows(w, pw)[None, :]).reshape(-1).astype(np.int32))


def reflect_pad(x: mx.array, ph: int, pw: int | None = None) -> mx.array:
    """torch's reflect padding (the edge pixel is not repeated) of H by ``ph`` and W by ``pw``
    (default ``ph``), NHWC: mx.pad(mode="reflect")'s values as one gather. MLX builds a reflect pad
    from 15 ops, 6 of them GPU launches (slice updates, a fill): LaMa's 110 pads were half of the
    ~2,000 ops of its compiled forward. The gather was faster on the CPU too (64 channels at
    256 px: 1.6 against 11.1 ms)."""
    pw = ph if pw is None else pw
    n, h, w, c = x.shape
    flat = mx.take(x.reshape(n, h * w, c), _reflect_index(h, w, ph, pw), axis=1)
    return flat.reshape(n, h + 2 * ph, w + 2 * pw, c)


def rfft2_parts(x: mx.array) -> mx.array:
    """Orthonormal 2-D real FFT over H and W of x (N, H, W, C), as float32 (N, H, W//2+1, 2C) with
    channel 2k = Re, 2k+1 = Im of channel k's spectrum (complex64's own memory layout).

    On the CPU numpy's pocketfft runs it (~3x faster than MLX's CPU FFT over the non-contiguous
    H, W axes here), and the interleaved parts are a view of its complex64 result, where MLX
    needs a stack of the real and imaginary parts."""
    host = _host(x) if _fast_path() else None
    _ran("rfft2", host)
    n, h, w, c = x.shape
    if host is None:
        spectrum = mx.fft.rfft2(x.astype(mx.float32), axes=(1, 2), norm="ortho")
        return mx.stack([mx.real(spectrum), mx.imag(spectrum)], axis=-1).reshape(n, h, w // 2 + 1, 2 * c)
    # order="C": numpy 1.x returns the spectrum with its last axis strided, which no float32 view can take
    spectrum = np.fft.rfft2(host, axes=(1, 2), norm="ortho").astype(np.complex64, order="C", copy=False)
    return mx.array(spectrum.view(np.float32).reshape(n, h, w // 2 + 1, 2 * c))


def irfft2_parts(parts: mx.array, size: tuple[int, int]) -> mx.array:
    """The inverse of rfft2_parts: parts (N, H, W//2+1, 2C) -> float32 (N, H, W, C), W = size[1]."""
    host = _host(parts) if _fast_path() else None
    _ran("irfft2", host)
    n, h, wh, c2 = parts.shape
    if host is None:
        pairs = parts.astype(mx.float32).reshape(n, h, wh, c2 // 2, 2)
        return mx.fft.irfft2(pairs[..., 0] + 1j * pairs[..., 1], s=size, axes=(1, 2), norm="ortho")
    spectrum = host.view(np.complex64)
    return mx.array(np.fft.irfft2(spectrum, s=size, axes=(1, 2), norm="ortho").astype(np.float32, copy=False))


def _shift_sum(taps: mx.array, phase_len: tuple[int, int], shifts) -> mx.array:
    """sum over (tap, (dh, dw)) of taps[:, :, :, tap] placed at offset (dh, dw) of a
    (N, phase_len[0], phase_len[1], C) canvas; taps: (N, H, W, T, C)."""
    n, h, w, _, c = taps.shape
    out = None
    for tap, (dh, dw) in shifts:
        part = mx.pad(taps[:, :, :, tap], ((0, 0), (dh, phase_len[0] - h - dh), (dw, phase_len[1] - w - dw), (0, 0)))
        out = part if out is None else out + part
    return out if out is not None else mx.zeros((n, *phase_len, c), taps.dtype)


def conv_transpose2d(x: mx.array, weight: mx.array, stride=1, padding=0, output_padding=0,
                     bias: mx.array | None = None, activation: str | None = None,
                     matrix: mx.array | None = None) -> mx.array:
    """activation(mx.conv_transpose2d(x, weight) + bias) (weight (O, KH, KW, I), no dilation) as one GEMM
    of every input pixel with all taps, then each output pixel's sum of the taps that reach it.

    out[ih*s + kh - p] += x[ih] @ w[kh]. On the CPU the sums, the bias and the activation are one
    threaded C pass (``_tap_sums``); elsewhere, and inside traces, ``_conv_transpose2d``'s MLX forms.
    ``matrix``: the weight's ``tap_matrix``, kept by the caller (else a copy is made per call).
    """
    sh, sw = pair(stride)
    ph, pw = pair(padding)
    oph, opw = pair(output_padding)
    co, kh, kw, ci = weight.shape
    n, h, w, _ = x.shape
    if _fast_path() and sh == sw:
        oh, ow = (h - 1) * sh - 2 * ph + kh + oph, (w - 1) * sw - 2 * pw + kw + opw
        y = _tap_sums(_all_taps(x, weight, matrix), bias, (oh, ow), (kh, kw), sh, (ph, pw), True, activation)
        if y is not None:
            _ran("conv_transpose2d", True)
            return _like(y, x)
    return biased_activation(_conv_transpose2d(x, weight, (sh, sw), (ph, pw), (oph, opw)), bias, activation)


def _conv_transpose2d(x: mx.array, weight: mx.array, stride, padding, output_padding) -> mx.array:
    """mx.conv_transpose2d's values: where the C sums do not run."""
    sh, sw = stride
    ph, pw = padding
    oph, opw = output_padding
    co, kh, kw, ci = weight.shape
    n, h, w, _ = x.shape
    if not _fast_path():
        if (kh, kw) == (sh, sw) and (ph, pw, oph, opw) == (0, 0, 0, 0):
            # taps that do not overlap (SAM's 2x2 stride 2, YOLO's mask protos): one GEMM and an
            # interleave; on the H100 1.5-1.9x faster than the GPU's conv_transpose2d, same values
            coverage.note("conv_transpose2d (GEMM + interleave)", coverage.MLX_OP)
            taps = x.reshape(-1, ci) @ weight.reshape(co * kh * kw, ci).T  # (N*H*W, (O, KH, KW))
            return taps.reshape(n, h, w, co, kh, kw).transpose(0, 1, 4, 2, 5, 3).reshape(n, h * kh, w * kw, co)
        _ran("conv_transpose2d", False)
        return mx.conv_transpose2d(x, weight, stride=(sh, sw), padding=(ph, pw), output_padding=(oph, opw))
    _ran("conv_transpose2d", True)
    return gemm_conv_transpose2d(x, weight, (sh, sw), (ph, pw), (oph, opw))


def gemm_conv_transpose2d(x: mx.array, weight: mx.array, stride, padding, output_padding) -> mx.array:
    """conv_transpose2d's GEMM + sub-pixel scatter form (MLX ops only, so any device runs it)."""
    sh, sw = pair(stride)
    ph, pw = pair(padding)
    oph, opw = pair(output_padding)
    co, kh, kw, ci = weight.shape
    n, h, w, _ = x.shape
    taps = _all_taps(x, weight)
    qh, qw = -(-kh // sh), -(-kw // sw)  # taps per phase along each axis, at most
    mh, mw = h + qh - 1, w + qw - 1  # rows / columns of one phase
    rows = []
    for rh in range(sh):
        cols = []
        for rw in range(sw):
            shifts = [(th * kw + tw, (th // sh, tw // sw))
                      for th in range(rh, kh, sh) for tw in range(rw, kw, sw)]
            cols.append(_shift_sum(taps, (mh, mw), shifts))
        rows.append(mx.stack(cols, axis=3))  # (N, mh, mw, sw, C)
    full = mx.stack(rows, axis=2).reshape(n, mh * sh, mw * sw, co)  # (N, mh, sh, mw, sw, C) interleaved
    oh, ow = (h - 1) * sh - 2 * ph + kh + oph, (w - 1) * sw - 2 * pw + kw + opw
    extra_h, extra_w = max(0, ph + oh - mh * sh), max(0, pw + ow - mw * sw)
    if extra_h or extra_w:  # output_padding past the last tap: zeros
        full = mx.pad(full, ((0, 0), (0, extra_h), (0, extra_w), (0, 0)))
    return full[:, ph:ph + oh, pw:pw + ow]


def _tap_sums(taps: mx.array, bias: mx.array | None, size: tuple[int, int], kernel: tuple[int, int], stride: int,
              padding: tuple[int, int], transposed: bool, activation: str | None) -> mx.array | None:
    """activation(bias + the sum of the ``taps`` (``_all_taps``) each output pixel of a convolution
    (``transposed``: a transposed convolution) of this kernel, stride and zero padding reads), float32
    (N, *size, O), by one threaded C pass; None where the C routine cannot run (a trace, no library)."""
    n, h, w, _, co = taps.shape
    lib = _library() if _fast_path() else None
    out = _output((n, *size, co)) if lib is not None else None
    host = _host(taps, out) if lib is not None else None
    b = _host(bias) if host is not None and bias is not None else None
    if host is None:
        return None
    lib.zoo_tap_sum_f32(_ptr(host), _ptr(b), _ptr(_view(out)), n, h, w, co, *kernel, stride,
                        *padding, int(transposed), *size, ACTIVATIONS[activation][0], _threads())
    return out


def tap_matrix(weight: mx.array) -> mx.array:
    """A (O, KH, KW, I) weight as ``_all_taps``' GEMM operand (I, KH*KW*O): a transposed copy."""
    co, kh, kw, ci = weight.shape
    return weight.reshape(co, kh * kw, ci).transpose(2, 1, 0).reshape(ci, kh * kw * co)


def _all_taps(x: mx.array, weight: mx.array, matrix: mx.array | None = None) -> mx.array:
    """Every input pixel times every tap of a (O, KH, KW, I) weight (``matrix``: its ``tap_matrix``), as
    one GEMM: (N, H, W, KH*KW, O)."""
    co, kh, kw, ci = weight.shape
    rows, matrix = x.reshape(-1, ci), tap_matrix(weight) if matrix is None else matrix
    taps = _batched_product(rows, matrix[None])
    return (rows @ matrix if taps is None else taps).reshape(*x.shape[:3], kh * kw, co)


def _gemm_form(x: mx.array) -> bool:
    """Whether a convolution of ``x`` runs as its GEMM form rather than MLX's: on the CPU, and in
    float32 elsewhere, where cuDNN's engines without TF32 were slower on an H100 (1x1: 1.1-2.1x
    SGEMM's time, each with a workspace of up to 250 MiB; LaMa's last conv, 7x7 64 -> 3 at 518 px:
    3.27 ms against 0.91). In float16 cuDNN was as fast or faster (docs/speed-gpu.md)."""
    return _fast_path() or x.dtype == mx.float32


def conv2d_few_outputs(x: mx.array, weight: mx.array, bias: mx.array | None = None,
                       activation: str | None = None) -> mx.array:
    """activation(mx.conv2d(x, weight) + bias) (stride 1, no padding: pad first) for a weight (O, KH, KW,
    I) with few output channels: one GEMM of every input pixel with all taps, then on the CPU each
    output pixel's sum of its taps, the bias and the activation in one threaded C pass; elsewhere
    ``gemm_taps_conv2d`` where ``_gemm_form`` says."""
    co, kh, kw, ci = weight.shape
    gemm = _gemm_form(x) and not (kh == 1 and kw == 1)
    n, h, w, _ = x.shape
    y = _tap_sums(_all_taps(x, weight), bias, (h - kh + 1, w - kw + 1), (kh, kw), 1, (0, 0), False, activation) \
        if gemm and _fast_path() else None
    _ran("conv2d (few outputs)", y)
    if y is not None:
        return _like(y, x)
    return biased_activation(gemm_taps_conv2d(x, weight) if gemm else mx.conv2d(x, weight), bias, activation)


def gemm_taps_conv2d(x: mx.array, weight: mx.array) -> mx.array:
    """mx.conv2d(x, weight), stride 1, no padding: one GEMM of every input pixel with all KH*KW taps,
    then each tap's plane summed at its shift (in float32); no im2col copy of the input."""
    co, kh, kw, ci = weight.shape
    n, h, w, _ = x.shape
    oh, ow = h - kh + 1, w - kw + 1
    taps = _all_taps(x, weight)
    out = None
    for th in range(kh):
        for tw in range(kw):
            part = taps[:, th:th + oh, tw:tw + ow, th * kw + tw].astype(mx.float32)
            out = part if out is None else out + part
    return out.astype(x.dtype)


def pointwise_conv2d(x: mx.array, weight: mx.array) -> mx.array:
    """mx.conv2d(x, weight) for a 1x1 weight (O, 1, 1, I), stride 1, no padding, as one matmul where
    ``_gemm_form`` says."""
    _ran("conv2d 1x1", _fast_path())
    if not _gemm_form(x):
        return mx.conv2d(x, weight)
    co, _, _, ci = weight.shape
    return (x.reshape(-1, ci) @ weight.reshape(co, ci).T).reshape(*x.shape[:-1], co)
