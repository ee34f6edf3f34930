"""Non-maximum suppression with the semantics of ultralytics' ``non_max_suppression``.

MLX has no NMS op. Upstream (ultralytics 8.3, torchvision's ``nms``) sorts the
boxes by score, walks them in that order and keeps a box unless a kept box
before it overlaps it with IoU > ``iou_threshold``; class-aware NMS shifts every
box by ``class * 7680`` so that boxes of different classes never overlap, then
runs the class-agnostic NMS. This module does the same, in float32, with the
same arithmetic as torchvision's CPU kernel (``area = (x2 - x1) * (y2 - y1)``,
``IoU = inter / (area_i + area_j - inter)``, the float32 IoU compared with the
threshold as a double), so the kept indices are identical, not just close.

Ties in score, which upstream leaves in no defined order, are broken by the
input index: the lower index comes first (a stable sort).

Native variant: one kernel fills the suppression bitmask (one thread per row and
32-column word), a second kernel, one threadgroup, does the greedy pass.
Fallback: the same bitmask as a boolean matrix in MLX ops, and the greedy pass
as a fixed-point iteration (see `_fallback`).
"""

from __future__ import annotations

import math
import numbers

import mlx.core as mx
import numpy as np

from zoo.errors import ZooError
from zoo.kernels import core, coverage

# ultralytics' class offset (max_wh) and the most boxes it hands to NMS (max_nms).
MAX_WH = 7680
MAX_BOXES = 30000

IOU_MASK = core.Kernel(
    name="zoo_nms_iou_mask",
    input_names=("boxes", "areas", "threshold", "sizes"),
    output_names=("mask",),
    body="""
    // Bit b of mask[row * words + word] is set when box j = 32 * word + b comes after box `row`
    // in score order and IoU(row, j) > threshold. Operands, operation order and rounding are
    // those of torchvision's CPU nms (std::max / std::min written as the same comparisons).
    const uint n = uint(sizes[0]);
    const uint words = uint(sizes[1]);
    const uint word = thread_pos.x;
    const uint row = thread_pos.y;
    const uint first = word * 32u;
    const uint end = first + 32u < n ? first + 32u : n;
    const float x1 = boxes[4u * row];
    const float y1 = boxes[4u * row + 1u];
    const float x2 = boxes[4u * row + 2u];
    const float y2 = boxes[4u * row + 3u];
    const float area = areas[row];
    uint bits = 0u;
    for (uint j = first > row ? first : row + 1u; j < end; ++j) {
        const float xx1 = x1 < boxes[4u * j] ? boxes[4u * j] : x1;
        const float yy1 = y1 < boxes[4u * j + 1u] ? boxes[4u * j + 1u] : y1;
        const float xx2 = boxes[4u * j + 2u] < x2 ? boxes[4u * j + 2u] : x2;
        const float yy2 = boxes[4u * j + 3u] < y2 ? boxes[4u * j + 3u] : y2;
        const float w = 0.0f < xx2 - xx1 ? xx2 - xx1 : 0.0f;
        const float h = 0.0f < yy2 - yy1 ? yy2 - yy1 : 0.0f;
        const float inter = zoo_mul_rn(w, h);
        const float iou = inter / (area + areas[j] - inter);
        if (iou > threshold[0]) {
            bits |= 1u << (j - first);
        }
    }
    mask[row * words + word] = bits;
""",
)

GREEDY_KEEP = core.Kernel(
    name="zoo_nms_greedy_keep",
    input_names=("mask", "order", "sizes"),
    output_names=("removed", "kept", "count"),
    body="""
    // Greedy pass in score order by one threadgroup: box i is kept unless a kept box before it
    // suppresses it; a kept box ORs its mask row into `removed`, each thread its share of the
    // words. All threads take the same decisions, so all of them reach the same barriers.
    const uint n = uint(sizes[0]);
    const uint words = uint(sizes[1]);
    const uint max_det = uint(sizes[2]);
    uint kept_count = 0u;
    for (uint i = 0u; i < n && kept_count < max_det; ++i) {
        // Between two barriers `removed` only gains bits of boxes after the last kept one (a mask
        // row has bits j > i only), so the bit of box i read here is final.
        if ((removed[i / 32u] >> (i % 32u)) & 1u) {
            continue;
        }
        if (local_pos.x == 0u) {
            kept[kept_count] = order[i];
        }
        kept_count += 1u;
        for (uint w = i / 32u + local_pos.x; w < words; w += local_size.x) {
            removed[w] |= mask[i * words + w];
        }
        zoo_barrier();
    }
    if (local_pos.x == 0u) {
        count[0] = int(kept_count);
    }
""",
)

# One threadgroup does the greedy pass; 256 threads share the OR of a mask row.
GREEDY_THREADS = 256
# The fallback builds its boolean suppression matrix this many rows at a time, so that
# the float32 temporaries stay at ROWS_PER_CHUNK x N.
ROWS_PER_CHUNK = 1024


def nms(boxes, scores, iou_threshold, classes=None, max_det=300) -> mx.array:
    """Indices (int32) of the boxes kept by greedy NMS, in descending score order.

    boxes: (N, 4) float x1, y1, x2, y2; scores: (N,) float; classes: (N,) integer,
    or None for class-agnostic NMS; a box is suppressed by a kept box of the same
    class with IoU > iou_threshold; at most `max_det` indices are returned. Equal
    scores: the lower input index comes first. No confidence filter here: like
    ultralytics, filter by score first (and keep at most 30000 boxes).
    """
    boxes, scores, classes = _checked(boxes, scores, iou_threshold, classes, max_det)
    n = boxes.shape[0]
    if n == 0:
        return mx.zeros((0,), dtype=mx.int32)
    order, sorted_boxes, areas = score_sorted(boxes, scores, classes)
    threshold = float32_threshold(iou_threshold)
    backend = core.native_backend()
    coverage.note("nms", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:
        return _fallback(order, sorted_boxes, areas, threshold, max_det)
    mask = core.run(iou_mask_launch(sorted_boxes, areas, threshold), backend)[0]
    _, kept, count = core.run(greedy_keep_launch(mask, order, max_det), backend)
    return kept[: count.item()]


def _checked(boxes, scores, iou_threshold, classes, max_det):
    boxes = core.as_array("boxes", boxes)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ZooError(f"nms: boxes must have shape (N, 4) as x1, y1, x2, y2; got {tuple(boxes.shape)}")
    if not core.is_float(boxes.dtype):
        raise ZooError(f"nms: boxes must be a floating-point array, got {boxes.dtype}")
    n = boxes.shape[0]
    scores = core.as_array("scores", scores)
    if scores.shape != (n,):
        raise ZooError(f"nms: scores must have shape ({n},) to match boxes, got {tuple(scores.shape)}")
    if not core.is_float(scores.dtype):
        raise ZooError(f"nms: scores must be a floating-point array, got {scores.dtype}")
    if classes is not None:
        classes = core.as_array("classes", classes)
        if classes.shape != (n,):
            raise ZooError(f"nms: classes must have shape ({n},) to match boxes, got {tuple(classes.shape)}")
        if not mx.issubdtype(classes.dtype, mx.integer):
            raise ZooError(f"nms: classes must be an integer array, got {classes.dtype}")
    if (
        isinstance(iou_threshold, bool)
        or not isinstance(iou_threshold, numbers.Real)
        or not math.isfinite(iou_threshold)
    ):
        raise ZooError(f"nms: iou_threshold must be a finite number, got {iou_threshold!r}")
    if isinstance(max_det, bool) or not isinstance(max_det, numbers.Integral) or max_det < 1:
        raise ZooError(f"nms: max_det must be a positive integer, got {max_det!r}")
    if n > MAX_BOXES:
        raise ZooError(
            f"nms: {n} boxes is more than {MAX_BOXES} (ultralytics' max_nms); "
            f"keep the highest-scoring {MAX_BOXES} first"
        )
    return boxes, scores, classes


def score_sorted(boxes: mx.array, scores: mx.array, classes: mx.array | None):
    """(order, boxes, areas): input indices by descending score (ties: lower index
    first), the float32 boxes in that order, shifted by class * MAX_WH when
    classes are given (ultralytics' class offset, same float32 rounding), and
    their areas."""
    boxes = boxes.astype(mx.float32)
    if classes is not None:
        boxes = boxes + classes.astype(mx.float32)[:, None] * MAX_WH
    order = _stable_descending_order(scores)
    boxes = mx.take(boxes, order, axis=0)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return order, boxes, areas


def _stable_descending_order(scores: mx.array) -> mx.array:
    # Sort 64-bit keys: high half an order-preserving uint32 image of the float32 score,
    # inverted for descending order; low half the input index. The keys are unique, so the
    # order is the same on every backend whatever sort algorithm it uses (stable or not).
    # Adding 0.0 turns -0.0 into +0.0, which compare equal as scores.
    bits = mx.view(scores.astype(mx.float32) + 0.0, mx.uint32)
    ascending = mx.where(bits >= 0x80000000, ~bits, bits | 0x80000000)
    keys = ((~ascending).astype(mx.uint64) << 32) | mx.arange(scores.shape[0], dtype=mx.uint64)
    return (mx.sort(keys) & 0xFFFFFFFF).astype(mx.int32)


def float32_threshold(iou_threshold: float) -> float:
    """The largest float32 <= iou_threshold. torchvision compares the float32 IoU with
    the threshold as a double; for a float32 x, `x > t` equals `x > float32_threshold(t)`."""
    with np.errstate(over="ignore"):
        t32 = np.float32(iou_threshold)
    if float(t32) > iou_threshold:
        t32 = np.nextafter(t32, np.float32(-np.inf))
    return float(t32)


def iou_mask_launch(sorted_boxes: mx.array, areas: mx.array, threshold: float) -> core.Launch:
    n = sorted_boxes.shape[0]
    words = (n + 31) // 32
    return core.Launch(
        kernel=IOU_MASK,
        inputs=(
            sorted_boxes,
            areas,
            core.constant((threshold,), mx.float32),
            core.constant((n, words), mx.int32),
        ),
        template=(),
        grid=(words, n, 1),
        threadgroup=(32, 8, 1),
        output_shapes=((n * words,),),
        output_dtypes=(mx.uint32,),
    )


def greedy_keep_launch(mask: mx.array, order: mx.array, max_det: int) -> core.Launch:
    n = order.shape[0]
    words = (n + 31) // 32
    kept_len = min(max_det, n)
    return core.Launch(
        kernel=GREEDY_KEEP,
        inputs=(mask, order, core.constant((n, words, kept_len), mx.int32)),
        template=(),
        grid=(GREEDY_THREADS, 1, 1),
        threadgroup=(GREEDY_THREADS, 1, 1),
        output_shapes=((words,), (kept_len,), (1,)),
        output_dtypes=(mx.uint32, mx.int32, mx.int32),
        # `removed` must start empty; `kept` and `count` are written before they are read.
        init_value=0,
    )


def _suppression_matrix(boxes: mx.array, areas: mx.array, threshold: float) -> mx.array:
    """Boolean (N, N): [i, j] when j comes after i and IoU(i, j) > threshold,
    with the arithmetic of the IOU_MASK kernel."""
    n = boxes.shape[0]
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    later = mx.arange(n)
    threshold = mx.array(threshold, dtype=mx.float32)
    chunks = []
    for start in range(0, n, ROWS_PER_CHUNK):
        rows = slice(start, min(start + ROWS_PER_CHUNK, n))
        w = mx.maximum(mx.minimum(x2[rows, None], x2) - mx.maximum(x1[rows, None], x1), 0.0)
        h = mx.maximum(mx.minimum(y2[rows, None], y2) - mx.maximum(y1[rows, None], y1), 0.0)
        inter = w * h
        iou = inter / (areas[rows, None] + areas - inter)
        chunk = (iou > threshold) & (later > mx.arange(rows.start, rows.stop)[:, None])
        mx.eval(chunk)
        chunks.append(chunk)
    return mx.concatenate(chunks)


def _fallback(order, sorted_boxes, areas, threshold, max_det) -> mx.array:
    # Greedy NMS in MLX ops. `kept` solves kept[j] = not any(kept[i] and suppresses[i, j]
    # for i < j). Iterating that equation from "all kept" makes entry j exact once all
    # entries before it are (after at most N rounds), and a round that changes nothing has
    # reached the unique solution, which is greedy NMS's. Real detections need a few rounds.
    n = order.shape[0]
    suppresses = _suppression_matrix(sorted_boxes, areas, threshold)
    kept = mx.ones((n,), dtype=mx.bool_)
    while True:
        updated = mx.logical_not(mx.any(suppresses & kept[:, None], axis=0))
        if mx.array_equal(updated, kept).item():
            break
        kept = updated
    count = min(int(kept.sum().item()), max_det)
    positions = mx.sort(mx.where(kept, mx.arange(n), n))[:count]
    return mx.take(order, positions)
