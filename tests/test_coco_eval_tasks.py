"""--save-json's predictions.json of segmentation and pose models, evaluated as a researcher does with
ultralytics' file: pycocotools' ``COCO.loadRes`` on the file as written, ``COCOeval(gt, dt, "segm")`` /
``"keypoints"``. The ground truths have known answers: the run's own objects (from the Python API, encoded by
pycocotools) give AP 1.0; one object of two dropped or not found, AR 0.5; one mask cut to a known IoU or
one person's keypoints moved to a known OKS, AR 0.75; category ids off by one, AP 0; a (K, 2) model's keypoints
are triples; a mask drawn in the letterboxed input lands on the same shape drawn in the image. Checkpoints as
ultralytics saves them (yolo_tasks_fixtures)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval, Params
from safetensors.numpy import save_file

import zoo
from conftest import MANIFESTS
from yolo_tasks_fixtures import checkpoints, fixture_input, whole_masks  # noqa: F401 (fixtures)
from zoo.results import Results
from zoo.run import main
from zoo.weights.synthetic import read_manifest, synthetic_state_dict

# COCO's person_keypoints_val2017.json: its category's keypoint names and skeleton (1-based), as a ground truth has them
PERSON = {"id": 1, "name": "person", "supercategory": "person",
          "keypoints": ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
                        "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
                        "right_knee", "left_ankle", "right_ankle"],
          "skeleton": [[16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7], [6, 8], [7, 9],
                       [8, 10], [9, 11], [2, 3], [1, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7]]}
# COCO's own category ids, from its instances_val2017.json (independent of zoo's mapping)
COCO_IDS = {"person": 1, "remote": 75}
OPTIONS = {"imgsz": 64, "conf": 0.5}  # predict's, and the command line's flags

# pycocotools 2.0 decodes through numpy's old __array__ protocol
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The fixture's input as a 128 x 160 image and a 100 x 160 strip of it (letterboxed with padding)."""
    folder = tmp_path_factory.mktemp("images")
    image = (fixture_input()[0].transpose(1, 2, 0) * 255).astype(np.uint8)
    Image.fromarray(image).save(folder / "000000000007.png")
    Image.fromarray(image[14:114]).save(folder / "000000000042.png")
    return folder


def run_save_json(model: str, images: Path, out: Path, options: dict, weights: list[str] = ()) -> Path:
    """``main``'s run with --save-json and predict's ``options`` as its flags."""
    flags = [f"--{k.replace('_', '-')}" + ("" if v is True else f"={v}") for k, v in options.items()]
    assert main([model, str(images), *weights, "--device", "cpu", "--save-json", "--out", str(out), *flags]) == 0
    return out / "predictions.json"


def ground_truth(model, images: Path, options: dict, category_ids: dict[str, int], categories: list[dict]) -> dict:
    """The objects the Python API finds in ``images``, as a COCO ground truth: image ids the files' numeric
    stems (COCO's naming), masks encoded by pycocotools from the image-sized masks, keypoints all visible
    (v = 2), categories by name."""
    annotations = []
    for r in model.predict(str(images), **options):
        masks = whole_masks(r) if r.masks is not None else [None] * len(r)
        points = r.keypoints.data.tolist() if r.keypoints is not None else [None] * len(r)
        for (x1, y1, x2, y2), c, mask, kpts in zip(r.boxes.xyxy.tolist(), r.boxes.cls.int().tolist(), masks, points):
            annotation = {"id": len(annotations) + 1, "image_id": int(Path(r.path).stem),
                          "category_id": category_ids[r.names[c]], "bbox": [x1, y1, x2 - x1, y2 - y1],
                          "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}
            if mask is not None:
                rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
                annotation.update(segmentation=rle, area=float(mask_utils.area(rle)))
            if kpts is not None:
                annotation.update(keypoints=[v for x, y, *_ in kpts for v in (x, y, 2)], num_keypoints=len(kpts))
            annotations.append(annotation)
    listed = []
    for path in sorted(images.iterdir()):
        with Image.open(path) as image:
            listed.append({"id": int(path.stem), "file_name": path.name, "height": image.height, "width": image.width})
    return {"images": listed, "annotations": annotations, "categories": categories}


def evaluate(truth: dict, predictions, iou_type: str, sigmas: np.ndarray | None = None) -> COCOeval:
    """``sigmas``: the keypoints' OKS sigmas where they are not COCO's 17 (COCOeval's default)."""
    gt = COCO()
    gt.dataset = json.loads(json.dumps(truth, default=bytes.decode))  # as read from a file: RLE counts str
    gt.createIndex()
    evaluation = COCOeval(gt, gt.loadRes(predictions), iou_type)  # a path: the file as written
    if sigmas is not None:
        evaluation.params.kpt_oks_sigmas = sigmas
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return evaluation


SEG_CATEGORIES = [{"id": i + 1, "name": n} for i, n in enumerate(("cat", "dog", "traffic cone"))]
SEG_IDS = {c["name"]: c["id"] for c in SEG_CATEGORIES}  # a custom model: class + 1, as ultralytics' class_map


def ar(evaluation: COCOeval) -> float:
    """AR over IoU (OKS) 0.50:0.95 of all areas at the most detections: stats[8] (segm), stats[5] (keypoints)."""
    return float(evaluation.stats[8 if evaluation.params.iouType == "segm" else 5])


@pytest.mark.parametrize("case, iou_type, category_ids, categories, retina_masks", [
    ("yolov8n-seg", "segm", SEG_IDS, SEG_CATEGORIES, False),
    ("yolov8n-seg", "segm", SEG_IDS, SEG_CATEGORIES, True),
    ("yolo11n-seg", "segm", {"leaf": 1, "stem": 2}, [{"id": 1, "name": "leaf"}, {"id": 2, "name": "stem"}], False),
    ("yolov8n-pose", "keypoints", {"person": 1}, [PERSON], False),
])
def test_the_runs_own_objects_as_ground_truth_give_ap_1_and_ids_off_by_one_ap_0(
        case, iou_type, category_ids, categories, retina_masks, images, checkpoints, tmp_path):
    options = {**OPTIONS, "max_det": 3, **({"retina_masks": True} if retina_masks else {})}
    predictions = run_save_json(str(checkpoints[case]), images, tmp_path / "out", options)
    truth = ground_truth(zoo.load(str(checkpoints[case]), device="cpu"), images, options, category_ids, categories)
    records = json.loads(predictions.read_text())
    assert len(records) == len(truth["annotations"]) >= 4 and {r["image_id"] for r in records} == {7, 42}
    evaluation = evaluate(truth, str(predictions), iou_type)
    assert evaluation.stats[0] == pytest.approx(1.0) and ar(evaluation) == pytest.approx(1.0)
    # every detection on its own object: mask IoU / OKS 1 (at the image's size, in the image's pixels)
    for (image_id, category), ious in evaluation.ious.items():
        if len(ious):
            assert np.allclose(np.sort(ious.max(1)), 1.0, atol=1e-4)
    shifted = [{**r, "category_id": r["category_id"] + 1} for r in records]
    assert evaluate(truth, shifted, iou_type).stats[0] == 0


def test_keypoints_without_visibility_are_cocos_triples(images, checkpoints, tmp_path):
    """A (K, 2) pose model (5 keypoints, no visibility) writes [x, y, 1, ...]: ultralytics' x, y pairs are read
    by COCOeval as triples, x of one keypoint taken for another's v (a ValueError, 4 against 5 keypoints)."""
    options = {**OPTIONS, "max_det": 3}
    predictions = run_save_json(str(checkpoints["yolo11n-pose"]), images, tmp_path / "out", options)
    model = zoo.load(str(checkpoints["yolo11n-pose"]), device="cpu")
    records = json.loads(predictions.read_text())
    assert records and all(len(r["keypoints"]) == 5 * 3 and r["keypoints"][2::3] == [1] * 5 for r in records)
    categories = [{"id": i, "name": name, "keypoints": list("abcde")} for i, name in ((1, "hand"), (2, "paw"))]
    truth = ground_truth(model, images, options, {"hand": 1, "paw": 2}, categories)
    evaluation = evaluate(truth, str(predictions), "keypoints", sigmas=np.full(5, 0.05))
    assert evaluation.stats[0] == pytest.approx(1.0) and ar(evaluation) == pytest.approx(1.0)


def keypoint_shift(oks: float, area: float) -> float:
    """The distance every keypoint moves (same direction) for COCOeval's OKS to be ``oks``: mean over the 17
    keypoints of exp(-d^2 / (2 area (2 sigma)^2)), pycocotools' own sigmas; by bisection."""
    variances = (Params(iouType="keypoints").kpt_oks_sigmas * 2) ** 2
    low, high = 0.0, 1e4
    for _ in range(200):
        d = (low + high) / 2
        low, high = (d, high) if np.exp(-d * d / variances / (area + np.spacing(1)) / 2).mean() > oks else (low, d)
    return (low + high) / 2


@pytest.mark.parametrize("case, iou_type, category_ids, categories", [
    ("yolov8n-seg", "segm", SEG_IDS, SEG_CATEGORIES),
    ("yolov8n-pose", "keypoints", {"person": 1}, [PERSON]),
])
def test_known_perturbations_give_the_recall_they_imply(case, iou_type, category_ids, categories, images, checkpoints,
                                                        tmp_path):
    """One detection per image, two images: a prediction dropped halves the recall; image 42's object made to
    overlap its detection by IoU / OKS 0.72 is found at thresholds 0.50-0.70 only (AR (10 + 5) / 20)."""
    options = {**OPTIONS, "max_det": 1}
    predictions = run_save_json(str(checkpoints[case]), images, tmp_path / "out", options)
    truth = ground_truth(zoo.load(str(checkpoints[case]), device="cpu"), images, options, category_ids, categories)
    records = json.loads(predictions.read_text())
    assert [r["image_id"] for r in records] == [7, 42] and len(truth["annotations"]) == 2
    dropped = evaluate(truth, [r for r in records if r["image_id"] == 42], iou_type)
    assert ar(dropped) == pytest.approx(0.5)
    assert dropped.stats[0] == pytest.approx(51 / 101)  # precision 1 up to recall 0.5: 51 of COCO's 101 points

    target = next(a for a in truth["annotations"] if a["image_id"] == 42)
    if iou_type == "segm":  # the ground truth: the first 72% of the detection's pixels (a subset: IoU = its share)
        mask = mask_utils.decode(target["segmentation"]).astype(bool)
        kept = round(0.72 * mask.sum())
        cut = np.zeros(mask.size, bool)
        cut[np.flatnonzero(mask.reshape(-1))[:kept]] = True
        target["segmentation"] = mask_utils.encode(np.asfortranarray(cut.reshape(mask.shape).astype(np.uint8)))
        target["area"] = float(kept)
        expected = kept / mask.sum()
    else:  # every keypoint moved right by the distance that gives OKS 0.72
        d = keypoint_shift(0.72, target["area"])
        target["keypoints"] = [v + d if i % 3 == 0 else v for i, v in enumerate(target["keypoints"])]
        expected = 0.72
    assert 0.70 < expected < 0.75
    evaluation = evaluate(truth, str(predictions), iou_type)
    # abs: the file's keypoints are rounded to 3 decimals (OKS 0.7199935 measured), the ground truth's are not
    assert evaluation.ious[(42, target["category_id"])][0, 0] == pytest.approx(expected, abs=1e-4)
    assert ar(evaluation) == pytest.approx(0.75) and evaluation.stats[1] == pytest.approx(1.0)  # AP at 0.50: 1


def test_an_image_without_detections_has_no_records_and_its_object_counts_as_missed(checkpoints, tmp_path):
    """The pose fixture scores a black image's person 0.51858 and a white image's 0.51826 (synthetic weights
    barely see the image): at conf 0.5184 the white image has no detection. Its record-less entry in the run
    is a missed object for COCOeval, not a crash: AR 0.5."""
    folder = tmp_path / "images"
    folder.mkdir()
    for value, name in ((0, "000000000001.png"), (255, "000000000002.png")):
        Image.fromarray(np.full((90, 120, 3), value, np.uint8)).save(folder / name)
    model = zoo.load(str(checkpoints["yolov8n-pose"]), device="cpu")
    scores = {Path(r.path).name: r.boxes.conf.tolist() for r in model.predict(str(folder), **OPTIONS, max_det=1)}
    assert scores["000000000002.png"][0] < 0.5184 - 1e-4 and scores["000000000001.png"][0] > 0.5184 + 1e-4
    options = {**OPTIONS, "max_det": 1}
    predictions = run_save_json(str(checkpoints["yolov8n-pose"]), folder, tmp_path / "out", {**options, "conf": 0.5184})
    assert [r["image_id"] for r in json.loads(predictions.read_text())] == [1]
    truth = ground_truth(model, folder, options, {"person": 1}, [PERSON])  # both people, found at conf 0.5
    assert [a["image_id"] for a in truth["annotations"]] == [1, 2]
    evaluation = evaluate(truth, str(predictions), "keypoints")
    assert ar(evaluation) == pytest.approx(0.5) and evaluation.stats[0] == pytest.approx(51 / 101)


def test_coco_models_masks_carry_cocos_category_ids(images, tmp_path):
    """A segmentation model with COCO's 80 classes writes COCO's ids (remote, class 65: 75), as ultralytics'
    coco80_to_coco91_class; class + 1 (66, bed) would score AP 0 against COCO's own annotations."""
    weights = synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n-seg.json"), 0)
    weights["model.22.dfl.conv.weight"] = np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)  # as every real file
    for level in range(3):  # every anchor's best class: remote
        weights[f"model.22.cv3.{level}.2.bias"][65] = 20.0
    save_file(weights, str(tmp_path / "coco80-seg.safetensors"))
    model = zoo.load("yolov8n-seg", weights=tmp_path / "coco80-seg.safetensors", device="cpu")
    assert model.names[65] == "remote"
    options = {**OPTIONS, "max_det": 2}
    predictions = run_save_json("yolov8n-seg", images, tmp_path / "out", options,
                                weights=["--weights", str(tmp_path / "coco80-seg.safetensors")])
    records = json.loads(predictions.read_text())
    assert records and {r["category_id"] for r in records} == {COCO_IDS["remote"]}
    categories = [{"id": i, "name": n} for n, i in COCO_IDS.items()]
    truth = ground_truth(model, images, options, COCO_IDS, categories)
    assert evaluate(truth, str(predictions), "segm").stats[0] == pytest.approx(1.0)


def test_a_mask_drawn_in_the_letterboxed_input_lands_on_the_shape_drawn_in_the_image(tmp_path):
    """predict's masks are at the letterboxed input's size: a 150 x 100 image letterboxes into 160 x 128 at
    gain 16/15 with 10.7 rows of padding above. The rectangle x 30-90, y 30-60 of the image, drawn there by
    that arithmetic, is written at the image's size and overlaps the same rectangle drawn in the image
    (the ground truth) by IoU 0.95 or more; the mask left in the input's frame would overlap it by 0.34."""
    letterboxed = np.zeros((1, 128, 160), bool)
    letterboxed[0, 43:75, 32:96] = True  # y 30-60 -> 42.7-74.7, x 30-90 -> 32-96
    result = Results(np.zeros((100, 150, 3), np.uint8), str(tmp_path / "000000000005.png"), {0: "cat"},
                     np.array([[30, 30, 90, 60, 0.9, 0]], np.float32), masks=letterboxed)
    records = result.to_coco(5)
    assert records[0]["segmentation"]["size"] == [100, 150] and records[0]["category_id"] == 1
    drawn = np.zeros((100, 150), np.uint8)
    drawn[30:60, 30:90] = 1
    rle = mask_utils.encode(np.asfortranarray(drawn))
    truth = {"images": [{"id": 5, "height": 100, "width": 150}], "categories": [{"id": 1, "name": "cat"}],
             "annotations": [{"id": 1, "image_id": 5, "category_id": 1, "segmentation": rle, "area": 1800.0,
                              "bbox": [30, 30, 60, 30], "iscrowd": 0}]}
    unscaled = letterboxed[0, :100, :150]
    assert (unscaled & (drawn > 0)).sum() / (unscaled | (drawn > 0)).sum() < 0.5
    evaluation = evaluate(truth, records, "segm")
    assert evaluation.ious[(5, 1)][0, 0] >= 0.95 and evaluation.stats[2] == pytest.approx(1.0)  # AP at 0.75: 1
