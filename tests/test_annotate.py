"""Detect-then-segment (zoo.auto_annotate, python -m zoo.run annotate): YOLO-segmentation label files.

Detector: tests/fixtures/yolov8/custom_best.pt (a 3-class YOLOv8n saved as `yolo train` leaves best.pt;
random weights: at imgsz 96 its boxes score ~0.58, so conf 0.25 gives detections and conf 0.9 none).
SAM: MobileSAM synthetic:0 at a 128 input (same code, 1/64 of the 1024 encoder's work).
"""
import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import zoo
from conftest import FIXTURES, synthetic_checkpoint
from zoo import registry
from zoo.annotate import annotate_image, box_polygon, mask_polygon
from zoo.errors import ZooError
from zoo.run import main

cv2 = pytest.importorskip("cv2")  # the 'sam' extra (in 'test')
DETECTOR = FIXTURES / "yolov8" / "custom_best.pt"
OPTIONS = {"imgsz": 96, "max_det": 4, "conf": 0.25}


@pytest.fixture(autouse=True)
def small_mobilesam(monkeypatch):
    spec = registry.get_spec("mobilesam")
    monkeypatch.setitem(registry.REGISTRY, "mobilesam", dataclasses.replace(spec, preprocess={"image_size": 128}))


@pytest.fixture(scope="module")
def models():
    spec = dataclasses.replace(registry.get_spec("mobilesam"), preprocess={"image_size": 128})
    sam = registry.build(spec, registry.read_weights(spec, "synthetic:0"))
    return zoo.load(str(DETECTOR), device="cpu"), sam


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(5)
    for name, (h, w) in (("a", (96, 128)), ("b", (80, 60))):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"{name}.png")
    return folder


def parse_labels(path, nc):
    """A YOLO-segmentation label file as ultralytics reads it: class id, then >= 3 x y pairs in [0, 1]."""
    rows = []
    for line in path.read_text().splitlines():
        fields = line.split()
        cls, values = int(fields[0]), np.array([float(v) for v in fields[1:]])
        assert fields[0] == str(cls) and 0 <= cls < nc, line
        assert len(values) >= 6 and len(values) % 2 == 0, line
        assert np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1, line  # inside the image
        rows.append((cls, values.reshape(-1, 2)))
    return rows


def fill(polygon, shape):
    h, w = shape
    out = np.zeros(shape, np.uint8)
    cv2.fillPoly(out, [np.rint(polygon * [w, h]).astype(np.int32)], 1)
    return out.astype(bool)


def largest_region_filled(mask):
    """The mask's largest 8-connected region with its holes filled: what an outer contour encloses."""
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    region = labels == 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    contours = cv2.findContours(region.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)[0]
    out = np.zeros(mask.shape, np.uint8)
    cv2.drawContours(out, contours, -1, 1, thickness=cv2.FILLED)
    return out.astype(bool)


def test_labels_parse_one_line_per_detection_polygons_follow_masks(models, photos, tmp_path):
    det, sam = models
    out = tmp_path / "labels"
    annotations = zoo.auto_annotate(photos, det_model=det, sam_model=sam, output_dir=out, save_masks=True,
                                    save_overlay=True, device="cpu", **OPTIONS)
    assert [a.name for a in annotations] == ["a", "b"]
    for annotation, name in zip(annotations, ("a", "b")):
        rgb = np.asarray(Image.open(photos / f"{name}.png"))
        expected = det.predict(rgb[..., ::-1], iou=0.45, **OPTIONS)[0]  # the detector alone, same options
        assert len(expected) > 0
        rows = parse_labels(out / f"{name}.txt", det.nc)
        assert len(rows) == len(expected)  # one line per detection, in the detector's order
        assert [c for c, _ in rows] == expected.boxes.cls.astype(int).tolist()
        np.testing.assert_allclose(annotation.scores, expected.boxes.conf)
        for i, (_, polygon) in enumerate(rows):
            mask = np.asarray(Image.open(out / "masks" / f"{name}_{i}.png")) == 255
            assert mask.shape == rgb.shape[:2] and mask.any()
            region = largest_region_filled(mask)
            drawn = fill(polygon, mask.shape)
            assert (drawn & region).sum() / (drawn | region).sum() >= 0.95, (name, i)
        assert Image.open(out / "overlays" / f"{name}.png").size == rgb.shape[1::-1]
        assert annotation.files[-1] == out / f"{name}.txt" and annotation.masks is None
    assert not list(out.rglob(".*part"))


def test_one_decoder_call_and_one_encoding_per_image(models, photos, monkeypatch):
    det, sam = models
    calls = {"encode": 0, "decode": 0}
    encode, decode = sam.encode_image, sam.decode_prompt

    def count(name, fn):
        def wrapped(*args):
            calls[name] += 1
            return fn(*args)
        return wrapped

    monkeypatch.setattr(sam, "encode_image", count("encode", encode))
    monkeypatch.setattr(sam, "decode_prompt", count("decode", decode))
    rgb = np.asarray(Image.open(photos / "a.png"))
    annotation = annotate_image(det, sam, rgb, **OPTIONS)
    assert len(annotation.classes) == 4 and annotation.masks.shape == (4, 96, 128)
    assert calls == {"encode": 1, "decode": 1}
    # the same masks as one box at a time
    predictor = sam.predictor()
    predictor.set_image(rgb)
    for box, mask in zip(annotation.boxes, annotation.masks):
        single, _, _ = predictor.predict(box=box, multimask_output=False)
        np.testing.assert_array_equal(single[0], mask)


def test_no_detections_is_an_empty_label_file_and_a_note(models, photos, tmp_path, capsys):
    det, sam = models
    out = tmp_path / "labels"
    annotations = zoo.auto_annotate(photos / "a.png", det_model=det, sam_model=sam, output_dir=out,
                                    imgsz=96, conf=0.9, save_masks=True)
    assert len(annotations) == 1 and len(annotations[0].classes) == 0
    assert (out / "a.txt").read_text() == ""
    assert list((out / "masks").iterdir()) == []
    assert "note: " in capsys.readouterr().err and annotations[0].notes == ["no detections: empty label file"]


def test_default_output_dir_is_ultralytics(models, photos, tmp_path):
    det, sam = models
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "a.png").write_bytes((photos / "a.png").read_bytes())
    zoo.auto_annotate(folder, det_model=det, sam_model=sam, **OPTIONS)
    assert (tmp_path / "images_auto_annotate_labels" / "a.txt").exists()
    with pytest.raises(ZooError, match="no output folder"):
        zoo.auto_annotate([np.zeros((32, 32, 3), np.uint8)], det_model=det, sam_model=sam)


def test_polygons_of_crafted_masks():
    mask = np.zeros((40, 50), bool)
    mask[5:25, 10:30] = True
    mask[12:16, 15:20] = False  # a hole: the outer contour ignores it
    mask[30:33, 40:43] = True  # a smaller island: not the largest
    polygon = mask_polygon(mask)
    assert polygon.shape[1] == 2 and len(polygon) >= 4
    np.testing.assert_allclose(polygon.min(0), [10 / 50, 5 / 40])
    np.testing.assert_allclose(polygon.max(0), [29 / 50, 24 / 40])
    pixel = np.zeros((40, 50), bool)
    pixel[7, 9] = True  # one pixel: the rectangle of its edges, still a polygon of 4 points
    np.testing.assert_allclose(mask_polygon(pixel), [[9 / 50, 7 / 40], [10 / 50, 7 / 40], [10 / 50, 8 / 40],
                                                     [9 / 50, 8 / 40]])
    line = np.zeros((40, 50), bool)
    line[3, 5:20] = True
    assert len(mask_polygon(line)) == 4
    assert mask_polygon(np.zeros((40, 50), bool)) is None
    np.testing.assert_allclose(box_polygon(np.array([-5.0, 4, 60, 20]), (40, 50)),
                               [[0, 0.1], [1, 0.1], [1, 0.5], [0, 0.5]])


# ---- the command line ------------------------------------------------------------------------------

def run_cli(*args):
    return main(["annotate", *map(str, args), "--device", "cpu", "--sam-weights", "synthetic:0", "--quiet"])


def test_cli_writes_labels_and_refuses_to_replace_them(photos, tmp_path, capsys):
    out = tmp_path / "labels"
    common = (photos, "--det", DETECTOR, "--imgsz", "96", "--max-det", "2", "--out", out)
    assert run_cli(*common, "--save-masks") == 0
    assert "2 images annotated" in capsys.readouterr().out
    for name in ("a", "b"):
        assert len(parse_labels(out / f"{name}.txt", 3)) == 2
    before = (out / "a.txt").read_bytes()
    assert run_cli(*common, "--save-masks") == 2  # exists: refused before the models load
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: output ") and "exists: pass --overwrite" in err[-1]
    assert (out / "a.txt").read_bytes() == before
    (out / "masks" / "a_7.png").write_bytes(b"a user's file, named like a mask")
    assert run_cli(*common, "--save-masks", "--max-det", "1", "--overwrite") == 0
    # the earlier run's second masks removed; a file no label line accounts for is not ours: kept
    assert sorted(p.name for p in (out / "masks").iterdir()) == ["a_0.png", "a_7.png", "b_0.png"]
    assert (out / "masks" / "a_7.png").read_bytes() == b"a user's file, named like a mask"
    assert len(parse_labels(out / "a.txt", 3)) == 1


@pytest.mark.parametrize("args, code, message", [
    (["--det", "resnet18"], 2, "detector resnet18 is a classify model: pass a YOLO detector"),
    (["--det", "{seg}"], 1, "holds a YOLO instance-segment model"),
    (["--det", "{resnet}"], 2, "holds no YOLO model: pass a YOLO detection checkpoint"),
    (["--det", DETECTOR, "--conf", "1.5"], 2, "conf 1.5 is outside [0, 1]"),
    (["--det", DETECTOR, "--classes", "zebra"], 2, "unknown classes 'zebra'"),
    (["--det", DETECTOR, "--out", "{photos}"], 2, "is the input folder"),
    (["--det", DETECTOR, "--weights", "x.pt"], 2, "unrecognized arguments: --weights"),
])
def test_cli_bad_inputs_are_one_line_and_write_nothing(photos, tmp_path, capsys, args, code, message):
    from safetensors.numpy import save_file

    seg = tmp_path / "seg.safetensors"
    save_file({"model.0.conv.weight": np.zeros((16, 3, 3, 3), np.float32),
               "model.22.proto.cv1.conv.weight": np.zeros((1, 1, 1, 1), np.float32)}, str(seg))
    resnet = synthetic_checkpoint("resnet18", tmp_path / "resnet.safetensors")
    args = [str(a).format(seg=seg, resnet=resnet, photos=photos) for a in args]
    out = [] if "--out" in args else ["--out", tmp_path / "labels"]
    before = sorted(p.name for p in photos.iterdir())
    assert run_cli(photos, *args, *out) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("error:")]) == 1 and message in err[-1], err
    assert not (tmp_path / "labels").exists() and sorted(p.name for p in photos.iterdir()) == before


def test_import_zoo_does_not_import_mlx():
    code = "import sys, zoo; zoo.auto_annotate; assert 'mlx' not in sys.modules, 'mlx imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_video_frames_are_labelled_and_never_replaced(models, tmp_path, capsys):
    from zoo.sources import VideoWriter

    det, sam = models
    video = tmp_path / "clip.mp4"
    rng = np.random.default_rng(6)
    with VideoWriter(video, fps=5) as writer:
        for _ in range(3):
            writer.write(rng.integers(0, 256, (96, 128, 3), dtype=np.uint8))
    out = tmp_path / "labels"
    annotations = zoo.auto_annotate(video, det_model=det, sam_model=sam, output_dir=out, save_masks=True, **OPTIONS)
    assert [a.name for a in annotations] == ["clip_0", "clip_1", "clip_2"]
    for a in annotations:
        assert len(parse_labels(out / f"{a.name}.txt", det.nc)) == len(a.classes) > 0
    # frames are named as they are decoded: their outputs are checked then, and never replaced without the flag
    (out / "masks" / "clip_1_9.png").write_bytes(b"an earlier run's mask")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert run_cli(video, "--det", DETECTOR, "--imgsz", "96", "--max-det", "4", "--out", out, "--save-masks") == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 3 and all("exists: pass --overwrite" in line for line in errors), errors
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_general_help_names_annotate(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "python -m zoo.run annotate SOURCE..." in capsys.readouterr().out
