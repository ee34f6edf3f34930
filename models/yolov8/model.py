"""YOLOv8 and YOLO11 n/s/m/l/x detection (ultralytics layout) in MLX, NHWC, with ultralytics'
pre/post-processing.

Attribute names mirror ultralytics' DetectionModel state dict (model.0.conv.weight,
model.2.m.0.cv1.bn.running_var, model.22.cv2.0.2.weight, model.22.dfl.conv.weight, ...)
so checkpoints load by name. The network is built from a generation's layer table
(Architecture: ultralytics/cfg/models/v8/yolov8.yaml's or 11/yolo11.yaml's) and the variant's
scale, as ultralytics' parse_model does; YOLO11's blocks (C3k2, C3k, C2PSA with its
Attention, the head's depthwise class branch) reuse YOLOv8's Conv, Bottleneck, C2f, SPPF,
Detect and DFL.

``det(source, **options)`` is ``det.predict`` (ultralytics' ``model("bus.jpg")``).
Raw call: ``det(x)`` with x an mx.array (N, H, W, 3) RGB in [0, 1], H and W multiples of 32
-> (N, A, 4 + 80): box centre x, y, width, height in input pixels, then the 80
class scores; anchors ordered P3 (stride 8), P4 (16), P5 (32), each row-major.
Upstream returns the transpose, (N, 84, A).

``det.predict(source)``: letterbox, the network, confidence filter, class-aware
NMS on the GPU, boxes mapped back to the original image (predict.py, ops.py).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from zoo.compiled import (CompiledForward, Stage, fold_batch_norm, fold_in_conv_dtype, folded, folding, stages_pay,
                          with_winograd)
from zoo import devices
from zoo.devices import as_model_input
from zoo.errors import ZooError
from zoo.results import TensorArray
from zoo.kernels import box_decode, sppf_maxpool
from zoo.kernels import cpu as cpu_ops
from zoo.models.layers import (BatchNorm, Conv2d, Sequential, attention, conv2d_derived, conv_bn, fuses_on_cpu,
                               fusing_on_cpu, sigmoid, silu, softmax)

from .ops import STRIDE, resolve_classes
from .predict import BOOL_PREDICT_OPTIONS, PREDICT_OPTIONS, check_device, predict

@dataclass(frozen=True)
class Architecture:
    """One YOLO generation as its ultralytics yaml describes it: per scale (depth multiple, width
    multiple, max channels), and one row per layer: inputs (-1 = the previous layer), repeats,
    module, args (output channels before width scaling first). The last row is the head; a task's
    head (Segment, Pose) replaces it (``with_head``)."""

    name: str  # the registry's prefix: yolov8, yolo11
    title: str  # as ultralytics writes it: YOLOv8, YOLO11
    scales: dict[str, tuple[float, float, int]]
    layers: tuple
    # The compiled forward's stages begin at these layers (zoo.compiled.Stage): the GPU runs one
    # while the host builds the next. Each begins after a layer whose output is a map (not
    # Upscaled or Parts).
    stage_starts: tuple[int, ...]

    @property
    def head(self) -> int:
        """The head's layer index: its checkpoint keys start model.{head}."""
        return len(self.layers) - 1

    @property
    def legacy_head(self) -> bool:
        """Whether the head's class branch is YOLOv8's (two 3x3 Convs) rather than YOLO11's
        (depthwise 3x3 + 1x1 pairs): ultralytics' parse_model keeps the legacy head unless the
        table has a C3k2."""
        return not any(kind == "C3k2" for _, _, kind, _ in self.layers)

    def with_head(self, kind: str, args: tuple = ()) -> Architecture:
        inputs, repeats, _, _ = self.layers[-1]
        return replace(self, layers=(*self.layers[:-1], (inputs, repeats, kind, args)))


YOLOV8 = Architecture(
    "yolov8", "YOLOv8",
    # yolov8.yaml
    {"n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768), "l": (1.00, 1.00, 512),
     "x": (1.00, 1.25, 512)},
    (
        (-1, 1, "Conv", (64, 3, 2)),  # 0 P1/2
        (-1, 1, "Conv", (128, 3, 2)),  # 1 P2/4
        (-1, 3, "C2f", (128, True)),  # 2
        (-1, 1, "Conv", (256, 3, 2)),  # 3 P3/8
        (-1, 6, "C2f", (256, True)),  # 4
        (-1, 1, "Conv", (512, 3, 2)),  # 5 P4/16
        (-1, 6, "C2f", (512, True)),  # 6
        (-1, 1, "Conv", (1024, 3, 2)),  # 7 P5/32
        (-1, 3, "C2f", (1024, True)),  # 8
        (-1, 1, "SPPF", (1024, 5)),  # 9
        (-1, 1, "Upsample", ()),  # 10
        ((-1, 6), 1, "Concat", ()),  # 11: with backbone P4
        (-1, 3, "C2f", (512, False)),  # 12
        (-1, 1, "Upsample", ()),  # 13
        ((-1, 4), 1, "Concat", ()),  # 14: with backbone P3
        (-1, 3, "C2f", (256, False)),  # 15: P3 output
        (-1, 1, "Conv", (256, 3, 2)),  # 16
        ((-1, 12), 1, "Concat", ()),  # 17: with head P4
        (-1, 3, "C2f", (512, False)),  # 18: P4 output
        (-1, 1, "Conv", (512, 3, 2)),  # 19
        ((-1, 9), 1, "Concat", ()),  # 20: with head P5
        (-1, 3, "C2f", (1024, False)),  # 21: P5 output
        ((15, 18, 21), 1, "Detect", ()),  # 22
    ),
    (3, 7, 13, 19),
)

YOLO11 = Architecture(
    "yolo11", "YOLO11",
    # yolo11.yaml
    {"n": (0.50, 0.25, 1024), "s": (0.50, 0.50, 1024), "m": (0.50, 1.00, 512), "l": (1.00, 1.00, 512),
     "x": (1.00, 1.50, 512)},
    (
        (-1, 1, "Conv", (64, 3, 2)),  # 0 P1/2
        (-1, 1, "Conv", (128, 3, 2)),  # 1 P2/4
        (-1, 2, "C3k2", (256, False, 0.25)),  # 2
        (-1, 1, "Conv", (256, 3, 2)),  # 3 P3/8
        (-1, 2, "C3k2", (512, False, 0.25)),  # 4
        (-1, 1, "Conv", (512, 3, 2)),  # 5 P4/16
        (-1, 2, "C3k2", (512, True)),  # 6
        (-1, 1, "Conv", (1024, 3, 2)),  # 7 P5/32
        (-1, 2, "C3k2", (1024, True)),  # 8
        (-1, 1, "SPPF", (1024, 5)),  # 9
        (-1, 2, "C2PSA", (1024,)),  # 10
        (-1, 1, "Upsample", ()),  # 11
        ((-1, 6), 1, "Concat", ()),  # 12: with backbone P4
        (-1, 2, "C3k2", (512, False)),  # 13
        (-1, 1, "Upsample", ()),  # 14
        ((-1, 4), 1, "Concat", ()),  # 15: with backbone P3
        (-1, 2, "C3k2", (256, False)),  # 16: P3 output
        (-1, 1, "Conv", (256, 3, 2)),  # 17
        ((-1, 13), 1, "Concat", ()),  # 18: with head P4
        (-1, 2, "C3k2", (512, False)),  # 19: P4 output
        (-1, 1, "Conv", (512, 3, 2)),  # 20
        ((-1, 10), 1, "Concat", ()),  # 21: with head P5
        (-1, 2, "C3k2", (1024, True)),  # 22: P5 output
        ((16, 19, 22), 1, "Detect", ()),  # 23
    ),
    (3, 7, 14, 20),
)

ARCHITECTURES = {arch.name: arch for arch in (YOLOV8, YOLO11)}
STRIDES = (8, 16, 32)
REG_MAX = 16  # DFL bins per box side


def scaled_channels(channels: int, width: float, max_channels: int) -> int:
    """ultralytics' channel scaling: the width multiple of the capped count, rounded up to a multiple of 8."""
    return math.ceil(min(channels, max_channels) * width / 8) * 8


class Conv(nn.Module):
    """Conv2d (no bias, 'same' padding, ``groups``) + BatchNorm (eps 1e-3) + SiLU (none without ``act``)."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, groups: int = 1, act: bool = True):
        super().__init__()
        self.conv = Conv2d(c1, c2, k, stride=s, padding=k // 2, groups=groups, bias=False)
        self.bn = BatchNorm(c2, eps=1e-3, momentum=0.03)
        self.activation = "silu" if act else None

    def __call__(self, x: mx.array, skip: mx.array | None = None) -> mx.array:
        """activation(bn(conv(x))) + skip (an array of the output's shape, or None); on the CPU the skip
        is added by the convolution's C call where its form takes it (Bottleneck's shortcut)."""
        if skip is not None and fuses_on_cpu(self.conv, self.bn) and not folding():
            return self.conv.with_batch_norm(x, self.bn, self.activation, skip=skip)
        y = conv_bn(self.conv, self.bn, x, activation=self.activation)
        return y if skip is None else y + skip

    def of_parts(self, parts: Parts) -> mx.array:
        """This 1x1 Conv of the channel concatenation of ``parts``, in a compiled forward: one matmul
        per part with its rows of the folded weight (``split_by_input``), the products added up; a
        half-size part's product is added to each pixel of its 2x2 block (nearest upsampling). Eager
        on the CPU: one C call reading the parts where they lie (``on_cpu_of_parts``)."""
        fold = folded(self.conv)
        if fold is None:
            return self.on_cpu_of_parts(parts)
        full, half = None, []
        for part, weight in zip(parts, fold["parts"]):
            x = part.half if isinstance(part, Upscaled) else part
            y = (x.reshape(-1, weight.shape[0]) @ weight).reshape(*x.shape[:-1], weight.shape[1])
            if isinstance(part, Upscaled):
                half.append(y)
            else:
                full = y if full is None else full + y
        for y in half:
            full = cpu_ops.add_upsampled(full, y)
        return silu(full + fold["bias"])

    def on_cpu_of_parts(self, parts: Parts) -> mx.array:
        """of_parts eager on the CPU: a half-size part's product (its columns of the weight, with the
        BatchNorm folded) made at its size, then one C call (zoo.kernels.cpu.pointwise_parts) that adds
        the other parts' products where they lie, that product upsampled, the bias and the SiLU: no
        concatenated or upsampled map is made. Each image apart (cpu_ops.per_image)."""
        widths = [p.half.shape[-1] if isinstance(p, Upscaled) else p.shape[-1] for p in parts]
        starts = [sum(widths[:i]) for i in range(len(parts))]
        if not cpu_ops.native_available():
            return self(materialized(parts))
        forms = self.conv.batch_norm_forms(self.bn)
        weight, half = forms["weight"], None
        for part, start, width in zip(parts, starts, widths):
            if isinstance(part, Upscaled):
                product = cpu_ops.per_image(lambda x, w=weight[..., start:start + width]: cpu_ops.conv2d(x, w), part.half)
                half = product if half is None else half + product
        full = [(p, start) for p, start in zip(parts, starts) if not isinstance(p, Upscaled)]
        offsets = [start for _, start in full]

        def one_image(*maps):
            return cpu_ops.pointwise_parts(maps[:len(full)], offsets, weight, forms["bias"], self.activation,
                                           half=maps[len(full)] if half is not None else None,
                                           packed=forms.get("packed"))

        return cpu_ops.per_image(one_image, *(p for p, _ in full), *(() if half is None else (half,)))


class DWConv(Conv):
    """ultralytics' DWConv: a Conv grouped by the channels both sides share (depthwise where c1 == c2)."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, act: bool = True):
        super().__init__(c1, c2, k, s, groups=math.gcd(c1, c2), act=act)


def conv_flop_per_pixel(layers: list[nn.Module], arch: Architecture) -> float:
    """The convolutions' FLOPs (two per multiply-add) per input pixel: each layer's at its output's
    stride, the head's branches at their levels'."""
    strides, total = [], 0.0
    for (inputs, _, kind, args), layer in zip(arch.layers, layers):
        before = strides[inputs if inputs == -1 else inputs[0]] if strides else 1
        stride = before * args[2] if kind == "Conv" else before // 2 if kind == "Upsample" else before
        strides.append(stride)
        parts = layer.branches_by_stride() if layer is layers[-1] else [(layer, stride)]
        total += sum(2 * c.weight.size / s**2 for part, s in parts for c in part.modules() if isinstance(c, nn.Conv2d))
    return total


def split_by_input(sizes: tuple[int, ...]):
    """A FoldedConvs derivation for a 1x1 Conv after a Concat of parts of ``sizes`` channels: the
    default fold's bias, and its weight as one (in, out) matrix per part (Conv.of_parts), which
    replaces the whole weight (the compiled forward never reads it)."""
    def make(conv, bn) -> dict[str, mx.array]:
        arrays = fold_in_conv_dtype(conv, bn)
        weight = arrays.pop("weight")
        matrix = weight.reshape(weight.shape[0], -1).T
        starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        # contiguous once here: a row slice of the transposed weight is a strided view
        arrays["parts"] = [mx.contiguous(matrix[a:b]) for a, b in zip(starts, starts[1:])]
        return arrays
    return make


def dfl_bins(conv, _) -> dict[str, mx.array]:
    """A FoldedConvs derivation: the DFL's bin values as zoo.kernels.box_decode reads them, flat and
    float32, made once per weight change instead of reshaped and cast in every compiled forward."""
    return {"bins": conv.weight.reshape(-1).astype(mx.float32)}


class Upscaled(NamedTuple):
    """Upsample's output in a compiled forward or eager on the CPU: the map at half size, to be
    upsampled by the Conv that reads it (Conv.of_parts)."""

    half: mx.array


class Parts(tuple):
    """Concat's output in a compiled forward or eager on the CPU: the maps, to be read apart by the 1x1
    Conv after it."""


def materialized(x: mx.array | Upscaled | Parts) -> mx.array:
    """The map an Upscaled or Parts stands for (upsampled 2x, nearest; concatenated); an array as it is."""
    if isinstance(x, Upscaled):
        return mx.repeat(mx.repeat(x.half, 2, axis=1), 2, axis=2)
    if isinstance(x, Parts):
        return mx.concatenate([materialized(part) for part in x], axis=-1)
    return x


class Upsample(nn.Upsample):
    """nn.Upsample(scale_factor=2, mode="nearest"). In a compiled forward it hands on its input
    (Upscaled) for C2f's 1x1 cv1 after the Concat to apply first, at a quarter of the pixels (a 1x1
    convolution commutes with nearest upsampling): neither the upsampled nor the concatenated map
    is made."""

    def __init__(self):
        super().__init__(scale_factor=2.0, mode="nearest")

    def __call__(self, x: mx.array) -> mx.array | Upscaled:
        return Upscaled(x) if folding() or fusing_on_cpu() else super().__call__(x)


class Bottleneck(nn.Module):
    """Two 3x3 Convs (the first to ``e`` x c2 channels), with the input added back when ``shortcut``
    and the widths match."""

    def __init__(self, c1: int, c2: int, shortcut: bool, e: float = 1.0):
        super().__init__()
        c = int(c2 * e)
        self.cv1 = Conv(c1, c, 3)
        self.cv2 = Conv(c, c2, 3)
        self.add = shortcut and c1 == c2

    def shortcut(self, x: mx.array) -> mx.array:
        return x

    def __call__(self, x: mx.array) -> mx.array:
        if self.add and fusing_on_cpu() and not folding():  # eager on the CPU: cv2's C call adds the shortcut
            return self.cv2(self.cv1(x), skip=self.shortcut(x))
        y = self.cv2(self.cv1(x))
        return y + self.shortcut(x) if self.add else y


class C2f(nn.Module):
    """cv1 splits into two halves of ``e`` x c2 channels; each block of ``m`` extends the list from the
    last one; cv2 fuses all."""

    def __init__(self, c1: int, c2: int, n: int, shortcut: bool, e: float = 0.5):
        super().__init__()
        c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * c, 1)
        self.cv2 = Conv((2 + n) * c, c2, 1)
        self.m = Sequential(*(Bottleneck(c, c, shortcut) for _ in range(n)))

    def __call__(self, x: mx.array | Parts) -> mx.array:
        ys = mx.split(self.cv1.of_parts(x) if isinstance(x, Parts) else self.cv1(x), 2, axis=-1)
        for bottleneck in self.m.children_in_order():
            ys.append(bottleneck(ys[-1]))
        if fusing_on_cpu() and not folding():  # eager on the CPU: the halves and the blocks' maps read where they lie
            return self.cv2.of_parts(Parts(ys))
        return self.cv2(mx.concatenate(ys, axis=-1))


class C3k2(C2f):
    """YOLO11's C2f: its blocks are C3k (``c3k``) or Bottlenecks of half width, all with shortcuts."""

    def __init__(self, c1: int, c2: int, n: int, c3k: bool, e: float = 0.5):
        super().__init__(c1, c2, n, True, e)
        c = int(c2 * e)
        self.m = Sequential(*(C3k(c, c, 2) if c3k else Bottleneck(c, c, True, e=0.5) for _ in range(n)))


class C3k(nn.Module):
    """CSP bottleneck with three Convs: ``n`` Bottlenecks on cv1's half, cv2's half beside them, cv3 fuses."""

    def __init__(self, c1: int, c2: int, n: int, e: float = 0.5):
        super().__init__()
        c = int(c2 * e)
        self.cv1 = Conv(c1, c, 1)
        self.cv2 = Conv(c1, c, 1)
        self.cv3 = Conv(2 * c, c2, 1)
        self.m = Sequential(*(Bottleneck(c, c, True) for _ in range(n)))

    def __call__(self, x: mx.array) -> mx.array:
        return self.cv3(mx.concatenate([self.m(self.cv1(x)), self.cv2(x)], axis=-1))


class Attention(nn.Module):
    """Multi-head self-attention over the pixels: qkv a 1x1 Conv laid out per head as (q, k, v) with
    keys of half the head width; the values' depthwise 3x3 Conv (pe) added as positional encoding;
    proj a 1x1 Conv. No activations."""

    def __init__(self, dim: int, num_heads: int, attn_ratio: float = 0.5):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim**-0.5
        self.qkv = Conv(dim, dim + 2 * self.key_dim * num_heads, 1, act=False)
        self.proj = Conv(dim, dim, 1, act=False)
        self.pe = Conv(dim, dim, 3, groups=dim, act=False)

    def __call__(self, x: mx.array) -> mx.array:
        n, h, w, c = x.shape
        qkv = self.qkv(x).reshape(n, h * w, self.num_heads, 2 * self.key_dim + self.head_dim)
        q, k, v = mx.split(qkv, [self.key_dim, 2 * self.key_dim], axis=-1)
        heads = attention(*(a.transpose(0, 2, 1, 3) for a in (q, k, v)), self.scale)  # (N, heads, HW, head_dim)
        out = heads.transpose(0, 2, 1, 3).reshape(n, h, w, c)
        return self.proj(out + self.pe(v.reshape(n, h, w, c)))


class PSABlock(nn.Module):
    """Attention then a two-Conv feed-forward (the second without activation), each added back."""

    def __init__(self, c: int, num_heads: int):
        super().__init__()
        self.attn = Attention(c, num_heads)
        self.ffn = Sequential(Conv(c, 2 * c, 1), Conv(2 * c, c, 1, act=False))

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.attn(x)
        return x + self.ffn(x)


class C2PSA(nn.Module):
    """cv1 splits into two halves; the second goes through ``n`` PSABlocks (a head per 64 channels);
    cv2 fuses both."""

    def __init__(self, c1: int, c2: int, n: int, e: float = 0.5):
        super().__init__()
        if c1 != c2:
            raise ValueError(f"C2PSA keeps its width: {c1} in, {c2} out")
        self.c = int(c1 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv(2 * self.c, c1, 1)
        self.m = Sequential(*(PSABlock(self.c, self.c // 64) for _ in range(n)))

    def __call__(self, x: mx.array) -> mx.array:
        a, b = mx.split(self.cv1(x), 2, axis=-1)
        return self.cv2(mx.concatenate([a, self.m(b)], axis=-1))


class SPPF(nn.Module):
    """cv1, three chained k x k max-pools (one kernel), all four concatenated, cv2."""

    def __init__(self, c1: int, c2: int, k: int):
        super().__init__()
        c = c1 // 2
        self.cv1 = Conv(c1, c, 1)
        self.cv2 = Conv(4 * c, c2, 1)
        self.k = k

    def __call__(self, x: mx.array) -> mx.array:
        x = self.cv1(x)
        return self.cv2(mx.concatenate([x, *sppf_maxpool(x, self.k)], axis=-1))


class Concat(nn.Module):
    """Channel concatenation; in a compiled forward the parts, for the C2f after it (Conv.of_parts)."""

    def __call__(self, *xs: mx.array | Upscaled) -> mx.array | Parts:
        return Parts(xs) if folding() or fusing_on_cpu() else mx.concatenate(xs, axis=-1)


class DFL(nn.Module):
    """Distribution focal loss integral: each box side is the softmax-weighted sum of 16 bins.

    The bin values are the checkpoint's conv weight (arange(16) in trained models).
    Input and output keep upstream's layout, (N, 4 * 16, A) -> (N, 4, A).
    """

    def __init__(self, bins: int = REG_MAX):
        super().__init__()
        self.conv = nn.Conv2d(bins, 1, 1, bias=False)
        self.bins = bins

    def __call__(self, x: mx.array) -> mx.array:
        n, _, a = x.shape
        # (N, 4 sides, A, bins): NHWC for the 1x1 conv, bins as channels. On the CPU zoo's C softmax:
        # MLX's CPU exp took 6.4 ms of YOLOv8n's forward at 640 here (8400 x 64 logits), the C one 1.6
        p = softmax(x.reshape(n, 4, self.bins, a).swapaxes(2, 3))
        return self.conv(p).reshape(n, 4, a)


class HeadBranch(Sequential):
    """Conv 3x3, Conv 3x3, then the 1x1 output Conv2d. In a compiled forward a width ``c`` that is not a
    multiple of 4 (Pose's 51 = 17 x 3 keypoint values) is padded with zero channels to one
    (``padded_folds``): in float32 on CUDA its 3x3 convolutions then take zoo.kernels.implicit_gemm
    (4-channel reads, no workspace) instead of cuDNN's float32 engines and their workspaces (read as
    the cause of yolo11n-pose b16's 854 MiB against yolo11n's 484, docs/speed-gpu.md). The zero
    channels add exact zeros."""

    def __init__(self, c1: int, c: int, c_out: int):
        super().__init__(Conv(c1, c, 3), Conv(c, c, 3), Conv2d(c, c_out, 1))

    def padded_folds(self) -> list[tuple]:
        """FoldedConvs entries that pad the branch's width to a multiple of 4; none where it is one."""
        if self["1"].conv.weight.shape[0] % 4 == 0:
            return []
        first, second = self["0"], self["1"]
        return [(first.conv, first.bn, padded_to_4(outputs=True)),
                (second.conv, second.bn, padded_to_4(inputs=True, outputs=True)),
                (self["2"], None, padded_to_4(inputs=True))]

    def __call__(self, x: mx.array) -> mx.array:
        last = folded(self["2"])
        if last is None:
            return super().__call__(x)
        return conv2d_derived(self["1"](self["0"](x)), self["2"], last)


def padded_to_4(inputs: bool = False, outputs: bool = False):
    """A FoldedConvs derivation (HeadBranch.padded_folds): the convolution, its BatchNorm folded in
    where it has one, with zero output and/or input channels up to a multiple of 4."""
    def make(conv, bn) -> dict[str, mx.array]:
        weight, bias = fold_batch_norm(conv, bn) if bn is not None else (conv.weight, conv.bias)
        o, _, _, i = weight.shape
        grow_out, grow_in = -o % 4 if outputs else 0, -i % 4 if inputs else 0
        weight = mx.pad(weight, [(0, grow_out), (0, 0), (0, 0), (0, grow_in)]).astype(conv.weight.dtype)
        return with_winograd(conv, {"weight": weight, "bias": mx.pad(bias, [(0, grow_out)]).astype(conv.weight.dtype)})
    return make


def depthwise_head_branch(c1: int, c: int, c_out: int) -> Sequential:
    """YOLO11's class branch: two (depthwise 3x3, 1x1) pairs, then the 1x1 output conv."""
    return Sequential(Sequential(DWConv(c1, c1, 3), Conv(c1, c, 1)), Sequential(DWConv(c, c, 3), Conv(c, c, 1)),
                      Conv2d(c, c_out, 1))


class Detect(nn.Module):
    """Per level: box branch (cv2: 4 x 16 DFL logits) and class branch (cv3: nc logits); then decode.
    ``legacy``: YOLOv8's class branch; else YOLO11's depthwise one (Architecture.legacy_head)."""

    task = "detect"  # ultralytics' task name; the heads of heads.py name theirs

    def __init__(self, nc: int, ch: tuple[int, ...], legacy: bool = True):
        super().__init__()
        self.nc = nc
        c2 = max(16, ch[0] // 4, REG_MAX * 4)
        c3 = max(ch[0], min(nc, 100))
        self.cv2 = Sequential(*(HeadBranch(c, c2, 4 * REG_MAX) for c in ch))
        self.cv3 = Sequential(*((HeadBranch if legacy else depthwise_head_branch)(c, c3, nc) for c in ch))
        self.dfl = DFL(REG_MAX)

    # ultralytics' Detect attributes that scripts read through model.model.model[-1], read-only here: the levels'
    # strides (float32, as upstream's tensor), their number, the DFL bins, the outputs per anchor, and end2end
    # (YOLOv10/YOLO26's NMS-free heads; these heads go through NMS)
    stride = property(lambda self: strides_array())
    nl = property(lambda self: len(STRIDES))
    reg_max = property(lambda self: REG_MAX)
    no = property(lambda self: self.nc + 4 * REG_MAX)

    @property
    def end2end(self) -> bool:
        return False

    @end2end.setter
    def end2end(self, value) -> None:
        """Scripts set end2end = False to have an end2end head go through NMS, as these heads always do."""
        if value:
            raise ZooError(f"{type(self).__name__}.end2end = {value!r}: YOLOv8 and YOLO11 heads go through NMS; "
                           "mlx-zoo has no end-to-end (NMS-free) head")

    def branches_by_stride(self) -> list[tuple[nn.Module, int]]:
        """Each level's branches with the level's stride (conv_flop_per_pixel)."""
        return [(b[str(i)], s) for i, s in enumerate(STRIDES) for b in (self.cv2, self.cv3)]

    def __call__(self, *levels: mx.array) -> mx.array:
        boxes, classes = [], []
        for i, x in enumerate(levels):  # upstream's order: a level's box branch, then its class branch
            boxes.append(self.cv2[str(i)](x))
            classes.append(self.cv3[str(i)](x))
        if folding() and x.dtype == mx.float16:
            # a compiled float16 forward (bound by the host's encoding): one kernel reads the maps
            # where they lie, for some 40 ops. Not in float32: there the kernel's graph raised the
            # b16 peak (YOLOv8s 731-825 -> 1188-1273 MiB, H100, 2026-11-27), MLX ordering the six
            # branches feeding it side by side; bfloat16 was not measured
            return box_decode.decode(boxes, classes, folded(self.dfl.conv)["bins"], STRIDES)
        if fusing_on_cpu() and not folding():  # eager: one C pass (recording, the DFL runs as its layer)
            decoded = cpu_ops.box_decode(boxes, classes, self.dfl.conv.weight, STRIDES)
            if decoded is not None:
                return decoded
        n = levels[0].shape[0]
        box = mx.concatenate([b.reshape(n, -1, 4 * REG_MAX) for b in boxes], axis=1)
        if folding():  # one kernel for the DFL's copy, softmax and product; the graph's order kept (above)
            dist = box_decode.distances(box, folded(self.dfl.conv)["bins"])
        else:
            dist = self.dfl(box.swapaxes(1, 2)).swapaxes(1, 2)  # (N, A, 4): l, t, r, b
        xywh = box_decode.boxes_from_distances(dist, [x.shape[1:3] for x in levels], STRIDES)
        return mx.concatenate([xywh, sigmoid(mx.concatenate([c.reshape(n, -1, self.nc) for c in classes], axis=1))],
                              axis=-1)


HEADS = {"Detect": Detect}  # a table's last module: the head, built as HEADS[kind](nc, channels, legacy, *args)


def make_layer(kind: str, c_in: list[int], n: int, args: tuple, arch: Architecture, scale: str,
               nc: int) -> tuple[nn.Module, int]:
    """One row of ``arch``'s table at ``scale`` as ultralytics' parse_model builds it: ``c_in`` the
    channels of its inputs, ``n`` its repeats after the depth multiple -> the module, its output channels."""
    if kind in HEADS:
        return HEADS[kind](nc, tuple(c_in), arch.legacy_head, *args), 0  # nothing reads a head's channels
    _, width, max_channels = arch.scales[scale]
    c1 = c_in[0]
    c2 = scaled_channels(args[0], width, max_channels) if args else c1
    if kind == "Conv":
        return Conv(c1, c2, *args[1:]), c2
    if kind == "C2f":
        return C2f(c1, c2, n, args[1]), c2
    if kind == "C3k2":  # parse_model makes every C3k2's blocks C3k at scales m, l and x
        return C3k2(c1, c2, n, args[1] or scale in "mlx", *args[2:]), c2
    if kind == "SPPF":
        return SPPF(c1, c2, args[1]), c2
    if kind == "C2PSA":
        return C2PSA(c1, c2, n), c2
    if kind == "Upsample":
        return Upsample(), c1
    if kind == "Concat":
        return Concat(), sum(c_in)
    raise ValueError(f"no layer kind {kind!r}")


def strides_array() -> TensorArray:
    """The head's levels' strides as ultralytics' stride tensors: float32."""
    return np.array(STRIDES, np.float32).view(TensorArray)


class Layers(Sequential):
    """The layers ``model.0`` ... ``model.{head}`` (the checkpoint's key names), which is also where scripts written
    for ultralytics find its inner DetectionModel's ``names`` ({id: name}), ``stride`` (the head's levels' strides,
    float32 as upstream's tensor), ``nc``, ``model`` (its layers in order: ``model.model.model[-1]`` is the head)
    and ``yaml`` (ModelYaml): ``model.model.names``, ``int(model.model.stride.max())``."""

    def __init__(self, layers: list[nn.Module], names: dict[int, str], yaml: dict):
        super().__init__(*layers)
        # plain attributes, neither parameters nor entries that code walking the layers (or the parameters) meets:
        # MLX would keep a dict among the module's entries (parameters() listed {0: {}, 1: {}, ...} under names)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "yaml", ModelYaml(yaml))
        self.stride = strides_array()  # an ndarray: MLX makes it an attribute

    @property
    def model(self) -> tuple[nn.Module, ...]:
        """ultralytics' DetectionModel.model, its nn.Sequential of layers, as a tuple: [0] the first Conv, [-1] the
        head (read its attributes; the layers are not replaced through it)."""
        return tuple(self.children_in_order())

    @property
    def nc(self) -> int:
        return self.model[-1].nc


class ModelYaml(dict):
    """ultralytics' ``model.model.yaml`` (the model's yaml as a dict) with the keys scripts read whose values are
    this model's: ``nc``, ``scale``, ``ch`` and, for pose models, ``kpt_shape``; any other key (the layer tables
    ``backbone``/``head``, ``scales`` ...) is one error naming these, not a KeyError."""

    def __missing__(self, key):
        raise ZooError(f"model.model.yaml[{key!r}] is not available in mlx-zoo: it holds {', '.join(self)}; "
                       "the layers are model.model.model (model.model.model[-1] the head), the class names "
                       "model.names")


class DetectionModel(nn.Module):
    """ultralytics' DetectionModel: ``model.0`` ... ``model.{head}`` wired as ``arch``'s table (YOLOv8's
    or YOLO11's, or another head in its place: Architecture.with_head), the head last."""

    def __init__(self, scale: str, nc: int = 80, imgsz: int | tuple[int, int] = 640, names: dict | None = None,
                 arch: Architecture | str = YOLOV8):
        super().__init__()
        arch = ARCHITECTURES[arch] if isinstance(arch, str) else arch
        depth = arch.scales[scale][0]
        channels: list[int] = []  # output channels of each layer
        concatenated = {}  # index of a C2f after a Concat -> the channels of the Concat's parts
        layers = []
        for i, (inputs, repeats, kind, args) in enumerate(arch.layers):
            sources = [i - 1 if j == -1 else j for j in ((inputs,) if isinstance(inputs, int) else inputs)]
            c_in = [channels[j] for j in sources] if i else [3]
            n = max(round(repeats * depth), 1) if repeats > 1 else repeats
            layer, c2 = make_layer(kind, c_in, n, args, arch, scale, nc)
            if kind == "Concat":
                concatenated[i + 1] = tuple(c_in)
            layers.append(layer)
            channels.append(c2)
        yaml = {"nc": nc, "scale": scale, "ch": 3}
        if layers[-1].task == "pose":
            yaml["kpt_shape"] = list(layers[-1].kpt_shape)
        self.model = Layers(layers, dict(names) if names is not None else {i: f"class{i}" for i in range(nc)}, yaml)
        self.arch, self.scale = arch, scale
        # layer -> the earlier layers whose outputs it reads besides its predecessor's
        self.reads = tuple(frozenset() if inputs == -1 else frozenset(j for j in inputs if j != -1)
                           for inputs, *_ in arch.layers)
        self.read_later = frozenset().union(*self.reads)
        self.imgsz = imgsz  # default predict size: the size the checkpoint was trained at
        self.predictor = None  # ultralytics' model.predictor: predict's run folder, kept from call to call
        after_concat = {id(self.model[str(i)].cv1): split_by_input(sizes) for i, sizes in concatenated.items()}
        padded = [entry for m in self.modules() if isinstance(m, HeadBranch) for entry in m.padded_folds()]
        special = {id(entry[0]) for entry in padded}
        convs = [(m.conv, m.bn, after_concat.get(id(m), fold_in_conv_dtype)) for m in self.modules()
                 if isinstance(m, Conv) and id(m.conv) not in special] + padded
        bounds = (0, *arch.stage_starts, len(arch.layers))
        stages = [Stage(partial(self.layers, start, stop), layers[start:stop]) for start, stop in zip(bounds, bounds[1:])]
        self.flop_per_pixel = conv_flop_per_pixel(layers, arch)
        self.compiled = CompiledForward(self.forward, self, folds=[*convs, (layers[-1].dfl.conv, None, dfl_bins)],
                                        stages=stages, staged=self.staged)

    @property
    def names(self) -> dict[int, str]:
        """{id: name}, as ultralytics' ``model.names``: the network's (``model.model.names``)."""
        return self.model.names

    @property
    def head(self) -> nn.Module:
        return self.model[str(self.arch.head)]

    @property
    def nc(self) -> int:
        return self.head.nc

    @property
    def task(self) -> str:
        """detect, segment or pose: what the head computes (ultralytics' names)."""
        return self.head.task

    @property
    def dtype(self) -> mx.Dtype:
        return self.model["0"].conv.weight.dtype

    def __call__(self, source=None, **options):
        """``source`` an mx.array (N, H, W, 3) RGB in [0, 1], H and W multiples of 32 -> (N, A, 4 + nc): the
        network, compiled per input shape, BatchNorms folded into their convolutions (zoo.compiled);
        ``forward`` is the same network, eager. Anything else (paths, numpy or PIL images, lists,
        videos ...) is ``predict(source, **options)``, as ultralytics' ``model(source)``."""
        if not isinstance(source, mx.array):
            return self.predict(source, **options)
        if options:
            raise ZooError(f"the network called on an mx.array takes no options ({', '.join(options)}): "
                           "pass an image, a path or a list of them to predict")
        x = source
        x = as_model_input(x, self.dtype, channels=3)
        if x.shape[1] % STRIDE or x.shape[2] % STRIDE or x.shape[1] == 0 or x.shape[2] == 0:
            raise ZooError(f"input is {x.shape[1]}x{x.shape[2]}: height and width must be positive multiples of "
                           f"{STRIDE}; letterbox the image (det.predict does)")
        return self.compiled(x)

    def staged(self, x: mx.array) -> bool:
        """Whether the compiled forward runs ``x`` in stages (zoo.compiled.stages_pay)."""
        n, h, w, _ = x.shape
        return stages_pay(self.flop_per_pixel * n * h * w / 1e9, x.dtype)

    def forward(self, x: mx.array) -> mx.array:
        return self.layers(0, len(self.arch.layers), x)

    def layers(self, start: int, stop: int, x: mx.array, saved: dict[int, mx.array] | None = None):
        """Layers start..stop-1 on ``x`` (the output of layer start-1), ``saved`` the earlier
        outputs they read -> the output of the last layer, and until the network's end also the
        outputs later layers read (a compiled stage's outputs, the next stage's arguments)."""
        saved = dict(saved or {})
        for i in range(start, stop):
            inputs, layer = self.arch.layers[i][0], self.model[str(i)]
            x = layer(x) if inputs == -1 else layer(*(x if j == -1 else saved[j] for j in inputs))
            if i in self.read_later:
                saved[i] = x
        if stop == len(self.arch.layers):
            return x
        return x, {j: a for j, a in saved.items() if any(j in read for read in self.reads[stop:])}

    def class_ids(self, classes) -> list[int] | None:
        """Class filter from names and/or ids (a list, or one comma-separated string) -> ids."""
        return resolve_classes(classes, self.names)

    def predict(self, source=None, stream: bool = False, **options):
        """ultralytics' model.predict: one Results per image or frame (predict.py has the options)."""
        if source is None:  # ultralytics then predicts its bundled sample photos, which mlx-zoo does not ship
            raise ZooError("predict() needs a source: ultralytics' default, its bundled bus.jpg and zidane.jpg "
                           "(ultralytics/assets), is not shipped with mlx-zoo; pass an image, a folder, a video or "
                           "a list of them, e.g. model.predict('bus.jpg')")
        return predict(self, source, stream=stream, **predict_options(options))

    def info(self, detailed: bool = False, verbose: bool = True, imgsz=640):
        """ultralytics' model.info(): prints ``YOLOv8n summary: 3,157,200 parameters, 0 gradients`` (the
        parameter count is ultralytics', BatchNorms' running statistics not counted) and returns (layers,
        parameters, gradients, GFLOPs) as ultralytics' does, with layers None (it counts torch modules, which
        mlx-zoo does not have) and GFLOPs 0.0 (not counted, as ultralytics without thop; ``imgsz`` is for
        them); ``verbose=False``: nothing, as ultralytics'."""
        if detailed:
            raise ZooError("info(detailed=True) is not available in mlx-zoo: list the parameters with "
                           "mlx.utils.tree_flatten(model.parameters())")
        if not verbose:
            return None
        parameters = sum(array.size for key, array in tree_flatten(self.parameters())
                         if not key.endswith(("running_mean", "running_var")))
        task = "" if self.task == "detect" else "-seg" if self.task == "segment" else f"-{self.task}"
        print(f"{self.arch.title}{self.scale}{task} summary: {parameters:,} parameters, 0 gradients")
        return None, parameters, 0, 0.0

    def to(self, device=None) -> DetectionModel:
        """ultralytics' ``model.to(device)``: the device checked as predict's ``device=`` (the process's one MLX
        device), the model returned as it is."""
        check_device(device)
        return self

    @property
    def device(self) -> str:
        """ultralytics' ``model.device``: the device MLX computes on, 'cpu' or 'gpu' (one per process), a name
        predict's ``device=`` and a TensorArray's ``.to()`` take."""
        return devices.use()

    def fuse(self) -> None:
        """ultralytics' model.fuse(): nothing to do, the compiled forward already folds each BatchNorm into
        its convolution."""

    def train(self, *args, **options):
        """MLX's ``train(mode=True)``; ultralytics' ``model.train(data=..., ...)`` is not built: one error."""
        mode = [*args, *options.values()]  # MLX's one argument, train(False) or train(mode=False)
        if set(options) - {"mode"} or len(mode) > 1 or (mode and not isinstance(mode[0], bool)):
            raise not_built("train")
        return super().train(*mode)

    def tune(self, *args, **options):
        raise not_built("tune")

    def val(self, *args, **options):
        raise not_built("val")

    def export(self, *args, **options):
        raise not_built("export")

    def benchmark(self, *args, **options):
        raise not_built("benchmark")

    def embed(self, *args, **options):
        raise not_built("embed", "model.layers(0, k, x)[0] is layer k-1's output for a letterboxed "
                                 "(N, H, W, 3) batch in [0, 1]")

    def add_callback(self, *args, **options):
        raise not_built("add_callback", "iterate predict(source, stream=True) and act on each Results as it comes")

    def save(self, *args, **options):
        raise not_built("save", "mlx-zoo reads checkpoints (YOLO('best.pt'), zoo.load(name, weights=PATH)) and "
                                "writes none; keep the .pt file you loaded")

    def load(self, *args, **options):
        raise not_built("load", "load the checkpoint when making the model: YOLO('best.pt') or "
                                "zoo.load(name, weights=PATH)")

    def track(self, source=None, **options):
        raise not_built("track")


# ultralytics' predict arguments for what mlx-zoo does not build, with their defaults, which scripts pass
# (augment=False ...) and which change nothing; another value is an error. rect=True: predict letterboxes a batch of
# one size to the smallest multiple of 32 around imgsz, as ultralytics' rect.
UNBUILT_PREDICT_OPTIONS = {"augment": False, "visualize": False, "embed": None, "save_frames": False,
                           "compile": False, "show": False, "rect": True}

# ultralytics' deprecated predict arguments (cfg._handle_deprecation), still taken there with a warning: their
# names now and how the old value converts (the hide_ ones are the show_ ones negated)
DEPRECATED_PREDICT_OPTIONS = {"boxes": ("show_boxes", lambda v: v),
                              "hide_labels": ("show_labels", lambda v: not bool(v)),
                              "hide_conf": ("show_conf", lambda v: not bool(v)),
                              "line_thickness": ("line_width", lambda v: v)}

TRAIN_INSTEAD = ("it runs inference only: train with ultralytics (yolo train ...) and load its best.pt here, "
                 "YOLO('runs/detect/train/weights/best.pt')")
# ultralytics' modes (its model methods, and `yolo MODE` on its command line) mlx-zoo does not build: what instead
UNBUILT_MODES = {
    "train": TRAIN_INSTEAD, "tune": TRAIN_INSTEAD,
    "val": "write the predictions with python -m zoo.run MODEL IMAGES --conf 0.001 --save-json and score its "
           "predictions.json with pycocotools' COCOeval (docs/yolov8.md, COCO evaluation)",
    "export": "the model runs on MLX from its .pt or .safetensors checkpoint as it is; export ONNX, TensorRT or "
              "CoreML files with ultralytics",
    "benchmark": "python -m zoo.bench times it against PyTorch (docs/speed-cpu.md)",
    "track": "run predict(source, stream=True) and give each frame's sv.Detections.from_ultralytics(r) to a tracker "
             "(e.g. pip install trackers: ByteTrack); r.update(boxes=...) takes tracked (N, 7) rows x1, y1, x2, y2, "
             "id, conf, cls"}


def predict_options(options: dict) -> dict:
    """ultralytics' predict keywords as predict takes them: deprecated names under their new ones (said in one line),
    the defaults of options not built here dropped; one error for any other value of those, an unknown key, or a value
    of a type ultralytics' check_cfg refuses (a bool key's text: save='no' was taken as True)."""
    options = dict(options)
    for old, (new, convert) in DEPRECATED_PREDICT_OPTIONS.items():
        if old in options:
            if new in options:
                raise ZooError(f"predict({old}=..., {new}=...): {old} is ultralytics' old name of {new}; "
                               f"pass {new} alone")
            options[new] = convert(options.pop(old))
            print(f"note: predict({old}=...) is deprecated in ultralytics: it means {new}={options[new]!r}, "
                  f"pass that", file=sys.stderr)
    for key, default in UNBUILT_PREDICT_OPTIONS.items():
        if key in options and options[key] is default:
            del options[key]  # ultralytics' default: what predict does here anyway
    unknown = [key for key in options if key not in PREDICT_OPTIONS]
    if unknown:
        key = unknown[0]
        hint = {"show": "call r.show() on each result to view it; ",
                # a val option ultralytics' predict takes and ignores: no predictions.json comes of it there either
                "save_json": "COCO records: r.to_coco(image_id) on each result (pycocotools' loadRes reads their "
                             "list), or python -m zoo.run MODEL IMAGES --save-json; "}.get(key, "")
        if key in UNBUILT_PREDICT_OPTIONS:
            raise ZooError(f"predict({key}={options[key]!r}) is not available in mlx-zoo (only ultralytics' "
                           f"default {key}={UNBUILT_PREDICT_OPTIONS[key]!r}): {hint}it takes "
                           f"{', '.join(PREDICT_OPTIONS)}")
        raise ZooError(f"predict() got an unknown keyword argument {key}=: {hint}it takes "
                       f"{', '.join(PREDICT_OPTIONS)}")
    for key, value in options.items():
        if key in BOOL_PREDICT_OPTIONS and not isinstance(value, (bool, np.bool_, type(None))):
            raise ZooError(f"predict({key}={value!r}): pass {key}=True or {key}=False")
    width = options.get("line_width")
    if width is not None and (isinstance(width, bool) or not isinstance(width, (int, float)) or not width >= 0):
        # a str failed when the first image was drawn ('type str doesn't define __round__'); 0 is None, as upstream
        raise ZooError(f"predict(line_width={width!r}): pass a width in pixels, or None (or 0) for one from the "
                       "image's size")
    return options


def not_built(call: str, instead: str | None = None) -> ZooError:
    """An ultralytics model method mlx-zoo does not build: one error naming what to use instead."""
    return ZooError(f"{call}() is not available in mlx-zoo: {instead or UNBUILT_MODES[call]}")
