"""ResNet forward in numpy over a torchvision-named checkpoint (NCHW, OIHW).

Module names are torchvision's: conv1, bn1, relu, maxpool, layer1 ... layer4,
layerK.J (blocks), layerK.J.conv1/bn1/..., layerK.J.downsample(.0/.1), avgpool, fc.
"""
from __future__ import annotations

import numpy as np

from . import ops
from .trace import Trace

def _conv(t: Trace, sd, name, x, stride=1):
    w = sd[f"{name}.weight"]
    return t(name, lambda v: ops.conv2d(v, w, stride=stride, padding=w.shape[-1] // 2), x)


def _bn(t: Trace, sd, name, x):
    p = {k: sd[f"{name}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")}
    return t(name, lambda v: ops.batch_norm(v, p["weight"], p["bias"], p["running_mean"], p["running_var"]), x)


def _block(t: Trace, sd, name, x, bottleneck: bool, stride: int):
    convs = ("conv1", "conv2", "conv3") if bottleneck else ("conv1", "conv2")
    # torchvision v1.5: the stride sits on the 3x3 conv (conv2 of a bottleneck, conv1 of a basic block)
    strided = "conv2" if bottleneck else "conv1"
    out = x
    for i, conv in enumerate(convs):
        out = _conv(t, sd, f"{name}.{conv}", out, stride if conv == strided else 1)
        out = _bn(t, sd, f"{name}.bn{i + 1}", out)
        if i < len(convs) - 1:
            out = ops.relu(out)
    identity = x
    if f"{name}.downsample.0.weight" in sd:
        def downsample(v):
            v = _conv(t, sd, f"{name}.downsample.0", v, stride)
            return _bn(t, sd, f"{name}.downsample.1", v)
        identity = t(f"{name}.downsample", downsample, x)
    return ops.relu(out + identity)


def forward(sd: dict[str, np.ndarray], x: np.ndarray, trace: Trace | None = None) -> np.ndarray:
    """x: (N, 3, H, W) normalised image -> (N, 1000) logits."""
    t = trace or Trace()
    sd = {k: v.astype(np.float64, copy=False) for k, v in sd.items() if not k.endswith("num_batches_tracked")}
    # The architecture is read off the checkpoint: blocks per stage, basic or bottleneck.
    blocks_per_stage = [len({k.split(".")[1] for k in sd if k.startswith(f"layer{s}.")}) for s in (1, 2, 3, 4)]
    bottleneck = "layer1.0.conv3.weight" in sd

    x = _conv(t, sd, "conv1", x, stride=2)
    x = _bn(t, sd, "bn1", x)
    x = t("relu", ops.relu, x)
    x = t("maxpool", lambda v: ops.max_pool2d(v, 3, 2, 1), x)
    for stage, blocks in enumerate(blocks_per_stage, start=1):
        def run_stage(v, stage=stage, blocks=blocks):
            for j in range(blocks):
                stride = 2 if stage > 1 and j == 0 else 1
                v = t(f"layer{stage}.{j}", lambda u, j=j, s=stride: _block(t, sd, f"layer{stage}.{j}", u, bottleneck, s), v)
            return v
        x = t(f"layer{stage}", run_stage, x)
    x = t("avgpool", ops.adaptive_avg_pool_1x1, x)
    x = x.reshape(x.shape[0], -1)  # torch.flatten: fc's input is (N, C)
    return t("fc", lambda v: ops.linear(v, sd["fc.weight"], sd["fc.bias"]), x)
