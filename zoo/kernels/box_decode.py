"""An anchor-free detection head's decode in one pass: DFL box sides, anchor points, sigmoid scores.

YOLOv8's Detect head ends, per level of the feature pyramid (strides 8, 16, 32), in two maps: the
box map holds for each cell and each of the four box sides (left, top, right, bottom) 16 bin
logits, the class map one logit per class. Upstream decodes them as: concatenate the levels'
cells, softmax over each side's bins and take the bins' weighted sum (the DFL "integral", whose
weights are its 1x1 convolution's, arange(16) in trained files), then the box from the cell's
centre (column + 0.5, row + 0.5) and the four distances, (centre x, centre y, width, height),
times the level's stride, and the sigmoid of the class logits; out (N, A, 4 + classes).

As MLX ops that is some 40 ops per forward (reshapes, concatenations, a softmax, the anchor grid
made again), each costing the host more than its GPU time. ``decode`` is one kernel, one thread
per output element, reading the levels' NHWC maps where they lie; the fallback is the MLX ops.
"""
from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage

LEVELS = 3  # the kernel's inputs: P3, P4, P5


def _side_distance(read: str, base: str, result: str) -> str:
    """The C lines that set ``result`` to one box side's distance: the softmax over its BINS logits,
    element i read by the expression ``read`` (of ``i``), from index ``base`` on, weighted by ``bins``."""
    first = read.replace("[i]", f"[{base}]")
    return f"""
        float top = float({first});
        for (int j = 1; j < BINS; ++j) {{
            const int i = {base} + j;
            const float v = float({read});
            top = v > top ? v : top;
        }}
        float total = 0.0f;
        float weighted = 0.0f;
        for (int j = 0; j < BINS; ++j) {{
            const int i = {base} + j;
            const float e = zoo_exp(float({read}) - top);
            total += e;
            weighted += e * bins[j];
        }}
        {result} = weighted / total;"""


_LEVEL_READ = "level == 0 ? box0[i] : (level == 1 ? box1[i] : box2[i])"
DECODE = core.Kernel(
    name="zoo_box_decode",
    input_names=("box0", "box1", "box2", "cls0", "cls1", "cls2", "bins", "sizes"),
    output_names=("y",),
    body="""
    // One thread per element (n, a, k) of y (N, A, 4 + classes). box<l>: (N, H_l, W_l, 4 * BINS)
    // with each side's bins together (side-major), cls<l>: (N, H_l, W_l, classes), bins: (BINS,)
    // float32, sizes: N, classes, H_0, W_0, H_1, W_1, H_2, W_2, stride_0, stride_1, stride_2.
    const int classes = sizes[1];
    const int cells0 = sizes[2] * sizes[3];
    const int cells1 = sizes[4] * sizes[5];
    const int cells2 = sizes[6] * sizes[7];
    const int anchors = cells0 + cells1 + cells2;
    const int width = 4 + classes;
    const uint index = thread_pos.x;
    const int k = int(index % uint(width));
    const int a = int((index / uint(width)) % uint(anchors));
    const int n = int(index / uint(width * anchors));
    int level = 0;
    int cell = a;
    if (cell >= cells0) {
        cell -= cells0;
        level = 1;
        if (cell >= cells1) {
            cell -= cells1;
            level = 2;
        }
    }
    const int row = n * (level == 0 ? cells0 : (level == 1 ? cells1 : cells2)) + cell;
    if (k >= 4) {
        const int i = row * classes + k - 4;
        const float v = float(level == 0 ? cls0[i] : (level == 1 ? cls1[i] : cls2[i]));
        y[index] = static_cast<T>(1.0f / (1.0f + zoo_exp(-v)));
        return;
    }
    // k: 0 centre x, 1 centre y, 2 width, 3 height; x from the left and right sides (0, 2),
    // y from the top and bottom ones (1, 3)
    const int axis = k & 1;
    float distance[2];
    for (int s = 0; s < 2; ++s) {
        const int base = (row * 4 + axis + 2 * s) * BINS;""" + _side_distance(_LEVEL_READ, "base", "distance[s]") + """
    }
    const int grid_width = sizes[3 + 2 * level];
    const float centre = float(axis == 0 ? cell % grid_width : cell / grid_width) + 0.5f;
    const float low = centre - distance[0];
    const float high = centre + distance[1];
    const float stride = float(sizes[8 + level]);
    y[index] = static_cast<T>((k < 2 ? (low + high) / 2.0f : high - low) * stride);
""",
)


DISTANCES = core.Kernel(
    name="zoo_dfl_distances",
    input_names=("box", "bins"),
    output_names=("y",),
    body="""
    // One thread per box side: y (N, A, 4) from box (N, A, 4 * BINS), each side's bins together;
    // bins: (BINS,) float32.
    const int side = int(thread_pos.x);""" + _side_distance("box[i]", "side * BINS", "const float distance") + """
    y[side] = static_cast<T>(distance);
""",
)


def decode(boxes: Sequence[mx.array], classes: Sequence[mx.array], bins: mx.array, strides: Sequence[int]) -> mx.array:
    """(N, A, 4 + classes): each cell's box (centre x, centre y, width, height, in pixels) and class
    scores, from the three levels' NHWC box maps (N, H, W, 4 * bins), class maps (N, H, W, classes),
    the DFL weights ``bins`` (bins values, or the (1, 1, 1, bins) 1x1 convolution) and strides."""
    boxes, classes, bins = _checked(boxes, classes, bins, strides)
    backend = core.native_backend()
    coverage.note("box decode", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:
        return _fallback(boxes, classes, bins, strides)
    (y,) = core.run(decode_launch(boxes, classes, bins, strides), backend)
    return y


def _checked(boxes, classes, bins, strides):
    if len(boxes) != LEVELS or len(classes) != LEVELS or len(strides) != LEVELS:
        raise ZooError(f"box decode: give {LEVELS} levels of box maps, class maps and strides, got "
                       f"{len(boxes)}, {len(classes)} and {len(strides)}")
    boxes = [core.nhwc_float_input("box decode", b) for b in boxes]
    classes = [core.nhwc_float_input("box decode", c) for c in classes]
    bins = _flat_bins(bins)
    first = boxes[0]
    for b, c in zip(boxes, classes):
        if b.dtype != first.dtype or c.dtype != first.dtype:
            raise ZooError(f"box decode: every map must have one dtype, got {[m.dtype for m in (*boxes, *classes)]}")
        if b.shape[:3] != c.shape[:3] or b.shape[0] != first.shape[0]:
            raise ZooError(f"box decode: a level's box and class maps must cover the same cells of the same "
                           f"images, got {tuple(b.shape)} and {tuple(c.shape)}")
        if b.shape[3] != 4 * bins.size or c.shape[3] != classes[0].shape[3]:
            raise ZooError(f"box decode: box maps need 4 x {bins.size} channels and the class maps one "
                           f"count, got {tuple(b.shape)} and {tuple(c.shape)}")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in strides):
        raise ZooError(f"box decode: strides must be positive integers, got {strides!r}")
    cells = sum(b.shape[1] * b.shape[2] for b in boxes)
    core.check_size("box decode output", first.shape[0] * cells * (4 + classes[0].shape[3]))
    return boxes, classes, bins


def _flat_bins(bins) -> mx.array:
    """The DFL weights as the kernels read them: (bins,) float32, from bin values or the (1, 1, 1, bins) 1x1
    convolution; no op in a trace for bins already so (zoo.models.yolov8's dfl_bins makes them once)."""
    bins = core.as_array("bins", bins)
    bins = bins if bins.ndim == 1 else bins.reshape(-1)
    return bins if bins.dtype == mx.float32 else bins.astype(mx.float32)


def decode_launch(boxes, classes, bins: mx.array, strides) -> core.Launch:
    n, nc = boxes[0].shape[0], classes[0].shape[3]
    cells = sum(b.shape[1] * b.shape[2] for b in boxes)
    sizes = (n, nc, *(side for b in boxes for side in b.shape[1:3]), *strides)
    return core.Launch(
        kernel=DECODE,
        inputs=(*boxes, *classes, bins, core.constant(sizes, mx.int32)),
        template=(("T", boxes[0].dtype), ("BINS", bins.size)),
        grid=(n * cells * (4 + nc), 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((n, cells, 4 + nc),),
        output_dtypes=(boxes[0].dtype,),
    )


def anchor_points(sizes, strides, dtype: mx.Dtype) -> tuple[mx.array, mx.array]:
    """Cell centres (A, 2) as x, y in grid units, levels of ``sizes`` ((H, W) each) in order,
    and each cell's stride (A, 1)."""
    points, steps = [], []
    for (h, w), stride in zip(sizes, strides):
        xs, ys = mx.meshgrid(mx.arange(w, dtype=dtype) + 0.5, mx.arange(h, dtype=dtype) + 0.5, indexing="xy")
        points.append(mx.stack([xs, ys], axis=-1).reshape(-1, 2))
        steps.append(mx.full((h * w, 1), stride, dtype=dtype))
    return mx.concatenate(points), mx.concatenate(steps)


def boxes_from_distances(distances: mx.array, sizes, strides) -> mx.array:
    """(N, A, 4) distances from each cell's centre to its box's left, top, right and bottom sides
    (grid units) -> (N, A, 4) centre x, centre y, width, height in pixels (upstream's dist2bbox)."""
    anchors, steps = anchor_points(sizes, strides, distances.dtype)
    low = anchors - distances[..., :2]
    high = anchors + distances[..., 2:]
    return mx.concatenate([(low + high) / 2, high - low], axis=-1) * steps


def distances(box: mx.array, bins: mx.array) -> mx.array:
    """(N, A, 4) distances from each cell's centre to its box's sides (grid units): the DFL integral of
    the (N, A, 4 * bins) box logits (each side's bins together), softmax over each side's bins and
    their weighted sum, in float32, rounded once to the logits' dtype. One thread per side, in place
    of a copy, a softmax and a product (YOLOv8n b16 float32 on an H200: the softmax alone 0.33 ms)."""
    box, bins = core.as_array("box", box), _flat_bins(bins)
    if box.ndim != 3 or box.shape[2] != 4 * bins.size or not core.is_float(box.dtype):
        raise ZooError(f"dfl distances: box must be float (N, A, 4 x {bins.size}), got {box.dtype} {tuple(box.shape)}")
    backend = core.native_backend()
    coverage.note("dfl distances", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:
        return _distances_fallback(box, bins).astype(box.dtype)
    (y,) = core.run(distances_launch(box, bins), backend)
    return y


def distances_launch(box: mx.array, bins: mx.array) -> core.Launch:
    n, a, _ = box.shape
    core.check_size("dfl distances input", box.size)
    return core.Launch(
        kernel=DISTANCES,
        inputs=(box, bins),
        template=(("T", box.dtype), ("BINS", bins.size)),
        grid=(n * a * 4, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((n, a, 4),),
        output_dtypes=(box.dtype,),
    )


def _distances_fallback(box: mx.array, bins: mx.array) -> mx.array:
    """The DFL integral with MLX ops, float32: (N, A, 4 * bins) -> (N, A, 4)."""
    n, a, _ = box.shape
    return mx.softmax(box.reshape(n, a, 4, bins.size).astype(mx.float32), axis=-1) @ bins


def _fallback(boxes, classes, bins: mx.array, strides) -> mx.array:
    """The MLX ops, in float32 (as the kernel computes) and rounded once to the maps' dtype."""
    n, f32 = boxes[0].shape[0], mx.float32
    logits = mx.concatenate([b.reshape(n, -1, 4 * bins.size) for b in boxes], axis=1)
    xywh = boxes_from_distances(_distances_fallback(logits, bins), [b.shape[1:3] for b in boxes], strides)
    scores = mx.sigmoid(mx.concatenate([c.reshape(n, -1, c.shape[3]) for c in classes], axis=1).astype(f32))
    return mx.concatenate([xywh, scores], axis=-1).astype(boxes[0].dtype)
