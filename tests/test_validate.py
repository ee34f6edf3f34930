"""The validator itself: it passes a correct model and names the layer of every injected fault."""
import json
import subprocess
import sys

import numpy as np
import pytest

from zoo import registry
from zoo.cli.validate import main as validate_main
from zoo.errors import ZooError
from zoo.validate import engine
from zoo.validate.capture import parse_fault
from conftest import parity_run


@pytest.fixture(scope="module")
def run():
    spec = registry.get_spec("resnet18")
    weights = registry.read_weights(spec, "synthetic:0")
    return parity_run(spec, registry.build(spec, weights), weights.state_dict, size=64)


@pytest.mark.parametrize("mode", engine.MODES)
def test_correct_model_passes_every_layer(run, mode):
    report = run.compare_mode(mode)
    compared = [r for r in report.layers if r.status != "n/a"]
    assert report.passed and len(compared) == 60  # stem 4, 8 blocks x 5, 3 downsamples x 3, 4 stages, avgpool, fc, output
    names = {r.name for r in compared}
    assert {"conv1", "bn1", "maxpool", "layer1.0.conv1", "layer1.0.bn2", "layer2.0.downsample.0", "layer4.1", "fc", "output"} <= names
    assert not [r for r in report.layers if r.status == "n/a"]
    assert not [r.name for r in report.layers if "not fed" in r.flags]  # isolated: every module gets MLX's input


@pytest.mark.parametrize("fault", ["layer2.1=drop-residual", "layer3.0.conv2=zero", "layer1.0.bn1=nan",
                                   "layer4.1.conv1=noise", "fc=noise", "maxpool=zero"])
def test_injected_fault_is_caught_at_its_layer(run, fault):
    name, kind = parse_fault(fault)
    report = run.compare_mode("isolated", (name, kind))
    assert report.first_failure == name
    failed = {r.name for r in report.layers if r.failed}
    # in isolated mode only the faulty module, the modules containing it and (for fc) the output differ
    parts = name.split(".")
    containing = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    assert name in failed and failed <= containing | ({"output"} if name == "fc" else set()), failed
    e2e = run.compare_mode("end-to-end", (name, kind))
    assert e2e.first_failure == name


def test_fault_flags(run):
    report = run.compare_mode("isolated", ("layer1.0.bn1", "nan"))
    row = next(r for r in report.layers if r.name == "layer1.0.bn1")
    assert "NaN" in row.flags
    report = run.compare_mode("isolated", ("layer3.0.conv2", "zero"))
    row = next(r for r in report.layers if r.name == "layer3.0.conv2")
    assert "all-zero" in row.flags


def test_compare_metrics():
    ref = np.array([[1.0, -2.0], [0.5, 4.0]])
    r = engine.compare("x", ref, ref + np.array([[0, 0], [0, 4e-3]]), tol=1e-3)
    assert r.rel == pytest.approx(1e-3) and r.status == "pass"
    assert engine.compare("x", ref, ref * 1.01, tol=1e-3).failed
    assert engine.compare("x", ref, ref[:1], tol=1).failed


def test_nan_and_inf_are_flagged_where_the_reference_has_none():
    """A NaN or an infinity on the MLX side fails its layer wherever the reference element is not the same: with a
    NaN elsewhere in the reference (or an inf of the other sign) the layer passed, the element left out unflagged."""
    ref = np.array([np.inf, 1.0, 2.0, -np.inf])
    assert engine.compare("x", ref, ref.copy(), tol=1e-4).status == "pass"
    assert engine.compare("x", ref, np.array([np.inf, np.nan, 2.0, -np.inf]), tol=1e-4).flags == ["NaN"]
    assert engine.compare("x", ref, np.array([np.inf, 1.0, 2.0, np.inf]), tol=1e-4).flags == ["Inf"]
    assert engine.compare("x", ref, np.array([-np.inf, 1.0, 2.0, -np.inf]), tol=1e-4).flags == ["Inf"]


def test_nan_in_the_reference_is_never_a_pass():
    """A NaN of the reference checks nothing: a layer whose values are NaN on both sides compared no element and
    passed with rel err 0 (a model returning all NaN was a PASS); matching NaN elements were left out unflagged."""
    everywhere = np.full(4, np.nan)
    row = engine.compare("x", everywhere, everywhere.copy(), tol=1e-4)
    assert row.failed and row.flags == ["4 of 4 reference values NaN"]
    ref = np.array([np.nan, 1.0, 2.0, -np.inf])
    assert engine.compare("x", ref, ref.copy(), tol=1e-4).flags == ["1 of 4 reference values NaN"]
    assert engine.compare("x", ref, np.array([7.0, 1.0, 2.0, -np.inf]), tol=1e-4).failed


def test_a_reference_beyond_the_dtypes_range_is_named_as_such():
    """A value float16 cannot hold is the weights' or the input's doing, not a wrong op: the row says so."""
    import mlx.core as mx

    ref = np.array([7e4, 1.0])
    row = engine.compare("x", ref, np.array([np.inf, 1.0]), tol=1e-2, dtype=mx.float16)
    assert row.failed and "Inf" in row.flags and "ref 7e+04 beyond float16's 65504" in row.flags
    assert engine.compare("x", ref, ref, tol=1e-2, dtype=mx.float32).flags == []
    # a float32 value inside a float16 model (LaMa's spectral convolution) is held to float32's range
    assert engine.compare("x", ref, ref * (1 + 1e-4), tol=1e-2, dtype=mx.float32).status == "pass"


def test_calibrated_batch_norms_hold_their_inputs_statistics():
    """Each BatchNorm's running statistics become those of what reaches it, in one reference pass:
    every BatchNorm output then has per-channel mean = bias and deviation = weight (up to the
    unbiased variance and eps)."""
    from zoo.validate import case_defaults
    from zoo.validate.reference.trace import Trace

    spec = registry.get_spec("resnet18")
    case = engine.case_module(spec.family)
    settings = case_defaults(case)
    settings.size = 64
    inputs = case.make_inputs(spec, settings)
    sd = registry.read_weights(spec, "synthetic:0").state_dict
    calibrated, fewest = engine.calibrate_batch_norms(spec, case, sd, inputs)
    assert fewest == 4  # layer4's 2x2 maps
    assert calibrated.keys() == sd.keys()
    changed = {k for k in sd if not np.array_equal(calibrated[k], sd[k])}
    assert changed and all(k.endswith((".running_mean", ".running_var")) for k in changed)
    assert all(calibrated[k].dtype == sd[k].dtype for k in sd)
    outputs = {}
    case.run_reference(spec, calibrated, {k: v.astype(np.float64) for k, v in inputs.items()},
                       Trace(on_output=outputs.__setitem__))
    bns = [name for name in outputs if name.endswith(("bn1", "bn2", "downsample.1"))]
    assert len(bns) == 20
    for name in bns:
        y = outputs[name]
        n = y.size // y.shape[1]
        assert np.allclose(y.mean(axis=(0, 2, 3)), calibrated[f"{name}.bias"], atol=1e-4), name
        var = calibrated[f"{name}.running_var"].astype(np.float64)
        std = calibrated[f"{name}.weight"] * np.sqrt(var * (n - 1) / n / (var + 1e-5))  # torch's eps
        assert np.allclose(y.std(axis=(0, 2, 3)), std, rtol=1e-4), name  # the stats are kept in float32


def test_float16_lama_passes_with_the_batch_norms_calibrated(capsys):
    """Synthetic LaMa's logits reach ~1e4, where float16's roundoff alone flips the sigmoid's outputs;
    with the BatchNorms given their inputs' statistics, as trained ones hold, float16 passes."""
    args = ["lama", "--weights", "synthetic:0", "--device", "cpu", "--dtype", "float16", "--show", "failures"]
    assert validate_main([*args, "--size", "64", "--mode", "end-to-end"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert validate_main([*args, "--size", "128", "--calibrate-bn"]) == 0  # 128: enough values for the statistics
    captured = capsys.readouterr()
    assert "end-to-end: PASS 840/840" in captured.out and "isolated: PASS 840/840" in captured.out
    assert "BatchNorm statistics of the input" in captured.out and "noisy" not in captured.err


def test_bad_inject_specs(run):
    with pytest.raises(ZooError, match="KIND one of"):
        parse_fault("conv1=explode")
    with pytest.raises(ZooError, match="no module named 'layer9'"):
        run.compare_mode("isolated", ("layer9", "zero"))
    with pytest.raises(ZooError, match="no residual connection"):
        run.compare_mode("isolated", ("layer1.0.conv1", "drop-residual"))


def test_cli_table_json_and_exit_codes(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert validate_main(["resnet18", "--weights", "synthetic:0", "--size", "64", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "end-to-end: PASS 60/60" in text and "isolated: PASS 60/60" in text and "layer1.0.conv1" in text
    report = json.loads(out.read_text())
    assert report["passed"] and report["dtype"] == "float32" and report["device"] == "cpu"
    assert len(report["modes"]["isolated"]["layers"]) == 60

    code = validate_main(["resnet18", "--weights", "synthetic:0", "--size", "64", "--mode", "isolated",
                          "--inject", "layer2.0=drop-residual", "--show", "failures"])
    assert code == 1
    assert "first failing layer: layer2.0" in capsys.readouterr().out


def test_validator_defaults_to_synthetic_weights_offline(capsys):
    assert validate_main(["resnet18", "--size", "32", "--mode", "end-to-end", "--show", "failures"]) == 0
    captured = capsys.readouterr()
    assert "using synthetic:0" in captured.err and "weights=synthetic:0" in captured.out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_within_its_tolerance(dtype):
    assert validate_main(["resnet18", "--weights", "synthetic:0", "--size", "64", "--dtype", dtype]) == 0


def test_drop_residual_on_a_block_that_adds_nothing_back_is_an_error():
    import mlx.core as mx
    import mlx.nn as nn

    from zoo.validate.capture import recording

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Linear(2, 2)
            self.add = False  # like a YOLOv8 neck bottleneck

        def shortcut(self, x):
            return x

        def __call__(self, x):
            y = self.conv(x)
            return y + self.shortcut(x) if self.add else y

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def __call__(self, x):
            return self.block(x)

    net = Net()
    with pytest.raises(ZooError, match="adds no residual"):
        with recording(net, ("block", "drop-residual")):
            mx.eval(net(mx.ones((1, 2))))


def test_json_path_is_checked_before_the_model_is_built(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    missing = tmp_path / "file" / "report.json"
    argv = ["resnet18", "--weights", str(tmp_path / "missing.safetensors"), "--size", "32"]
    assert validate_main([*argv, "--json", str(missing)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --json {missing}: its folder {missing.parent} cannot be created: {missing.parent} is a file: "
        "pass a folder path"]
    assert validate_main([*argv, "--json", str(tmp_path)]) == 2
    assert f"error: --json {tmp_path} is a folder" in capsys.readouterr().err


def test_the_cases_do_not_need_the_cli():
    """The validator's cases import nothing of zoo.cli (the MobileSAM prompt parsers live with its predictor)."""
    code = ("import sys, zoo.validate.engine, zoo.validate.cases.mobilesam; "
            "cli = sorted(m for m in sys.modules if m.startswith('zoo.cli')); sys.exit(f'imports {cli}' if cli else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_reference_conv_in_chunks_is_the_same_product(monkeypatch):
    """The numpy reference's im2col works on bounded chunks of output rows (memory): the same dot
    products, which BLAS may sum in another order for another chunk size: float64 roundoff apart."""
    from zoo.validate.reference import ops

    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((2, 5, 23, 19)), rng.standard_normal((7, 5, 3, 3)), rng.standard_normal(7)
    whole = ops.conv2d(x, w, b, stride=2, padding=1)
    monkeypatch.setattr(ops, "IM2COL_CHUNK", 5 * 9 * 10 * 3)  # 3 output rows of 10 columns per product
    chunked = ops.conv2d(x, w, b, stride=2, padding=1)
    assert np.abs(chunked - whole).max() <= 1e-14 * np.abs(whole).max()
    assert whole.shape == (2, 7, 12, 10) and whole.flags.c_contiguous
