"""YOLOv8 DetectionModel (and SegmentationModel, PoseModel) forward in numpy over an ultralytics-named checkpoint (NCHW, OIHW), float64.

Module names are ultralytics': model.0 ... model.21 (layers), model.K.conv / model.K.bn
(Conv), model.K.cv1 / cv2 / m.J (C2f, SPPF, Bottleneck), model.22.cv2.I / cv3.I (box and
class branches of level I, children .0 .1 .2), model.22.dfl and model.22.dfl.conv; Segment's
model.22.proto (cv1, upsample, cv2, cv3) and model.22.cv4.I (mask coefficients), Pose's model.22.cv4.I.
Widths, groups and bottleneck counts are read off the checkpoint; the wiring below is
ultralytics/cfg/models/v8/yolov8.yaml's. ``run_layers`` and the blocks serve YOLO11 too (yolo11.py).
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


def conv(t: Trace, sd, name: str, x, stride: int = 1, act: bool = True):
    """ultralytics Conv: conv (no bias, padding k // 2, groups as the weight says) -> BatchNorm (eps 1e-3)
    -> SiLU (none without ``act``)."""
    def conv_block(v):
        w = sd[f"{name}.conv.weight"]
        groups = v.shape[1] // w.shape[1]
        v = t(f"{name}.conv", lambda u: ops.conv2d(u, w, stride=stride, padding=w.shape[-1] // 2, groups=groups), v)
        p = [sd[f"{name}.bn.{k}"] for k in ("weight", "bias", "running_mean", "running_var")]
        v = t(f"{name}.bn", lambda u: ops.batch_norm(u, *p, eps=BN_EPS), v)
        return ops.silu(v) if act else v

    return t(name, conv_block, x)


def bottleneck(t: Trace, sd, name: str, x, shortcut: bool):
    def block(v):
        y = conv(t, sd, f"{name}.cv2", conv(t, sd, f"{name}.cv1", v))
        return v + y if shortcut and v.shape[1] == y.shape[1] else y

    return t(name, block, x)


def blocks_of(sd, name: str) -> int:
    """How many children ``{name}.m.J`` the checkpoint has."""
    prefix = f"{name}.m."
    return len({k[len(prefix):].split(".")[0] for k in sd if k.startswith(prefix)})


def c2f(t: Trace, sd, name: str, x, block):
    """cv1 halves, each ``block(t, sd, name, v)`` of m extending the list, cv2 over all."""
    def run(v):
        y = conv(t, sd, f"{name}.cv1", v)
        half = y.shape[1] // 2
        ys = [y[:, :half], y[:, half:]]
        for j in range(blocks_of(sd, name)):
            ys.append(block(t, sd, f"{name}.m.{j}", ys[-1]))
        return conv(t, sd, f"{name}.cv2", np.concatenate(ys, axis=1))

    return t(name, run, x)


def sppf(t: Trace, sd, name: str, x, k: int = 5):
    def block(v):
        y = [conv(t, sd, f"{name}.cv1", v)]
        for _ in range(3):
            y.append(ops.max_pool2d(y[-1], k, 1, k // 2))
        return conv(t, sd, f"{name}.cv2", np.concatenate(y, axis=1))

    return t(name, block, x)


def branch(t: Trace, sd, name: str, x):
    """Detect's per-level branch: two stages, then a 1x1 Conv2d with bias. A stage is a 3x3 Conv
    (YOLOv8) or a (depthwise 3x3 Conv, 1x1 Conv) pair (YOLO11's class branch)."""
    def stage(prefix, v):
        if f"{prefix}.conv.weight" in sd:
            return conv(t, sd, prefix, v)
        return t(prefix, lambda u: conv(t, sd, f"{prefix}.1", conv(t, sd, f"{prefix}.0", u)), v)

    def block(v):
        v = stage(f"{name}.1", stage(f"{name}.0", v))
        w, b = sd[f"{name}.2.weight"], sd[f"{name}.2.bias"]
        return t(f"{name}.2", lambda u: ops.conv2d(u, w, b), v)

    return t(name, block, x)


def dfl(t: Trace, sd, head: str, box):
    """(B, 4 * 16, A) bin logits -> (B, 4, A): softmax over the bins, weighted by the 1x1 conv's weights."""
    w = sd[f"{head}.dfl.conv.weight"]

    def block(v):
        b, _, a = v.shape
        p = ops.softmax(v.reshape(b, 4, REG_MAX, a).transpose(0, 2, 1, 3), axis=1)
        return t(f"{head}.dfl.conv", lambda u: ops.conv2d(u, w), p).reshape(b, 4, a)

    return t(f"{head}.dfl", block, box)


def detect(t: Trace, sd, head: str, levels):
    """Returns (y, maps) like upstream's eval mode: y (B, 4 + nc, A) decoded, maps the raw (B, 64 + nc, H, W)."""
    maps = [np.concatenate([branch(t, sd, f"{head}.cv2.{i}", x), branch(t, sd, f"{head}.cv3.{i}", x)], axis=1)
            for i, x in enumerate(levels)]
    b, no = maps[0].shape[:2]
    x_cat = np.concatenate([m.reshape(b, no, -1) for m in maps], axis=2)
    box, cls = x_cat[:, : 4 * REG_MAX], x_cat[:, 4 * REG_MAX :]
    dist = dfl(t, sd, head, box)
    anchors, strides = make_anchors(maps)
    lt, rb = dist[:, :2], dist[:, 2:]
    x1y1, x2y2 = anchors[None] - lt, anchors[None] + rb
    dbox = np.concatenate([(x1y1 + x2y2) / 2, x2y2 - x1y1], axis=1) * strides
    return np.concatenate([dbox, ops.sigmoid(cls)], axis=1), maps


def make_anchors(maps):
    """Upstream's make_anchors over the levels' maps: (2, A) cell centres x, y (in cells, + 0.5) and (A,) strides."""
    points, strides = [], []
    for m, stride in zip(maps, STRIDES):
        h, w = m.shape[2:]
        gy, gx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        points.append(np.stack([gx, gy], axis=-1).reshape(-1, 2))
        strides.append(np.full(h * w, float(stride)))
    return np.concatenate(points).T, np.concatenate(strides)


def proto(t: Trace, sd, name: str, x):
    """Segment's Proto: Conv 3x3, ConvTranspose2d 2x2 stride 2 (with bias), Conv 3x3, Conv 1x1."""
    def block(v):
        w, b = sd[f"{name}.upsample.weight"], sd[f"{name}.upsample.bias"]
        v = t(f"{name}.upsample", lambda u: ops.conv_transpose2d(u, w, b, stride=2), conv(t, sd, f"{name}.cv1", v))
        return conv(t, sd, f"{name}.cv3", conv(t, sd, f"{name}.cv2", v))

    return t(name, block, x)


def third_branch(t: Trace, sd, head: str, levels):
    """Segment's and Pose's cv4 over the levels: (B, C, A), anchors in Detect's order."""
    outs = [branch(t, sd, f"{head}.cv4.{i}", x) for i, x in enumerate(levels)]
    return np.concatenate([o.reshape(o.shape[0], o.shape[1], -1) for o in outs], axis=2)


def segment(t: Trace, sd, head: str, levels):
    """Upstream's Segment in eval mode: ((y (B, 4 + nc + 32, A) with the raw mask coefficients last,
    protos (B, 32, H/4, W/4)), the Detect maps)."""
    protos = proto(t, sd, f"{head}.proto", levels[0])
    coefficients = third_branch(t, sd, head, levels)
    y, maps = detect(t, sd, head, levels)
    return (np.concatenate([y, coefficients], axis=1), protos), maps


def pose(t: Trace, sd, head: str, levels, kpt_shape: tuple[int, int]):
    """Upstream's Pose in eval mode: (y (B, 4 + nc + K * D, A), the Detect maps); its kpts_decode: each
    keypoint's x, y = (raw * 2 + anchor - 0.5) * stride, a third value through a sigmoid."""
    raw = third_branch(t, sd, head, levels)
    y, maps = detect(t, sd, head, levels)
    anchors, strides = make_anchors(maps)
    d = kpt_shape[1]
    keypoints = raw.copy()
    if d == 3:
        keypoints[:, 2::d] = ops.sigmoid(raw[:, 2::d])
    keypoints[:, 0::d] = (raw[:, 0::d] * 2.0 + (anchors[0] - 0.5)) * strides
    keypoints[:, 1::d] = (raw[:, 1::d] * 2.0 + (anchors[1] - 0.5)) * strides
    return np.concatenate([y, keypoints], axis=1), maps


def head_forward(t: Trace, sd, head: str, levels, kpt_shape):
    """The checkpoint's head: Segment where it has a Proto, Pose where it has a keypoint branch, else Detect."""
    if f"{head}.proto.cv1.conv.weight" in sd:
        return segment(t, sd, head, levels)
    if f"{head}.cv4.0.2.weight" in sd:
        return pose(t, sd, head, levels, tuple(kpt_shape or (17, 3)))
    return detect(t, sd, head, levels)


def run_layers(sd: dict[str, np.ndarray], x: np.ndarray, trace: Trace | None, kinds, inputs, blocks,
               kpt_shape: tuple[int, int] | None = None):
    """A yaml's layers in order: ``kinds`` per index, ``inputs`` for those not reading only the
    previous layer, ``blocks`` kind -> fn(t, sd, name, x, index) for the kinds beyond Conv (the
    top-level ones stride 2), Upsample and Concat. The last layer is the head: Detect, or the
    checkpoint's Segment or Pose (``kpt_shape``: the file's, COCO's 17 x 3 by default)."""
    t = trace or Trace()
    sd = {k: v.astype(np.float64, copy=False) for k, v in sd.items() if not k.endswith("num_batches_tracked")}
    outputs = []
    for i, kind in enumerate(kinds[:-1]):
        name = f"model.{i}"
        if kind == "Conv":
            x = conv(t, sd, name, x, stride=2)  # the yamls' top-level Convs are 3x3 stride-2 downsamples
        elif kind == "Upsample":
            x = t(name, lambda v: ops.upsample_nearest(v, 2), x)
        elif kind == "Concat":
            x = t(name, lambda *vs: np.concatenate(vs, axis=1), *(outputs[j] for j in inputs[i]))
        else:
            x = blocks[kind](t, sd, name, x, i)
        outputs.append(x)
    last = len(kinds) - 1
    return head_forward(t, sd, f"model.{last}", [outputs[j] for j in inputs[last]], kpt_shape)


def forward(sd: dict[str, np.ndarray], x: np.ndarray, trace: Trace | None = None,
            kpt_shape: tuple[int, int] | None = None):
    """x: (N, 3, H, W) RGB in [0, 1] -> (y (N, 4 + nc, A), [P3, P4, P5] raw head maps); a segmentation
    checkpoint's y is (y (N, 4 + nc + 32, A), protos (N, 32, H/4, W/4)), a pose one's (N, 4 + nc + K * D, A)."""
    blocks = {"C2f": lambda t, sd, name, v, i: c2f(t, sd, name, v, lambda *a: bottleneck(*a, i in BACKBONE_C2F)),
              "SPPF": lambda t, sd, name, v, i: sppf(t, sd, name, v)}
    return run_layers(sd, x, trace, KINDS, INPUTS, blocks, kpt_shape)
