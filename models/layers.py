"""The few layers shared by several families."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from zoo.kernels import cpu as cpu_ops


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


class GELU(nn.Module):
    """Exact GELU as a module (upstream's nn.GELU() in a Sequential keeps its index)."""

    def __call__(self, x: mx.array) -> mx.array:
        return gelu(x)


class Sigmoid(nn.Module):
    def __call__(self, x: mx.array) -> mx.array:
        return sigmoid(x)


class BatchNorm(nn.BatchNorm):
    """nn.BatchNorm (same parameters and names); at inference on the CPU one pass of
    x * scale + shift, scale = weight / sqrt(running_var + eps), shift = bias - mean * scale,
    as the fold into a convolution computes it."""

    def __call__(self, x: mx.array) -> mx.array:
        if self.training or not self.track_running_stats or not cpu_ops.on_cpu() or "weight" not in self:
            return super().__call__(x)
        scale = self.weight.astype(mx.float32) * mx.rsqrt(self.running_var.astype(mx.float32) + self.eps)
        shift = self.bias.astype(mx.float32) - self.running_mean.astype(mx.float32) * scale
        return cpu_ops.channel_affine(x, scale, shift)


def _no_dilation(dilation) -> bool:
    return dilation == 1 or tuple(dilation) == (1, 1)


class Conv2d(nn.Conv2d):
    """nn.Conv2d (same weights, same names) whose depthwise, 1x1 and few-output forms run as
    zoo.kernels.cpu's on the CPU."""

    def __call__(self, x: mx.array) -> mx.array:
        cout, kh, kw, cin = self.weight.shape
        if not _no_dilation(self.dilation):
            return super().__call__(x)
        plain = self.groups == 1 and self.stride in (1, (1, 1)) and self.padding in (0, (0, 0))
        if self.groups > 1 and self.groups == cout and cin == 1:
            y = cpu_ops.depthwise_conv2d(x, self.weight, self.stride, self.padding)
        elif plain and kh == kw == 1:
            y = cpu_ops.pointwise_conv2d(x, self.weight)
        elif plain and cout * 8 <= cin:
            y = cpu_ops.conv2d_few_outputs(x, self.weight)
        else:
            return super().__call__(x)
        return y + self.bias if "bias" in self else y


class ConvTranspose2d(nn.ConvTranspose2d):
    """nn.ConvTranspose2d (same weights, same names) run as one GEMM and a sub-pixel scatter
    on the CPU (zoo.kernels.cpu.conv_transpose2d)."""

    def __call__(self, x: mx.array) -> mx.array:
        if not _no_dilation(self.dilation):
            return super().__call__(x)
        y = cpu_ops.conv_transpose2d(x, self.weight, self.stride, self.padding, self.output_padding)
        return y + self.bias if "bias" in self else y
