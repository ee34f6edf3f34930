"""zoo.kernels.winograd: 3x3 stride-1 convolution as F(2x2, 3x3) and F(4x4, 3x3), their MLX-op form (the CPU and
fallback path) against the numpy reference's direct convolution, where the models use it, and the
models' compiled forwards with it against their eager forwards. The native kernels: the Metal shim
test (test_kernels_metal_shim.py) on the CPU, ``python -m zoo.kernels.selftest`` on a GPU."""
import mlx.core as mx
import numpy as np
import pytest

import zoo
from zoo.compiled import eager
from zoo.errors import ZooError
from zoo.kernels import core, coverage, winograd
from zoo.validate.reference import kernels as ref


@pytest.mark.parametrize("form", [winograd.F2, winograd.F4], ids=["F2", "F4"])
@pytest.mark.parametrize("activation", [None, "relu", "silu"])
@pytest.mark.parametrize("shape, out_channels, padding", [
    ((2, 7, 9, 5), 6, 1),  # odd sizes: the last tiles are cut
    ((1, 8, 8, 3), 4, 0),
    ((1, 1, 1, 2), 3, 1),  # a single pixel: the patch is all padding but the centre
    ((3, 6, 5, 16), 8, 1),
    ((1, 3, 3, 1), 1, 0),  # one output
])
def test_mlx_form_equals_direct_convolution(shape, out_channels, padding, activation, form):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, 3, 3, shape[-1])).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    got = winograd.conv3x3(mx.array(x), winograd.transform_weight(mx.array(weight), form), mx.array(bias), padding,
                           activation)
    want = ref.conv2d_activated(x, weight, bias, padding, activation)
    assert got.shape == want.shape and got.dtype == mx.float32
    assert_as_accurate(form, np.array(got), want)


def assert_as_accurate(form, got, want):
    """F2 as close as MLX's direct convolution (a float32 sum over 9 * C products either way); F4
    within 1e-5 of the largest output (its larger transform entries: the module's docstring)."""
    if form is winograd.F2:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_bad_inputs_are_named():
    u = winograd.transform_weight(mx.zeros((4, 3, 3, 2)))
    with pytest.raises(ZooError, match=r"\(16 or 36, 3, O\)"):
        winograd.conv3x3(mx.zeros((1, 4, 4, 3)), u)
    with pytest.raises(ZooError, match="padding must be 0 or 1"):
        winograd.conv3x3(mx.zeros((1, 4, 4, 2)), u, padding=2)
    with pytest.raises(ZooError, match="leaves no output"):
        winograd.conv3x3(mx.zeros((1, 2, 5, 2)), u, padding=0)
    with pytest.raises(ZooError, match="activation must be one of"):
        winograd.conv3x3(mx.zeros((1, 4, 4, 2)), u, activation="gelu")
    with pytest.raises(ZooError, match=r"\(O, 3, 3, I\)"):
        winograd.transform_weight(mx.zeros((4, 5, 5, 2)))


def test_preferred_only_for_float32_3x3_stride_1_on_cuda(monkeypatch):
    args = ((64, 3, 3, 32), 1, 1, 1, 1)
    assert not winograd.preferred(mx.float32, *args)  # the CPU: MLX's convolution (or zoo's CPU form)
    monkeypatch.setattr(core, "native_backend", lambda: "cuda")
    assert winograd.preferred(mx.float32, *args)
    assert winograd.preferred(mx.float32, (64, 3, 3, 32), (1, 1), (0, 0), 1, (1, 1))
    assert not winograd.preferred(mx.float16, *args)  # cuDNN's float16 engines were as fast
    assert not winograd.preferred(mx.float32, (64, 3, 3, 32), 2, 1, 1, 1)
    assert not winograd.preferred(mx.float32, (64, 3, 3, 1), 1, 1, 64, 1)
    assert not winograd.preferred(mx.float32, (64, 1, 1, 32), 1, 0, 1, 1)
    assert not winograd.preferred(mx.float32, (64, 3, 3, 32), 1, 2, 1, 1)
    monkeypatch.setattr(core, "native_backend", lambda: "metal")
    assert not winograd.preferred(mx.float32, *args)


def test_worth_it_for_large_convolutions_only():
    assert winograd.worth_it((16, 80, 80, 64), (64, 3, 3, 64))  # 7.5 GFLOP
    assert winograd.worth_it((16, 80, 80, 32), (32, 3, 3, 32))  # 1.9 GFLOP, 32 channels: YOLOv8n b16
    assert not winograd.worth_it((1, 80, 80, 64), (64, 3, 3, 64))  # 0.5 GFLOP: batch 1
    assert not winograd.worth_it((16, 160, 160, 16), (16, 3, 3, 16))  # 1.9 GFLOP, but 16 channels
    assert winograd.worth_it((32, 7, 7, 512), (512, 3, 3, 512))  # ResNet-50's last stage at batch 32


def test_the_gpu_form_is_f4_and_the_kernels_are_written_from_its_matrices():
    assert winograd.GPU_FORM is winograd.F4 and winograd.FORMS == {16: winograd.F2, 36: winograd.F4}
    for form in winograd.FORMS.values():
        bt, g, at = (np.array(m, np.float64) for m in (form.bt, form.g, form.at))
        # the 1-D identity behind both transforms: A^T ((G g) * (B^T d)) is the correlation of d with g
        d, k = np.random.default_rng(form.tile).standard_normal((2, form.patch))
        want = [d[i:i + 3] @ k[:3] for i in range(form.tile)]
        np.testing.assert_allclose(at @ ((g @ k[:3]) * (bt @ d)), want, atol=1e-12)
        assert f"float d[{form.patch}][{form.patch}]" in form.input_kernel.body


@pytest.mark.parametrize("name, side", [("resnet18", 64), ("yolov8n", 64), ("yolov8n-seg", 64), ("yolo11n-pose", 64)])
def test_compiled_forward_with_winograd_equals_eager(name, side, monkeypatch):
    # As on CUDA in float32 (GPU_FORM, F4), with the MLX-op form of the transforms (no GPU here); the
    # segmentation head's prototypes in parts and the pose head's zero-padded keypoint branch included
    monkeypatch.setenv("ZOO_COMPILE", "on")
    monkeypatch.setenv("ZOO_KERNELS", "fallback")
    monkeypatch.setattr(winograd, "preferred", winograd.suits)
    monkeypatch.setattr(winograd, "MIN_GFLOP", 0)  # these small maps would stay with mx.conv2d
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 0)
    model = zoo.load(name, weights="synthetic", device="cpu")
    x = mx.array(np.random.default_rng(1).uniform(0, 1, (2, side, side + 32, 3)).astype(np.float32))

    def outputs():
        y = model(x)  # a segmentation model's: (predictions, prototypes)
        return [np.array(part) for part in (y if isinstance(y, tuple) else (y,))]

    forms = []
    with coverage.listening(lambda op, impl: forms.append(op)):
        got = outputs()
    folds = model.compiled.folds.arrays.values()
    assert sum(f.get("winograd", mx.zeros((0,))).shape[0] == 36 for f in folds) > 0
    assert forms.count("winograd conv3x3") > 0
    with eager():
        want = outputs()
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_lama_compiled_forward_with_winograd_is_as_accurate_as_eager(monkeypatch, two_blas_threads):
    # LaMa's FFC convolutions (reflect-padded, no BatchNorm in between): the merged local ones and
    # the global -> local ones, as on CUDA in float32. Synthetic weights amplify rounding through the
    # 18 blocks (1e-5 apart at the first convolution, 3e-4 at the output), so both forwards are
    # measured against the float64 numpy reference instead of against each other.
    import zoo.models.lama as lama_module
    from zoo import registry
    from zoo.validate.reference import lama as reference

    monkeypatch.setenv("ZOO_COMPILE", "on")
    monkeypatch.setenv("ZOO_KERNELS", "fallback")
    monkeypatch.setattr(lama_module, "DFT_MAX_SIDE", 0)  # the Fourier units as eager (test_compiled.py)
    monkeypatch.setattr(winograd, "preferred", winograd.suits)
    monkeypatch.setattr(winograd, "MIN_GFLOP", 0)
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 0)
    weights = registry.read_weights(registry.get_spec("lama"), "synthetic:0")
    lama = zoo.load("lama", weights="synthetic:0", device="cpu")
    rng = np.random.default_rng(0)
    image = rng.uniform(0, 1, (1, 32, 32, 3)).astype(np.float32)
    mask = (rng.uniform(0, 1, (1, 32, 32, 1)) > 0.7).astype(np.float32)
    forms = []
    with coverage.listening(lambda op, impl: forms.append(op)):
        got = np.array(lama(mx.array(image), mx.array(mask)))
    assert forms.count("winograd conv3x3") == 2 * 2 * lama_module.N_BLOCKS  # two per FFC of every block
    with eager():
        plain = np.array(lama(mx.array(image), mx.array(mask)))
    nchw = lambda a: a.transpose(0, 3, 1, 2).astype(np.float64)  # noqa: E731
    want = reference.forward(weights.state_dict, nchw(image), nchw(mask)).transpose(0, 2, 3, 1)
    assert np.abs(got - want).max() <= np.abs(plain - want).max()
