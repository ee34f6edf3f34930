"""Small MLX models written for zoo.validate.compare's tests, in the style of public MLX model code
(a conv net, a transformer block, a CLIP-style vision tower returning a dataclass, a diffusion-style
UNet taking (x, t, cond), a block with a custom kernel): none of them is the project's, and none is
copied from anywhere. Each factory takes no argument (``python -m zoo.validate --module``) and
returns the model with random weights; ``INPUTS`` gives each one's inputs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.kernels import core, coverage


class ConvNet(nn.Module):
    """Conv / BatchNorm / one shared ReLU called twice / a depthwise conv (no float64 on MLX's CPU) /
    blocks in a list and a dict / a head."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm(8)
        self.act = nn.ReLU()
        self.blocks = [nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.Conv2d(8, 8, 3, padding=1, groups=8)]
        self.heads = {"pool": nn.AvgPool2d(2), "fc": nn.Linear(8, classes)}

    def __call__(self, x):
        x = self.act(self.bn(self.stem(x)))
        x = self.act(self.blocks[0](x))
        x = self.blocks[1](x)
        x = self.heads["pool"](x).mean(axis=(1, 2))
        return self.heads["fc"](x)


class MLP(nn.Module):
    def __init__(self, dims: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dims, hidden)
        self.fc2 = nn.Linear(hidden, dims)

    def __call__(self, x):
        return self.fc2(nn.gelu(self.fc1(x)))


class TransformerBlock(nn.Module):
    """Pre-norm self-attention and MLP with a causal mask passed by keyword."""

    def __init__(self, dims: int = 16, heads: int = 2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dims)
        self.attn = nn.MultiHeadAttention(dims, heads, bias=True)
        self.norm2 = nn.LayerNorm(dims)
        self.mlp = MLP(dims, 2 * dims)

    def __call__(self, x, mask=None):
        y = self.norm1(x)
        x = x + self.attn(y, y, y, mask=mask)
        return x + self.mlp(self.norm2(x))


class CausalLM(nn.Module):
    """Token ids -> embeddings -> two transformer blocks -> logits through the tied embedding."""

    def __init__(self, vocab: int = 32, dims: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dims)
        self.layers = [TransformerBlock(dims), TransformerBlock(dims)]
        self.norm = nn.LayerNorm(dims)

    def __call__(self, tokens):
        x = self.embed(tokens)
        mask = nn.MultiHeadAttention.create_additive_causal_mask(tokens.shape[1]).astype(x.dtype)
        for layer in self.layers:
            x = layer(x, mask=mask)
        return self.embed.as_linear(self.norm(x))


@dataclass
class VisionOutput:
    pooled: mx.array
    last_hidden_state: mx.array
    hidden_states: Optional[tuple] = None


class PatchEmbedding(nn.Module):
    def __init__(self, dims: int, patch: int, positions: int):
        super().__init__()
        self.cls = mx.random.normal((dims,)) * 0.02  # an array of a module that has submodules
        self.proj = nn.Conv2d(3, dims, patch, stride=patch, bias=False)
        self.positions = nn.Embedding(positions, dims)

    def __call__(self, x):
        x = self.proj(x).reshape(x.shape[0], -1, self.cls.shape[0])
        cls = mx.broadcast_to(self.cls, (x.shape[0], 1, x.shape[-1]))
        return mx.concatenate([cls, x], axis=1) + self.positions.weight  # read outside its module's call


class VisionTower(nn.Module):
    """A CLIP-style vision transformer returning a dataclass with a tuple of hidden states."""

    def __init__(self, dims: int = 16, patch: int = 4, size: int = 8, layers: int = 2):
        super().__init__()
        self.embeddings = PatchEmbedding(dims, patch, (size // patch) ** 2 + 1)
        self.pre_norm = nn.LayerNorm(dims)
        self.layers = [TransformerBlock(dims) for _ in range(layers)]
        self.post_norm = nn.LayerNorm(dims)

    def __call__(self, x):
        x = self.pre_norm(self.embeddings(x))
        states = ()
        for layer in self.layers:
            x = layer(x)
            states = states + (x,)
        return VisionOutput(self.post_norm(x[:, 0]), x, states)


class ResBlock(nn.Module):
    def __init__(self, channels_in: int, channels: int, time_dims: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(4, channels_in, pytorch_compatible=True)
        self.conv1 = nn.Conv2d(channels_in, channels, 3, padding=1)
        self.time = nn.Linear(time_dims, channels)
        self.norm2 = nn.GroupNorm(4, channels, pytorch_compatible=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.skip = nn.Linear(channels_in, channels) if channels_in != channels else None

    def __call__(self, x, t):
        y = self.conv1(nn.silu(self.norm1(x))) + self.time(nn.silu(t))[:, None, None, :]
        y = self.conv2(nn.silu(self.norm2(y)))
        return y + (self.skip(x) if self.skip is not None else x)


class CrossAttention(nn.Module):
    def __init__(self, channels: int, context: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)
        self.attn = nn.MultiHeadAttention(channels, 2, key_input_dims=context)

    def __call__(self, x, cond):
        b, h, w, c = x.shape
        y = self.norm(x.reshape(b, h * w, c))
        return x + self.attn(y, cond, cond).reshape(b, h, w, c)


class UNet(nn.Module):
    """A diffusion-style UNet on (x, t, cond): a timestep embedding, a down and an up path whose
    skip connections are popped from a list, cross-attention to ``cond``."""

    def __init__(self, channels: int = 8, context: int = 6):
        super().__init__()
        self.timesteps = nn.SinusoidalPositionalEncoding(channels, max_freq=1, min_freq=1e-4, cos_first=True,
                                                         full_turns=False)
        self.time_mlp = MLP(channels, 2 * channels)
        self.conv_in = nn.Conv2d(4, channels, 3, padding=1)
        self.down = ResBlock(channels, channels, channels)
        self.downsample = nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.mid = [ResBlock(channels, channels, channels), CrossAttention(channels, context)]
        self.up = ResBlock(2 * channels, channels, channels)
        self.conv_out = nn.Conv2d(channels, 4, 3, padding=1)

    def __call__(self, x, t, cond):
        temb = self.time_mlp(self.timesteps(t).astype(x.dtype))
        x = self.conv_in(x)
        skips = [x]
        x = self.down(x, temb)
        skips.append(x)
        x = self.downsample(x)
        x = self.mid[1](self.mid[0](x, temb), cond)
        x = mx.repeat(mx.repeat(x, 2, axis=1), 2, axis=2)
        x = mx.concatenate([x, skips.pop()], axis=-1)
        return self.conv_out(self.up(x, temb) + skips.pop())


IGNORES_B = core.Kernel("validate_any_add_ignoring_b", ("a", "b"), ("out",), """
    uint i = thread_pos.x;
    out[i] = a[i];  // the backend-style fault: the second operand is dropped
""")


class KernelAdd(nn.Module):
    """a + b: a custom kernel on the GPU that ignores b (the deliberate fault), MLX's add on the CPU."""

    def __call__(self, a, b):
        b = mx.broadcast_to(b, a.shape)
        backend = core.native_backend()
        if backend is None:
            coverage.note("add", coverage.MLX_OP)
            return a + b
        coverage.note("add", coverage.CUSTOM_KERNEL)
        size = a.size
        launch = core.Launch(IGNORES_B, (a, b), (), (size, 1, 1), (min(size, 256), 1, 1), (a.shape,), (a.dtype,))
        return core.run(launch, backend)[0]


class KernelNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bias = nn.Conv2d(3, 8, 1)
        self.add = KernelAdd()
        self.head = nn.Linear(8, 3)

    def __call__(self, x):
        return self.head(self.add(self.conv(x), self.bias(x)).mean(axis=(1, 2)))


def _seeded(cls, *args):
    mx.random.seed(0)
    model = cls(*args)
    mx.eval(model.parameters())
    return model


def conv_net():
    model = _seeded(ConvNet)
    rng = np.random.default_rng(0)  # trained-looking BatchNorm statistics
    model.bn.running_mean = mx.array(rng.normal(0, 0.1, 8).astype(np.float32))
    model.bn.running_var = mx.array(rng.uniform(0.5, 1.5, 8).astype(np.float32))
    return model


def causal_lm():
    return _seeded(CausalLM)


def vision_tower():
    return _seeded(VisionTower)


def unet():
    return _seeded(UNet)


def kernel_net():
    return _seeded(KernelNet)


def inputs(name: str) -> tuple:
    rng = np.random.default_rng(1)
    if name == "causal_lm":
        return (mx.array(rng.integers(0, 32, (1, 6)).astype(np.int32)),)
    if name == "unet":
        return (rng.normal(size=(1, 8, 8, 4)).astype(np.float32), mx.array([500.0]),
                rng.normal(size=(1, 3, 6)).astype(np.float32))
    return (rng.normal(size=(1, 8, 8, 3)).astype(np.float32),)


FACTORIES = {"conv_net": conv_net, "causal_lm": causal_lm, "vision_tower": vision_tower, "unet": unet,
             "kernel_net": kernel_net}


def leaves(model: nn.Module) -> list[str]:
    from zoo.validate.capture import submodules

    found = submodules(model)
    return [name for name, _ in found if not any(other.startswith(name + ".") for other, _ in found)]

