"""CPU forms of the ops that MLX's CPU backend runs slowly; MLX's own op everywhere else.

Measured on Linux x86-64, 2 cores (docs/speed-cpu.md has the figures and ratios):

- sigmoid / SiLU (~20 ns per element) and exact GELU (~35 ns; an add takes 0.3 ns):
  MLX's x86 wheel is built for baseline x86-64, so its element-wise ops run one float
  at a time with exp/erf/fma/floor as library calls (mlx/backend/cpu/simd: no SIMD
  width on x86; unary.h). Here: one vectorised pass in C (zoo/native/cpu_ops.c);
- BatchNorm at inference: MLX's nn.BatchNorm makes four passes over the map
  ((x - mean) * rsqrt(var + eps) * weight + bias). Here: one pass of x * scale + shift;
- softmax, and so attention (MLX's CPU scaled_dot_product_attention is its unfused
  fallback: matmul, softmax, matmul): the same slow exp. Here: a vectorised row softmax in C
  between MLX's (OpenBLAS) matmuls;
- depthwise convolution (~0.5 GFLOP/s): any ``groups > 1`` takes MLX's naive
  ``slow_conv_2D`` loop (conv.cpp). Here: a channel-vectorised loop in C;
- transposed convolution (~1.2 GFLOP/s): MLX runs it as a convolution with input
  dilation, which also takes ``slow_conv_2D``. Here: ONE GEMM (input x all kernel taps)
  and a sub-pixel scatter (strided adds per output phase) in MLX ops, so OpenBLAS does
  the arithmetic;
- 1x1 convolutions: MLX's explicit-GEMM convolution copies the input twice (a padded
  copy, then the patch matrix) even when the patch is one pixel. Here: a matmul;
- convolutions with few output channels (LaMa's last 7x7 conv 64->3): MLX's explicit
  GEMM first copies every input patch (im2col: H*W x 3136 floats, ~0.8 GB at 256 px) for
  a GEMM with 3 columns. Here: one GEMM of the input with all taps, then the taps'
  outputs are summed at their shifts.

Each function takes and returns mx.arrays in MLX's NHWC layouts. The C routines need
data: on the CPU they evaluate their input first; inside ``mx.compile``/``vmap`` (no data
yet) they fall back to MLX's op, as they do on the GPU, without the compiled library,
or with ``ZOO_KERNELS=fallback``. float16/bfloat16 inputs are computed in float32 and
rounded once. Models call these through zoo.models.layers.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.kernels.core import ENV_VAR

_lib: ctypes.CDLL | None = None
_lib_tried = False
_PTR = ctypes.POINTER(ctypes.c_float)


def _library() -> ctypes.CDLL | None:
    global _lib, _lib_tried
    if not _lib_tried:
        _lib_tried = True
        spec = importlib.util.find_spec("zoo.native.cpu_ops")
        if spec is not None and spec.origin:
            try:
                lib = ctypes.CDLL(spec.origin)
            except OSError:
                lib = None
            if lib is not None:
                size = ctypes.c_ssize_t
                for name in ("zoo_sigmoid_f32", "zoo_silu_f32", "zoo_gelu_f32"):
                    getattr(lib, name).argtypes = [_PTR, _PTR, size, ctypes.c_int]
                lib.zoo_channel_affine_f32.argtypes = [_PTR, _PTR, _PTR, _PTR, size, size, ctypes.c_int]
                lib.zoo_softmax_f32.argtypes = [_PTR, _PTR, size, size, ctypes.c_int]
                lib.zoo_depthwise_conv2d_f32.argtypes = [_PTR, _PTR, _PTR] + [ctypes.c_int] * 12
                _lib = lib
    return _lib


def on_cpu() -> bool:
    """Whether MLX's default device is the CPU (the one device decision of zoo.devices)."""
    return mx.default_device() == mx.cpu


def native_available() -> bool:
    """The compiled C routines are loaded and not switched off (ZOO_KERNELS=fallback)."""
    return os.environ.get(ENV_VAR, "").lower() != "fallback" and _library() is not None


def _fast_path() -> bool:
    return on_cpu() and os.environ.get(ENV_VAR, "").lower() != "fallback"


def _threads() -> int:
    from zoo import blas

    return int(blas.info().get("threads") or os.cpu_count() or 1)


def _host(x: mx.array) -> np.ndarray | None:
    """x as a contiguous float32 numpy array sharing MLX's buffer where it can; None while
    MLX is tracing (compile/vmap/grad: there is no data to hand over yet)."""
    if x.dtype != mx.float32:
        x = x.astype(mx.float32)
    try:
        mx.eval(x)
    except ValueError:  # "Attempting to eval an array during function transformations"
        return None
    return np.ascontiguousarray(np.asarray(x))


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(_PTR)


def _output(shape) -> tuple[mx.array, np.ndarray]:
    """A fresh float32 MLX array and a writable numpy view of its buffer, for a C routine to fill.

    Writing through the view is MLX's documented buffer-protocol behaviour; the array is new
    and referenced nowhere else. This avoids a copy of a numpy result into MLX (mx.array(...)),
    which costs as much as the routine itself on large maps."""
    out = mx.zeros(shape, mx.float32)
    mx.eval(out)
    return out, np.asarray(out)


def _like(out: mx.array, x: mx.array) -> mx.array:
    return out if x.dtype == mx.float32 else out.astype(x.dtype)


def _unary(name: str, x: mx.array, mlx_op) -> mx.array:
    lib = _library() if _fast_path() else None
    host = _host(x) if lib is not None else None
    if host is None:
        return mlx_op(x)
    out, view = _output(host.shape)
    getattr(lib, name)(_ptr(host), _ptr(view), host.size, _threads())
    return _like(out, x)


def sigmoid(x: mx.array) -> mx.array:
    return _unary("zoo_sigmoid_f32", x, mx.sigmoid)


def silu(x: mx.array) -> mx.array:
    return _unary("zoo_silu_f32", x, nn.silu)


def gelu(x: mx.array) -> mx.array:
    """Exact (erf) GELU, x * Phi(x)."""
    return _unary("zoo_gelu_f32", x, nn.gelu)


def channel_affine(x: mx.array, scale: mx.array, shift: mx.array) -> mx.array:
    """x * scale + shift over the last axis (per channel), computed in float32."""
    lib = _library() if _fast_path() else None
    host = _host(x) if lib is not None else None
    params = (_host(scale), _host(shift)) if host is not None else (None, None)
    if params[0] is None:
        return (x.astype(mx.float32) * scale + shift).astype(x.dtype)
    out, view = _output(host.shape)
    c = host.shape[-1]
    lib.zoo_channel_affine_f32(_ptr(host), _ptr(params[0]), _ptr(params[1]), _ptr(view), host.size // c, c, _threads())
    return _like(out, x)


def softmax(x: mx.array) -> mx.array:
    """Softmax over the last axis (float32 maths for every dtype, as MLX's precise softmax)."""
    lib = _library() if _fast_path() else None
    host = _host(x) if lib is not None else None
    if host is None:
        return mx.softmax(x, axis=-1, precise=True)
    out, view = _output(host.shape)
    cols = host.shape[-1] if host.ndim else 1
    lib.zoo_softmax_f32(_ptr(host), _ptr(view), host.size // max(cols, 1), cols, _threads())
    return _like(out, x)


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None = None) -> mx.array:
    """mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask) for an additive mask
    (or none); on the CPU the fallback MLX itself runs there, with softmax() above."""
    if not _fast_path():
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    scores = (q * scale) @ k.swapaxes(-1, -2)
    if mask is not None:
        scores = scores + mask
    return softmax(scores) @ v


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def depthwise_conv2d(x: mx.array, weight: mx.array, stride=1, padding=0) -> mx.array:
    """mx.conv2d(x, weight, stride, padding, groups=C) for weight (C, KH, KW, 1), no dilation."""
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    c, kh, kw, _ = weight.shape
    lib = _library() if _fast_path() and sh == sw else None
    host = _host(x) if lib is not None else None
    wt = _host(weight.reshape(c, kh * kw).T) if host is not None else None
    if wt is None:
        return mx.conv2d(x, weight, stride=(sh, sw), padding=(ph, pw), groups=c)
    n, h, w, _ = host.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out, view = _output((n, oh, ow, c))
    lib.zoo_depthwise_conv2d_f32(_ptr(host), _ptr(wt), _ptr(view), n, h, w, c, kh, kw, sh, ph, pw, oh, ow, _threads())
    return _like(out, x)


def _shift_sum(taps: mx.array, phase_len: tuple[int, int], shifts) -> mx.array:
    """sum over (tap, (dh, dw)) of taps[:, :, :, tap] placed at offset (dh, dw) of a
    (N, phase_len[0], phase_len[1], C) canvas; taps: (N, H, W, T, C)."""
    n, h, w, _, c = taps.shape
    out = None
    for tap, (dh, dw) in shifts:
        part = mx.pad(taps[:, :, :, tap], ((0, 0), (dh, phase_len[0] - h - dh), (dw, phase_len[1] - w - dw), (0, 0)))
        out = part if out is None else out + part
    return out if out is not None else mx.zeros((n, *phase_len, c), taps.dtype)


def conv_transpose2d(x: mx.array, weight: mx.array, stride=1, padding=0, output_padding=0) -> mx.array:
    """mx.conv_transpose2d (weight (O, KH, KW, I), no dilation) as one GEMM and a sub-pixel scatter.

    out[ih*s + kh - p] += x[ih] @ w[kh]: the GEMM computes every (input pixel, tap) product;
    taps with kh = q*s + r land on output phase r shifted by q input rows, so each of the
    s*s phases is a sum of shifted tap planes, and interleaving the phases gives the output.
    """
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    oph, opw = _pair(output_padding)
    if not _fast_path():
        return mx.conv_transpose2d(x, weight, stride=(sh, sw), padding=(ph, pw), output_padding=(oph, opw))
    co, kh, kw, ci = weight.shape
    n, h, w, _ = x.shape
    taps = (x.reshape(-1, ci) @ weight.reshape(co, kh * kw, ci).transpose(2, 1, 0).reshape(ci, kh * kw * co))
    taps = taps.reshape(n, h, w, kh * kw, co)
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


def conv2d_few_outputs(x: mx.array, weight: mx.array) -> mx.array:
    """mx.conv2d(x, weight) (stride 1, no padding: pad first) for a weight (O, KH, KW, I) with few
    output channels: one GEMM of every input pixel with all KH*KW taps, then each tap's plane
    summed at its shift; no im2col copy of the input."""
    co, kh, kw, ci = weight.shape
    if not _fast_path() or (kh == 1 and kw == 1):
        return mx.conv2d(x, weight)
    n, h, w, _ = x.shape
    oh, ow = h - kh + 1, w - kw + 1
    taps = (x.reshape(-1, ci) @ weight.reshape(co, kh * kw, ci).transpose(2, 1, 0).reshape(ci, kh * kw * co))
    taps = taps.reshape(n, h, w, kh * kw, co)
    out = None
    for th in range(kh):
        for tw in range(kw):
            part = taps[:, th:th + oh, tw:tw + ow, th * kw + tw]
            out = part if out is None else out + part
    return out


def pointwise_conv2d(x: mx.array, weight: mx.array) -> mx.array:
    """mx.conv2d(x, weight) for a 1x1 weight (O, 1, 1, I), stride 1, no padding: one matmul."""
    if not _fast_path():
        return mx.conv2d(x, weight)
    co, _, _, ci = weight.shape
    return (x.reshape(-1, ci) @ weight.reshape(co, ci).T).reshape(*x.shape[:-1], co)
