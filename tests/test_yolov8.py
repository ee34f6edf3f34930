"""YOLOv8: parity with the upstream case (MLX model and numpy reference), weights in every
accepted naming, ultralytics' pre/post-processing, fault injection, predict and its results."""
import json
import re
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten
from PIL import Image
from safetensors.numpy import save_file

import zoo
from conftest import FIXTURES, MANIFESTS, load_case, parity_run, rebuild_input, synthetic_checkpoint
from yolo_tasks_fixtures import as_jpeg
from zoo import registry
from zoo.errors import ZooError
from zoo.models import yolov8
from zoo.models.yolov8.model import materialized
from zoo.models.yolov8.predict import log_line
from zoo.results import Results
from zoo.sources import Item, VideoWriter
from zoo.validate.capture import parse_fault, recording
from zoo.validate.reference import yolov8 as reference
from zoo.validate.reference.kernels import resize as reference_resize
from zoo.validate.reference.trace import Trace
from zoo.weights.checkpoint import read_checkpoint_with_meta
from zoo.weights.synthetic import read_manifest, synthetic_state_dict

ROOT = Path(__file__).parent.parent

OFFICIAL_PT = FIXTURES / "yolov8" / "yolov8n_seed0_official_layout.pt"
LAYERS = [f"model.{k}" for k in range(22)]


@pytest.fixture(scope="module")
def case():
    arrays, sidecar = load_case("yolov8", "yolov8n_seed0_320_thin")
    x = rebuild_input(sidecar, lambda: np.random.default_rng(1234).uniform(0, 1, (1, 3, 320, 320)).astype(np.float32))
    return x, arrays, sidecar


@pytest.fixture(scope="module")
def yolov8n_file(tmp_path_factory):
    """Synthetic seed-0 weights as a .safetensors in ultralytics naming (the weights of the upstream case)."""
    return synthetic_checkpoint("yolov8n", tmp_path_factory.mktemp("w") / "yolov8n.safetensors")


@pytest.fixture(scope="module")
def yolov8n_module():
    """The model of the upstream case's weights: synthetic_state_dict as drawn (zoo.load's synthetic:0
    gives its head an untrained detector's biases, zoo.models.yolov8.synthetic_init)."""
    sd = synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n.json"), 0)
    return registry.build(registry.get_spec("yolov8n"), registry.Weights(sd, "synthetic:0", {}))


@pytest.fixture
def yolov8n(yolov8n_module):
    """yolov8n_module as a newly loaded model: no predictor yet, so its first predict makes its run folder."""
    yolov8n_module.predictor = None
    return yolov8n_module


def sampled(full: np.ndarray, sampling: dict) -> np.ndarray:
    return full[np.ix_([0], sampling["channels"], sampling["rows"], sampling["cols"])]


def nchw(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32)).transpose(0, 3, 1, 2).astype(np.float64)


def check_against_case(arrays, sidecar, layers: dict, heads: list, output_nac: np.ndarray) -> dict:
    """Compare traced layers, head maps and the decoded output with the case; return the worst figures.

    output_nac: (N, 4 + nc, A) in upstream layout.
    """
    worst = {"layer_rel": 0.0, "head_rel": 0.0, "box_abs": 0.0, "box_rel": 0.0, "score_abs": 0.0}
    for name in LAYERS:
        ref = arrays[f"trace/{name}"].astype(np.float64)
        got = sampled(layers[name], sidecar["sampling"][f"trace/{name}"])
        assert got.shape == ref.shape, name
        worst["layer_rel"] = max(worst["layer_rel"], np.abs(got - ref).max() / np.abs(ref).max())
    for i, level in enumerate(("p3", "p4", "p5")):
        ref = arrays[f"head/{level}"].astype(np.float64)
        got = sampled(heads[i], sidecar["sampling"][f"head/{level}"])
        worst["head_rel"] = max(worst["head_rel"], np.abs(got - ref).max() / np.abs(ref).max())
    boxes_ref = arrays["output/boxes"].astype(np.float64)
    boxes = output_nac[:, :4, :]
    # boxes are pixels: the error scales with the coordinates (a small width is a difference of two
    # ~300 px corners), so it is taken relative to the largest coordinate
    worst["box_abs"] = np.abs(boxes - boxes_ref).max()
    worst["box_rel"] = worst["box_abs"] / np.abs(boxes_ref).max()
    anchors = sidecar["sampling"]["output/scores"]["anchors"]
    worst["score_abs"] = np.abs(output_nac[:, 4:, anchors] - arrays["output/scores"]).max()
    return worst


def test_mlx_yolov8n_matches_upstream_case(case, yolov8n_file):
    x, arrays, sidecar = case
    model = zoo.load("yolov8n", weights=yolov8n_file, device="cpu")
    with recording(model) as records:
        out = model(mx.array(x.transpose(0, 2, 3, 1)))
        mx.eval(out, [r.output for r in records.values()])
    # on the CPU Upsample and Concat hand their parts to the Conv after them (Conv.of_parts): the maps
    # they stand for are checked
    layers = {name: nchw(materialized(records[name].output)) for name in LAYERS}
    heads = [np.concatenate([nchw(records[f"model.22.cv2.{i}"].output), nchw(records[f"model.22.cv3.{i}"].output)], 1)
             for i in range(3)]
    assert out.shape == (1, 2100, 84)
    worst = check_against_case(arrays, sidecar, layers, heads, np.array(out).transpose(0, 2, 1).astype(np.float64))
    # measured on CPU (MLX 0.32.4): layers 1.6e-6, heads 4.5e-7, boxes 3.1e-5 px of 316 px (9.7e-8), scores 1.2e-7
    assert worst["layer_rel"] < 1e-5 and worst["head_rel"] < 1e-5, worst
    assert worst["box_rel"] < 1e-6 and worst["score_abs"] < 1e-6, worst


def test_numpy_reference_matches_upstream_case(case):
    x, arrays, sidecar = case
    sd = synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n.json"), 0)
    trace = Trace()
    y, maps = reference.forward(sd, x.astype(np.float64), trace)
    worst = check_against_case(arrays, sidecar, {n: trace.outputs[n] for n in LAYERS}, maps, y)
    # float64 against the case's float32 storage, whose rounding is all that is left (1.5e-5 px at 316 px)
    assert worst["layer_rel"] < 1e-6 and worst["head_rel"] < 1e-6, worst
    assert worst["box_abs"] <= 1.6e-5 and worst["score_abs"] < 1e-7, worst


@pytest.mark.parametrize("variant", ["yolov8n", "yolov8s", "yolov8m", "yolov8l", "yolov8x"])
def test_every_variant_loads_its_manifest_strictly_and_runs(variant):
    model = zoo.load(variant, weights="synthetic:0", device="cpu")
    manifest = read_manifest(MANIFESTS / f"{variant}.json")
    # every float tensor of the manifest is a parameter of the model, and nothing else is
    params = dict(tree_flatten(model.parameters()))
    assert set(params) == {k for k, (_, dtype) in manifest.items() if dtype != "int64"}
    out = model(mx.zeros((1, 64, 96, 3)))
    assert out.shape == (1, 8 * 12 + 4 * 6 + 2 * 3, 84)
    assert np.isfinite(np.array(out)).all()


def test_wrong_variant_weights_fail_in_one_line(yolov8n_file):
    with pytest.raises(ZooError, match=r"holds a yolov8n with 80 classes \(person, bicycle, .*\), not a yolov8s: "
                                       r"load it as 'yolov8' \(the scale from the file\) or 'yolov8n'"):
        zoo.load("yolov8s", weights=yolov8n_file, device="cpu")


def test_official_layout_pt_matches_the_safetensors_route(yolov8n):
    """The ultralytics-pickled fp16 checkpoint of the same weights: exactly their fp16 rounding."""
    sd, meta = read_checkpoint_with_meta(OFFICIAL_PT)
    synthetic = synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n.json"), 0)
    floats = [k for k in synthetic if synthetic[k].dtype == np.float32]
    assert all(sd[k].dtype == np.float16 and np.array_equal(sd[k], synthetic[k].astype(np.float16)) for k in floats)
    assert meta["names"][0] == "person" and len(meta["names"]) == 80
    from_pt = zoo.load("yolov8n", weights=OFFICIAL_PT, device="cpu")
    assert from_pt.names == dict(enumerate(yolov8.class_names())) and from_pt.dtype == mx.float32
    assert from_pt.imgsz == 640 and from_pt.nc == 80
    x = mx.array(np.random.default_rng(0).uniform(0, 1, (1, 64, 64, 3)).astype(np.float32))
    # the same fp16-rounded weights through the safetensors route give the same numbers
    rounded = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in synthetic.items()}
    model_rounded = registry.build(registry.get_spec("yolov8n"), registry.Weights(rounded, "rounded", {}))
    assert np.array_equal(np.array(from_pt(x)), np.array(model_rounded(x)))
    # against the float32 weights: only the weights' fp16 rounding (2^-11 relative) remains
    got, ref = np.array(from_pt(x)), np.array(yolov8n(x))
    rel = np.abs(got - ref).max() / np.abs(ref).max()
    assert 0 < rel < 1e-3, rel  # measured 1.1e-5
    half = zoo.load("yolov8n", weights=OFFICIAL_PT, dtype="float16", device="cpu")
    assert half.dtype == mx.float16 and half(x.astype(mx.float16)).dtype == mx.float16


# Candle's model.rs names (net.b1.0, ..., fpn.n1, ..., head) for ultralytics' layer indexes.
CANDLE_LAYERS = {0: "net.b1.0", 1: "net.b1.1", 2: "net.b2.0", 3: "net.b2.1", 4: "net.b2.2", 5: "net.b3.0",
                 6: "net.b3.1", 7: "net.b4.0", 8: "net.b4.1", 9: "net.b5.0", 12: "fpn.n1", 15: "fpn.n2",
                 16: "fpn.n3", 18: "fpn.n4", 19: "fpn.n5", 21: "fpn.n6", 22: "head"}


def candle_name(key: str) -> str:
    _, index, rest = key.split(".", 2)
    return f"{CANDLE_LAYERS[int(index)]}.{rest.replace('m.', 'bottleneck.', 1) if rest.startswith('m.') else rest}"


def test_candle_naming_loads_like_ultralytics_naming(tmp_path, yolov8n):
    synthetic = synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n.json"), 0)
    candle = {candle_name(k): v for k, v in synthetic.items() if not k.endswith("num_batches_tracked")}
    assert "net.b2.0.bottleneck.0.cv1.conv.weight" in candle and "head.dfl.conv.weight" in candle
    path = tmp_path / "yolov8n_candle.safetensors"
    save_file(candle, str(path))
    model = zoo.load("yolov8n", weights=path, device="cpu")
    x = mx.array(np.random.default_rng(1).uniform(0, 1, (1, 64, 64, 3)).astype(np.float32))
    assert np.array_equal(np.array(model(x)), np.array(yolov8n(x)))


def test_sanitize_keeps_ultralytics_naming():
    sd = {"model.0.conv.weight": np.zeros((16, 3, 3, 3), np.float32)}
    assert yolov8.sanitize(sd, {}) is sd
    mapped = yolov8.sanitize({"net.b2.0.bottleneck.1.cv2.bn.bias": 1, "fpn.n6.m.0.cv1.conv.weight": 2, "head.cv2.0.2.bias": 3}, {})
    assert set(mapped) == {"model.2.m.1.cv2.bn.bias", "model.21.m.0.cv1.conv.weight", "model.22.cv2.0.2.bias"}


def test_checkpoint_names_are_read_as_a_dict_and_must_match_the_head():
    assert yolov8.parse_names({i: f"thing{i}" for i in range(80)}, 80, "f")[1] == "thing1"
    assert yolov8.parse_names(None, 80, "f")[0] == "person" and yolov8.parse_names(None, 2, "f") == {0: "class0", 1: "class1"}
    with pytest.raises(ZooError, match="f names 3 classes but its detection head has 80"):
        yolov8.parse_names({0: "a", 1: "b", 2: "c"}, 80, "f")
    # safetensors metadata is text: a dict literal with string ids, or a list literal
    assert yolov8.parse_names(repr({str(i): f"t{i}" for i in range(80)}), 80, "f")[10] == "t10"
    assert yolov8.parse_names("['a', 'b']", 2, "f") == {0: "a", 1: "b"}
    with pytest.raises(ZooError, match="not a list or an"):
        yolov8.parse_names("person, car", 2, "f")


@pytest.mark.parametrize("fault", ["model.4.m.1=zero", "model.22.cv3.1.1.conv=noise", "model.15=nan",
                                   "model.2.m.0=drop-residual"])
def test_injected_fault_is_caught_at_its_layer(fault, yolov8n):
    spec = registry.get_spec("yolov8n")
    sd = synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n.json"), 0)
    run = parity_run(spec, yolov8n, sd, imgsz=[64])
    assert run.compare_mode("isolated").passed
    report = run.compare_mode("isolated", parse_fault(fault))
    assert report.first_failure == fault.split("=")[0]


# ---- pre-processing ---------------------------------------------------------------------


def postprocess_case():
    return np.load(FIXTURES / "yolov8" / "postprocess_case.npz")


def test_letterbox_matches_ultralytics_cv2_bit_for_bit():
    data = postprocess_case()
    small = json.loads((FIXTURES / "yolov8" / "letterbox_cases.json").read_text())["letterbox_small"]
    orig = data["letterbox_small/orig"].astype(np.uint8)
    assert list(orig.shape[:2]) == small["orig_hw"]
    out = yolov8.letterbox(orig, (small["imgsz"], small["imgsz"]), auto=small["auto"])
    assert np.array_equal(out, data["letterbox_small/out"].astype(np.uint8))


def test_float_bilinear_would_not_match_cv2():
    """Why resize_linear exists: a float bilinear resize rounded to uint8 is off on many pixels."""
    data = postprocess_case()
    orig = data["letterbox_small/orig"]
    ref = data["letterbox_small/out"][10:53]
    float_resized = np.rint(reference_resize(orig[None].astype(np.float32), (43, 64))[0])
    assert (float_resized != ref).mean() > 0.1  # measured 13%
    assert np.array_equal(yolov8.resize_linear(orig.astype(np.uint8), 43, 64), ref.astype(np.uint8))


def test_resize_linear_properties():
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    # a constant image stays constant; an exact 2x reduction is the rounded 2x2 mean (cv2's INTER_AREA)
    assert (yolov8.resize_linear(np.full((9, 11, 3), 200, np.uint8), 23, 31) == 200).all()
    even = img[:36, :52]
    mean = (even.reshape(18, 2, 26, 2, 3).astype(int).sum(axis=(1, 3)) + 2) >> 2
    assert np.array_equal(yolov8.resize_linear(even, 18, 26), mean)
    # upscaling by 2: corners keep the corner pixels
    up = yolov8.resize_linear(img, 74, 106)
    assert np.array_equal(up[[0, 0, -1, -1], [0, -1, 0, -1]], img[[0, 0, -1, -1], [0, -1, 0, -1]])


@pytest.mark.parametrize("example", json.loads((FIXTURES / "yolov8" / "letterbox_cases.json").read_text())["letterbox_examples"],
                         ids=lambda e: f"{e['orig_hw'][0]}x{e['orig_hw'][1]}-auto{e['auto']}")
def test_letterbox_geometry(example):
    img = np.full((*example["orig_hw"], 3), 7, np.uint8)
    out = yolov8.letterbox(img, (example["imgsz"], example["imgsz"]), auto=example["auto"])
    top, bottom, left, right = example["pad_top_bottom_left_right"]
    h, w = out.shape[:2]
    assert [h, w] == example["out_hw"]
    assert (out[top : h - bottom, left : w - right] == 7).all()
    pad = np.ones((h, w), bool)
    pad[top : h - bottom, left : w - right] = False
    assert (out[pad] == 114).all()


def test_batches_of_one_size_are_rectangles_of_mixed_sizes_squares():
    a, b = np.zeros((480, 640, 3), np.uint8), np.zeros((640, 480, 3), np.uint8)
    assert yolov8.letterbox_batch([a, a], (640, 640)).shape == (2, 480, 640, 3)
    assert yolov8.letterbox_batch([a, b], (640, 640)).shape == (2, 640, 640, 3)


def test_imgsz_rounds_up_to_multiples_of_32_with_a_warning(capsys):
    assert yolov8.check_imgsz(640) == (640, 640) and capsys.readouterr().err == ""
    assert yolov8.check_imgsz(100) == (128, 128)
    assert "imgsz 100 is not a multiple of 32; using 128" in capsys.readouterr().err
    assert yolov8.check_imgsz((300, 641)) == (320, 672)
    assert yolov8.check_imgsz([320]) == (320, 320)  # ultralytics' list of one: square (it was refused)
    with pytest.raises(ZooError, match="must be from 1 to 8192"):
        yolov8.check_imgsz(0)
    with pytest.raises(ZooError, match="bad imgsz"):
        yolov8.check_imgsz([320, 320, 3])
    with pytest.raises(ZooError, match=r"^bad imgsz 640\.0: give one integer"):  # a TypeError (not iterable)
        yolov8.check_imgsz(640.0)


# ---- post-processing ----------------------------------------------------------------------


@pytest.mark.parametrize("key, kwargs", [("det", {}), ("det_agnostic", {"agnostic": True}), ("det_maxdet3", {"max_det": 3})])
def test_nms_matches_upstream_case(key, kwargs):
    data = postprocess_case()
    pred = data["pred"][0].T  # upstream (84, N) -> ours (N, 84)
    det = yolov8.non_max_suppression(pred, 0.25, 0.7, **kwargs)
    ref = data[key]
    assert det.shape == ref.shape
    assert np.array_equal(det[:, 5], ref[:, 5]) and np.array_equal(det[:, 4], ref[:, 4])
    assert np.abs(det[:, :4] - ref[:, :4]).max() <= 1e-4


def test_class_filter_and_conf_are_strict():
    data = postprocess_case()
    pred = data["pred"][0].T
    det = yolov8.non_max_suppression(pred, 0.25, 0.7, classes=[0, 16])
    ref = data["det"]
    assert np.array_equal(det, ref[np.isin(ref[:, 5], [0, 16])])
    # row O scores exactly 0.25: not above conf 0.25, above 0.2499
    assert 14 not in data["det_index"]
    assert (yolov8.non_max_suppression(pred, 0.2499, 0.7)[:, 4] == np.float32(0.25)).any()
    assert yolov8.non_max_suppression(pred, 1.0, 0.7).shape == (0, 6)


def test_beyond_max_nms_candidates_the_best_go_to_nms(monkeypatch):
    monkeypatch.setattr(yolov8.ops, "MAX_NMS", 50)  # ultralytics' 30000, scaled down to keep the test fast
    n = 80
    pred = np.zeros((n, 6), np.float32)
    pred[:, 0], pred[:, 1] = np.arange(n) % 9 * 10, np.arange(n) // 9 * 10  # 4x4 boxes on a 10 px grid
    pred[:, 2:4] = 4
    pred[:, 4] = np.random.default_rng(0).permutation(n) / n * 0.5 + 0.3
    det = yolov8.non_max_suppression(pred, 0.25, 0.7, max_det=300)
    assert len(det) == 50 and np.array_equal(det[:, 4], np.sort(pred[:, 4])[::-1][:50])


@pytest.mark.parametrize("key, frame, image", [
    ("det_scaled_orig_from_640x640", (640, 640), (480, 640)),
    ("det_scaled_orig_from_480x640", (480, 640), (480, 640)),
    ("det_scaled_orig_from_384x640_to_720x1280", (384, 640), (720, 1280)),
])
def test_scale_boxes_matches_upstream_case(key, frame, image):
    data = postprocess_case()
    assert np.abs(yolov8.scale_boxes(frame, data["det"][:, :4], image) - data[key]).max() <= 1e-4


# ---- the model's input contract, predict, results ---------------------------------------


def test_raw_call_contract(yolov8n):
    with pytest.raises(ZooError, match="multiples of 32"):
        yolov8n(mx.zeros((1, 64, 70, 3)))
    with pytest.raises(ZooError, match=r"\(N, H, W, 3\)"):
        yolov8n(mx.zeros((1, 3, 64, 64)))
    with pytest.raises(ZooError, match="float16"):
        yolov8n(mx.zeros((1, 64, 64, 3), dtype=mx.float16))


def test_predict_mixed_inputs(yolov8n, tmp_path):
    rng = np.random.default_rng(5)
    path = tmp_path / "a.png"
    Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8)).save(path)
    pil = Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
    array = rng.uniform(0, 1, (30, 60, 3)).astype(np.float32)
    results = yolov8n.predict([str(path), pil, array], conf=0.05, imgsz=64, classes="remote,bird")
    assert len(results) == 3 and results[0].path == str(path) and results[1].path == "image0.jpg"
    for r, (h, w) in zip(results, [(50, 70), (40, 40), (30, 60)]):
        labels = {r.names[int(c)] for c in r.boxes.cls}
        assert len(r) > 0 and labels <= {"remote", "bird"} and r.orig_shape == (h, w)
        assert (r.boxes.xyxy[:, [0, 2]] >= 0).all() and (r.boxes.xyxy[:, [0, 2]] <= w).all()
        assert (r.boxes.xyxy[:, [1, 3]] >= 0).all() and (r.boxes.xyxy[:, [1, 3]] <= h).all()
        assert (np.diff(r.boxes.conf) <= 0).all() and (r.boxes.conf > 0.05).all()
        assert set(r.speed) == {"preprocess", "inference", "postprocess"}
    assert len(yolov8n.predict(array, conf=0.05, imgsz=64, max_det=2)[0]) == 2


def test_predict_over_a_folder_skips_a_bad_file_with_a_warning(yolov8n, tmp_path, capsys):
    """ultralytics skips an image it cannot read (a warning) and goes on: `for r in model("photos/", stream=True)`
    over a folder with one broken file must not end at it. The only input's problem stays the call's error."""
    rng = np.random.default_rng(6)
    for name in ("a.png", "c.png"):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / name)
    (tmp_path / "b.jpg").write_bytes(b"not a jpeg")
    paths = [r.path for r in yolov8n.predict(tmp_path, stream=True, imgsz=64)]
    assert paths == [str(tmp_path / "a.png"), str(tmp_path / "c.png")]
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: skipped: cannot read {tmp_path / 'b.jpg'}: not an image file Pillow recognises"]
    with pytest.raises(ZooError, match="not an image file"):
        yolov8n.predict(tmp_path / "b.jpg", imgsz=64)


@pytest.mark.parametrize("kwargs, message", [
    ({"conf": 1.5}, r"^conf 1.5 is outside \[0, 1\]"),
    ({"iou": -0.1}, r"^iou -0.1 is outside \[0, 1\]"),
    ({"max_det": 0}, "^max_det 0 must be a positive integer"),
    ({"classes": "person,unicorn"}, "unknown classes 'unicorn': use names or ids 0-79 of person, bicycle"),
])
def test_predict_rejects_bad_options(yolov8n, kwargs, message):
    with pytest.raises(ZooError, match=message):
        yolov8n.predict(np.zeros((32, 32, 3), np.uint8), **kwargs)


def test_results_text_forms_and_save(tmp_path):
    img = np.zeros((100, 120, 3), np.uint8)
    names = dict(enumerate(yolov8.class_names()))
    boxes = np.array([[10, 20, 50, 80, 0.9, 0], [0, 0, 30, 30, 0.8, 5], [60, 5, 110, 95, 0.5, 0]], np.float32)
    r = Results(img, "x.jpg", names, boxes)
    assert r.verbose() == "2 persons, 1 bus, " and r[1:].verbose() == "1 person, 1 bus, "
    # the line docs/yolov8.md shows is the one the command prints (it showed "4 person, 1 bus")
    shown = re.search(r"^bus\.jpg: (.*) \(12\.3 ms\)$", (ROOT / "docs" / "yolov8.md").read_text(), re.M).group(1)
    four = Results(img, "bus.jpg", names, np.array([*[[0, 0, 9, 9, 0.9, 0]] * 4, [0, 0, 9, 9, 0.8, 5]], np.float32),
                   speed={"preprocess": 1.0, "inference": 11.0, "postprocess": 0.3})
    assert log_line(Item("bus.jpg", 0, "bus", "bus"), four, 1) == f"bus.jpg: {shown} (12.3 ms)"
    assert r.summary()[0] == {"name": "person", "class": 0, "confidence": 0.9,
                              "box": {"x1": 10.0, "y1": 20.0, "x2": 50.0, "y2": 80.0}}
    assert json.loads(r.to_json(normalize=True))[0]["box"] == {"x1": 0.08333, "y1": 0.2, "x2": 0.41667, "y2": 0.8}
    assert r.to_coco(7)[0] == {"image_id": 7, "file_name": "x.jpg", "category_id": 1,
                               "bbox": [10.0, 20.0, 40.0, 60.0], "score": 0.9}
    # COCO's own category ids for COCO's 80 classes (bus: class 5, COCO id 6; toothbrush: 79 -> 90); else class + 1
    assert [d["category_id"] for d in r.to_coco(7, yolov8.coco_category_ids(names))] == [1, 6, 1]
    assert yolov8.coco_category_ids(names)[79] == 90 and yolov8.coco_category_ids({0: "a", 1: "b"}) == [1, 2]
    saved = r.save(tmp_path / "out.jpg")
    with Image.open(saved) as im:
        assert im.size == (120, 100)
        drawn = np.asarray(im.convert("RGB"))
    assert drawn.any() and not list(tmp_path.glob(".*.part"))
    with pytest.raises(ZooError, match="unknown image suffix"):
        r.save(tmp_path / "out.xyz")
    empty = r.new()
    assert empty.verbose() == "(no detections), " and json.loads(empty.to_json()) == [] and empty.summary() == []


def test_classes_as_ultralytics_documents_them():
    """ultralytics: "classes=0, or classes=[0,2,3]"; a single int raised TypeError ('int' object is not iterable)."""
    from zoo.models.yolov8.ops import resolve_classes

    names = {i: n for i, n in enumerate(yolov8.class_names())}
    assert resolve_classes(0, names) == [0] == resolve_classes(np.int64(0), names) == resolve_classes("person", names)
    assert resolve_classes([0, 2, 3], names) == [0, 2, 3] == resolve_classes("car,0,motorcycle", names)
    with pytest.raises(ZooError, match="unknown classes 80"):
        resolve_classes(80, names)
    with pytest.raises(ZooError, match="unknown classes True"):  # a bool is not a class id
        resolve_classes(True, names)
    with pytest.raises(ZooError, match="unknown classes 0.5: use names or ids"):  # it was a TypeError
        resolve_classes(0.5, names)
    assert resolve_classes(np.array([2, 0]), names) == [0, 2]


def test_class_names_ship_with_the_package():
    names = yolov8.class_names()
    assert len(names) == 80 and names[0] == "person" and names[79] == "toothbrush"
    assert re.fullmatch(r"[a-z ]+", "".join(names))
    assert Path(yolov8.CLASS_NAMES).parent.name == "data"


def test_inner_model_carries_names_and_strides_as_ultralytics_detection_model(yolov8n):
    """Scripts read ultralytics' inner DetectionModel: CLASS_NAMES_DICT = model.model.names (supervision's
    examples), check_imgsz(size, stride=int(model.model.stride.max())). model.model stays the layers the checkpoint
    names (model.0 ...), with no new parameter."""
    assert yolov8n.model.names is yolov8n.names and yolov8n.model.names[0] == "person" and len(yolov8n.names) == 80
    assert yolov8n.model.stride.tolist() == [8.0, 16.0, 32.0] and int(yolov8n.model.stride.max()) == 32
    assert yolov8n.model.stride.dtype == np.float32
    keys = [k for k, _ in tree_flatten(yolov8n.parameters())]
    assert keys[0].startswith("model.0.") and all(k.startswith("model.") and "names" not in k for k in keys)
    assert isinstance(yolov8n.model["0"].conv, nn.Conv2d) and yolov8n.model.children_in_order()[-1] is yolov8n.head
    assert sorted(yolov8n.model.keys(), key=int) == [str(i) for i in range(23)]  # only layers to walk
    assert sorted(yolov8n.parameters()) == ["model"] and "names" not in yolov8n.model.parameters()


def test_a_list_gives_ultralytics_one_batch_results_whatever_batch_says(yolov8n, tmp_path, monkeypatch):
    """ultralytics' predict takes a list as one batch (LoadPilAndNumpy: bs is the list's length, batch= is for
    folders, globs, .txt lists and videos) and opens a list's files with PIL, whose filename each Results' path is.
    Here batch=N still bounds the images of a forward pass, but the Results are the one batch's: letterboxed as one
    (mixed sizes: imgsz square, also for a part of one size), in the list's order, with the paths as given."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    (tmp_path / "imgs").mkdir()
    for i, hw in enumerate([(32, 128), (32, 128), (128, 32), (32, 128)]):
        Image.fromarray(rng.integers(0, 256, (*hw, 3), np.uint8)).save(f"imgs/{i}.png")
    paths = ["imgs/1.png", Path("imgs/0.png"), "./imgs/2.png", "imgs/3.png"]
    options = {"imgsz": 128, "conf": 0.05}
    whole = yolov8n.predict(paths, **options)
    alone = yolov8n.predict(paths[:2], **options)  # one size: the minimal rectangle, other boxes
    assert len(whole[0]) and not np.array_equal(whole[0].boxes.data, alone[0].boxes.data)
    assert [r.path for r in whole] == ["imgs/1.png", "imgs/0.png", "./imgs/2.png", "imgs/3.png"]  # PIL's filename
    arrays = [np.asarray(Image.open(p))[..., ::-1] for p in paths]
    for source, names in ((paths, [r.path for r in whole]), (arrays, [f"image{i}.jpg" for i in range(4)])):
        for parts in (yolov8n.predict(source, batch=2, **options), list(yolov8n(source, batch=3, stream=True,
                                                                                  **options))):
            assert [r.path for r in parts] == names
            assert all(np.array_equal(a.boxes.data, b.boxes.data) for a, b in zip(whole, parts, strict=True))
            assert all(list(r.speed) == ["preprocess", "inference", "postprocess"] for r in parts)
    # a folder is ultralytics' LoadImagesAndVideos: batches of batch=, sorted, absolute paths
    folder = yolov8n.predict("imgs", batch=2, **options)
    assert [r.path for r in folder] == [str(tmp_path / f"imgs/{i}.png") for i in range(4)]


def test_the_head_as_scripts_reach_it_through_model_model_model(yolov8n):
    """ultralytics scripts read the head as model.model.model[-1] (its nc, nl, stride, kpt_shape, end2end, type
    name) and model.model.yaml['nc'] / ['scale']: the values are this model's; an end2end head asked for or a yaml
    key not held is one error, never a made-up value."""
    layers = yolov8n.model.model
    assert len(layers) == 23 and layers[-1] is yolov8n.head and layers[0] is yolov8n.model["0"]
    head = layers[-1]
    assert type(head).__name__ == "Detect" and head.nc == yolov8n.model.nc == 80 and head.nl == 3
    assert head.stride.tolist() == [8.0, 16.0, 32.0] and head.stride.dtype == np.float32
    assert head.reg_max == 16 and head.no == 80 + 64 and head.end2end is False
    head.end2end = False  # scripts switch an end2end head to NMS: these heads are that already
    with pytest.raises(ZooError, match=r"Detect.end2end = True: YOLOv8 and YOLO11 heads go through NMS"):
        head.end2end = True
    assert yolov8n.model.yaml == {"nc": 80, "scale": "n", "ch": 3} and yolov8n.model.yaml["nc"] == 80
    with pytest.raises(ZooError, match=r"model.model.yaml\['backbone'\] is not available in mlx-zoo: it holds nc, "
                                       r"scale, ch; the layers are model.model.model"):
        yolov8n.model.yaml["backbone"]
    pose = zoo.load("yolov8n-pose", weights="synthetic:0")
    assert pose.model.model[-1].kpt_shape == (17, 3) and pose.model.yaml["kpt_shape"] == [17, 3]
    assert [k for k, _ in tree_flatten(yolov8n.parameters()) if "yaml" in k or "stride" in k] == []


def test_save_dir_names_the_run_folder_without_making_it(yolov8n, tmp_path, monkeypatch):
    """As ultralytics' predictor: every Results carries its run folder, absolute, also with save=False (code reads
    r.save_dir to put its own files there); nothing is created on disk unless something is saved."""
    monkeypatch.chdir(tmp_path)
    image = np.zeros((48, 64, 3), np.uint8)
    [r] = yolov8n.predict(image, imgsz=64)
    assert r.save_dir == str(tmp_path / "runs/detect/predict") and not Path("runs").exists()
    [r] = list(yolov8n(image, imgsz=64, stream=True, project="out", name="mine"))
    assert r.save_dir == str(tmp_path / "out/mine") and not Path("out").exists()
    [saved] = yolov8n.predict(image, imgsz=64, save=True)  # the folder of the call before, as ultralytics'
    assert saved.save_dir == str(tmp_path / "out/mine") and Path(saved.save_dir, "image0.jpg").is_file()
    # name= again: a new run folder, as ultralytics' increment_path (mine is taken now)
    [r] = yolov8n.predict(image, imgsz=64, name="mine", project="out")
    assert r.save_dir == str(tmp_path / "out/mine2") and sorted(Path("out").iterdir()) == [Path("out/mine")]


def test_predict_calls_of_a_model_share_its_run_folder_as_ultralytics(yolov8n, tmp_path, monkeypatch):
    """ultralytics keeps one predictor per model (engine/model.py predict): a tutorial's
    model.predict('a.jpg', save=True) then model.predict('b.jpg', save=True) finds both in runs/detect/predict, and
    the second call writes over what the first wrote there under the same names (annotated image replaced, labels
    appended, crops numbered on); only project=/name= or another device= give a new folder (predict2)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    for name in ("a", "b"):
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), np.uint8)).save(f"{name}.png")
    options = {"conf": 0.05, "imgsz": 64, "save": True}
    [a] = yolov8n.predict("a.png", **options)
    [b] = yolov8n.predict("b.png", save_txt=True, save_crop=True, **options)
    run = tmp_path / "runs/detect/predict"
    assert a.save_dir == b.save_dir == str(run) and yolov8n.predictor.save_dir == run
    assert (run / "a.jpg").is_file() and (run / "b.jpg").is_file() and sorted(Path("runs/detect").iterdir()) == [
        Path("runs/detect/predict")]
    labels = (run / "labels/b.txt").read_text()
    crops = sorted(run.glob("crops/*/*.jpg"))
    assert len(b) and len(labels.splitlines()) == len(b) and len(crops) == len(b)
    [again] = yolov8n.predict("b.png", save_txt=True, save_crop=True, **{**options, "line_width": 5})
    assert (run / "labels/b.txt").read_text() == labels * 2  # appended, as ultralytics' open(..., "a")
    assert len(list(run.glob("crops/*/*.jpg"))) == 2 * len(b)  # numbered on, none replaced
    assert np.array_equal(np.asarray(Image.open(run / "b.jpg")), as_jpeg(again.plot(line_width=5)[..., ::-1]))
    # device= as the predictor's keeps the folder; another rebuilds the predictor: a new one, as ultralytics'
    yolov8n.predict("a.png", device="cpu", **options)
    [r] = yolov8n.predict("a.png", device="cpu", **options)
    assert r.save_dir == str(tmp_path / "runs/detect/predict2")
    [r] = yolov8n.predict("a.png", **options)
    assert r.save_dir == str(tmp_path / "runs/detect/predict2")


def test_the_run_folder_stays_after_a_change_of_folder(yolov8n, tmp_path, monkeypatch):
    """The model's run folder is where its first call put it (absolute, as ultralytics' runs_dir): a call after
    os.chdir wrote into the new folder's runs/detect/predict, among another session's outputs there."""
    for folder in ("first", "second/runs/detect/predict"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "second/runs/detect/predict/earlier.jpg").write_bytes(b"another session's")
    monkeypatch.chdir(tmp_path / "first")
    image = np.zeros((48, 64, 3), np.uint8)
    [r] = yolov8n.predict(image, imgsz=64, save=True)
    monkeypatch.chdir(tmp_path / "second")
    [again] = yolov8n.predict(image, imgsz=64, save=True)
    assert again.save_dir == r.save_dir == str(tmp_path / "first/runs/detect/predict")
    assert yolov8n.predictor.save_dir == tmp_path / "first/runs/detect/predict"
    assert sorted(p.name for p in Path("runs/detect/predict").iterdir()) == ["earlier.jpg"]


def test_predict_saves_images_as_jpg_under_ultralytics_names(yolov8n, tmp_path, monkeypatch):
    """As ultralytics' predictor, predict saves every annotated image as <name>.jpg (a script opens
    predict/bus.jpg after bus.png); a.png and a.jpg of one folder are a.jpg and a_2.jpg, neither lost."""
    monkeypatch.chdir(tmp_path)
    Path("photos").mkdir()
    for name in ("a.png", "a.jpg", "b.webp"):
        Image.fromarray(np.random.default_rng(7).integers(0, 256, (48, 64, 3), np.uint8)).save(f"photos/{name}")
    results = yolov8n.predict("photos", conf=0.05, imgsz=64, save=True, save_txt=True)
    run = Path(results[0].save_dir)
    assert sorted(p.name for p in run.glob("*.*")) == ["a.jpg", "a_2.jpg", "b.jpg"]
    saved = {p.name: np.asarray(Image.open(p)) for p in run.glob("*.jpg")}
    # each file is one image's plot, as a JPEG: the three images in three files
    assert sorted(next(name for name, image in saved.items() if np.array_equal(image, as_jpeg(r.plot()[..., ::-1])))
                  for r in results) == ["a.jpg", "a_2.jpg", "b.jpg"]


def test_a_shared_run_folder_replaces_only_the_models_own_outputs(yolov8n, tmp_path, monkeypatch):
    """Within the model's run folder a later call may write over what its earlier calls wrote, never a file they
    did not write (put there since, or one of theirs changed since) nor an input: one error, the file untouched."""
    monkeypatch.chdir(tmp_path)
    Image.fromarray(np.random.default_rng(7).integers(0, 256, (48, 64, 3), np.uint8)).save("a.jpg")
    options = {"conf": 0.05, "imgsz": 64}
    [r] = yolov8n.predict("a.jpg", **options)  # names runs/detect/predict, not made
    run = Path(r.save_dir)
    run.mkdir(parents=True)
    (run / "a.jpg").write_bytes(b"the user's")
    with pytest.raises(ZooError, match=rf"output {re.escape(str(run))}/a.jpg exists and is no output of this model's "
                                       r"earlier predict calls: pass exist_ok=True to replace it, or project=/name="):
        yolov8n.predict("a.jpg", save=True, save_txt=True, **options)
    assert (run / "a.jpg").read_bytes() == b"the user's" and not (run / "labels").exists()
    (run / "a.jpg").unlink()
    yolov8n.predict("a.jpg", save=True, save_txt=True, **options)
    (run / "labels/a.txt").write_text("edited\n")  # an output of the model's, changed since
    with pytest.raises(ZooError, match=r"labels/a.txt exists and is no output of this model's"):
        yolov8n.predict("a.jpg", save_txt=True, **options)
    assert (run / "labels/a.txt").read_text() == "edited\n"
    with pytest.raises(ZooError, match=rf"output {re.escape(str(run))}/a.jpg is the input file"):
        yolov8n.predict(run / "a.jpg", save=True, **options)
    [r] = yolov8n.predict("a.jpg", save_txt=True, exist_ok=True, **options)  # asked for: appended as ultralytics
    assert (run / "labels/a.txt").read_text().startswith("edited\n") and r.save_dir == str(tmp_path / run)
    # a video's annotated video likewise: the model's replaced by the next call, another file's refused
    with VideoWriter(Path("clip.mp4"), fps=5.0) as video:
        for i in range(2):
            video.write(np.full((48, 64, 3), 40 * i, np.uint8))
    for _ in range(2):
        assert len(yolov8n.predict("clip.mp4", save=True, **options)) == 2
    (run / "clip.mp4").write_bytes(b"the user's")
    with pytest.raises(ZooError, match=r"clip.mp4 exists and is no output of this model's earlier predict calls"):
        yolov8n.predict("clip.mp4", save=True, **options)
    assert (run / "clip.mp4").read_bytes() == b"the user's"


def test_a_folder_source_holding_the_run_folder_is_predicted_again(yolov8n, tmp_path, monkeypatch):
    """predict('.', save=True) twice from a folder of photos: the second call writes over the first's outputs in
    runs/detect/predict (no input: a folder is read without its subfolders), as ultralytics' does; it was refused
    as 'a file of the input folder .'. The run folder's files a call reads are still never replaced."""
    monkeypatch.chdir(tmp_path)
    Image.fromarray(np.random.default_rng(7).integers(0, 256, (48, 64, 3), np.uint8)).save("a.jpg")
    options = {"conf": 0.05, "imgsz": 64, "save": True}
    for _ in range(2):
        [r] = yolov8n.predict(".", **options)
        assert r.save_dir == str(tmp_path / "runs/detect/predict")
    before = Path("runs/detect/predict/a.jpg").read_bytes()
    refusal = rf"output {re.escape(str(tmp_path))}/runs/detect/predict/a.jpg is the input file"
    for source in ("runs/detect/predict", "**/*.jpg"):
        with pytest.raises(ZooError, match=refusal):
            yolov8n.predict(source, **options)
    assert Path("runs/detect/predict/a.jpg").read_bytes() == before


def test_a_dangling_link_in_the_run_folder_is_a_file_there(yolov8n, tmp_path, monkeypatch):
    """A link to nothing where an output goes is an existing file that no earlier call wrote (the error that names
    exist_ok, not 'it appeared while this run was writing it ... overwrite=True', a keyword predict has not); with
    exist_ok=True the link itself is replaced (nothing made where it points); a crop numbers on past it."""
    monkeypatch.chdir(tmp_path)
    Image.fromarray(np.random.default_rng(7).integers(0, 256, (48, 64, 3), np.uint8)).save("b.jpg")
    options = {"conf": 0.05, "imgsz": 64}
    [r] = yolov8n.predict("b.jpg", save_crop=True, **options)
    run = Path(r.save_dir)
    crops = next(run.glob("crops/*"))
    made = len(list(crops.iterdir()))  # b.jpg, b2.jpg ...: the link takes the next name
    (run / "labels").mkdir()
    for link in (run / "b.jpg", run / "labels/b.txt", crops / f"b{made + 1}.jpg"):
        link.symlink_to(tmp_path / "nowhere")
    for saved in ({"save": True}, {"save_txt": True}):
        with pytest.raises(ZooError, match=r"exists and is no output of this model's earlier predict calls: pass "
                                           r"exist_ok=True to replace it"):
            yolov8n.predict("b.jpg", **saved, **options)
    yolov8n.predict("b.jpg", save_crop=True, **options)
    assert len([p for p in crops.iterdir() if p.is_file()]) == 2 * made and (crops / f"b{made + 1}.jpg").is_symlink()
    [r] = yolov8n.predict("b.jpg", save=True, save_txt=True, exist_ok=True, **options)
    assert not (run / "b.jpg").is_symlink() and len((run / "labels/b.txt").read_text().splitlines()) == len(r)
    assert not Path("nowhere").exists()


def test_deprecated_ultralytics_predict_keywords_mean_what_they_mean_there(yolov8n, tmp_path, monkeypatch, capsys):
    """ultralytics' predict docs of YOLOv8 pass hide_labels=, hide_conf=, boxes=, line_thickness=; ultralytics takes
    them as show_labels/show_conf (negated), show_boxes and line_width with a deprecation warning: so here, a note
    on stderr; the old name with its new one is one error."""
    monkeypatch.chdir(tmp_path)
    image = np.random.default_rng(7).integers(0, 256, (48, 64, 3), np.uint8)
    def drawn(**options) -> np.ndarray:  # the calls share one run folder: each drawing read before the next call
        [r] = yolov8n(image, conf=0.05, imgsz=64, save=True, **options)
        assert len(r)
        return np.asarray(Image.open(Path(r.save_dir) / "image0.jpg"))

    old = drawn(hide_labels=True, hide_conf=False, line_thickness=1)
    note = capsys.readouterr().err
    assert "note: predict(hide_labels=...) is deprecated in ultralytics: it means show_labels=False" in note
    assert "line_width=1, pass that" in note
    new, plain = drawn(show_labels=False, line_width=1), drawn()
    assert np.array_equal(old, new) and not np.array_equal(old, plain)
    assert np.array_equal(drawn(boxes=False), drawn(show_boxes=False))
    with pytest.raises(ZooError, match=r"predict\(hide_conf=..., show_conf=...\): hide_conf is ultralytics' old name "
                                       r"of show_conf; pass show_conf alone"):
        yolov8n(image, hide_conf=True, show_conf=True)


def test_call_forms_and_ultralytics_keywords(yolov8n, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    image = np.random.default_rng(7).integers(0, 256, (48, 64, 3), np.uint8)
    called = yolov8n(image, conf=0.05, imgsz=64, verbose=True, save=True, save_txt=True, device="cpu")
    predicted = yolov8n.predict(image, conf=0.05, imgsz=64)
    assert len(called) == 1 and np.array_equal(called[0].boxes.data, predicted[0].boxes.data) and len(predicted[0])
    r = called[0]
    assert r.path == "image0.jpg" and r.save_dir == str(tmp_path / "runs/detect/predict")
    assert Path("runs/detect/predict/image0.jpg").is_file()
    assert len(Path("runs/detect/predict/labels/image0.txt").read_text().splitlines()) == len(r)
    assert capsys.readouterr().err.startswith(f"image0.jpg: {r.verbose()[:-2]} (")
    # a second call saves into the same folder, as ultralytics'; half=True on a float32 model says so
    again = list(yolov8n(image, stream=True, conf=0.05, imgsz=64, save=True, half=True))
    assert again[0].save_dir == str(tmp_path / "runs/detect/predict") and not Path("runs/detect/predict2").exists()
    assert "note: half=True: this model computes in float32" in capsys.readouterr().err
    with pytest.raises(ZooError, match=r"unknown keyword argument augmented=: it takes stream, conf, iou, "):
        yolov8n(image, augmented=True)
    # ultralytics' predict takes its val option save_json=True and writes nothing: the error names what writes COCO's
    with pytest.raises(ZooError, match=r"unknown keyword argument save_json=: COCO records: r\.to_coco\(image_id\) "
                                       r"on each result .* --save-json; it takes stream, "):
        yolov8n(image, save_json=True)
    with pytest.raises(ZooError, match=r"device='cuda:1': MLX runs on one device"):
        yolov8n.predict(image, device="cuda:1")
    with pytest.raises(ZooError, match=r"batch=0 must be a positive integer"):
        yolov8n.predict(image, batch=0)
    with pytest.raises(ZooError, match="takes no options"):
        yolov8n(mx.zeros((1, 64, 64, 3)), conf=0.5)


def test_dfl_softmax_runs_in_c_on_the_cpu_with_mlxs_values():
    """The DFL's softmax over 16 bins is zoo's C form on the CPU (MLX's CPU exp was 4x slower there)."""
    from zoo.kernels import coverage
    from zoo.models.yolov8.model import DFL

    dfl = DFL()
    bins = mx.arange(16, dtype=mx.float32)
    dfl.conv.weight = bins.reshape(1, 1, 1, 16)
    x = mx.random.normal((2, 64, 300), key=mx.random.key(5)) * 4
    noted = []
    with coverage.listening(lambda op, impl: noted.append((op, impl))):
        got = dfl(x)
    assert ("softmax", coverage.CPU_FORM) in noted
    want = (mx.softmax(x.reshape(2, 4, 16, 300).swapaxes(2, 3), axis=-1, precise=True) * bins).sum(-1)
    assert got.shape == (2, 4, 300)
    assert mx.abs(got - want).max().item() < 1e-5
