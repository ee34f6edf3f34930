"""YOLOv8's pre- and post-processing as ultralytics does it: imgsz checks, LetterBox (with cv2's
bilinear resize reproduced bit for bit), class filters, NMS and boxes mapped back to the image."""
from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable

import mlx.core as mx
import numpy as np

from zoo.errors import UsageError, keyword
from zoo.kernels import nms
from zoo.kernels.nms import MAX_BOXES as MAX_NMS

STRIDE = 32  # input sides must be multiples of the largest stride
PAD_VALUE = 114  # letterbox border grey
MAX_IMGSZ = 8192  # a letterboxed 8192x8192 batch of one is already 800 MB in float32
# Memory of a batch's forward per input pixel, float32 on the CPU: peak RSS (VmHWM) growth per image over a batch
# of one, 56.6 bytes for YOLOv8n at 640x640, 68 at 320 (yolov8x: 183), 2026-11-30. The smallest model's: --batch's
# memory check (zoo.pipeline.check_batch_memory) refuses only what cannot fit
BATCH_BYTES_PER_PIXEL = 56

# ---- pre-processing -------------------------------------------------------------------------


def check_imgsz(imgsz) -> tuple[int, int]:
    """(height, width) from an int, a pair or a list of one (square, as ultralytics' ``imgsz=[640]``), each
    rounded up to a multiple of 32 (with a warning), like ultralytics."""
    if isinstance(imgsz, (int, np.integer)):
        sides = (imgsz, imgsz)
    else:  # a float or a string raised TypeError (not iterable) or took each character as a side
        sides = tuple(imgsz) if isinstance(imgsz, (list, tuple, np.ndarray)) else ()
    sides = sides * 2 if len(sides) == 1 else sides
    if len(sides) != 2 or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sides):
        raise UsageError(f"bad {keyword('imgsz')} {imgsz!r}: give one integer (square) or two (height, width)")
    if min(sides) < 1 or max(sides) > MAX_IMGSZ:
        raise UsageError(f"{keyword('imgsz')} {imgsz!r} must be from 1 to {MAX_IMGSZ}: use e.g. 640")
    rounded = tuple(int(math.ceil(s / STRIDE) * STRIDE) for s in sides)
    if rounded != tuple(int(s) for s in sides):
        shown = rounded[0] if isinstance(imgsz, (int, np.integer)) else list(rounded)
        print(f"WARNING: {keyword('imgsz')} {imgsz} is not a multiple of {STRIDE}; using {shown}", file=sys.stderr)
    return rounded


def check_thresholds(conf: float, iou: float, max_det: int) -> None:
    for name, value in (("conf", conf), ("iou", iou)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
            raise UsageError(f"{keyword(name)} {value!r} is outside [0, 1]: pass a value from 0 to 1")
    if isinstance(max_det, bool) or not isinstance(max_det, (int, np.integer)) or max_det < 1:
        raise UsageError(f"{keyword('max_det')} {max_det!r} must be a positive integer: use e.g. 300")


def letterbox_batch(images: list[np.ndarray], shape: tuple[int, int], same: bool | None = None) -> np.ndarray:
    """(N, h, w, 3) uint8 batch as ultralytics' predictor makes it: images of one size get the
    minimal rectangle (auto), mixed sizes all get the fixed ``shape``. ``same``: whether the images of the batch
    ultralytics would make share one size, where it is larger than ``images`` (None: these images decide)."""
    if same is None:
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
                        max_det: int = 300, nc: int | None = None) -> np.ndarray:
    """ultralytics non_max_suppression for one image: pred (A, 4 + nc [+ extra]) xywh + scores [+ each
    anchor's mask coefficients or keypoints] -> (M, 6 [+ extra]) float32 rows x1, y1, x2, y2, score,
    class [, the extra values] in descending score order. ``nc``: the classes, where extra values follow.

    Candidates: best class score strictly above ``conf`` (and in ``classes``);
    at most the 30000 best go to NMS, which runs per class (class offset) unless
    ``agnostic``; at most ``max_det`` are kept.
    """
    pred = mx.array(pred) if isinstance(pred, np.ndarray) else pred
    pred = pred.astype(mx.float32)
    nc = pred.shape[1] - 4 if nc is None else nc
    scores = pred[:, 4 : 4 + nc]
    best, cls = mx.max(scores, axis=1), mx.argmax(scores, axis=1).astype(mx.int32)
    mask = best > conf
    if classes is not None:
        mask = mask & (cls[:, None] == mx.array(classes, dtype=mx.int32)[None, :]).any(axis=1)
    index = np.flatnonzero(np.array(mask))
    if index.size > MAX_NMS:  # ultralytics hands at most this many boxes (best scores) to NMS
        order = np.argsort(-np.array(best)[index], kind="stable")[:MAX_NMS]
        index = index[order]
    if index.size == 0:
        return np.zeros((0, 6 + pred.shape[1] - 4 - nc), np.float32)
    take = mx.array(index.astype(np.int32))
    xywh, best, cls = pred[take, :4], best[take], cls[take]
    half = xywh[:, 2:] / 2
    boxes = mx.concatenate([xywh[:, :2] - half, xywh[:, :2] + half], axis=1)
    keep = nms(boxes, best, iou, classes=None if agnostic else cls, max_det=max_det)
    det = mx.concatenate([boxes[keep], best[keep][:, None], cls[keep][:, None].astype(mx.float32),
                          pred[take[keep], 4 + nc :]], axis=1)
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



def resolve_classes(classes, names: dict[int, str]) -> list[int] | None:
    """Class ids from names (case-insensitive) and/or integer ids, or one id (ultralytics' ``classes=0``);
    None means all classes."""
    if classes is None:
        return None
    if isinstance(classes, str):
        items = [c.strip() for c in classes.split(",")]
    else:
        # one value that is no collection (classes=0, or 0.5: its TypeError 'float' object is not iterable was an
        # internal error) is one item
        items = list(classes) if isinstance(classes, Iterable) else [classes]
    by_name = {name.lower(): i for i, name in names.items()}
    ids, unknown = [], []
    for item in items:
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool) and int(item) in names:
            ids.append(int(item))
        elif isinstance(item, str) and item.lower() in by_name:
            ids.append(by_name[item.lower()])
        elif isinstance(item, str) and item.isdigit() and int(item) in names:
            ids.append(int(item))
        else:
            unknown.append(repr(item))
    if unknown or not ids:
        raise UsageError(f"unknown classes {', '.join(unknown) or '(none given)'}: use names or ids 0-{len(names) - 1} "
                       f"of {', '.join(names.values())}")
    return sorted(set(ids))
