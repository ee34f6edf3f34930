"""The automatic mask generator's geometry and mask post-processing (segment-anything's ``utils/amg.py``).

Same definitions as upstream, so the generator keeps and drops the same masks:

- point grids: ``n`` points per side at the centres of ``n`` equal cells of [0, 1];
- crop boxes: the whole image, then per layer ``i`` a ``2**(i+1)`` x ``2**(i+1)`` grid of
  overlapping crops (x0, y0, x1, y1), integer pixels;
- stability score: |logits > t + offset| / |logits > t - offset| (the IoU of the two
  thresholded masks: one contains the other), float32 division of the integer counts;
- mask boxes: inclusive pixel bounds (x0, y0, x1, y1), [0, 0, 0, 0] for an empty mask;
- uncompressed RLE: run lengths of the column-major (Fortran-order) flattened mask, the
  first run counting zeros (so a mask starting with 1 begins with a 0-length run);
- small regions: connected components (8-connectivity, OpenCV's) smaller than an area
  are filled (holes) or removed (islands; if every island is small, the largest stays).

The per-mask work on the device (stability, boxes, thresholds) is in MLX on batches;
what needs the host (RLE, connected components) is vectorised numpy and OpenCV.
"""
from __future__ import annotations

import math
from itertools import product

import mlx.core as mx
import numpy as np

from zoo.errors import ZooError, option
from zoo.extras import require
from zoo.instances import mask_to_rle, rle_string  # noqa: F401 (amg.mask_to_rle, as segment-anything's)

# A mask box this close (pixels) to a crop's edge that is not the image's edge is cut by the crop.
CROP_EDGE_TOLERANCE = 20.0


def build_point_grid(n_per_side: int) -> np.ndarray:
    """(n * n, 2) (x, y) in [0, 1]: the centres of an n x n grid of cells, x varying fastest."""
    half_cell = 1 / (2 * n_per_side)
    side = np.linspace(half_cell, 1 - half_cell, n_per_side)
    xs, ys = np.meshgrid(side, side)
    return np.stack([xs.ravel(), ys.ravel()], axis=-1)


def build_all_layer_point_grids(n_per_side: int, n_layers: int, scale_per_layer: int) -> list[np.ndarray]:
    """Point grids of crop layers 0..n_layers: layer i has int(n / scale**i) points per side."""
    return [build_point_grid(int(n_per_side / (scale_per_layer ** i))) for i in range(n_layers + 1)]


def generate_crop_boxes(im_size: tuple[int, int], n_layers: int, overlap_ratio: float):
    """-> (crop boxes [x0, y0, x1, y1] as ints, their layer indices); layer 0 is the whole image."""
    im_h, im_w = im_size
    boxes, layers = [[0, 0, im_w, im_h]], [0]
    for layer in range(1, n_layers + 1):
        per_side = 2 ** layer
        overlap = int(overlap_ratio * min(im_h, im_w) * (2 / per_side))
        crop_w = int(math.ceil((overlap * (per_side - 1) + im_w) / per_side))
        crop_h = int(math.ceil((overlap * (per_side - 1) + im_h) / per_side))
        x0s = [int((crop_w - overlap) * i) for i in range(per_side)]
        y0s = [int((crop_h - overlap) * i) for i in range(per_side)]
        for x0, y0 in product(x0s, y0s):  # x outer, y inner: upstream's order (it decides NMS ties)
            boxes.append([x0, y0, min(x0 + crop_w, im_w), min(y0 + crop_h, im_h)])
            layers.append(layer)
    return boxes, layers


def stability_score(logits: mx.array, mask_threshold: float, offset: float) -> mx.array:
    """(..., H, W) logits -> (...,) float32: the high-threshold mask's area over the low one's (NaN if empty)."""
    high = (logits > (mask_threshold + offset)).sum(axis=(-2, -1)).astype(mx.int32)
    low = (logits > (mask_threshold - offset)).sum(axis=(-2, -1)).astype(mx.int32)
    return high.astype(mx.float32) / low.astype(mx.float32)


def _first_true(flags: mx.array, size: int) -> mx.array:
    """Index of the first True along the last axis (``size`` when there is none)."""
    return mx.min(mx.where(flags, mx.arange(size), size), axis=-1)


def batched_mask_to_box(masks: mx.array) -> mx.array:
    """(..., H, W) bool -> (..., 4) int32 inclusive bounds x0, y0, x1, y1; [0, 0, 0, 0] for an empty mask."""
    h, w = masks.shape[-2:]
    rows, cols = mx.any(masks, axis=-1), mx.any(masks, axis=-2)
    top, left = _first_true(rows, h), _first_true(cols, w)
    bottom, right = h - 1 - _first_true(rows[..., ::-1], h), w - 1 - _first_true(cols[..., ::-1], w)
    boxes = mx.stack([left, top, right, bottom], axis=-1).astype(mx.int32)
    return mx.where(mx.any(rows, axis=-1, keepdims=True), boxes, 0)


def is_box_near_crop_edge(boxes: mx.array, crop_box, orig_box, atol: float = CROP_EDGE_TOLERANCE) -> mx.array:
    """(N, 4) boxes in crop pixels -> (N,) bool: a side within ``atol`` of the crop's edge but not the image's."""
    crop = mx.array(crop_box, mx.float32)
    orig = mx.array(orig_box, mx.float32)
    boxes = (boxes + mx.array([crop_box[0], crop_box[1]] * 2)).astype(mx.float32)
    near_crop = mx.abs(boxes - crop) <= atol
    near_image = mx.abs(boxes - orig) <= atol
    return mx.any(near_crop & ~near_image, axis=-1)


def box_xyxy_to_xywh(box) -> list:
    x0, y0, x1, y1 = (v.item() if hasattr(v, "item") else v for v in box)
    return [x0, y0, x1 - x0, y1 - y0]


def mask_columns_to_rle(columns: np.ndarray, occupied: np.ndarray, crop_box, image_size) -> list[dict]:
    """Masks of a crop, transposed ((N, w, h) bool: column-major order is their row order), placed at
    ``crop_box``'s corner of an (H, W) image, and which of their columns hold a pixel ((N, w) bool)
    -> the whole-image masks' uncompressed RLEs, as mask_to_rle gives them. Only the columns from
    the first to the last occupied one are read: the runs before and after are zeros."""
    image_h, image_w = int(image_size[0]), int(image_size[1])
    x0, y0 = int(crop_box[0]), int(crop_box[1])
    crop_h = columns.shape[2]
    total = image_h * image_w
    out = []
    for mask_columns, used in zip(columns, occupied):
        used = np.flatnonzero(used)
        if used.size == 0:
            out.append({"size": [image_h, image_w], "counts": [total]})
            continue
        block = mask_columns[used[0] : used[-1] + 1]
        if crop_h != image_h:
            placed = np.zeros((len(block), image_h), bool)
            placed[:, y0 : y0 + crop_h] = block
            block = placed
        flat = block.reshape(-1)
        start = (x0 + int(used[0])) * image_h
        edges = [np.flatnonzero(flat[1:] != flat[:-1]) + 1 + start]
        if flat[0]:  # the pixel before the block is 0 (or there is none: a 0-length first run)
            edges.insert(0, [start])
        if flat[-1] and start + flat.size < total:
            edges.append([start + flat.size])
        bounds = np.concatenate([[0], *edges, [total]])
        out.append({"size": [image_h, image_w], "counts": np.diff(bounds).tolist()})
    return out


def rle_to_mask(rle: dict) -> np.ndarray:
    """Uncompressed RLE -> (H, W) bool."""
    h, w = rle["size"]
    counts = np.asarray(rle["counts"], dtype=np.int64)
    values = np.arange(counts.size) % 2 == 1
    return np.repeat(values, counts).reshape(w, h).T


def area_from_rle(rle: dict) -> int:
    return int(sum(rle["counts"][1::2]))


def coco_encode_rle(rle: dict) -> dict:
    """Uncompressed RLE -> COCO's compressed RLE {"size", "counts": str}, JSON-ready: pycocotools'
    ``frPyObjects`` encoding (zoo.instances.rle_string), without pycocotools."""
    return {"size": list(rle["size"]), "counts": rle_string(rle["counts"])}


def remove_small_regions(mask: np.ndarray, area_thresh: float, mode: str) -> tuple[np.ndarray, bool]:
    """Fill holes (``mode="holes"``) or drop islands (``"islands"``) smaller than ``area_thresh`` pixels.

    -> (mask, changed). Islands: if every one is small, the largest stays."""
    if mode not in ("holes", "islands"):
        raise ZooError(f"remove_small_regions: mode {mode!r} is not 'holes' or 'islands'")
    cv2 = import_cv2()
    holes = mode == "holes"
    regions_of = (mask ^ holes).astype(np.uint8)  # holes: the background's components
    n_labels, labels, stats, _ = cv2.connectedComponentsWithStats(regions_of, 8)
    sizes = stats[1:, cv2.CC_STAT_AREA]  # label 0 is what lies between the regions
    small = np.flatnonzero(sizes < area_thresh) + 1
    if small.size == 0:
        return mask, False
    if holes:
        return mask | np.isin(labels, small), True
    kept = np.setdiff1d(np.arange(1, n_labels), small)
    if kept.size == 0:
        kept = np.array([int(np.argmax(sizes)) + 1])
    return np.isin(labels, kept), True


def import_cv2():
    return require("cv2", f"{option('min_mask_region_area', 'N')} above 0")


