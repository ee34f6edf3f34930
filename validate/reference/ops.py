"""Numpy CPU ops with PyTorch semantics, NCHW, float64.

Written from the PyTorch documentation of each op, not from the MLX code: the
point of the reference is to be an independent second implementation.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

_calibration: list | None = None  # inside batch_norm_statistics(): values per channel each BatchNorm saw


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """(N, C, H, W) -> (N, C, Ho, Wo, kh, kw) strided view of the receptive fields."""
    kh, kw = kernel
    span_h, span_w = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (span_h, span_w), axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]


IM2COL_CHUNK = 1 << 24  # patch-matrix elements per product (128 MB in float64)


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
        # im2col + a matrix product, over at most IM2COL_CHUNK patch elements at a time: the patch
        # matrix of a wide kernel on a large map would take gigabytes (each output row is the same
        # dot product; BLAS may sum it in another order: float64 roundoff, ~1e-16)
        patches = win.transpose(0, 2, 3, 1, 4, 5)  # N, Ho, Wo, C, kh, kw (a view)
        flat = weight.reshape(cout, -1).T
        out = np.empty((n, ho, wo, cout), np.result_type(x, weight))
        rows = max(1, IM2COL_CHUNK // (wo * cin_g * kh * kw))
        for i in range(n):
            for top in range(0, ho, rows):
                cols = patches[i, top:top + rows].reshape(-1, cin_g * kh * kw)
                out[i, top:top + rows] = (cols @ flat).reshape(-1, wo, cout)
        out = out.transpose(0, 3, 1, 2)
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
    """Eval-mode BatchNorm over the channel axis 1 (inside batch_norm_statistics(): training mode)."""
    if _calibration is not None:
        axes = (0, *range(2, x.ndim))
        count = x.size // x.shape[1]
        _calibration.append(count)
        running_mean[...] = x.mean(axis=axes)
        # one value has no unbiased variance (0/0, with numpy's warnings): the caller refuses the input (validate.run)
        running_var[...] = x.var(axis=axes, ddof=1 if count > 1 else 0)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = weight / np.sqrt(running_var + eps)
    return (x - running_mean.reshape(shape)) * scale.reshape(shape) + bias.reshape(shape)


@contextlib.contextmanager
def batch_norm_statistics():
    """Inside this, batch_norm first overwrites the running mean and variance it is handed, in
    place, with its input's per-channel mean and unbiased variance (torch's training-mode update
    at momentum 1), then normalises with them: one forward pass gives every BatchNorm the
    statistics of what reaches it, as training leaves them in a real checkpoint (the model
    references hand batch_norm a float64 state dict's own arrays: ``astype(copy=False)``). Yields
    the list of the number of values per channel each BatchNorm saw."""
    global _calibration
    _calibration = []
    try:
        yield _calibration
    finally:
        _calibration = None


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


def group_norm(x, groups: int, weight, bias, eps=1e-5):
    """torch group_norm on NCHW: statistics over each group of C/groups channels and H, W."""
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    mean = g.mean(axis=-1, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * weight.reshape(shape) + bias.reshape(shape)


def avg_pool2d(x, kernel, stride=None, padding=0):
    """torch avg_pool2d with count_include_pad=True (its default): zero padding counts in the mean."""
    kernel = _pair(kernel)
    stride = _pair(stride if stride is not None else kernel)
    p = _pair(padding)
    x = np.pad(x, ((0, 0), (0, 0), (p[0],) * 2, (p[1],) * 2))
    return _windows(x, kernel, stride, (1, 1)).mean(axis=(-2, -1))


_CUBIC_A = -0.75  # torch's bicubic (upsample_bicubic2d) coefficient


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """Weights of the taps at offsets -1, 0, 1, 2 from floor(src), t = src - floor(src): (len(t), 4)."""
    a = _CUBIC_A
    near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1  # |d| <= 1
    far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # 1 < |d| < 2
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _cubic_axis(in_size: int, out_size: int, align_corners: bool) -> np.ndarray:
    """(out_size, in_size) matrix of one axis' bicubic interpolation, indices clamped at the border."""
    dst = np.arange(out_size, dtype=np.float64)
    if align_corners:
        src = dst * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros(out_size)
    else:
        src = (dst + 0.5) * (in_size / out_size) - 0.5  # not clamped at 0 for cubic, unlike bilinear
    base = np.floor(src)
    weights = _cubic_weights(src - base)
    matrix = np.zeros((out_size, in_size))
    for tap in range(4):
        index = np.clip(base.astype(np.int64) - 1 + tap, 0, in_size - 1)
        np.add.at(matrix, (np.arange(out_size), index), weights[:, tap])
    return matrix


def upsample_bicubic(x, size: tuple[int, int], align_corners: bool = False):
    """torch F.interpolate(x, size, mode="bicubic", align_corners=...) on NCHW, separable."""
    rows = _cubic_axis(x.shape[2], size[0], align_corners)
    cols = _cubic_axis(x.shape[3], size[1], align_corners)
    return np.einsum("oh,nchw,pw->ncop", rows, x, cols)


def _dft_matrix(n: int, sign: int) -> np.ndarray:
    k = np.arange(n)
    return np.exp(sign * 2j * np.pi * np.outer(k, k) / n)


def rfft2_ortho(x):
    """torch.fft.rfft2(x, norm="ortho") over the last two axes, as explicit DFT sums (no FFT
    library: an independent check of one): (..., H, W) -> complex (..., H, W//2+1)."""
    h, w = x.shape[-2:]
    spectrum = _dft_matrix(h, -1) @ x @ _dft_matrix(w, -1)[:, : w // 2 + 1]
    return spectrum / math.sqrt(h * w)


def irfft2_ortho(spectrum, size: tuple[int, int]):
    """torch.fft.irfft2(spectrum, s=size, norm="ortho") as explicit sums: a complex inverse DFT over
    H, then the real inverse over W from the half spectrum, each column l < W/2 counted twice for
    its conjugate; the imaginary parts of the DC and Nyquist columns do not enter (as pocketfft's)."""
    h, w = size
    rows = _dft_matrix(h, 1) @ spectrum[..., :h, : w // 2 + 1]
    half = rows.shape[-1]
    count = np.full(half, 2.0)
    count[0] = 1.0
    if w % 2 == 0:
        count[w // 2] = 1.0
    phase = np.exp(2j * np.pi * np.outer(np.arange(half), np.arange(w)) / w)
    return np.real((rows * count) @ phase) / math.sqrt(h * w)
