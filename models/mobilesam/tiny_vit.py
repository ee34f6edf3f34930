"""TinyViT-5M, MobileSAM's image encoder, in MLX.

Attribute names mirror the official checkpoint (``image_encoder.patch_embed.seq.0.c``,
``image_encoder.layers.1.blocks.0.attn.qkv``, ...). Convolutions run on NHWC;
between stages the activations are token sequences (B, H*W, C) with the token
index h * W + w, exactly what upstream passes between its layers, so every
stage can be compared with upstream's as it is.
"""
from __future__ import annotations

import itertools

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.compiled import Stage
from zoo.devices import as_model_input
from zoo.errors import ZooError
from zoo.kernels import cpu as cpu_ops
from zoo.models.layers import (GELU, BatchNorm, Conv2d, LayerNorm, Linear, Sequential, conv_bn, fuses_on_cpu,
                               fusing_on_cpu, qkv_attention, window_merge, window_partition)

EMBED_DIMS = (64, 128, 160, 320)
DEPTHS = (2, 2, 6, 2)
NUM_HEADS = (2, 4, 5, 10)  # head dim 32 in every stage
WINDOW_SIZES = (7, 7, 14, 7)
MLP_RATIO = 4
MBCONV_EXPAND_RATIO = 4
NECK_DIM = 256


class Conv2d_BN(nn.Module):
    """Convolution without bias followed by BatchNorm (eval mode: running statistics)."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1, padding: int = 0, groups: int = 1):
        super().__init__()
        self.c = Conv2d(cin, cout, kernel, stride=stride, padding=padding, groups=groups, bias=False)
        self.bn = BatchNorm(cout)

    def __call__(self, x: mx.array) -> mx.array:
        return conv_bn(self.c, self.bn, x)  # on the CPU one C convolution, the BatchNorm folded in


def gelu_after(block: Conv2d_BN | Linear, act: GELU, x: mx.array) -> mx.array:
    """act(block(x)); on the CPU one C call that also applies the GELU: a convolution with its
    BatchNorm folded in (models.layers.conv_bn), or a Linear's product. Inside zoo.compiled.eager()
    both modules run, one after the other, as the validator records them."""
    if isinstance(block, Linear) and fusing_on_cpu():
        return block(x, activation="gelu")
    if isinstance(block, Conv2d_BN) and fuses_on_cpu(block.c, block.bn):
        return conv_bn(block.c, block.bn, x, activation="gelu")
    return act(block(x))


class PatchEmbed(nn.Module):
    """Two stride-2 3x3 convolutions: (B, 1024, 1024, 3) -> (B, 256, 256, 64)."""

    def __init__(self, cin: int, dim: int):
        super().__init__()
        self.seq = Sequential(Conv2d_BN(cin, dim // 2, 3, 2, 1), GELU(), Conv2d_BN(dim // 2, dim, 3, 2, 1))

    def __call__(self, x: mx.array) -> mx.array:
        seq = self.seq
        return seq["2"](gelu_after(seq["0"], seq["1"], x))


class MBConv(nn.Module):
    """Inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project, GELU after the sum."""

    def __init__(self, dim: int, expand_ratio: int):
        super().__init__()
        hidden = dim * expand_ratio
        self.conv1 = Conv2d_BN(dim, hidden)
        self.act1 = GELU()
        self.conv2 = Conv2d_BN(hidden, hidden, 3, 1, 1, groups=hidden)
        self.act2 = GELU()
        self.conv3 = Conv2d_BN(hidden, dim)
        self.act3 = GELU()

    def shortcut(self, x: mx.array) -> mx.array:
        return x

    def __call__(self, x: mx.array) -> mx.array:
        if all(fuses_on_cpu(block.c, block.bn) for block in (self.conv1, self.conv2, self.conv3)):
            return cpu_ops.per_image(self._fused, x)
        return self._apart(x)

    def _apart(self, x: mx.array) -> mx.array:
        out = self.conv3(gelu_after(self.conv2, self.act2, gelu_after(self.conv1, self.act1, x)))
        return self.act3(out + self.shortcut(x))

    def _fused(self, x: mx.array) -> mx.array:
        """One C call (zoo.kernels.cpu.inverted_residual): the three convolutions with their BatchNorms
        folded in, the GELUs and the residual, row by row; the layers apart where it cannot run."""
        y = cpu_ops.inverted_residual(x, *(block.c.batch_norm_forms(block.bn)
                                           for block in (self.conv1, self.conv2, self.conv3)), "gelu")
        return self._apart(x) if y is None else y


class PatchMerging(nn.Module):
    """1x1 conv, depthwise 3x3 conv (stride 2, or 1 into the last stage), 1x1 conv; returns tokens."""

    def __init__(self, input_resolution: tuple[int, int], dim: int, out_dim: int, stride: int):
        super().__init__()
        self.input_resolution = input_resolution
        self.conv1 = Conv2d_BN(dim, out_dim)
        self.act = GELU()
        self.conv2 = Conv2d_BN(out_dim, out_dim, 3, stride, 1, groups=out_dim)
        self.conv3 = Conv2d_BN(out_dim, out_dim)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim == 3:  # tokens from a transformer stage
            x = x.reshape(x.shape[0], *self.input_resolution, x.shape[-1])
        x = self.conv3(gelu_after(self.conv2, self.act, gelu_after(self.conv1, self.act, x)))
        return x.reshape(x.shape[0], -1, x.shape[-1])


class ConvLayer(nn.Module):
    """Stage 0: MBConv blocks on the NHWC map, then PatchMerging to tokens."""

    def __init__(self, dim: int, input_resolution: tuple[int, int], depth: int, out_dim: int):
        super().__init__()
        self.blocks = [MBConv(dim, MBCONV_EXPAND_RATIO) for _ in range(depth)]
        self.downsample = PatchMerging(input_resolution, dim, out_dim, stride=2)

    def __call__(self, x: mx.array) -> mx.array:
        for block in self.blocks:
            x = block(x)
        return self.downsample(x)


def relative_offset_index(window: int) -> np.ndarray:
    """(N, N) index into a head's bias table, N = window**2: one entry per distinct |dy|, |dx|.

    Offsets are numbered in order of first appearance, as upstream numbers them, so
    that the checkpoint's ``attention_biases`` columns line up.
    """
    points = list(itertools.product(range(window), range(window)))
    offsets: dict[tuple[int, int], int] = {}
    index = []
    for p1 in points:
        for p2 in points:
            index.append(offsets.setdefault((abs(p1[0] - p2[0]), abs(p1[1] - p2[1])), len(offsets)))
    return np.array(index, dtype=np.int32).reshape(len(points), len(points))


class Attention(nn.Module):
    """Window self-attention with a learned bias per head and relative offset.

    The qkv projection is laid out per head: head h's features are
    [q (key_dim), k (key_dim), v (key_dim)] at h * 3 * key_dim.
    """

    def __init__(self, dim: int, num_heads: int, window: int):
        super().__init__()
        self.num_heads = num_heads
        self.key_dim = dim // num_heads
        self.scale = self.key_dim**-0.5
        self.norm = LayerNorm(dim)
        self.qkv = Linear(dim, 3 * dim)
        self.proj = Linear(dim, dim)
        index = relative_offset_index(window)
        self.attention_biases = mx.zeros((num_heads, int(index.max()) + 1))
        # Not a parameter (leading underscore): an index, never stored in checkpoints.
        self._bias_index = mx.array(index)

    def __call__(self, x: mx.array) -> mx.array:
        return self.proj(self.heads(x))

    def heads(self, x: mx.array) -> mx.array:
        """The heads' outputs side by side, before the output projection (a per-token Linear)."""
        # Gathered on every call from the loaded table: upstream caches this gather
        # at eval() time, a cache that goes stale when weights are loaded later.
        bias = mx.take(self.attention_biases, self._bias_index, axis=1)
        return qkv_attention(self.qkv(self.norm(x)), self.num_heads, self.scale, bias)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = LayerNorm(dim)
        self.fc1 = Linear(dim, hidden)
        self.act = GELU()
        self.fc2 = Linear(hidden, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.fc2(gelu_after(self.fc1, self.act, self.norm(x)))


class TinyViTBlock(nn.Module):
    """Windowed attention (+ residual), depthwise 3x3 conv, MLP (+ residual) on tokens."""

    def __init__(self, dim: int, input_resolution: tuple[int, int], num_heads: int, window: int):
        super().__init__()
        self.input_resolution = input_resolution
        self.window = window
        self.attn = Attention(dim, num_heads, window)
        self.mlp = Mlp(dim, dim * MLP_RATIO)
        self.local_conv = Conv2d_BN(dim, dim, 3, 1, 1, groups=dim)

    def shortcut(self, x: mx.array) -> mx.array:
        return x

    def windowed_attention(self, x: mx.array) -> mx.array:
        b, length, c = x.shape
        x = self.attn(self.windows(x))
        return window_merge(x, self.input_resolution, self.window).reshape(b, length, c)

    def windows(self, x: mx.array) -> mx.array:
        b, length, c = x.shape
        # Zero padding goes in before the attention's LayerNorm: the padded tokens
        # become the norm's bias and take part in the softmax, as upstream.
        return window_partition(x.reshape(b, *self.input_resolution, c), self.window)

    def __call__(self, x: mx.array) -> mx.array:
        b, length, c = x.shape
        if fusing_on_cpu():
            # The output projection and the MLP's last Linear are per-token products: on the CPU they take
            # the residual as their sgemm's initial C (no add of their own), the projection after the
            # windows are merged (the padded tokens it then skips are dropped by the merge anyway).
            heads = window_merge(self.attn.heads(self.windows(x)), self.input_resolution, self.window)
            x = self.attn.proj(heads.reshape(b, length, c), residual=x)
        else:
            x = self.shortcut(x) + self.windowed_attention(x)
        x = self.local_conv(x.reshape(b, *self.input_resolution, c)).reshape(b, length, c)
        if fusing_on_cpu():
            mlp = self.mlp
            return mlp.fc2(gelu_after(mlp.fc1, mlp.act, mlp.norm(x)), residual=x)
        return self.shortcut(x) + self.mlp(x)


class BasicLayer(nn.Module):
    """A transformer stage on tokens, optionally followed by PatchMerging."""

    def __init__(self, dim: int, input_resolution: tuple[int, int], depth: int, num_heads: int, window: int,
                 out_dim: int | None, merge_stride: int = 2):
        super().__init__()
        self.blocks = [TinyViTBlock(dim, input_resolution, num_heads, window) for _ in range(depth)]
        if out_dim is not None:
            self.downsample = PatchMerging(input_resolution, dim, out_dim, merge_stride)

    def __call__(self, x: mx.array) -> mx.array:
        for block in self.blocks:
            x = block(x)
        return self.downsample(x) if "downsample" in self else x


class TinyViT(nn.Module):
    """(B, img_size, img_size, 3) normalised image -> (B, img_size/16, img_size/16, 256) embeddings."""

    def __init__(self, img_size: int = 1024):
        super().__init__()
        self.img_size = img_size
        self.patch_embed = PatchEmbed(3, EMBED_DIMS[0])
        r = img_size // 4
        # Stage resolutions 256, 128, 64, 64 at 1024: the last merge keeps the resolution
        # (upstream uses stride 1 when merging into 320 channels).
        resolutions = ((r, r), (r // 2, r // 2), (r // 4, r // 4), (r // 4, r // 4))
        self.layers = [ConvLayer(EMBED_DIMS[0], resolutions[0], DEPTHS[0], EMBED_DIMS[1])]
        for i in (1, 2, 3):
            out_dim = EMBED_DIMS[i + 1] if i < 3 else None
            merge_stride = 2 if i < 2 else 1
            self.layers.append(BasicLayer(EMBED_DIMS[i], resolutions[i], DEPTHS[i], NUM_HEADS[i],
                                          WINDOW_SIZES[i], out_dim, merge_stride))
        self.output_resolution = resolutions[3]
        self.neck = Sequential(
            Conv2d(EMBED_DIMS[3], NECK_DIM, 1, bias=False),
            LayerNorm(NECK_DIM, eps=1e-6),  # SAM's LayerNorm2d: over channels, i.e. the last axis in NHWC
            Conv2d(NECK_DIM, NECK_DIM, 3, padding=1, bias=False),
            LayerNorm(NECK_DIM, eps=1e-6),
        )

    @property
    def dtype(self) -> mx.Dtype:
        return self.neck["0"].weight.dtype

    def folds(self) -> list[tuple]:
        """Every convolution's BatchNorm, folded into it in the compiled forward (zoo.compiled.FoldedConvs): apart,
        each ran as its own element-wise pass after the first stages' convolutions."""
        return [(block.c, block.bn) for _, block in self.named_modules() if isinstance(block, Conv2d_BN)]

    def stages(self) -> list[Stage]:
        """The forward as zoo.compiled Stages, each stage's graph built while the GPU runs the one before: the
        patch embedding with the convolutional stage, each transformer stage, the last with the neck."""
        first, *middle, last = self.layers
        return [Stage(self.embed, [self.patch_embed, first]), *(Stage(layer, [layer]) for layer in middle),
                Stage(self.project, [last, self.neck])]

    def __call__(self, x: mx.array) -> mx.array:
        x = self.embed(x)
        for layer in self.layers[1:-1]:
            x = layer(x)
        return self.project(x)

    def model_input(self, x) -> mx.array:
        """The image (an mx.array or numpy array) checked and in the model's dtype."""
        x = as_model_input(x, self.dtype, "image")
        if x.ndim != 4 or x.shape[1:] != (self.img_size, self.img_size, 3):
            raise ZooError(f"TinyViT expects (B, {self.img_size}, {self.img_size}, 3), got {tuple(x.shape)}: pass the image as SamPredictor.set_image does (resized and padded to {self.img_size})")
        return x

    def embed(self, x: mx.array) -> mx.array:
        """The image -> the convolutional stage's tokens."""
        return self.layers[0](self.patch_embed(self.model_input(x)))

    def project(self, x: mx.array) -> mx.array:
        """The last transformer stage's tokens -> the embeddings."""
        x = self.layers[-1](x)
        return self.neck(x.reshape(x.shape[0], *self.output_resolution, x.shape[-1]))
