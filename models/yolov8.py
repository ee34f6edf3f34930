"""YOLOv8 n/s/m/l/x detection (ultralytics layout) in MLX, NHWC, with ultralytics' pre/post-processing.

Attribute names mirror ultralytics' DetectionModel state dict (model.0.conv.weight,
model.2.m.0.cv1.bn.running_var, model.22.cv2.0.2.weight, model.22.dfl.conv.weight, ...)
so checkpoints load by name. The network is built from the table of
ultralytics/cfg/models/v8/yolov8.yaml and the variant's scale, as ultralytics' parse_model does.

Raw call: ``det(x)`` with x (N, H, W, 3) RGB in [0, 1], H and W multiples of 32
-> (N, A, 4 + 80): box centre x, y, width, height in input pixels, then the 80
class scores; anchors ordered P3 (stride 8), P4 (16), P5 (32), each row-major.
Upstream returns the transpose, (N, 84, A).

``det.predict(images)``: letterbox (ultralytics' LetterBox with cv2's bilinear
resize reproduced bit for bit), the network, confidence filter, class-aware NMS
on the GPU (zoo.kernels.nms), boxes mapped back to the original image.
"""
from __future__ import annotations

import ast
import math
import numbers
import re
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.devices import as_model_input
from zoo.errors import ZooError
from zoo.images import load_image
from zoo.kernels import nms, sppf_maxpool
from zoo.kernels.nms import MAX_BOXES as MAX_NMS
from zoo.models.detection import Detections
from zoo.models.layers import BatchNorm, Conv2d, Sequential, sigmoid, silu

CLASS_NAMES = Path(__file__).parent / "data" / "coco_classes.txt"

# yolov8.yaml scales: depth multiple, width multiple, max channels.
SCALES = {
    "n": (0.33, 0.25, 1024),
    "s": (0.33, 0.50, 1024),
    "m": (0.67, 0.75, 768),
    "l": (1.00, 1.00, 512),
    "x": (1.00, 1.25, 512),
}

# yolov8.yaml, one row per layer: inputs (-1 = previous layer), repeats, module, args
# (output channels before width scaling first).
ARCH = (
    (-1, 1, "Conv", (64, 3, 2)),  # 0 P1/2
    (-1, 1, "Conv", (128, 3, 2)),  # 1 P2/4
    (-1, 3, "C2f", (128, True)),  # 2
    (-1, 1, "Conv", (256, 3, 2)),  # 3 P3/8
    (-1, 6, "C2f", (256, True)),  # 4
    (-1, 1, "Conv", (512, 3, 2)),  # 5 P4/16
    (-1, 6, "C2f", (512, True)),  # 6
    (-1, 1, "Conv", (1024, 3, 2)),  # 7 P5/32
    (-1, 3, "C2f", (1024, True)),  # 8
    (-1, 1, "SPPF", (1024, 5)),  # 9
    (-1, 1, "Upsample", ()),  # 10
    ((-1, 6), 1, "Concat", ()),  # 11: with backbone P4
    (-1, 3, "C2f", (512, False)),  # 12
    (-1, 1, "Upsample", ()),  # 13
    ((-1, 4), 1, "Concat", ()),  # 14: with backbone P3
    (-1, 3, "C2f", (256, False)),  # 15: P3 output
    (-1, 1, "Conv", (256, 3, 2)),  # 16
    ((-1, 12), 1, "Concat", ()),  # 17: with head P4
    (-1, 3, "C2f", (512, False)),  # 18: P4 output
    (-1, 1, "Conv", (512, 3, 2)),  # 19
    ((-1, 9), 1, "Concat", ()),  # 20: with head P5
    (-1, 3, "C2f", (1024, False)),  # 21: P5 output
    ((15, 18, 21), 1, "Detect", ()),  # 22
)
STRIDES = (8, 16, 32)
STRIDE = STRIDES[-1]  # input sides must be multiples of the largest stride
REG_MAX = 16  # DFL bins per box side
PAD_VALUE = 114  # letterbox border grey
MAX_IMGSZ = 8192  # a letterboxed 8192x8192 batch of one is already 800 MB in float32


class Conv(nn.Module):
    """Conv2d (no bias, 'same' padding) + BatchNorm (eps 1e-3) + SiLU."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1):
        super().__init__()
        self.conv = Conv2d(c1, c2, k, stride=s, padding=k // 2, bias=False)
        self.bn = BatchNorm(c2, eps=1e-3, momentum=0.03)

    def __call__(self, x: mx.array) -> mx.array:
        return silu(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """Two 3x3 Convs, with the input added back when ``shortcut`` and the widths match."""

    def __init__(self, c1: int, c2: int, shortcut: bool):
        super().__init__()
        self.cv1 = Conv(c1, c2, 3)
        self.cv2 = Conv(c2, c2, 3)
        self.add = shortcut and c1 == c2

    def shortcut(self, x: mx.array) -> mx.array:
        return x

    def __call__(self, x: mx.array) -> mx.array:
        y = self.cv2(self.cv1(x))
        return y + self.shortcut(x) if self.add else y


class C2f(nn.Module):
    """cv1 splits into two halves; each bottleneck extends the list from the last one; cv2 fuses all."""

    def __init__(self, c1: int, c2: int, n: int, shortcut: bool):
        super().__init__()
        c = c2 // 2
        self.cv1 = Conv(c1, 2 * c, 1)
        self.cv2 = Conv((2 + n) * c, c2, 1)
        self.m = Sequential(*(Bottleneck(c, c, shortcut) for _ in range(n)))

    def __call__(self, x: mx.array) -> mx.array:
        ys = mx.split(self.cv1(x), 2, axis=-1)
        for bottleneck in self.m.children_in_order():
            ys.append(bottleneck(ys[-1]))
        return self.cv2(mx.concatenate(ys, axis=-1))


class SPPF(nn.Module):
    """cv1, three chained k x k max-pools (one kernel), all four concatenated, cv2."""

    def __init__(self, c1: int, c2: int, k: int):
        super().__init__()
        c = c1 // 2
        self.cv1 = Conv(c1, c, 1)
        self.cv2 = Conv(4 * c, c2, 1)
        self.k = k

    def __call__(self, x: mx.array) -> mx.array:
        x = self.cv1(x)
        return self.cv2(mx.concatenate([x, *sppf_maxpool(x, self.k)], axis=-1))


class Concat(nn.Module):
    def __call__(self, *xs: mx.array) -> mx.array:
        return mx.concatenate(xs, axis=-1)


class DFL(nn.Module):
    """Distribution focal loss integral: each box side is the softmax-weighted sum of 16 bins.

    The bin values are the checkpoint's conv weight (arange(16) in trained models).
    Input and output keep upstream's layout, (N, 4 * 16, A) -> (N, 4, A).
    """

    def __init__(self, bins: int = REG_MAX):
        super().__init__()
        self.conv = nn.Conv2d(bins, 1, 1, bias=False)
        self.bins = bins

    def __call__(self, x: mx.array) -> mx.array:
        n, _, a = x.shape
        # (N, 4 sides, A, bins): NHWC for the 1x1 conv, bins as channels
        p = mx.softmax(x.reshape(n, 4, self.bins, a).swapaxes(2, 3), axis=-1)
        return self.conv(p).reshape(n, 4, a)


def head_branch(c1: int, c: int, c_out: int) -> Sequential:
    return Sequential(Conv(c1, c, 3), Conv(c, c, 3), Conv2d(c, c_out, 1))


class Detect(nn.Module):
    """Per level: box branch (cv2: 4 x 16 DFL logits) and class branch (cv3: nc logits); then decode."""

    def __init__(self, nc: int, ch: tuple[int, ...]):
        super().__init__()
        self.nc = nc
        c2 = max(16, ch[0] // 4, REG_MAX * 4)
        c3 = max(ch[0], min(nc, 100))
        self.cv2 = Sequential(*(head_branch(c, c2, 4 * REG_MAX) for c in ch))
        self.cv3 = Sequential(*(head_branch(c, c3, nc) for c in ch))
        self.dfl = DFL(REG_MAX)

    def __call__(self, *levels: mx.array) -> mx.array:
        n = levels[0].shape[0]
        box, cls = [], []
        for i, x in enumerate(levels):
            box.append(self.cv2[str(i)](x).reshape(n, -1, 4 * REG_MAX))
            cls.append(self.cv3[str(i)](x).reshape(n, -1, self.nc))
        dist = self.dfl(mx.concatenate(box, axis=1).swapaxes(1, 2)).swapaxes(1, 2)  # (N, A, 4): l, t, r, b
        anchors, strides = anchor_grid([x.shape[1:3] for x in levels], dist.dtype)
        x1y1 = anchors - dist[..., :2]
        x2y2 = anchors + dist[..., 2:]
        xywh = mx.concatenate([(x1y1 + x2y2) / 2, x2y2 - x1y1], axis=-1) * strides
        return mx.concatenate([xywh, sigmoid(mx.concatenate(cls, axis=1))], axis=-1)


def anchor_grid(sizes, dtype) -> tuple[mx.array, mx.array]:
    """Cell centres (A, 2) as x, y in grid units, and each anchor's stride (A, 1)."""
    points, strides = [], []
    for (h, w), stride in zip(sizes, STRIDES):
        xs, ys = mx.meshgrid(mx.arange(w, dtype=dtype) + 0.5, mx.arange(h, dtype=dtype) + 0.5, indexing="xy")
        points.append(mx.stack([xs, ys], axis=-1).reshape(-1, 2))
        strides.append(mx.full((h * w, 1), stride, dtype=dtype))
    return mx.concatenate(points), mx.concatenate(strides)


class DetectionModel(nn.Module):
    """ultralytics' DetectionModel: ``model.0`` ... ``model.22`` wired as in ARCH, Detect last."""

    def __init__(self, scale: str, nc: int = 80, imgsz: int = 640):
        super().__init__()
        depth, width, max_channels = SCALES[scale]
        channels: list[int] = []  # output channels of each layer
        layers = []
        for i, (inputs, repeats, kind, args) in enumerate(ARCH):
            sources = [i - 1 if j == -1 else j for j in ((inputs,) if isinstance(inputs, int) else inputs)]
            c1 = channels[sources[0]] if i else 3
            # channel counts scale with the width multiple, capped, rounded up to a multiple of 8
            c2 = math.ceil(min(args[0], max_channels) * width / 8) * 8 if args else c1
            n = max(round(repeats * depth), 1) if repeats > 1 else repeats
            if kind == "Conv":
                layer = Conv(c1, c2, *args[1:])
            elif kind == "C2f":
                layer = C2f(c1, c2, n, args[1])
            elif kind == "SPPF":
                layer = SPPF(c1, c2, args[1])
            elif kind == "Upsample":
                layer = nn.Upsample(scale_factor=2.0, mode="nearest")
            elif kind == "Concat":
                layer, c2 = Concat(), sum(channels[j] for j in sources)
            else:
                layer, c2 = Detect(nc, tuple(channels[j] for j in sources)), 4 + nc
            layers.append(layer)
            channels.append(c2)
        self.model = Sequential(*layers)
        self.names = class_names()
        self.imgsz = imgsz  # default predict size (the registry's)

    @property
    def dtype(self) -> mx.Dtype:
        return self.model["0"].conv.weight.dtype

    def __call__(self, x) -> mx.array:
        """x: (N, H, W, 3) RGB in [0, 1], H and W multiples of 32 -> (N, A, 4 + nc)."""
        x = as_model_input(x, self.dtype)
        if x.ndim != 4 or x.shape[-1] != 3:
            raise ZooError(f"input has shape {tuple(x.shape)}: expected (N, H, W, 3) RGB")
        if x.shape[1] % STRIDE or x.shape[2] % STRIDE or x.shape[1] == 0 or x.shape[2] == 0:
            raise ZooError(f"input is {x.shape[1]}x{x.shape[2]}: height and width must be positive multiples of "
                           f"{STRIDE}; letterbox the image (det.predict does)")
        outputs = []
        for (inputs, *_), layer in zip(ARCH, self.model.children_in_order()):
            if inputs != -1:
                x = layer(*(x if j == -1 else outputs[j] for j in inputs))
            else:
                x = layer(x)
            outputs.append(x)
        return x

    def class_ids(self, classes) -> list[int] | None:
        """Class filter from names and/or ids (a list, or one comma-separated string) -> ids."""
        return resolve_classes(classes, self.names)

    def predict(self, images, conf: float = 0.25, iou: float = 0.7, classes=None, agnostic_nms: bool = False,
                max_det: int = 300, imgsz=None) -> list[Detections]:
        """Detect objects in a list of images (paths, PIL images or arrays); one Detections per image.

        As ultralytics' predict: the images form one batch, letterboxed to the
        smallest multiple of 32 around ``imgsz`` when they share one size, to
        ``imgsz`` x ``imgsz`` when sizes differ; scores strictly above ``conf``;
        class-aware NMS at ``iou`` (class-agnostic with ``agnostic_nms``).
        """
        check_thresholds(conf, iou, max_det)
        shape = check_imgsz(self.imgsz if imgsz is None else imgsz)
        wanted = self.class_ids(classes)
        sources = list(images) if isinstance(images, (list, tuple)) else [images]
        if not sources:
            raise ZooError("no images given: pass a list of paths, PIL images or arrays")
        originals = [load_image(src, what=f"image {i}") for i, src in enumerate(sources)]
        start = time.perf_counter()
        batch = letterbox_batch(originals, shape)
        x = mx.array(batch.astype(np.float32) / np.float32(255)).astype(self.dtype)
        prepared = time.perf_counter()
        pred = self(x)
        mx.eval(pred)
        inferred = time.perf_counter()
        results = []
        for im, src, p in zip(originals, sources, pred):
            det = non_max_suppression(p, conf, iou, wanted, agnostic_nms, max_det)
            boxes = scale_boxes(batch.shape[1:3], det[:, :4], im.shape[:2])
            path = str(src) if isinstance(src, (str, Path)) else None
            results.append(Detections(boxes, det[:, 4].copy(), det[:, 5].astype(np.int64), list(self.names), im, path))
        done = time.perf_counter()
        per_image = 1000.0 / len(results)
        for r in results:
            r.speed = {"preprocess": (prepared - start) * per_image, "inference": (inferred - prepared) * per_image,
                       "postprocess": (done - inferred) * per_image}
        return results


# ---- pre-processing -------------------------------------------------------------------------


def check_imgsz(imgsz) -> tuple[int, int]:
    """(height, width) from an int or a pair, each rounded up to a multiple of 32 (with a warning), like ultralytics."""
    sides = (imgsz, imgsz) if isinstance(imgsz, (int, np.integer)) else tuple(imgsz)
    if len(sides) != 2 or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sides):
        raise ZooError(f"bad imgsz {imgsz!r}: give one integer (square) or two (height, width)")
    if min(sides) < 1 or max(sides) > MAX_IMGSZ:
        raise ZooError(f"imgsz {imgsz!r} must be from 1 to {MAX_IMGSZ}: use e.g. 640")
    rounded = tuple(int(math.ceil(s / STRIDE) * STRIDE) for s in sides)
    if rounded != tuple(int(s) for s in sides):
        shown = rounded[0] if isinstance(imgsz, (int, np.integer)) else list(rounded)
        print(f"WARNING: imgsz {imgsz} is not a multiple of {STRIDE}; using {shown}", file=sys.stderr)
    return rounded


def check_thresholds(conf: float, iou: float, max_det: int) -> None:
    for name, value in (("conf", conf), ("iou", iou)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
            raise ZooError(f"{name} {value!r} is outside [0, 1]: pass a value from 0 to 1")
    if isinstance(max_det, bool) or not isinstance(max_det, (int, np.integer)) or max_det < 1:
        raise ZooError(f"max_det {max_det!r} must be a positive integer: use e.g. 300")


def letterbox_batch(images: list[np.ndarray], shape: tuple[int, int]) -> np.ndarray:
    """(N, h, w, 3) uint8 batch as ultralytics' predictor makes it: images of one size get the
    minimal rectangle (auto), mixed sizes all get the fixed ``shape``."""
    same = all(im.shape == images[0].shape for im in images)
    return np.stack([letterbox(im, shape, auto=same) for im in images])


def letterbox(img: np.ndarray, shape: tuple[int, int], auto: bool) -> np.ndarray:
    """ultralytics LetterBox (center, scaleup, stride 32) on an (H, W, 3) uint8 image.

    Scale to fit ``shape`` keeping the aspect ratio, then pad with grey 114 to
    ``shape`` (``auto`` False) or only up to the next multiple of 32 (``auto``),
    the padding split ``round(d - 0.1)`` before and ``round(d + 0.1)`` after.
    """
    h0, w0 = img.shape[:2]
    r = min(shape[0] / h0, shape[1] / w0)
    # at least one pixel: an extreme aspect ratio would round a side to 0 (upstream fails there)
    new_w, new_h = max(1, round(w0 * r)), max(1, round(h0 * r))
    dw, dh = shape[1] - new_w, shape[0] - new_h
    if auto:
        dw, dh = dw % STRIDE, dh % STRIDE
    if (new_h, new_w) != (h0, w0):
        img = resize_linear(img, new_h, new_w)
    top, bottom = round(dh / 2 - 0.1), round(dh / 2 + 0.1)
    left, right = round(dw / 2 - 0.1), round(dw / 2 + 0.1)
    out = np.full((new_h + top + bottom, new_w + left + right, img.shape[2]), PAD_VALUE, dtype=np.uint8)
    out[top : top + new_h, left : left + new_w] = img
    return out


# cv2.resize(INTER_LINEAR) on uint8 works in fixed point: 11-bit weights per axis.
COEF_BITS = 11


def _linear_taps(src: int, dst: int):
    """cv2's INTER_LINEAR taps along one axis: two source indexes and their 11-bit weights per output index."""
    scale = 1.0 / (dst / src)  # cv2 keeps 1 / (dst / src) as a double
    f = ((np.arange(dst) + 0.5) * scale - 0.5).astype(np.float32)  # half-pixel centres, then float
    i0 = np.floor(f).astype(np.int64)
    f = f - i0.astype(np.float32)
    # outside the image: the edge pixel with full weight
    low, high = i0 < 0, i0 >= src - 1
    f[low | high] = 0.0
    i0[low], i0[high] = 0, src - 1
    one = np.float32(1 << COEF_BITS)
    w0 = np.rint((np.float32(1) - f) * one).astype(np.int32)  # cvRound: half to even
    w1 = np.rint(f * one).astype(np.int32)
    return i0, np.minimum(i0 + 1, src - 1), w0, w1


def resize_linear(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """cv2.resize(img, (width, height), interpolation=cv2.INTER_LINEAR) for uint8 images, bit-exact.

    Bilinear with half-pixel centres and no antialiasing (neither Pillow's
    bilinear, which antialiases when shrinking, nor a float resize rounded to
    uint8 give cv2's values: the latter is 1 grey level off on ~13% of pixels of
    the reference case). Horizontal pass in exact integers (value * 2048);
    vertical pass as cv2's 128-bit SIMD code computes it, each row term
    shifted right by 4 then by 16 before the final rounding, except the last
    (width * channels) % 8 elements of a row, which cv2 computes in scalar code
    with one rounding. cv2 runs an exact 2x reduction as INTER_AREA; these
    formulas give the same 2x2 mean with the same rounding there.
    """
    x0, x1, a0, a1 = _linear_taps(img.shape[1], width)
    y0, y1, b0, b1 = _linear_taps(img.shape[0], height)

    def horizontal(rows: np.ndarray) -> np.ndarray:  # (h, W, C) uint8 -> (h, width, C) int32, value * 2048
        rows = rows.astype(np.int32)
        return rows[:, x0] * a0[None, :, None] + rows[:, x1] * a1[None, :, None]

    # only the source rows the output needs: the upper and lower neighbour of each output row
    top, bottom = horizontal(img[y0]), horizontal(img[y1])
    b0, b1 = b0[:, None, None], b1[:, None, None]
    vector = ((((top >> 4) * b0) >> 16) + (((bottom >> 4) * b1) >> 16) + 2) >> 2
    scalar = (top * b0 + bottom * b1 + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS)
    out = vector.reshape(height, -1)
    tail = out.shape[1] // 8 * 8
    out[:, tail:] = scalar.reshape(height, -1)[:, tail:]
    return np.clip(out, 0, 255).astype(np.uint8).reshape(height, width, -1)


# ---- post-processing ------------------------------------------------------------------------


def non_max_suppression(pred, conf: float, iou: float, classes=None, agnostic: bool = False,
                        max_det: int = 300) -> np.ndarray:
    """ultralytics non_max_suppression for one image: pred (A, 4 + nc) xywh + scores ->
    (M, 6) float32 rows x1, y1, x2, y2, score, class in descending score order.

    Candidates: best class score strictly above ``conf`` (and in ``classes``);
    at most the 30000 best go to NMS, which runs per class (class offset) unless
    ``agnostic``; at most ``max_det`` are kept.
    """
    pred = mx.array(pred) if isinstance(pred, np.ndarray) else pred
    pred = pred.astype(mx.float32)
    scores = pred[:, 4:]
    best, cls = mx.max(scores, axis=1), mx.argmax(scores, axis=1).astype(mx.int32)
    mask = best > conf
    if classes is not None:
        mask = mask & (cls[:, None] == mx.array(classes, dtype=mx.int32)[None, :]).any(axis=1)
    index = np.flatnonzero(np.array(mask))
    if index.size > MAX_NMS:  # ultralytics hands at most this many boxes (best scores) to NMS
        order = np.argsort(-np.array(best)[index], kind="stable")[:MAX_NMS]
        index = index[order]
    if index.size == 0:
        return np.zeros((0, 6), np.float32)
    take = mx.array(index.astype(np.int32))
    xywh, best, cls = pred[take, :4], best[take], cls[take]
    half = xywh[:, 2:] / 2
    boxes = mx.concatenate([xywh[:, :2] - half, xywh[:, :2] + half], axis=1)
    keep = nms(boxes, best, iou, classes=None if agnostic else cls, max_det=max_det)
    det = mx.concatenate([boxes[keep], best[keep][:, None], cls[keep][:, None].astype(mx.float32)], axis=1)
    return np.array(det)


def scale_boxes(frame_hw, boxes: np.ndarray, image_hw) -> np.ndarray:
    """ultralytics scale_boxes: xyxy boxes in the letterboxed frame -> original image pixels, clipped."""
    gain = min(frame_hw[0] / image_hw[0], frame_hw[1] / image_hw[1])
    pad_x = round((frame_hw[1] - image_hw[1] * gain) / 2 - 0.1)
    pad_y = round((frame_hw[0] - image_hw[0] * gain) / 2 - 0.1)
    out = np.array(boxes, dtype=np.float32)
    out[:, [0, 2]] -= pad_x
    out[:, [1, 3]] -= pad_y
    out /= np.float32(gain)
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, image_hw[1])
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, image_hw[0])
    return out


# ---- classes, weights ---------------------------------------------------------------------


def class_names() -> list[str]:
    return CLASS_NAMES.read_text().splitlines()


def resolve_classes(classes, names: list[str]) -> list[int] | None:
    """Class ids from names (case-insensitive) and/or integer ids; None means all classes."""
    if classes is None:
        return None
    items = [c.strip() for c in classes.split(",")] if isinstance(classes, str) else list(classes)
    by_name = {name.lower(): i for i, name in enumerate(names)}
    ids, unknown = [], []
    for item in items:
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool) and 0 <= item < len(names):
            ids.append(int(item))
        elif isinstance(item, str) and item.lower() in by_name:
            ids.append(by_name[item.lower()])
        elif isinstance(item, str) and item.isdigit() and int(item) < len(names):
            ids.append(int(item))
        else:
            unknown.append(repr(item))
    if unknown or not ids:
        raise ZooError(f"unknown classes {', '.join(unknown) or '(none given)'}: use names or ids 0-{len(names) - 1} "
                       f"of {', '.join(names)}")
    return sorted(set(ids))


# lmz/candle-yolo-v8 (tinygrad's naming) -> ultralytics: docs/weights.md has the table.
CANDLE_PREFIXES = {
    "net.b1.0.": "model.0.", "net.b1.1.": "model.1.", "net.b2.0.": "model.2.", "net.b2.1.": "model.3.",
    "net.b2.2.": "model.4.", "net.b3.0.": "model.5.", "net.b3.1.": "model.6.", "net.b4.0.": "model.7.",
    "net.b4.1.": "model.8.", "net.b5.0.": "model.9.",
    "fpn.n1.": "model.12.", "fpn.n2.": "model.15.", "fpn.n3.": "model.16.", "fpn.n4.": "model.18.",
    "fpn.n5.": "model.19.", "fpn.n6.": "model.21.",
    "head.": "model.22.",
}


def sanitize(state_dict: dict, meta: dict) -> dict:
    """ultralytics naming as is; Candle/tinygrad naming (net.*, fpn.*, head.*) mapped to it."""
    if not any(k.startswith(("net.", "fpn.", "head.")) for k in state_dict):
        return state_dict
    out = {}
    for key, value in state_dict.items():
        prefix = next((p for p in CANDLE_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            key = CANDLE_PREFIXES[prefix] + re.sub(r"(^|\.)bottleneck\.", r"\1m.", key[len(prefix):])
        out[key] = value
    return out


def apply_metadata(model: DetectionModel, meta: dict) -> None:
    """Class names stored in the checkpoint replace the COCO default: ultralytics keeps an
    {id: name} dict; a safetensors file's metadata can only hold it as text (a dict or list literal)."""
    names = meta.get("names")
    if names is None:
        return
    try:
        if isinstance(names, str):
            names = ast.literal_eval(names)
        if isinstance(names, dict):
            names = [names[k] for k in sorted(names, key=int)]
        names = [str(n) for n in names]
    except (ValueError, SyntaxError, TypeError):
        raise ZooError("the checkpoint's 'names' metadata is not a list or an {id: name} dict: "
                       "fix or remove it from the checkpoint") from None
    nc = model.model[str(len(ARCH) - 1)].nc
    if len(names) != nc:
        raise ZooError(f"the checkpoint names {len(names)} classes but its detection head has {nc}: "
                       "pass a checkpoint whose names match its head")
    model.names = names


def build(spec) -> DetectionModel:
    return DetectionModel(spec.variant.removeprefix("yolov8"), imgsz=spec.preprocess.get("imgsz", 640))
