"""zoo.kernels.cpu: the CPU forms match MLX's ops (and float64 maths) in every dtype; they give way
to MLX's ops inside mx.compile and with ZOO_KERNELS=fallback."""
import math
import platform
import re
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from conftest import pyproject
from zoo.kernels import coverage, cpu
from zoo.models import layers

ROOT = Path(__file__).parents[1]

pytestmark = pytest.mark.usefixtures("on_cpu")

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
# float32: a few ulp of the exact value (GELU: ~1e-6 where Phi is small, x ~ -3.4; MLX's own
# x (1 + erf(x / sqrt 2)) / 2 cancels there, to ~1e-4); half types: rounding the float32 result.
UNARY_TOL = {"float32": 4e-7, "float16": 1e-3, "bfloat16": 8e-3}
GELU_FLOAT32_TOL = 2e-6


@pytest.fixture
def on_cpu():
    previous = mx.default_device()
    mx.set_default_device(mx.cpu)
    yield
    mx.set_default_device(previous)


def test_native_routines_are_built_on_linux():
    if not sys.platform.startswith("linux"):
        pytest.skip("the C routines are compiled where the package is installed; checked on Linux")
    assert cpu.native_available()


def test_the_avx2_clone_of_the_c_ops_has_fma():
    """GCC builds one clone per name in target_clones: "avx2,fma" made an AVX2 clone without FMA
    (the one taken on an AVX2 CPU: GELU 1.6x slower). With GCC 12+ the AVX2 clone is x86-64-v3."""
    data = open(cpu._library()._name, "rb").read()
    gcc = re.search(rb"GCC: \([^)]*\) (\d+)\.", data)
    if platform.machine() != "x86_64" or not sys.platform.startswith("linux") or gcc is None or int(gcc.group(1)) < 12:
        pytest.skip("the x86-64-v3 clone is built by GCC 12+ on x86-64 Linux")
    assert b"activate.arch_x86_64_v3" in data and b"activate.avx2" not in data


def test_the_c_activations_are_built_to_vectorise():
    """GCC 12 without -fno-trapping-math kept the C activation loops scalar (their selects were not
    if-converted): the C SiLU took ~1.7x numpy's time, vectorised ~0.4x (2026-11-27, AMD EPYC,
    2 cores). The build keeps the flag (a check on the build, not a timing: a timing fails on a
    loaded machine), and the C SiLU still gives SiLU."""
    config = pyproject()
    modules = {m["name"]: m for m in config["tool"]["setuptools"]["ext-modules"]}
    assert "-fno-trapping-math" in modules["zoo.native.cpu_ops"]["extra-compile-args"]
    x = mx.random.normal((1, 32, 32, 16), key=mx.random.key(0))
    xn = np.array(x)
    np.testing.assert_allclose(np.array(cpu.silu(x)), xn / (1 + np.exp(-xn)), rtol=1e-5, atol=1e-6)


def _exact(name, x):
    erf = np.vectorize(math.erf)
    sig = 1 / (1 + np.exp(-x))
    return {"sigmoid": sig, "silu": x * sig, "gelu": x * 0.5 * (1 + erf(x / math.sqrt(2)))}[name]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sigmoid", "silu", "gelu"])
def test_activations_match_exact_maths(name, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(70_000) * 5).astype(np.float32)
    x[:8] = [0.0, -0.0, 90.0, -90.0, 1e-30, -20.0, 20.0, -6.0]
    xm = mx.array(x).astype(DTYPES[dtype])
    got = getattr(cpu, name)(xm)
    assert got.dtype == xm.dtype and got.shape == xm.shape
    exact = _exact(name, np.array(xm.astype(mx.float32)).astype(np.float64))
    err = np.abs(np.array(got.astype(mx.float32)) - exact) / np.maximum(np.abs(exact), 1e-3)
    tol = GELU_FLOAT32_TOL if (name, dtype) == ("gelu", "float32") else UNARY_TOL[dtype]
    assert err.max() <= tol, err.max()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("stride,padding,kernel,size", [(1, 1, 3, 9), (2, 1, 3, 9), (2, 1, 3, 8), (1, 0, 3, 7), (2, 2, 5, 11)])
def test_depthwise_matches_mlx(stride, padding, kernel, size, dtype):
    x = mx.random.normal((2, size, size + 1, 24), key=mx.random.key(1)).astype(DTYPES[dtype])
    w = mx.random.normal((24, kernel, kernel, 1), key=mx.random.key(2)).astype(DTYPES[dtype])
    got = cpu.depthwise_conv2d(x, w, stride, padding)
    want = mx.conv2d(x.astype(mx.float32), w.astype(mx.float32), stride=stride, padding=padding, groups=24)
    assert got.shape == want.shape and got.dtype == x.dtype
    tol = 1e-6 if dtype == "float32" else 1e-2
    assert mx.abs(got.astype(mx.float32) - want).max().item() <= tol * mx.abs(want).max().item()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,stride,padding,output_padding", [
    (3, 2, 1, 1),  # LaMa's upsampling
    (2, 2, 0, 0),  # SAM's output upscaling
    (4, 3, 1, 2), (3, 1, 1, 0), (1, 2, 0, 1), (5, 2, 2, 0),
])
def test_conv_transpose_matches_mlx(kernel, stride, padding, output_padding, dtype, monkeypatch):
    x = mx.random.normal((2, 5, 6, 7), key=mx.random.key(3)).astype(DTYPES[dtype])
    w = mx.random.normal((4, kernel, kernel, 7), key=mx.random.key(4)).astype(DTYPES[dtype])
    want = mx.conv_transpose2d(x.astype(mx.float32), w.astype(mx.float32), stride=stride, padding=padding,
                               output_padding=output_padding)
    for mode in ("native", "fallback"):  # fallback (the GPU's and traces' form), kernel == stride: GEMM + interleave
        monkeypatch.setenv("ZOO_KERNELS", "" if mode == "native" else "fallback")
        noted = []
        with coverage.listening(lambda op, impl: noted.append(op)):
            got = cpu.conv_transpose2d(x, w, stride, padding, output_padding)
        interleaved = mode == "fallback" and kernel == stride and (padding, output_padding) == (0, 0)
        assert noted == ["conv_transpose2d (GEMM + interleave)" if interleaved else "conv_transpose2d"], mode
        assert got.shape == want.shape and got.dtype == x.dtype, mode
        tol = 1e-6 if dtype == "float32" else 2e-2
        assert mx.abs(got.astype(mx.float32) - want).max().item() <= tol * mx.abs(want).max().item(), mode


@pytest.mark.parametrize("activation", list(cpu.ACTIVATIONS))
def test_tap_sums_apply_bias_and_activation(activation):
    """The transposed and the few-output convolutions sum their taps in one C pass with the bias and the
    activation (LaMa's upsamplings with their BatchNorm folded in, its last convolution)."""
    x = mx.random.normal((2, 9, 8, 16), key=mx.random.key(21)) * 3
    b = mx.random.normal((4,), key=mx.random.key(22))
    w = mx.random.normal((4, 3, 3, 16), key=mx.random.key(23))
    got = cpu.conv_transpose2d(x, w, 2, 1, 1, b, activation)
    want = MLX_ACTIVATIONS[activation](mx.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1) + b)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()
    w = mx.random.normal((4, 5, 5, 16), key=mx.random.key(24))
    got = cpu.conv2d_few_outputs(x, w, b, activation)
    want = MLX_ACTIVATIONS[activation](mx.conv2d(x, w) + b)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("dtype", DTYPES)
def test_few_output_conv_matches_mlx(dtype):
    x = mx.random.normal((1, 20, 17, 64), key=mx.random.key(5)).astype(DTYPES[dtype])
    w = mx.random.normal((3, 7, 7, 64), key=mx.random.key(6)).astype(DTYPES[dtype])
    got = cpu.conv2d_few_outputs(x, w)
    want = mx.conv2d(x.astype(mx.float32), w.astype(mx.float32))
    assert got.shape == want.shape and got.dtype == x.dtype
    tol = 1e-6 if dtype == "float32" else 2e-2
    assert mx.abs(got.astype(mx.float32) - want).max().item() <= tol * mx.abs(want).max().item()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,stride,padding,reflect,size", [
    (3, 1, 1, False, (9, 10)), (3, 2, 1, False, (9, 10)), (3, 2, 1, False, (8, 8)),
    (7, 2, 3, False, (12, 11)),  # ResNet's stem
    (5, 3, 2, False, (13, 12)), (3, 1, 0, False, (6, 7)),
    (3, 1, 1, True, (9, 10)), (3, 2, 1, True, (9, 8)), (7, 1, 3, True, (8, 9)),  # LaMa's reflect-padded convs
    (5, 1, 2, True, (2, 3)),  # reflect padding as wide as the map: MLX's pad, no read past the input
])
def test_conv2d_matches_mlx(kernel, stride, padding, reflect, size, dtype):
    x = mx.random.normal((2, *size, 5), key=mx.random.key(15)).astype(DTYPES[dtype])
    w = mx.random.normal((6, kernel, kernel, 5), key=mx.random.key(16)).astype(DTYPES[dtype])
    b = mx.random.normal((6,), key=mx.random.key(17)).astype(DTYPES[dtype])
    got = cpu.conv2d(x, w, b, stride, padding, reflect=reflect)
    x32 = x.astype(mx.float32)
    if reflect:
        x32 = mx.pad(x32, ((0, 0), (padding, padding), (padding, padding), (0, 0)), mode="reflect")
    want = mx.conv2d(x32, w.astype(mx.float32), stride=stride, padding=0 if reflect else padding) + b.astype(mx.float32)
    assert got.shape == want.shape and got.dtype == x.dtype
    tol = 1e-6 if dtype == "float32" else 2e-2
    assert mx.abs(got.astype(mx.float32) - want).max().item() <= tol * mx.abs(want).max().item()


MLX_ACTIVATIONS = {None: lambda y: y, "relu": nn.relu, "silu": nn.silu, "gelu": nn.gelu}


@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("outputs,stride,reflect,size,channels", [
    (32, 2, False, (37, 40), 3),  # TinyViT's stem: 3x3 stride 2 over 3 channels, 27-float patch rows
    (16, 2, False, (21, 20), 3), (5, 1, True, (9, 10), 3), (64, 1, False, (6, 5), 3),
    (64, 1, False, (5, 40), 3), (16, 2, False, (9, 70), 3),  # blocks of 16 pixels x 16 channels in registers
    (32, 2, False, (9, 70), 16), (64, 1, True, (7, 37), 28),  # wider rows into multiples of 16: YOLO's, LaMa's
])
def test_conv2d_of_short_patch_rows_matches_mlx(outputs, stride, reflect, size, channels, activation):
    # patch rows of at most 32 floats into at most 64 channels, or of up to 256 into a multiple of 16,
    # are multiplied in C instead of by sgemm
    x = mx.random.normal((2, *size, channels), key=mx.random.key(21))
    w = mx.random.normal((outputs, 3, 3, channels), key=mx.random.key(22))
    b = mx.random.normal((outputs,), key=mx.random.key(23))
    got = cpu.conv2d(x, w, b, stride, 1, reflect=reflect, activation=activation)
    padded = mx.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect") if reflect else x
    want = MLX_ACTIVATIONS[activation](mx.conv2d(padded, w, stride=stride, padding=0 if reflect else 1) + b)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("activation", list(cpu.ACTIVATIONS))
@pytest.mark.parametrize("kernel,stride,padding,size", [
    (1, 1, 0, (9, 10)),  # 1x1 stride 1: the input itself is the patch matrix
    (1, 2, 0, (9, 10)), (3, 1, 1, (9, 10)), (3, 2, 1, (8, 8)),
])
def test_conv2d_applies_bias_and_activation(kernel, stride, padding, size, activation):
    x = mx.random.normal((2, *size, 5), key=mx.random.key(18)) * 3
    w = mx.random.normal((6, kernel, kernel, 5), key=mx.random.key(19))
    b = mx.random.normal((6,), key=mx.random.key(20))
    got = cpu.conv2d(x, w, b, stride, padding, activation=activation)
    want = MLX_ACTIVATIONS[activation](mx.conv2d(x, w, stride=stride, padding=padding) + b)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("activation", list(cpu.ACTIVATIONS))
@pytest.mark.parametrize("kernel,stride,padding,channels", [(7, 2, 3, 3), (3, 1, 1, 16), (1, 1, 0, 16)])
def test_conv2d_keeps_nan_where_mlx_does(kernel, stride, padding, channels, activation):
    """A NaN (broken weights, an overflow) stays NaN through the C activation, as through MLX's and
    torch's: the C ReLU made it 0, and a ResNet with a NaN stem weight gave plausible classes on the CPU."""
    x = mx.random.normal((1, 12, 12, channels), key=mx.random.key(21))
    w = np.array(mx.random.normal((8, kernel, kernel, channels), key=mx.random.key(22)))
    w[0] = np.nan
    got = cpu.conv2d(x, mx.array(w), None, stride, padding, activation=activation)
    want = MLX_ACTIVATIONS[activation](mx.conv2d(x, mx.array(w), stride=stride, padding=padding))
    assert np.isnan(np.array(want)[..., 0]).all()
    np.testing.assert_array_equal(np.isnan(np.array(got)), np.isnan(np.array(want)))


@pytest.mark.parametrize("shared", [True, False])
def test_batched_matmul_matches_mlx(shared):
    """One left matrix for every product (LaMa's DFT over W) or one per product; above and below the
    size where the products run on several threads."""
    for batch, m, k, n in ((32, 68, 32, 192), (3, 4, 5, 6)):
        a = mx.random.normal((m, k) if shared else (batch, m, k), key=mx.random.key(28))
        b = mx.random.normal((batch, k, n), key=mx.random.key(29))
        got, want = cpu.batched_matmul(a, b), a @ b
        assert got.shape == want.shape
        assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("kernel", [1, 3])
def test_conv2d_adds_a_map_before_the_activation(kernel):
    """``residual`` is added to the product with the bias: LaMa's spectral conv2 added onto the local ->
    global convolution before their ReLU; the batch's images each alone."""
    x = mx.random.normal((2, 9, 10, 5), key=mx.random.key(25)) * 3
    w = mx.random.normal((6, kernel, kernel, 5), key=mx.random.key(26))
    bias = mx.random.normal((6,), key=mx.random.key(30))
    added = mx.random.normal((2, 9, 10, 6), key=mx.random.key(27)) * 3
    got = cpu.per_image(lambda image, start: cpu.conv2d(image, w, bias, 1, kernel // 2, activation="relu",
                                                        residual=start), x, added)
    want = nn.relu(mx.conv2d(x, w, padding=kernel // 2) + bias + added)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()
    with pytest.raises(ValueError, match="is not the output's shape"):
        cpu.conv2d(x, w, None, 1, kernel // 2, residual=added[:, :4])


@pytest.mark.parametrize("activation", list(cpu.ACTIVATIONS))
@pytest.mark.parametrize("size,padding,reflect,with_bias", [
    ((8, 8), 1, False, True), ((9, 7), 1, False, False),  # odd maps: half tiles on the last row and column
    ((7, 10), 0, False, True), ((9, 8), 1, True, True),  # LaMa's reflect-padded convolutions
    ((5, 6), 1, True, False), ((3, 3), 1, True, True),
])
def test_winograd_conv3x3_matches_mlx(size, padding, reflect, with_bias, activation):
    from zoo.kernels import winograd

    x = mx.random.normal((2, *size, 40), key=mx.random.key(27)) * 2
    w = mx.random.normal((36, 3, 3, 40), key=mx.random.key(28)) * 0.2
    b = mx.random.normal((36,), key=mx.random.key(29)) if with_bias else None
    got = cpu.winograd_conv3x3(x, winograd.transform_weight(w), b, padding, reflect, activation)
    xp = mx.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)), mode="reflect") if reflect else x
    y = mx.conv2d(xp, w, padding=0 if reflect else padding)
    want = MLX_ACTIVATIONS[activation](y if b is None else y + b)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("added", ["residual", "skip"])
@pytest.mark.parametrize("size", [(8, 8), (9, 7)])
def test_winograd_reads_a_channel_slice_and_adds_a_residual_or_a_skip(size, added):
    """Winograd's C form reads x where it lies when it is a channel slice of a map (C2f's halves), and
    adds a residual before the activation (ResNet's blocks) or a skip after it (YOLO's Bottleneck),
    itself a strided slice."""
    from zoo.kernels import winograd

    both = mx.random.normal((2, *size, 80), key=mx.random.key(46)) * 2
    x, other = mx.split(both, 2, axis=-1)
    w = mx.random.normal((40, 3, 3, 40), key=mx.random.key(47)) * 0.2
    b = mx.random.normal((40,), key=mx.random.key(48))
    got = cpu.winograd_conv3x3(x, winograd.transform_weight(w), b, 1, False, "silu", **{added: other})
    y = mx.conv2d(x, w, padding=1) + b
    want = MLX_ACTIVATIONS["silu"](y + other) if added == "residual" else MLX_ACTIVATIONS["silu"](y) + other
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


def test_conv2d_layer_takes_the_winograd_form_where_it_suits():
    """layers.Conv2d on the CPU: 3x3 stride-1 convolutions with WINOGRAD_MIN_CHANNELS a side run as
    Winograd's form (its weight transformed once, kept), except where the register-held direct form
    takes them (short patch rows into a multiple of 16 channels); others as patch rows."""
    least = cpu.WINOGRAD_MIN_CHANNELS
    for cin, cout, stride, form in [(least, least + 8, 1, "conv2d 3x3 (Winograd)"), (least, 16, 1, "conv2d"),
                                    (2 * least, 16, 1, "conv2d 3x3 (Winograd)"), (least - 1, least, 1, "conv2d"),
                                    (least, least, 2, "conv2d")]:
        conv = layers.Conv2d(cin, cout, 3, stride=stride, padding=1)
        x = mx.random.normal((1, 10, 12, cin), key=mx.random.key(30))
        noted = []
        with coverage.listening(lambda op, impl: noted.append(op)):
            got = conv(x)
        assert noted == [form], (cin, cout, stride)
        want = mx.conv2d(x, conv.weight, stride=stride, padding=1) + conv.bias
        assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("activation", list(cpu.ACTIVATIONS))
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_applies_bias_and_activation(stride, activation):
    x = mx.random.normal((1, 9, 8, 12), key=mx.random.key(21)) * 3
    w = mx.random.normal((12, 3, 3, 1), key=mx.random.key(22))
    b = mx.random.normal((12,), key=mx.random.key(23))
    for bias in (b, None):
        got = cpu.depthwise_conv2d(x, w, stride, 1, bias, activation)
        y = mx.conv2d(x, w, stride=stride, padding=1, groups=12)
        want = MLX_ACTIVATIONS[activation](y if bias is None else y + bias)
        assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [7, 1000])  # below and above cpu.LINEAR_MIN_ELEMENTS
def test_linear_matches_nn(tokens, dtype):
    lin = nn.Linear(24, 40)
    lin.set_dtype(DTYPES[dtype])
    fast = layers.Linear(24, 40)
    fast.update(lin.parameters())
    x = mx.random.normal((3, tokens, 24), key=mx.random.key(24)).astype(DTYPES[dtype])
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = fast(x)
    assert noted == ([("linear", coverage.CPU_FORM)] if x.size >= cpu.LINEAR_MIN_ELEMENTS else [])
    want = lin(x)
    assert got.shape == want.shape and got.dtype == x.dtype
    tol = 2e-6 if dtype == "float32" else 2e-2
    assert mx.abs(got.astype(mx.float32) - want.astype(mx.float32)).max().item() <= tol * mx.abs(want).max().item()


@pytest.mark.parametrize("activation", list(cpu.ACTIVATIONS))
@pytest.mark.parametrize("tokens", [7, 1000])  # below and above cpu.LINEAR_MIN_ELEMENTS
def test_linear_applies_the_activation(tokens, activation):
    x = mx.random.normal((3, tokens, 24), key=mx.random.key(31)) * 3
    w = mx.random.normal((40, 24), key=mx.random.key(32)) * 0.3
    b = mx.random.normal((40,), key=mx.random.key(33))
    got = cpu.linear(x, w, b, activation)
    want = MLX_ACTIVATIONS[activation](x @ w.T + b)
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("activation", list(cpu.ACTIVATIONS))
@pytest.mark.parametrize("channels,groups,kernel,stride", [
    (16, 1, 3, 1), (16, 1, 1, 1), (16, 1, 3, 2), (16, 16, 3, 1),
    (2 * cpu.WINOGRAD_MIN_CHANNELS, 1, 3, 1),  # the Winograd form
])
def test_conv_bn_folds_on_the_cpu_as_the_layers_compute_apart(channels, groups, kernel, stride, activation, residual):
    """layers.conv_bn on the CPU: one C convolution with the BatchNorm folded in, the residual added
    and the activation applied, against the same modules and the add run one after the other inside
    zoo.compiled.eager()."""
    from zoo.compiled import eager

    conv = layers.Conv2d(channels, channels if groups > 1 or channels > 16 else 8, kernel, stride=stride,
                         padding=kernel // 2, groups=groups, bias=False)
    bn = layers.BatchNorm(conv.weight.shape[0])
    keys = mx.random.split(mx.random.key(25), 4)
    bn.update({"weight": mx.random.uniform(0.5, 1.5, bn.weight.shape, key=keys[0]),
               "bias": mx.random.normal(bn.bias.shape, key=keys[1]),
               "running_mean": mx.random.normal(bn.running_mean.shape, key=keys[2]),
               "running_var": mx.random.uniform(0.5, 2.0, bn.running_var.shape, key=keys[3])})
    bn.eval()
    x = mx.random.normal((2, 9, 10, channels), key=mx.random.key(26)) * 2
    size = 9 // stride + 9 % stride, 10 // stride
    add = mx.random.normal((2, *size, conv.weight.shape[0]), key=mx.random.key(27)) if residual else None
    assert layers.fuses_on_cpu(conv, bn)
    noted = []
    with coverage.listening(lambda op, impl: noted.append(op)):
        got = layers.conv_bn(conv, bn, x, activation=activation, residual=add)
    assert "batch_norm (channel affine)" not in noted  # folded: no BatchNorm pass of its own
    with eager():
        assert not layers.fuses_on_cpu(conv, bn)
        want = bn(conv(x))
        want = cpu.ACTIVATION_OPS[activation](want if add is None else want + add)
    assert mx.abs(got - want).max().item() <= 4e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("kernel,stride,padding", [(3, 2, 1), (5, 1, 2), (2, 2, 0), (3, 1, 0)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [(112, 112), (7, 9), (3, 4)])
def test_max_pool_matches_mlx(kernel, stride, padding, size, dtype):
    """The C max-pool gives MLX's nn.MaxPool2d bit for bit: the padding never wins, NaN does (torch's
    max_pool2d), every dtype; layers.MaxPool2d takes it for a square window."""
    shape = (2, *size, 19)
    x = mx.random.normal(shape, key=mx.random.key(40)).astype(DTYPES[dtype])
    x = mx.where(mx.random.uniform(shape=shape, key=mx.random.key(41)) < 0.02, mx.array(float("nan"), x.dtype), x)
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = layers.MaxPool2d(kernel, stride, padding)(x)
    want = nn.MaxPool2d(kernel, stride, padding)(x)
    assert noted == [("max_pool2d", coverage.CPU_FORM)]
    assert got.dtype == x.dtype and got.shape == want.shape
    assert np.array_equal(np.array(got.astype(mx.float32)), np.array(want.astype(mx.float32)), equal_nan=True)


def test_a_linear_with_a_large_weight_takes_the_c_form_for_one_row():
    """A head such as ResNet-50's (one row an image) is one sgemm in C from LINEAR_MIN_WEIGHT weights."""
    features = math.isqrt(cpu.LINEAR_MIN_WEIGHT)
    lin = layers.Linear(features, features)
    x = mx.random.normal((1, features), key=mx.random.key(42))
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = lin(x)
    assert noted == [("linear", coverage.CPU_FORM)]
    want = mx.addmm(lin.bias, x, lin.weight.T)
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


def test_c_outputs_start_as_zeros_of_their_own():
    """The C routines' outputs (small ones copied from a read-only zero mapping, larger ones MLX's zeros):
    each is zeros and its own buffer."""
    for shape in [(3, 5), (cpu.ZERO_MAPPING_BYTES // 4 + 1,)]:
        first, second = cpu._output(shape), cpu._output(shape)
        mx.eval(first, second)
        cpu._view(first)[...] = 7
        assert mx.all(first == 7).item() and mx.all(second == 0).item() and mx.all(cpu._output(shape) == 0).item()


def test_layers_keep_nn_weights_and_results():
    """layers.Conv2d / ConvTranspose2d are nn's modules (same parameters, bias added) with other CPU maths."""
    x = mx.random.normal((1, 12, 12, 64), key=mx.random.key(7))
    for fast, plain in [(layers.Conv2d(64, 64, 3, stride=2, padding=1, groups=64, bias=True),
                         nn.Conv2d(64, 64, 3, stride=2, padding=1, groups=64, bias=True)),
                        (layers.Conv2d(64, 3, 7, bias=True), nn.Conv2d(64, 3, 7, bias=True)),
                        (layers.Conv2d(64, 16, 1, bias=True), nn.Conv2d(64, 16, 1, bias=True)),
                        (layers.Conv2d(64, 16, 3, stride=2, padding=1, bias=True),
                         nn.Conv2d(64, 16, 3, stride=2, padding=1, bias=True)),
                        (layers.ConvTranspose2d(64, 32, 3, stride=2, padding=1, output_padding=1),
                         nn.ConvTranspose2d(64, 32, 3, stride=2, padding=1, output_padding=1))]:
        assert isinstance(fast, type(plain))
        fast.update(plain.parameters())
        fast["bias"] = mx.arange(fast.bias.size).astype(mx.float32)
        plain["bias"] = fast.bias
        want = plain(x)
        assert mx.abs(fast(x) - want).max().item() <= 1e-5 * mx.abs(want).max().item()
    # SAM's upscaling: the 2x2 stride-2 transposed convolution with the GELU after it in its C pass
    fast, plain = layers.ConvTranspose2d(64, 32, 2, stride=2), nn.ConvTranspose2d(64, 32, 2, stride=2)
    fast.update(plain.parameters())
    want = nn.gelu(plain(x))
    assert mx.abs(fast(x, activation="gelu") - want).max().item() <= 1e-5 * mx.abs(want).max().item()


def test_inside_compile_and_on_request_mlx_runs(monkeypatch):
    x = mx.random.normal((4, 50), key=mx.random.key(8))
    compiled = mx.compile(lambda v: cpu.gelu(v) + cpu.silu(v) + cpu.sigmoid(v))
    want = nn.gelu(x) + nn.silu(x) + mx.sigmoid(x)
    assert mx.allclose(compiled(x), want, rtol=1e-5, atol=1e-6).item()
    calls = []
    monkeypatch.setenv("ZOO_KERNELS", "fallback")
    monkeypatch.setattr(cpu, "_host", lambda v: calls.append(v))
    assert mx.array_equal(cpu.gelu(x), nn.gelu(x)).item() and not calls


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_and_softmax_match_mlx(dtype):
    q, k, v = (mx.random.normal((3, 4, 49, 32), key=mx.random.key(i)).astype(DTYPES[dtype]) for i in (9, 10, 11))
    bias = mx.random.normal((4, 49, 49), key=mx.random.key(12)).astype(DTYPES[dtype])
    got = cpu.attention(q, k, v, 32**-0.5, bias)
    want = mx.fast.scaled_dot_product_attention(*(a.astype(mx.float32) for a in (q, k, v)), scale=32**-0.5,
                                                mask=bias.astype(mx.float32))
    tol = 1e-6 if dtype == "float32" else 2e-2
    assert got.dtype == q.dtype and mx.abs(got.astype(mx.float32) - want).max().item() <= tol * mx.abs(want).max().item()
    x = mx.array([[0.0, -mx.inf, 3.0, 100.0], [-1e3, -1e3, -1e3, -1e3]]).astype(DTYPES[dtype])
    assert mx.allclose(cpu.softmax(x).astype(mx.float32), mx.softmax(x.astype(mx.float32), axis=-1), atol=1e-7).item()


@pytest.mark.parametrize("mask_shape", [None, (6, 80), (3, 6, 80), (2, 1, 6, 80), (6, 1)])
def test_attention_of_other_lengths_and_masks_matches_mlx(mask_shape):
    # queries and keys of different lengths (the SAM decoder's cross-attention), values of another width;
    # a mask of whole trailing planes runs in C, one that broadcasts otherwise as MLX's ops
    q = mx.random.normal((2, 3, 6, 16), key=mx.random.key(30))
    k = mx.random.normal((2, 3, 80, 16), key=mx.random.key(31))
    v = mx.random.normal((2, 3, 80, 24), key=mx.random.key(32))
    mask = None if mask_shape is None else mx.random.normal(mask_shape, key=mx.random.key(33))
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = cpu.attention(q, k, v, 0.25, mask)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask)
    assert got.shape == (2, 3, 6, 24)
    assert mx.abs(got - want).max().item() <= 1e-6 * mx.abs(want).max().item()
    in_c = mask_shape in (None, (6, 80), (3, 6, 80))
    assert ("attention (per-head products and softmax)", coverage.CPU_FORM if in_c else coverage.MLX_OP) in noted
    keep = mx.random.uniform(key=mx.random.key(34), shape=(6, 80)) > 0.3  # a boolean mask: which keys count
    assert mx.allclose(cpu.attention(q, k, v, 0.25, keep),
                       mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=keep), atol=1e-6).item()


@pytest.mark.parametrize("mask_shape", [None, (7, 7), (3, 7, 7), (2, 7, 7)])
def test_attention_over_a_fused_qkv_matches_split_heads_and_attention(mask_shape):
    # TinyViT's layout: per token (heads, (q, k, v), D); the C form reads the heads where they lie and
    # writes each into its columns; a mask of other planes (2 for 3 heads) broadcasts as MLX's ops
    qkv = mx.random.normal((4, 7, 3 * 3 * 8), key=mx.random.key(35))
    mask = None if mask_shape is None else mx.random.normal(mask_shape, key=mx.random.key(36))
    q, k, v = (a.astype(mx.float32) for a in qkv.reshape(4, 7, 3, 3, 8).transpose(3, 0, 2, 1, 4))
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        if mask_shape == (2, 7, 7):
            with pytest.raises(ValueError):  # as MLX's attention refuses it
                mx.eval(cpu.qkv_attention(qkv, 3, 0.3, mask))
            return
        got = cpu.qkv_attention(qkv, 3, 0.3, mask)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask=mask).transpose(0, 2, 1, 3).reshape(4, 7, 24)
    assert got.shape == (4, 7, 24)
    assert mx.abs(got - want).max().item() <= 1e-6 * mx.abs(want).max().item()
    assert ("attention (heads of a fused qkv, products and softmax)", coverage.CPU_FORM) in noted


@pytest.mark.parametrize("batches", [(1, 1), (3, 1), (1, 3), (2, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_attention_of_heads_side_by_side_matches_mlx(batches, dtype):
    # the SAM decoder's layout: tokens (B, N, heads * D), k and v column slices of one merged projection
    # (rows 3 * heads * D floats apart), one side shared by every batch (B 1: batch stride 0), and a single
    # query row (its row stride unused)
    (bq, bk), heads, d = batches, 3, 8
    for nq in (5, 1):
        q = mx.random.normal((bq, nq, heads * d), key=mx.random.key(40)).astype(DTYPES[dtype])
        merged = mx.random.normal((bk, 70, 3 * heads * d), key=mx.random.key(41)).astype(DTYPES[dtype])
        k, v = merged[..., heads * d: 2 * heads * d], merged[..., 2 * heads * d:]
        noted = []
        with coverage.listening(lambda op, impl: noted.append((op, impl))):
            got = cpu.heads_attention(q, k, v, heads, 0.3)
        assert ("attention (heads where they lie, products and softmax)", coverage.CPU_FORM) in noted
        batch = max(bq, bk)
        split = [mx.broadcast_to(a.astype(mx.float32), (batch, *a.shape[1:])).reshape(batch, -1, heads, d)
                 .transpose(0, 2, 1, 3) for a in (q, k, v)]
        want = mx.fast.scaled_dot_product_attention(*split, scale=0.3).transpose(0, 2, 1, 3).reshape(batch, nq, -1)
        tol = 1e-6 if dtype == "float32" else 2e-3
        assert got.dtype == q.dtype and got.shape == (batch, nq, heads * d)
        assert mx.abs(got.astype(mx.float32) - want).max().item() <= tol * mx.abs(want).max().item()


@pytest.mark.parametrize("shape", [(1, 1, 6), (3, 1, 6), (2, 2, 6), (2, 1, 5)])  # 5 rows: not cut in shares
def test_rows_against_shared_keys_match_mlx(shape):
    # the SAM decoder's folded token-to-image attention: every prompt set's rows against one image's tokens
    b, bk, m = shape
    q = mx.random.normal((b, m, 24), key=mx.random.key(42))
    k = mx.random.normal((bk, 90, 24), key=mx.random.key(43))
    v = mx.random.normal((bk, 90, 40), key=mx.random.key(44))
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = cpu.shared_keys_attention(q, k, v, 0.2)
    assert ("attention (rows against shared keys, products and softmax)", coverage.CPU_FORM) in noted
    want = mx.fast.scaled_dot_product_attention(q[:, None], *(mx.broadcast_to(a, (b, *a.shape[1:]))[:, None]
                                                              for a in (k, v)), scale=0.2)[:, 0]
    assert got.shape == (b, m, 40)
    assert mx.abs(got - want).max().item() <= 1e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("rows", [3, 4099])  # MLX's addmm below LINEAR_MIN_ELEMENTS inputs, blocks of rows in C above
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_linear_adds_a_residual_before_its_activation(rows, activation):
    keys = iter(mx.random.split(mx.random.key(38), 4))
    x = mx.random.normal((1, rows, 40), key=next(keys))
    w, b = mx.random.normal((24, 40), key=next(keys)), mx.random.normal((24,), key=next(keys))
    residual = mx.random.normal((1, rows, 24), key=next(keys))
    want = MLX_ACTIVATIONS[activation](x @ w.T + b + residual)
    got = layers.Linear(40, 24)
    got.update({"weight": w, "bias": b})
    assert mx.abs(got(x, activation, residual=residual) - want).max().item() <= 2e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("size", [(1, 5, 6), (2, 9, 4)])
def test_inverted_residual_matches_its_convolutions(size):
    # expand 1x1, depthwise 3x3, project 1x1, GELU after each and after the residual; odd maps and a
    # batch whose images' rows the threads' bands cross
    n, h, w = size
    c, e = 16, 64
    keys = iter(mx.random.split(mx.random.key(37), 7))
    x = mx.random.normal((n, h, w, c), key=next(keys))
    expand = {"weight": mx.random.normal((e, 1, 1, c), key=next(keys)) * 0.3, "bias": mx.random.normal((e,), key=next(keys))}
    depthwise = {"weight": mx.random.normal((e, 3, 3, 1), key=next(keys)) * 0.3, "bias": mx.random.normal((e,), key=next(keys))}
    project = {"weight": mx.random.normal((c, 1, 1, e), key=next(keys)) * 0.2, "bias": mx.random.normal((c,), key=next(keys))}
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = cpu.inverted_residual(x, expand, depthwise, project, "gelu")
    y = nn.gelu(mx.conv2d(x, expand["weight"]) + expand["bias"])
    y = nn.gelu(mx.conv2d(y, depthwise["weight"], padding=1, groups=e) + depthwise["bias"])
    want = nn.gelu(x + mx.conv2d(y, project["weight"]) + project["bias"])
    assert ("inverted residual (expand, depthwise, project)", coverage.CPU_FORM) in noted
    assert mx.abs(got - want).max().item() <= 1e-5 * mx.abs(want).max().item()


@pytest.mark.parametrize("dtype", DTYPES)
def test_batchnorm_at_inference_matches_nn(dtype):
    plain, fast = nn.BatchNorm(24), layers.BatchNorm(24)
    keys = iter(mx.random.split(mx.random.key(13), 4))
    params = {"weight": mx.random.normal((24,), key=next(keys)), "bias": mx.random.normal((24,), key=next(keys)),
              "running_mean": mx.random.normal((24,), key=next(keys)),
              "running_var": mx.random.uniform(0.5, 2.0, (24,), key=next(keys))}
    for m in (plain, fast):
        m.update({k: v.astype(DTYPES[dtype]) for k, v in params.items()})
        m.eval()
    x = mx.random.normal((2, 9, 7, 24), key=mx.random.key(14)).astype(DTYPES[dtype])
    want = plain.update({k: v for k, v in params.items()})(x.astype(mx.float32))
    got = fast(x)
    tol = 1e-6 if dtype == "float32" else 1e-2
    assert got.dtype == x.dtype and mx.abs(got.astype(mx.float32) - want).max().item() <= tol * mx.abs(want).max().item()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [(8, 8), (6, 10), (5, 7)])
def test_fft_parts_match_float64_and_mlx(size, dtype, monkeypatch):
    """rfft2_parts / irfft2_parts (numpy's FFT on the CPU) against float64 maths, and MLX's own FFT
    (the path everywhere else) against the same."""
    x = mx.random.normal((2, *size, 6), key=mx.random.key(18)).astype(DTYPES[dtype])
    x64 = np.array(x.astype(mx.float32)).astype(np.float64)
    spectrum = np.fft.rfft2(x64, axes=(1, 2), norm="ortho")
    want = np.stack([spectrum.real, spectrum.imag], axis=-1).reshape(2, size[0], size[1] // 2 + 1, 12)
    back = np.fft.irfft2(spectrum * 0.5, s=size, axes=(1, 2), norm="ortho")
    for mode in ("native", "fallback"):
        monkeypatch.setenv("ZOO_KERNELS", "" if mode == "native" else "fallback")
        parts = cpu.rfft2_parts(x)
        assert parts.dtype == mx.float32 and parts.shape == want.shape
        assert np.abs(np.array(parts) - want).max() <= 1e-6 * np.abs(want).max()
        got = cpu.irfft2_parts(parts * 0.5, size)
        assert got.dtype == mx.float32 and got.shape == back.shape
        assert np.abs(np.array(got) - back).max() <= 1e-6 * np.abs(back).max()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [5, 64, 160, 331])
def test_layer_norm_matches_float64(cols, dtype):
    x = (mx.random.normal((3, 7, cols), key=mx.random.key(19)) * 4 + 3).astype(DTYPES[dtype])
    w, b = (mx.random.normal((cols,), key=mx.random.key(i)).astype(DTYPES[dtype]) for i in (20, 21))
    x64, w64, b64 = (np.array(a.astype(mx.float32)).astype(np.float64) for a in (x, w, b))
    norm = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-6)
    tol = 2e-6 if dtype == "float32" else UNARY_TOL[dtype] * 2
    for got, want in [(cpu.layer_norm(x, w, b, 1e-6), norm * w64 + b64), (cpu.layer_norm(x, None, None, 1e-6), norm)]:
        assert got.dtype == x.dtype and got.shape == x.shape
        assert np.abs(np.array(got.astype(mx.float32)) - want).max() <= tol * np.abs(want).max()
    fast, plain = layers.LayerNorm(cols, eps=1e-6), nn.LayerNorm(cols, eps=1e-6)
    fast.update({"weight": w, "bias": b})
    plain.update({"weight": w, "bias": b})
    assert mx.abs(fast(x).astype(mx.float32) - plain(x).astype(mx.float32)).max().item() <= tol * np.abs(norm * w64 + b64).max() * 4
    # the GELU after it (SAM's LayerNorm2d, GELU) applied by the same pass
    want = _exact("gelu", norm * w64 + b64)
    got = fast(x, activation="gelu")
    assert got.dtype == x.dtype
    assert np.abs(np.array(got.astype(mx.float32)) - want).max() <= tol * np.abs(want).max() * 2


@pytest.mark.parametrize("bias_shape", [None, (49,), (4, 49, 49), (2, 4, 49, 49), (1, 49)])
def test_scaled_softmax_with_bias_matches_mlx(bias_shape):
    x = mx.random.normal((2, 4, 49, 49), key=mx.random.key(22)) * 3
    bias = None if bias_shape is None else mx.random.normal(bias_shape, key=mx.random.key(23))
    want = mx.softmax(x * 0.25 + (0 if bias is None else bias), axis=-1, precise=True)
    assert mx.abs(cpu.softmax(x, 0.25, bias) - want).max().item() <= 1e-6


@pytest.mark.parametrize("mode", ["native", "fallback"])  # fallback: the GPU's form
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_split_heads_matches_transpose(parts, dtype, mode, monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_KERNELS", "" if mode == "native" else "fallback")
    x = mx.random.normal((3, 11, 4 * parts * 8), key=mx.random.key(24)).astype(DTYPES[dtype])
    got = cpu.split_heads(x, 4, parts)
    want = x.reshape(3, 11, 4, parts, 8).transpose(3, 0, 2, 1, 4)
    assert len(got) == parts
    for i, part in enumerate(got):
        assert part.dtype == x.dtype and mx.array_equal(part, want[i]).item()
    if mode == "fallback":  # views of x: no gather (nor any other op that copies) on the GPU
        mx.export_to_dot(str(tmp_path / "graph.dot"), *cpu.split_heads(x, 4, parts))
        ops = set(re.findall(r'label ="([^"]+)", shape=rectangle', (tmp_path / "graph.dot").read_text()))
        assert ops <= {"Reshape", "Slice", "Squeeze", "Transpose"}, ops


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size,window", [((14, 14), 7), ((16, 13), 7), ((5, 9), 4), ((3, 3), 7)])
def test_windows_match_pad_and_transpose(size, window, dtype, monkeypatch):
    x = mx.random.normal((2, *size, 6), key=mx.random.key(25)).astype(DTYPES[dtype])
    got = cpu.window_partition(x, window)
    back = cpu.window_merge(got * 2, size, window)
    monkeypatch.setenv("ZOO_KERNELS", "fallback")
    want = cpu.window_partition(x, window)
    assert got.dtype == x.dtype and got.shape == want.shape and mx.array_equal(got, want).item()
    assert back.dtype == x.dtype and mx.array_equal(back, x * 2).item()
    assert mx.array_equal(cpu.window_merge(want * 2, size, window), x * 2).item()


@pytest.mark.parametrize("conv", [layers.Conv2d(16, 32, 3, padding=1), layers.Conv2d(16, 32, 1),
                                  layers.Conv2d(16, 32, 3, stride=2, padding=1)])
def test_a_batch_gives_each_image_its_batch_of_one_result(conv):
    # bit for bit: OpenBLAS computes a GEMM's last rows with another kernel, which on an AMD EPYC
    # changed their last bits when a convolution's GEMM spanned the batch (cpu.per_image)
    x = mx.array(np.random.default_rng(5).standard_normal((3, 37, 29, 16)).astype(np.float32))
    batched = np.array(conv(x))
    for i in range(3):
        np.testing.assert_array_equal(batched[i:i + 1], np.array(conv(x[i:i + 1])))


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_results_do_not_depend_on_the_thread_count(threads, monkeypatch):
    """The C routines' threads take blocks of a range in turn (workers that stay, started pinned to other
    CPUs where there are enough): every output must be the one thread's, bit for bit, whichever thread
    took which block, however a packed product's tiles fall; sizes above the routines' one-thread grain,
    rows not a multiple of the blocks."""
    from zoo.kernels import winograd

    rng = np.random.default_rng(3)
    x = mx.array(rng.standard_normal((1, 62, 54, 64)).astype(np.float32))
    w = mx.array((rng.standard_normal((48, 3, 3, 64)) * 0.1).astype(np.float32))
    depthwise = mx.array(rng.standard_normal((64, 3, 3, 1)).astype(np.float32))
    bias = mx.array(rng.standard_normal(48).astype(np.float32))

    def outputs():
        return [cpu.gelu(x), cpu.silu(x), cpu.softmax(x, 0.5), cpu.layer_norm(x, None, None, 1e-5),
                cpu.depthwise_conv2d(x, depthwise, 1, 1, activation="gelu"),
                cpu.conv2d(x, w, bias, 2, 1, activation="silu"),
                cpu.conv2d(x, w, bias, 2, 1, activation="silu", packed=cpu.pack(w)),
                cpu.winograd_conv3x3(x, winograd.transform_weight(w), bias, 1, False, "relu"),
                cpu.winograd_conv3x3(x, winograd.transform_weight(w), bias, 1, False, "relu",
                                     packed=cpu.pack_winograd(winograd.transform_weight(w))),
                cpu.window_partition(x, 7), cpu.max_pool2d(x, 3, 2, 1),
                cpu.batched_matmul(x.reshape(-1, 64), mx.swapaxes(w.reshape(1, 48, -1)[:, :, :64], 1, 2))]

    monkeypatch.setattr(cpu, "_threads", lambda: 1)
    one = outputs()
    monkeypatch.setattr(cpu, "_threads", lambda: threads)
    for name, a, b in zip(["gelu", "silu", "softmax", "layer_norm", "depthwise", "conv2d", "conv2d packed", "winograd",
                           "winograd packed", "window", "max_pool", "matmul"],
                          one, outputs()):
        assert a.shape == b.shape and mx.array_equal(a, b).item(), name


def test_winograd_products_leave_openblas_threads_as_they_were(monkeypatch):
    """The C Winograd form runs its 16 products one per thread of its own, OpenBLAS on one thread
    meanwhile: OpenBLAS's thread count is put back after the call."""
    from zoo import blas
    from zoo.kernels import winograd

    if blas.info().get("threads") is None:
        pytest.skip("OpenBLAS is not loaded")
    before = blas.info()["threads"]
    x = mx.random.normal((1, 32, 32, 64), key=mx.random.key(1))
    u = winograd.transform_weight(mx.random.normal((64, 3, 3, 64), key=mx.random.key(2)))
    try:
        for threads in (2, 3):
            blas.set_threads(threads)
            monkeypatch.setattr(cpu, "_threads", lambda: threads)
            assert cpu.winograd_conv3x3(x, u, None, 1) is not None
            assert blas.info()["threads"] == threads
    finally:
        blas.set_threads(before)


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("size", [(6, 10), (40, 52)])  # one tile; tiles over rows and threads
def test_pointwise_parts_equal_the_convolution_of_their_concatenation(size, activation):
    """A 1x1 convolution of a channel concatenation read where its parts lie: two halves of one map
    (strided views), a map of its own, and a half-size part's product added upsampled 2x (nearest)."""
    rng = np.random.default_rng(43)
    h, w = size
    both = mx.array(rng.standard_normal((2, h, w, 32)).astype(np.float32))
    first, second = mx.split(both, 2, axis=-1)
    other = mx.array(rng.standard_normal((2, h, w, 24)).astype(np.float32))
    small = mx.array(rng.standard_normal((2, h // 2, w // 2, 8)).astype(np.float32))
    weight = mx.array(rng.standard_normal((40, 1, 1, 64)).astype(np.float32))
    bias = mx.array(rng.standard_normal(40).astype(np.float32))
    half = cpu.conv2d(small, weight[..., :8])  # the upsampled part's columns come first
    got = cpu.pointwise_parts([first, second, other], [8, 24, 40], weight, bias, activation, half=half)
    upsampled = mx.repeat(mx.repeat(small, 2, axis=1), 2, axis=2)
    want = cpu.ACTIVATION_OPS[activation](mx.conv2d(mx.concatenate([upsampled, first, second, other], -1), weight) + bias)
    assert got.shape == want.shape
    assert mx.abs(got - want).max().item() <= 4e-6 * mx.abs(want).max().item()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("classes,bins", [(80, 16), (3, 8)])
def test_box_decode_matches_the_kernels_mlx_ops(classes, bins, dtype):
    """The C decode of a detection head gives zoo.kernels.box_decode's MLX ops' result: boxes from the
    DFL integral and the cells' centres, sigmoid scores, levels of other sizes and strides."""
    from zoo.kernels import box_decode

    rng = np.random.default_rng(44)
    sizes = [(8, 6), (4, 3), (2, 2)]
    boxes = [mx.array(rng.standard_normal((2, h, w, 4 * bins)).astype(np.float32) * 3).astype(DTYPES[dtype])
             for h, w in sizes]
    scores = [mx.array(rng.standard_normal((2, h, w, classes)).astype(np.float32) * 3).astype(DTYPES[dtype])
              for h, w in sizes]
    weights = mx.array(rng.uniform(0, bins, bins).astype(np.float32))
    got = cpu.box_decode(boxes, scores, weights, (8, 16, 32))
    want = box_decode._fallback(boxes, scores, weights, (8, 16, 32))
    assert got.dtype == want.dtype and got.shape == want.shape == (2, 64, 4 + classes)
    scale = mx.maximum(mx.abs(want.astype(mx.float32)).max(axis=(0, 1)), 1.0)
    tol = 2e-6 if dtype == "float32" else 2e-3
    assert (mx.abs(got.astype(mx.float32) - want.astype(mx.float32)) / scale).max().item() <= tol


@pytest.mark.parametrize("m,n,k", [(32, 6528, 64), (1100, 300, 40), (3, 5, 7)])
def test_tiled_matmul_matches_mlx(m, n, k):
    """cpu.batched_matmul of large products (LaMa's Fourier units' products over H, the transposed
    convolutions' tap products): tiles of rows and columns over the threads."""
    rng = np.random.default_rng(45)
    a = mx.array(rng.standard_normal((m, k)).astype(np.float32))
    b = mx.array(rng.standard_normal((2, k, n)).astype(np.float32))
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = cpu.batched_matmul(a, b)
    assert noted == [("matmul (batched)", coverage.CPU_FORM)]
    want = a @ b
    assert got.shape == want.shape and mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()


def _packs() -> bool:
    return bool(cpu.native_available() and cpu._library().zoo_packs())


@pytest.mark.parametrize("shape", [
    (1, 7, 7, 64, 80, 1, 1, 1, 0),  # 49 rows: blocks of 6 and one; 80 outputs: two panels and a half
    (1, 14, 14, 48, 40, 1, 1, 1, 0),  # 40 outputs: a panel and a narrow one through the scratch block
    (2, 9, 11, 32, 16, 3, 3, 2, 1),  # a 3x3 stride 2 (patch rows), 16 outputs: half a panel
    (1, 48, 50, 20, 70, 1, 1, 1, 0),  # 2400 rows: tiles of rows over the threads
    (1, 3, 3, 130, 5, 3, 3, 1, 1),  # 5 outputs over 1170-float patch rows
])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_packed_products_match_openblas(shape, activation):
    """The C library's own products with a packed weight (cpu.pack) give OpenBLAS's sgemm's result
    (to float rounding: the sums run in another order), with the bias, a residual and the activation,
    on every row and output channel whatever the blocks and panels; on a host without AVX2 nothing is
    packed and OpenBLAS multiplies."""
    n, h, w, c, o, kh, kw, stride, pad = shape
    rng = np.random.default_rng(46)
    x = mx.array(rng.standard_normal((n, h, w, c)).astype(np.float32))
    weight = mx.array((rng.standard_normal((o, kh, kw, c)) / math.sqrt(kh * kw * c)).astype(np.float32))
    bias = mx.array(rng.standard_normal(o).astype(np.float32))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    residual = mx.array(rng.standard_normal((n, oh, ow, o)).astype(np.float32))
    packed = cpu.pack(weight)
    if not _packs():
        assert packed is None
        return
    assert packed is not None and packed.size == math.ceil(o / 32) * 32 * kh * kw * c
    got = cpu.conv2d(x, weight, bias, stride, pad, activation=activation, residual=residual, packed=packed)
    want = cpu.conv2d(x, weight, bias, stride, pad, activation=activation, residual=residual)
    assert got.shape == want.shape == (n, oh, ow, o)
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()
    # the products are the packed weight's: a zero one leaves the bias and the residual
    zero = cpu.conv2d(x, weight, bias, stride, pad, activation=activation, residual=residual, packed=np.zeros_like(packed))
    assert mx.array_equal(zero, cpu.ACTIVATION_OPS[activation](bias + residual)).item()


def test_packed_forms_of_parts_winograd_and_linear_match_openblas():
    """The packed weight in the other C forms: a 1x1 of parts read where they lie (their columns at their
    offsets of the packed weight), Winograd's 16 products (cpu.pack_winograd) and a Linear."""
    from zoo.kernels import winograd

    rng = np.random.default_rng(47)
    both = mx.array(rng.standard_normal((1, 20, 18, 64)).astype(np.float32))
    first, second = mx.split(both, 2, axis=-1)
    weight = mx.array((rng.standard_normal((80, 1, 1, 64)) * 0.1).astype(np.float32))
    bias = mx.array(rng.standard_normal(80).astype(np.float32))
    u = winograd.transform_weight(mx.array((rng.standard_normal((48, 3, 3, 32)) * 0.1).astype(np.float32)))
    linear = layers.Linear(96, 200)
    tokens = mx.array(rng.standard_normal((1, 700, 96)).astype(np.float32))
    packed, packed_u = cpu.pack(weight), cpu.pack_winograd(u)
    if not _packs():
        assert packed is None and packed_u is None
        return
    pairs = [(cpu.pointwise_parts([second, first], [0, 32], weight, bias, "silu", packed=packed),
              cpu.pointwise_parts([second, first], [0, 32], weight, bias, "silu")),
             (cpu.winograd_conv3x3(first, u, bias[:48], 1, activation="relu", packed=packed_u),
              cpu.winograd_conv3x3(first, u, bias[:48], 1, activation="relu")),
             (linear(tokens), cpu.linear(tokens, linear.weight, linear.bias))]
    for got, want in pairs:
        assert got.shape == want.shape
        assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item()
    assert linear.__dict__["_packed"][1] is not None  # the Linear kept its packed weight


def test_a_forked_child_runs_the_c_routines_on_workers_of_its_own():
    """The C routines' workers stay for the next call; a forked child has none of them (only the thread
    that forked): its calls over several threads must start their own and give the same result."""
    import os

    lib = cpu._library()
    rng = np.random.default_rng(48)
    x = np.ascontiguousarray(rng.standard_normal((1, 64, 64, 32)).astype(np.float32))

    def pooled() -> np.ndarray:
        y = np.zeros((1, 32, 32, 32), np.float32)
        lib.zoo_max_pool2d_f32(x.ctypes.data_as(cpu._PTR), y.ctypes.data_as(cpu._PTR), 1, 64, 64, 32, 3, 2, 1, 32, 32,
                               2)
        return y

    want = pooled()  # the parent's workers started
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # no MLX here: its threads are not in the child either
        try:
            ok = all(np.array_equal(pooled(), want) for _ in range(3))
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    assert os.read(read, 1) == b"1" and os.WEXITSTATUS(status) == 0


# A child process's check that the packed level is sys.argv[1] and that the convolutions then give OpenBLAS's
# result (the form is chosen once per process); it prints the debug line's CPU forms, then "ok"
PACKED_LEVEL_CHECK = """
import math, sys
import numpy as np
import zoo, mlx.core as mx
from zoo import blas
from zoo.kernels import cpu
assert cpu._library().zoo_packs() == int(sys.argv[1])
rng = np.random.default_rng(49)
for n, h, w, c, o, k, stride in [(1, 7, 7, 64, 80, 1, 1), (1, 14, 14, 48, 40, 1, 1), (2, 9, 11, 32, 16, 3, 2),
                                 (1, 48, 50, 20, 70, 1, 1)]:
    x = mx.array(rng.standard_normal((n, h, w, c)).astype(np.float32))
    weight = mx.array((rng.standard_normal((o, k, k, c)) / math.sqrt(k * k * c)).astype(np.float32))
    bias = mx.array(rng.standard_normal(o).astype(np.float32))
    packed = cpu.pack(weight)
    assert (packed is None) == (sys.argv[1] == "0")
    got = cpu.conv2d(x, weight, bias, stride, k // 2, activation="relu", packed=packed)
    want = cpu.conv2d(x, weight, bias, stride, k // 2, activation="relu")
    assert mx.abs(got - want).max().item() <= 2e-6 * mx.abs(want).max().item(), (n, h, w, c, o, k)
    if packed is not None:  # the products are the packed weight's
        zero = cpu.conv2d(x, weight, bias, stride, k // 2, packed=np.zeros_like(packed))
        assert mx.array_equal(zero, mx.broadcast_to(bias, zero.shape)).item()
print(blas.cpu_forms())
print("ok")
"""


@pytest.mark.parametrize("chosen,level", [("halves", 1), ("off", 0)])
def test_zoo_packed_chooses_the_form_of_an_avx2_cpu_or_none(chosen, level):
    """ZOO_PACKED=halves runs the packed products as an AVX2 CPU does (half a panel at a time, 12
    registers of sums), ZOO_PACKED=off leaves them to OpenBLAS; either way the convolutions give
    OpenBLAS's result (a child process of its own)."""
    import os
    import subprocess

    if not _packs():
        assert cpu.pack(mx.zeros((8, 1, 1, 8))) is None
        return
    done = subprocess.run([sys.executable, "-c", PACKED_LEVEL_CHECK, str(level)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "ZOO_PACKED": chosen})
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


def test_the_avx2_emulation_runs_a_build_held_to_avx2(tmp_path):
    """benchmarks/avx2_emulation.py (the stand-in for an AVX2 host in docs/speed-cpu.md) builds the C
    routines for x86-64-v3 with no clones and runs a script on that build: it says so in the debug line,
    takes the AVX2 packed form without ZOO_PACKED, and gives OpenBLAS's results."""
    import subprocess

    if not _packs():  # no AVX2 build to hold it to (not x86-64 with GCC 12, or no AVX2 here)
        assert cpu._library() is None or cpu._library().zoo_packs() == 0
        return
    script = tmp_path / "check.py"
    script.write_text(PACKED_LEVEL_CHECK)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "avx2_emulation.py"), str(script), "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr
    assert "avx2 (one level, as compiled), weight products zoo's, half panels (AVX2)" in done.stdout
    assert "OPENBLAS_CORETYPE=Haswell" in done.stderr and "ATEN_CPU_CAPABILITY=avx2" in done.stderr
