"""YOLO11 detection: a best.pt as `yolo train` leaves it (fp16 model, strip_optimizer), an fp32 last.pt
with ``ema`` and safetensors load as themselves (generation, scale, classes, names, training size
from the file) and match ultralytics 8.3.253's eval forward, as does the numpy reference; the
compiled forward matches the eager one; other tasks and damaged files fail in one line.

tests/fixtures/yolo11/make_fixtures.py made the upstream output (custom_best_head.npz) from the
3-class yolo11n of custom_best.manifest.json with synthetic:0 weights saved as best.pt by
ultralytics; the tests write those weights and that metadata as a best.pt here, without torch."""
from __future__ import annotations

import re

import mlx.core as mx
import numpy as np
import pytest
from PIL import Image
from safetensors.numpy import save_file

import zoo
from conftest import FIXTURES, MANIFESTS, cli_error
from torch_writer import module, module_tree, tensor, write_torch_zip
from zoo import compiled
from zoo.compiled import eager
from zoo.errors import ZooError
from zoo.models import yolov8
from zoo.run import main
from zoo.validate.reference import yolo11 as reference
from zoo.weights.synthetic import read_manifest, synthetic_state_dict

HERE = FIXTURES / "yolo11"
NAMES = {0: "person", 1: "forklift", 2: "pallet"}
TRAIN_ARGS = {"task": "detect", "mode": "train", "model": "yolo11n.yaml", "data": "warehouse.yaml", "imgsz": 320}


def custom_weights() -> dict[str, np.ndarray]:
    """make_fixtures.py's weights: synthetic:0 in the 3-class manifest, the DFL conv arange(16)."""
    sd = synthetic_state_dict(read_manifest(HERE / "custom_best.manifest.json"), 0)
    sd["model.23.dfl.conv.weight"] = np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)
    return {k: v for k, v in sd.items() if v.dtype == np.float32}  # num_batches_tracked: not read


def detection_model(sd: dict, **attributes):
    return module_tree(sd, "ultralytics.nn.tasks.DetectionModel", names=NAMES, nc=3, stride=tensor([8, 16, 32]),
                       yaml={"nc": 3, "scale": "n", "yaml_file": "yolo11n.yaml"}, **attributes)


@pytest.fixture(scope="module")
def best_pt(tmp_path_factory):
    """strip_optimizer's best.pt: the EMA model in fp16 as 'model', its args a dict, the rest emptied."""
    sd = {k: v.astype(np.float16) for k, v in custom_weights().items()}
    return write_torch_zip(tmp_path_factory.mktemp("run") / "best.pt", {
        "date": "2026-11-28T08:00:00", "version": "8.3.253", "license": "AGPL-3.0", "docs": "https://docs.ultralytics.com",
        "epoch": -1, "best_fitness": None, "model": detection_model(sd, args=TRAIN_ARGS), "ema": None,
        "updates": None, "optimizer": None, "scaler": None, "train_args": TRAIN_ARGS,
        "train_metrics": {"fitness": 0.02}, "train_results": {"epoch": [1, 2, 3]}})


@pytest.fixture(scope="module")
def best(best_pt):
    return zoo.load(str(best_pt), device="cpu")


def upstream_layout(model, x: np.ndarray) -> np.ndarray:
    return np.array(model(mx.array(x.transpose(0, 2, 3, 1)))).transpose(0, 2, 1)  # -> (N, 4 + nc, A)


def assert_matches_upstream(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape == (1, 4 + 3, 8 * 12 + 4 * 6 + 2 * 3)
    boxes = np.abs(got[:, :4] - want[:, :4]).max() / np.abs(want[:, :4]).max()
    scores = np.abs(got[:, 4:] - want[:, 4:]).max()
    assert boxes < 1e-4 and scores < 1e-3, (boxes, scores)


def test_best_pt_loads_as_itself_and_matches_upstream(best, best_pt):
    assert (best.arch.name, best.scale, best.nc, best.names, best.imgsz) == ("yolo11", "n", 3, NAMES, 320)
    assert best.dtype == mx.float32
    case = np.load(HERE / "custom_best_head.npz")
    assert_matches_upstream(upstream_layout(best, case["x"]), case["y"])  # measured 1.3e-07, 9e-08
    for name in ("yolo11", "yolo11n", "yolov8"):  # the generic names take the file's generation or scale
        assert zoo.load(name, weights=best_pt, device="cpu").names == NAMES


def test_numpy_reference_matches_upstream():
    case = np.load(HERE / "custom_best_head.npz")
    sd = {k: v.astype(np.float16).astype(np.float32) for k, v in custom_weights().items()}  # the file's fp16
    y, maps = reference.forward(sd, case["x"].astype(np.float64))
    assert [m.shape[2:] for m in maps] == [(8, 12), (4, 6), (2, 3)]
    assert_matches_upstream(y, case["y"])


def test_fp32_last_pt_with_ema_and_safetensors_load_alike(tmp_path, best):
    """last.pt: model None, the fp32 weights under 'ema'; safetensors: names and imgsz as text metadata."""
    sd = custom_weights()
    last = write_torch_zip(tmp_path / "last.pt", {"epoch": 2, "model": None, "ema": detection_model(sd),
                                                  "updates": 30, "train_args": {**TRAIN_ARGS, "imgsz": 416}})
    save_file(sd, str(tmp_path / "w.safetensors"), metadata={"names": repr(list(NAMES.values())), "imgsz": "416"})
    x = np.random.default_rng(1).uniform(0, 1, (1, 3, 64, 96)).astype(np.float32)
    outputs = []
    for path in (last, tmp_path / "w.safetensors"):
        model = zoo.load(str(path), device="cpu")
        assert (model.arch.name, model.scale, model.names, model.imgsz) == ("yolo11", "n", NAMES, 416)
        outputs.append(upstream_layout(model, x))
    np.testing.assert_array_equal(*outputs)
    # the fp16 best.pt holds the same weights rounded
    np.testing.assert_allclose(outputs[0], upstream_layout(best, x), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("scale", "nsmlx")
def test_scale_from_tensor_shapes(scale):
    """m and l share their widths: layer 2's block count tells them apart."""
    shapes = {k: np.broadcast_to(np.float16(0), shape) for k, (shape, _) in
              read_manifest(MANIFESTS / f"yolo11{scale}.json").items()}
    info = yolov8.describe(shapes, {}, "w.safetensors")
    assert (info.variant, info.nc) == (f"yolo11{scale}", 80)


def test_a_named_variant_the_file_contradicts_is_one_line(best_pt):
    for name in ("yolo11s", "yolov8n"):
        with pytest.raises(ZooError, match=r"best.pt holds a yolo11n with 3 classes \(person, forklift, pallet\), "
                                           rf"not a {name}: load it as 'yolo11' \(the scale from the file\) or 'yolo11n'"):
            zoo.load(name, weights=best_pt, device="cpu")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    path = tmp_path_factory.mktemp("images") / "yard.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (60, 80, 3), dtype=np.uint8)).save(path)
    return path


def test_cli_runs_a_best_pt_by_its_path(best_pt, image, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(best_pt), str(image), "--device", "cpu", "--conf", "0.01", "--out", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("yard.png: ") and any(name in line for name in NAMES.values())
    with Image.open(out / "yard.png") as annotated:
        assert annotated.size == (80, 60)
    for ray in ([], ["--ray"]):
        assert cli_error([str(best_pt), str(image), "--weights", "synthetic", "--out", str(tmp_path / "again"), *ray],
                         capsys) == f"error: {best_pt} is already the checkpoint: drop --weights synthetic"
    # the Python API and ultralytics' command line say it in their words (it was 'unknown model <path>')
    with pytest.raises(ZooError, match=re.escape(f"{best_pt} is already the checkpoint: drop weights='synthetic'")):
        zoo.YOLO(best_pt, weights="synthetic")
    assert cli_error(["predict", f"model={best_pt}", "weights=synthetic", f"source={image}"], capsys) == (
        f"error: {best_pt} is already the checkpoint: drop weights='synthetic'")


@pytest.mark.parametrize("model_class, task", [("OBBModel", "obb"), ("ClassificationModel", "classify")])
def test_obb_and_classify_checkpoints_are_refused_by_name(tmp_path, image, capsys, model_class, task):
    path = write_torch_zip(tmp_path / "best.pt", {"model": module(
        f"ultralytics.nn.tasks.{model_class}", {"w": tensor([1])}, args={"task": task},
        yaml={"yaml_file": f"yolo11n-{task.replace('classify', 'cls')}.yaml"})})
    assert cli_error([str(path), str(image), "--device", "cpu"], capsys) == (
        f"error: {path} holds a YOLO {task} model (ultralytics.nn.tasks.{model_class}): "
        "the YOLO tasks that load are detect, segment, pose; pass such a checkpoint")


def test_a_truncated_pt_is_one_error_line(best_pt, tmp_path, image, capsys):
    cut = tmp_path / "cut.pt"
    cut.write_bytes(best_pt.read_bytes()[: best_pt.stat().st_size // 2])
    assert cli_error([str(cut), str(image), "--device", "cpu"], capsys) == (
        f"error: {cut} is a truncated or damaged zip archive (its directory at the end is missing): "
        "re-download it or copy it again")
    with pytest.raises(ZooError, match="cut.pt is a truncated"):
        zoo.load(str(cut), device="cpu")


def test_compiled_forward_matches_eager_in_one_trace_and_in_stages(monkeypatch):
    """The user path: BatchNorms folded (depthwise ones too), Concat's parts read apart, attention traced;
    in stages from YOLO11's own stage starts."""
    import zoo.models.yolov8.model as yolo

    monkeypatch.setenv("ZOO_COMPILE", "on")
    monkeypatch.setenv("ZOO_KERNELS", "fallback")  # the trace's MLX ops on both sides (test_compiled.py)
    model = zoo.load("yolo11n", weights="synthetic", device="cpu")
    # the convolutions' GFLOPs at 640 px (ultralytics' 6.6 also counts the attention's products)
    assert model.flop_per_pixel * 640 * 640 / 1e9 == pytest.approx(6.48, abs=0.01)
    x = mx.array(np.random.default_rng(5).uniform(0, 1, (1, 64, 64, 3)).astype(np.float32))
    with eager():
        want = np.array(model(x))
    for threshold in (1e9, 0):
        monkeypatch.setattr(compiled, "STAGED_FROM_GFLOP", {True: threshold, False: threshold})
        model.compiled.clear()
        np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)
        (traced, _), = model.compiled.traces.values()
        assert len(traced) == (1 if threshold else len(yolo.YOLO11.stage_starts) + 1)
