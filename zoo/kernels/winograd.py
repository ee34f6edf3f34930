"""3x3 stride-1 convolution as Winograd's F(m x m, 3x3): two transform kernels around one batched GEMM.

Each m x m block of outputs ("tile") is computed from the (m + 2) x (m + 2) input patch under it
("Fast Algorithms for Convolutional Neural Networks", Lavin & Gray, 2015), with the fixed matrices
B, G and A of a ``Form``:

    V = B^T d B   (input patch d, per tile and input channel)
    U = G g G^T   (3x3 kernel g, per output and input channel; once per weight)
    M[k] = V[k] @ U[k]   for each patch position k: a (tiles x C_in) @ (C_in x C_out) GEMM
    Y = A^T M A   (per tile and output channel: the m x m outputs)

F2 (m = 2, 16 positions): 2.25x fewer multiplications than the direct convolution, transforms of
4x the input and output, entries 0, +-1 and +-1/2 (float32 results round like a direct
convolution's); the CPU's C library runs it. F4 (m = 4, 36 positions): 4x fewer multiplications,
transforms of 2.25x the input and output; its entries up to 8 (and 1/24 in G) round float32 sums
a few times more coarsely (up to 1.5e-5 of a layer's largest output, against the validator's float32
bound of 1e-4); the compiled forwards on CUDA run it (``GPU_FORM``), but LaMa's (models.lama). No
im2col copy either way.

Why: MLX's convolution on CUDA is cuDNN in NHWC, and in float32 without TF32 its engines
reached 11-36% of the H100's float32 peak on YOLOv8s's 3x3 convolutions at batch 16, some
with workspaces of up to 1.4 GB (docs/speed-gpu.md). The native kernels run where MLX's
default device is a GPU; the fallback (plain MLX ops) elsewhere or with
``ZOO_KERNELS=fallback``. Where the models use this form: ``preferred`` (the transformed
weight is derived with the fold, zoo.compiled) and ``worth_it`` (per call,
models.layers.conv2d_derived).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage


@dataclass(frozen=True)
class Form:
    """Winograd's F(m x m, 3x3) for m = ``tile``: its matrices B^T (patch x patch), G (patch x 3) and
    A^T (tile x patch), patch = tile + 2. The kernels' bodies and the MLX-op fallback are written
    from B^T and A^T, so every form has the same code."""

    tile: int
    bt: tuple
    g: tuple
    at: tuple

    @property
    def patch(self) -> int:
        return self.tile + 2

    @property
    def positions(self) -> int:
        return self.patch * self.patch

    @functools.cached_property
    def input_kernel(self) -> core.Kernel:
        return core.Kernel(f"zoo_winograd{self.tile}_input", ("x", "sizes"), ("v",), _input_body(self))

    @functools.cached_property
    def output_kernel(self) -> core.Kernel:
        return core.Kernel(f"zoo_winograd{self.tile}_output", ("m", "bias", "sizes"), ("y",), _output_body(self))


# F(2x2, 3x3) (Lavin & Gray's): entries 0, +-1, +-1/2; float32 results round like a direct convolution's.
F2 = Form(
    tile=2,
    bt=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
    g=((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
    at=((1, 1, 1, 0), (0, 1, -1, -1)),
)
# F(4x4, 3x3) at the points 0, +-1, +-2 (Lavin & Gray's): 4x fewer multiplications than the direct
# convolution (F2: 2.25x), transforms of 2.25x the input and output (F2: 4x); its larger entries
# round float32 sums a few times more coarsely than F2 (docs/speed-gpu.md has the measured errors).
F4 = Form(
    tile=4,
    bt=((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0), (0, -2, -1, 2, 1, 0),
        (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1)),
    g=((1 / 4, 0, 0), (-1 / 6, -1 / 6, -1 / 6), (-1 / 6, 1 / 6, -1 / 6), (1 / 24, 1 / 12, 1 / 6),
       (1 / 24, -1 / 12, 1 / 6), (0, 0, 1)),
    at=((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1)),
)
FORMS = {form.positions: form for form in (F2, F4)}
GPU_FORM = F4  # the compiled forwards' (zoo.compiled.with_winograd); the CPU's C library runs F2


def _sum_c(coefficients, term) -> str:
    """The C expression of sum(c * term(k)) over the nonzero coefficients (+-1 without a product)."""
    parts = []
    for k, c in enumerate(coefficients):
        if c == 0:
            continue
        magnitude = "" if abs(c) == 1 else f"{float(abs(c))!r}f * "
        parts.append(("- " if c < 0 else "+ ") + magnitude + term(k))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


# Both kernels run one thread per (tile, channel) and read their sizes the same way: the
# NHWC map's height and width (the input's for the input transform, the output's for the
# output transform), channels, tile rows, tile columns, images. Tiles are in (image, tile row,
# tile column) order; plane k of the (positions, tiles, channels) buffer starts at k * plane.
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


def _input_body(form: Form) -> str:
    p, tile = form.patch, form.tile
    rows = "\n".join(f"        t[{i}][j] = {_sum_c(r, lambda k: f'd[{k}][j]')};" for i, r in enumerate(form.bt))
    planes = "\n".join(
        f"        v[uint({p} * i + {j}) * plane + at] = static_cast<T>({_sum_c(r, lambda k: f't[i][{k}]')});"
        for j, r in enumerate(form.bt))
    return _TILE_THREAD + f"""
    // V = B^T d B for the {p}x{p} patch d of tile (ty, tx), which starts at input row {tile} ty - PAD,
    // column {tile} tx - PAD; outside the image it is 0. x: (N, H, W, C); v: ({form.positions}, tiles, C).
    const int row0 = {tile} * ty - PAD;
    const int col0 = {tile} * tx - PAD;
    float d[{p}][{p}];
    for (int i = 0; i < {p}; ++i) {{
        const int r = row0 + i;
        for (int j = 0; j < {p}; ++j) {{
            const int q = col0 + j;
            const bool inside = r >= 0 && r < height && q >= 0 && q < width;
            d[i][j] = inside ? float(x[((uint(n) * uint(height) + uint(r)) * uint(width) + uint(q)) * uint(channels)
                                       + uint(channel)]) : 0.0f;
        }}
    }}
    float t[{p}][{p}];  // B^T d, then the same on the columns
    for (int j = 0; j < {p}; ++j) {{
{rows}
    }}
    for (int i = 0; i < {p}; ++i) {{
{planes}
    }}
"""


def _output_body(form: Form) -> str:
    p, tile = form.patch, form.tile
    loads = "\n".join(f"        mc[{k}] = float(m[uint({p * k} + j) * plane + at]);" for k in range(p))
    sums = "\n".join(f"        s[{a}][j] = {_sum_c(r, lambda k: f'mc[{k}]')};" for a, r in enumerate(form.at))
    outs = ", ".join(_sum_c(r, lambda k: f"s[a][{k}]") + " + b" for r in form.at)
    return _TILE_THREAD + f"""
    // Y = activation(A^T M A + bias); ACTIVATION: 0 none, 1 ReLU, 2 SiLU (one pass less over the
    // output than a separate activation). m: ({form.positions}, tiles, O); y: (N, OH, OW, O). A tile's
    // outputs past the last row or column are not written.
    float s[{tile}][{p}];  // A^T M
    for (int j = 0; j < {p}; ++j) {{
        float mc[{p}];
{loads}
{sums}
    }}
    const float b = float(bias[channel]);
    for (int a = 0; a < {tile}; ++a) {{
        const int r = {tile} * ty + a;
        const float row[{tile}] = {{{outs}}};
        for (int e = 0; e < {tile}; ++e) {{
            const int q = {tile} * tx + e;
            if (r < height && q < width) {{
                float value = row[e];
                if (ACTIVATION == 1) {{
                    value = value < 0.0f ? 0.0f : value;  // ReLU (a NaN stays NaN, as in mx.maximum)
                }} else if (ACTIVATION == 2) {{
                    value = value * (1.0f / (1.0f + zoo_exp(-value)));  // SiLU: x * sigmoid(x)
                }}
                y[((uint(n) * uint(height) + uint(r)) * uint(width) + uint(q)) * uint(channels) + uint(channel)] =
                    static_cast<T>(value);
            }}
        }}
    }}
"""


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


# Below these GPU_FORM's three launches and its transforms' memory traffic cost more than cuDNN's
# convolution saves (H200, float32, F4, 2026-12-01, docs/speed-gpu.md): each convolution's
# arithmetic, and the narrower of its input and output channels (a thin GEMM).
MIN_GFLOP = 1.0
MIN_CHANNELS = 32


def worth_it(x_shape, weight_shape) -> bool:
    """Whether a convolution of an NHWC input of ``x_shape`` with a (O, 3, 3, I) weight is large
    enough for this form: at least MIN_GFLOP of direct arithmetic and MIN_CHANNELS a side."""
    n, h, w, ci = x_shape
    co = weight_shape[0]
    return 2 * n * h * w * 9 * ci * co >= MIN_GFLOP * 1e9 and min(ci, co) >= MIN_CHANNELS


def transform_weight(weight: mx.array, form: Form = F2) -> mx.array:
    """U = G g G^T for every (output, input) channel pair of a (O, 3, 3, I) weight, as the
    ``form.positions`` (I, O) matrices of the GEMM: (positions, I, O), computed in float32, in the
    weight's dtype."""
    if weight.ndim != 4 or tuple(weight.shape[1:3]) != (3, 3):
        raise ZooError(f"winograd: the weight must be (O, 3, 3, I), got shape {tuple(weight.shape)}")
    co, _, _, ci = weight.shape
    p = form.patch
    g = mx.array(form.g, dtype=mx.float32)
    w = weight.astype(mx.float32).transpose(1, 2, 3, 0)  # (3, 3, I, O)
    rows = (g @ w.reshape(3, -1)).reshape(p, 3, ci, co)  # G g, over the kernel rows
    both = (g @ rows.transpose(1, 0, 2, 3).reshape(3, -1)).reshape(p, p, ci, co)  # (G g G^T)^T: (col, row, I, O)
    return both.transpose(1, 0, 2, 3).reshape(form.positions, ci, co).astype(weight.dtype)


# activation: (the output kernel's ACTIVATION, the fallback's MLX op); the kernels apply these three
ACTIVATIONS = {name: core.ACTIVATIONS[name] for name in (None, "relu", "silu")}


def conv3x3(x: mx.array, u: mx.array, bias: mx.array | None = None, padding: int = 1,
            activation: str | None = None) -> mx.array:
    """activation(mx.conv2d(x, weight, stride=1, padding=padding) + bias) for u = transform_weight(weight, form),
    the form told by u's first dimension; x NHWC (N, H, W, C), padding 0 or 1, activation None, "relu" or "silu"."""
    x = core.nhwc_float_input("winograd conv3x3", x)
    if u.ndim != 3 or u.shape[0] not in FORMS or u.shape[1] != x.shape[-1]:
        raise ZooError(f"winograd conv3x3: u must be ({' or '.join(map(str, FORMS))}, {x.shape[-1]}, O) from "
                       f"transform_weight, got shape {tuple(u.shape)}")
    form = FORMS[u.shape[0]]
    if activation not in ACTIVATIONS:
        raise ZooError(f"winograd conv3x3: activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
    if padding not in (0, 1):
        raise ZooError(f"winograd conv3x3: padding must be 0 or 1, got {padding!r}")
    n, h, w, c = x.shape
    out_h, out_w = h + 2 * padding - 2, w + 2 * padding - 2
    if min(out_h, out_w) < 1:
        raise ZooError(f"winograd conv3x3: a {h}x{w} input with padding {padding} leaves no output")
    co = u.shape[2]
    tile_rows, tile_cols = -(-out_h // form.tile), -(-out_w // form.tile)
    tiles = n * tile_rows * tile_cols
    core.check_size("winograd transformed input", form.positions * tiles * max(c, co))
    # no bias: zeros made once per size (core.constant), not an op in every call
    bias = core.constant((0.0,) * co, x.dtype) if bias is None else bias.astype(x.dtype)
    backend = core.native_backend()
    coverage.note("winograd conv3x3", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    shape = (n, tile_rows, tile_cols)
    if backend is None:
        m = _input_fallback(form, x, padding, shape) @ u
        return ACTIVATIONS[activation][1](_output_fallback(form, m, bias, (out_h, out_w), shape))
    (v,) = core.run(input_launch(form, x, padding, shape), backend)
    (y,) = core.run(output_launch(form, v @ u, bias, (out_h, out_w), shape, activation), backend)
    return y


def input_launch(form: Form, x: mx.array, padding: int, tile_shape) -> core.Launch:
    n, tile_rows, tile_cols = tile_shape
    _, h, w, c = x.shape
    tiles = n * tile_rows * tile_cols
    return core.Launch(
        kernel=form.input_kernel,
        inputs=(x, core.constant((h, w, c, tile_rows, tile_cols, n), mx.int32)),
        template=(("T", x.dtype), ("PAD", padding)),
        grid=(tiles * c, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((form.positions, tiles, c),),
        output_dtypes=(x.dtype,),
    )


def output_launch(form: Form, m: mx.array, bias: mx.array, out_size, tile_shape,
                  activation: str | None = None) -> core.Launch:
    n, tile_rows, tile_cols = tile_shape
    co = m.shape[-1]
    return core.Launch(
        kernel=form.output_kernel,
        inputs=(m, bias, core.constant((*out_size, co, tile_rows, tile_cols, n), mx.int32)),
        template=(("T", m.dtype), ("ACTIVATION", ACTIVATIONS[activation][0])),
        grid=(m.shape[1] * co, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=((n, *out_size, co),),
        output_dtypes=(m.dtype,),
    )


def _combine(matrix, items) -> list:
    """matrix @ items for a list of arrays: one linear combination of them per row."""
    out = []
    for row in matrix:
        terms = [(c, item) for c, item in zip(row, items) if c != 0]
        total = None
        for c, item in terms:
            term = item if c == 1 else -item if c == -1 else c * item
            total = term if total is None else total + term
        out.append(total)
    return out


def _input_fallback(form: Form, x: mx.array, padding: int, tile_shape) -> mx.array:
    """V = B^T d B for every tile, with MLX ops: (positions, tiles, C)."""
    n, tile_rows, tile_cols = tile_shape
    _, h, w, c = x.shape
    t, p = form.tile, form.patch
    # zeros around the image: PAD before, and after up to the last tile's patch end
    x = mx.pad(x, ((0, 0), (padding, t * tile_rows + 2 - h - padding), (padding, t * tile_cols + 2 - w - padding),
                   (0, 0)))
    rows = [x[:, i:i + t * tile_rows:t] for i in range(p)]
    planes = []
    for row in _combine(form.bt, rows):
        planes += _combine(form.bt, [row[:, :, j:j + t * tile_cols:t] for j in range(p)])
    return mx.stack(planes).reshape(form.positions, -1, c)


def _output_fallback(form: Form, m: mx.array, bias: mx.array, out_size, tile_shape) -> mx.array:
    """Y = A^T M A + bias, interleaved into NHWC and cut to the output size."""
    n, tile_rows, tile_cols = tile_shape
    co = m.shape[-1]
    t, p = form.tile, form.patch
    m = m.reshape(p, p, n, tile_rows, tile_cols, co)
    s = _combine(form.at, [m[k] for k in range(p)])  # A^T along the rows: (columns, ...) each
    out = mx.stack([mx.stack(_combine(form.at, [r[k] for k in range(p)]), axis=3) for r in s], axis=2)
    # (N, tile rows, t, tile cols, t, O) -> (N, t tile rows, t tile cols, O)
    out = out.reshape(n, t * tile_rows, t * tile_cols, co)[:, :out_size[0], :out_size[1]]
    return out + bias
