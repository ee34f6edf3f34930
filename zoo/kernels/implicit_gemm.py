"""float32 convolution as an implicit GEMM: one kernel, tiles in threadgroup memory, no workspace.

The convolution of an NHWC input with an (O, KH, KW, I) weight is the product of an
(N * OH * OW) x (KH * KW * I) matrix of input patches, never formed in memory, with the
(KH * KW * I) x O weight. Each threadgroup computes a BM x BN tile of the output: for every
tap (kh, kw) and every run of 8 input channels it reads the BM patch rows (a 4-channel vector
each, zero outside the image) and the BN weight rows into threadgroup memory, two buffers
deep so that the reads of the next slice overlap the products of this one, and each thread
keeps a TM x TN block of sums in registers. The bias and the ReLU/SiLU that follows are added
before the one write of the output. The same body, as SUBPIXEL, computes a transposed
convolution of kernel 3 and stride 2 as its four output phases (``conv_transpose2d_subpixel``).

Why: MLX's convolution on CUDA is cuDNN in NHWC, and in float32 without TF32 its engines
reached 11-36% of the H100's float32 rate, some with workspaces of up to 1.4 GB that MLX holds
until the GPU has run them (docs/speed-gpu.md). This kernel asks for no workspace. Which
convolutions take it: ``preferred`` and ``worth_it``; MLX's own convolution (the fallback)
elsewhere, on the CPU and with ``ZOO_KERNELS=fallback``. Metal keeps MLX's convolution:
nothing was measured there (the Metal source is compiled and run by the CPU shim test).
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from zoo.errors import ZooError
from zoo.kernels import core, coverage
from zoo.kernels.winograd import ACTIVATIONS

K_STEP = 8  # input channels per slice of the K loop; each thread reads 4 of them at once

# The kernel's body; CONV and SUBPIXEL fill in where a threadgroup's run or phase, its weight
# and its output rows come from.
BODY = """
    // x: (N, H, W, C), w: (O, KH, KW, C), bias: (O,), y: (N, OH, OW, O), C and O multiples of 4.
    // Template: KH, KW, strides SH, SW, paddings PH, PW (top/left), tile BM x BN, per-thread TM x TN
    // (multiples of 4), ACTIVATION (0 none, 1 ReLU, 2 SiLU), SPLITS: with more than one, the K steps
    // (taps x slices of 8 channels) are split in SPLITS runs and y is (SPLITS, N, OH, OW, O), each
    // run's sums without bias or activation (the caller adds the runs).
    constexpr int BK = 8;
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int A_LOADS = (2 * BM + THREADS - 1) / THREADS;  // 4-channel vectors of a slice per thread
    constexpr int B_LOADS = (2 * BN + THREADS - 1) / THREADS;
    constexpr int A_ROW = BM + 4;  // a slice's row per input channel, padded against bank conflicts
    constexpr int B_ROW = BN + 4;
    ZOO_SHARED float4 a_tile[2 * BK * A_ROW / 4];
    ZOO_SHARED float4 b_tile[2 * BK * B_ROW / 4];
    ZOO_SHARED_PTR float* a_flat = (ZOO_SHARED_PTR float*)a_tile;
    ZOO_SHARED_PTR float* b_flat = (ZOO_SHARED_PTR float*)b_tile;

    const int height = sizes[0];
    const int width = sizes[1];
    const int channels = sizes[2];
    const int out_h = sizes[3];
    const int out_w = sizes[4];
    const int outputs = sizes[5];
    const int rows = sizes[6];  // N * OH * OW
    const int n_blocks = (outputs + BN - 1) / BN;
    const int tiles = ((rows + BM - 1) / BM) * n_blocks;
    const int tid = int(local_pos.x);
@SPLIT@    const int block = int(thread_pos.x) / THREADS % tiles;
    const int m0 = (block / n_blocks) * BM;
    const int n0 = (block % n_blocks) * BN;

    // The patch rows this thread reads: vector f = tid + i * THREADS is row f / 2, channels 4 (f % 2).
    int a_image[A_LOADS];
    int a_top[A_LOADS];
    int a_left[A_LOADS];
    for (int i = 0; i < A_LOADS; ++i) {
        const int f = tid + i * THREADS;
        const int m = m0 + (f >> 1);
        const int ow = m % out_w;
        const int oh = (m / out_w) % out_h;
        a_image[i] = (m / out_w) / out_h * height;
        a_top[i] = m < rows && f < 2 * BM ? oh * SH - PH : -(1 << 30);  // such rows read zeros
        a_left[i] = ow * SW - PW;
    }
    const int ty = tid / (BN / TN);
    const int tx = tid % (BN / TN);
    float acc[TM][TN];
    for (int i = 0; i < TM; ++i) {
        for (int j = 0; j < TN; ++j) {
            acc[i][j] = 0.0f;
        }
    }
    float4 a_next[A_LOADS];
    float4 b_next[B_LOADS];
    const int slices = (channels + BK - 1) / BK;
    const int k_first = split * (KH * KW * slices) / SPLITS;  // this run's steps: k_first .. k_first + k_steps - 1
    const int k_steps = (split + 1) * (KH * KW * slices) / SPLITS - k_first;
    int kh = k_first / slices / KW;
    int kw = k_first / slices % KW;
    int c0 = k_first % slices * BK;
    // Step s reads slice s into registers, multiplies slice s - 1 (threadgroup buffer (s - 1) % 2),
    // then stores slice s into buffer s % 2: one barrier per step.
    for (int s = 0; s <= k_steps; ++s) {
        if (s < k_steps) {
            for (int i = 0; i < A_LOADS; ++i) {
                const int f = tid + i * THREADS;
                const int c = c0 + (f & 1) * 4;
                const int r = a_top[i] + kh;
                const int q = a_left[i] + kw;
                if (r >= 0 && r < height && q >= 0 && q < width && c < channels) {
                    a_next[i] = *((const ZOO_DEVICE_PTR float4*)(x + ((a_image[i] + r) * width + q) * channels + c));
                } else {
                    a_next[i].x = 0.0f; a_next[i].y = 0.0f; a_next[i].z = 0.0f; a_next[i].w = 0.0f;
                }
            }
            for (int j = 0; j < B_LOADS; ++j) {
                const int f = tid + j * THREADS;
                const int o = n0 + (f >> 1);
                const int c = c0 + (f & 1) * 4;
                if (f < 2 * BN && o < outputs && c < channels) {
                    b_next[j] = *((const ZOO_DEVICE_PTR float4*)(@WEIGHT@ + ((o * KH + kh) * KW + kw) * channels + c));
                } else {
                    b_next[j].x = 0.0f; b_next[j].y = 0.0f; b_next[j].z = 0.0f; b_next[j].w = 0.0f;
                }
            }
        }
        if (s > 0) {
            const int at = ((s - 1) & 1) * BK;
            for (int k = 0; k < BK; ++k) {
                float a[TM];
                float b[TN];
                for (int g = 0; g < TM / 4; ++g) {
                    const float4 v = a_tile[(at + k) * (A_ROW / 4) + g * (BM / TM) + ty];
                    a[4 * g] = v.x; a[4 * g + 1] = v.y; a[4 * g + 2] = v.z; a[4 * g + 3] = v.w;
                }
                for (int g = 0; g < TN / 4; ++g) {
                    const float4 v = b_tile[(at + k) * (B_ROW / 4) + g * (BN / TN) + tx];
                    b[4 * g] = v.x; b[4 * g + 1] = v.y; b[4 * g + 2] = v.z; b[4 * g + 3] = v.w;
                }
                for (int i = 0; i < TM; ++i) {
                    for (int j = 0; j < TN; ++j) {
                        acc[i][j] += a[i] * b[j];
                    }
                }
            }
        }
        if (s < k_steps) {
            const int at = (s & 1) * BK;
            for (int i = 0; i < A_LOADS; ++i) {
                const int f = tid + i * THREADS;
                if (f < 2 * BM) {
                    const int row = f >> 1;
                    const int k = at + (f & 1) * 4;
                    a_flat[k * A_ROW + row] = a_next[i].x;
                    a_flat[(k + 1) * A_ROW + row] = a_next[i].y;
                    a_flat[(k + 2) * A_ROW + row] = a_next[i].z;
                    a_flat[(k + 3) * A_ROW + row] = a_next[i].w;
                }
            }
            for (int j = 0; j < B_LOADS; ++j) {
                const int f = tid + j * THREADS;
                if (f < 2 * BN) {
                    const int col = f >> 1;
                    const int k = at + (f & 1) * 4;
                    b_flat[k * B_ROW + col] = b_next[j].x;
                    b_flat[(k + 1) * B_ROW + col] = b_next[j].y;
                    b_flat[(k + 2) * B_ROW + col] = b_next[j].z;
                    b_flat[(k + 3) * B_ROW + col] = b_next[j].w;
                }
            }
            c0 += BK;
            if (c0 >= channels) {
                c0 = 0;
                kw += 1;
                if (kw == KW) {
                    kw = 0;
                    kh += 1;
                }
            }
        }
        zoo_group_barrier();
    }
    // Thread (ty, tx) holds rows 4 (g * BM / TM + ty) + 0..3 and columns 4 (g * BN / TN + tx) + 0..3.
    for (int gi = 0; gi < TM / 4; ++gi) {
        for (int i = 0; i < 4; ++i) {
            const int m = m0 + 4 * (gi * (BM / TM) + ty) + i;
            if (m >= rows) {
                continue;
            }
            for (int gj = 0; gj < TN / 4; ++gj) {
                const int o = n0 + 4 * (gj * (BN / TN) + tx);
                if (o >= outputs) {
                    continue;
                }
                float v[4];
                for (int j = 0; j < 4; ++j) {
                    v[j] = acc[4 * gi + i][4 * gj + j];
                    if (SPLITS == 1) {
                        v[j] += bias[o + j];
                        if (ACTIVATION == 1) {
                            v[j] = v[j] < 0.0f ? 0.0f : v[j];  // ReLU (a NaN stays NaN, as in mx.maximum)
                        } else if (ACTIVATION == 2) {
                            v[j] = v[j] * (1.0f / (1.0f + zoo_exp(-v[j])));  // SiLU: x * sigmoid(x)
                        }
                    }
                }
                float4 out;
                out.x = v[0]; out.y = v[1]; out.z = v[2]; out.w = v[3];
                *((ZOO_DEVICE_PTR float4*)(y + @ROW@ * outputs + o)) = out;
            }
        }
    }
"""

CONV = core.Kernel(
    name="zoo_implicit_gemm_conv",
    input_names=("x", "w", "bias", "sizes"),
    output_names=("y",),
    body=BODY.replace("@SPLIT@", "    const int split = int(thread_pos.x) / THREADS / tiles;\n")
    .replace("@WEIGHT@", "w").replace("@ROW@", "(split * rows + m)"),
)

# A transposed convolution of kernel 3, stride 2, padding 1, output padding 1 (LaMa's upsamplings) as
# its 2 x 2 output phases, each a 2x2 stride-1 convolution of the input (``subpixel_weights``): one
# launch, threadgroups of phase p = (rh, rw) write output pixels (2 i + rh, 2 j + rw), so the output
# is made interleaved, with no cuDNN workspace (97 MiB for LaMa 512's last upsampling in float32).
# w: (4, O, 2, 2, C); sizes: the input's H, W, C, then H, W again (a phase's grid), O, N * H * W.
SUBPIXEL = core.Kernel(
    name="zoo_implicit_gemm_subpixel",
    input_names=("x", "w", "bias", "sizes"),
    output_names=("y",),
    body=BODY.replace("@SPLIT@", "    const int split = 0;\n    const int phase = int(thread_pos.x) / THREADS / tiles;\n")
    .replace("@WEIGHT@", "(w + phase * outputs * KH * KW * channels)")
    .replace("@ROW@", "((m / out_w / out_h * 2 * out_h + 2 * (m / out_w % out_h) + phase / 2) * 2 * out_w"
                      " + 2 * (m % out_w) + phase % 2)"),
)


@dataclass(frozen=True)
class Tiles:
    """A threadgroup's output tile (BM output pixels x BN output channels) and each thread's share."""

    bm: int
    bn: int
    tm: int
    tn: int

    def __post_init__(self):
        if self.tm not in (4, 8) or self.tn not in (4, 8) or self.bm % self.tm or self.bn % self.tn \
                or self.threads > 1024:
            raise ValueError(f"implicit_gemm: unusable tiles {self}")

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def count(self, rows: int, outputs: int) -> int:
        """How many of these tiles cover a (rows x outputs) output."""
        return -(-rows // self.bm) * -(-outputs // self.bn)


TILES_NARROW = Tiles(128, 32, 8, 4)  # 32 outputs or fewer: no empty columns of a wide tile
TILES_SMALL = Tiles(64, 64, 8, 8)  # for a grid of few 128 x 64 tiles: more threadgroups
TILES_WIDE = Tiles(128, 64, 8, 8)
# Below this many 128 x 64 tiles (two per multiprocessor of an H100 or H200, 132 each) the 64 x 64
# ones filled the GPU better. These three were the best of eight tile shapes over every convolution
# of ResNet-50 b32, YOLOv8n/s b16 and LaMa 512 (H200, 2026-11-27, docs/speed-gpu.md; conv_probe.py --tiles).
FEW_BLOCKS = 264


def tiles_for(rows: int, outputs: int) -> Tiles:
    if outputs <= TILES_NARROW.bn:
        return TILES_NARROW
    return TILES_SMALL if TILES_WIDE.count(rows, outputs) < FEW_BLOCKS else TILES_WIDE


# A grid of fewer tiles than an H100's 132 multiprocessors leaves some idle (batch 1: ResNet-50's
# 7x7 stage is 8 tiles of 64 x 64): its K steps are then split in runs, one threadgroup per tile and
# run, up to FEW_BLOCKS threadgroups, each run at least MIN_SPLIT_STEPS steps long, and the runs'
# partial sums, added after, at most SPLIT_BYTES (cuDNN's workspaces there were 1-10 MiB).
SPLIT_BELOW_BLOCKS = 132
MIN_SPLIT_STEPS = 8
SPLIT_BYTES = 4 * 2**20


def k_steps(weight_shape) -> int:
    """The kernel's K steps for an (O, KH, KW, I) weight: taps x slices of K_STEP input channels."""
    _, kh, kw, ci = weight_shape
    return kh * kw * -(-ci // K_STEP)


def splits_for(rows: int, outputs: int, steps: int, tiles: Tiles) -> int:
    """How many runs the K steps of a convolution with ``rows`` output pixels, ``outputs``
    channels and ``steps`` K steps (``k_steps``) are split in."""
    blocks = tiles.count(rows, outputs)
    if blocks >= SPLIT_BELOW_BLOCKS:
        return 1
    return max(1, min(-(-FEW_BLOCKS // blocks), steps // MIN_SPLIT_STEPS, SPLIT_BYTES // (4 * rows * outputs)))


def fits(weight_shape, stride, padding, groups, dilation) -> bool:
    """A convolution this kernel computes: no groups or dilation, input and output channels
    multiples of 4 (its 4-channel vector reads and writes), any kernel size, stride and padding."""
    o, _, _, i = weight_shape
    return groups == 1 and core.pair(dilation) == (1, 1) and o % 4 == 0 and i % 4 == 0


def preferred(dtype: mx.Dtype, weight_shape, stride, padding, groups, dilation) -> bool:
    """Whether the models' compiled forwards may run a convolution with this kernel: where it
    ``suits``, on MLX's CUDA backend (cuDNN's float32 engines without TF32 were slow and asked for
    large workspaces there); Metal keeps MLX's convolution. Which calls take it: ``worth_it``."""
    return core.native_backend() == "cuda" and suits(dtype, weight_shape, stride, padding, groups, dilation)


def suits(dtype: mx.Dtype, weight_shape, stride, padding, groups, dilation) -> bool:
    """``fits``, in float32 (float16 keeps cuDNN, whose half-precision engines were fast)."""
    return dtype == mx.float32 and fits(weight_shape, stride, padding, groups, dilation)


# Where this kernel beat cuDNN (H200, 2026-11-27, float32, TF32 off, docs/speed-gpu.md's conv_probe.py over
# ResNet-50 b32, YOLOv8n/s b16, LaMa 512): with at least a slice's worth of input channels (4 of 8
# in a slice read zeros), an output of 2**20 elements or more (smaller grids leave multiprocessors
# idle), and not the small stride-1 3x3 convolutions of 32 channels or more a side (under
# SMALL_3X3_GFLOP), where cuDNN was 0-9% faster with workspaces of at most 25 MiB (on CUDA in float32
# the models' forwards give those of 1 GFLOP or more to Winograd's form first: models.layers.conv2d_derived).
# A large 1x1 stride-1 convolution is one matrix product (cuBLAS).
MIN_OUTPUT_ELEMENTS = 2**20
SMALL_3X3_GFLOP = 2.0
# And where its grid is small enough to split its K steps (``splits_for``), 1x1 stride-1 ones too:
# at batch 1 (H100, 2026-11-27 14:20-14:27 UTC, float32) this took ResNet-50's peak memory under
# zoo.compiled's cap from 32 MiB (cuDNN's workspaces and cuBLASLt's split-K ones of 2-4 MiB, held
# to the end of each commit) to 19 MiB against PyTorch's 10, in 2.73 ms against 2.94 (speed-gpu.md).


def worth_it(x_shape, weight_shape, stride, padding) -> bool:
    """Whether a convolution of an NHWC input of ``x_shape`` with a (O, KH, KW, I) weight is
    one the models' compiled forwards run with this kernel (see above)."""
    n, h, w, ci = x_shape
    co, kh, kw, _ = weight_shape
    sh, sw = core.pair(stride)
    out_h, out_w = core.conv_output_size(x_shape, weight_shape, stride, padding)
    rows = n * out_h * out_w
    pointwise = (kh, kw) == (1, 1) and (sh, sw) == (1, 1) and core.pair(padding) == (0, 0)
    small_3x3 = (kh, kw) == (3, 3) and (sh, sw) == (1, 1) and min(ci, co) >= 32 \
        and 2 * n * h * w * 9 * ci * co < SMALL_3X3_GFLOP * 1e9
    large = rows * co >= MIN_OUTPUT_ELEMENTS and not small_3x3 and not pointwise
    split = splits_for(rows, co, k_steps(weight_shape), tiles_for(rows, co)) > 1
    return ci >= K_STEP and (large or split)


def conv2d(x: mx.array, weight: mx.array, bias: mx.array | None = None, stride=1, padding=0,
           activation: str | None = None, tiles: Tiles | None = None) -> mx.array:
    """activation(mx.conv2d(x, weight, stride, padding) + bias) for float32 NHWC x and an
    (O, KH, KW, I) weight; activation None, "relu" or "silu"; ``tiles`` overrides the tile choice."""
    x = core.nhwc_float_input("implicit_gemm conv2d", x)
    if x.dtype != mx.float32 or weight.dtype != mx.float32:
        raise ZooError(f"implicit_gemm conv2d: float32 only, got x {x.dtype} and weight {weight.dtype}")
    if weight.ndim != 4 or weight.shape[3] != x.shape[3]:
        raise ZooError(f"implicit_gemm conv2d: weight must be (O, KH, KW, {x.shape[3]}), got {tuple(weight.shape)}")
    if not fits(weight.shape, stride, padding, 1, 1):
        raise ZooError(f"implicit_gemm conv2d: input and output channels must be multiples of 4, "
                       f"got {x.shape[3]} and {weight.shape[0]}")
    if activation not in ACTIVATIONS:
        raise ZooError(f"implicit_gemm conv2d: activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
    (sh, sw), (ph, pw) = core.pair(stride), core.pair(padding)
    n, h, w, _ = x.shape
    co, kh, kw, _ = weight.shape
    out_h, out_w = core.conv_output_size(x.shape, weight.shape, stride, padding)
    if min(out_h, out_w, sh, sw) < 1 or min(ph, pw) < 0:
        raise ZooError(f"implicit_gemm conv2d: a {h}x{w} input with kernel {kh}x{kw}, stride {(sh, sw)} "
                       f"and padding {(ph, pw)} leaves no output")
    core.check_size("implicit_gemm conv2d input", x.size)
    core.check_size("implicit_gemm conv2d output", n * out_h * out_w * co)
    bias = core.constant((0.0,) * co, mx.float32) if bias is None else bias.astype(mx.float32)
    backend = core.native_backend()
    coverage.note("implicit_gemm conv2d", coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:
        return ACTIVATIONS[activation][1](mx.conv2d(x, weight, (sh, sw), (ph, pw)) + bias)
    launch = conv_launch(x, weight, bias, (sh, sw), (ph, pw), activation, tiles)
    (y,) = core.run(launch, backend)
    return y if len(y.shape) == 4 else added_runs(y, bias, activation)


def added_runs(partial: mx.array, bias: mx.array, activation: str | None) -> mx.array:
    """The output of a launch whose K steps were split: activation(sum of the runs + bias)."""
    return ACTIVATIONS[activation][1](partial.sum(axis=0) + bias)


def conv_launch(x: mx.array, weight: mx.array, bias: mx.array, stride, padding, activation: str | None = None,
                tiles: Tiles | None = None, splits: int | None = None) -> core.Launch:
    """The kernel's launch; ``tiles`` and ``splits`` (runs of K steps) override ``tiles_for`` and
    ``splits_for``. With splits > 1 its output is the runs' partial sums (``added_runs``)."""
    n, h, w, c = x.shape
    co, kh, kw, _ = weight.shape
    (sh, sw), (ph, pw) = stride, padding
    out_h, out_w = core.conv_output_size(x.shape, weight.shape, stride, padding)
    rows = n * out_h * out_w
    t = tiles or tiles_for(rows, co)
    splits = splits or splits_for(rows, co, k_steps(weight.shape), t)
    blocks = t.count(rows, co) * splits
    return core.Launch(
        kernel=CONV,
        inputs=(x, weight, bias, core.constant((h, w, c, out_h, out_w, co, rows), mx.int32)),
        template=(("KH", kh), ("KW", kw), ("SH", sh), ("SW", sw), ("PH", ph), ("PW", pw),
                  ("BM", t.bm), ("BN", t.bn), ("TM", t.tm), ("TN", t.tn),
                  ("ACTIVATION", ACTIVATIONS[activation][0]), ("SPLITS", splits)),
        grid=(blocks * t.threads, 1, 1),
        threadgroup=(t.threads, 1, 1),
        output_shapes=((n, out_h, out_w, co) if splits == 1 else (splits, n, out_h, out_w, co),),
        output_dtypes=(mx.float32,),
    )


def subpixel_fits(weight_shape, stride, padding, output_padding, dilation) -> bool:
    """A transposed convolution SUBPIXEL computes: an (O, 3, 3, I) weight (MLX's layout), stride 2,
    padding 1, output padding 1, no dilation, input and output channels multiples of 4."""
    o, kh, kw, i = weight_shape
    return (kh, kw) == (3, 3) and core.pair(stride) == (2, 2) and core.pair(padding) == (1, 1) \
        and core.pair(output_padding) == (1, 1) and core.pair(dilation) == (1, 1) and o % 4 == 0 and i % 4 == 0


def subpixel_preferred(dtype: mx.Dtype, weight_shape, stride, padding, output_padding, dilation) -> bool:
    """Whether the models' compiled forwards run such a transposed convolution with SUBPIXEL: in
    float32 on MLX's CUDA backend, where cuDNN's took a workspace (33-97 MiB for LaMa 512's three);
    float16 and Metal keep MLX's."""
    return core.native_backend() == "cuda" and dtype == mx.float32 \
        and subpixel_fits(weight_shape, stride, padding, output_padding, dilation)


def subpixel_weights(weight: mx.array) -> mx.array:
    """The (4, O, 2, 2, I) kernels of the output phases of a transposed convolution of an (O, 3, 3, I)
    weight, stride 2, padding 1: output row 2 i + rh sums input rows i + a (a = 0, 1) times kernel
    row rh + 1 - 2 a (none where that is -1), and so for columns; phase index 2 rh + rw."""
    zero = mx.zeros_like(weight[:, :1, :1])

    def tap(ky: int, kx: int) -> mx.array:
        return weight[:, ky:ky + 1, kx:kx + 1] if ky >= 0 and kx >= 0 else zero

    return mx.stack([mx.concatenate([mx.concatenate([tap(rh + 1 - 2 * a, rw + 1 - 2 * b) for b in (0, 1)], axis=2)
                                     for a in (0, 1)], axis=1)
                     for rh in (0, 1) for rw in (0, 1)])


def conv_transpose2d_subpixel(x: mx.array, phases: mx.array, bias: mx.array, activation: str | None = None,
                              tiles: Tiles | None = None) -> mx.array:
    """activation(mx.conv_transpose2d(x, weight, stride=2, padding=1, output_padding=1) + bias) for a
    float32 NHWC x, given ``subpixel_weights(weight)``: (N, H, W, C) -> (N, 2H, 2W, O)."""
    x = core.nhwc_float_input("implicit_gemm conv_transpose2d_subpixel", x)
    if x.dtype != mx.float32 or phases.dtype != mx.float32:
        raise ZooError(f"implicit_gemm conv_transpose2d_subpixel: float32 only, got x {x.dtype} and weight "
                       f"{phases.dtype}")
    if phases.ndim != 5 or phases.shape[0] != 4 or tuple(phases.shape[2:4]) != (2, 2) or phases.shape[4] != x.shape[3] \
            or not fits(phases.shape[1:], 1, 0, 1, 1):
        raise ZooError(f"implicit_gemm conv_transpose2d_subpixel: phases must be subpixel_weights of an (O, 3, 3, "
                       f"{x.shape[3]}) weight, O and the channels multiples of 4; got {tuple(phases.shape)}")
    if activation not in ACTIVATIONS:
        raise ZooError(f"implicit_gemm conv_transpose2d_subpixel: activation must be one of {list(ACTIVATIONS)}, "
                       f"got {activation!r}")
    n, h, w, _ = x.shape
    co = phases.shape[1]
    core.check_size("implicit_gemm conv_transpose2d_subpixel output", 4 * n * h * w * co)
    bias = bias.astype(mx.float32)
    backend = core.native_backend()
    coverage.note("implicit_gemm conv_transpose2d_subpixel",
                  coverage.MLX_OP if backend is None else coverage.CUSTOM_KERNEL)
    if backend is None:  # what the kernel computes, in MLX's ops: four convolutions, interleaved
        padded = mx.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))
        y = mx.stack([mx.conv2d(padded, phases[p]) for p in range(4)], axis=3)  # (N, H, W, 4, O)
        y = y.reshape(n, h, w, 2, 2, co).transpose(0, 1, 3, 2, 4, 5).reshape(n, 2 * h, 2 * w, co)
        return ACTIVATIONS[activation][1](y + bias)
    (y,) = core.run(subpixel_launch(x, phases, bias, activation, tiles), backend)
    return y


def subpixel_launch(x: mx.array, phases: mx.array, bias: mx.array, activation: str | None = None,
                    tiles: Tiles | None = None) -> core.Launch:
    """SUBPIXEL's launch: every phase's tiles, phase by phase."""
    n, h, w, c = x.shape
    co = phases.shape[1]
    rows = n * h * w
    t = tiles or tiles_for(4 * rows, co)
    return core.Launch(
        kernel=SUBPIXEL,
        inputs=(x, phases, bias, core.constant((h, w, c, h, w, co, rows), mx.int32)),
        template=(("KH", 2), ("KW", 2), ("SH", 1), ("SW", 1), ("PH", 0), ("PW", 0),
                  ("BM", t.bm), ("BN", t.bn), ("TM", t.tm), ("TN", t.tn),
                  ("ACTIVATION", ACTIVATIONS[activation][0]), ("SPLITS", 1)),
        grid=(4 * t.count(rows, co) * t.threads, 1, 1),
        threadgroup=(t.threads, 1, 1),
        output_shapes=((n, 2 * h, 2 * w, co),),
        output_dtypes=(mx.float32,),
    )
