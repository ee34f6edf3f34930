"""The segmentation and pose heads of YOLOv8 and YOLO11 (ultralytics' Segment, Proto and Pose), on Detect.

Both add a third branch per level (``cv4``: Conv 3x3, Conv 3x3, 1x1 conv, as Detect's box branch) to
the detection head and return what upstream's eval forward returns, NHWC and anchors last-but-one:

    Segment: (preds (N, A, 4 + nc + nm), protos (N, H/4, W/4, nm))   nm = 32 mask coefficients, raw
    Pose:    (N, A, 4 + nc + K * D)   keypoints decoded to input pixels: x, y (and visibility as a sigmoid)

``Architecture.with_head("Segment", (nm, npr))`` / ``with_head("Pose", (kpt_shape,))`` put them in place
of Detect (``task_architecture``); the rest of the network is the detector's.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from zoo.compiled import folded, folding
from zoo.kernels import winograd
from zoo.models.layers import ConvTranspose2d, Sequential, sigmoid

from .model import HEADS, STRIDES, Architecture, Conv, Detect, HeadBranch, scaled_channels

NM, NPR = 32, 256  # yolov8-seg.yaml / yolo11-seg.yaml: Segment(nc, 32, 256), the 256 scaled by the width
TASK_HEADS = {"detect": "Detect", "segment": "Segment", "pose": "Pose"}


class Proto(nn.Module):
    """The mask prototypes: Conv 3x3, a 2x2 stride-2 transposed conv (x2 upsampling), Conv 3x3, Conv 1x1."""

    def __init__(self, c1: int, c_: int = NPR, c2: int = NM):
        super().__init__()
        self.cv1 = Conv(c1, c_, 3)
        self.upsample = ConvTranspose2d(c_, c_, 2, stride=2, bias=True)
        self.cv2 = Conv(c_, c_, 3)
        self.cv3 = Conv(c_, c2, 1)

    def __call__(self, x: mx.array) -> mx.array:
        return self.cv3(self.cv2(self.upsample(self.cv1(x))))

    def in_parts(self, x: mx.array, after: mx.array) -> mx.array:
        """The prototypes in a compiled forward, computed after ``after`` (the detections): where cv2
        at twice the P3 level's size takes Winograd's form (float32 on CUDA), whose transforms hold 4x
        its input and 4x its output (yolov8n-seg b16: 2 x 420 MB beside the 105 MB maps), the layers
        after cv1 run over a quarter of the images at a time, one part after another (mx.depends),
        so that no more than the P3 level's pixels of the whole batch are in flight, where that part
        still takes Winograd's form; else whole."""
        y = self.cv1(x)
        n, h, w, c = y.shape
        step = -(-n // 4)
        arrays = folded(self.cv2.conv)
        if step == n or "winograd" not in arrays \
                or not winograd.worth_it((step, 2 * h, 2 * w, c), arrays["weight"].shape):
            return self.cv3(self.cv2(self.upsample(mx.depends(y, after))))
        parts = []
        for start in range(0, n, step):
            part = mx.depends(y[start:start + step], parts[-1] if parts else after)
            parts.append(self.cv3(self.cv2(self.upsample(part))))
        return mx.concatenate(parts)


class Segment(Detect):
    """Detect, the mask coefficients of each anchor (cv4) and the prototypes of the P3 level (proto)."""

    task = "segment"

    def __init__(self, nc: int, ch: tuple[int, ...], legacy: bool = True, nm: int = NM, npr: int = NPR):
        super().__init__(nc, ch, legacy)
        self.nm = nm
        self.proto = Proto(ch[0], npr, nm)
        c4 = max(ch[0] // 4, nm)
        self.cv4 = Sequential(*(HeadBranch(c, c4, nm) for c in ch))

    def branches_by_stride(self) -> list[tuple[nn.Module, int]]:
        return [*super().branches_by_stride(), *((self.cv4[str(i)], s) for i, s in enumerate(STRIDES)),
                (self.proto.cv1, STRIDES[0]), (self.proto.cv2, STRIDES[0] // 2), (self.proto.cv3, STRIDES[0] // 2)]

    def __call__(self, *levels: mx.array) -> tuple[mx.array, mx.array]:
        n = levels[0].shape[0]
        coefficients = mx.concatenate([self.cv4[str(i)](x).reshape(n, -1, self.nm) for i, x in enumerate(levels)],
                                      axis=1)
        preds = super().__call__(*levels)
        preds = mx.concatenate([preds, coefficients.astype(preds.dtype)], axis=-1)
        return preds, self.proto.in_parts(levels[0], preds) if folding() else self.proto(levels[0])


class Pose(Detect):
    """Detect and each anchor's K keypoints of D values (x, y[, visibility]), decoded as upstream's
    kpts_decode: x = (raw * 2 + column) * stride, y likewise with the row, visibility through a sigmoid."""

    task = "pose"

    def __init__(self, nc: int, ch: tuple[int, ...], legacy: bool = True, kpt_shape: tuple[int, int] = (17, 3)):
        super().__init__(nc, ch, legacy)
        self.kpt_shape = tuple(kpt_shape)
        self.nk = self.kpt_shape[0] * self.kpt_shape[1]
        c4 = max(ch[0] // 4, self.nk)
        self.cv4 = Sequential(*(HeadBranch(c, c4, self.nk) for c in ch))

    def branches_by_stride(self) -> list[tuple[nn.Module, int]]:
        return [*super().branches_by_stride(), *((self.cv4[str(i)], s) for i, s in enumerate(STRIDES))]

    def __call__(self, *levels: mx.array) -> mx.array:
        preds = super().__call__(*levels)
        if folding():
            # a compiled forward computes the keypoint branches after the detections (mx.depends): MLX
            # ordered them side by side, and yolo11n-pose b16 float32 peaked 454 MiB against 341 after
            # the DFL became one kernel (H200, 2026-12-01, docs/speed-gpu.md)
            levels = [mx.depends(x, preds) for x in levels]
        keypoints = [self.decode(self.cv4[str(i)](x), stride) for i, (x, stride) in enumerate(zip(levels, STRIDES))]
        return mx.concatenate([preds, mx.concatenate(keypoints, axis=1).astype(preds.dtype)], axis=-1)

    def decode(self, raw: mx.array, stride: int) -> mx.array:
        """One level's (N, H, W, K * D) raw keypoints -> (N, H * W, K * D) in input pixels. Upstream's
        anchor centre minus 0.5 is the cell's column / row itself."""
        n, h, w, _ = raw.shape
        k, d = self.kpt_shape
        raw = raw.reshape(n, h, w, k, d)
        columns = mx.arange(w, dtype=raw.dtype).reshape(1, 1, w, 1)
        rows = mx.arange(h, dtype=raw.dtype).reshape(1, h, 1, 1)
        parts = [(raw[..., 0] * 2 + columns) * stride, (raw[..., 1] * 2 + rows) * stride]
        if d == 3:
            parts.append(sigmoid(raw[..., 2]))
        return mx.stack(parts, axis=-1).reshape(n, h * w, k * d)


HEADS.update({"Segment": Segment, "Pose": Pose})


def task_architecture(arch: Architecture, scale: str, task: str, kpt_shape: tuple[int, int] | None = None):
    """``arch``'s table with the task's head last, its arguments as parse_model gives them (Segment's
    prototype width scaled like a layer's channels)."""
    if task == "segment":
        _, width, max_channels = arch.scales[scale]
        return arch.with_head("Segment", (NM, scaled_channels(NPR, width, max_channels)))
    if task == "pose":
        return arch.with_head("Pose", (tuple(kpt_shape or (17, 3)),))
    return arch
