"""LaMa (big-lama): the FFC ResNet inpainting generator of advimman/lama, in MLX, NHWC.

The root holds ``generator`` like upstream's Lightning module, so the checkpoint
keys ``generator.model.N...`` load by name and the module names are upstream's.
``generator.model`` is upstream's ``nn.Sequential``:

  0      ReflectionPad2d(3)
  1      FFC_BN_ACT 4 -> 64, 7x7                       (local only)
  2, 3   FFC_BN_ACT 64 -> 128 -> 256, 3x3 stride 2     (local only)
  4      FFC_BN_ACT 256 -> 512, 3x3 stride 2           (splits into 128 local + 384 global)
  5-22   FFCResnetBlock(512), ratio 0.75: tuples (local 128, global 384)
  23     ConcatTupleLayer                              (local channels first)
  24-32  3 x [ConvTranspose2d k3 s2 p1 op1, BatchNorm, ReLU]
  33-35  ReflectionPad2d(3), Conv2d 64 -> 3 7x7, Sigmoid

FFC layers return ``(local, global)``; a part with no channels is the scalar 0,
as upstream, so the sums of the FFC branches read the same as upstream's.
Every padding inside the network is reflect padding.

Half precision: the Fourier units (FFT or its matrix products, 1x1 conv, BatchNorm,
ReLU, inverse) always compute in float32 and hand back the model's dtype. The spectrum is
where half precision breaks: the DC term of an orthonormal spectrum is the mean
times sqrt(H*W), which overflows float16 on large feature maps (MNN's float16
port gives all-zero images). MLX's FFT returns complex64 for any input anyway.
"""
from __future__ import annotations

import functools
import math
import numbers
import sys
import warnings
from pathlib import Path
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from PIL import Image

from zoo.compiled import (CompiledForward, batch_norm_affine, fold_batch_norm, folded, folding, kept,
                          recording_layers, with_winograd)
from zoo.concurrency import serialized
from zoo.devices import MEMORY_SHARE, as_model_input, device_memory
from zoo.errors import ZooError, keyword, option
from zoo.images import load_image, open_image
from zoo.kernels import cpu as cpu_ops
from zoo.kernels import few_outputs, implicit_gemm, winograd
from zoo.models.layers import (BatchNorm, Conv2d, ConvTranspose2d, Sequential, Sigmoid, conv2d_derived, conv_bn,
                               folds_batch_norm, fusing_on_cpu, irfft2_parts, reflect_pad, rfft2_parts)

RATIO = 0.75  # share of global (spectral) channels in the residual blocks
N_BLOCKS = 18
PAD_MULTIPLE = 8  # three stride-2 downsamplings
# The residual blocks reflect-pad the 1/8-scale map by 1, which needs 2 pixels:
# the padded input must be at least 16 pixels on each side.
MIN_MODEL_SIDE = 16

HD_STRATEGIES = ("original", "resize", "crop")
# IOPaint's defaults (iopaint/schema.py InpaintRequest)
RESIZE_LIMIT = 1280
CROP_MARGIN = 128
CROP_TRIGGER_SIZE = 800
# Memory of one LaMa command on the CPU (peak RSS, glibc's malloc keeping freed memory as zoo sets
# it: zoo.blas), from VmHWM of `python -m zoo.run lama` on MLX 0.32.4 (docs/hardening.md, 2026-11-29):
# what a command holds before its pixels (Python, MLX, the weights, the C forms' Winograd and packed
# forms of them; 789 MB measured at 32x32, 612 in float16, and 8% for other versions of the libraries;
# tests/test_lama_memory.py checks it) ...
PROCESS_BYTES = 850_000_000
# ... plus this much per padded pixel of a pass, by the model's dtype size (the full-resolution
# front and the maps kept; half precision converts to float32 around the C forms, so it takes
# more) ...
BYTES_PER_PIXEL = {4: 450, 2: 800}
# ... plus this much per pixel of one band of the full-resolution tail (FFCResNetGenerator.banded,
# its halo rows included: band_pixels); with the above and below, 1.82 GB estimated for a float32
# pass over a 1280x1280 image, 1.43 GB measured
BAND_BYTES_PER_PIXEL = 2_500
# ... plus this much per pixel of the whole image, which the command holds beside its passes (decoded,
# the hole, the output, the resize strategy's copies: 240 MB measured for a 4000x3000 photo resized)
IMAGE_BYTES_PER_PIXEL = 25
# The default bound of one command's memory on the CPU: issue 35's 2 GB per single-image command.
# On a GPU a pass may plan to use MEMORY_SHARE of the device's memory instead.
PROCESS_BOUND = 2_000_000_000
# A GPU pass's memory per padded pixel in float32 (a CPU measurement before the C forms and bands,
# mx.get_peak_memory() at 64x64 and 128x128: 14.9 and 14.8 kB; nothing better measured on a GPU)
GPU_BYTES_PER_PIXEL = 15_000
# Largest side of a Fourier unit's map whose spectrum is computed as matrix products
# (rfft2_planar) instead of FFTs: they were faster up to 64 (inputs of 512 px), the largest
# measured (H100: in LaMa 512's compiled forward; CPU, 192 channels: 1.8 against 3.5 ms per unit
# at 32, 10.7 against 12.3 ms at 64); their cost grows with the side's square
DFT_MAX_SIDE = 64


class ReflectionPad2d(nn.Module):
    def __init__(self, pad: int):
        super().__init__()
        self.pad = pad

    def __call__(self, x: mx.array) -> mx.array:
        return reflect_pad(x, self.pad)


class ReflectConv2d(Conv2d):
    """torch Conv2d(padding_mode="reflect"): the padding is reflected, not zeros (layers.Conv2d's
    ``reflect_padding``).

    A subclass of nn.Conv2d (through layers.Conv2d) so the weight loader converts its OIHW weight.
    """

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0, bias: bool = False):
        super().__init__(cin, cout, kernel, stride=stride, padding=0, bias=bias)
        self.reflect_padding = padding

    def __call__(self, x: mx.array) -> mx.array:
        # inside a compiled forward that derives arrays for this convolution (``derive``): those
        arrays = folded(self)
        return super().__call__(x) if arrays is None else self.derived(x, arrays)

    def derived(self, x: mx.array, arrays: dict[str, mx.array]) -> mx.array:
        """This convolution with arrays a compiled forward derived from its weight (``derive``, or
        merged with another's by ``merge_outputs``, which the FFC runs)."""
        return conv2d_derived(reflect_pad(x, self.reflect_padding), self, arrays)


# Winograd's F2 for LaMa, not the GPU's default F4: 18 residual blocks carry F4's coarser rounding
# to the output, where it was less accurate than the direct convolution (tests/test_winograd.py).
WINOGRAD_FORM = winograd.F2


def derive(conv: ReflectConv2d, _=None) -> dict[str, mx.array]:
    """A convolution's weight, with its Winograd transform where that form may run (zoo.compiled);
    run by models.layers.conv2d_derived, which picks its form."""
    return with_winograd(conv, {"weight": conv.weight}, WINOGRAD_FORM)


def weight_and_bias(conv: nn.Conv2d, _=None) -> dict[str, mx.array]:
    """A convolution's own weight and bias: the generator's last one, which a compiled forward
    runs with its padding (FFCResNetGenerator)."""
    return {"weight": conv.weight, "bias": conv.bias}


class FourierUnit(nn.Module):
    """Global mixing: 1x1 conv + BN + ReLU on the orthonormal 2-D real spectrum of H, W.

    The spectrum's real and imaginary parts are interleaved in channels as
    upstream lays them out: channel 2k is Re(c_k), channel 2k+1 is Im(c_k).
    On maps up to DFT_MAX_SIDE, outside zoo.compiled.eager() (where the validator records
    the upstream layers), the BatchNorm is folded into the conv and the spectrum is
    ``rfft2_planar``'s matrix products.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.conv_layer = Conv2d(2 * channels, 2 * channels, 1, bias=False)
        self.bn = BatchNorm(2 * channels)
        self.relu = nn.ReLU()

    def __call__(self, x: mx.array) -> mx.array:
        h, w = x.shape[1:3]
        planar = self.planar() if max(h, w) <= DFT_MAX_SIDE else None
        if planar is not None:
            z = rfft2_planar(x.astype(mx.float32))
            if fusing_eagerly_on_cpu() and cpu_ops.native_available():  # a C call an image, split over our threads
                weight = self.planar_weight(planar)
                z = cpu_ops.per_image(lambda v: cpu_ops.pointwise_parts([v], [0], weight, planar["bias"], "relu"), z)
            else:
                z = mx.maximum(z @ planar["matrix"] + planar["bias"], 0)
            return irfft2_planar(z, (h, w)).astype(x.dtype)
        parts = rfft2_parts(x)  # float32 (n, h, w//2+1, 2c)
        # float32 in, half-precision weights: MLX promotes, so this stays float32
        parts = self.relu(self.bn(self.conv_layer(parts)))
        return irfft2_parts(parts, (h, w)).astype(x.dtype)

    def planar(self) -> dict[str, mx.array] | None:
        """``planar_fold`` of this unit: a compiled forward's trace inputs, or kept on the unit until
        a weight is replaced; None inside zoo.compiled.eager() (the validator records the
        upstream layers) and in training mode (DFT_MAX_SIDE says what was measured)."""
        traced = folded(self.conv_layer)
        if traced is not None or recording_layers() or self.training or not self.bn.track_running_stats:
            return traced
        return kept(self, "_planar", (self.conv_layer, self.bn), lambda: self.planar_fold(self.conv_layer, self.bn))

    def planar_weight(self, planar: dict[str, mx.array]) -> mx.array:
        """``planar``'s matrix as a 1x1 convolution's weight (out, 1, 1, in) for the C forms, kept until a
        weight is replaced."""
        return kept(self, "_planar_weight", (self.conv_layer, self.bn),
                    lambda: mx.contiguous(planar["matrix"].T)[:, None, None, :])

    @staticmethod
    def planar_fold(conv: nn.Conv2d, bn: nn.BatchNorm) -> dict[str, mx.array]:
        """The conv with its BatchNorm folded in, in float32, as a (in, out) matrix and a bias in
        rfft2_planar's channel order (p * C + k: part p of channel k's spectrum, where upstream
        has 2k + p)."""
        weight, bias = fold_batch_norm(conv, bn)
        c2 = weight.shape[0]
        order = mx.array(np.arange(c2).reshape(-1, 2).T.reshape(-1))
        return {"matrix": weight.reshape(c2, c2)[order][:, order].T, "bias": bias[order]}


@functools.lru_cache(maxsize=16)
def dft_matrices(h: int, w: int) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """The float32 matrices of rfft2_planar (over W, then H) and irfft2_planar (over W, then H)
    of an h x w map, orthonormal, computed in float64.

    Forward over W (rows (s, k, p)): s = 0 gives (Re, Im) of the W-spectrum Y, s = 1 gives
    (Im Y, -Re Y), so that the complex product over H is one real product of a (h, 2h) matrix
    with rows of (h, s) pairs. Inverse over W (rows (q, w)) takes the half spectrum with the
    weights of irfft (1 for the DC and Nyquist terms, 2 for the others; their imaginary parts
    ignored, as numpy), giving (Re, Im) of each H-frequency's row; over H its real part.
    """
    k = w // 2 + 1
    fw = 2 * np.pi * np.outer(np.arange(k), np.arange(w)) / w  # (k, w)
    cos, sin = np.cos(fw), np.sin(fw)
    forward_w = np.stack([np.stack([cos, -sin], 1), np.stack([-sin, -cos], 1)]).reshape(4 * k, w) / np.sqrt(w)
    fh = 2 * np.pi * np.outer(np.arange(h), np.arange(h)) / h  # symmetric (h, h)
    forward_h = np.stack([np.cos(fh), np.sin(fh)], -1).reshape(h, 2 * h) / np.sqrt(h)
    weights = np.full(k, 2.0)
    weights[0] = 1
    if w % 2 == 0:
        weights[-1] = 1
    cos, sin = weights * cos.T, weights * sin.T  # (w, k)
    inverse_w = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)]).reshape(2 * w, 2 * k) / np.sqrt(w)
    inverse_h = np.stack([np.cos(fh), -np.sin(fh)], -1).reshape(h, 2 * h) / np.sqrt(h)
    return tuple(mx.array(m.astype(np.float32)) for m in (forward_w, forward_h, inverse_w, inverse_h))


def rfft2_planar(x: mx.array) -> mx.array:
    """The orthonormal rfft2 over H, W of float32 (N, H, W, C) as two matrix products:
    (N, H, W//2+1, 2C) with channel p * C + k = part p (0 real, 1 imaginary) of channel k.

    On maps of LaMa's 1/8 scale the products are cheap (64 x 64: 0.4 GFLOP) where the FFT took
    ~10 GPU launches (axis transposes, complex to parts) per call."""
    n, h, w, c = x.shape
    forward_w, forward_h, _, _ = dft_matrices(h, w)
    k = w // 2 + 1
    y = cpu_ops.batched_matmul(forward_w, x.reshape(n * h, w, c))  # (N*H, (s, k, p), C)
    return cpu_ops.batched_matmul(forward_h, y.reshape(n, 2 * h, 2 * k * c)).reshape(n, h, k, 2 * c)


def irfft2_planar(z: mx.array, size: tuple[int, int]) -> mx.array:
    """The inverse of rfft2_planar, to float32 (N, H, W, C) of the given (H, W)."""
    n, h, k, c2 = z.shape
    w = size[1]
    _, _, inverse_w, inverse_h = dft_matrices(h, w)
    v = cpu_ops.batched_matmul(inverse_w, z.reshape(n * h, 2 * k, c2 // 2))  # (N*H, (q, w), C)
    return cpu_ops.batched_matmul(inverse_h, v.reshape(n, 2 * h, w * c2 // 2)).reshape(n, h, w, c2 // 2)


def fusing_eagerly_on_cpu() -> bool:
    """layers.fusing_on_cpu (not inside zoo.compiled.eager(), where the validator records the upstream
    layers) outside a compiled forward that derives its own forms of the FFCs' convolutions
    (``folded``): where the FFCs run their C fusions."""
    return fusing_on_cpu() and not folding()


class SpectralTransform(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv1 = Sequential(Conv2d(cin, cout // 2, 1, bias=False), BatchNorm(cout // 2), nn.ReLU())
        self.fu = FourierUnit(cout // 2)
        self.conv2 = Conv2d(cout // 2, cout, 1, bias=False)

    def shortcut(self, x: mx.array) -> mx.array:
        return x

    def __call__(self, x: mx.array) -> mx.array:
        return self.conv2(self.mixed(x))

    def mixed(self, x: mx.array) -> mx.array:
        """What conv2 takes: conv1's output plus the Fourier unit's of it. conv1 (1x1, BatchNorm, ReLU)
        is one C convolution where ``fusing_eagerly_on_cpu``."""
        if fusing_eagerly_on_cpu():
            conv, bn, _ = self.conv1.children_in_order()
            x = conv_bn(conv, bn, x, activation="relu")
        else:
            x = self.conv1(x)
        return self.shortcut(x) + self.fu(x)


class FFC(nn.Module):
    """Fast Fourier convolution: local (conv) and global (spectral) channel groups,
    with the four paths local->local, local->global, global->local, global->global.
    A path exists only where both of its channel groups are non-empty."""

    def __init__(self, cin: int, cout: int, kernel: int, ratio_gin: float, ratio_gout: float,
                 stride: int = 1, padding: int = 0):
        super().__init__()
        in_g, out_g = int(cin * ratio_gin), int(cout * ratio_gout)
        in_l, out_l = cin - in_g, cout - out_g
        if in_l and out_l:
            self.convl2l = ReflectConv2d(in_l, out_l, kernel, stride, padding)
        if in_l and out_g:
            self.convl2g = ReflectConv2d(in_l, out_g, kernel, stride, padding)
        if in_g and out_l:
            self.convg2l = ReflectConv2d(in_g, out_l, kernel, stride, padding)
        if in_g and out_g:
            self.convg2g = SpectralTransform(in_g, out_g)
        self.has_local, self.has_global = out_l > 0, out_g > 0

    def __call__(self, x):
        x_l, x_g = x if isinstance(x, tuple) else (x, 0)
        paths = {}
        merged = folded(self.convl2l) if "convl2l" in self else None
        if merged is not None:  # a compiled forward: both convolutions of x_l as one (merge_outputs)
            both = self.convl2l.derived(x_l, merged)
            n_l = self.convl2l.weight.shape[0]
            paths = {"convl2l": both[..., :n_l], "convl2g": both[..., n_l:]}
        for path, inp in (("convl2l", x_l), ("convl2g", x_l), ("convg2l", x_g), ("convg2g", x_g)):
            if path in self and path not in paths:
                paths[path] = self[path](inp)
        out_l = sum(paths[p] for p in ("convl2l", "convg2l") if p in paths) if self.has_local else 0
        out_g = sum(paths[p] for p in ("convl2g", "convg2g") if p in paths) if self.has_global else 0
        return out_l, out_g


def subpixel_fold(conv: nn.ConvTranspose2d, bn: nn.BatchNorm) -> dict[str, mx.array]:
    """An upsampling's transposed convolution with its BatchNorm folded in, as the phase kernels of
    zoo.kernels.implicit_gemm's SUBPIXEL (which also applies the ReLU after them), where that
    kernel runs (float32 on CUDA; nothing elsewhere: the layers run as they are)."""
    if not implicit_gemm.subpixel_preferred(conv.weight.dtype, conv.weight.shape, conv.stride, conv.padding,
                                            conv.output_padding, conv.dilation):
        return {}
    weight, bias = fold_batch_norm(conv, bn)
    return {"phases": implicit_gemm.subpixel_weights(weight), "bias": bias}


def merge_outputs(first: nn.Conv2d, second: nn.Conv2d) -> dict[str, mx.array]:
    """Two convolutions of one input (an FFC's local -> local and local -> global) as one weight:
    one launch where there were two (LaMa's compiled GPU forward is bound by its launches)."""
    return with_winograd(first, {"weight": mx.concatenate([first.weight, second.weight])}, WINOGRAD_FORM)


class FFC_BN_ACT(nn.Module):  # upstream's class name
    def __init__(self, cin: int, cout: int, kernel: int, ratio_gin: float, ratio_gout: float,
                 stride: int = 1, padding: int = 0):
        super().__init__()
        self.ffc = FFC(cin, cout, kernel, ratio_gin, ratio_gout, stride, padding)
        out_g = int(cout * ratio_gout)
        self.bn_l = BatchNorm(cout - out_g)
        self.act_l = nn.ReLU()
        if out_g:
            self.bn_g = BatchNorm(out_g)
            self.act_g = nn.ReLU()

    def __call__(self, x):
        if self.fuses_on_cpu():
            return self.fused(x)
        x_l, x_g = self.ffc(x)
        x_l = self.act_l(self.bn_l(x_l))
        if "bn_g" in self:
            x_g = self.act_g(self.bn_g(x_g))
        return x_l, x_g

    def fuses_on_cpu(self) -> bool:
        """Whether ``fused`` runs: where ``fusing_eagerly_on_cpu``, at inference, with a local output path."""
        bns = [self.bn_l] + ([self.bn_g] if "bn_g" in self else [])
        return (fusing_eagerly_on_cpu() and not self.ffc.training and all(folds_batch_norm(bn) for bn in bns)
                and ("convl2l" in self.ffc or "convg2l" in self.ffc))

    def fused(self, x) -> tuple:
        """The layer with its BatchNorms folded into the convolutions (``cpu_forms``), each sum of paths
        and its ReLU computed by the C convolution that makes it: the local output one convolution of
        the local and global inputs side by side; the global one the local -> global convolution,
        onto which the spectral transform's conv2 adds its product before the ReLU."""
        ffc, forms = self.ffc, self.cpu_forms()
        x_l, x_g = x if isinstance(x, tuple) else (x, 0)
        inputs = [inp for path, inp in (("convl2l", x_l), ("convg2l", x_g)) if path in ffc]
        local_conv = ffc.convl2l if "convl2l" in ffc else ffc.convg2l
        out_l = local_conv.with_forms(inputs[0] if len(inputs) == 1 else mx.concatenate(inputs, axis=-1),
                                      forms["local"], "relu")
        if "bn_g" not in self:
            return out_l, 0
        spectral = "convg2g" in ffc
        out_g = ffc.convl2g.with_forms(x_l, forms["global"], None if spectral else "relu") if "convl2g" in ffc \
            else None
        if spectral:
            conv2 = forms["spectral"]

            def spectral_sum(mixed: mx.array, residual: mx.array | None = None) -> mx.array:
                return cpu_ops.conv2d(mixed, conv2["weight"], conv2["bias"], activation="relu", residual=residual)

            out_g = cpu_ops.per_image(spectral_sum, ffc.convg2g.mixed(x_g), *([] if out_g is None else [out_g]))
        return out_l, out_g

    def cpu_forms(self) -> dict[str, dict[str, mx.array | None]]:
        """The convolutions ``fused`` runs, with the BatchNorms folded in (in float32, stored in the
        weights' dtype, as Conv2d.with_batch_norm; kept until a weight is replaced): "local" (the
        local -> local and global -> local weights side by side, the local BatchNorm's shift its bias),
        "global" (local -> global, the global BatchNorm's shift its bias) and "spectral" (the spectral
        transform's conv2, its bias that shift where there is no local -> global path)."""
        ffc = self.ffc
        local = [ffc[path] for path in ("convl2l", "convg2l") if path in ffc]
        has_global = "bn_g" in self
        global_convs = [ffc[path] for path in ("convl2g",) if has_global and path in ffc]
        spectral = [ffc.convg2g.conv2] if has_global and "convg2g" in ffc else []
        sources = (*local, self.bn_l, *global_convs, *spectral, *([self.bn_g] if has_global else []))
        return kept(self, "_cpu_forms", sources, lambda: self.fold_cpu_forms(local, global_convs, spectral))

    def fold_cpu_forms(self, local: list, global_convs: list, spectral: list) -> dict:
        dtype = local[0].weight.dtype

        def scaled(convs: list, bn: nn.BatchNorm, with_shift: bool) -> tuple[mx.array, mx.array | None]:
            scale, shift = batch_norm_affine(bn)
            weight = mx.concatenate([c.weight.astype(mx.float32) for c in convs], axis=-1)
            weight = weight * scale.reshape(-1, 1, 1, 1)
            return weight.astype(dtype), shift.astype(dtype) if with_shift else None

        forms = {"local": local[0].forms(*scaled(local, self.bn_l, True))}
        if global_convs:
            forms["global"] = global_convs[0].forms(*scaled(global_convs, self.bn_g, True))
        if spectral:
            weight, bias = scaled(spectral, self.bn_g, not global_convs)
            forms["spectral"] = {"weight": weight, "bias": bias}
        return forms


class FFCResnetBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.conv1 = FFC_BN_ACT(dim, dim, 3, RATIO, RATIO, padding=1)
        self.conv2 = FFC_BN_ACT(dim, dim, 3, RATIO, RATIO, padding=1)

    def shortcut(self, x: tuple) -> tuple:
        return x

    def __call__(self, x: tuple) -> tuple:
        x_l, x_g = self.conv2(self.conv1(x))
        id_l, id_g = self.shortcut(x)
        return id_l + x_l, id_g + x_g


class ConcatTupleLayer(nn.Module):
    def __call__(self, x: tuple) -> mx.array:
        return mx.concatenate(x, axis=-1)


class FFCResNetGenerator(nn.Module):
    """big-lama's generator: ngf 64, 3 downsamplings, 18 FFC residual blocks."""

    def __init__(self, ngf: int = 64, n_downsampling: int = 3, n_blocks: int = N_BLOCKS):
        super().__init__()
        layers = [ReflectionPad2d(3), FFC_BN_ACT(4, ngf, 7, 0, 0)]
        for i in range(n_downsampling):
            last = i == n_downsampling - 1
            # the last downsampling already splits channels the way the blocks expect
            layers.append(FFC_BN_ACT(ngf * 2**i, ngf * 2 ** (i + 1), 3, 0, RATIO if last else 0, stride=2, padding=1))
        dim = ngf * 2**n_downsampling
        layers += [FFCResnetBlock(dim) for _ in range(n_blocks)]
        layers.append(ConcatTupleLayer())
        for i in range(n_downsampling):
            cin = dim // 2**i
            layers += [ConvTranspose2d(cin, cin // 2, 3, stride=2, padding=1, output_padding=1),
                       BatchNorm(cin // 2), nn.ReLU()]
        layers += [ReflectionPad2d(3), Conv2d(ngf, 3, 7), Sigmoid()]
        self.model = Sequential(*layers)

    @property
    def last_conv(self) -> Conv2d:
        return self.model.children_in_order()[-2]

    def __call__(self, x: mx.array) -> mx.array:
        *body, pad, conv, sigmoid = self.model.children_in_order()
        arrays = folded(conv)
        if arrays is None and fusing_on_cpu():
            return self.banded(x)
        if arrays is None or not few_outputs.preferred(x.dtype, conv.weight.shape, conv.stride, conv.groups,
                                                       conv.dilation):
            return self.model(x)
        # compiled on CUDA, float32: each upsampling (transposed convolution, BatchNorm, ReLU) as one kernel
        # that writes its output phases interleaved (no cuDNN workspace: zoo.kernels.implicit_gemm's
        # SUBPIXEL); the reflect pad and the 7x7 convolution to 3 channels as one kernel that reads the
        # padding in place (no padded copy, no GEMM of all taps: zoo.kernels.few_outputs)
        layers = iter(body)
        for layer in layers:
            upsampling = folded(layer) if isinstance(layer, ConvTranspose2d) else None
            if upsampling:
                next(layers), next(layers)  # its BatchNorm (folded in) and ReLU (applied by the kernel)
                x = implicit_gemm.conv_transpose2d_subpixel(x, upsampling["phases"], upsampling["bias"], "relu")
            else:
                x = layer(x)
        return sigmoid(few_outputs.conv2d(x, arrays["weight"], arrays["bias"], pad.pad, reflect=True))

    def banded(self, x: mx.array) -> mx.array:
        """The generator on the CPU, its upsamplings and last convolution (``model.24`` on) in bands of
        output rows, each evaluated before the next: at full resolution their temporaries (the
        transposed convolutions' taps, the upsampled maps; about 1.2 kB per pixel) live for one band
        only. Each band computes the rows its kernels reach (halo), so it holds the values of the
        whole map's forward, up to float rounding (OpenBLAS's GEMM rows). A map of one band runs
        as a whole. Each upsampling is one C pass (``upsampling``)."""
        for layer in self.model.children_in_order()[:24]:
            x = layer(x)
        return self.tail_in_bands(x)

    def tail_in_bands(self, x: mx.array) -> mx.array:
        """``model.24`` on, over the merged map ``x``, in bands of output rows (``banded``)."""
        layers = self.model.children_in_order()
        upsamplings, (pad, conv, sigmoid) = layers[24:-3], layers[-3:]
        stages = [upsamplings[i:i + 3] for i in range(0, len(upsamplings), 3)]
        height, width = x.shape[1] * 2 ** len(stages), x.shape[2] * 2 ** len(stages)
        step = band_rows(width)
        if step >= height:
            return sigmoid(conv(pad(upsampled_rows(x, stages, 0, height))))
        bands = []
        for start in range(0, height, step):
            # the rows the 7x7 convolution reads: its reflect padding of the map's rows at the borders
            rows = reflected_rows(start - pad.pad, min(start + step, height) + pad.pad, height)
            low, high = int(rows.min()), int(rows.max()) + 1
            band = mx.take(upsampled_rows(x, stages, low, high), mx.array(rows - low), axis=1)
            band = sigmoid(conv(reflect_pad(band, 0, pad.pad)))
            try:
                mx.eval(band)
            except ValueError:  # inside a caller's mx.compile / vmap: no data yet, the trace holds every band
                pass
            bands.append(band)
        return mx.concatenate(bands, axis=1) if len(bands) > 1 else bands[0]


# Output rows of one band of the generator's full-resolution tail on the CPU: about this many pixels
BAND_PIXELS = 1 << 16
BAND_HALO = 8


def band_pixels(height: int, width: int) -> int:
    """Pixels of the widest band of ``FFCResNetGenerator.banded`` over a padded map, its halo included
    (3 rows each side for the 7x7 convolution, and the upsamplings' rows)."""
    return min(height, band_rows(width) + BAND_HALO) * width


def band_rows(width: int) -> int:
    """Rows per band of ``FFCResNetGenerator.banded`` for a map ``width`` pixels wide: at least 8."""
    return max(PAD_MULTIPLE, BAND_PIXELS // width)


def reflected_rows(start: int, stop: int, height: int) -> np.ndarray:
    """Rows [start, stop) of a map of ``height`` rows reflect-padded (torch's: the edge row is not
    repeated), as rows of the map; the padding is less than the height."""
    rows = np.arange(start, stop)
    rows = np.where(rows < 0, -rows, rows)
    return np.where(rows >= height, 2 * (height - 1) - rows, rows)


def upsampled_rows(x: mx.array, stages: list, start: int, stop: int) -> mx.array:
    """Rows [start, stop) of ``stages`` (each a [ConvTranspose2d k3 s2 p1 op1, BatchNorm, ReLU], doubling
    the map) applied to x, computed from the input rows they reach: output row r of such a
    transposed convolution sums input rows r // 2 and (r + 1) // 2."""
    if not stages:
        return x[:, start:stop]
    *inner, stage = stages
    first, last = start // 2, min(stop // 2 + 1, x.shape[1] * 2 ** len(inner))
    y = upsampling(stage, upsampled_rows(x, inner, first, last))
    return y[:, start - 2 * first:stop - 2 * first]


def upsampling(stage: list, x: mx.array) -> mx.array:
    """One [ConvTranspose2d, BatchNorm, ReLU] stage: where ``fusing_on_cpu``, the BatchNorm folded into
    the transposed convolution, whose C pass applies the ReLU (layers.ConvTranspose2d.with_batch_norm)."""
    upsample, bn, relu = stage
    if fusing_on_cpu() and folds_batch_norm(bn):
        return upsample.with_batch_norm(x, bn, "relu")
    return relu(bn(upsample(x)))


class LaMa(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = FFCResNetGenerator()
        modules = [m for _, m in self.generator.named_modules()]
        merged = [(m.convl2l, m.convl2g, merge_outputs) for m in modules
                  if isinstance(m, FFC) and "convl2l" in m and "convl2g" in m]
        planar = [(m.conv_layer, m.bn, FourierUnit.planar_fold) for m in modules if isinstance(m, FourierUnit)]
        alone = [(m.convg2l, None, derive) for m in modules if isinstance(m, FFC) and "convg2l" in m]
        # the FFCs of local convolutions only (the first convolution, the first two downsamplings):
        # conv2d_derived picks their form (the downsamplings: zoo.kernels.implicit_gemm on CUDA)
        alone += [(m.convl2l, None, derive) for m in modules if isinstance(m, FFC) and "convl2l" in m
                  and "convl2g" not in m]
        last = [(self.generator.last_conv, None, weight_and_bias)]
        steps = self.generator.model.children_in_order()
        upsampling = [(conv, bn, subpixel_fold) for conv, bn in zip(steps, steps[1:]) if isinstance(conv, ConvTranspose2d)]
        self.compiled = CompiledForward(self.forward, self, folds=merged + planar + alone + last + upsampling)

    @property
    def dtype(self) -> mx.Dtype:
        return self.generator.last_conv.weight.dtype

    def __call__(self, image, mask) -> mx.array:
        """image (N, H, W, 3) in [0, 1], mask (N, H, W, 1) in {0, 1} (1 = hole) -> predicted (N, H, W, 3).

        H and W must be multiples of 8 and at least 16. This is the generator's
        raw prediction everywhere; ``inpaint`` keeps the known pixels. Compiled per
        input size (zoo.compiled); ``forward`` is the same network, eager.
        """
        image = as_model_input(image, self.dtype, "image", channels=3)
        mask = as_model_input(mask, self.dtype, "mask", channels=1)
        check_model_shapes(image.shape, mask.shape)
        return self.compiled(image, mask)

    def forward(self, image: mx.array, mask: mx.array) -> mx.array:
        return self.generator(self.generator_input(image, mask))

    def generator_input(self, image: mx.array, mask: mx.array) -> mx.array:
        """Upstream's training module: cat([image * (1 - mask), mask]) along channels."""
        return mx.concatenate([image * (1 - mask), mask], axis=-1)

    @serialized()
    def inpaint(self, image, mask, hd_strategy: str = "crop", resize_limit: int = RESIZE_LIMIT,
                crop_margin: int = CROP_MARGIN, crop_trigger_size: int = CROP_TRIGGER_SIZE,
                max_megapixels: float | None = None, progress: bool = False):
        """Fill the hole of ``image`` marked by ``mask`` (nonzero = hole): an (H, W, 3) uint8 array.

        ``image``: a path, a PIL image or an (H, W, 3) / (H, W, 4) array; whatever the kind, the
        result is a numpy uint8 array, (H, W, 4) when the image has an alpha channel: alpha is set
        aside and put back unchanged (the model sees the raw colours, as IOPaint).
        ``Image.fromarray(out)`` makes it a PIL image. ``mask``: path, PIL image or HxW array of
        the image's size (see ``load_mask``).

        Pixels outside the hole are returned unchanged. A mask with no hole
        returns a copy of the image (with a warning) without running the model.
        ``hd_strategy`` (IOPaint's, in any case: its "Crop" too): "original" runs the whole image; "resize",
        when the longer side exceeds ``resize_limit``, runs a copy scaled down to
        it and pastes back only the hole, scaled up; "crop", when the longer side
        exceeds ``crop_trigger_size``, runs crops around the holes with
        ``crop_margin`` pixels of context. ``max_megapixels`` bounds one model
        pass (default: what fits in the device's memory).
        """
        rgb, alpha = split_alpha(open_image(image) if isinstance(image, (str, Path)) else image)
        hole = load_mask(mask, rgb.shape[:2])
        if not hole.any():
            warnings.warn("the mask marks no pixel as hole: the image is returned unchanged", stacklevel=2)
            out = rgb.copy()
        else:
            out = self.inpaint_array(rgb, hole, hd_strategy, resize_limit, crop_margin, crop_trigger_size,
                                     max_megapixels, progress)
        return out if alpha is None else np.dstack([out, alpha])

    @serialized()
    def inpaint_array(self, image: np.ndarray, hole: np.ndarray, hd_strategy: str = "crop",
                      resize_limit: int = RESIZE_LIMIT, crop_margin: int = CROP_MARGIN,
                      crop_trigger_size: int = CROP_TRIGGER_SIZE, max_megapixels: float | None = None,
                      progress: bool = False) -> np.ndarray:
        """``inpaint`` on an (H, W, 3) uint8 image and an (H, W) bool hole that marks some pixel, checked as such
        (a 0/1 uint8 hole indexed rows, a float image came back half 0-255, no error)."""
        if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3):
            raise ZooError(f"inpaint_array takes an (H, W, 3) uint8 image, got {array_kind(image)}: "
                           "pass any other image (a path, PIL, float, grey, RGBA) to inpaint")
        if not (isinstance(hole, np.ndarray) and hole.dtype == bool and hole.shape == image.shape[:2] and hole.any()):
            raise ZooError(f"inpaint_array takes an {image.shape[:2]} bool hole marking some pixel, got "
                           f"{array_kind(hole)}: pass any other mask (0/255, a path, PIL) to inpaint")
        check_max_megapixels(max_megapixels)
        scale, boxes = plan_passes(hole, hd_strategy, resize_limit, crop_margin, crop_trigger_size)
        for size in pass_sizes(hole.shape, scale, boxes):  # all of them before the first pass
            check_memory(size, max_megapixels, self.dtype, hole.size)
        if scale != 1:
            return self._inpaint_resized(image, hole, scale)
        out = image.copy()
        if progress and len(boxes) > 1:
            from tqdm import tqdm

            boxes = tqdm(boxes, desc="inpainting crops", unit="crop", file=sys.stderr, leave=False)
        for top, left, bottom, right in boxes:
            region = (slice(top, bottom), slice(left, right))
            out[region] = self._inpaint_pass(image[region], hole[region])
        return out

    def _inpaint_pass(self, image: np.ndarray, hole: np.ndarray) -> np.ndarray:
        """The upstream predict pipeline on one image: pad, predict, keep the known pixels, crop."""
        h, w = image.shape[:2]
        x, m = pad_inputs(image, hole)
        pred = self(x[None], m[None])
        pred = np.array(pred[0, :h, :w].astype(mx.float32))
        return compose(image, hole, pred)

    def _inpaint_resized(self, image: np.ndarray, hole: np.ndarray, scale: float) -> np.ndarray:
        """IOPaint's resize strategy: inpaint a scaled-down copy, scale it up, paste back only the hole.

        Pillow's bicubic filter (antialiased when shrinking; IOPaint uses OpenCV's, which is not)."""
        h, w = image.shape[:2]
        small_h, small_w = scaled_size((h, w), scale)
        small = np.asarray(Image.fromarray(image).resize((small_w, small_h), Image.BICUBIC))
        # a small pixel that covers any hole pixel is hole: the small hole covers the big one
        small_hole = np.asarray(Image.fromarray(hole.astype(np.uint8) * 255).resize((small_w, small_h), Image.BILINEAR)) > 0
        filled = self._inpaint_pass(small, small_hole)
        big = np.asarray(Image.fromarray(filled).resize((w, h), Image.BICUBIC))
        return np.where(hole[..., None], big, image)


def array_kind(a) -> str:
    """How an argument reads in an error: an array's shape and dtype, else its type."""
    return f"{a.shape} {a.dtype}" if isinstance(a, np.ndarray) else type(a).__name__


def split_alpha(image) -> tuple[np.ndarray, np.ndarray | None]:
    """(H, W, 3) uint8 colours and the (H, W) uint8 alpha channel, or None when the image has none.

    With alpha, the colours are the raw ones (not composited on a background):
    inpainting keeps every pixel outside the hole, transparent ones included.
    """
    if isinstance(image, Image.Image) and image.has_transparency_data:
        rgba = np.asarray(image.convert("RGBA"))
        return np.ascontiguousarray(rgba[..., :3]), np.ascontiguousarray(rgba[..., 3])
    if isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[2] == 4:
        return load_image(image[..., :3]), load_image(image[..., 3], "alpha channel")[..., 0]
    return load_image(image), None


def mask_levels(mask) -> np.ndarray:
    """A mask (path, PIL image or array) -> its HxW grey levels (0 = keep).

    Files and PIL images become grey levels as in upstream's loader (PIL's
    convert("L"): alpha is ignored, colours count by their luma); EXIF
    orientation is applied as it is to the image. 2-D arrays are taken as they
    are; (H, W, 3/4) arrays are converted like images.
    """
    if isinstance(mask, (str, Path)):
        mask = open_image(mask)
    if isinstance(mask, np.ndarray) and mask.ndim == 3 and mask.shape[2] == 1:
        mask = mask[:, :, 0]
    if isinstance(mask, np.ndarray) and mask.ndim == 2:
        if mask.dtype != bool and mask.dtype.kind not in "fiu":
            raise ZooError(f"mask array has dtype {mask.dtype}: pass uint8 (0 = keep, nonzero = hole) or bool")
        if mask.dtype.kind == "f" and not np.isfinite(mask).all():
            raise ZooError("mask has NaN or Inf values: pass 0 for known pixels and nonzero for the hole")
        if mask.dtype.kind in "fi" and mask.size and mask.min() < 0:  # int8 of a 0/255 mask: 255 is -1, no hole
            raise ZooError(f"mask has negative values ({mask.min()}, dtype {mask.dtype}): pass 0 for known pixels "
                           "and positive values for the hole (uint8 0/255 or bool)")
        return mask
    if isinstance(mask, Image.Image):
        return np.asarray(mask.convert("L"))
    if isinstance(mask, np.ndarray) and mask.dtype == bool:  # (H, W, 3) of a 2-D bool mask's np.dstack / repeat
        mask = mask.astype(np.uint8) * 255
    return np.asarray(Image.fromarray(load_image(mask, "mask")).convert("L"))


def load_mask(mask, size: tuple[int, int], threshold: float | None = None, dilate: int = 0) -> np.ndarray:
    """A mask of the image's ``size`` (path, PIL image or array) -> HxW bool hole.

    ``threshold``: levels at or above it are hole; None: every nonzero level, as
    upstream's predict.py (IOPaint's batch rule is 127). ``dilate``: grow the hole
    by this many pixels in every direction (a square, as cv2.dilate with a
    (2n+1)x(2n+1) kernel).
    """
    grey = mask_levels(mask)
    if grey.shape != tuple(size):
        raise ZooError(f"the mask is {grey.shape[1]}x{grey.shape[0]} but the image is {size[1]}x{size[0]}: "
                       "pass a mask of the image's size")
    hole = grey > 0 if threshold is None else grey >= threshold
    return dilate_hole(hole, dilate) if dilate else hole


def dilate_hole(hole: np.ndarray, pixels: int) -> np.ndarray:
    """Grow a bool hole by ``pixels`` in every direction (square structuring element).

    A pixel becomes hole when its (2p+1)-wide window along a row, then along a
    column, holds a hole pixel: window sums from cumulative sums, so the cost
    does not grow with ``pixels``.
    """
    if pixels < 0:
        raise ZooError(f"dilation of {pixels} pixels: use 0 or more")
    for axis in (0, 1):
        n = hole.shape[axis]
        cum = np.concatenate([np.zeros_like(hole.take([0], axis), np.int64), np.cumsum(hole, axis, dtype=np.int64)], axis)
        i = np.arange(n)
        hole = (cum.take(np.minimum(i + pixels + 1, n), axis) - cum.take(np.maximum(i - pixels, 0), axis)) > 0
    return hole


def check_model_shapes(image_shape: tuple, mask_shape: tuple) -> None:
    """The raw call's image and mask, each (N, H, W, C) already (as_model_input): the same N, H, W."""
    if tuple(mask_shape) != (*image_shape[:3], 1):
        raise ZooError(f"mask has shape {tuple(mask_shape)}: expected {(*image_shape[:3], 1)} to match the image")
    h, w = image_shape[1:3]
    if h % PAD_MULTIPLE or w % PAD_MULTIPLE or min(h, w) < MIN_MODEL_SIDE:
        raise ZooError(f"model input of {w}x{h}: H and W must be multiples of {PAD_MULTIPLE} and at least "
                       f"{MIN_MODEL_SIDE}; use inpaint(), which pads")


def padded_size(n: int) -> int:
    """Upstream's ceil to a multiple of 8, and at least 16 (see MIN_MODEL_SIDE)."""
    return max(MIN_MODEL_SIDE, -(-n // PAD_MULTIPLE) * PAD_MULTIPLE)


def pad_inputs(image: np.ndarray, hole: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 HxWx3 image, bool HxW hole -> (Hp, Wp, 3) float32 in [0, 1] and (Hp, Wp, 1) {0, 1}.

    Upstream's pad_img_to_modulo: numpy "symmetric" padding (the edge pixel is
    repeated) at the bottom and right only. Upstream binarises the mask after
    padding; padding a binary mask symmetrically keeps it binary, so that is the same.
    """
    h, w = image.shape[:2]
    pad = ((0, padded_size(h) - h), (0, padded_size(w) - w))
    x = np.pad(image.astype(np.float32) / 255.0, (*pad, (0, 0)), mode="symmetric")
    m = np.pad(hole.astype(np.float32), pad, mode="symmetric")[..., None]
    return x, m


def compose(image: np.ndarray, hole: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Upstream's ``mask * pred + (1 - mask) * image`` as bin/predict.py writes it,
    clip(x * 255, 0, 255) truncated to uint8. The known pixels are copied, so they
    stay identical (upstream's float round trip u / 255 * 255 is exact for every u)."""
    if not np.isfinite(pred[hole]).all():
        raise ZooError("the model produced NaN/Inf in the hole (a half-precision overflow): "
                       "use --dtype bfloat16 or float32")
    out = image.copy()  # only the hole is computed: pred outside it is never read (it may even be NaN)
    out[hole] = np.clip(pred[hole].astype(np.float32) * np.float32(255), 0, 255).astype(np.uint8)
    return out


def pass_memory(size: tuple[int, int], dtype: mx.Dtype, image_pixels: int = 0) -> int:
    """Bytes a LaMa command on the CPU holds at most while it runs one pass over ``size`` (H, W)
    pixels, padded, in ``dtype``, on an image of ``image_pixels``: the constants above, measured for
    float32 and float16."""
    h, w = padded_size(size[0]), padded_size(size[1])
    return (PROCESS_BYTES + image_pixels * IMAGE_BYTES_PER_PIXEL + h * w * BYTES_PER_PIXEL[min(dtype.size, 4)]
            + band_pixels(h, w) * BAND_BYTES_PER_PIXEL)


def check_memory(size: tuple[int, int], max_megapixels: float | None, dtype: mx.Dtype, image_pixels: int = 0) -> None:
    """Refuse a pass that would not fit, before anything is allocated for it: on the CPU one command
    (its image of ``image_pixels`` included) within PROCESS_BOUND, on a GPU MEMORY_SHARE of its
    memory; ``max_megapixels`` replaces either."""
    h, w = size
    pixels = padded_size(h) * padded_size(w)
    if max_megapixels is not None:
        if pixels <= max_megapixels * 1e6:
            return
        problem = f"has {pixels / 1e6:.3g} megapixels, more than {option('max_megapixels', max_megapixels)}"
    elif mx.default_device() == mx.cpu:
        need = pass_memory(size, dtype, image_pixels)
        if need <= PROCESS_BOUND:
            return
        problem = (f"needs about {need / 1e9:.3g} GB of memory, more than the {PROCESS_BOUND / 1e9:.3g} GB "
                   "one command may use by default")
    else:
        need, have = pixels * GPU_BYTES_PER_PIXEL * dtype.size / 4, device_memory()
        if need <= MEMORY_SHARE * have:
            return
        problem = f"needs about {need / 1e9:.3g} GB of memory (the device has {have / 1e9:.0f} GB)"
    raise ZooError(
        f"one big-lama pass over {w}x{h} pixels {problem}: use {option('hd_strategy', 'crop')} (small holes) or "
        f"{option('hd_strategy', 'resize')} with a smaller {option('resize_limit', 'N')} (large holes), or a larger "
        f"{option('max_megapixels', 'N')} if the machine has the memory")


def check_pass_options(resize_limit: int, crop_margin: int, crop_trigger_size: int,
                       named: Callable[[str], str] = keyword) -> None:
    """ZooError for a strategy's size that cannot work; ``named(option)``: how the error names it (the caller's
    words: a keyword argument, a flag, the key of IOPaint's config file)."""
    for name, value in (("resize_limit", resize_limit), ("crop_margin", crop_margin),
                        ("crop_trigger_size", crop_trigger_size)):
        # a float margin reached the crops' slices (a TypeError); a NaN limit compared false and ran no strategy
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ZooError(f"{named(name)} {value!r} is not a whole number of pixels: pass an int")
    if resize_limit < MIN_MODEL_SIDE:
        raise ZooError(f"{named('resize_limit')} {resize_limit} is too small: use at least {MIN_MODEL_SIDE} pixels")
    if crop_margin < 0:
        raise ZooError(f"{named('crop_margin')} {crop_margin} is negative: use 0 or more pixels")
    if crop_trigger_size < 1:
        raise ZooError(f"{named('crop_trigger_size')} {crop_trigger_size}: use a positive number of pixels")


def check_max_megapixels(max_megapixels: float | None) -> None:
    """ZooError unless ``max_megapixels`` is None or a positive number (NaN passed no pass, a negative one all)."""
    if max_megapixels is not None and (isinstance(max_megapixels, bool) or not isinstance(max_megapixels, numbers.Real)
                                       or not max_megapixels > 0 or not math.isfinite(max_megapixels)):
        raise ZooError(f"{keyword('max_megapixels')} {max_megapixels!r}: use a positive number")


def plan_passes(hole: np.ndarray, strategy: str, resize_limit: int, crop_margin: int,
                crop_trigger_size: int) -> tuple[float, list[tuple[int, int, int, int]]]:
    """How to cover an image: (scale, boxes). A scale below 1 is one pass over a
    scaled-down copy; otherwise one full-resolution pass per (top, left, bottom, right) box. ``strategy`` in any
    case: IOPaint's HDStrategy values are "Original", "Resize", "Crop"."""
    h, w = hole.shape
    strategy = strategy.lower() if isinstance(strategy, str) else strategy
    if strategy not in HD_STRATEGIES:
        raise ZooError(f"unknown hd strategy {strategy!r}: use one of {', '.join(HD_STRATEGIES)}")
    check_pass_options(resize_limit, crop_margin, crop_trigger_size)
    if strategy == "resize" and max(h, w) > resize_limit:
        return resize_limit / max(h, w), []
    if strategy == "crop" and max(h, w) > crop_trigger_size:
        return 1.0, crop_boxes(hole, crop_margin)
    return 1.0, [(0, 0, h, w)]


def scaled_size(size: tuple[int, int], scale: float) -> tuple[int, int]:
    """IOPaint's resize_max_size rounding: int(side * scale + 0.5)."""
    return tuple(max(1, int(side * scale + 0.5)) for side in size)


def pass_sizes(size: tuple[int, int], scale: float, boxes: list) -> list[tuple[int, int]]:
    """(height, width) of each model pass of a plan."""
    if scale != 1:
        return [scaled_size(size, scale)]
    return [(bottom - top, right - left) for top, left, bottom, right in boxes]


def crop_boxes(hole: np.ndarray, margin: int) -> list[tuple[int, int, int, int]]:
    """(top, left, bottom, right) crops that cover every hole with ``margin`` pixels of context.

    As IOPaint: each hole's bounding box grown by ``margin`` on each side and
    shifted inward at the image border to keep its size. Crops that overlap are
    merged into their bounding box, so that each hole lies whole in exactly one
    crop and no crop overwrites another's result.
    """
    h, w = hole.shape
    boxes = []
    for top, left, bottom, right in hole_boxes(hole):
        (top, bottom), (left, right) = _span(top, bottom, margin, h), _span(left, right, margin, w)
        boxes.append((top, left, bottom, right))
    while True:
        pair = next(((i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
                     if _overlap(boxes[i], boxes[j])), None)
        if pair is None:
            return sorted(boxes)
        a, b = boxes[pair[0]], boxes.pop(pair[1])
        boxes[pair[0]] = (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _span(start: int, end: int, margin: int, limit: int) -> tuple[int, int]:
    """[start - margin, end + margin) shifted inside [0, limit) keeping its length where it fits."""
    start, end = start - margin, end + margin
    if start < 0:
        start, end = 0, end - start
    if end > limit:
        start, end = start - (end - limit), limit
    return max(start, 0), end


def hole_boxes(hole: np.ndarray, cell: int = 8) -> list[tuple[int, int, int, int]]:
    """Bounding boxes (top, left, bottom, right) of the connected holes.

    Labelled 8-connected on a grid of ``cell``-pixel cells, so that a 12 MP mask
    is cheap; holes closer than a cell share a box. Each box is then tightened
    to the hole pixels inside it.
    """
    h, w = hole.shape
    gh, gw = -(-h // cell), -(-w // cell)
    grid = np.zeros((gh * cell, gw * cell), bool)
    grid[:h, :w] = hole
    grid = grid.reshape(gh, cell, gw, cell).any(axis=(1, 3))
    seen = np.zeros(grid.shape, bool)
    boxes = []
    for start in zip(*np.nonzero(grid)):
        if seen[start]:
            continue
        seen[start] = True
        stack, cells = [start], []
        while stack:
            i, j = stack.pop()
            cells.append((i, j))
            for a in range(max(i - 1, 0), min(i + 2, gh)):
                for b in range(max(j - 1, 0), min(j + 2, gw)):
                    if grid[a, b] and not seen[a, b]:
                        seen[a, b] = True
                        stack.append((a, b))
        rows, cols = np.array(cells).T
        top, left = rows.min() * cell, cols.min() * cell
        # the rows and columns that hold hole pixels: np.nonzero of the region made two int64 indices a pixel (576 MB
        # for a 36-megapixel hole)
        region = hole[top:(rows.max() + 1) * cell, left:(cols.max() + 1) * cell]
        ys, xs = np.flatnonzero(region.any(axis=1)), np.flatnonzero(region.any(axis=0))
        boxes.append((int(top + ys[0]), int(left + xs[0]), int(top + ys[-1] + 1), int(left + xs[-1] + 1)))
    return boxes


# the LaMa repo's bin/to_jit.py traces JITWrapper(training module), whose .model is the module holding .generator:
# IOPaint's big-lama.pt (TorchScript) names the generator model.generator.*
JIT_WRAPPER_PREFIX = "model."


def sanitize(state_dict: dict[str, np.ndarray], meta: dict) -> dict[str, np.ndarray]:
    """Keep the generator of a Lightning ``best.ckpt`` (it also holds the discriminator and
    the losses' networks, which inpainting does not use) or of a traced big-lama.pt."""
    if not any(k.startswith("generator.") for k in state_dict):
        state_dict = {k.removeprefix(JIT_WRAPPER_PREFIX): v for k, v in state_dict.items()}
    weights = {k: v for k, v in state_dict.items() if k.startswith("generator.")}
    if not weights:
        raise ZooError("the checkpoint has no generator.* weights: pass big-lama's best.ckpt or "
                       "big-lama.safetensors")
    return weights


def build(spec) -> LaMa:
    return LaMa()
