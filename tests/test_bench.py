"""python -m zoo.bench: options are checked before any work; a run writes the report and the rows.

The test environment has no torch, so these runs time the MLX variants only (the GPU runs
with the PyTorch peers are documented in docs/speed-gpu.md)."""
import json
import subprocess
import sys

import pytest

from zoo.bench.__main__ import main


@pytest.mark.parametrize("argv, message", [
    (["--models", "resnet9"], "unknown model 'resnet9'"),
    (["--dtypes", "float64"], "--dtypes"),
    (["--batches", "1,x"], "--batches"),
    (["--batches", "0"], "--batches"),
    (["--variants", "fast"], "--variants"),
    (["--lama-size", "100"], "--lama-size"),
    (["--upstream", "/no/such/folder"], "no such folder"),
    (["--seconds", "0"], "--seconds"),
    (["--torch-compile", "fastest"], "--torch-compile"),
])
def test_bad_options_fail_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_existing_output_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "report.json"
    out.write_text("keep")
    assert main(["--json", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert out.read_text() == "keep"


def test_mlx_run_writes_report_and_rows(tmp_path):
    report, rows = tmp_path / "report.json", tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "zoo.bench", "--device", "cpu", "--models", "resnet50", "--batches", "1",
           "--dtypes", "float32", "--variants", "eager,user", "--seconds", "0.1", "--warmup-seconds", "0",
           "--min-rounds", "2", "--json", str(report), "--rows", str(rows)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(report.read_text())
    (case,) = result["results"]
    assert case["model"] == "resnet50" and case["batch"] == 1 and case["dtype"] == "float32"
    for name in ("eager", "user"):
        v = case["variants"][name]
        assert v["n"] >= 2 and 0 < v["p50_ms"] <= v["p90_ms"] and v["img_per_s"] > 0 and v["peak_extra_mib"] >= 0
    assert result["env"]["versions"]["mlx"] and result["env"]["tf32"] is False
    (row,) = json.loads(rows.read_text())
    assert {"model", "batch", "dtype", "device", "mlx_ms", "torch_ms"} <= set(row)
    assert row["mlx_ms"] == case["variants"]["user"]["p50_ms"]
    assert "| resnet50/b1 | float32 |" in done.stdout


def test_the_sanity_error_does_not_read_nan_as_agreement():
    import numpy as np

    from zoo.bench.measure import nonfinite, relative_error

    ref = np.array([[1.0, -2.0], [4.0, 0.5]])
    assert relative_error([ref + 0.04], [ref]) == pytest.approx(0.01)
    nan = ref.copy()
    nan[0, 1] = np.nan
    assert relative_error([nan], [ref]) == float("inf")  # max(0.0, nan) would have said 0.0
    assert relative_error([ref], [nan]) == float("inf")
    inf = ref.copy()
    inf[1, 0] = np.inf
    assert relative_error([inf], [inf]) == pytest.approx(0.0)  # same positions: counted apart
    assert nonfinite([nan, inf]) == 2 and nonfinite([ref]) == 0
    assert relative_error([ref[:1]], [ref]) is None


def test_the_json_report_is_standard_json():
    """An error of inf (or a NaN) is written as a string: Python's NaN/Infinity tokens are not JSON."""
    import json

    from zoo.bench.run import strict_json

    text = strict_json({"sanity_rel_err": {"user": float("inf"), "eager": float("nan")}, "ratio": 0.5,
                        "rows": [{"p50": float("-inf")}, (1.0, 2)]})
    assert "Infinity" not in text and "NaN" not in text
    parsed = json.loads(text, parse_constant=lambda token: pytest.fail(f"non-standard token {token}"))
    assert parsed == {"sanity_rel_err": {"user": "inf", "eager": "nan"}, "ratio": 0.5,
                      "rows": [{"p50": "-inf"}, [1.0, 2]]}


@pytest.mark.parametrize("rotate, first_of_each_round", [(False, "aaaa"), (True, "abca")])
def test_rounds_run_each_variant_first_in_turn_when_rotating(rotate, first_of_each_round):
    from types import SimpleNamespace

    from zoo.bench.measure import Variant, run_rounds

    calls = []
    variants = [Variant(name, lambda name=name: calls.append(name), "torch") for name in "abc"]
    assert run_rounds(variants, SimpleNamespace(type="cpu"), 0.0, 0.0, 4, 4, rotate=rotate) == 4
    timed = calls[-12:]  # after the first calls and the peak call
    assert "".join(timed[i * 3] for i in range(4)) == first_of_each_round
    assert all(len(v.times_ms) == 4 for v in variants)


@pytest.mark.parametrize("model", ["yolov8n", "yolo11n-pose", "resnet50"])
def test_the_torch_peer_gets_the_weights_the_mlx_side_loads(model):
    """Both sides of a case load synthetic:SEED: the peer's upstream-named state dict, read as the MLX side
    reads a checkpoint, is the MLX side's (with YOLO's untrained-head values: they differed once, and the
    sanity error read 0.75)."""
    import numpy as np

    from zoo import registry
    from zoo.bench.cases import manifest_state_dict, registry_name

    spec = registry.get_spec(registry_name(model))
    peer = registry.sanitized(spec, manifest_state_dict(model, 0), {})
    ours = registry.read_weights(spec, "synthetic:0").state_dict
    assert peer.keys() == ours.keys()
    assert all(np.array_equal(peer[k], ours[k]) for k in ours)
