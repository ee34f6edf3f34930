"""zoo.validate's Python API: the same engine as the command line, for apps' own tests."""
import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import zoo.validate
from zoo.cli.validate import main as validate_main
from zoo.errors import UsageError

SMALL = {"weights": "synthetic:0", "size": 32}


def test_api_and_cli_give_the_same_figures(tmp_path, capsys):
    for extra in ({}, {"inject": "layer2.0.conv1=noise", "mode": "isolated"}):
        report = zoo.validate.run("resnet18", **SMALL, **extra)
        out = tmp_path / "cli.json"
        argv = ["resnet18", "--weights", "synthetic:0", "--size", "32", "--json", str(out), "--overwrite"]
        argv += [a for k, v in extra.items() for a in (f"--{k}", v)]
        assert validate_main(argv) == (0 if report.passed else 1)
        capsys.readouterr()
        cli = json.loads(out.read_text())
        assert cli["modes"] == json.loads(report.to_json())["modes"]
        assert cli["passed"] == report.passed


def test_report_fields():
    report = zoo.validate.run("resnet18", **SMALL, mode="isolated", inject="layer3.0.bn1=zero")
    assert not report.passed and report.first_failure == "layer3.0.bn1"
    rows = report.layers
    assert len(rows) == 60 and {r["mode"] for r in rows} == {"isolated"} and {r["dtype"] for r in rows} == {"float32"}
    row = next(r for r in rows if r["name"] == "layer3.0.bn1")
    assert row["status"] == "FAIL" and "all-zero" in row["flags"] and row["rel"] == pytest.approx(1.0)
    assert set(report.modes[0].heatmaps) >= {"layer3.0.bn1"}
    passed = zoo.validate.run("resnet18", **SMALL)
    assert passed.passed and passed.first_failure is None and [m.mode for m in passed.modes] == ["end-to-end", "isolated"]


def test_assert_parity_names_the_first_failing_layer():
    assert zoo.validate.assert_parity("yolov8n", weights="synthetic:0", imgsz=[64], mode="isolated").passed
    with pytest.raises(AssertionError, match=r"first failing layer model\.4\.m\.1 \(float32, isolated\)"):
        zoo.validate.assert_parity("yolov8n", weights="synthetic:0", imgsz=[64], mode="isolated", inject="model.4.m.1=zero")


def test_every_dtype_in_one_report(tmp_path, capsys):
    report = zoo.validate.run("resnet18", **SMALL, dtype="all", mode="isolated")
    assert report.dtypes == ["float32", "float16", "bfloat16"] and report.passed
    assert [m.tolerance for m in report.modes] == [1e-4, 1e-2, 5e-2]
    data = report.to_dict()
    assert data["dtype"] == "all" and set(data["by_dtype"]) == {"float32", "float16", "bfloat16"}
    out = tmp_path / "all.json"
    assert validate_main(["resnet18", "--weights", "synthetic:0", "--size", "32", "--dtype", "all", "--mode",
                          "isolated", "--json", str(out)]) == 0
    assert "bfloat16 isolated: PASS 60/60" in capsys.readouterr().out
    assert json.loads(out.read_text())["by_dtype"] == data["by_dtype"]


def test_bad_options_are_usage_errors_before_the_weights_are_read(tmp_path):
    missing = str(tmp_path / "missing.pt")
    with pytest.raises(UsageError, match="takes no option 'imgsz'"):
        zoo.validate.run("resnet18", missing, imgsz=[64])
    with pytest.raises(UsageError, match="dtype float8"):
        zoo.validate.run("resnet18", missing, dtype="float8")
    with pytest.raises(UsageError, match="size=0"):
        zoo.validate.run("resnet18", missing, size=0)
    with pytest.raises(UsageError, match="KIND one of"):
        zoo.validate.run("resnet18", missing, inject="fc=explode")


def test_import_is_light():
    code = "import sys, zoo.validate; sys.exit('mlx imported' if 'mlx.core' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


def test_custom_checkpoint_validates_like_an_official_one():
    """A 3-class best.pt (tests/fixtures/yolov8, made by ultralytics' own save path)."""
    report = zoo.validate.run("yolov8", weights="tests/fixtures/yolov8/custom_best.pt", imgsz=[64])
    assert report.passed
    output = next(r for r in report.layers if r["name"] == "output")
    assert output["shape"] == [1, 84, 4 + 3]  # 8x8 + 4x4 + 2x2 anchors, 4 box + 3 classes


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photo")
    rng = np.random.default_rng(7)
    Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8)).save(folder / "photo.png")
    mask = np.zeros((50, 70), np.uint8)
    mask[10:30, 20:45] = 255
    Image.fromarray(mask).save(folder / "mask.png")
    return folder


@pytest.mark.parametrize("model, options", [("resnet18", {"size": 32}), ("yolov8n", {"imgsz": [64]})])
def test_image_input(model, options, photo):
    """(LaMa's photo and mask: test_lama_mask_file; MobileSAM: test_mobilesam_image_input.)"""
    report = zoo.validate.run(model, weights="synthetic:0", image=str(photo / "photo.png"), mode="isolated", **options)
    assert report.passed and "photo.png" in report.header["input"]


def test_lama_mask_file(photo):
    from zoo.validate.cases import lama

    settings = zoo.validate.case_defaults(lama)
    settings.size, settings.image, settings.mask = 32, str(photo / "photo.png"), str(photo / "mask.png")
    inputs = lama.make_inputs(None, settings)
    # the 50x70 photo: shorter side 50 -> 32, centre crop; the hole rows 10..30 -> ~6..19
    hole = inputs["mask"][0, 0]
    assert hole.shape == (32, 32) and 0 < hole.sum() < 32 * 32 and hole[:4].sum() == 0 and hole[13, 16] == 1
    assert zoo.validate.run("lama", weights="synthetic:0", image=settings.image, mask=settings.mask, size=32,
                            mode="isolated").passed
    with pytest.raises(UsageError, match="mask=PATH needs image=PATH"):
        zoo.validate.run("lama", weights="synthetic:0", mask=settings.mask, size=32)


def test_coverage_matrix(capsys):
    from zoo.kernels import cpu

    report = zoo.validate.run("yolov8n", weights="synthetic:0", imgsz=[64], mode="isolated")
    rows = report.coverage()
    impl = {(r["layer"], r["op"]): r["implementation"] for r in rows}
    cpu_form = "CPU form" if cpu.native_available() else "MLX op"
    assert impl[("model.9", "sppf max-pool")] == "MLX op"  # the GPU kernel's fallback on the CPU
    assert impl[("model.0.bn", "batch_norm (channel affine)")] == cpu_form
    assert impl[("model.0", "silu")] == cpu_form  # Conv applies SiLU in its own code
    assert {r["implementation"] for r in rows} <= {"CPU form", "MLX op", "custom kernel"}
    assert validate_main(["yolov8n", "--weights", "synthetic:0", "--imgsz", "64", "--coverage", "--show", "failures"]) == 0
    text = capsys.readouterr().out
    assert "== coverage on cpu" in text and "sppf max-pool" in text


def test_mobilesam_image_input(photo):
    """The MobileSAM case's --image is the photo itself (the predictor preprocesses it on both sides)."""
    from zoo import registry
    from zoo.validate.cases import mobilesam

    settings = zoo.validate.case_defaults(mobilesam)
    settings.image, settings.point = str(photo / "photo.png"), ["30,20,1"]
    inputs = mobilesam.make_inputs(registry.get_spec("mobilesam"), settings)
    assert np.array_equal(inputs["image"], np.asarray(Image.open(photo / "photo.png")))
    assert inputs["point_coords"].tolist() == [[30.0, 20.0]]
