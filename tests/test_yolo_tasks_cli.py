"""YOLO segmentation and pose models on the command line as detection's: ultralytics' run folders
(runs/segment, runs/pose), videos with --vid-stride and --batch, streams of folders, globs and lists,
--save-txt/--save-conf/--save-crop, --save-json's COCO segmentation and keypoints, zoo.ray's rows, and
the registry's default Hub files. Checkpoints as ultralytics saves them (yolo_tasks_fixtures)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils  # the 'test' extra: decodes our COCO RLE

import zoo
import zoo.ray
from yolo_tasks_fixtures import checkpoints, fixture_input, models  # noqa: F401 (fixtures)
from zoo import registry
from zoo.errors import ZooError
from zoo.instances import coco_rle
from zoo.run import main
from zoo.sources import read_jsonl

FAST = ["--imgsz", "64", "--conf", "0.5", "--max-det", "3", "--device", "cpu"]
OPTIONS = {"imgsz": 64, "conf": 0.5, "max_det": 3}


def fixture_image(crop: int = 0) -> np.ndarray:
    """The fixture's input as a uint8 RGB image (128 x 160, less ``crop`` rows at the top and bottom)."""
    image = (fixture_input()[0].transpose(1, 2, 0) * 255).astype(np.uint8)
    return image[crop:128 - crop]


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    Image.fromarray(fixture_image()).save(folder / "000000000007.png")
    Image.fromarray(fixture_image(14)).save(folder / "wide.png")  # 100 x 160: letterboxed with padding
    return folder


def test_run_folders_are_ultralytics_per_task_and_resume_continues_the_tasks_latest(tmp_path, monkeypatch, images,
                                                                                   checkpoints, capsys):
    monkeypatch.chdir(tmp_path)
    seg, pose = str(checkpoints["yolov8n-seg"]), str(checkpoints["yolo11n-pose"])
    assert main([seg, "images", *FAST]) == 0 and main([seg, "images", *FAST]) == 0
    assert sorted(p.name for p in (tmp_path / "runs/segment").iterdir()) == ["predict", "predict2"]
    assert (tmp_path / "runs/segment/predict2/wide.png").is_file()
    # the family's name given a pose checkpoint is a pose run: the file's header says so before the run
    assert main(["yolov8", "images", "--weights", pose, *FAST]) == 0
    assert (tmp_path / "runs/pose/predict/wide.png").is_file()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["pose", "segment"]
    (tmp_path / "runs/segment/predict2/wide.png").unlink()
    capsys.readouterr()
    assert main([seg, "images", *FAST, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "1 image processed, 1 skipped" in err and "Results saved to runs/segment/predict2" in err
    assert (tmp_path / "runs/segment/predict2/wide.png").is_file() and not (tmp_path / "runs/segment/predict3").exists()
    assert main([pose, "images", *FAST, "--resume"]) == 0  # the pose run's folder, not segment's latest
    assert "Results saved to runs/pose/predict" in capsys.readouterr().err


def write_video(path, frames: int):
    from zoo.sources import VideoWriter

    with VideoWriter(path, fps=10.0) as video:
        for i in range(frames):
            video.write(np.roll(fixture_image(), 4 * i, axis=1))
    return path


def test_seg_video_with_stride_batch_labels_scores_and_crops(tmp_path, checkpoints, capsys):
    import av

    video = write_video(tmp_path / "clip.mp4", 8)
    out = tmp_path / "out"
    argv = [str(checkpoints["yolo11n-seg"]), str(video), *FAST, "--vid-stride", "2", "--batch", "3", "--save-txt",
            "--save-conf", "--save-crop", "--jsonl", str(tmp_path / "r.jsonl"), "--out", str(out)]
    assert main(argv) == 0
    with av.open(str(out / "clip.mp4")) as container:
        assert sum(1 for _ in container.decode(container.streams.video[0])) == 4
    records = read_jsonl(tmp_path / "r.jsonl")
    assert [r["frame"] for r in records] == [1, 3, 5, 7]
    found = 0
    for k, r in enumerate(records, 1):  # ultralytics' label names: the kept frames counted from 1
        label = out / "labels" / f"clip_{k}.txt"
        rows = [[float(v) for v in line.split()] for line in label.read_text().splitlines()] if label.exists() else []
        assert len(rows) == len(r["detections"])
        for row, detection in zip(rows, r["detections"]):
            # class, the mask's polygon (x y pairs, 0-1), the score
            assert int(row[0]) == detection["class"] and len(row) % 2 == 0 and len(row) >= 8
            assert 0 <= min(row[1:-1]) and max(row[1:-1]) <= 1 and row[-1] == pytest.approx(detection["confidence"], abs=1e-4)
            assert len(detection["segments"]["x"]) == (len(row) - 2) // 2
        found += len(rows)
    assert found > 0 and len(list((out / "crops").rglob("*.jpg"))) == found
    assert "4 images processed" in capsys.readouterr().err


@pytest.mark.parametrize("case, values", [("yolov8n-pose", 17 * 3), ("yolo11n-pose", 5 * 2)])
def test_pose_labels_from_a_folder_a_glob_and_a_list_agree(tmp_path, images, checkpoints, case, values):
    listed = tmp_path / "list.txt"
    listed.write_text("\n".join(str(p) for p in sorted(images.iterdir())))
    labels = {}
    for name, given in (("folder", str(images)), ("glob", str(images / "*.png")), ("list", str(listed))):
        out = tmp_path / name
        assert main([str(checkpoints[case]), given, *FAST, "--batch", "2", "--save-txt", "--save-conf",
                     "--out", str(out)]) == 0
        labels[name] = {p.name: p.read_text() for p in (out / "labels").iterdir()}
    assert labels["folder"] == labels["glob"] == labels["list"]
    assert sorted(labels["folder"]) == ["000000000007.txt", "wide.txt"]
    rows = [line.split() for text in labels["folder"].values() for line in text.splitlines()]
    assert rows and all(len(row) == 1 + 4 + values + 1 for row in rows)  # class, box, keypoints, score


def test_save_json_holds_coco_segmentation_and_keypoints(tmp_path, images, checkpoints, models):
    """ultralytics' save_json records: segmentation models' masks as COCO RLE at the image's size (as
    pycocotools decodes them), pose models' keypoints [x, y, v, ...] in pixels; each the run's own result."""
    wide = fixture_image(14)[:, :, ::-1].copy()  # BGR, as predict takes arrays
    for case, extra in (("yolov8n-seg", []), ("yolov8n-seg", ["--retina-masks"]), ("yolov8n-pose", [])):
        out = tmp_path / f"{case}{len(extra)}"
        assert main([str(checkpoints[case]), str(images), *FAST, "--save-json", *extra, "--out", str(out)]) == 0
        records = [r for r in json.loads((out / "predictions.json").read_text()) if r["file_name"] == "wide.png"]
        result = models[case].predict(wide, retina_masks=bool(extra), **OPTIONS)[0]
        assert len(records) == len(result) > 0
        assert [r["score"] for r in records] == [round(s, 5) for s in result.boxes.conf.tolist()]
        if result.masks is not None:
            masks = np.stack(list(result.masks.image_masks()))
            assert masks.shape[1:] == (100, 160) and masks.any((1, 2)).all()
            for record, mask in zip(records, masks):
                assert record["segmentation"]["size"] == [100, 160]
                decoded = mask_utils.decode({**record["segmentation"], "counts": record["segmentation"]["counts"].encode()})
                assert np.array_equal(decoded.astype(bool), mask)
        else:
            points = np.array([r["keypoints"] for r in records]).reshape(len(records), 17, 3)
            assert np.abs(points - result.keypoints.data).max() <= 5e-4  # rounded to 3 decimals


def test_coco_rle_is_pycocotools_encoding():
    rng = np.random.default_rng(0)
    masks = [rng.random((37, 53)) < p for p in (0, 0.03, 0.5, 0.97, 1)]
    block = np.zeros((480, 640), bool)
    block[100:400, 50:600] = True  # runs longer than one 5-bit group, negative differences
    for mask in [*masks, block, np.ones((1, 1), bool)]:
        expected = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
        assert coco_rle(mask) == {"size": list(expected["size"]), "counts": expected["counts"].decode()}


def test_ray_rows_carry_masks_and_keypoints_of_one_at_a_time_results(tmp_path, images, checkpoints, models):
    paths = np.array([str(p) for p in sorted(images.iterdir())])
    seg = zoo.ray.InstanceSegmenter("yolov8", weights=str(checkpoints["yolo11n-seg"]), **OPTIONS)({"path": paths})
    pose = zoo.ray.PoseEstimator("yolov8", weights=str(checkpoints["yolov8n-pose"]), **OPTIONS)({"path": paths})
    assert list(seg["error"]) == list(pose["error"]) == ["", ""]
    for i, path in enumerate(paths):
        result = models["yolo11n-seg"].predict(path, **OPTIONS)[0]
        assert seg["boxes"][i] == result.boxes.xyxy.tolist() and seg["conf"][i] == result.boxes.conf.tolist()
        decoded = [mask_utils.decode({**rle, "counts": rle["counts"].encode()}) for rle in seg["masks"][i]]
        assert len(decoded) == len(result) > 0
        assert np.array_equal(np.array(decoded, bool), np.stack(list(result.masks.image_masks())))
        result = models["yolov8n-pose"].predict(path, **OPTIONS)[0]
        assert pose["boxes"][i] == result.boxes.xyxy.tolist() and pose["cls"][i] == result.boxes.cls.astype(int).tolist()
        assert pose["keypoints"][i] == result.keypoints.data.tolist() and len(pose["keypoints"][i]) > 0
    # images without detections (masks None, as ultralytics'): rows of no boxes and no masks, not an error
    none = zoo.ray.InstanceSegmenter("yolov8", weights=str(checkpoints["yolo11n-seg"]), **{**OPTIONS, "conf": 0.99})
    rows = none({"path": paths})
    assert list(rows["error"]) == ["", ""] and list(rows["masks"]) == list(rows["boxes"]) == [[], []]
    with pytest.raises(ZooError, match="is a instance-segment model: use zoo.ray.InstanceSegmenter"):
        zoo.ray.Detector("yolov8", weights=str(checkpoints["yolov8n-seg"]))


YOLO_NAMES = [f"{generation}{scale}{suffix}" for generation in ("yolov8", "yolo11") for suffix in ("", "-seg", "-pose")
              for scale in "nsmlx"]


def test_registry_names_take_ultralytics_hub_files(monkeypatch):
    """Each name's default weights: the file of that name (ultralytics' asset names) in Ultralytics' Hub
    repo of its generation, asked for by zoo.load (the download itself is not made here)."""
    from huggingface_hub import hf_hub_url

    from zoo.weights import hub

    asked = []

    def download(repo_id, filename, licence=None):
        asked.append((repo_id, filename))
        raise ZooError("offline")

    monkeypatch.setattr(hub, "download", download)
    monkeypatch.delenv(registry.WEIGHTS_VARIABLE, raising=False)
    for name in YOLO_NAMES:
        spec = registry.get_spec(name)
        repo = {"yolov8": "Ultralytics/YOLOv8", "yolo11": "Ultralytics/YOLO11"}[name[:6]]
        task = {"": "detect", "-seg": "instance-segment", "-pose": "pose"}[name[7:]]
        assert (spec.hub_repo, spec.hub_file, spec.task) == (repo, f"{name}.pt", task)
        assert hf_hub_url(spec.hub_repo, spec.hub_file) == f"https://huggingface.co/{repo}/resolve/main/{name}.pt"
    for name in ("yolo11x", "yolov8s-seg", "yolo11n-pose"):
        with pytest.raises(ZooError, match="offline"):
            zoo.load(name)
    assert asked == [("Ultralytics/YOLO11", "yolo11x.pt"), ("Ultralytics/YOLOv8", "yolov8s-seg.pt"),
                     ("Ultralytics/YOLO11", "yolo11n-pose.pt")]


def test_pose_classes_are_the_models_not_cocos(tmp_path, images, capsys):
    """--classes with synthetic (or default) weights is checked early against COCO's 80 names for
    detection and segmentation; a pose model's one class is its own (class0 here, person in the official files)."""
    argv = ["yolo11n-pose", str(images), "--weights", "synthetic", *FAST, "--out"]
    assert main([*argv, str(tmp_path / "a"), "--classes", "class0"]) == 0
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "b"), "--classes", "car"]) == 2
    assert "error: unknown classes 'car': use names or ids 0-0 of class0" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("case", ["yolo11n-seg", "yolov8n-pose"])
def test_validate_takes_a_checkpoint_as_the_model(case, checkpoints, tmp_path, capsys):
    """python -m zoo.validate best.pt, as zoo.run: the file names its model (task and kpt_shape included)."""
    from zoo.cli.validate import main as validate_main

    path = tmp_path / "best.pt"
    path.write_bytes(checkpoints[case].read_bytes())
    assert validate_main([str(path), "--device", "cpu", "--imgsz", "64", "--mode", "end-to-end"]) == 0
    assert "end-to-end: PASS" in capsys.readouterr().out
    assert validate_main([str(path), "--weights", "synthetic"]) == 2
    assert capsys.readouterr().err.strip() == "error: " + f"{path} is already the checkpoint: drop --weights synthetic"
