"""python -m zoo.run mobilesam: mask PNGs, overlay and JSON for points, boxes and both; one-line errors.

The registry entry is pointed at a 128x128 MobileSAM (same code and weights, 1/64 of the
1024 encoder's work): the CLI's behaviour does not depend on the input size.
"""
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from zoo import registry
from zoo.models.mobilesam.tiny_vit import TinyViT
from zoo.run import main

# pycocotools 2.0 decodes through numpy's old __array__ protocol
pytestmark = [pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning"),
              pytest.mark.usefixtures("small_mobilesam")]


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    path = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (120, 160, 3), dtype=np.uint8)).save(path)
    return path


def run_cli(photo, out, *prompt, capsys=None):
    code = main(["mobilesam", str(photo), "--weights", "synthetic:0", "--device", "cpu", "--out", str(out), *prompt])
    return code, (capsys.readouterr() if capsys else None)


def check_outputs(out, photo, objects, masks_per_object):
    summary = json.loads((out / "photo_masks.json").read_text())
    assert (summary["width"], summary["height"]) == (160, 120) and len(summary["objects"]) == objects
    overlay = Image.open(out / summary["overlay"])
    assert overlay.size == (160, 120) and overlay.mode == "RGB"
    for record in summary["objects"]:
        assert len(record["masks"]) == masks_per_object
        assert record["best"] == int(np.argmax([m["score"] for m in record["masks"]]))
        for entry in record["masks"]:
            mask = np.asarray(Image.open(out / entry["file"]))
            assert mask.shape == (120, 160) and set(np.unique(mask)) <= {0, 255}
            inside = mask == 255
            assert entry["area"] == int(inside.sum())
            if entry["area"]:
                ys, xs = np.nonzero(inside)
                assert entry["bbox_xyxy"] == [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())]
            else:
                assert entry["bbox_xyxy"] is None
    assert not list(out.glob(".*part"))
    return summary


def test_points(photo, tmp_path, capsys):
    code, captured = run_cli(photo, tmp_path / "out", "--point", "80,60", "--point", "20,100,0", "--multimask",
                             capsys=capsys)
    assert code == 0
    summary = check_outputs(tmp_path / "out", photo, objects=1, masks_per_object=3)
    assert summary["objects"][0]["points"] == [{"x": 80.0, "y": 60.0, "label": 1}, {"x": 20.0, "y": 100.0, "label": 0}]
    assert summary["objects"][0]["box_xyxy"] is None
    assert "object 0 mask 2: score" in captured.out and "overlay:" in captured.out


def test_box(photo, tmp_path):
    assert run_cli(photo, tmp_path / "out", "--box", "10,20,120,100")[0] == 0
    summary = check_outputs(tmp_path / "out", photo, objects=1, masks_per_object=1)
    assert summary["objects"][0]["box_xyxy"] == [10.0, 20.0, 120.0, 100.0] and summary["objects"][0]["points"] is None


def test_points_and_box_together(photo, tmp_path):
    assert run_cli(photo, tmp_path / "out", "--point", "60,50", "--box", "10,20,120,100")[0] == 0
    record = check_outputs(tmp_path / "out", photo, objects=1, masks_per_object=1)["objects"][0]
    assert record["points"] == [{"x": 60.0, "y": 50.0, "label": 1}] and record["box_xyxy"] == [10.0, 20.0, 120.0, 100.0]


def test_several_boxes_encode_the_image_once(photo, tmp_path, monkeypatch):
    calls = []
    original = TinyViT.__call__
    monkeypatch.setattr(TinyViT, "__call__", lambda self, x: calls.append(1) or original(self, x))
    assert run_cli(photo, tmp_path / "out", "--box", "0,0,80,60", "--box", "80,60,160,120", "--box", "20,20,60,90")[0] == 0
    check_outputs(tmp_path / "out", photo, objects=3, masks_per_object=1)
    assert len(calls) == 1


@pytest.mark.parametrize("prompt, message", [
    (["--point", "160,10"], "point (160, 10) is outside the 160x120 image"),
    (["--point", "10,10,2"], "point label 2 is not allowed: use 1 (foreground) or 0 (background)"),
    # the API's -1, a padding point whose position is ignored, is a typing mistake in one typed prompt
    (["--point", "10,10,-1"], "point label -1 is not allowed: use 1 (foreground) or 0 (background)"),
    (["--box", "100,10,50,60"], "box (100, 10, 50, 60) has x2 < x1 or y2 < y1"),
    (["--box", "10,10,50,130"], "reaches outside the 160x120 image"),
    ([], "no prompt: give at least one --point"),
    (["--point", "ten,10"], "--point 'ten,10' is not X,Y or X,Y,LABEL"),
    (["--box", "1,2,3"], "--box '1,2,3' is not X1,Y1,X2,Y2"),
    (["--point", "10,10", "--box", "0,0,5,5", "--box", "5,5,9,9"], "--point with several --box is ambiguous"),
])
def test_bad_prompts_fail_before_anything_is_written(photo, tmp_path, capsys, prompt, message):
    code, captured = run_cli(photo, tmp_path / "out", *prompt, capsys=capsys)
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in lines[-1] and "Traceback" not in captured.err
    assert not (tmp_path / "out").exists()


def test_unreadable_image_and_bad_out(photo, tmp_path, capsys):
    bad = tmp_path / "bad.jpg"
    bad.write_text("not a jpeg")
    code, captured = run_cli(bad, tmp_path / "out", "--point", "1,1", capsys=capsys)
    assert code == 1 and "error: cannot read" in captured.err and "not an image file" in captured.err
    code, captured = run_cli(tmp_path / "missing.png", tmp_path / "out", "--point", "1,1", capsys=capsys)
    assert code == 1 and "error: image not found" in captured.err
    (tmp_path / "file").write_text("")
    code, captured = run_cli(photo, tmp_path / "file", "--point", "1,1", capsys=capsys)
    assert code == 2 and "exists and is not a folder" in captured.err


def test_rerun_removes_only_the_masks_its_earlier_run_listed(photo, tmp_path):
    """--overwrite replaces what the run writes and removes the earlier run's masks it does not write
    again (listed in the earlier JSON); a user's file named like a mask is never deleted."""
    out = tmp_path / "out"
    assert run_cli(photo, out, "--point", "80,60", "--multimask")[0] == 0
    (out / "photo_object3_mask0.png").write_bytes(b"a user's file, named like a mask")
    (out / "photo_object1_object0_mask0.png").write_bytes(b"the mask of an image named photo_object1")
    assert run_cli(photo, out, "--box", "10,20,120,100")[0] == 2  # its outputs exist: refused without the flag
    assert run_cli(photo, out, "--box", "10,20,120,100", "--overwrite")[0] == 0
    check_outputs(out, photo, objects=1, masks_per_object=1)
    assert sorted(p.name for p in out.iterdir()) == [
        "photo_masks.json", "photo_object0_mask0.png", "photo_object1_object0_mask0.png", "photo_object3_mask0.png",
        "photo_overlay.png"]
    assert (out / "photo_object3_mask0.png").read_bytes() == b"a user's file, named like a mask"


def test_bgr_flips_arrays_only(photo):
    """Paths and PIL images are decoded as RGB whatever image_format says (upstream takes only arrays)."""
    spec = registry.get_spec("mobilesam")
    sam = registry.build(spec, registry.read_weights(spec, "synthetic:0"))

    def embedding(image, image_format):
        predictor = sam.predictor()
        predictor.set_image(image, image_format=image_format)
        return predictor.features

    rgb = np.asarray(Image.open(photo))
    expected = embedding(rgb, "RGB")
    assert np.array_equal(embedding(np.ascontiguousarray(rgb[..., ::-1]), "BGR"), expected)
    assert np.array_equal(embedding(photo, "BGR"), expected)
    assert np.array_equal(embedding(Image.open(photo), "BGR"), expected)


def test_prompt_parsers_live_with_the_predictor():
    from zoo.cli import segment
    from zoo.models.mobilesam import predictor

    assert segment.parse_point is predictor.parse_point and segment.parse_box is predictor.parse_box
    assert predictor.parse_point("3,4") == (3.0, 4.0, 1.0) and predictor.parse_box("1,2,3,4") == (1.0, 2.0, 3.0, 4.0)


# ---- --everything and several images ------------------------------------------------------------

EVERYTHING = ["--everything", "--points-per-side", "4", "--pred-iou-thresh", "0", "--stability-score-thresh", "0"]


def check_everything(out, name, size):
    """The --everything outputs of one image, self-consistent: each PNG is its record's COCO RLE, area = its
    pixel count, bbox (XYWH, inclusive) bounds it. -> the JSON summary."""
    from pycocotools import mask as mask_utils

    summary = json.loads((out / f"{name}_masks.json").read_text())
    assert summary["mode"] == "everything" and (summary["width"], summary["height"]) == size
    for i, record in enumerate(summary["masks"]):
        assert record["file"] == f"{name}_everything{i}.png"
        png = np.asarray(Image.open(out / record["file"])) == 255
        rle = record["segmentation"]
        assert rle["size"] == [size[1], size[0]]
        decoded = mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()}).astype(bool)
        np.testing.assert_array_equal(decoded, png)  # the COCO RLE is the PNG's mask
        assert record["area"] == int(png.sum())
        ys, xs = np.nonzero(png)
        x, y, w, h = record["bbox"]
        assert (x, y, x + w, y + h) == (xs.min(), ys.min(), xs.max(), ys.max())
        assert set(record) >= {"predicted_iou", "point_coords", "stability_score", "crop_box"}
    assert Image.open(out / summary["overlay"]).size == size
    assert not list(out.glob(".*part"))
    return summary


def test_everything_writes_masks_coco_json_and_overlay(photo, tmp_path, capsys):
    out = tmp_path / "out"
    code, captured = run_cli(photo, out, *EVERYTHING, capsys=capsys)
    assert code == 0
    summary = check_everything(out, "photo", (160, 120))
    assert summary["parameters"]["points_per_side"] == 4
    assert summary["parameters"]["box_nms_thresh"] == 0.7  # the generator's defaults, recorded
    assert len(summary["masks"]) >= 1
    assert f"{len(summary['masks'])} masks -> {out / 'photo_everything*.png'}" in captured.err + captured.out


def test_everything_without_masks_names_the_thresholds(photo, tmp_path, capsys):
    """No mask kept: the line named a pattern of files that were not there ('0 masks -> out/photo_everything*.png')."""
    code, captured = run_cli(photo, tmp_path / "out", "--everything", "--points-per-side", "2",
                             "--pred-iou-thresh", "1", capsys=capsys)
    assert code == 0 and not list((tmp_path / "out").glob("photo_everything*.png"))
    assert (f"{photo}: 160x120, 0 masks: none kept at --pred-iou-thresh 1.0 and --stability-score-thresh 0.95 "
            "(lower them to keep more)") in captured.err + captured.out


def test_everything_beyond_the_masks_bound_is_refused_before_the_masks_are_made(photo, tmp_path, capsys,
                                                                                  monkeypatch):
    """Every kept mask is made at the image's size at once (the PNGs, the overlay): checked against what 2 GiB
    leaves beside the run, here lowered to one 160x120 mask's bytes; nothing of the image is written."""
    from zoo import instances

    monkeypatch.setattr(instances, "PROCESS_BOUND", 160 * 120)
    monkeypatch.setattr(instances, "RETINA_BYTES_PER_PIXEL", 0)
    monkeypatch.setattr("zoo.cli.segment.SAM_RUN_BYTES", 0)
    out = tmp_path / "out"
    code, captured = run_cli(photo, out, *EVERYTHING, capsys=capsys)
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1, captured.err
    assert "masks at the image's size 160x120 take" in errors[0] and errors[0].endswith(
        "that fit beside the image within 2 GiB: keep fewer masks (a higher --pred-iou-thresh or "
        "--stability-score-thresh) or segment a smaller copy of the photo")
    assert not list(out.glob("photo*"))


@pytest.fixture(scope="module")
def crafted_weights(tmp_path_factory):
    """tests/sam_crafted.py's prompt-responsive decoder as a checkpoint file: every point gives its own masks."""
    from safetensors.numpy import save_file

    import sam_crafted
    from conftest import MANIFESTS
    from zoo.weights.synthetic import read_manifest, synthetic_state_dict

    path = tmp_path_factory.mktemp("weights") / "crafted.safetensors"
    save_file(sam_crafted.prompt_responsive(synthetic_state_dict(read_manifest(MANIFESTS / "mobilesam.json"), 0)),
              str(path))
    return path


def test_everything_raising_a_threshold_never_adds_masks(crafted_weights, tmp_path):
    from conftest import FIXTURES

    scene = FIXTURES / "mobilesam" / "amg_scene.png"
    for option, key, values in (("--pred-iou-thresh", "predicted_iou", (0.0, 0.86, 0.9, 0.95)),
                                ("--stability-score-thresh", "stability_score", (0.0, 0.9, 0.95, 0.99))):
        counts = []
        for value in values:
            out = tmp_path / f"{option}{value}"
            other = "--stability-score-thresh" if option == "--pred-iou-thresh" else "--pred-iou-thresh"
            assert main(["mobilesam", str(scene), "--everything", "--points-per-side", "4", option, str(value),
                         other, "0", "--weights", str(crafted_weights), "--device", "cpu", "--out", str(out)]) == 0
            records = check_everything(out, "amg_scene", (320, 240))["masks"]
            assert all(r[key] > value if key == "predicted_iou" else r[key] >= value for r in records)
            counts.append(len(records))
        assert counts == sorted(counts, reverse=True) and counts[0] > 10 and counts[0] > counts[-1], (option, counts)


def test_generator_progress_counts_batches_and_crops(photo):
    spec = registry.get_spec("mobilesam")
    sam = registry.build(spec, registry.read_weights(spec, "synthetic:0"))
    calls = []
    gen = sam.mask_generator(points_per_side=2, points_per_batch=3, crop_n_layers=1)
    gen.generate(photo, progress=lambda *a: calls.append(a))
    per_crop = 2  # ceil(4 points / 3)
    assert [c[0] for c in calls] == list(range(1, 5 * per_crop + 1))  # the whole image, then 4 crops
    assert {c[1] for c in calls} == {5 * per_crop} and {c[3] for c in calls} == {5}
    assert [c[2] for c in calls] == [k for k in range(1, 6) for _ in range(per_crop)]


@pytest.mark.parametrize("extra, message", [
    # the command line's words (they named the keyword arguments): test_mobilesam_amg.py checks the API's
    (["--everything", "--points-per-side", "0"], "--points-per-side must be an integer >= 1, got 0"),
    (["--everything", "--pred-iou-thresh", "1.5"], "--pred-iou-thresh must be a number in [0, 1], got 1.5"),
    (["--everything", "--stability-score-thresh", "-0.1"], "--stability-score-thresh must be a number in [0, 1]"),
    (["--everything", "--box-nms-thresh", "2"], "--box-nms-thresh must be a number in [0, 1]"),
    (["--everything", "--points-per-batch", "0"], "--points-per-batch must be an integer >= 1"),
    (["--everything", "--points-per-side", "1025"], "--points-per-side 1025 makes 1,050,625 prompts"),
    (["--everything", "--point", "5,5"], "--everything takes no prompts"),
    (["--point", "5,5", "--points-per-side", "8"], "--points-per-side go with --everything"),
    (["--everything", "--points-per-side", "many"], "argument --points-per-side: invalid int value: 'many'"),
])
def test_everything_bad_values_fail_before_the_model_loads(photo, tmp_path, capsys, monkeypatch, extra, message):
    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(registry, "load", no_load)
    code, captured = run_cli(photo, tmp_path / "out", *extra, capsys=capsys)
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_too_many_crop_layers_for_an_image_are_refused_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """--crop-n-layers against each image's size, from its header, with the other checks (exit 2, the flag's name):
    it was met only once the model had loaded and the image was decoded (exit 1); in a folder the image is named."""
    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(registry, "load", no_load)
    (tmp_path / "in").mkdir()
    Image.fromarray(np.zeros((1, 40, 3), np.uint8)).save(tmp_path / "in" / "strip.png")
    message = "--crop-n-layers 3 cuts the 40x1 image into 64 crops, more than its 40 pixels: give at most 2"
    code, captured = run_cli(tmp_path / "in" / "strip.png", tmp_path / "out", "--everything", "--points-per-side", "1",
                             "--crop-n-layers", "3", capsys=capsys)
    assert (code, captured.err.strip().splitlines()) == (2, [f"error: {message}"])
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(tmp_path / "in" / "photo.png")  # 3 layers fit it
    code, captured = run_cli(tmp_path / "in", tmp_path / "out", "--everything", "--crop-n-layers", "3", capsys=capsys)
    assert (code, captured.err.strip().splitlines()) == (2, [f"error: {tmp_path / 'in' / 'strip.png'}: {message}"])
    assert not (tmp_path / "out").exists()


def test_a_folder_and_same_stems_get_unique_outputs(tmp_path, capsys):
    rng = np.random.default_rng(4)
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(tmp_path / folder / "photo.png")
    Image.fromarray(rng.integers(0, 256, (30, 20, 3), dtype=np.uint8)).save(tmp_path / "x" / "small.png")
    out = tmp_path / "out"
    code = main(["mobilesam", str(tmp_path / "x"), str(tmp_path / "y" / "photo.png"), "--box", "1,1,19,29",
                 "--weights", "synthetic:0", "--device", "cpu", "--out", str(out)])
    assert code == 0 and "3 images segmented" in capsys.readouterr().err
    for name, (w, h) in (("photo", (50, 40)), ("small", (20, 30)), ("photo_2", (50, 40))):
        summary = json.loads((out / f"{name}_masks.json").read_text())
        assert (summary["width"], summary["height"]) == (w, h)
        assert summary["objects"][0]["masks"][0]["file"] == f"{name}_object0_mask0.png"
    # a prompt outside one of the images: refused before the model loads, naming it
    code, captured = run_cli(tmp_path / "x", tmp_path / "out2", "--box", "1,1,45,35", capsys=capsys)
    assert code == 2 and f"error: {tmp_path / 'x' / 'small.png'}: box (1, 1, 45, 35) reaches outside the 20x30 image" \
        in captured.err and not (tmp_path / "out2").exists()
    # --everything per image of a folder
    code, captured = run_cli(tmp_path / "x", tmp_path / "out3", *EVERYTHING, capsys=capsys)
    assert code == 0 and {p.name for p in (tmp_path / "out3").glob("*_masks.json")} == {"photo_masks.json",
                                                                                          "small_masks.json"}


def test_default_out_is_the_one_the_docs_name(photo, tmp_path, monkeypatch):
    """docs/mobilesam.md said the default --out was `masks`; the outputs went to runs/segment/predict."""
    docs = (Path(__file__).parent.parent / "docs" / "mobilesam.md").read_text()
    named = re.search(r"^- `--out DIR` \(default: a new `([^`]+)`, then `([^`]+)`", docs, re.M)
    assert named, "docs/mobilesam.md no longer says --out's default"
    monkeypatch.chdir(tmp_path)
    for folder in named.groups():
        assert main(["mobilesam", str(photo), "--weights", "synthetic:0", "--device", "cpu", "--point", "80,60"]) == 0
        assert (tmp_path / Path(named.group(1)).parent / Path(folder).name / "photo_masks.json").is_file()
