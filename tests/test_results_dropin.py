"""Other people's code on our Results, unchanged: a script written against ultralytics' documented Results
API gives what ultralytics' own Results give (tests/fixtures/ultralytics), supervision reads and draws our
detections and MobileSAM's records, and --save-json evaluates with pycocotools as written."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import zoo
from conftest import MANIFESTS, synthetic_checkpoint
from yolo_tasks_fixtures import as_jpeg
from zoo.errors import ZooError
from zoo.results import Results, TensorArray
from zoo.run import main
from zoo.sources import VideoWriter, read_jsonl

FIXTURES = Path(__file__).parent / "fixtures" / "ultralytics"
sys.path.insert(0, str(FIXTURES))
import results_script  # noqa: E402


def ours() -> Results:
    image = np.zeros(results_script.IMAGE_SHAPE, np.uint8)
    return Results(image, "bus.jpg", results_script.NAMES, np.array(results_script.BOXES, np.float32))


def test_an_ultralytics_script_gives_ultralytics_values(tmp_path):
    expected = json.loads((FIXTURES / "expected.json").read_text())["values"]
    got = json.loads(json.dumps(results_script.run(ours(), tmp_path)))  # tuples as JSON lists, as expected's
    assert got.keys() == expected.keys()
    for key in expected:
        assert got[key] == expected[key], key


def test_values_answer_torch_methods():
    boxes = ours().boxes
    assert isinstance(boxes.xyxy, TensorArray) and type(boxes.xyxy.numpy()) is np.ndarray
    assert boxes.cls.long().dtype == np.int64 and boxes.conf.half().dtype == np.float16
    assert boxes.cls.bool().tolist() == [False, True, False, True] and boxes.xyxy.byte().dtype == np.uint8
    assert boxes.xyxy.to("cuda:0", dtype="float16").dtype == np.float16 and boxes.to("mps").data.dtype == np.float32
    assert boxes.conf.to(np.zeros(1, np.float64)).dtype == np.float64  # .to(other): other's dtype
    assert ours().to("float16").boxes.data.dtype == np.float16 and ours().cuda().boxes is not None
    assert f"{boxes[0].conf:.2f}" == "0.91" and boxes.xyxy.numel() == 16 and boxes.xyxy.dim() == 2
    # torch's size(): the shape or one dimension; numpy's size, the element count, stays
    assert boxes.xyxy.size() == (4, 4) and boxes.xyxy.size(0) == 4 and boxes.cls.size(-1) == 4
    assert boxes.xyxy.size == 16 and boxes.xyxy[:0].size == 0 and np.zeros(boxes.conf.size).shape == (4,)
    # ultralytics' own verbose(): for c in boxes.cls.unique(): n = (boxes.cls == c).sum()
    assert [(int(c), int((boxes.cls == c).sum())) for c in boxes.cls.unique()] == [(0, 2), (2, 1), (5, 1)]
    values, inverse, counts = boxes.cls.unique(return_inverse=True, return_counts=True)
    assert isinstance(values, TensorArray) and values.dtype == np.float32 and counts.dtype == inverse.dtype == np.int64
    assert inverse.tolist() == [0, 2, 0, 1] and counts.tolist() == [2, 1, 1]
    assert boxes.xyxy[[0, 0, 1]].unique(dim=0).tolist() == sorted(boxes.xyxy[:2].tolist())
    with pytest.raises(ZooError, match=r"to\(device='tpu'\): not a device"):
        boxes.xyxy.to(device="tpu")
    with pytest.raises(ValueError):  # as torch: only a one-element value is a number
        int(boxes.cls)


def test_saves_follow_ultralytics_and_never_replace_the_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    photo = tmp_path / "bus.jpg"
    Image.new("RGB", (120, 100)).save(photo)
    r = ours()
    r.path = str(photo)
    for call in (lambda: r.save(photo), lambda: r.plot(save=True, filename=photo), lambda: r.save_txt(photo)):
        with pytest.raises(ZooError, match="is the input file"):
            call()
    assert r.plot(save=True, filename="plots/a.png").shape == (100, 120, 3) and Path("plots/a.png").is_file()
    assert r.save() == "results_bus.jpg"
    with pytest.raises(ZooError, match="results_bus.jpg exists: pass overwrite=True"):
        r.save()  # a name the user did not give replaces nothing
    assert r.save(overwrite=True) == "results_bus.jpg"
    array = zoo.results.Results(np.zeros((8, 8, 3), np.uint8), "image0.jpg", {0: "a"})
    assert array.save() == "results_image0.jpg"  # an in-memory image's name, as ultralytics gives it


def test_supervision_reads_and_draws_our_detections():
    import supervision as sv

    r = ours()
    detections = sv.Detections.from_ultralytics(r)
    assert np.array_equal(detections.xyxy, r.boxes.xyxy) and detections.class_id.tolist() == [0, 5, 0, 2]
    assert np.allclose(detections.confidence, r.boxes.conf) and detections["class_name"].tolist() == [
        "person", "bus", "person", "car"]
    scene = r.orig_img.copy()
    scene = sv.BoxAnnotator(thickness=1).annotate(scene, detections)
    scene = sv.LabelAnnotator().annotate(scene, detections)
    assert scene[50, 10].any() and not scene[50, 30].any()  # box 0 (x 10.25-50.75): its left edge drawn, not its inside
    empty = sv.Detections.from_ultralytics(r.new())  # boxes None: an image without results
    assert len(empty) == 0


# tracked rows x1, y1, x2, y2, id, conf, cls, the second partly outside the 100 x 120 image, and what
# ultralytics 8.3.253's Results.update(boxes=...) gives for them (its save_txt appends the id after the score)
TRACKED = [[10, 20, 50, 80, 7, 0.9, 0], [-5, 0, 130, 31, 8, 0.8, 2]]
TRACKED_SUMMARY = [{"name": "person", "class": 0, "confidence": 0.9,
                    "box": {"x1": 10.0, "y1": 20.0, "x2": 50.0, "y2": 80.0}, "track_id": 7},
                   {"name": "car", "class": 2, "confidence": 0.8,
                    "box": {"x1": 0.0, "y1": 0.0, "x2": 120.0, "y2": 31.0}, "track_id": 8}]
TRACKED_TXT = "0 0.25 0.5 0.333333 0.6 0.9 7\n2 0.5 0.155 1 0.31 0.8 8\n"


def test_tracked_boxes_and_update_as_ultralytics(tmp_path, monkeypatch):
    import supervision as sv

    r = ours()
    assert not r.boxes.is_track and r.boxes.id is None
    r.update(boxes=np.array(TRACKED, np.float32))
    assert r.boxes.is_track and r.boxes.id.tolist() == [7, 8] and r.boxes.cls.tolist() == [0, 2]
    assert r.boxes.xyxy.tolist() == [[10, 20, 50, 80], [0, 0, 120, 31]]  # clipped to the image, as upstream
    assert r.boxes.conf.tolist() == pytest.approx([0.9, 0.8]) and [float(b.id) for b in r.boxes] == [7, 8]
    assert r.summary() == TRACKED_SUMMARY and r[1].boxes.id.tolist() == [8]
    r.save_txt(tmp_path / "tracked.txt", save_conf=True)
    assert (tmp_path / "tracked.txt").read_text() == TRACKED_TXT
    assert sv.Detections.from_ultralytics(r).tracker_id.tolist() == [7, 8]
    # 'instance' colours by track id: the two boxes' colours differ from their classes' colours
    assert not np.array_equal(r.plot(color_mode="instance"), r.plot(color_mode="class"))
    r.update(masks=np.ones((2, 100, 120), np.uint8))
    assert len(r.masks) == 2 and r.masks.data.shape == (2, 100, 120)
    with pytest.raises(ZooError, match="no classification or oriented-box results here"):
        r.update(probs=np.ones(3))


def test_results_built_with_ultralytics_arguments():
    image = np.zeros((100, 120, 3), np.uint8)
    points = np.full((1, 17, 3), 0.5, np.float32)
    # Results(orig_img, path, names, boxes, masks, probs, keypoints, obb, speed), positional as upstream's
    r = Results(image, "a.jpg", {0: "person"}, np.array(TRACKED[:1])[:, [0, 1, 2, 3, 5, 6]], None, None, points, None,
                {"preprocess": 1.0, "inference": 2.0, "postprocess": 3.0})
    assert r.keypoints.data.shape == (1, 17, 3) and r.masks is None and r.speed["inference"] == 2.0
    with pytest.raises(ZooError, match="no classification or oriented-box results here"):
        Results(image, "a.jpg", {0: "person"}, probs=np.ones(3))


def test_plot_takes_ultralytics_arguments(monkeypatch):
    r = ours()
    default = r.plot()
    # ultralytics' signature, every argument positional in its order
    same = r.plot(True, None, None, "Arial.ttf", False, None, None, 5, True, True, True, True, True, False, False,
                  None, "class", (255, 255, 255))
    assert np.array_equal(same, default)
    assert not np.array_equal(r.plot(boxes=False), default)
    assert np.array_equal(r.plot(boxes=False), r.plot(boxes=False, labels=False))  # labels go with boxes, as upstream
    shown = []
    monkeypatch.setattr(Image.Image, "show", lambda image, title=None: shown.append((image.size, title)))
    r.show()
    assert shown == [((120, 100), "bus.jpg")]
    with pytest.raises(ZooError, match="color_mode='class' or color_mode='instance'"):
        r.plot(color_mode="track")


def test_predicted_images_take_drawing_and_one_class_id():
    import cv2
    import supervision as sv

    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    image = np.random.default_rng(4).integers(0, 256, (48, 64, 3), np.uint8)
    r = det(image, conf=0.05, imgsz=64)[0]
    # drawn on in place, as scripts do with ultralytics' orig_img (writable and contiguous there)
    cv2.rectangle(r.orig_img, (1, 1), (20, 20), (0, 255, 0), 2)
    assert r.orig_img[1, 10].tolist() == [0, 255, 0]
    assert sv.BoxAnnotator().annotate(r.orig_img, sv.Detections.from_ultralytics(r)) is r.orig_img
    one = det(image, conf=0.05, imgsz=64, classes=0)[0]  # ultralytics' classes=0 for one class
    assert len(one) and np.array_equal(one.boxes.data, det(image, conf=0.05, imgsz=64, classes=[0])[0].boxes.data)
    assert len(det(image, conf=0.05, imgsz=64, classes=1)[0]) == 0
    with pytest.raises(ZooError, match="track\\(\\) is not available in mlx-zoo: run predict"):
        det.track(image)



# ultralytics 8.3.253's model.info() on the same architectures: "YOLOv8n summary: 129 layers, 3,157,200 parameters,
# ..." (DetectionModel("yolov8n.yaml"), SegmentationModel("yolov8n-seg.yaml"), PoseModel("yolo11n-pose.yaml", nc=1):
# the released pose models' one class)
UPSTREAM_PARAMETERS = {"yolov8n": ("YOLOv8n", 3157200), "yolov8n-seg": ("YOLOv8n-seg", 3409968),
                       "yolo11n-pose": ("YOLO11n-pose", 2874462)}


def test_model_info_and_the_methods_not_built(capsys):
    for name, (title, parameters) in UPSTREAM_PARAMETERS.items():
        model = zoo.load(name, weights="synthetic:0", device="cpu")
        capsys.readouterr()
        assert model.info() == (None, parameters, 0, 0.0)  # layers: ultralytics counts torch modules
        assert capsys.readouterr().out == f"{title} summary: {parameters:,} parameters, 0 gradients\n"
    assert model.info(verbose=False) is None and model.fuse() is None and not capsys.readouterr().out
    assert model.train() is model and model.training and not model.eval().training  # MLX's train(mode) stays
    assert not model.train(mode=False).training and model.train(True).training and not model.train(False).training
    assert model.to("cpu") is model and model.to(device="cpu") is model and model.device == "cpu"
    with pytest.raises(ZooError, match="device='tpu': MLX runs on one device"):
        model.to("tpu")
    not_built = [(lambda: model.train(data="coco8.yaml", epochs=1), "train", "train with ultralytics"),
                 (model.tune, "tune", "train with ultralytics"),
                 (lambda: model.val(data="coco8.yaml"), "val",
                  "--save-json and score its predictions.json with pycocotools' COCOeval"),
                 (lambda: model.export(format="onnx"), "export",
                  "export ONNX, TensorRT or CoreML files with ultralytics"),
                 (model.benchmark, "benchmark", "python -m zoo.bench"),
                 (lambda: model.info(detailed=True), "info", "tree_flatten"),
                 (lambda: model.embed("bus.jpg"), "embed", "model.layers(0, k, x)[0]"),
                 (lambda: model.add_callback("on_predict_end", print), "add_callback", "stream=True"),
                 (lambda: model.save("model.pt"), "save", "writes none"),
                 (lambda: model.load("yolov8n.pt"), "load", "YOLO('best.pt')")]
    for call, method, instead in not_built:
        with pytest.raises(ZooError, match=rf"^{method}\(.*not available in mlx-zoo: .*{re.escape(instead)}"):
            call()


def test_predict_draws_saved_images_as_asked(tmp_path):
    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    photo = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(4).integers(0, 256, (48, 64, 3), np.uint8)).save(photo)
    options = {"conf": 0.05, "imgsz": 64, "save": True, "project": tmp_path / "runs"}
    plain = det(photo, **options, name="plain")[0]
    thin = det(photo, **options, name="thin", line_width=1, show_labels=False, show_conf=False)[0]
    assert len(thin) and Path(thin.save_dir).name == "thin"
    saved = np.asarray(Image.open(Path(thin.save_dir) / "photo.jpg"))
    assert np.array_equal(saved, as_jpeg(thin.plot(line_width=1, labels=False)[..., ::-1]))
    assert not np.array_equal(saved, np.asarray(Image.open(Path(plain.save_dir) / "photo.jpg")))
    with pytest.raises(ZooError, match=r"predict\(show=True\) is not available .*: call r.show"):
        det(photo, show=True)


def test_predict_takes_the_defaults_of_ultralytics_options_not_built():
    """Tutorials pass ultralytics' predict defaults for what mlx-zoo does not build (augment=False, ...):
    they change nothing there; another value is one error, where every one was an unknown keyword."""
    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    image = np.random.default_rng(4).integers(0, 256, (48, 64, 3), np.uint8)
    defaults = {"augment": False, "visualize": False, "embed": None, "save_frames": False, "compile": False,
                "show": False, "rect": True}
    plain = det(image, conf=0.05, imgsz=64)[0]
    assert np.array_equal(det(image, conf=0.05, imgsz=64, **defaults)[0].boxes.data, plain.boxes.data)
    for key, value in {"augment": True, "rect": False, "embed": [0]}.items():
        with pytest.raises(ZooError, match=rf"predict\({key}={re.escape(repr(value))}\) is not available in mlx-zoo "
                                           rf"\(only ultralytics' default {key}="):
            det(image, **{key: value})


@pytest.mark.parametrize("options, message", [
    ({"save": "False"}, r"predict\(save='False'\): pass save=True or save=False"),  # the text was true: it saved
    ({"save_txt": "no"}, r"predict\(save_txt='no'\): pass save_txt=True or save_txt=False"),
    ({"save": True, "line_width": "3"}, r"predict\(line_width='3'\): pass a width in pixels"),  # a TypeError drawing
    ({"save": True, "line_width": -2}, r"predict\(line_width=-2\): pass a width in pixels"),
])
def test_predict_refuses_values_of_the_types_ultralytics_refuses(options, message, tmp_path, monkeypatch):
    """ultralytics' check_cfg refuses a bool key's text and a line width that is no number; predict took save='False'
    as true and wrote a run folder, and line_width='3' failed with a TypeError at the first image drawn."""
    monkeypatch.chdir(tmp_path)
    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    with pytest.raises(ZooError, match=message):
        det(np.zeros((48, 64, 3), np.uint8), imgsz=64, **options)
    assert os.listdir() == []


def test_results_path_of_a_file_is_absolute_as_ultralytics(tmp_path, monkeypatch):
    """ultralytics' LoadImagesAndVideos gives a file's Results.path as str(Path(p).absolute()) (not resolved);
    in-memory images keep their names (image0.jpg, a PIL image's own filename). It was the path as typed. The
    files written and the command line's records keep their names and the path as typed."""
    monkeypatch.chdir(tmp_path)
    cwd = Path.cwd()
    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    image = np.random.default_rng(4).integers(0, 256, (48, 64, 3), np.uint8)
    Path("photos").mkdir()
    Image.fromarray(image).save("photos/cat.png")
    Path("link.png").symlink_to("photos/cat.png")
    with VideoWriter(Path("clip.mp4"), fps=5.0) as video:
        for _ in range(2):
            video.write(image)
    options = {"conf": 0.05, "imgsz": 64}
    r = det("photos/cat.png", **options, save_txt=True, project="runs", name="p")[0]
    assert r.path == str(cwd / "photos" / "cat.png")
    assert [p.name for p in Path(r.save_dir, "labels").iterdir()] == ["cat.txt"]
    assert [r.path for r in det("photos", **options)] == [str(cwd / "photos" / "cat.png")]
    assert det("link.png", **options)[0].path == str(cwd / "link.png")  # absolute, not resolved
    assert [r.path for r in det("clip.mp4", **options)] == [str(cwd / "clip.mp4")] * 2
    assert det(image, **options)[0].path == "image0.jpg"
    assert det(Image.open("photos/cat.png"), **options)[0].path == "photos/cat.png"
    assert main(["yolov8n", "photos/cat.png", "--weights", "synthetic:0", "--device", "cpu", "--imgsz", "64",
                 "--out", "out", "--jsonl", "d.jsonl"]) == 0
    assert [record["path"] for record in read_jsonl(Path("d.jsonl"))] == ["photos/cat.png"]


def test_video_frames_are_logged_from_1_as_ultralytics(tmp_path, monkeypatch, capsys):
    """ultralytics logs "video 1/1 (frame 1/4) ...": frames counted from 1 over the kept ones, of frames // vid_stride,
    the numbers its label files carry (clip_1.txt); ours printed the 0-based frame of all frames (frame 0/4)."""
    monkeypatch.chdir(tmp_path)
    with VideoWriter(Path("clip.mp4"), fps=5.0) as video:
        for i in range(4):
            video.write(np.full((48, 64, 3), 40 * i, np.uint8))
    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")

    def logged_frames(err: str) -> list[str]:
        return re.findall(r"^clip\.mp4 frame (\d+/\d+): ", err, re.MULTILINE)

    capsys.readouterr()
    det("clip.mp4", imgsz=64, verbose=True)
    assert logged_frames(capsys.readouterr().err) == ["1/4", "2/4", "3/4", "4/4"]
    r = det("clip.mp4", imgsz=64, conf=0.01, verbose=True, vid_stride=2, save_txt=True, project="runs", name="p")[0]
    assert logged_frames(capsys.readouterr().err) == ["1/2", "2/2"]
    assert sorted(p.name for p in Path(r.save_dir, "labels").iterdir()) == ["clip_1.txt", "clip_2.txt"]
    assert main(["yolov8n", "clip.mp4", "--weights", "synthetic:0", "--device", "cpu", "--imgsz", "64",
                 "--out", "out", "--vid-stride", "2"]) == 0
    assert logged_frames(capsys.readouterr().out) == ["1/2", "2/2"]  # tqdm.write's lines, beside the bar


def test_predict_into_an_input_folder_replaces_no_input(tmp_path):
    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        image = np.random.default_rng(4).integers(0, 256, (48, 64, 3), np.uint8)
        Image.fromarray(image).save(tmp_path / folder / "cat.jpg")
    kept = (tmp_path / "b" / "cat.jpg").read_bytes()
    # exist_ok=True into b/: a/cat.jpg's annotated image would be b/cat.jpg, the second input
    with pytest.raises(ZooError, match="is the input file"):
        det([tmp_path / "a" / "cat.jpg", tmp_path / "b" / "cat.jpg"], conf=0.05, imgsz=64, save=True, save_txt=True,
            project=tmp_path, name="b", exist_ok=True)
    assert (tmp_path / "b" / "cat.jpg").read_bytes() == kept and not (tmp_path / "b" / "labels").exists()


def test_a_release_file_name_is_its_model(tmp_path, monkeypatch):
    from zoo import registry

    monkeypatch.chdir(tmp_path)
    # YOLO("yolov8n-seg.pt") in ultralytics: the release of that name (fetched when not on disk)
    assert zoo.load("yolov8n-seg.pt", weights="synthetic:0", device="cpu").task == "segment"
    assert not registry.is_weights_file("yolo11s-pose.pt")
    assert registry.get_spec("yolo11s-pose.pt").name == "yolo11s-pose"
    # a file of that name on disk, or a path, is the user's checkpoint
    (tmp_path / "yolov8n.pt").write_bytes(b"not a checkpoint")
    assert registry.is_weights_file("yolov8n.pt") and registry.is_weights_file("weights/yolov8s.pt")
    with pytest.raises(ZooError, match="yolov8n.pt"):
        zoo.load("yolov8n.pt")


def test_from_zoo_import_yolo_as_ultralytics(tmp_path):
    from zoo import YOLO

    # YOLO("yolov8n-seg.pt") as ultralytics' (synthetic weights: no Hub here), a name, a checkpoint path
    assert YOLO("yolov8n-seg.pt", weights="synthetic:0", device="cpu").task == "segment"
    assert YOLO("yolo11n-pose", task="pose", weights="synthetic:0", device="cpu").task == "pose"
    detector = YOLO(synthetic_checkpoint("yolov8n", tmp_path / "best.safetensors"), task="detect", device="cpu")
    assert detector.task == "detect" and len(detector(np.zeros((64, 64, 3), np.uint8), imgsz=64)) == 1
    # where ultralytics would quietly use the checkpoint's task, or build something else: one error each
    with pytest.raises(ZooError, match="makes 'detect'"):
        YOLO("yolov8n", task="segment", weights="synthetic:0", device="cpu")
    with pytest.raises(ZooError, match="make detect, segment, pose"):
        YOLO("yolov8n", task="classify")
    with pytest.raises(ZooError, match=r"not a YOLO model: use zoo.load\('resnet18'\)"):
        YOLO("resnet18")
    resnet = synthetic_checkpoint("resnet18", tmp_path / "r18.safetensors")
    with pytest.raises(ZooError, match=r"is not a YOLO model \(the file holds a ResNet\): use zoo.load\("):
        YOLO(resnet, device="cpu")  # a ResNet's file is identified: it was 'cannot tell which model it holds'



def test_ultralytics_sam_class_names_segment_anythings_interface():
    from zoo import SAM

    with pytest.raises(ZooError, match=r"SAM\('mobile_sam.pt'\), ultralytics' SAM class, is not available in mlx-zoo: "
                                       r".*zoo.load\('mobilesam'\).predictor\(\)"):
        SAM("mobile_sam.pt")

def test_supervision_reads_mobilesam_records():
    import supervision as sv
    from zoo.models.mobilesam import amg

    # the generator's records from known masks (generate() makes its records with the same records())
    masks = np.zeros((2, 24, 32), bool)
    masks[0, 2:6, 3:9] = True  # small
    masks[1, 10:22, 5:30] = True  # large
    boxes = np.array([[3, 2, 8, 5], [5, 10, 29, 21]], np.float32)  # XYXY, inclusive as upstream's
    data = {"rles": amg.mask_to_rle(masks), "boxes": boxes, "iou_preds": np.array([0.9, 0.8], np.float32),
            "stability_score": np.array([0.97, 0.96], np.float32), "points": np.array([[5, 4], [17, 16]], np.float32),
            "crop_boxes": np.array([[0, 0, 32, 24]] * 2, np.float32)}
    generator = zoo.load("mobilesam", weights="synthetic:0", device="cpu").mask_generator()
    records = generator.records(data)
    detections = sv.Detections.from_sam(records)  # largest first
    assert np.array_equal(detections.mask, masks[::-1]) and detections.xyxy.tolist() == boxes[::-1].tolist()
    assert detections.area.tolist() == [300, 24]


# COCO's own category ids, from its instances_val2017.json (independent of zoo's mapping)
COCO_IDS = {"bird": 16, "remote": 75}


def coco_ap(ground_truth: dict, predictions) -> float:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO()
    gt.dataset = ground_truth
    gt.createIndex()
    evaluation = COCOeval(gt, gt.loadRes(predictions), "bbox")  # a path: the file as written
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return float(evaluation.stats[0])  # AP at IoU 0.50:0.95


def test_save_json_evaluates_with_pycocotools_as_written(tmp_path, capsys):
    from safetensors.numpy import save_file

    from zoo.run import main
    from zoo.weights.synthetic import read_manifest, synthetic_state_dict

    # COCO's 80 classes (no names stored); random weights but the DFL's arange(16), as in every real file,
    # so that boxes have x1 < x2 (the synthetic DFL's random bins turn them inside out)
    weights = synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n.json"), 0)
    weights["model.22.dfl.conv.weight"] = np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)
    save_file(weights, str(tmp_path / "coco80.safetensors"))
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name in ("000000397133.png", "street.png"):  # a numeric stem: its number; else a running id after it
        Image.fromarray(rng.integers(0, 256, (60, 80, 3), np.uint8)).save(folder / name)
    options = {"conf": 0.05, "imgsz": 64, "classes": ",".join(COCO_IDS), "max_det": 20}
    assert main(["yolov8n", str(folder), "--weights", str(tmp_path / "coco80.safetensors"), "--device", "cpu",
                 "--save-json", "--out", str(tmp_path / "out"),
                 *(f"--{k.replace('_', '-')}={v}" for k, v in options.items())]) == 0
    predictions = tmp_path / "out" / "predictions.json"
    # street.png's id is ours, which a ground truth of its own would not match (AP 0): the run says so
    assert "1 input(s) without a numeric file stem (street) get a running image_id" in capsys.readouterr().err
    # the ground truth these detections imply: the same boxes from the Python API, categories by name
    det = zoo.load("yolov8n", weights=tmp_path / "coco80.safetensors", device="cpu")
    image_ids = {"000000397133.png": 397133, "street.png": 397135}
    annotations = []
    for r in det.predict(str(folder), **options):
        for (x1, y1, x2, y2), c in zip(r.boxes.xyxy.tolist(), r.boxes.cls.int().tolist()):
            annotations.append({"id": len(annotations) + 1, "image_id": image_ids[Path(r.path).name],
                                "category_id": COCO_IDS[r.names[c]], "bbox": [x1, y1, x2 - x1, y2 - y1],
                                "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
    ground_truth = {"images": [{"id": i} for i in image_ids.values()], "annotations": annotations,
                    "categories": [{"id": i, "name": n} for n, i in COCO_IDS.items()]}
    assert annotations and len(annotations) == len(json.loads(predictions.read_text()))
    assert coco_ap(ground_truth, str(predictions)) == pytest.approx(1.0)
    # category_id = class + 1 (what a custom model's file holds) would put remote (class 65) on COCO's 66 (bed)
    shifted = [{**p, "category_id": yolov8_class(p["category_id"]) + 1} for p in json.loads(predictions.read_text())]
    assert coco_ap(ground_truth, shifted) == 0


def yolov8_class(coco_id: int) -> int:
    from zoo.models.yolov8 import COCO91_IDS

    return COCO91_IDS.index(coco_id)
