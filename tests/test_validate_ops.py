"""python -m zoo.validate ops: every op passes on the CPU, a broken op fails by name, mixes raise."""
import json

import mlx.core as mx
import numpy as np
import pytest

from zoo import devices
from zoo.cli.validate import main as validate_main
from zoo.kernels import cpu as cpu_ops
from zoo.validate import opcheck
from zoo.validate.reference import ops as ref


@pytest.fixture(scope="module", autouse=True)
def on_cpu():
    devices.use("cpu")


@pytest.fixture(scope="module")
def rows():
    return opcheck.run(("float32", "float16", "bfloat16"))


def failed(rows) -> set[str]:
    return {r.name for r in rows if r.failed}


def test_every_op_passes_on_cpu(rows):
    assert failed(rows) == set()
    names = {r.name for r in rows}
    for prefix in ("conv2d/dilated", "conv2d/grouped", "conv2d/depthwise", "conv2d/1x1", "conv_transpose2d/k3s2p1op1",
                   "max_pool2d/k3s2p1", "avg_pool2d/k3s2p1", "batch_norm", "layer_norm", "group_norm", "gelu/zero",
                   "silu/large", "sigmoid/view", "softmax/scaled-bias", "matmul/linear", "attention/masked",
                   "rfft2/odd", "irfft2/any-spectrum", "pad/reflect", "pad/constant", "resize/upsample-bicubic-x1.5-alignTrue",
                   "resize/bilinear-4x5-alignFalse", "resize/nearest-12x17", "sppf_maxpool/k5", "nms/class-aware",
                   "mix/two-devices", "mix/two-dtypes"):
        assert prefix in names
    assert {r.dtype for r in rows} == {"float32", "float16", "bfloat16"}
    # a row says what ran: the CPU forms by name, then MLX's op again with ZOO_KERNELS=fallback
    impl = {(r.name, r.dtype): r.impl for r in rows}
    assert impl["conv2d/3x3", "float32"] == "CPU form: conv2d"
    assert impl["conv2d/3x3 [fallback]", "float32"] == "MLX op: conv2d"
    assert impl["layer_norm", "float16"] == "CPU form: layer_norm"
    assert impl["conv2d/dilated", "float32"] == "MLX op: conv2d (dilated)"
    assert impl["nms/class-aware", "float32"] == "MLX op: nms"  # the kernels' fallback, on the CPU
    assert ("nms/class-aware [fallback]", "float32") not in impl
    # exact ops are held to 0; the others to the layer-parity engine's isolated bound
    tol = {(r.name, r.dtype): r.tolerance for r in rows}
    assert tol["max_pool2d/k3s2p1", "float16"] == 0 and tol["conv2d/3x3", "float16"] == 1e-2


def test_errors_are_measured_not_zero(rows):
    """The comparison is of rounded arithmetic: float16 errors sit near its unit roundoff."""
    rel = {(r.name, r.dtype): r.rel for r in rows}
    assert 1e-8 < rel["conv2d/3x3", "float32"] < 1e-5
    assert 1e-4 < rel["conv2d/3x3", "float16"] < 1e-2
    assert rel["conv2d/zero-input", "float16"] == 0.0


def test_injected_op_fails_by_name():
    rows = opcheck.run(("float32", "float16"), inject="gelu/large", only=["gelu", "conv2d/1x1"])
    assert failed(rows) == {"gelu/large", "gelu/large [fallback]"}
    assert {r.dtype for r in rows if r.failed} == {"float32", "float16"}


def test_a_wrong_implementation_fails(monkeypatch):
    """A sigmoid that quietly computes in float16 inside a float32 model (error ~5e-4) is caught."""
    monkeypatch.setattr(cpu_ops, "sigmoid", lambda x: mx.sigmoid(x.astype(mx.float16)).astype(x.dtype))
    rows = opcheck.run(("float32",), only=["sigmoid/normal", "sigmoid/zero"])
    assert failed(rows) == {"sigmoid/normal"}


def test_mixing_devices_must_raise(monkeypatch):
    rows = opcheck.run(("float32",), only=["mix"])
    assert failed(rows) == set()
    assert "raised: " in next(r.detail for r in rows if r.name == "mix/two-devices")
    # the check fails when the second device decision is quietly accepted
    monkeypatch.setattr(devices, "use", lambda device=None: "cpu")
    rows = opcheck.run(("float32",), only=["mix/two-devices"])
    assert failed(rows) == {"mix/two-devices"} and rows[0].detail == "did not raise"


def test_cli_exit_codes(tmp_path, capsys):
    out = tmp_path / "ops.json"
    args = ["ops", "--device", "cpu", "--dtype", "float32,float16", "--only", "conv2d/3x3", "--only", "pad"]
    assert validate_main([*args, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["passed"] and report["device"] == "cpu" and report["failed"] == []
    assert {r["name"] for r in report["rows"]} == {"conv2d/3x3", "conv2d/3x3 [fallback]", "pad/reflect", "pad/constant"}
    assert "PASS" in capsys.readouterr().out

    assert validate_main([*args, "--inject-op", "pad/constant"]) == 1
    captured = capsys.readouterr().out
    assert "failing ops: pad/constant" in captured

    assert validate_main([*args, "--json", str(out)]) == 2  # exists: --overwrite needed
    assert validate_main(["ops", "--dtype", "float64"]) == 2
    assert validate_main(["ops", "--inject-op", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "error: --inject-op nosuch: no such op" in err and "--dtype float64" in err


def test_reference_additions():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 10))
    # the explicit DFT sums invert each other; bicubic keeps the samples it lands on
    assert np.allclose(ref.irfft2_ortho(ref.rfft2_ortho(x), (7, 10)), x)
    assert np.allclose(ref.irfft2_ortho(ref.rfft2_ortho(x[..., :9]), (7, 9)), x[..., :9])
    assert np.allclose(ref.upsample_bicubic(x, (13, 19), align_corners=True)[:, :, ::2, ::2], x)
    assert np.allclose(ref.upsample_bicubic(np.ones((1, 1, 4, 5)), (7, 3)), 1.0)
    y = ref.group_norm(x[:, :2].reshape(2, 2, 7, 10), 2, np.ones(2), np.zeros(2))
    assert np.allclose(y.reshape(2, 2, -1).mean(-1), 0) and np.allclose(y.reshape(2, 2, -1).var(-1), 1, atol=1e-4)
    assert np.isclose(ref.avg_pool2d(x, 3, 2, 1)[0, 0, 0, 0], x[0, 0, :2, :2].sum() / 9)


def test_custom_kernel_rows_are_rerun_with_the_fallback(monkeypatch):
    """As on a GPU: an op that reports a custom kernel gets a second row under ZOO_KERNELS=fallback."""
    import os

    from zoo.kernels import core, coverage

    real = opcheck.nms

    def kernel_nms(*args, **kwargs):
        if os.environ.get(core.ENV_VAR) != "fallback":
            coverage.note("nms", coverage.CUSTOM_KERNEL)
        return real(*args, **kwargs)

    monkeypatch.setattr(opcheck, "nms", kernel_nms)
    rows = opcheck.run(("float16",), only=["nms/class-aware"])
    assert [(r.name, r.impl.split(":")[0], r.status) for r in rows] == [
        ("nms/class-aware", "custom kernel", "PASS"), ("nms/class-aware [fallback]", "MLX op", "PASS")]


def test_help_names_the_ops_suite(capsys):
    with pytest.raises(SystemExit):
        validate_main(["--help"])
    assert "python -m zoo.validate ops" in capsys.readouterr().out
