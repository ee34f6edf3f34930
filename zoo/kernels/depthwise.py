"""A depthwise convolution (one filter per channel, MobileSAM's TinyViT) as one NHWC kernel.

Each output element is the sum of its channel's KH x KW taps over the input window (zeros
outside the image), accumulated in float32. On MLX's CUDA backend ``mx.conv2d(..., groups=C)``
ran as cuDNN's grouped direct kernel: 2.34 ms of the MobileSAM encoder's 7.3 ms of GPU time
per float32 forward and 0.59 of 2.84 ms in float16 (H100, 2026-11-27, docs/speed-gpu.md),
for a pass that reads each input element KH x KW times from cache. Which calls take it:
``preferred`` (CUDA, float32; Metal keeps MLX's convolution, nothing was measured there, its source is
compiled and run by the CPU shim test); the fallback is MLX's grouped convolution.
"""
from __future__ import annotations

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage

DEPTHWISE = core.Kernel(
    name="zoo_depthwise_conv",
    input_names=("x", "w", "sizes"),
    output_names=("y",),
    body="""
    // One thread per element (n, oy, ox, c) of y (N, OH, OW, C); x (N, H, W, C), w (C, KH, KW, 1).
    // Template: T, KH, KW, strides SH, SW, paddings PH, PW (top/left).
    const int height = sizes[0];
    const int width = sizes[1];
    const int channels = sizes[2];
    const int out_h = sizes[3];
    const int out_w = sizes[4];
    const uint index = thread_pos.x;
    const int c = int(index % uint(channels));
    const int ox = int((index / uint(channels)) % uint(out_w));
    const int oy = int((index / uint(channels * out_w)) % uint(out_h));
    const int n = int(index / uint(channels * out_w * out_h));
    float sum = 0.0f;
    for (int ky = 0; ky < KH; ++ky) {
        const int iy = oy * SH + ky - PH;
        if (iy < 0 || iy >= height) {
            continue;
        }
        for (int kx = 0; kx < KW; ++kx) {
            const int ix = ox * SW + kx - PW;
            if (ix < 0 || ix >= width) {
                continue;
            }
            sum += float(x[((n * height + iy) * width + ix) * channels + c]) * float(w[(c * KH + ky) * KW + kx]);
        }
    }
    y[index] = static_cast<T>(sum);
""",
)


def preferred(dtype: mx.Dtype) -> bool:
    """Whether the models run their depthwise convolutions with this kernel: MLX's CUDA backend in
    float32 (the MobileSAM encoder's forward 9.7-10.2 -> 7.9 ms, H100). Not in float16, where
    cuDNN's kernel took a third of this one's time alone (selftest, 256 x 256 x 256: 0.107 against
    0.314 ms); Metal keeps MLX's convolution."""
    return core.native_backend() == "cuda" and dtype == mx.float32


def conv2d(x: mx.array, weight: mx.array, stride=1, padding=0) -> mx.array:
    """mx.conv2d(x, weight, stride, padding, groups=C) for an NHWC x of C channels and a (C, KH, KW, 1)
    weight of its dtype."""
    x = core.nhwc_float_input("depthwise conv2d", x)
    weight = core.as_array("weight", weight)
    c = x.shape[3]
    if weight.ndim != 4 or weight.shape[0] != c or weight.shape[3] != 1 or weight.dtype != x.dtype:
        raise ZooError(f"depthwise conv2d: weight must be ({c}, KH, KW, 1) in {x.dtype}, got "
                       f"{tuple(weight.shape)} {weight.dtype}")
    (sh, sw), (ph, pw) = core.pair(stride), core.pair(padding)
    out_h, out_w = core.conv_output_size(x.shape, weight.shape, (sh, sw), (ph, pw))
    if min(out_h, out_w, sh, sw) < 1 or min(ph, pw) < 0:
        raise ZooError(f"depthwise conv2d: a {x.shape[1]}x{x.shape[2]} input with kernel "
                       f"{weight.shape[1]}x{weight.shape[2]}, stride {(sh, sw)} and padding {(ph, pw)} leaves no output")
    core.check_size("depthwise conv2d input", x.size)
    core.check_size("depthwise conv2d output", x.shape[0] * out_h * out_w * c)
    backend = core.native_backend()
    coverage.note("depthwise conv2d", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:
        return mx.conv2d(x, weight, (sh, sw), (ph, pw), groups=c)
    (y,) = core.run(depthwise_launch(x, weight, (sh, sw), (ph, pw)), backend)
    return y


def depthwise_launch(x: mx.array, weight: mx.array, stride, padding) -> core.Launch:
    n, h, w, c = x.shape
    _, kh, kw, _ = weight.shape
    (sh, sw), (ph, pw) = stride, padding
    out_h, out_w = core.conv_output_size(x.shape, weight.shape, stride, padding)
    return core.Launch(
        kernel=DEPTHWISE,
        inputs=(x, weight, core.constant((h, w, c, out_h, out_w), mx.int32)),
        template=(("T", x.dtype), ("KH", kh), ("KW", kw), ("SH", sh), ("SW", sw), ("PH", ph), ("PW", pw)),
        grid=(n * out_h * out_w * c, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((n, out_h, out_w, c),),
        output_dtypes=(x.dtype,),
    )
