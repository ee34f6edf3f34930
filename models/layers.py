"""The few layers shared by several families."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


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
