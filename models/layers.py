"""The few layers shared by several families."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from zoo.compiled import batch_norm_affine, folded, kept
from zoo.kernels import coverage
from zoo.kernels import cpu as cpu_ops
from zoo.kernels import implicit_gemm, winograd


class Sequential(nn.Module):
    """torch.nn.Sequential's naming: children are "0", "1", ... so that
    checkpoint keys like ``downsample.0.weight`` load by name (MLX's own
    Sequential names them ``layers.0``)."""

    def __init__(self, *modules: nn.Module):
        super().__init__()
        for i, module in enumerate(modules):
            self[str(i)] = module

    def children_in_order(self) -> list[nn.Module]:
        return [self[key] for key in sorted((k for k in self.keys() if k.isdigit()), key=int)]

    def __call__(self, x):
        for module in self.children_in_order():
            x = module(x)
        return x


class GlobalAvgPool(nn.Module):
    """AdaptiveAvgPool2d(1) on NHWC: (N, H, W, C) -> (N, 1, 1, C)."""

    def __call__(self, x: mx.array) -> mx.array:
        return mx.mean(x, axis=(1, 2), keepdims=True)


# Activations and convolutions every family shares. On the CPU they take zoo.kernels.cpu's
# fast forms of the ops MLX's CPU backend runs slowly; elsewhere MLX's own ops.

def sigmoid(x: mx.array) -> mx.array:
    return cpu_ops.sigmoid(x)


def silu(x: mx.array) -> mx.array:
    return cpu_ops.silu(x)


def gelu(x: mx.array) -> mx.array:
    """Exact (erf) GELU, as torch.nn.GELU()."""
    return cpu_ops.gelu(x)


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None = None) -> mx.array:
    """mx.fast.scaled_dot_product_attention with an additive mask (or none)."""
    return cpu_ops.attention(q, k, v, scale, mask)


def reflect_pad(x: mx.array, ph: int, pw: int | None = None) -> mx.array:
    """torch's reflect padding of H by ``ph`` and W by ``pw`` (default ``ph``), NHWC, as one gather."""
    return cpu_ops.reflect_pad(x, ph, pw)


def rfft2_parts(x: mx.array) -> mx.array:
    """Orthonormal rfft2 over H, W as float32 real/imaginary parts interleaved in channels."""
    return cpu_ops.rfft2_parts(x)


def irfft2_parts(parts: mx.array, size: tuple[int, int]) -> mx.array:
    """The inverse of rfft2_parts, to float32 (N, H, W, C) of the given (H, W)."""
    return cpu_ops.irfft2_parts(parts, size)


def split_heads(x: mx.array, heads: int, parts: int = 3) -> tuple[mx.array, ...]:
    """(B, N, heads * parts * D) laid out (heads, parts, D) per token -> ``parts`` x (B, heads, N, D)."""
    return cpu_ops.split_heads(x, heads, parts)


def window_partition(x: mx.array, window: int) -> mx.array:
    """(B, H, W, C) -> (B * windows, window**2, C), zero-padded to whole windows (bottom, right)."""
    return cpu_ops.window_partition(x, window)


def window_merge(x: mx.array, size: tuple[int, int], window: int) -> mx.array:
    """Windows back to (B, H, W, C) of the given (H, W), the padding dropped."""
    return cpu_ops.window_merge(x, size, window)


class GELU(nn.Module):
    """Exact GELU as a module (upstream's nn.GELU() in a Sequential keeps its index)."""

    def __call__(self, x: mx.array) -> mx.array:
        return gelu(x)


class Sigmoid(nn.Module):
    def __call__(self, x: mx.array) -> mx.array:
        return sigmoid(x)


class BatchNorm(nn.BatchNorm):
    """nn.BatchNorm (same parameters and names); at inference on the CPU one pass of
    x * scale + shift (zoo.compiled.batch_norm_affine, as the fold into a convolution uses it)."""

    def __call__(self, x: mx.array) -> mx.array:
        if self.training or not self.track_running_stats or not cpu_ops.on_cpu() or "weight" not in self:
            coverage.note("batch_norm", coverage.MLX_OP)
            return super().__call__(x)
        return cpu_ops.channel_affine(x, *self.scale_shift())

    def scale_shift(self) -> tuple[mx.array, mx.array]:
        """zoo.compiled.batch_norm_affine, kept until a source array is replaced (weights loaded or
        cast later): recomputing it took five small ops on every call."""
        return kept(self, "_scale_shift", (self,), lambda: batch_norm_affine(self))


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (same parameters and names); on the CPU one threaded C pass per row."""

    def __call__(self, x: mx.array) -> mx.array:
        return cpu_ops.layer_norm(x, self.weight if "weight" in self else None,
                                  self.bias if "bias" in self else None, self.eps)


def conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm, x: mx.array, eager=None, activation: str | None = None) -> mx.array:
    """``activation(bn(conv(x)))`` (or ``activation(eager(x))``); activation None, "relu" or "silu".
    In a compiled forward that folds them (zoo.compiled) one convolution whose weight and bias hold
    the BatchNorm (``conv2d_derived``)."""
    fold = folded(conv)
    if fold is None:
        return _ACTIVATIONS[activation](bn(conv(x)) if eager is None else eager(x))
    return conv2d_derived(x, conv, fold, activation)


def conv2d_derived(x: mx.array, conv: nn.Conv2d, arrays: dict[str, mx.array], activation: str | None = None) -> mx.array:
    """``conv``'s convolution of x (its stride, padding, groups) with arrays a compiled forward derived
    from its weight (zoo.compiled): {weight[, bias][, winograd]}, then the activation. On CUDA in
    float32 a large 3x3 stride-1 runs as Winograd's form (zoo.kernels.winograd), others as an
    implicit GEMM (zoo.kernels.implicit_gemm), the activation in their last kernel; a 1x1 as a
    matmul where zoo.kernels.cpu says."""
    weight, bias = arrays["weight"], arrays.get("bias")
    if "winograd" in arrays and winograd.worth_it(x.shape, weight.shape):
        return winograd.conv3x3(x, arrays["winograd"], bias, conv.padding[0], activation)
    if implicit_gemm.preferred(weight.dtype, weight.shape, conv.stride, conv.padding, conv.groups, conv.dilation) \
            and implicit_gemm.worth_it(x.shape, weight.shape, conv.stride, conv.padding):
        return implicit_gemm.conv2d(x, weight, bias, conv.stride, conv.padding, activation)
    if weight.shape[1:3] == (1, 1) and conv.groups == 1 and tuple(conv.stride) == (1, 1) \
            and tuple(conv.padding) == (0, 0):
        y = cpu_ops.pointwise_conv2d(x, weight)
    else:
        y = mx.conv2d(x, weight, conv.stride, conv.padding, conv.dilation, conv.groups)
    return _ACTIVATIONS[activation](y if bias is None else y + bias)


_ACTIVATIONS = {None: lambda y: y, "relu": nn.relu, "silu": silu}


def _no_dilation(dilation) -> bool:
    return dilation == 1 or (not isinstance(dilation, int) and tuple(dilation) == (1, 1))


class Conv2d(nn.Conv2d):
    """nn.Conv2d (same weights, same names) whose convolutions run as zoo.kernels.cpu's on the CPU:
    depthwise, 1x1 and few-output forms, and the rest as patch rows + one OpenBLAS sgemm.

    ``reflect_padding``: torch's ``padding_mode="reflect"`` (a subclass sets it, with ``padding`` 0);
    on the CPU the reflected border is read in place instead of padded into a copy."""

    reflect_padding = 0

    def __call__(self, x: mx.array) -> mx.array:
        return cpu_ops.per_image(self._forward, x)

    def _forward(self, x: mx.array) -> mx.array:
        cout, kh, kw, cin = self.weight.shape
        bias = self.bias if "bias" in self else None
        reflect = self.reflect_padding
        plain = self.groups == 1 and self.stride in (1, (1, 1)) and self.padding in (0, (0, 0))
        general = self.groups == 1 and _no_dilation(self.dilation) and (kh, kw) != (1, 1) and not (plain and cout * 8 <= cin)
        if cpu_ops.on_cpu() and general:
            return cpu_ops.conv2d(x, self.weight, bias, self.stride, reflect or self.padding, reflect=bool(reflect))
        if reflect:
            x = reflect_pad(x, reflect)
        if not _no_dilation(self.dilation):
            coverage.note("conv2d (dilated)", coverage.MLX_OP)
            return super().__call__(x)
        if self.groups > 1 and self.groups == cout and cin == 1:
            y = cpu_ops.depthwise_conv2d(x, self.weight, self.stride, self.padding)
        elif plain and kh == kw == 1:
            y = cpu_ops.pointwise_conv2d(x, self.weight)
        elif plain and cout * 8 <= cin:
            y = cpu_ops.conv2d_few_outputs(x, self.weight)
        else:
            coverage.note("conv2d" if self.groups == 1 else "conv2d (grouped)", coverage.MLX_OP)
            return super().__call__(x)
        return y if bias is None else y + bias


class MLXConv2d(nn.Conv2d):
    """nn.Conv2d (same weights, same names): MLX's own convolution on every device, each image of a
    CPU batch apart (zoo.kernels.cpu.per_image)."""

    def __call__(self, x: mx.array) -> mx.array:
        return cpu_ops.per_image(super().__call__, x)


class ConvTranspose2d(nn.ConvTranspose2d):
    """nn.ConvTranspose2d (same weights, same names) run as one GEMM and a sub-pixel scatter
    on the CPU (zoo.kernels.cpu.conv_transpose2d)."""

    def __call__(self, x: mx.array) -> mx.array:
        if not _no_dilation(self.dilation):
            return super().__call__(x)
        y = cpu_ops.conv_transpose2d(x, self.weight, self.stride, self.padding, self.output_padding)
        return y + self.bias if "bias" in self else y
