"""zoo.kernels.few_outputs: a convolution to a few channels read straight from its unpadded input
(LaMa's last: reflect pad 3, 7x7, 64 -> 3). Its MLX-op form (the CPU and fallback path) against the
numpy reference, its errors, where it runs, and LaMa's compiled forward taking it against the eager
network. The native kernel: the Metal shim test (test_kernels_metal_shim.py) on the CPU,
``python -m zoo.kernels.selftest`` on a GPU."""
import mlx.core as mx
import numpy as np
import pytest

import zoo
from zoo.compiled import eager
from zoo.errors import ZooError
from zoo.kernels import core, coverage, few_outputs
from zoo.validate.reference import kernels as ref


@pytest.mark.parametrize("shape, out_channels, kernel, padding, reflect, dtype, tolerance", [
    ((1, 12, 10, 64), 3, 7, 3, True, np.float32, 1e-5),
    ((2, 7, 9, 6), 4, 3, (2, 1), False, np.float32, 1e-5),
    ((1, 8, 8, 16), 3, 7, 3, True, np.float16, 2e-2),
])
def test_mlx_form_equals_padded_convolution(shape, out_channels, kernel, padding, reflect, dtype, tolerance):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    weight = (rng.standard_normal((out_channels, kernel, kernel, shape[-1])) / kernel).astype(dtype)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    got = few_outputs.conv2d(mx.array(x), mx.array(weight), mx.array(bias), padding, reflect)
    want = ref.conv2d_padded(x, weight, bias, padding, reflect)
    assert got.shape == want.shape and got.dtype == mx.array(x).dtype
    np.testing.assert_allclose(np.array(got.astype(mx.float32)), want, rtol=tolerance, atol=tolerance)


def test_bad_inputs_are_named():
    x = mx.zeros((1, 6, 6, 8))
    with pytest.raises(ZooError, match=r"\(O <= 4, KH, KW, 8\)"):
        few_outputs.conv2d(x, mx.zeros((5, 3, 3, 8)))
    with pytest.raises(ZooError, match=r"\(O <= 4, KH, KW, 8\)"):
        few_outputs.conv2d(x, mx.zeros((3, 3, 3, 6)))
    with pytest.raises(ZooError, match="leaves no output"):
        few_outputs.conv2d(x, mx.zeros((3, 7, 7, 8)))
    with pytest.raises(ZooError, match="reflected"):
        few_outputs.conv2d(x, mx.zeros((3, 7, 7, 8)), padding=6, reflect=True)  # torch: pad < size
    with pytest.raises(ZooError, match="threadgroup memory"):
        few_outputs.conv2d(mx.zeros((1, 16, 16, 8)), mx.zeros((3, 11, 11, 8)), padding=5)
    with pytest.raises(ZooError, match="NHWC"):
        few_outputs.conv2d(mx.zeros((6, 6, 8)), mx.zeros((3, 3, 3, 8)))


def test_preferred_only_for_float32_on_cuda(monkeypatch):
    f32 = mx.float32
    assert not few_outputs.preferred(f32, (3, 7, 7, 64), 1, 1, 1)  # the CPU: MLX's ops (or zoo's CPU form)
    monkeypatch.setattr(core, "native_backend", lambda: "cuda")
    assert few_outputs.preferred(f32, (3, 7, 7, 64), 1, 1, 1)
    assert not few_outputs.preferred(mx.float16, (3, 7, 7, 64), 1, 1, 1)
    assert not few_outputs.preferred(f32, (8, 7, 7, 64), 1, 1, 1)  # more sums than a thread keeps
    assert not few_outputs.preferred(f32, (3, 3, 3, 64), 2, 1, 1)  # strided
    assert not few_outputs.preferred(f32, (3, 11, 11, 64), 1, 1, 1)  # its patch: over Metal's 32 KiB
    monkeypatch.setattr(core, "native_backend", lambda: "metal")
    assert not few_outputs.preferred(f32, (3, 7, 7, 64), 1, 1, 1)


def test_lama_compiled_forward_runs_its_last_convolution_padded_in_place(monkeypatch, two_blas_threads):
    # As on CUDA (the MLX-op form: no GPU here): the compiled forward's last layers are this
    # convolution, the eager network (the validator's) keeps upstream's pad and convolution.
    import zoo.models.lama as lama_module

    monkeypatch.setenv("ZOO_COMPILE", "on")
    monkeypatch.setenv("ZOO_KERNELS", "fallback")
    monkeypatch.setattr(few_outputs, "preferred", lambda dtype, *conv: few_outputs.fits(*conv))
    monkeypatch.setattr(lama_module, "DFT_MAX_SIDE", 0)  # the Fourier units' FFTs, as eager
    lama = zoo.load("lama", weights="synthetic", device="cpu")
    rng = np.random.default_rng(0)
    image = mx.array(rng.uniform(0, 1, (1, 32, 32, 3)).astype(np.float32))
    mask = mx.array((rng.uniform(0, 1, (1, 32, 32, 1)) > 0.7).astype(np.float32))
    forms = []
    with coverage.listening(lambda op, impl: forms.append(op)):
        got = np.array(lama(image, mask))
    assert forms.count("few_outputs conv2d") == 1
    forms.clear()
    with coverage.listening(lambda op, impl: forms.append(op)), eager():
        want = np.array(lama(image, mask))
    assert "few_outputs conv2d" not in forms
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
