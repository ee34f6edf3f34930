"""YOLOv8 / YOLO11 segmentation and pose: checkpoints saved by ultralytics 8.3.253 (tests/fixtures/yolo_tasks,
rebuilt by yolo_tasks_fixtures) load as themselves and give upstream's raw outputs, masks, polygons and
keypoints; Results' accessors agree with each other and with the label files; plot() draws masks and
skeletons; bad files are one error line."""
from __future__ import annotations

import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from safetensors.numpy import save_file

import zoo
from conftest import PEAK_RSS_KB
from yolo_tasks_fixtures import (CASES, INPUT_SHAPE, ORIG_SHAPE, checkpoints, expected,  # noqa: F401 (fixtures)
                                 fixture_input, models, whole_masks)
from zoo import instances
from zoo.errors import ZooError
from zoo.models.yolov8 import non_max_suppression
from zoo.results import Results
from zoo.run import main

FRAME = INPUT_SHAPE[2:]
NAMES = {"yolov8n-seg": {0: "cat", 1: "dog", 2: "traffic cone"}, "yolov8n-pose": {0: "person"},
         "yolo11n-seg": {0: "leaf", 1: "stem"}, "yolo11n-pose": {0: "hand", 1: "paw"}}
KPT_SHAPES = {"yolov8n-pose": (17, 3), "yolo11n-pose": (5, 2)}


@pytest.fixture(scope="module")
def raw(models):
    """Each model's raw output on the fixture input, in upstream's layout: preds (1, C, A)[, protos NCHW]."""
    x = mx.array(fixture_input().transpose(0, 2, 3, 1))
    out = {}
    for case, model in models.items():
        y = model(x)
        preds, protos = y if isinstance(y, tuple) else (y, None)
        out[case] = (np.array(preds).transpose(0, 2, 1), None if protos is None else np.array(protos).transpose(0, 3, 1, 2))
    return out


def relative(got, ref) -> float:
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    union = (a | b).sum((1, 2))
    return np.where(union > 0, (a & b).sum((1, 2)) / np.maximum(union, 1), 1.0)


@pytest.mark.parametrize("case", CASES)
def test_checkpoint_loads_as_itself_with_upstreams_raw_outputs(case, models, raw):
    model, e = models[case], expected(case)
    task = case.rsplit("-", 1)[1].replace("seg", "segment")
    assert (model.task, model.names, model.imgsz) == (task, NAMES[case], 320)
    if task == "pose":
        assert model.head.kpt_shape == KPT_SHAPES[case]
    preds, protos = raw[case]
    nc = len(NAMES[case])
    ref = e["preds"]
    assert preds.shape == ref.shape
    assert relative(preds[:, :4], ref[:, :4]) < 1e-4  # measured 1.3e-07..1.9e-07
    assert np.abs(preds[:, 4 : 4 + nc] - ref[:, 4 : 4 + nc]).max() < 1e-3  # measured 9e-08
    assert relative(preds[:, 4 + nc :], ref[:, 4 + nc :]) < 1e-4  # coefficients / keypoints: 1e-07..3e-07
    if task == "segment":
        assert protos.shape == e["protos"].shape == (1, 32, FRAME[0] // 4, FRAME[1] // 4)
        assert relative(protos, e["protos"]) < 1e-4  # measured 6.5e-07, 6.9e-07


@pytest.mark.parametrize("case", ["yolov8n-seg", "yolo11n-seg"])
def test_masks_and_polygons_equal_upstreams(case, raw):
    """On upstream's detections and prototypes, and on ours end to end: process_mask, scale_masks,
    process_mask_native (retina) and masks.xy as ultralytics'."""
    e = expected(case)
    det, protos = e["det"], e["protos"][0].transpose(1, 2, 0)
    masks = instances.process_mask(protos, det[:, 6:], det[:, :4], FRAME)
    assert iou(masks, e["masks"]).min() >= 0.99  # measured 1.0 (identical)
    in_image = np.stack([instances.scale_masks(m[None].astype(np.float32), ORIG_SHAPE)[0] > 0.5 for m in masks])
    assert iou(in_image, e["masks_orig"]).min() >= 0.99
    native = instances.process_mask_native(protos, det[:, 6:], e["boxes"], ORIG_SHAPE)
    assert iou(native, e["masks_native"]).min() >= 0.99
    kept = masks[masks.any((1, 2))]
    polygons = [instances.scale_coords(FRAME, p, ORIG_SHAPE) for p in instances.masks2segments(kept)]
    assert [len(p) for p in polygons] == e["xy_sizes"].tolist()
    assert np.abs(np.concatenate(polygons) - e["xy"]).max() < 1e-4
    # end to end: our raw outputs through our NMS and masks
    preds, our_protos = raw[case]
    ours = non_max_suppression(preds[0].T, 0.25, 0.7, max_det=20, nc=len(NAMES[case]))
    assert ours.shape == det.shape and relative(ours[:, :4], det[:, :4]) < 1e-4
    our_masks = instances.process_mask(our_protos[0].transpose(1, 2, 0), ours[:, 6:], ours[:, :4], FRAME)
    assert iou(our_masks, e["masks"]).min() >= 0.99


@pytest.mark.parametrize("case", ["yolov8n-pose", "yolo11n-pose"])
def test_keypoints_equal_upstreams_after_scale_coords(case, raw, models):
    e = expected(case)
    det = non_max_suppression(raw[case][0][0].T, 0.25, 0.7, max_det=20, nc=len(NAMES[case]))
    assert relative(det[:, :6], e["det"][:, :6]) < 1e-4
    keypoints = instances.scale_coords(FRAME, det[:, 6:].reshape(len(det), *KPT_SHAPES[case]), ORIG_SHAPE)
    assert relative(keypoints, e["keypoints"]) < 1e-4


def read_labels(path) -> list[list[float]]:
    return [[float(v) for v in line.split()] for line in path.read_text().splitlines()]


def test_segmentation_results_agree_with_each_other_and_the_labels(models, tmp_path):
    model = models["yolov8n-seg"]
    image = (fixture_input()[0, :, 14:114, 5:155].transpose(1, 2, 0) * 255).astype(np.uint8)  # 100 x 150
    result = model.predict(image, imgsz=160, conf=0.5, max_det=6)[0]  # letterboxed to the fixture's 128 x 160
    assert len(result) == len(result.masks) > 0 and result.masks.data.shape[1:] == FRAME
    masks = result.masks
    assert all(np.allclose(xy / [150, 100], xyn, atol=1e-6) for xy, xyn in zip(masks.xy, masks.xyn))
    assert all(len(p) >= 3 and (p >= 0).all() and (p[:, 0] <= 150).all() and (p[:, 1] <= 100).all() for p in masks.xy)
    assert masks[0].data.shape == (1, *FRAME) and len(result[1:]) == len(result) - 1
    label = tmp_path / "im.txt"
    result.save_txt(label, save_conf=True)
    rows = read_labels(label)
    assert [int(r[0]) for r in rows] == result.boxes.cls.int().tolist()
    for row, polygon, conf in zip(rows, masks.xyn, result.boxes.conf.tolist()):
        assert np.allclose(row[1:-1], polygon.reshape(-1), atol=1e-5) and row[-1] == pytest.approx(conf, abs=1e-5)
    summary = result.summary()[0]
    assert np.allclose(summary["segments"]["x"], masks.xy[0][:, 0], atol=1e-4)


def test_pose_results_agree_with_each_other_and_the_labels(models, tmp_path):
    model = models["yolov8n-pose"]
    image = (fixture_input()[0].transpose(1, 2, 0) * 255).astype(np.uint8)
    result = model.predict(image, imgsz=160, conf=0.5, max_det=5)[0]
    keypoints = result.keypoints
    assert keypoints.data.shape == (len(result), 17, 3) and keypoints.has_visible and len(result) > 0
    assert np.allclose(keypoints.xyn * [160, 128], keypoints.xy, atol=1e-4)
    assert np.array_equal(keypoints.conf, keypoints.data[..., 2]) and ((keypoints.conf >= 0) & (keypoints.conf <= 1)).all()
    label = tmp_path / "im.txt"
    result.save_txt(label)
    rows = np.array(read_labels(label))
    assert rows.shape == (len(result), 1 + 4 + 17 * 3)
    assert np.allclose(rows[:, 1:5], result.boxes.xywhn, atol=1e-5)
    points = rows[:, 5:].reshape(-1, 17, 3)
    assert np.allclose(points[..., :2], keypoints.xyn, atol=1e-5) and np.allclose(points[..., 2], keypoints.conf, atol=1e-5)
    two_d = Results(image, None, {0: "hand"}, np.zeros((1, 6)), keypoints=np.ones((1, 5, 2))).keypoints
    assert two_d.conf is None and not two_d.has_visible and two_d.xyn.shape == (1, 5, 2)


def test_plot_draws_masks_and_skeletons():
    image = np.full((60, 80, 3), 40, np.uint8)
    mask = np.zeros((1, 60, 80), bool)
    mask[0, 10:30, 20:50] = True
    points = np.zeros((1, 17, 3), np.float32)
    points[0, :, 0] = np.linspace(10, 70, 17)
    points[0, :, 1] = 45
    points[0, :, 2] = 0.9
    points[0, 16] = (75, 5, 0.1)  # under 0.25: not drawn
    result = Results(image, None, {0: "thing"}, np.array([[20, 10, 50, 30, 0.9, 0]]), masks=mask, keypoints=points)
    drawn = result.plot(boxes=False, labels=False).astype(int)
    assert (np.abs(drawn[15:25, 25:45] - 40).sum(-1) > 30).all()  # the mask's colour over it
    assert (drawn[0:5, 0:10] == 40).all()  # outside untouched
    assert (drawn[45, 10] != 40).any() and (drawn[5, 75] == 40).all()  # a dot; the low-scoring one left out
    assert (drawn[45, 36] != 40).any()  # a limb between two dots
    bare = result.plot(boxes=False, labels=False, masks=False, kpt_line=False).astype(int)
    assert (bare[15:25, 25:45] == 40).all()
    # a soft mask would truncate to nothing as uint8: refused, as is a shape that holds no (N, H, W) maps
    for bad, says in ((mask * 0.7, "values other than 0 and 1"), (mask[:, None], r"shape \(1, 1, 60, 80\)")):
        with pytest.raises(ZooError, match=says):
            result.new().update(masks=bad)
    assert result.new().update(masks=mask.astype(np.float32)) is None  # 0.0 / 1.0 floats are binary
    # img= another size (a half-size copy): the masks mapped onto it, as ultralytics letterboxes img into their frame
    half = result.plot(img=np.full((30, 40, 3), 40, np.uint8), boxes=False, labels=False, kpt_line=False).astype(int)
    assert (np.abs(half[6:14, 11:24] - 40).sum(-1) > 30).all() and (half[:4, :8] == 40).all()
    masks_only = result.new()
    masks_only.update(masks=mask)  # no boxes to take colours from: each mask still drawn
    assert (np.abs(masks_only.plot().astype(int)[15:25, 25:45] - 40).sum(-1) > 30).all()


def test_plot_makes_masks_a_band_at_a_time_as_whole_ones(monkeypatch):
    """plot() scales each letterboxed mask to the image a band of rows at a time, only where it can be nonzero
    (scaled_extent): the same pixels as blending the whole image-size masks (whole_masks)."""
    from zoo import results

    rng = np.random.default_rng(3)
    masks = (rng.random((4, 64, 80)) < 0.02).astype(np.uint8)  # scattered pixels: many small parts
    masks[1] = 0
    masks[1, 20:23, 70:80] = 1  # at the frame's right edge
    masks[2] = 1  # the whole frame, padding included
    for shape in ((100, 150), (30, 41), (64, 80)):  # scaled up, down, not at all
        image = rng.integers(0, 256, (*shape, 3), np.uint8)
        r = Results(image, None, {0: "a", 1: "b"}, np.array([[0, 0, 5, 5, 0.9, c] for c in (0, 1, 1, 0)]), masks=masks)
        colours = [results.class_colour(c) for c in (0, 1, 1, 0)]
        whole = results.blend_masks(image[..., ::-1], whole_masks(r), colours)
        monkeypatch.setattr(results, "BLEND_ROWS_BYTES", 4 * shape[1] * 3 * 7)  # bands of 7 rows
        assert np.array_equal(r.plot(boxes=False)[..., ::-1], whole)
        monkeypatch.undo()
        for mask in masks:
            rows, columns = instances.scaled_extent(mask, shape)
            outside = instances.scale_masks(mask[None].astype(np.float32), shape)[0] > 0
            outside[rows, columns] = False
            assert not outside.any()


def test_plot_of_many_masks_over_a_large_photo_holds_none_whole():
    """100 masks over a 12-megapixel photo: each made a band at a time where it can be nonzero, where making
    them whole took 2.4 GB (and 13 s)."""
    child = PEAK_RSS_KB + """
import numpy as np
from zoo.results import Results
masks = np.zeros((100, 480, 640), np.uint8)
for i in range(100):
    masks[i, 40 + 4 * i:44 + 4 * i, 100 + 5 * i:104 + 5 * i] = 1
boxes = np.array([[0, 0, 10, 10, 0.9, 0]] * 100, np.float32)
drawn = Results(np.zeros((3000, 4000, 3), np.uint8), None, {0: "a"}, boxes, masks=masks).plot(boxes=False)
print(drawn.any(-1).sum(), peak_rss_kb())
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    drawn, peak_kb = map(int, done.stdout.split())
    # each 4x4 cell of the 480x640 frame (letterboxed to 3000x4000 at 6.25x) drawn as about 25x25 pixels
    assert 100 * 24 * 24 <= drawn <= 100 * 27 * 27 and peak_kb < 800 << 10


def test_a_kpt_shape_the_file_contradicts_is_one_line(tmp_path, checkpoints):
    from zoo.weights.checkpoint import read_checkpoint_with_meta

    state_dict, _ = read_checkpoint_with_meta(checkpoints["yolo11n-pose"])
    path = tmp_path / "pose.safetensors"
    save_file({k: np.ascontiguousarray(v) for k, v in state_dict.items()}, str(path), metadata={"kpt_shape": "[17, 3]"})
    with pytest.raises(ZooError, match=r"kpt_shape \[17, 3\] means 51 keypoint values but its pose head has 10: "
                                       r"the file is inconsistent; re-export it"):
        zoo.load(str(path), device="cpu")


def test_cli_runs_a_checkpoint_and_bad_files_are_one_line(tmp_path, checkpoints, capsys):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    for i in range(2):
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (70, 90, 3), np.uint8)).save(images / f"{i}.png")
    out = tmp_path / "out"
    argv = [str(checkpoints["yolov8n-seg"]), str(images), "--save-txt", "--imgsz", "96", "--batch", "2",
            "--retina-masks", "--out", str(out)]
    assert main(argv) == 0
    assert sorted(p.name for p in (out / "labels").iterdir()) == ["0.txt", "1.txt"]
    rows = read_labels(out / "labels" / "0.txt")
    assert rows and all(len(r) % 2 == 1 and len(r) >= 7 and 0 <= min(r[1:]) and max(r[1:]) <= 1 for r in rows)
    assert (out / "0.png").exists() and (out / "1.png").exists()
    capsys.readouterr()
    truncated = tmp_path / "best.pt"
    truncated.write_bytes(checkpoints["yolov8n-seg"].read_bytes()[:200_000])
    assert main([str(truncated), str(images), "--out", str(tmp_path / "o2")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "best.pt" in err[0]


def test_keypoints_summary_rounds_in_their_float32_as_ultralytics():
    """ultralytics rounds the keypoints (as the segments) in their own float32: summary() gives the float32
    nearest each rounded value (7.904 reads 7.9039998054504395), so to_json's text is upstream's; the scores too."""
    points = np.array([[[7.904, 20.5, 0.531], [140.25, 99.0, 0.46]]], np.float32)
    r = Results(np.zeros((100, 150, 3), np.uint8), None, {0: "person"}, np.array([[0, 0, 65, 48, 0.9, 0]]),
                keypoints=points)
    def nearest(values, scale):  # the float32 nearest each value rounded to 3 decimals
        return [float(np.float32(round(float(v) / scale, 3))) for v in values]

    for h, w in ((1, 1), (100, 150)):
        got = r.summary(normalize=w > 1, decimals=3)[0]["keypoints"]
        assert got == {"x": nearest(points[0, :, 0], w), "y": nearest(points[0, :, 1], h),
                       "visible": nearest(points[0, :, 2], 1)}
    assert '"x":[7.9039998054504395,140.25]' in r.to_json(decimals=3)


def test_supervision_reads_and_draws_our_masks_and_keypoints(models):
    """supervision's from_ultralytics on seg results: the letterboxed masks.data cut and resized to the image
    (as whole_masks), the boxes, classes, scores; KeyPoints.from_ultralytics; the mask, polygon, edge and vertex
    annotators; InferenceSlicer with a callback calling the model on each tile."""
    import supervision as sv

    image = (fixture_input()[0, :, 14:114, 5:155].transpose(1, 2, 0) * 255).astype(np.uint8)  # 100 x 150
    r = models["yolov8n-seg"](image, imgsz=160, conf=0.5, max_det=6)[0]
    assert len(r) and r.masks.data.shape[1:] == FRAME  # letterboxed, as ultralytics' masks.data
    det = sv.Detections.from_ultralytics(r)
    assert det.mask.shape == (len(r), *ORIG_SHAPE) and np.array_equal(det.xyxy, r.boxes.xyxy)
    assert det.class_id.tolist() == r.boxes.cls.int().tolist() and np.array_equal(det.confidence, r.boxes.conf)
    # cv2's uint8 resize there, a float one here: thin masks' edges may fall a pixel apart (measured mean 0.97)
    assert iou(det.mask, whole_masks(r)).mean() >= 0.95
    scene = sv.PolygonAnnotator().annotate(sv.MaskAnnotator().annotate(r.orig_img.copy(), det), det)
    assert scene.shape == r.orig_img.shape and (scene != r.orig_img).any()
    slicer = sv.InferenceSlicer(callback=lambda tile: sv.Detections.from_ultralytics(
        models["yolov8n-seg"](tile, imgsz=96, conf=0.3)[0]), slice_wh=(80, 64), overlap_wh=(16, 16), thread_workers=1)
    sliced = slicer(r.orig_img)
    assert len(sliced) and sliced.mask.shape[1:] == ORIG_SHAPE
    for case, kpt_shape in KPT_SHAPES.items():
        r = models[case](image, imgsz=160, conf=0.5, max_det=6)[0]
        keypoints = sv.KeyPoints.from_ultralytics(r)
        assert len(r) and np.array_equal(keypoints.xy, r.keypoints.xy)
        assert keypoints.class_id.tolist() == r.boxes.cls.int().tolist()
        conf = keypoints.keypoint_confidence
        assert conf is None if kpt_shape[1] == 2 else np.array_equal(conf, r.keypoints.conf)
        scene = sv.EdgeAnnotator().annotate(r.orig_img.copy(), keypoints)
        scene = sv.VertexAnnotator(radius=2).annotate(scene, keypoints)
        assert (scene != r.orig_img).any()


def test_ultralytics_isolating_objects_recipe_runs_unchanged(models):
    """docs.ultralytics.com/guides/isolating-segmentation-objects, as written: iterate a Results object by object,
    each one's class name, its polygon (masks.xy.pop()) filled with OpenCV, the isolated object cut to its box."""
    import cv2

    image = (fixture_input()[0, :, 14:114, 5:155].transpose(1, 2, 0) * 255).astype(np.uint8)
    r = models["yolov8n-seg"](image, imgsz=160, conf=0.5, max_det=6)[0]
    img = np.copy(r.orig_img)
    objects = []
    for ci, c in enumerate(r):
        label = c.names[c.boxes.cls.tolist().pop()]
        b_mask = np.zeros(img.shape[:2], np.uint8)
        contour = c.masks.xy.pop().astype(np.int32).reshape(-1, 1, 2)
        _ = cv2.drawContours(b_mask, [contour], -1, (255, 255, 255), cv2.FILLED)
        isolated = cv2.bitwise_and(cv2.cvtColor(b_mask, cv2.COLOR_GRAY2BGR), img)
        x1, y1, x2, y2 = c.boxes.xyxy.cpu().numpy().squeeze().astype(np.int32)
        objects.append((label, b_mask > 0, isolated[y1:y2, x1:x2].shape))
    assert len(objects) == len(r) > 0  # one pass per object, ending after the last (IndexError ends iteration)
    overlaps = []
    for (label, filled, crop_shape), mask, box in zip(objects, whole_masks(r), r.boxes.xyxy.astype(np.int32)):
        assert label == "traffic cone" and crop_shape == (box[3] - box[1], box[2] - box[0], 3)
        rows, columns = np.nonzero(filled)
        assert len(rows) and rows.min() >= box[1] - 1 and rows.max() <= box[3] + 1
        assert columns.min() >= box[0] - 1 and columns.max() <= box[2] + 1
        overlaps.append((filled & mask).sum() / (filled | mask).sum())
    # the polygon filled is the mask, but for the seams merge_multi_segment draws between a mask's parts
    assert np.mean(overlaps) > 0.8
