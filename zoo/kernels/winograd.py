"""3x3 stride-1 convolution as Winograd F(2x2, 3x3): two transform kernels around one batched GEMM.

Each 2x2 block of outputs ("tile") is computed from the 4x4 input patch under it. With
the fixed matrices B, G and A of Lavin & Gray ("Fast Algorithms for Convolutional Neural
Networks", 2015):

    V = B^T d B   (input patch d, per tile and input channel: 16 values)
    U = G g G^T   (3x3 kernel g, per output and input channel: 16 values; once per weight)
    M[k] = V[k] @ U[k]   for each of the 16 positions k: a (tiles x C_in) @ (C_in x C_out) GEMM
    Y = A^T M A   (per tile and output channel: the 2x2 outputs)

2.25x fewer multiplications than the direct convolution, and no im2col copy: the input
transform writes 4x the input, the output transform reads 4x the output. The entries of
B, G and A are 0, +-1 and +-1/2, so float32 results round like a direct convolution's
(no larger transforms such as F(4x4, 3x3), whose entries grow and lose accuracy).

Why: MLX's convolution on CUDA is cuDNN in NHWC, and in float32 without TF32 its engines
reached 11-36% of the H100's float32 peak on YOLOv8s's 3x3 convolutions at batch 16, some
with workspaces of up to 1.4 GB (docs/speed-gpu.md). The native kernels run where MLX's
default device is a GPU; the fallback (plain MLX ops) elsewhere or with
``ZOO_KERNELS=fallback``. Where the models use this form: ``preferred`` (the transformed
weight is derived with the fold, zoo.compiled) and ``worth_it`` (per call,
models.layers.conv2d_derived).
"""
from __future__ import annotations

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage

TILE = 2  # outputs per tile side
PATCH = 4  # input patch side: TILE + 3 - 1
POSITIONS = PATCH * PATCH

# Both kernels run one thread per (tile, channel) and read their sizes the same way: the
# NHWC map's height and width (the input's for the input transform, the output's for the
# output transform), channels, tile rows, tile columns, images. Tiles are in (image, tile row,
# tile column) order; plane k of the (16, tiles, channels) buffer starts at k * plane.
_TILE_THREAD = """
    const int height = sizes[0];
    const int width = sizes[1];
    const int channels = sizes[2];
    const int tile_rows = sizes[3];
    const int tile_cols = sizes[4];
    const uint index = thread_pos.x;
    const int channel = int(index % uint(channels));
    const uint tile = index / uint(channels);
    const int tx = int(tile % uint(tile_cols));
    const int ty = int((tile / uint(tile_cols)) % uint(tile_rows));
    const int n = int(tile / uint(tile_cols * tile_rows));
    const uint plane = uint(tile_rows * tile_cols) * uint(sizes[5]) * uint(channels);
    const uint at = tile * uint(channels) + uint(channel);
"""

INPUT_TRANSFORM = core.Kernel(
    name="zoo_winograd_input",
    input_names=("x", "sizes"),
    output_names=("v",),
    body=_TILE_THREAD + """
    // V = B^T d B for the 4x4 patch d of tile (ty, tx), which starts at input row 2 ty - PAD,
    // column 2 tx - PAD; outside the image it is 0. x: (N, H, W, C); v: (16, tiles, C).
    const int row0 = 2 * ty - PAD;
    const int col0 = 2 * tx - PAD;
    float d[4][4];
    for (int i = 0; i < 4; ++i) {
        const int r = row0 + i;
        for (int j = 0; j < 4; ++j) {
            const int q = col0 + j;
            const bool inside = r >= 0 && r < height && q >= 0 && q < width;
            d[i][j] = inside ? float(x[((uint(n) * uint(height) + uint(r)) * uint(width) + uint(q)) * uint(channels)
                                       + uint(channel)]) : 0.0f;
        }
    }
    // B^T d: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3); then the same on the columns.
    float t[4][4];
    for (int j = 0; j < 4; ++j) {
        t[0][j] = d[0][j] - d[2][j];
        t[1][j] = d[1][j] + d[2][j];
        t[2][j] = d[2][j] - d[1][j];
        t[3][j] = d[1][j] - d[3][j];
    }
    for (int i = 0; i < 4; ++i) {
        v[uint(4 * i + 0) * plane + at] = static_cast<T>(t[i][0] - t[i][2]);
        v[uint(4 * i + 1) * plane + at] = static_cast<T>(t[i][1] + t[i][2]);
        v[uint(4 * i + 2) * plane + at] = static_cast<T>(t[i][2] - t[i][1]);
        v[uint(4 * i + 3) * plane + at] = static_cast<T>(t[i][1] - t[i][3]);
    }
""",
)

OUTPUT_TRANSFORM = core.Kernel(
    name="zoo_winograd_output",
    input_names=("m", "bias", "sizes"),
    output_names=("y",),
    body=_TILE_THREAD + """
    // Y = activation(A^T M A + bias), A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]; ACTIVATION: 0 none,
    // 1 ReLU, 2 SiLU (one pass less over the output than a separate activation). m: (16, tiles, O);
    // y: (N, OH, OW, O). A tile's outputs past the last row or column (odd OH or OW) are not written.
    float s0[4];
    float s1[4];
    for (int j = 0; j < 4; ++j) {
        const float m0 = float(m[uint(j) * plane + at]);
        const float m1 = float(m[uint(4 + j) * plane + at]);
        const float m2 = float(m[uint(8 + j) * plane + at]);
        const float m3 = float(m[uint(12 + j) * plane + at]);
        s0[j] = m0 + m1 + m2;
        s1[j] = m1 - m2 - m3;
    }
    const float b = float(bias[channel]);
    const float out[2][2] = {{s0[0] + s0[1] + s0[2] + b, s0[1] - s0[2] - s0[3] + b},
                             {s1[0] + s1[1] + s1[2] + b, s1[1] - s1[2] - s1[3] + b}};
    for (int a = 0; a < 2; ++a) {
        const int r = 2 * ty + a;
        for (int e = 0; e < 2; ++e) {
            const int q = 2 * tx + e;
            if (r < height && q < width) {
                float value = out[a][e];
                if (ACTIVATION == 1) {
                    value = value < 0.0f ? 0.0f : value;  // ReLU (a NaN stays NaN, as in mx.maximum)
                } else if (ACTIVATION == 2) {
                    value = value * (1.0f / (1.0f + zoo_exp(-value)));  // SiLU: x * sigmoid(x)
                }
                y[((uint(n) * uint(height) + uint(r)) * uint(width) + uint(q)) * uint(channels) + uint(channel)] =
                    static_cast<T>(value);
            }
        }
    }
""",
)

# G of F(2x2, 3x3): U = G g G^T.
_G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))


def preferred(dtype: mx.Dtype, weight_shape, stride, padding, groups, dilation) -> bool:
    """Whether the models' compiled forwards keep this form of a convolution at hand: where it
    ``suits``, on MLX's CUDA backend (where cuDNN's float32 engines without TF32 were measured
    slow: docs/speed-gpu.md). Metal keeps MLX's own convolution (nothing measured on Metal).
    Which calls take it: ``worth_it``."""
    return core.native_backend() == "cuda" and suits(dtype, weight_shape, stride, padding, groups, dilation)


def suits(dtype: mx.Dtype, weight_shape, stride, padding, groups, dilation) -> bool:
    """``fits``, in float32 (float16 stays with cuDNN, which was as fast as this form there)."""
    return dtype == mx.float32 and fits(weight_shape, stride, padding, groups, dilation)


def fits(weight_shape, stride, padding, groups, dilation) -> bool:
    """A convolution this form computes: 3x3, stride 1, no groups or dilation, padding 0 or 1."""
    return (
        tuple(weight_shape[1:3]) == (3, 3) and core.pair(stride) == (1, 1) and groups == 1
        and core.pair(dilation) == (1, 1) and core.pair(padding) in ((0, 0), (1, 1))
    )


# Below these the three launches and the transforms' memory traffic cost more than cuDNN's
# convolution saves (H100, float32, docs/speed-gpu.md): each
# convolution's arithmetic, and the narrower of its input and output channels (a thin GEMM).
MIN_GFLOP = 2.0
MIN_CHANNELS = 64


def worth_it(x_shape, weight_shape) -> bool:
    """Whether a convolution of an NHWC input of ``x_shape`` with a (O, 3, 3, I) weight is large
    enough for this form: at least MIN_GFLOP of direct arithmetic and MIN_CHANNELS a side."""
    n, h, w, ci = x_shape
    co = weight_shape[0]
    return 2 * n * h * w * 9 * ci * co >= MIN_GFLOP * 1e9 and min(ci, co) >= MIN_CHANNELS


def transform_weight(weight: mx.array) -> mx.array:
    """U = G g G^T for every (output, input) channel pair of a (O, 3, 3, I) weight, as the 16
    (I, O) matrices of the GEMM: (16, I, O), computed in float32, in the weight's dtype."""
    if weight.ndim != 4 or tuple(weight.shape[1:3]) != (3, 3):
        raise ZooError(f"winograd: the weight must be (O, 3, 3, I), got shape {tuple(weight.shape)}")
    co, _, _, ci = weight.shape
    g = mx.array(_G, dtype=mx.float32)
    w = weight.astype(mx.float32).transpose(1, 2, 3, 0)  # (3, 3, I, O)
    rows = (g @ w.reshape(3, -1)).reshape(4, 3, ci, co)  # G g, over the kernel rows
    both = (g @ rows.transpose(1, 0, 2, 3).reshape(3, -1)).reshape(4, 4, ci, co)  # (G g G^T)^T: (col, row, I, O)
    return both.transpose(1, 0, 2, 3).reshape(POSITIONS, ci, co).astype(weight.dtype)


# activation: (the output kernel's ACTIVATION, the fallback's MLX op); the kernels apply these three
ACTIVATIONS = {name: core.ACTIVATIONS[name] for name in (None, "relu", "silu")}


def conv3x3(x: mx.array, u: mx.array, bias: mx.array | None = None, padding: int = 1,
            activation: str | None = None) -> mx.array:
    """activation(mx.conv2d(x, weight, stride=1, padding=padding) + bias) for u = transform_weight(weight);
    x NHWC (N, H, W, C), padding 0 or 1, activation None, "relu" or "silu"."""
    x = core.nhwc_float_input("winograd conv3x3", x)
    if u.ndim != 3 or u.shape[0] != POSITIONS or u.shape[1] != x.shape[-1]:
        raise ZooError(f"winograd conv3x3: u must be (16, {x.shape[-1]}, O) from transform_weight, "
                       f"got shape {tuple(u.shape)}")
    if activation not in ACTIVATIONS:
        raise ZooError(f"winograd conv3x3: activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
    if padding not in (0, 1):
        raise ZooError(f"winograd conv3x3: padding must be 0 or 1, got {padding!r}")
    n, h, w, c = x.shape
    out_h, out_w = h + 2 * padding - 2, w + 2 * padding - 2
    if min(out_h, out_w) < 1:
        raise ZooError(f"winograd conv3x3: a {h}x{w} input with padding {padding} leaves no output")
    co = u.shape[2]
    tile_rows, tile_cols = -(-out_h // TILE), -(-out_w // TILE)
    tiles = n * tile_rows * tile_cols
    core.check_size("winograd transformed input", POSITIONS * tiles * max(c, co))
    # no bias: zeros made once per size (core.constant), not an op in every call
    bias = core.constant((0.0,) * co, x.dtype) if bias is None else bias.astype(x.dtype)
    backend = core.native_backend()
    coverage.note("winograd conv3x3", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    shape = (n, tile_rows, tile_cols)
    if backend is None:
        m = _input_fallback(x, padding, shape) @ u
        return ACTIVATIONS[activation][1](_output_fallback(m, bias, (out_h, out_w), shape))
    (v,) = core.run(input_launch(x, padding, shape), backend)
    (y,) = core.run(output_launch(v @ u, bias, (out_h, out_w), shape, activation), backend)
    return y


def input_launch(x: mx.array, padding: int, tile_shape) -> core.Launch:
    n, tile_rows, tile_cols = tile_shape
    _, h, w, c = x.shape
    tiles = n * tile_rows * tile_cols
    return core.Launch(
        kernel=INPUT_TRANSFORM,
        inputs=(x, core.constant((h, w, c, tile_rows, tile_cols, n), mx.int32)),
        template=(("T", x.dtype), ("PAD", padding)),
        grid=(tiles * c, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((POSITIONS, tiles, c),),
        output_dtypes=(x.dtype,),
    )


def output_launch(m: mx.array, bias: mx.array, out_size, tile_shape, activation: str | None = None) -> core.Launch:
    n, tile_rows, tile_cols = tile_shape
    co = m.shape[-1]
    return core.Launch(
        kernel=OUTPUT_TRANSFORM,
        inputs=(m, bias, core.constant((*out_size, co, tile_rows, tile_cols, n), mx.int32)),
        template=(("T", m.dtype), ("ACTIVATION", ACTIVATIONS[activation][0])),
        grid=(m.shape[1] * co, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((n, *out_size, co),),
        output_dtypes=(m.dtype,),
    )


def _input_fallback(x: mx.array, padding: int, tile_shape) -> mx.array:
    """V = B^T d B for every tile, with MLX ops: (16, tiles, C)."""
    n, tile_rows, tile_cols = tile_shape
    _, h, w, c = x.shape
    # zeros around the image: PAD before, and after up to the last tile's patch end
    x = mx.pad(x, ((0, 0), (padding, 2 * tile_rows + 2 - h - padding), (padding, 2 * tile_cols + 2 - w - padding),
                   (0, 0)))
    rows = [x[:, i:i + 2 * tile_rows:2] for i in range(PATCH)]
    planes = []
    for t in _b_transpose(rows):
        cols = [t[:, :, j:j + 2 * tile_cols:2] for j in range(PATCH)]
        planes += _b_transpose(cols)
    return mx.stack(planes).reshape(POSITIONS, -1, c)


def _b_transpose(d):
    """B^T applied along the list of four patch rows (or columns)."""
    return [d[0] - d[2], d[1] + d[2], d[2] - d[1], d[1] - d[3]]


def _output_fallback(m: mx.array, bias: mx.array, out_size, tile_shape) -> mx.array:
    """Y = A^T M A + bias, interleaved into NHWC and cut to the output size."""
    n, tile_rows, tile_cols = tile_shape
    co = m.shape[-1]
    m = m.reshape(PATCH, PATCH, n, tile_rows, tile_cols, co)
    s = [m[0] + m[1] + m[2], m[1] - m[2] - m[3]]  # A^T along the rows: (4 columns, ...)
    out = mx.stack([mx.stack([r[0] + r[1] + r[2], r[1] - r[2] - r[3]], axis=3) for r in s], axis=2)
    # (N, tile rows, 2, tile cols, 2, O) -> (N, 2 tile rows, 2 tile cols, O)
    out = out.reshape(n, 2 * tile_rows, 2 * tile_cols, co)[:, :out_size[0], :out_size[1]]
    return out + bias
