"""Known-answer check of every primitive the four models run, against the numpy reference.

``python -m zoo.validate ops``: each op is called the way the models call it (zoo.models.layers,
zoo.kernels, zoo.kernels.cpu, MLX) on the device chosen for the process, and compared with
validate/reference (float64, NCHW, numpy only) fed the very values the MLX side saw (its inputs
and weights already rounded to the dtype), so the error measured is the op's own.

Inputs cover what breaks ops elsewhere: odd sizes, non-contiguous views (transposed, sliced),
broadcast arrays (zero strides), all-zero and large-magnitude values. Each row names the
implementation that ran, as zoo.kernels.coverage is told it (a custom Metal/CUDA kernel, a
CPU form of zoo.kernels.cpu, or an MLX op); a row that ran a custom path runs again with
``ZOO_KERNELS=fallback`` as ``NAME [fallback]``, so both sides of the switch are checked on
the device. Two rows check that mixing devices or dtypes raises.

Error: max abs error / max |ref| (validate.engine.compare). Tolerance: the layer-parity
engine's isolated-mode bound for the dtype (one op is one layer: a few unit roundoffs of
its inputs, weights and accumulation), and 0 for ops that only select or move values
(pooling's max, padding, nearest resize, layouts, NMS indices).
"""
from __future__ import annotations

import contextlib
import datetime
import math
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo import devices
from zoo.errors import ZooError
from zoo.kernels import core, coverage
from zoo.kernels import cpu as cpu_ops
from zoo.kernels import nms, resize, sppf_maxpool
from zoo.kernels.selftest import variant
from zoo.models import layers
from zoo.validate.engine import TOLERANCES, compare
from zoo.validate.reference import kernels as ref_kernels
from zoo.validate.reference import ops as ref

LARGE = 1e3  # "large magnitude": products and sums stay inside float16's range (65504)


def tolerance(dtype: str, exact: bool) -> float:
    return 0.0 if exact else TOLERANCES[dtype]["isolated"]


def host(a: mx.array) -> np.ndarray:
    """An MLX value as float64 numpy (integers kept), in MLX's own layout."""
    if mx.issubdtype(a.dtype, mx.floating):
        return np.array(a.astype(mx.float32)).astype(np.float64)
    return np.array(a)


def nchw(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 3, 1, 2)


def nhwc(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1)


class Inputs:
    """Random inputs of one check in one dtype: ``array`` makes MLX arrays; the reference reads
    them back with ``host``, so both sides see the same rounded values."""

    def __init__(self, dtype: str, seed: int):
        self.dtype = devices.DTYPES[dtype]
        self.rng = np.random.default_rng(seed)

    def array(self, shape, kind: str = "normal", scale: float = 1.0, offset: float = 0.0) -> mx.array:
        """kind: normal | zero | large (normal x LARGE) | view (a transposed, strided-sliced view of
        a larger array) | broadcast (rows repeated along axis 1 by zero strides)."""
        if kind == "zero":
            return mx.zeros(shape, self.dtype)
        if kind == "view":  # (N, H, W, ...) as base (N, W, 2H, ...).swapaxes(1, 2)[:, ::2]
            base_shape = (shape[0], shape[2], 2 * shape[1], *shape[3:])
            base = self.array(base_shape, scale=scale, offset=offset)
            view = base.swapaxes(1, 2)[:, ::2]
            mx.eval(view)
            return view
        if kind == "broadcast":
            row = self.array((shape[0], 1, *shape[2:]), scale=scale, offset=offset)
            return mx.broadcast_to(row, shape)
        if kind == "large":
            scale *= LARGE
        elif kind != "normal":
            raise ValueError(f"unknown input kind {kind!r}")
        values = self.rng.standard_normal(shape) * scale + offset
        return mx.array(values.astype(np.float32)).astype(self.dtype)

    def weight(self, shape, fan_in: int) -> mx.array:
        return self.array(shape, scale=1 / math.sqrt(fan_in))

    def module(self, module: nn.Module) -> nn.Module:
        """Every parameter random in the dtype (a norm's running variance positive), eval mode."""
        for name, value in module.parameters().items():
            if name == "weight" and value.ndim > 1:
                module[name] = self.weight(value.shape, int(np.prod(value.shape[1:])))
            else:
                module[name] = self.array(value.shape, scale=0.5, offset=1.0 if name == "weight" else 0.0)
        if "running_var" in module:
            module.running_var = mx.array(self.rng.uniform(0.5, 2.0, module.running_var.shape).astype(np.float32)).astype(self.dtype)
            module.running_mean = self.array(module.running_mean.shape, scale=0.5)
        module.eval()
        return module


# A check builds its inputs and returns (the MLX call, the reference result in the MLX layout);
# a check of a refusal returns (the call that must raise ZooError, None).
Build = Callable[[Inputs], tuple[Callable[[], object], object]]


@dataclass(frozen=True)
class Check:
    name: str
    api: str  # what the models call
    build: Build
    exact: bool = False


CHECKS: list[Check] = []


def check(name: str, api: str, exact: bool = False):
    def register(build: Build) -> Build:
        CHECKS.append(Check(name, api, build, exact))
        return build

    return register


# ---- convolutions: layers.Conv2d is what every family calls ----

def _conv(m: Inputs, shape, cout, k, stride=1, padding=0, dilation=1, groups=1, kind="normal",
          reflect=0, cls=layers.Conv2d):
    n, h, w, cin = shape
    conv = m.module(cls(cin, cout, k, stride=stride, padding=padding, dilation=dilation, groups=groups))
    if reflect:
        conv.reflect_padding = reflect  # LaMa's reflect-padded convolutions set it the same way
    x = m.array(shape, kind)
    xr = nchw(host(x))
    if reflect:
        xr = np.pad(xr, ((0, 0), (0, 0), (reflect, reflect), (reflect, reflect)), mode="reflect")
    expected = ref.conv2d(xr, nchw(host(conv.weight)), host(conv.bias), stride, padding, dilation, groups)
    return lambda: conv(x), nhwc(expected)


for _name, _kwargs in {
    "conv2d/3x3": dict(shape=(2, 11, 13, 5), cout=8, k=3, padding=1),
    "conv2d/strided": dict(shape=(1, 13, 12, 6), cout=8, k=3, stride=2, padding=1),
    "conv2d/strided-2x1": dict(shape=(1, 9, 10, 4), cout=6, k=3, stride=(2, 1), padding=1),
    "conv2d/dilated": dict(shape=(1, 12, 11, 4), cout=6, k=3, padding=2, dilation=2),
    "conv2d/grouped": dict(shape=(1, 9, 11, 8), cout=6, k=3, padding=1, groups=2),
    "conv2d/depthwise": dict(shape=(2, 10, 9, 12), cout=12, k=3, padding=1, groups=12),
    "conv2d/depthwise-strided": dict(shape=(1, 11, 11, 8), cout=8, k=3, stride=2, padding=1, groups=8),
    "conv2d/1x1": dict(shape=(2, 7, 9, 16), cout=12, k=1),
    "conv2d/few-outputs": dict(shape=(1, 12, 10, 32), cout=3, k=7),
    "conv2d/reflect": dict(shape=(1, 9, 11, 4), cout=5, k=7, reflect=3),
    "conv2d/view-input": dict(shape=(1, 9, 11, 5), cout=8, k=3, padding=1, kind="view"),
    "conv2d/broadcast-input": dict(shape=(2, 7, 9, 5), cout=8, k=3, padding=1, kind="broadcast"),
    "conv2d/zero-input": dict(shape=(1, 8, 8, 5), cout=8, k=3, padding=1, kind="zero"),
    "conv2d/large-input": dict(shape=(1, 8, 9, 5), cout=8, k=3, padding=1, kind="large"),
    "conv2d/mlx-2x2-stride2": dict(shape=(1, 12, 10, 1), cout=4, k=2, stride=2, cls=nn.Conv2d),
}.items():
    check(_name, "nn.Conv2d" if _kwargs.get("cls") is nn.Conv2d else "layers.Conv2d")(
        lambda m, kw=_kwargs: _conv(m, **kw))


def _conv_transpose(m: Inputs, shape, cout, k, stride, padding=0, output_padding=0, kind="normal"):
    n, h, w, cin = shape
    conv = m.module(layers.ConvTranspose2d(cin, cout, k, stride=stride, padding=padding, output_padding=output_padding))
    x = m.array(shape, kind)
    weight = host(conv.weight).transpose(3, 0, 1, 2)  # MLX (O, KH, KW, I) -> torch (I, O, KH, KW)
    expected = ref.conv_transpose2d(nchw(host(x)), weight, host(conv.bias), stride, padding, output_padding)
    return lambda: conv(x), nhwc(expected)


check("conv_transpose2d/k3s2p1op1", "layers.ConvTranspose2d")(  # LaMa's upsampling
    lambda m: _conv_transpose(m, (1, 7, 9, 8), 6, 3, 2, 1, 1))
check("conv_transpose2d/k2s2", "layers.ConvTranspose2d")(  # MobileSAM's mask upscaling
    lambda m: _conv_transpose(m, (2, 5, 7, 8), 4, 2, 2))
check("conv_transpose2d/view-input", "layers.ConvTranspose2d")(
    lambda m: _conv_transpose(m, (1, 6, 5, 4), 3, 3, 2, 1, 1, kind="view"))
check("conv_transpose2d/zero-input", "layers.ConvTranspose2d")(
    lambda m: _conv_transpose(m, (1, 5, 6, 4), 3, 2, 2, kind="zero"))


# ---- pooling ----

@check("max_pool2d/k3s2p1", "nn.MaxPool2d", exact=True)  # ResNet's stem
def _max_pool(m: Inputs):
    x = m.array((2, 11, 12, 5), "view")
    return lambda: nn.MaxPool2d(3, 2, 1)(x), nhwc(ref.max_pool2d(nchw(host(x)), 3, 2, 1))


@check("avg_pool2d/k3s2p1", "nn.AvgPool2d")
def _avg_pool(m: Inputs):
    x = m.array((1, 9, 12, 5))
    return lambda: nn.AvgPool2d(3, 2, 1)(x), nhwc(ref.avg_pool2d(nchw(host(x)), 3, 2, 1))


@check("avg_pool2d/global", "layers.GlobalAvgPool")  # ResNet's head
def _global_pool(m: Inputs):
    x = m.array((2, 7, 9, 16), "large")
    return lambda: layers.GlobalAvgPool()(x), nhwc(ref.adaptive_avg_pool_1x1(nchw(host(x))))


@check("sppf_maxpool/k5", "zoo.kernels.sppf_maxpool", exact=True)
def _sppf(m: Inputs):
    x = m.array((1, 13, 10, 8))
    return (lambda: mx.concatenate(sppf_maxpool(x, 5), axis=-1),
            np.concatenate(ref_kernels.sppf_maxpool(host(x), 5), axis=-1))


# ---- normalisation ----

def _batch_norm(m: Inputs, kind: str, offset: float = 0.0):
    bn = m.module(layers.BatchNorm(6))
    x = m.array((2, 7, 9, 6), kind, offset=offset)
    expected = ref.batch_norm(nchw(host(x)), host(bn.weight), host(bn.bias), host(bn.running_mean),
                              host(bn.running_var), bn.eps)
    return lambda: bn(x), nhwc(expected)


check("batch_norm", "layers.BatchNorm")(lambda m: _batch_norm(m, "normal"))
check("batch_norm/view-input", "layers.BatchNorm")(lambda m: _batch_norm(m, "view"))
check("batch_norm/zero-input", "layers.BatchNorm")(lambda m: _batch_norm(m, "zero"))


def _layer_norm(m: Inputs, cls, kind: str, offset: float = 0.0, eps: float = 1e-6):
    norm = m.module(cls(24, eps=eps))
    x = m.array((2, 5, 7, 24), kind, offset=offset)
    return lambda: norm(x), ref.layer_norm(host(x), host(norm.weight), host(norm.bias), eps)


check("layer_norm", "layers.LayerNorm")(lambda m: _layer_norm(m, layers.LayerNorm, "normal"))
check("layer_norm/view-input", "layers.LayerNorm")(lambda m: _layer_norm(m, layers.LayerNorm, "view"))
check("layer_norm/zero-input", "layers.LayerNorm")(lambda m: _layer_norm(m, layers.LayerNorm, "zero"))
check("layer_norm/large-offset", "layers.LayerNorm")(  # mean 100 x the spread: cancellation in the variance
    lambda m: _layer_norm(m, layers.LayerNorm, "normal", offset=100.0))
check("layer_norm/mlx", "nn.LayerNorm")(lambda m: _layer_norm(m, nn.LayerNorm, "broadcast", eps=1e-5))


def _group_norm(m: Inputs, kind: str):
    norm = m.module(nn.GroupNorm(4, 12, pytorch_compatible=True))
    x = m.array((2, 5, 7, 12), kind)
    expected = ref.group_norm(nchw(host(x)), 4, host(norm.weight), host(norm.bias), norm.eps)
    return lambda: norm(x), nhwc(expected)


check("group_norm", "nn.GroupNorm")(lambda m: _group_norm(m, "normal"))
check("group_norm/zero-input", "nn.GroupNorm")(lambda m: _group_norm(m, "zero"))


# ---- activations and softmax ----

for _fn, _reference, _api in ((layers.gelu, ref.gelu, "layers.gelu"), (layers.silu, ref.silu, "layers.silu"),
                              (layers.sigmoid, ref.sigmoid, "layers.sigmoid")):
    for _kind in ("normal", "view", "broadcast", "zero", "large"):
        @check(f"{_api.split('.')[1]}/{_kind}", _api)
        def _activation(m: Inputs, fn=_fn, reference=_reference, kind=_kind):
            x = m.array((2, 9, 11, 7), kind, scale=3.0)
            return lambda: fn(x), reference(host(x))


def _softmax(m: Inputs, kind: str, scale: float = 1.0, bias: bool = False, mlx: bool = False):
    x = m.array((2, 3, 9, 13), kind, scale=3.0)
    b = m.array((3, 9, 13)) if bias else None
    expected = ref.softmax(host(x) * scale + (host(b) if bias else 0.0))
    if mlx:
        return lambda: mx.softmax(x, axis=-1), expected
    return lambda: cpu_ops.softmax(x, scale, b), expected


check("softmax/mlx", "mx.softmax")(lambda m: _softmax(m, "normal", mlx=True))  # YOLOv8's DFL
check("softmax/mlx-large", "mx.softmax")(lambda m: _softmax(m, "large", mlx=True))
check("softmax/scaled-bias", "zoo.kernels.cpu.softmax")(lambda m: _softmax(m, "view", 0.3, bias=True))
check("softmax/zero-input", "zoo.kernels.cpu.softmax")(lambda m: _softmax(m, "zero", 0.3, bias=True))
check("softmax/large-input", "zoo.kernels.cpu.softmax")(lambda m: _softmax(m, "large", 0.3))


# ---- matmul and attention ----

@check("matmul/linear", "nn.Linear")
def _linear(m: Inputs):
    linear = m.module(nn.Linear(24, 10))
    x = m.array((3, 7, 24), "view")
    return lambda: linear(x), ref.linear(host(x), host(linear.weight), host(linear.bias))


@check("matmul/transposed-broadcast", "mx.matmul")
def _matmul(m: Inputs):
    a = m.array((2, 1, 13, 16))
    b = m.array((1, 3, 9, 16)).swapaxes(-1, -2)  # (1, 3, 16, 9) as a transposed view
    return lambda: a @ b, host(a) @ host(b)


def _attention(m: Inputs, kind: str = "normal", mask: bool = True, n: int = 13, keys: int | None = None):
    keys = keys or n
    q, k = m.array((2, 3, n, 8), kind), m.array((2, 3, keys, 8), kind)
    v = m.array((2, 3, keys, 8), "normal" if kind == "zero" else kind)  # zero scores: the mean of v
    bias = m.array((3, n, keys)) if mask else None  # broadcast over the batch (TinyViT's position bias)
    scale = 8**-0.5
    scores = host(q) @ host(k).swapaxes(-1, -2) * scale + (host(bias) if mask else 0.0)
    return lambda: layers.attention(q, k, v, scale, bias), ref.softmax(scores) @ host(v)


check("attention/masked", "layers.attention")(lambda m: _attention(m))
check("attention/unmasked", "layers.attention")(lambda m: _attention(m, mask=False, n=17))
check("attention/cross", "layers.attention")(  # SAM's decoder: a few tokens attend to the image
    lambda m: _attention(m, mask=False, n=7, keys=33))
check("attention/view-input", "layers.attention")(lambda m: _attention(m, "view"))
check("attention/zero-input", "layers.attention")(lambda m: _attention(m, "zero"))


@check("layout/split_heads", "layers.split_heads", exact=True)
def _split_heads(m: Inputs):
    x = m.array((2, 7, 3 * 4 * 5))
    parts = host(x).reshape(2, 7, 4, 3, 5).transpose(3, 0, 2, 1, 4)
    return lambda: mx.stack(layers.split_heads(x, 4, 3)), parts


@check("layout/window_partition", "layers.window_partition", exact=True)
def _window_partition(m: Inputs):
    x = m.array((2, 9, 11, 4))  # padded to 12 x 12: 3 x 3 windows of 4 x 4
    padded = np.pad(host(x), ((0, 0), (0, 3), (0, 1), (0, 0)))
    windows = padded.reshape(2, 3, 4, 3, 4, 4).transpose(0, 1, 3, 2, 4, 5).reshape(-1, 16, 4)
    return lambda: layers.window_partition(x, 4), windows


@check("layout/window_merge", "layers.window_merge", exact=True)
def _window_merge(m: Inputs):
    x = m.array((2 * 9, 16, 4))
    merged = host(x).reshape(2, 3, 3, 4, 4, 4).transpose(0, 1, 3, 2, 4, 5).reshape(2, 12, 12, 4)[:, :9, :11]
    return lambda: layers.window_merge(x, (9, 11), 4), merged


# ---- spectra (LaMa's Fourier units) ----

def _interleaved(spectrum: np.ndarray) -> np.ndarray:
    """complex (N, C, H, Wh) -> (N, H, Wh, 2C) with channel 2c = Re, 2c + 1 = Im (rfft2_parts' layout)."""
    parts = np.stack([spectrum.real, spectrum.imag], axis=-1)  # N, C, H, Wh, 2
    n, c, h, wh, _ = parts.shape
    return parts.transpose(0, 2, 3, 1, 4).reshape(n, h, wh, 2 * c)


def _rfft2(m: Inputs, width: int, kind: str = "normal"):
    x = m.array((2, 7, width, 3), kind)
    return lambda: layers.rfft2_parts(x), _interleaved(ref.rfft2_ortho(nchw(host(x))))


check("rfft2/even", "layers.rfft2_parts")(lambda m: _rfft2(m, 10))
check("rfft2/odd", "layers.rfft2_parts")(lambda m: _rfft2(m, 9, "view"))
check("rfft2/zero-input", "layers.rfft2_parts")(lambda m: _rfft2(m, 8, "zero"))


def _irfft2(m: Inputs, width: int, hermitian: bool):
    """hermitian: the spectrum of a real map; else any half spectrum, as LaMa's convolution over
    the spectrum produces (the imaginary parts of its DC and Nyquist columns are not zero)."""
    n, h, c = 2, 7, 3
    if hermitian:
        parts = mx.array(_interleaved(ref.rfft2_ortho(m.rng.standard_normal((n, c, h, width)))).astype(np.float32))
        parts = parts.astype(m.dtype)
    else:
        parts = m.array((n, h, width // 2 + 1, 2 * c))
    pairs = host(parts).reshape(n, h, width // 2 + 1, c, 2)
    spectrum = (pairs[..., 0] + 1j * pairs[..., 1]).transpose(0, 3, 1, 2)
    return lambda: layers.irfft2_parts(parts, (h, width)), nhwc(ref.irfft2_ortho(spectrum, (h, width)))


check("irfft2/even", "layers.irfft2_parts")(lambda m: _irfft2(m, 10, True))
check("irfft2/odd", "layers.irfft2_parts")(lambda m: _irfft2(m, 9, True))
check("irfft2/any-spectrum", "layers.irfft2_parts")(lambda m: _irfft2(m, 10, False))


# ---- padding ----

@check("pad/reflect", "layers.reflect_pad", exact=True)  # LaMa's reflect padding
def _pad_reflect(m: Inputs):
    x = m.array((1, 7, 9, 3), "view")
    return (lambda: layers.reflect_pad(x, 3, 2),
            np.pad(host(x), ((0, 0), (3, 3), (2, 2), (0, 0)), mode="reflect"))


@check("pad/constant", "mx.pad", exact=True)  # SAM pads its input to a square with zeros
def _pad_constant(m: Inputs):
    x = m.array((1, 7, 9, 3))
    widths = ((0, 0), (0, 5), (1, 0), (0, 0))
    return lambda: mx.pad(x, widths, constant_values=-2.5), np.pad(host(x), widths, constant_values=-2.5)


# ---- resize ----

def _upsample(m: Inputs, mode: str, align_corners: bool, scale: float = 2.0, shape=(1, 6, 7, 3)):
    x = m.array(shape)
    size = (int(shape[1] * scale), int(shape[2] * scale))
    if mode == "cubic":
        expected = nhwc(ref.upsample_bicubic(nchw(host(x)), size, align_corners))
    else:
        expected = ref_kernels.resize(host(x).astype(np.float32), size, "nearest" if mode == "nearest" else "bilinear",
                                      align_corners)
    up = nn.Upsample(scale_factor=scale, mode=mode, align_corners=align_corners)
    return lambda: up(x), expected


check("resize/upsample-nearest-x2", "nn.Upsample", exact=True)(lambda m: _upsample(m, "nearest", False))  # YOLOv8
for _mode in ("linear", "cubic"):
    for _align in (False, True):
        check(f"resize/upsample-bi{_mode}-x1.5-align{_align}", "nn.Upsample")(
            lambda m, mode=_mode, align=_align: _upsample(m, mode, align, 1.5, (1, 6, 8, 3)))


def _resize(m: Inputs, size, mode: str, align_corners: bool, shape=(2, 7, 9, 3), kind="normal"):
    x = m.array(shape, kind)
    expected = ref_kernels.resize(host(x).astype(np.float32), size, mode, align_corners)
    return lambda: resize(x, size, mode=mode, align_corners=align_corners), expected


for _size in ((12, 17), (4, 5)):
    for _align in (False, True):
        check(f"resize/bilinear-{_size[0]}x{_size[1]}-align{_align}", "zoo.kernels.resize")(
            lambda m, size=_size, align=_align: _resize(m, size, "bilinear", align))
    check(f"resize/nearest-{_size[0]}x{_size[1]}", "zoo.kernels.resize", exact=True)(
        lambda m, size=_size: _resize(m, size, "nearest", False))
check("resize/bilinear-view-input", "zoo.kernels.resize")(
    lambda m: _resize(m, (11, 6), "bilinear", False, kind="view"))
check("resize/bilinear-large-input", "zoo.kernels.resize")(
    lambda m: _resize(m, (11, 6), "bilinear", False, kind="large"))
check("resize/bilinear-zero-input", "zoo.kernels.resize")(
    lambda m: _resize(m, (11, 6), "bilinear", True, kind="zero"))


# ---- NMS ----

def _nms(m: Inputs, classes: bool = True, max_det: int = 300, extent: float = 64.0, kind: str = "normal"):
    rng = m.rng
    n = 120
    centers = rng.uniform(0, extent, (n, 2))
    sizes = rng.uniform(4, 24, (n, 2)) * extent / 64
    corners = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1)
    if kind == "zero":  # zero-area boxes: IoU 0/0, nothing suppressed
        corners[:] = 0
    boxes = mx.array(corners.astype(np.float32)).astype(m.dtype)
    scores = mx.array(np.round(rng.uniform(0, 1, n), 2).astype(np.float32))  # ties: lower index first
    # three of COCO's 80 classes, the last among them: class offsets up to 79 * 7680
    labels = mx.array(rng.choice([0, 41, 79], n).astype(np.int32)) if classes else None
    expected = ref_kernels.nms(host(boxes), np.array(scores), 0.45, None if labels is None else np.array(labels),
                               max_det=max_det)
    return lambda: nms(boxes, scores, 0.45, labels, max_det=max_det), expected


check("nms/class-aware", "zoo.kernels.nms", exact=True)(lambda m: _nms(m))
check("nms/agnostic-max-det", "zoo.kernels.nms", exact=True)(lambda m: _nms(m, classes=False, max_det=20))
check("nms/zero-boxes", "zoo.kernels.nms", exact=True)(lambda m: _nms(m, classes=False, kind="zero"))
check("nms/large-coordinates", "zoo.kernels.nms", exact=True)(  # 4K frames, 80 classes: offsets to 6e5
    lambda m: _nms(m, extent=4000.0))


# ---- refusals: one device and one dtype per process ----

@check("mix/two-devices", "zoo.devices.use")
def _two_devices(m: Inputs):
    other = "cpu" if devices.use() == "gpu" else "gpu"
    return lambda: devices.use(other), None


@check("mix/two-dtypes", "zoo.devices.as_model_input")
def _two_dtypes(m: Inputs):
    other = mx.float32 if m.dtype != mx.float32 else mx.float16
    x = mx.zeros((1, 4, 4, 3), other)
    return lambda: devices.as_model_input(x, m.dtype), None


# ---- running the checks ----

@contextlib.contextmanager
def implementations():
    """The (op, implementation) pairs zoo.kernels.coverage is told of inside the block: a custom
    kernel, a CPU form of zoo.kernels.cpu or MLX's op; an op nobody notes is MLX's own."""
    seen: list[tuple[str, str]] = []
    with coverage.listening(lambda op, impl: seen.append((op, impl))):
        yield seen


def break_output(got: np.ndarray) -> np.ndarray:
    """--inject-op: the op's result made wrong the way a bad tap or index is: one element of a float
    result moved by a tenth of the result's magnitude; an index result loses its last index."""
    got = np.array(got, copy=True)
    if got.dtype.kind == "f" and got.size:
        got.flat[got.size // 2] += 0.1 * max(1.0, float(np.abs(got).max()))
        return got
    return got[:-1] if got.size else np.zeros(1, got.dtype)


@dataclass
class Row:
    name: str
    api: str
    dtype: str
    impl: str
    status: str  # PASS | FAIL
    rel: float
    max_abs: float
    tolerance: float
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"


def _output(value) -> np.ndarray:
    if isinstance(value, (tuple, list)):
        return np.stack([host(v) for v in value])
    return host(value)


def _run_one(chk: Check, dtype: str, seed: int, injected: bool, fallback: bool) -> tuple[Row, list[str]]:
    name = chk.name + (" [fallback]" if fallback else "")
    tol = tolerance(dtype, chk.exact)
    with variant("fallback") if fallback else contextlib.nullcontext():
        call, expected = chk.build(Inputs(dtype, seed))
        with implementations() as seen:
            if expected is None:  # a refusal
                try:
                    call()
                except ZooError as e:
                    raised = str(e)
                else:
                    raised = None
                if injected:
                    raised = None
                row = Row(name, chk.api, dtype, "-", "PASS" if raised else "FAIL", math.nan, math.nan, tol,
                          f"raised: {raised}" if raised else "did not raise")
                return row, seen
            try:
                out = call()
                mx.eval(out)
                got = _output(out)
            except Exception as e:  # an op that cannot run on this device is a failure of that op
                return Row(name, chk.api, dtype, _label(seen), "FAIL", math.nan, math.nan, tol,
                           f"{type(e).__name__}: {' '.join(str(e).split())}"), seen
    if injected:
        got = break_output(got)
    result = compare(name, expected, got, tol)
    return Row(name, chk.api, dtype, _label(seen), "FAIL" if result.failed else "PASS", result.rel, result.max_abs,
               tol, ", ".join(result.flags)), seen


def _label(seen: list[tuple[str, str]]) -> str:
    return ", ".join(dict.fromkeys(f"{impl}: {op}" for op, impl in seen)) or coverage.MLX_OP


def _custom(seen: list[tuple[str, str]]) -> bool:
    return any(impl != coverage.MLX_OP for _, impl in seen)


def check_name(name: str | None, option: str) -> None:
    """A name given on the command line matches a check or a prefix of checks."""
    if name is not None and not any(_matches(c.name, name) for c in CHECKS):
        prefixes = ", ".join(dict.fromkeys(c.name.split("/")[0] for c in CHECKS))
        raise ZooError(f"{option} {name}: no such op; use a name from the table or one of {prefixes}")


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or name.startswith(pattern + "/")


def run(dtypes=("float32", "float16", "bfloat16"), seed: int = 0, inject: str | None = None, only=None) -> list[Row]:
    """Every check (``only``: names or name prefixes) in every dtype on MLX's default device, plus
    the ZOO_KERNELS=fallback run of each check that took a custom path. ``inject``: the named op
    (or every op under a prefix, e.g. ``conv2d``) gets a wrong result, to show it is caught."""
    check_name(inject, "--inject-op")
    for name in only or ():
        check_name(name, "--only")
    devices.use()  # the process' device: --device decided it, or the GPU when there is one
    for dtype in dtypes:
        devices.parse_dtype(dtype)
    rows = []
    for index, chk in enumerate(CHECKS):
        if only and not any(_matches(chk.name, p) for p in only):
            continue
        injected = inject is not None and _matches(chk.name, inject)
        for dtype in dtypes:
            row, seen = _run_one(chk, dtype, seed * 1000 + index, injected, fallback=False)
            rows.append(row)
            if _custom(seen):  # a custom path ran: check the switch's other side too
                rows.append(_run_one(chk, dtype, seed * 1000 + index, injected, fallback=True)[0])
    return rows


def environment() -> dict:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": devices.describe(),
        "mlx": mx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tf32": devices.tf32_enabled(),
        "cpu_forms": cpu_ops.native_available(),
        "zoo_kernels": os.environ.get(core.ENV_VAR, "") or "auto",
    }


def report_dict(env: dict, rows: list[Row]) -> dict:
    return {**env, "passed": not any(r.failed for r in rows),
            "failed": sorted({r.name for r in rows if r.failed}),
            "rows": [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(r).items()}
                     for r in rows]}
