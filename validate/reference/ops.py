"""Numpy CPU ops with PyTorch semantics, NCHW, float64.

Written from the PyTorch documentation of each op, not from the MLX code: the
point of the reference is to be an independent second implementation.
"""
from __future__ import annotations

import math

import numpy as np

def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """(N, C, H, W) -> (N, C, Ho, Wo, kh, kw) strided view of the receptive fields."""
    kh, kw = kernel
    span_h, span_w = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (span_h, span_w), axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d: x (N, Cin, H, W), weight (Cout, Cin/groups, kh, kw)."""
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    x = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    cout, cin_g, kh, kw = weight.shape
    win = _windows(x, (kh, kw), stride, dilation)  # N, C, Ho, Wo, kh, kw
    n, _, ho, wo = win.shape[:4]
    if kh == kw == 1 and groups == 1:
        # pointwise: one matrix product per image, no im2col copy
        out = np.matmul(weight.reshape(cout, cin_g), np.ascontiguousarray(win[..., 0, 0]).reshape(n, cin_g, ho * wo))
        out = out.reshape(n, cout, ho, wo)
    elif groups == 1:
        # im2col + one matrix product
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, cin_g * kh * kw)
        out = (cols @ weight.reshape(cout, -1).T).reshape(n, ho, wo, cout).transpose(0, 3, 1, 2)
    elif groups == x.shape[1] == cout and cin_g == 1:
        # depthwise: a sum of shifted products, one per tap (einsum over the groups is slow here)
        out = np.zeros((n, cout, ho, wo))
        for i in range(kh):
            for j in range(kw):
                out += win[..., i, j] * weight[:, 0, i, j].reshape(1, -1, 1, 1)
    else:
        win = win.reshape(n, groups, cin_g, ho, wo, kh, kw)
        w = weight.reshape(groups, cout // groups, cin_g, kh, kw)
        out = np.einsum("ngchwij,gocij->ngohw", win, w, optimize=True).reshape(n, cout, ho, wo)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return np.ascontiguousarray(out)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0):
    """torch.nn.functional.conv_transpose2d (groups=1): weight (Cin, Cout, kh, kw).

    The adjoint of a strided conv: spread the input out by ``stride``, pad by
    k-1-padding (plus output_padding at the end), convolve with the flipped kernel.
    """
    stride, padding, output_padding = _pair(stride), _pair(padding), _pair(output_padding)
    n, c, h, w = x.shape
    _, cout, kh, kw = weight.shape
    spread = np.zeros((n, c, (h - 1) * stride[0] + 1, (w - 1) * stride[1] + 1), x.dtype)
    spread[:, :, :: stride[0], :: stride[1]] = x
    ph, pw = kh - 1 - padding[0], kw - 1 - padding[1]
    spread = np.pad(spread, ((0, 0), (0, 0), (ph, ph + output_padding[0]), (pw, pw + output_padding[1])))
    flipped = weight[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
    return conv2d(spread, np.ascontiguousarray(flipped), bias)


def batch_norm(x, weight, bias, running_mean, running_var, eps=1e-5):
    """Eval-mode BatchNorm over the channel axis 1."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = weight / np.sqrt(running_var + eps)
    return (x - running_mean.reshape(shape)) * scale.reshape(shape) + bias.reshape(shape)


def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last axis."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def layer_norm_2d(x, weight, bias, eps=1e-6):
    """LayerNorm over the channel axis of NCHW (SAM's LayerNorm2d)."""
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)


def linear(x, weight, bias=None):
    out = x @ weight.T
    return out + bias if bias is not None else out


def relu(x):
    return np.maximum(x, 0.0)


def sigmoid(x):
    # split by sign so exp never overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x):
    return x * sigmoid(x)


_ERF_WIDTH, _ERF_PIECES, _ERF_DEGREE = 0.25, 24, 10


def _erf_tables() -> list[np.ndarray]:
    """Per piece of [0, 6) of width 0.25, the degree-10 polynomial (in t in [-1, 1] across the
    piece) through math.erf at the Chebyshev points: within 2e-15 of math.erf."""
    erf = np.vectorize(math.erf)
    cheb = np.polynomial.chebyshev
    rows = []
    for p in range(_ERF_PIECES):
        center = (p + 0.5) * _ERF_WIDTH
        c = cheb.chebinterpolate(lambda t, center=center: erf(center + t * _ERF_WIDTH / 2), _ERF_DEGREE)
        rows.append(np.pad(cheb.cheb2poly(c), (0, _ERF_DEGREE + 1 - len(c))))
    return [np.ascontiguousarray(column) for column in np.array(rows).T]


_ERF_COLUMNS = _erf_tables()  # _ERF_COLUMNS[k][piece]: coefficient of t**k


def _erf_chunk(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    piece = np.minimum((a * (1 / _ERF_WIDTH)).astype(np.intp), _ERF_PIECES - 1)
    t = (a - (piece + 0.5) * _ERF_WIDTH) * (2 / _ERF_WIDTH)
    y = np.take(_ERF_COLUMNS[-1], piece)
    for column in _ERF_COLUMNS[-2::-1]:  # Horner
        y *= t
        y += np.take(column, piece)
    y[a >= _ERF_PIECES * _ERF_WIDTH] = 1.0  # erf(6) = 1 - 2e-17
    return np.copysign(y, x)


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorised erf, float64, within 2e-15 of math.erf (math.erf element by element is
    too slow for the 140 million activations of one MobileSAM pass at 1024 x 1024)."""
    flat = np.asarray(x, dtype=np.float64).ravel()
    out = np.empty_like(flat)
    step = 1 << 15  # chunks that stay in cache
    for start in range(0, flat.size, step):
        out[start : start + step] = _erf_chunk(flat[start : start + step])
    return out.reshape(np.shape(x))


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, torch.nn.GELU()'s default: x * Phi(x)."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def max_pool2d(x, kernel, stride=None, padding=0):
    """torch max_pool2d: padding counts as -inf."""
    kernel = _pair(kernel)
    stride = _pair(stride if stride is not None else kernel)
    p = _pair(padding)
    x = np.pad(x, ((0, 0), (0, 0), (p[0],) * 2, (p[1],) * 2), constant_values=-np.inf)
    return _windows(x, kernel, stride, (1, 1)).max(axis=(-2, -1))


def adaptive_avg_pool_1x1(x):
    return x.mean(axis=(2, 3), keepdims=True)


def upsample_nearest(x, scale: int):
    return x.repeat(scale, axis=2).repeat(scale, axis=3)


def pad_reflect(x, pad: int):
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="reflect")
