"""Resize an NHWC array to an exact size, with PyTorch ``F.interpolate`` semantics.

MLX's ``nn.Upsample`` only takes scale factors; SAM's mask post-processing
(256 -> 1024 -> the original H x W) and image pre-processing need exact sizes.

- ``bilinear``: PyTorch's ``area_pixel_compute_source_index``: with
  ``align_corners=False`` the source coordinate is
  ``max(in/out * (dst + 0.5) - 0.5, 0)``, with ``align_corners=True`` it is
  ``(in - 1)/(out - 1) * dst`` (0 for a 1-pixel output); the two neighbours are
  ``floor(src)`` and the next one (clamped), weighted ``1 - frac`` and ``frac``.
  Scale and coordinate are float32, as PyTorch computes them for float inputs,
  and ``scale * (dst + 0.5) - 0.5`` is rounded once: PyTorch's compiled kernels
  (x86 CPU builds with FMA, nvcc) fuse it into a multiply-add, and rounding the
  product separately moves the coordinate by up to 1e-4 for scales such as
  1024/480 (measured against torch on the GPU machine, docs/kernels.md).
- ``nearest``: PyTorch's legacy ``nearest``: ``src = min(floor(dst * (in/out)), in - 1)``.

float16 and bfloat16 inputs are interpolated in float32 and rounded once, like
PyTorch's float accumulation; float64 is refused (MLX has no float64 on the GPU).

The source rows/columns and their weights depend only on the sizes; they are
computed once on the host (numpy, float32) and shared by the kernel and the
fallback, which then differ only in how they gather and blend.
"""

from __future__ import annotations

import functools
import numbers
from concurrent.futures import ThreadPoolExecutor

import mlx.core as mx
import numpy as np

from zoo.errors import ZooError
from zoo.kernels import core, coverage
from zoo.kernels import cpu as cpu_ops

MODES = ("bilinear", "nearest")

RESIZE = core.Kernel(
    name="zoo_resize",
    input_names=("x", "rows", "row_weights", "cols", "col_weights", "sizes"),
    output_names=("y",),
    body="""
    // One thread per output element (b, oy, ox, c) of an NHWC tensor; rows[2 * oy + k] and
    // cols[2 * ox + k] are the two source rows / columns, *_weights their weights.
    const uint in_h = uint(sizes[0]);
    const uint in_w = uint(sizes[1]);
    const uint channels = uint(sizes[2]);
    const uint out_h = uint(sizes[3]);
    const uint out_w = uint(sizes[4]);
    const uint index = thread_pos.x;
    const uint c = index % channels;
    const uint ox = (index / channels) % out_w;
    const uint oy = (index / (channels * out_w)) % out_h;
    const uint b = index / (channels * out_w * out_h);
    const uint top = (b * in_h + uint(rows[2u * oy])) * in_w;
    const uint left = uint(cols[2u * ox]);
    if (NEAREST) {
        y[index] = x[(top + left) * channels + c];
        return;
    }
    const uint bottom = (b * in_h + uint(rows[2u * oy + 1u])) * in_w;
    const uint right = uint(cols[2u * ox + 1u]);
    const float w_left = col_weights[2u * ox];
    const float w_right = col_weights[2u * ox + 1u];
    // PyTorch's order: rows of column blends, each product rounded before the sum.
    const float upper = zoo_mul_rn(w_left, float(x[(top + left) * channels + c])) +
                        zoo_mul_rn(w_right, float(x[(top + right) * channels + c]));
    const float lower = zoo_mul_rn(w_left, float(x[(bottom + left) * channels + c])) +
                        zoo_mul_rn(w_right, float(x[(bottom + right) * channels + c]));
    y[index] = static_cast<T>(zoo_mul_rn(row_weights[2u * oy], upper) +
                              zoo_mul_rn(row_weights[2u * oy + 1u], lower));
""",
)


def resize(x, size, mode="bilinear", align_corners=False, band: tuple[int, int] | None = None,
           columns: tuple[int, int] | None = None) -> mx.array:
    """Resize NHWC `x` (N, H, W, C) to `size` = (out_H, out_W); same dtype as `x`.

    ``band`` = (start, stop): only those output rows, ``columns`` = (start, stop): only those
    output columns, each pixel as the whole resize makes it: a big output made in bands never
    holds more than one band, and a window of it costs only the window."""
    x, (out_h, out_w) = _checked(x, size, mode, align_corners)
    rows, row_weights = _part(source_taps(x.shape[1], out_h, mode, align_corners), band)
    cols, col_weights = _part(source_taps(x.shape[2], out_w, mode, align_corners), columns)
    backend = core.native_backend()
    if backend is None:
        blended = _host_form(x, rows, row_weights, cols, col_weights) if mode == "bilinear" else None
        coverage.note(f"resize {mode}", coverage.MLX_OP if blended is None else coverage.CPU_FORM)
        return _fallback(x, rows, row_weights, cols, col_weights, mode == "nearest") if blended is None else blended
    coverage.note(f"resize {mode}", coverage.CUSTOM_KERNEL)
    return core.run(resize_launch(x, rows, row_weights, cols, col_weights, mode == "nearest"), backend)[0]


def _part(taps: tuple[mx.array, mx.array], span: tuple[int, int] | None) -> tuple[mx.array, mx.array]:
    return taps if span is None else (taps[0][span[0]:span[1]], taps[1][span[0]:span[1]])


def _checked(x, size, mode, align_corners):
    x = core.nhwc_float_input("resize", x)
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 1 for s in size)
    ):
        raise ZooError(f"resize: size must be (height, width), two positive integers; got {size!r}")
    if mode not in MODES:
        raise ZooError(f"resize: mode must be one of {MODES}, got {mode!r}")
    if not isinstance(align_corners, bool):
        raise ZooError(f"resize: align_corners must be True or False, got {align_corners!r}")
    if mode == "nearest" and align_corners:
        raise ZooError("resize: align_corners=True only applies to mode='bilinear' (as in PyTorch)")
    out_h, out_w = int(size[0]), int(size[1])
    core.check_size("resize input", x.size)
    core.check_size("resize output", x.shape[0] * out_h * out_w * x.shape[3])
    return x, (out_h, out_w)


# Made once per size: see core.constant for why the arrays are kept.
@functools.lru_cache(maxsize=256)
def source_taps(in_size: int, out_size: int, mode: str, align_corners: bool) -> tuple[mx.array, mx.array]:
    """((out, 2) int32 source indices, (out, 2) float32 weights) along one axis."""
    if mode == "nearest":
        scale = np.float32(in_size) / np.float32(out_size)
        first = np.minimum(np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int64), in_size - 1)
        frac = np.zeros(out_size, dtype=np.float32)
    else:
        if align_corners:
            scale = np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
            src = scale * np.arange(out_size, dtype=np.float32)
        else:
            scale = np.float32(in_size) / np.float32(out_size)
            # Exact in float64 (a 24-bit by 25-bit product), then one rounding: a fused multiply-add.
            src = (np.float64(scale) * (np.arange(out_size, dtype=np.float64) + 0.5) - 0.5).astype(np.float32)
            src = np.maximum(src, np.float32(0))
        first = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
        frac = np.clip(src - first.astype(np.float32), np.float32(0), np.float32(1))
    second = first + (first < in_size - 1)
    indices = np.stack([first, second], axis=1).astype(np.int32)
    weights = np.stack([np.float32(1) - frac, frac], axis=1).astype(np.float32)
    return mx.array(indices), mx.array(weights)


def resize_launch(x, rows, row_weights, cols, col_weights, nearest: bool) -> core.Launch:
    n, in_h, in_w, channels = x.shape
    out_h, out_w = rows.shape[0], cols.shape[0]
    return core.Launch(
        kernel=RESIZE,
        inputs=(
            x, rows, row_weights, cols, col_weights, core.constant((in_h, in_w, channels, out_h, out_w), mx.int32)
        ),
        template=(("T", x.dtype), ("NEAREST", nearest)),
        grid=(n * out_h * out_w * channels, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((n, out_h, out_w, channels),),
        output_dtypes=(x.dtype,),
    )


def _fallback(x, rows, row_weights, cols, col_weights, nearest: bool) -> mx.array:
    if nearest:
        return mx.take(mx.take(x, rows[:, 0], axis=1), cols[:, 0], axis=2)
    upper, lower = _blended_rows(mx.take, x if x.dtype == mx.float32 else x.astype(mx.float32), rows, cols,
                                 col_weights)
    out = row_weights[None, :, 0, None, None] * upper + row_weights[None, :, 1, None, None] * lower
    return out.astype(x.dtype)


def _blended_rows(take, x, rows, cols, col_weights):
    """A bilinear resize of float32 NHWC ``x`` before its last step: each output row's two source rows
    blended across the columns (upper, lower), with MLX's arrays (``take`` = mx.take) or numpy's
    (np.take): the same float32 products and sums either way."""
    w_left, w_right = col_weights[None, None, :, 0, None], col_weights[None, None, :, 1, None]

    def blend_columns(image_rows):
        return w_left * take(image_rows, cols[:, 0], axis=2) + w_right * take(image_rows, cols[:, 1], axis=2)

    first, last = int(rows.min().item()), int(rows.max().item())
    if last + 1 - first < 2 * rows.shape[0]:
        # Enlarging: each source row is blended across the columns once, then its blend is taken by
        # the output rows that sample it (the same products and sums per pixel as below, ~6x fewer
        # from 1024 to 6000 rows).
        blended = blend_columns(x[:, first:last + 1])
        return tuple(take(blended, rows[:, k] - first, axis=1) for k in (0, 1))
    return tuple(blend_columns(take(x, rows[:, k], axis=1)) for k in (0, 1))


# Images the CPU's numpy form blends at a time: its temporaries (gathered rows, products) stay a few
# images' worth, and the threads take the chunks in turn.
HOST_CHUNK_IMAGES = 4


def _host_form(x, rows, row_weights, cols, col_weights) -> mx.array | None:
    """_fallback's bilinear resize on the CPU in numpy (``_blended_rows`` on numpy's arrays: the same bits),
    vectorised, where MLX's CPU gathers and element-wise ops run one float at a time (48 SAM masks
    256 -> 1024 x 768 -> 480 x 640: 0.3 s of CPU against 2.2 s, 2026-11-29); chunks of images over
    zoo's threads (numpy lets go of the GIL). None off the CPU, with ZOO_KERNELS=fallback,
    or while MLX traces (no data)."""
    if not cpu_ops._fast_path():
        return None
    out = cpu_ops._output((x.shape[0], rows.shape[0], cols.shape[0], x.shape[3]))
    host = cpu_ops._host(x, out, rows, row_weights, cols, col_weights)
    if host is None:
        return None
    rows, row_weights, cols, col_weights = (np.asarray(a) for a in (rows, row_weights, cols, col_weights))
    if out.size == 0:  # an empty window or batch
        return out if x.dtype == mx.float32 else out.astype(x.dtype)
    view = cpu_ops._view(out)

    w_upper, w_lower = row_weights[None, :, 0, None, None], row_weights[None, :, 1, None, None]

    def chunk(start: int) -> None:
        upper, lower = _blended_rows(np.take, host[start:start + HOST_CHUNK_IMAGES], rows, cols, col_weights)
        target = view[start:start + HOST_CHUNK_IMAGES]  # written in place: no third chunk-sized temporary
        np.multiply(w_upper, upper, out=target)
        target += w_lower * lower

    starts = range(0, host.shape[0], HOST_CHUNK_IMAGES)
    threads = min(cpu_ops._threads(), len(starts))
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(chunk, starts))
    else:
        for start in starts:
            chunk(start)
    return out if x.dtype == mx.float32 else out.astype(x.dtype)
