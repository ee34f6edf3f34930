"""YOLO11 DetectionModel forward in numpy over an ultralytics-named checkpoint (NCHW, OIHW), float64.

ultralytics/cfg/models/11/yolo11.yaml's wiring over yolov8.py's layers and blocks, with YOLO11's
own: C3k2 (a C2f whose blocks are Bottlenecks of half width or, where the checkpoint has their
cv3, C3k), C3k, C2PSA with PSABlock and Attention, and the head at model.23 (yolov8.branch reads
the depthwise class branch off the checkpoint). Widths, heads and block counts come from the
checkpoint.
"""
from __future__ import annotations

import numpy as np

from . import ops
from .trace import Trace
from .yolov8 import bottleneck, blocks_of, c2f, conv, run_layers, sppf

KINDS = ("Conv", "Conv", "C3k2", "Conv", "C3k2", "Conv", "C3k2", "Conv", "C3k2", "SPPF", "C2PSA", "Upsample",
         "Concat", "C3k2", "Upsample", "Concat", "C3k2", "Conv", "Concat", "C3k2", "Conv", "Concat", "C3k2", "Detect")
INPUTS = {12: (11, 6), 15: (14, 4), 18: (17, 13), 21: (20, 10), 23: (16, 19, 22)}
HEAD_DIM = 64  # C2PSA: one attention head per 64 channels; keys of half that width


def c3k(t: Trace, sd, name: str, x):
    """cv3 over (m's Bottlenecks on cv1, cv2), all with shortcuts."""
    def block(v):
        y = conv(t, sd, f"{name}.cv1", v)
        for j in range(blocks_of(sd, name)):
            y = bottleneck(t, sd, f"{name}.m.{j}", y, True)
        return conv(t, sd, f"{name}.cv3", np.concatenate([y, conv(t, sd, f"{name}.cv2", v)], axis=1))

    return t(name, block, x)


def c3k2_block(t: Trace, sd, name: str, x):
    return c3k(t, sd, name, x) if f"{name}.cv3.conv.weight" in sd else bottleneck(t, sd, name, x, True)


def attention(t: Trace, sd, name: str, x):
    """qkv viewed (B, heads, 2 * key + head, HW) and split; softmax(q^T k * key**-0.5); v @ attn^T,
    plus pe (depthwise 3x3 Conv) of v; proj. No activations."""
    def block(v):
        b, c, h, w = v.shape
        heads = c // HEAD_DIM
        key = HEAD_DIM // 2
        qkv = conv(t, sd, f"{name}.qkv", v, act=False).reshape(b, heads, 2 * key + HEAD_DIM, h * w)
        q, k, val = qkv[:, :, :key], qkv[:, :, key:2 * key], qkv[:, :, 2 * key:]
        attn = ops.softmax(q.transpose(0, 1, 3, 2) @ k * key**-0.5, axis=-1)
        out = (val @ attn.transpose(0, 1, 3, 2)).reshape(b, c, h, w)
        out = out + conv(t, sd, f"{name}.pe", val.reshape(b, c, h, w), act=False)
        return conv(t, sd, f"{name}.proj", out, act=False)

    return t(name, block, x)


def psa_block(t: Trace, sd, name: str, x):
    def block(v):
        v = v + attention(t, sd, f"{name}.attn", v)
        ffn = t(f"{name}.ffn", lambda u: conv(t, sd, f"{name}.ffn.1", conv(t, sd, f"{name}.ffn.0", u), act=False), v)
        return v + ffn

    return t(name, block, x)


def c2psa(t: Trace, sd, name: str, x):
    """cv1 halves (a, b); b through m's PSABlocks; cv2 over (a, b)."""
    def block(v):
        y = conv(t, sd, f"{name}.cv1", v)
        half = y.shape[1] // 2
        b = y[:, half:]
        b = t(f"{name}.m", lambda u: _chain(t, sd, name, u), b)
        return conv(t, sd, f"{name}.cv2", np.concatenate([y[:, :half], b], axis=1))

    return t(name, block, x)


def _chain(t: Trace, sd, name: str, v):
    for j in range(blocks_of(sd, name)):
        v = psa_block(t, sd, f"{name}.m.{j}", v)
    return v


BLOCKS = {"C3k2": lambda t, sd, name, v, i: c2f(t, sd, name, v, c3k2_block),
          "SPPF": lambda t, sd, name, v, i: sppf(t, sd, name, v),
          "C2PSA": lambda t, sd, name, v, i: c2psa(t, sd, name, v)}


def forward(sd: dict[str, np.ndarray], x: np.ndarray, trace: Trace | None = None,
            kpt_shape: tuple[int, int] | None = None):
    """x: (N, 3, H, W) RGB in [0, 1] -> (y (N, 4 + nc, A), [P3, P4, P5] raw head maps); segmentation and
    pose checkpoints as yolov8.forward's."""
    return run_layers(sd, x, trace, KINDS, INPUTS, BLOCKS, kpt_shape)
