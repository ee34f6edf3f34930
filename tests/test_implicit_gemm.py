"""zoo.kernels.implicit_gemm: float32 convolution as one implicit-GEMM kernel. Its MLX-op form (the
CPU and fallback path) against the numpy reference, its errors, where the models use it, and the
models' compiled forwards taking it against their eager forwards. The native kernel: the Metal
shim test (test_kernels_metal_shim.py) on the CPU, ``python -m zoo.kernels.selftest`` on a GPU."""
import mlx.core as mx
import numpy as np
import pytest

import zoo
from zoo.compiled import eager
from zoo.errors import ZooError
from zoo.kernels import core, coverage, implicit_gemm
from zoo.validate.reference import kernels as ref


@pytest.mark.parametrize("shape, out_channels, kernel, stride, padding, activation", [
    ((2, 9, 7, 8), 12, 3, 2, 1, "silu"),
    ((1, 12, 12, 4), 4, 7, 1, 3, None),
    ((1, 6, 5, 16), 8, 1, 2, 0, "relu"),
])
def test_mlx_form_equals_direct_convolution(shape, out_channels, kernel, stride, padding, activation):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, kernel, kernel, shape[-1])).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    got = implicit_gemm.conv2d(mx.array(x), mx.array(weight), mx.array(bias), stride, padding, activation)
    want = ref.conv2d_activated(x, weight, bias, padding, activation, stride)
    assert got.shape == want.shape and got.dtype == mx.float32
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


def test_bad_inputs_are_named():
    x, w = mx.zeros((1, 4, 4, 8)), mx.zeros((4, 3, 3, 8))
    with pytest.raises(ZooError, match="float32 only"):
        implicit_gemm.conv2d(x.astype(mx.float16), w)
    with pytest.raises(ZooError, match=r"\(O, KH, KW, 8\)"):
        implicit_gemm.conv2d(x, mx.zeros((4, 3, 3, 6)))
    with pytest.raises(ZooError, match="multiples of 4"):
        implicit_gemm.conv2d(mx.zeros((1, 4, 4, 6)), mx.zeros((4, 3, 3, 6)))
    with pytest.raises(ZooError, match="leaves no output"):
        implicit_gemm.conv2d(mx.zeros((1, 2, 2, 8)), w)
    with pytest.raises(ZooError, match="activation must be one of"):
        implicit_gemm.conv2d(x, w, activation="gelu")
    with pytest.raises(ValueError, match="unusable tiles"):
        implicit_gemm.Tiles(64, 64, 8, 3)


def test_preferred_only_for_float32_on_cuda(monkeypatch):
    args = ((64, 3, 3, 32), 2, 1, 1, 1)
    assert not implicit_gemm.preferred(mx.float32, *args)  # the CPU: MLX's convolution (or zoo's CPU form)
    monkeypatch.setattr(core, "native_backend", lambda: "cuda")
    assert implicit_gemm.preferred(mx.float32, *args)
    assert implicit_gemm.preferred(mx.float32, (64, 1, 1, 32), 2, 0, 1, 1)  # ResNet's strided 1x1
    assert implicit_gemm.preferred(mx.float32, (64, 1, 1, 32), 1, 0, 1, 1)  # a matmul: worth_it decides
    assert not implicit_gemm.preferred(mx.float16, *args)  # cuDNN's float16 engines are fast
    assert not implicit_gemm.preferred(mx.float32, (64, 3, 3, 1), 1, 1, 64, 1)  # grouped
    assert not implicit_gemm.preferred(mx.float32, (3, 7, 7, 64), 1, 0, 1, 1)  # 3 outputs
    monkeypatch.setattr(core, "native_backend", lambda: "metal")
    assert not implicit_gemm.preferred(mx.float32, *args)


def test_worth_it_where_it_beat_cudnn():
    assert implicit_gemm.worth_it((16, 320, 320, 16), (32, 3, 3, 16), 2, 1)  # YOLOv8n b16 model.1
    assert implicit_gemm.worth_it((16, 160, 160, 16), (16, 3, 3, 16), 1, 1)  # thin: cuDNN took 2.4x longer
    assert not implicit_gemm.worth_it((16, 80, 80, 32), (32, 3, 3, 32), 1, 1)  # small stride-1 3x3
    assert not implicit_gemm.worth_it((1, 160, 160, 32), (64, 3, 3, 32), 1, 1)  # 400 tiles, small 3x3
    # batch 1: a grid of few tiles, its K steps split in runs (no cuDNN workspace)
    assert implicit_gemm.worth_it((1, 80, 80, 64), (64, 3, 3, 64), 2, 1)
    assert implicit_gemm.worth_it((1, 7, 7, 512), (512, 3, 3, 512), 1, 1)  # ResNet-50's last stage
    assert implicit_gemm.worth_it((1, 7, 7, 2048), (512, 1, 1, 2048), 1, 0)  # its 1x1 (cuBLASLt: a workspace)
    assert not implicit_gemm.worth_it((32, 56, 56, 64), (256, 1, 1, 64), 1, 0)  # a large 1x1: cuBLAS's GEMM
    assert not implicit_gemm.worth_it((1, 518, 518, 4), (64, 7, 7, 4), 1, 0)  # 4 channels: half a slice


def test_few_tiles_split_their_k_steps_within_bounds():
    small = implicit_gemm.TILES_SMALL
    # ResNet-50 b1's 7x7 stage: 8 tiles, 576 steps -> 33 runs (264 threadgroups), 3.3 MiB of partial sums
    assert implicit_gemm.splits_for(49, 512, 576, small) == 33
    assert implicit_gemm.splits_for(49, 512, 40, small) == 5  # runs of at least 8 steps
    assert implicit_gemm.splits_for(3136, 64, 72, small) == 5  # partial sums of at most 4 MiB
    assert implicit_gemm.splits_for(200 * 64, 128, 576, small) == 1  # 400 tiles: every multiprocessor busy


def test_tiles_follow_the_output_shape():
    assert implicit_gemm.tiles_for(102400, 32) == implicit_gemm.TILES_NARROW
    assert implicit_gemm.tiles_for(102400, 128) == implicit_gemm.TILES_WIDE
    assert implicit_gemm.tiles_for(4096, 128) == implicit_gemm.TILES_SMALL  # 64 wide tiles: too few


@pytest.mark.parametrize("name, side", [("resnet18", 96), ("yolov8n", 96)])
def test_compiled_forward_with_implicit_gemm_equals_eager(name, side, monkeypatch):
    # As on CUDA in float32 (the MLX-op form: no GPU here), every convolution it may take
    monkeypatch.setenv("ZOO_COMPILE", "on")
    monkeypatch.setenv("ZOO_KERNELS", "fallback")
    monkeypatch.setattr(implicit_gemm, "preferred", implicit_gemm.suits)  # as on CUDA
    monkeypatch.setattr(implicit_gemm, "MIN_OUTPUT_ELEMENTS", 0)  # these small maps would stay cuDNN
    model = zoo.load(name, weights="synthetic", device="cpu")
    x = mx.array(np.random.default_rng(1).uniform(0, 1, (2, side, side + 32, 3)).astype(np.float32))
    forms = []
    with coverage.listening(lambda op, impl: forms.append(op)):
        got = np.array(model(x))
    assert forms.count("implicit_gemm conv2d") > 3
    with eager():
        want = np.array(model(x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
