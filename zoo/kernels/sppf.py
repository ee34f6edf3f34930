"""The three chained max-pools of YOLOv8's SPPF block, in one pass.

SPPF applies a k x k max-pool (stride 1, padding k // 2 with -inf, like
PyTorch's ``max_pool2d``) three times in a row and uses all three results.
Max-pools with -inf padding compose: two chained pools of radius r are one pool
of radius 2r, three are one of radius 3r (windows clipped to the image). The
kernel reads each element's largest window once and keeps the maxima of the
three nested windows; the fallback chains three pools (zoo.kernels.cpu.max_pool2d: a C pass on
the CPU, MLX's ``nn.MaxPool2d`` elsewhere).
"""

from __future__ import annotations

import numbers

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage, cpu

SPPF = core.Kernel(
    name="zoo_sppf_maxpool",
    input_names=("x", "sizes"),
    output_names=("y1", "y2", "y3"),
    body="""
    // One thread per element (b, h, w, c) of the NHWC input; y1, y2, y3 are the maxima over
    // the windows of Chebyshev radius RADIUS, 2 * RADIUS and 3 * RADIUS clipped to the image.
    const int height = sizes[0];
    const int width = sizes[1];
    const int channels = sizes[2];
    const uint index = thread_pos.x;
    const int c = int(index % uint(channels));
    const int w = int((index / uint(channels)) % uint(width));
    const int h = int((index / uint(channels * width)) % uint(height));
    const uint image = index - uint((h * width + w) * channels + c);
    float m1 = float(x[index]);
    float m2 = m1;
    float m3 = m1;
    for (int dy = -3 * RADIUS; dy <= 3 * RADIUS; ++dy) {
        const int yy = h + dy;
        if (yy < 0 || yy >= height) {
            continue;
        }
        const int ady = dy < 0 ? -dy : dy;
        for (int dx = -3 * RADIUS; dx <= 3 * RADIUS; ++dx) {
            const int xx = w + dx;
            if (xx < 0 || xx >= width) {
                continue;
            }
            const int adx = dx < 0 ? -dx : dx;
            const int ring = ady > adx ? ady : adx;
            const float v = float(x[image + uint((yy * width + xx) * channels + c)]);
            // `v != v` (NaN) wins, as in PyTorch's max_pool2d.
            const bool wins3 = v > m3 || v != v;
            const bool wins2 = v > m2 || v != v;
            const bool wins1 = v > m1 || v != v;
            m3 = wins3 ? v : m3;
            m2 = (ring <= 2 * RADIUS && wins2) ? v : m2;
            m1 = (ring <= RADIUS && wins1) ? v : m1;
        }
    }
    y1[index] = static_cast<T>(m1);
    y2[index] = static_cast<T>(m2);
    y3[index] = static_cast<T>(m3);
""",
)



def sppf_maxpool(x, k=5) -> tuple[mx.array, mx.array, mx.array]:
    """(y1, y2, y3) with y1 = pool(x), y2 = pool(y1), y3 = pool(y2); pool is a k x k
    max-pool, stride 1, padding k // 2 with -inf; x is NHWC (N, H, W, C)."""
    x = _checked(x, k)
    backend = core.native_backend()
    coverage.note("sppf max-pool", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:
        return _fallback(x, k)
    return tuple(core.run(sppf_launch(x, k), backend))


def _checked(x, k):
    x = core.nhwc_float_input("sppf_maxpool", x)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 or k % 2 == 0:
        raise ZooError(f"sppf_maxpool: k must be a positive odd integer (same-size output), got {k!r}")
    core.check_size("sppf_maxpool input", x.size)
    return x


def sppf_launch(x: mx.array, k: int) -> core.Launch:
    _, height, width, channels = x.shape
    return core.Launch(
        kernel=SPPF,
        inputs=(x, core.constant((height, width, channels), mx.int32)),
        template=(("T", x.dtype), ("RADIUS", k // 2)),
        grid=(x.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=(x.shape,) * 3,
        output_dtypes=(x.dtype,) * 3,
    )


def _fallback(x: mx.array, k: int):
    def pool(v):  # the C pass on the CPU, MLX's pooling elsewhere
        return cpu.max_pool2d(v, k, 1, k // 2)

    y1 = pool(x)
    y2 = pool(y1)
    return y1, y2, pool(y2)
