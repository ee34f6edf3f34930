"""A convolution with few output channels, read straight from its unpadded input: one kernel.

LaMa's last layer is a 7x7 convolution from 64 channels to 3 on an input reflect-padded by 3.
As MLX ops it is a padded copy of the input (518 x 518 x 64 at 512 px) and one GEMM of every
input pixel with all 147 (tap, output) pairs, whose planes are then summed at their shifts
(zoo.kernels.cpu.gemm_taps_conv2d): 150 MiB of taps in float32 at 512 px, held with the padded
copy, where PyTorch's whole forward peaks at about 160 MiB (docs/speed-gpu.md). Here the input
is read at its reflected (torch's ``padding_mode="reflect"``: the edge pixel is not repeated) or
zero-padded positions, the sums are float32, and the bias is added: no padded copy, no taps. A
threadgroup holds its block's input patch in threadgroup memory, one slice of channels at a time,
and each thread slides the taps over four adjacent pixels.

Measured (H100, 2026-11-27 13:07 UTC, MLX 0.32.4): a first form, one thread a pixel reading its
own taps from device memory, matched numpy (1.0e-05) but took 4.0 ms at 512 px against the MLX
ops' 1.5 ms (a warp's reads 256 bytes apart); in LaMa 512's float32 user path it lowered the peak
from 412 to 303 MiB. This threadgroup form (H100, 14:06 UTC, ``python -m zoo.kernels.selftest
--kernels few_outputs``): float32 0.786 ms against the MLX ops' 1.423 at 512 px, equal to numpy
within 1.4e-05; float16 0.532 against 0.499 ms.

Which calls take it: ``preferred`` (float32 on MLX's CUDA backend; Metal keeps MLX's ops, nothing having
been measured there, and its source is compiled and run by the CPU shim test); the fallback,
MLX's ops, elsewhere and with ``ZOO_KERNELS=fallback``.
"""
from __future__ import annotations

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage, cpu

MAX_OUTPUTS = 4  # sums a thread keeps in registers (per pixel)
MAX_GROUP_BYTES = 32768  # threadgroup memory Metal guarantees (CUDA's static limit is 48 KiB)

# A threadgroup computes a ROWS x (ROW_THREADS * PIXELS) block of one image's output, PIXELS adjacent
# pixels a thread, so that each weight read serves PIXELS pixels and each patch row read KW taps.
ROWS, ROW_THREADS, PIXELS = 8, 16, 4
THREADS = ROWS * ROW_THREADS
CHANNEL_SLICE = 8  # input channels a threadgroup holds at once: 14 x 70 x 8 floats (30.6 KiB) for 7x7

CONV = core.Kernel(
    name="zoo_few_outputs_conv",
    input_names=("x", "weight", "bias", "sizes"),
    output_names=("y",),
    body="""
    // x: (N, H, W, C); weight: (CO, KH, KW, C); y: (N, OH, OW, CO), stride 1. Thread t of a
    // threadgroup (RT threads a block row) computes the PIXELS pixels at block row t / RT, columns
    // (t % RT) * PIXELS + 0..
    // For every slice of CS input channels the threadgroup first reads its block's input patch
    // (ROWS + KH - 1 rows, RT * PIXELS + KW - 1 columns) into threadgroup memory, channel-major;
    // a position outside the image reads the reflected pixel (REFLECT: -1 -> 1, H -> H - 2) or 0.
    // Then each thread slides the taps of every patch row over its pixels. Float32 sums.
    const int height = sizes[0];
    const int width = sizes[1];
    const int channels = sizes[2];
    const int out_h = sizes[3];
    const int out_w = sizes[4];
    const int tiles_x = sizes[5];
    const int tiles_y = sizes[6];
    const int patch_w = RT * PIXELS + KW - 1;
    const int plane = (ROWS + KH - 1) * patch_w;
    ZOO_SHARED float patch[CS * (ROWS + KH - 1) * (RT * PIXELS + KW - 1)];
    const uint group = thread_pos.x / uint(ROWS * RT);
    const int t = int(local_pos.x);
    const int tx = int(group % uint(tiles_x));
    const int ty = int((group / uint(tiles_x)) % uint(tiles_y));
    const uint n = group / uint(tiles_x * tiles_y);
    const int row = t / RT;
    const int col0 = (t % RT) * PIXELS;
    const int top = ty * ROWS - PH;
    const int left = tx * RT * PIXELS - PW;
    float sums[PIXELS][CO];
    for (int p = 0; p < PIXELS; ++p) {
        for (int o = 0; o < CO; ++o) {
            sums[p][o] = float(bias[o]);
        }
    }
    for (int c0 = 0; c0 < channels; c0 += CS) {
        for (int e = t; e < CS * plane; e += ROWS * RT) {
            const int c = e % CS;
            const int at = e / CS;
            int r = top + at / patch_w;
            int q = left + at % patch_w;
            if (REFLECT) {
                r = r < 0 ? -r : (r >= height ? 2 * (height - 1) - r : r);
                q = q < 0 ? -q : (q >= width ? 2 * (width - 1) - q : q);
            }
            // past the output's own edge a block's patch may reach further than one reflection:
            // those positions feed no written pixel
            const bool inside = r >= 0 && r < height && q >= 0 && q < width && c0 + c < channels;
            patch[c * plane + at] = inside
                ? float(x[((n * uint(height) + uint(r)) * uint(width) + uint(q)) * uint(channels) + uint(c0 + c)])
                : 0.0f;
        }
        zoo_group_barrier();
        const int slice = channels - c0 < CS ? channels - c0 : CS;
        for (int c = 0; c < slice; ++c) {
            for (int i = 0; i < KH; ++i) {
                float v[PIXELS + KW - 1];
                const int base = c * plane + (row + i) * patch_w + col0;
                for (int k = 0; k < PIXELS + KW - 1; ++k) {
                    v[k] = patch[base + k];
                }
                for (int j = 0; j < KW; ++j) {
                    for (int o = 0; o < CO; ++o) {
                        const float w = float(weight[(uint(o * KH * KW + i * KW + j)) * uint(channels) + uint(c0 + c)]);
                        for (int p = 0; p < PIXELS; ++p) {
                            sums[p][o] += v[p + j] * w;
                        }
                    }
                }
            }
        }
        zoo_group_barrier();
    }
    const int oy = ty * ROWS + row;
    for (int p = 0; p < PIXELS; ++p) {
        const int ox = tx * RT * PIXELS + col0 + p;
        if (oy < out_h && ox < out_w) {
            const uint at = ((n * uint(out_h) + uint(oy)) * uint(out_w) + uint(ox)) * uint(CO);
            for (int o = 0; o < CO; ++o) {
                y[at + uint(o)] = static_cast<T>(sums[p][o]);
            }
        }
    }
""",
)


def patch_bytes(kh: int, kw: int) -> int:
    """Threadgroup memory the kernel holds for a KH x KW convolution: one slice of its block's patch."""
    return CHANNEL_SLICE * (ROWS + kh - 1) * (ROW_THREADS * PIXELS + kw - 1) * 4


def fits(weight_shape, stride, groups, dilation) -> bool:
    """A convolution this kernel computes: at most ``MAX_OUTPUTS`` outputs, a kernel whose patch
    fits threadgroup memory (7x7 does), stride 1, no groups or dilation."""
    co, kh, kw, _ = weight_shape
    return co <= MAX_OUTPUTS and patch_bytes(kh, kw) <= MAX_GROUP_BYTES and core.pair(stride) == (1, 1) \
        and groups == 1 and core.pair(dilation) == (1, 1)


def preferred(dtype: mx.Dtype, weight_shape, stride, groups, dilation) -> bool:
    """Whether the models' compiled forwards run a convolution with this kernel: where it ``fits``,
    in float32, on MLX's CUDA backend (see the module's docstring). float16 keeps MLX's ops: its
    GEMM of taps is half the bytes, LaMa's float16 peak was within 2x PyTorch's, and the kernel
    took 1.07x their time in float16."""
    return core.native_backend() == "cuda" and dtype == mx.float32 and fits(weight_shape, stride, groups, dilation)


def conv2d(x: mx.array, weight: mx.array, bias: mx.array | None = None, padding=0, reflect: bool = False) -> mx.array:
    """mx.conv2d(pad(x), weight) + bias, stride 1, for an NHWC x and an (O, KH, KW, I) weight with
    O <= MAX_OUTPUTS; pad: ``padding`` zeros, or reflected pixels (``reflect``, torch's
    ``padding_mode="reflect"``). Float32 sums; the output in x's dtype."""
    x = core.nhwc_float_input("few_outputs conv2d", x)
    if weight.ndim != 4 or weight.shape[3] != x.shape[3] or weight.shape[0] > MAX_OUTPUTS:
        raise ZooError(f"few_outputs conv2d: weight must be (O <= {MAX_OUTPUTS}, KH, KW, {x.shape[3]}), "
                       f"got {tuple(weight.shape)}")
    if patch_bytes(*weight.shape[1:3]) > MAX_GROUP_BYTES:
        raise ZooError(f"few_outputs conv2d: a {weight.shape[1]}x{weight.shape[2]} kernel's input patch needs "
                       f"{patch_bytes(*weight.shape[1:3])} bytes of threadgroup memory, over {MAX_GROUP_BYTES}; "
                       f"use mx.conv2d")
    n, h, w, _ = x.shape
    co, kh, kw, _ = weight.shape
    ph, pw = core.pair(padding)
    out_h, out_w = core.conv_output_size(x.shape, weight.shape, 1, padding)
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
    out_h, out_w = core.conv_output_size(x.shape, weight.shape, 1, padding)
    tiles_x, tiles_y = -(-out_w // (ROW_THREADS * PIXELS)), -(-out_h // ROWS)
    return core.Launch(
        kernel=CONV,
        inputs=(x, weight, bias, core.constant((h, w, c, out_h, out_w, tiles_x, tiles_y), mx.int32)),
        template=(("T", x.dtype), ("CO", co), ("KH", kh), ("KW", kw), ("PH", ph), ("PW", pw),
                  ("REFLECT", bool(reflect)), ("ROWS", ROWS), ("RT", ROW_THREADS), ("PIXELS", PIXELS),
                  ("CS", CHANNEL_SLICE)),
        grid=(n * tiles_y * tiles_x * THREADS, 1, 1),
        threadgroup=(THREADS, 1, 1),
        output_shapes=((n, out_h, out_w, co),),
        output_dtypes=(x.dtype,),
    )
