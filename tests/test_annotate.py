"""Detect-then-segment (zoo.auto_annotate, python -m zoo.run annotate): YOLO-segmentation label files.

Detector: tests/fixtures/yolov8/custom_best.pt (a 3-class YOLOv8n saved as `yolo train` leaves best.pt;
random weights: at imgsz 96 its boxes score ~0.58, so conf 0.25 gives detections and conf 0.9 none).
SAM: MobileSAM synthetic:0 at a 128 input (same code, 1/64 of the 1024 encoder's work).
"""
import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import zoo
from conftest import FIXTURES, PEAK_RSS_KB, synthetic_checkpoint
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


def test_boxes_are_segmented_in_chunks_and_masks_kept_only_when_asked(models, photos, monkeypatch):
    """Memory bounded whatever the number of boxes (300 boxes took 16 GB): the same polygons and masks
    with 3 boxes per decoder call, and none of the masks kept when they are not written."""
    import zoo.models.mobilesam.predictor as predictor_module

    det, sam = models
    rgb = np.asarray(Image.open(photos / "a.png"))
    whole = annotate_image(det, sam, rgb, **OPTIONS)
    monkeypatch.setattr(predictor_module, "PROMPTS_PER_DECODE", 3)
    chunked = annotate_image(det, sam, rgb, **OPTIONS)
    polygons_only = annotate_image(det, sam, rgb, **OPTIONS, keep_masks=False)
    np.testing.assert_array_equal(chunked.masks, whole.masks)
    np.testing.assert_allclose(chunked.mask_scores, whole.mask_scores, rtol=1e-5)  # batch size: float rounding
    assert polygons_only.masks is None and polygons_only.label_lines() == whole.label_lines() == chunked.label_lines()


def crafted_low_res(count: int, extent: tuple[int, int], rng) -> np.ndarray:
    """(count, 1, 256, 256) low-res logits, objects within the ``extent`` (rows, columns) of the grid that
    covers the image: blobs, a cell at a corner, nothing, everything, speckle, sharp rectangles on a
    barely negative ground (the pixels that sample their edges at all are true): masks whose full-size
    rectangles are small, at the edges, empty or the whole image."""
    h, w = extent
    ys, xs = np.mgrid[0:256, 0:256]
    out = np.full((count, 1, 256, 256), -1e-3, np.float32)
    for i in range(count):
        kind = i % 6
        if kind == 0:  # a blob (or two) of a few cells
            cy, cx = rng.uniform(0, [h, w])
            out[i, 0] = 4 - ((ys - cy) ** 2 + (xs - cx) ** 2) / rng.uniform(1, 60)
            if i % 2:
                out[i, 0] = np.maximum(out[i, 0], 3 - np.abs(ys - cy / 2) - np.abs(xs - (w - 1)))
        elif kind == 1:
            out[i, 0, (h - 1) * (i // 6 % 2), (w - 1) * (i // 6 % 2)] = 5
        elif kind == 2:
            out[i, 0] = -rng.uniform(0.1, 3, (256, 256))
        elif kind == 3:
            out[i, 0] = rng.uniform(0.1, 3, (256, 256))
        elif kind == 4:
            out[i, 0] = rng.standard_normal((256, 256)) - 1.5
        else:
            top, left = rng.integers(0, [h, w])
            out[i, 0, top:top + rng.integers(1, h // 2 + 2), left:left + rng.integers(1, w // 2 + 2)] = 5
    return out


def detections(shape: tuple[int, int], count: int, seed: int = 0) -> np.ndarray:
    """(count, 6) x1 y1 x2 y2 score class: boxes of any size anywhere in an image of ``shape``."""
    h, w = shape
    rng = np.random.default_rng(seed)
    corners = rng.uniform(0, 1, (count, 2, 2)) * [w, h]
    return np.concatenate([corners.min(1), corners.max(1), rng.uniform(0.3, 1, (count, 1)),
                           rng.integers(0, 3, (count, 1))], axis=1).astype(np.float32)


def detector_finding(monkeypatch, data: np.ndarray) -> None:
    """The detector's step of annotate_image finds ``data`` (N, 6) whatever the image."""
    from types import SimpleNamespace

    import zoo.models.yolov8.predict as predict

    monkeypatch.setattr(predict, "predict_batch", lambda *args, **kwargs: [
        SimpleNamespace(boxes=SimpleNamespace(data=data.copy()))])


@pytest.mark.parametrize("shape", [(500, 90), (40, 60)], ids=["enlarged", "shrunk"])
def test_masks_made_in_windows_are_the_full_size_masks(models, shape, monkeypatch):
    """Each mask is made only over the rectangle where it can be true (SamPredictor.mask_crop): the same
    masks and label lines as thresholding SAM's full-size logits (postprocess_masks) and tracing the
    whole masks, for SAM's own masks and for crafted ones (small objects, edges, empty, everything)."""
    import mlx.core as mx

    from zoo.models.mobilesam.predictor import SamPredictor

    det, sam = models
    rgb = np.random.default_rng(11).integers(0, 256, (*shape, 3), dtype=np.uint8)
    detector_finding(monkeypatch, detections(shape, 10))
    predictor = sam.predictor()
    predictor.set_image(rgb)

    def full_size(annotation, low_res):
        """The straightforward computation: every mask at full size, then its polygon."""
        logits = sam.postprocess_masks(mx.array(low_res.transpose(0, 2, 3, 1)), predictor.input_size, shape)
        masks = np.array(logits > sam.mask_threshold)[..., 0]
        polygons = [box_polygon(box, shape) if (polygon := mask_polygon(mask)) is None else polygon
                    for mask, box in zip(masks, annotation.boxes)]
        return masks, dataclasses.replace(annotation, polygons=polygons).label_lines()

    sams = annotate_image(det, sam, rgb)
    masks, lines = full_size(sams, predictor.predict_low_res(boxes=sams.boxes, multimask_output=False)[1])
    assert len(lines) == 10 and sams.label_lines() == lines
    np.testing.assert_array_equal(sams.masks, masks)

    cells = [-(-256 * side // sam.img_size) for side in predictor.input_size]  # the grid over the image
    low_res = crafted_low_res(10, cells, np.random.default_rng(1))
    monkeypatch.setattr(SamPredictor, "predict_low_res", lambda predictor, boxes, multimask_output: (
        np.zeros((len(boxes), 1), np.float32), low_res[:len(boxes)]))
    crafted = annotate_image(det, sam, rgb)
    masks, lines = full_size(crafted, low_res)
    assert crafted.label_lines() == lines and crafted.from_box  # the empty masks: their boxes
    np.testing.assert_array_equal(crafted.masks, masks)
    assert 0 < masks.mean() < 1


def test_memory_of_many_boxes_on_a_big_photo_is_one_box_s(tmp_path):
    """24 boxes on a 1500x2000 photo (SAM's masks cover most of it) raise a child's peak RSS over one box's
    by less than three full-size float32 maps: masks are made and traced one at a time, none kept (16 bool
    masks at once and their float32 logits: +540 MB at 2000x3000 before). Measured in a plain child process:
    +12.9 or +25.2 MB from run to run (a second 12 MB float32 buffer, a band's logits beside a resize's, is
    or is not at the peak), so two maps (24 MB), the bound first written, failed in some runs."""
    h, w, count = 1500, 2000, 24
    np.save(tmp_path / "boxes.npy", detections((h, w), count))
    child = PEAK_RSS_KB + f"""
import dataclasses
from types import SimpleNamespace
import numpy as np
import zoo.models.yolov8.predict as predict
from zoo import registry
from zoo.annotate import annotate_image
spec = dataclasses.replace(registry.get_spec("mobilesam"), preprocess={{"image_size": 128}})
sam = registry.build(spec, registry.read_weights(spec, "synthetic:0"))
boxes = np.load({str(tmp_path / "boxes.npy")!r})
rgb = np.random.default_rng(0).integers(0, 256, ({h}, {w}, 3), dtype=np.uint8)
predict.prediction_options = lambda *args: {{}}
peaks = []
for n in (1, {count}):
    predict.predict_batch = lambda *args, **kwargs: [SimpleNamespace(boxes=SimpleNamespace(data=boxes[:n].copy()))]
    annotation = annotate_image(None, sam, rgb, keep_masks=False)
    peaks.append(peak_rss_kb())
print(len(annotation.polygons), len(annotation.from_box), *peaks)
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines, from_box, one_box, many = map(int, done.stdout.split())
    assert lines == count and from_box == 0  # every mask has pixels
    assert (many - one_box) * 1024 < 3 * h * w * 4


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
    # output_dir='' (an unset variable?) was the default folder without a word: one error, nothing written
    with pytest.raises(ZooError, match=re.escape("output_dir='' is empty (an unset variable?): pass a folder, or "
                                                 "output_dir=None for <data>_auto_annotate_labels")):
        zoo.auto_annotate(folder, det_model=det, sam_model=sam, output_dir="", **OPTIONS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images"]
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


def test_kept_masks_beyond_the_bound_are_refused_before_allocating(photos, tmp_path, capsys, monkeypatch):
    """--save-masks / --save-overlay keep one full-size mask a box (300 on a 6000x6000 photo: 10 GB): checked
    against what 2 GiB leaves beside the run, here lowered to 30,000 bytes of masks (a: 12,288 bytes a mask,
    b: 4,800); the labels alone need none."""
    from zoo import instances

    monkeypatch.setattr(instances, "PROCESS_BOUND", 30_000)
    monkeypatch.setattr(instances, "RETINA_BYTES_PER_PIXEL", 0)
    monkeypatch.setattr("zoo.annotate.SAM_RUN_BYTES", 0)
    common = (photos, "--det", DETECTOR, "--imgsz", "96", "--max-det", "4")
    assert run_cli(*common, "--save-masks", "--out", tmp_path / "masks") == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "a.png" in errors[0], errors
    assert errors[0].endswith("4 masks at the image's size 128x96 take 0.0 GiB, more than the 0 MiB that fit "
                              "beside the image within 2 GiB: keep at most 2 detections (--max-det 2) or write the "
                              "labels alone (no --save-masks, no --save-overlay)")
    assert len(parse_labels(tmp_path / "masks" / "b.txt", 3)) == 4 and not (tmp_path / "masks" / "a.txt").exists()
    assert run_cli(*common, "--out", tmp_path / "labels") == 0
    assert len(parse_labels(tmp_path / "labels" / "a.txt", 3)) == 4


@pytest.mark.parametrize("args, code, message", [
    (["--det", "resnet18"], 2, "detector resnet18 is a classify model: pass a YOLO detector"),
    (["--det", "{seg}"], 1, "holds a YOLO instance-segment model"),
    (["--det", "{resnet}"], 2, "holds no YOLO model: pass a YOLO detection checkpoint"),
    (["--det", DETECTOR, "--conf", "1.5"], 2, "--conf 1.5 is outside [0, 1]"),
    (["--det", DETECTOR, "--classes", "zebra"], 2, "unknown classes 'zebra'"),
    (["--det", DETECTOR, "--out", "{photos}"], 2, "is the input folder"),
    (["--det", DETECTOR, "--weights", "x.pt"], 2, "unrecognized arguments: --weights"),
    # the Hub's fix in annotate's flags (it said --weights, which annotate refuses)
    (["--det", "yolov8n"], 1, "yolov8n.pt is not in the Hub cache and HF_HUB_OFFLINE is set: pass --det-weights PATH "
                              "to a local checkpoint (or --det-weights synthetic for random test weights"),
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


def test_weights_not_at_hand_are_asked_for_by_the_option_of_their_model(photos, tmp_path):
    """auto_annotate has no weights=: a segmenter not in the Hub cache is asked for as sam_weights=, and nothing
    is written."""
    with pytest.raises(ZooError, match=r"HF_HUB_OFFLINE is set: pass sam_weights=PATH to a local checkpoint \(or "
                                       r"sam_weights='synthetic' for random"):
        zoo.auto_annotate(photos, det_model=DETECTOR, sam_model="mobilesam", output_dir=tmp_path / "labels", **OPTIONS)
    assert not (tmp_path / "labels").exists()


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
