"""A convolution with few output channels, read straight from its unpadded input: one kernel.

LaMa's last layer is a 7x7 convolution from 64 channels to 3 on an input reflect-padded by 3.
As MLX ops it is a padded copy of the input (518 x 518 x 64 at 512 px) and one GEMM of every
input pixel with all 147 (tap, output) pairs, whose planes are then summed at their shifts
(zoo.kernels.cpu.gemm_taps_conv2d): 150 MiB of taps in float32 at 512 px, held with the padded
copy, where PyTorch's whole forward peaks at about 160 MiB (docs/speed-gpu.md). Here each thread
computes the few outputs of one pixel, reading the input at its reflected (torch's
``padding_mode="reflect"``: the edge pixel is not repeated) or zero-padded positions, summing
in float32, and adds the bias: no padded copy, no taps.

Which calls take it: ``preferred`` (MLX's CUDA backend; Metal keeps MLX's ops, nothing having
been measured there, and its source is compiled and run by the CPU shim test); the fallback,
MLX's ops, elsewhere and with ``ZOO_KERNELS=fallback``.
"""
from __future__ import annotations

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage, cpu

MAX_OUTPUTS = 4  # sums a thread keeps in registers

CONV = core.Kernel(
    name="zoo_few_outputs_conv",
    input_names=("x", "weight", "bias", "sizes"),
    output_names=("y",),
    body="""
    // One thread per output pixel (n, oy, ox): CO sums over the KH x KW taps and the input
    // channels, in float32, then the bias. x: (N, H, W, C); weight: (CO, KH, KW, C); y: (N, OH, OW, CO).
    // A tap outside the image reads the reflected pixel (REFLECT: -1 -> 1, H -> H - 2) or is 0.
    const int height = sizes[0];
    const int width = sizes[1];
    const int channels = sizes[2];
    const int out_h = sizes[3];
    const int out_w = sizes[4];
    const uint pixel = thread_pos.x;
    const int ox = int(pixel % uint(out_w));
    const int oy = int((pixel / uint(out_w)) % uint(out_h));
    const uint n = pixel / uint(out_w * out_h);
    const uint taps = uint(KH * KW * channels);
    float sums[CO];
    for (int o = 0; o < CO; ++o) {
        sums[o] = float(bias[o]);
    }
    for (int i = 0; i < KH; ++i) {
        int r = oy + i - PH;
        if (REFLECT) {
            r = r < 0 ? -r : (r >= height ? 2 * (height - 1) - r : r);
        } else if (r < 0 || r >= height) {
            continue;
        }
        for (int j = 0; j < KW; ++j) {
            int q = ox + j - PW;
            if (REFLECT) {
                q = q < 0 ? -q : (q >= width ? 2 * (width - 1) - q : q);
            } else if (q < 0 || q >= width) {
                continue;
            }
            const uint at = ((n * uint(height) + uint(r)) * uint(width) + uint(q)) * uint(channels);
            const uint tap = uint(i * KW + j) * uint(channels);
            for (int c = 0; c < channels; ++c) {
                const float v = float(x[at + uint(c)]);
                for (int o = 0; o < CO; ++o) {
                    sums[o] += v * float(weight[uint(o) * taps + tap + uint(c)]);
                }
            }
        }
    }
    for (int o = 0; o < CO; ++o) {
        y[pixel * uint(CO) + uint(o)] = static_cast<T>(sums[o]);
    }
""",
)


def fits(weight_shape, stride, groups, dilation) -> bool:
    """A convolution this kernel computes: at most ``MAX_OUTPUTS`` outputs, stride 1, no groups or dilation."""
    return weight_shape[0] <= MAX_OUTPUTS and core.pair(stride) == (1, 1) and groups == 1 \
        and core.pair(dilation) == (1, 1)


def preferred(weight_shape, stride, groups, dilation) -> bool:
    """Whether the models' compiled forwards run a convolution with this kernel: where it ``fits``,
    on MLX's CUDA backend (see the module's docstring)."""
    return core.native_backend() == "cuda" and fits(weight_shape, stride, groups, dilation)


def conv2d(x: mx.array, weight: mx.array, bias: mx.array | None = None, padding=0, reflect: bool = False) -> mx.array:
    """mx.conv2d(pad(x), weight) + bias, stride 1, for an NHWC x and an (O, KH, KW, I) weight with
    O <= MAX_OUTPUTS; pad: ``padding`` zeros, or reflected pixels (``reflect``, torch's
    ``padding_mode="reflect"``). Float32 sums; the output in x's dtype."""
    x = core.nhwc_float_input("few_outputs conv2d", x)
    if weight.ndim != 4 or weight.shape[3] != x.shape[3] or weight.shape[0] > MAX_OUTPUTS:
        raise ZooError(f"few_outputs conv2d: weight must be (O <= {MAX_OUTPUTS}, KH, KW, {x.shape[3]}), "
                       f"got {tuple(weight.shape)}")
    n, h, w, _ = x.shape
    co, kh, kw, _ = weight.shape
    ph, pw = core.pair(padding)
    out_h, out_w = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
    if min(ph, pw) < 0 or min(out_h, out_w) < 1 or (reflect and (ph >= h or pw >= w)):
        raise ZooError(f"few_outputs conv2d: a {h}x{w} input with kernel {kh}x{kw} and padding {(ph, pw)}"
                       f"{' reflected (less than the input a side)' if reflect else ''} leaves no output")
    core.check_size("few_outputs conv2d input", x.size)
    core.check_size("few_outputs conv2d output", n * out_h * out_w * co)
    backend = core.native_backend()
    coverage.note("few_outputs conv2d", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:
        padded = cpu.reflect_pad(x, ph, pw) if reflect else mx.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
        y = cpu.conv2d_few_outputs(padded, weight.astype(x.dtype))
        return y if bias is None else (y.astype(mx.float32) + bias.astype(mx.float32)).astype(x.dtype)
    bias = core.constant((0.0,) * co, mx.float32) if bias is None else bias.astype(mx.float32)
    (y,) = core.run(conv_launch(x, weight, bias, (ph, pw), reflect), backend)
    return y


def conv_launch(x: mx.array, weight: mx.array, bias: mx.array, padding, reflect: bool) -> core.Launch:
    n, h, w, c = x.shape
    co, kh, kw, _ = weight.shape
    ph, pw = padding
    out_h, out_w = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
    return core.Launch(
        kernel=CONV,
        inputs=(x, weight, bias, core.constant((h, w, c, out_h, out_w), mx.int32)),
        template=(("T", x.dtype), ("CO", co), ("KH", kh), ("KW", kw), ("PH", ph), ("PW", pw),
                  ("REFLECT", bool(reflect))),
        grid=(n * out_h * out_w, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((n, out_h, out_w, co),),
        output_dtypes=(x.dtype,),
    )
