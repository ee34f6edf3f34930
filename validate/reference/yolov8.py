"""YOLOv8 DetectionModel forward in numpy over an ultralytics-named checkpoint (NCHW, OIHW), float64.

Module names are ultralytics': model.0 ... model.21 (layers), model.K.conv / model.K.bn
(Conv), model.K.cv1 / cv2 / m.J (C2f, SPPF, Bottleneck), model.22.cv2.I / cv3.I (box and
class branches of level I, children .0 .1 .2), model.22.dfl and model.22.dfl.conv.
Widths and bottleneck counts are read off the checkpoint; the wiring below is
ultralytics/cfg/models/v8/yolov8.yaml's.
"""
from __future__ import annotations

import numpy as np

from . import ops
from .trace import Trace

# yolov8.yaml: module type per layer index, and the layers that take other inputs than the previous one
KINDS = ("Conv", "Conv", "C2f", "Conv", "C2f", "Conv", "C2f", "Conv", "C2f", "SPPF", "Upsample", "Concat",
         "C2f", "Upsample", "Concat", "C2f", "Conv", "Concat", "C2f", "Conv", "Concat", "C2f", "Detect")
INPUTS = {11: (10, 6), 14: (13, 4), 17: (16, 12), 20: (19, 9), 22: (15, 18, 21)}
BACKBONE_C2F = {2, 4, 6, 8}  # C2f(..., shortcut=True); the neck's C2f have no residuals
STRIDES = (8, 16, 32)  # Detect.stride of P3, P4, P5
REG_MAX = 16
BN_EPS = 1e-3


def _conv_bn_silu(t: Trace, sd, name: str, x, stride: int = 1):
    """ultralytics Conv: conv (no bias, padding k // 2) -> BatchNorm (eps 1e-3) -> SiLU."""
    def conv_block(v):
        w = sd[f"{name}.conv.weight"]
        v = t(f"{name}.conv", lambda u: ops.conv2d(u, w, stride=stride, padding=w.shape[-1] // 2), v)
        p = [sd[f"{name}.bn.{k}"] for k in ("weight", "bias", "running_mean", "running_var")]
        v = t(f"{name}.bn", lambda u: ops.batch_norm(u, *p, eps=BN_EPS), v)
        return ops.silu(v)

    return t(name, conv_block, x)


def _bottleneck(t: Trace, sd, name: str, x, shortcut: bool):
    def block(v):
        y = _conv_bn_silu(t, sd, f"{name}.cv2", _conv_bn_silu(t, sd, f"{name}.cv1", v))
        return v + y if shortcut and v.shape[1] == y.shape[1] else y

    return t(name, block, x)


def _c2f(t: Trace, sd, name: str, x, shortcut: bool):
    n = len({k.split(".")[3] for k in sd if k.startswith(f"{name}.m.")})

    def block(v):
        y = _conv_bn_silu(t, sd, f"{name}.cv1", v)
        half = y.shape[1] // 2
        ys = [y[:, :half], y[:, half:]]
        for j in range(n):
            ys.append(_bottleneck(t, sd, f"{name}.m.{j}", ys[-1], shortcut))
        return _conv_bn_silu(t, sd, f"{name}.cv2", np.concatenate(ys, axis=1))

    return t(name, block, x)


def _sppf(t: Trace, sd, name: str, x, k: int = 5):
    def block(v):
        y = [_conv_bn_silu(t, sd, f"{name}.cv1", v)]
        for _ in range(3):
            y.append(ops.max_pool2d(y[-1], k, 1, k // 2))
        return _conv_bn_silu(t, sd, f"{name}.cv2", np.concatenate(y, axis=1))

    return t(name, block, x)


def _branch(t: Trace, sd, name: str, x):
    """Detect's per-level branch: Conv 3x3, Conv 3x3, Conv2d 1x1 with bias."""
    def block(v):
        v = _conv_bn_silu(t, sd, f"{name}.0", v)
        v = _conv_bn_silu(t, sd, f"{name}.1", v)
        w, b = sd[f"{name}.2.weight"], sd[f"{name}.2.bias"]
        return t(f"{name}.2", lambda u: ops.conv2d(u, w, b), v)

    return t(name, block, x)


def _dfl(t: Trace, sd, box):
    """(B, 4 * 16, A) bin logits -> (B, 4, A): softmax over the bins, weighted by the 1x1 conv's weights."""
    w = sd["model.22.dfl.conv.weight"]

    def block(v):
        b, _, a = v.shape
        p = ops.softmax(v.reshape(b, 4, REG_MAX, a).transpose(0, 2, 1, 3), axis=1)
        return t("model.22.dfl.conv", lambda u: ops.conv2d(u, w), p).reshape(b, 4, a)

    return t("model.22.dfl", block, box)


def _detect(t: Trace, sd, levels):
    """Returns (y, maps) like upstream's eval mode: y (B, 4 + nc, A) decoded, maps the raw (B, 64 + nc, H, W)."""
    maps = [np.concatenate([_branch(t, sd, f"model.22.cv2.{i}", x), _branch(t, sd, f"model.22.cv3.{i}", x)], axis=1)
            for i, x in enumerate(levels)]
    b, no = maps[0].shape[:2]
    x_cat = np.concatenate([m.reshape(b, no, -1) for m in maps], axis=2)
    box, cls = x_cat[:, : 4 * REG_MAX], x_cat[:, 4 * REG_MAX :]
    dist = _dfl(t, sd, box)
    points, strides = [], []
    for m, stride in zip(maps, STRIDES):
        h, w = m.shape[2:]
        gy, gx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        points.append(np.stack([gx, gy], axis=-1).reshape(-1, 2))
        strides.append(np.full(h * w, float(stride)))
    anchors = np.concatenate(points).T[None]  # (1, 2, A)
    lt, rb = dist[:, :2], dist[:, 2:]
    x1y1, x2y2 = anchors - lt, anchors + rb
    dbox = np.concatenate([(x1y1 + x2y2) / 2, x2y2 - x1y1], axis=1) * np.concatenate(strides)
    return np.concatenate([dbox, ops.sigmoid(cls)], axis=1), maps


def forward(sd: dict[str, np.ndarray], x: np.ndarray, trace: Trace | None = None):
    """x: (N, 3, H, W) RGB in [0, 1] -> (y (N, 4 + nc, A), [P3, P4, P5] raw head maps)."""
    t = trace or Trace()
    sd = {k: v.astype(np.float64, copy=False) for k, v in sd.items() if not k.endswith("num_batches_tracked")}
    outputs = []
    for i, kind in enumerate(KINDS[:-1]):
        name = f"model.{i}"
        if kind == "Conv":
            x = _conv_bn_silu(t, sd, name, x, stride=2)  # the top-level Convs are yolov8.yaml's 3x3 stride-2 downsamples
        elif kind == "C2f":
            x = _c2f(t, sd, name, x, shortcut=i in BACKBONE_C2F)
        elif kind == "SPPF":
            x = _sppf(t, sd, name, x)
        elif kind == "Upsample":
            x = t(name, lambda v: ops.upsample_nearest(v, 2), x)
        else:  # Concat
            x = t(name, lambda *vs: np.concatenate(vs, axis=1), *(outputs[j] for j in INPUTS[i]))
        outputs.append(x)
    return _detect(t, sd, [outputs[j] for j in INPUTS[len(KINDS) - 1]])
