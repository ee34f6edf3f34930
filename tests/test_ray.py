"""zoo.ray: the task classes give the in-process results; Ray Data on a local 2-CPU cluster gives them
for every one of 200 images, with the documented defaults (2 actors on 2 CPUs: no deadlock).

The cluster tests are marked ``ray`` (CI: ``pytest -m ray tests/test_ray.py``, under 2 minutes on 2 cores).
"""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils  # the 'test' extra: decodes our COCO RLE

import zoo
import zoo.ray

N_IMAGES = 200
SIZES = ((32, 32), (48, 32))  # two sizes: read_images then hands over some batches as an object column


def write_images(folder: Path, n: int, seed: int = 0) -> list[Path]:
    folder.mkdir()
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        h, w = SIZES[i % len(SIZES)]
        paths.append(folder / f"{i:03d}.png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def resnet():
    return zoo.load("resnet18", weights="synthetic:0")


def classifier_rows(out: dict) -> dict[str, tuple]:
    return {str(p): (int(label), str(name), float(prob), str(error))
            for p, label, name, prob, error in zip(out["path"], out["label"], out["name"], out["prob"], out["error"])}


def test_classifier_takes_read_images_columns_and_paths(tmp_path, resnet):
    paths = write_images(tmp_path / "images", 4)
    bad = tmp_path / "images" / "bad.png"
    bad.write_bytes(b"not a png")
    expected = {str(p): resnet.predict(str(p), top_k=1)[0] for p in paths}
    classifier = zoo.ray.Classifier("resnet18", weights="synthetic:0")
    same_size = [np.asarray(Image.open(p)) for p in paths[::2]]
    batches = [
        {"image": np.stack(same_size), "path": np.array([str(p) for p in paths[::2]])},  # one size: (N, H, W, 3)
        {"image": zoo.ray.as_column([np.asarray(Image.open(p)) for p in paths]),  # sizes differ: objects
         "path": np.array([str(p) for p in paths])},
        {"path": np.array([str(p) for p in [*paths, bad]])},  # decoded in the actor
    ]
    for batch in batches:
        rows = classifier_rows(classifier(batch))
        for path in batch["path"][:len(paths)]:
            assert rows[str(path)] == (*expected[str(path)], "")
    rows = classifier_rows(classifier(batches[-1]))
    assert rows[str(bad)][0] == -1 and "cannot read" in rows[str(bad)][3]
    with pytest.raises(zoo.ZooError, match="is a classify model"):
        zoo.ray.Detector("resnet18", weights="synthetic:0")


def test_classifier_takes_pandas_and_pyarrow_batches(tmp_path, resnet):
    """map_batches(..., batch_format="pandas" or "pyarrow") hands the class a DataFrame or a Table: the same rows
    as a numpy batch (it raised AttributeError/TypeError inside the actor)."""
    import pandas
    import pyarrow

    paths = write_images(tmp_path / "images", 3)
    images = zoo.ray.as_column([np.asarray(Image.open(p)) for p in paths])  # two sizes: an object column
    classifier = zoo.ray.Classifier("resnet18", weights="synthetic:0")
    expected = classifier_rows(classifier({"image": images, "path": np.array([str(p) for p in paths])}))
    frame = pandas.DataFrame({"image": list(images), "path": [str(p) for p in paths]})
    table = pyarrow.table({"path": [str(p) for p in paths]})  # the actor decodes the paths
    for batch in (frame, table):
        assert classifier_rows(classifier(batch)) == expected
    with pytest.raises(zoo.ZooError, match="batch_format='numpy'"):
        classifier([{"path": str(paths[0])}])


def test_detector_rows_are_one_at_a_time_results(tmp_path):
    model = zoo.load("yolov8n", weights="synthetic:0")
    paths = [tmp_path / f"{i}.png" for i in range(3)]
    rng = np.random.default_rng(1)
    for path, (h, w) in zip(paths, ((64, 96), (64, 96), (80, 64))):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
    options = {"conf": 0.001, "imgsz": 64, "max_det": 5}
    out = zoo.ray.Detector("yolov8n", weights="synthetic:0", **options)({"path": np.array([str(p) for p in paths])})
    assert list(out["error"]) == ["", "", ""]
    for i, path in enumerate(paths):
        result = model.predict(str(path), **options)[0]
        assert len(result.boxes) > 0
        assert out["boxes"][i] == result.boxes.xyxy.tolist()
        assert out["conf"][i] == result.boxes.conf.tolist()
        assert out["cls"][i] == result.boxes.cls.astype(int).tolist()
        assert out["names"][i] == [result.names[c] for c in out["cls"][i]]


def test_segmenter_masks_are_coco_rle_of_the_predictor_masks():
    model = zoo.load("mobilesam", weights="synthetic:0")
    image = np.random.default_rng(2).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    boxes = np.array([[4, 4, 40, 30], [10, 12, 60, 44]], np.float32)
    out = zoo.ray.Segmenter(weights="synthetic:0")({"image": image[None], "boxes": boxes[None]})
    predictor = model.predictor()
    predictor.set_image(image)
    masks, scores, _ = predictor.predict(boxes=boxes, multimask_output=False)
    assert out["error"][0] == ""
    assert out["scores"][0] == scores[:, 0].tolist()
    for rle, mask in zip(out["masks"][0], masks[:, 0]):
        assert rle["size"] == [48, 64]
        assert np.array_equal(mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()}), mask)


def test_inpainter_fills_the_mask_column():
    model = zoo.load("lama", weights="synthetic:0")
    image = np.random.default_rng(3).integers(0, 256, (2, 40, 48, 3), dtype=np.uint8)
    mask = np.zeros((2, 40, 48), np.uint8)
    mask[:, 10:20, 12:30] = 255
    out = zoo.ray.Inpainter(weights="synthetic:0")({"image": image, "mask": mask})
    assert list(out["error"]) == ["", ""]
    for i in range(2):
        assert np.array_equal(out["image"][i], model.inpaint(image[i], mask[i]))


def test_cli_refuses_before_starting_ray(tmp_path, capsys):
    from conftest import cli_error

    images = write_images(tmp_path / "images", 1)[0].parent
    out = tmp_path / "out"
    assert "is not a file" in cli_error(["resnet18", str(images), "--ray", "--weights", "missing.pt",
                                         "--out", str(out)], capsys)
    assert "runs on Ray through zoo.ray.Segmenter" in cli_error(["mobilesam", str(images), "--ray"], capsys)
    assert "HF_HUB_OFFLINE" in cli_error(["resnet18", str(images), "--ray", "--out", str(out)], capsys)
    assert "--conf 2.0 is outside [0, 1]" in cli_error(["yolov8n", str(images), "--ray", "--conf", "2", "--weights",
                                                        "synthetic:0", "--out", str(out)], capsys)
    assert not out.exists()


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, resnet):
    """N_IMAGES images and each one's in-process top-1, one image at a time, with the BLAS threads
    an actor sets (OpenBLAS splits a GEMM by its threads, and on an AMD EPYC the rows at the
    splits came out other in their last bits)."""
    from zoo import blas

    paths = write_images(tmp_path_factory.mktemp("ray") / "images", N_IMAGES)
    threads = blas.info().get("threads")
    blas.set_threads(max(1, round(zoo.ray.ACTOR_CPUS)))
    try:
        return paths[0].parent, {str(p): (*resnet.predict(str(p), top_k=1)[0], "") for p in paths}
    finally:
        if threads:
            blas.set_threads(threads)


@pytest.mark.ray
def test_ray_data_gives_in_process_results_for_every_image(cluster, folder):
    """The documented recipe: read tasks on READ_CPUS beside two actors on ACTOR_CPUS, on 2 CPUs."""
    images, expected = folder
    assert cluster.cluster_resources()["CPU"] == 2
    dataset = cluster.data.read_images(str(images), mode="RGB", include_paths=True, num_cpus=zoo.ray.READ_CPUS)
    rows = dataset.map_batches(zoo.ray.Classifier, fn_constructor_kwargs={"model": "resnet18", "weights": "synthetic:0"},
                               batch_size=zoo.ray.BATCH_SIZE, num_cpus=zoo.ray.ACTOR_CPUS,
                               compute=cluster.data.ActorPoolStrategy(size=2)).take_all()
    assert len(rows) == N_IMAGES
    assert {r["path"]: (r["label"], r["name"], r["prob"], r["error"]) for r in rows} == expected


@pytest.mark.ray
def test_run_reads_relative_paths_from_the_drivers_folder(cluster, folder, monkeypatch):
    """The actors' working folder is the cluster's (the repo here), not the driver's: zoo.ray.run makes
    the paths absolute where the driver sees them (a weights file too)."""
    images, expected = folder
    monkeypatch.chdir(images.parent)
    chosen = sorted(expected)[:4]
    relative = [str(Path(p).relative_to(images.parent)) for p in chosen]
    rows = zoo.ray.run("resnet18", relative, weights="synthetic:0", actors=1).take_all()
    assert {r["path"]: (r["label"], r["name"], r["prob"], r["error"]) for r in rows} == {p: expected[p] for p in chosen}


def exclusive_lock_holder(folder: Path) -> str | None:
    """None when ``folder`` can be locked as a run's --out now, else the holder as lock_holder says it."""
    import fcntl
    import os

    from zoo.files import lock_holder, open_folder

    fd = open_folder(folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return lock_holder(fd)
    finally:
        os.close(fd)  # its lock, if taken, with it


@pytest.mark.ray
def test_cli_run_defaults_write_parquet_and_jsonl_once(cluster, folder, tmp_path, capsys, monkeypatch):
    """zoo.ray.run's defaults (paths decoded in the actors, one actor per CPU) through the CLI; a bad
    image is one warning and one error row, and the exit code is 1; so is a list's entry that is not there (it
    ended the run: the list's paths were opened again as inputs of their own, after Ray started). While the rows
    come back the run holds its --out locked, as a local run does (the actors write nothing; this process writes
    the file), and releases it when it ends."""
    import os

    import pyarrow.parquet as pq

    from zoo.cli import ray_run
    from zoo.run import main

    holders = []
    tables = ray_run.tables

    def tables_seen_locked(*args):
        for table in tables(*args):
            holders.append(exclusive_lock_holder(out))
            yield table

    monkeypatch.setattr(ray_run, "tables", tables_seen_locked)

    images, expected = folder
    chosen = sorted(expected)[:12]
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 truncated")
    subset = tmp_path / "list.txt"
    missing = tmp_path / "missing.jpg"
    subset.write_text("\n".join([*chosen, str(bad), str(missing)]))
    out = tmp_path / "results"
    argv = ["resnet18", str(subset), "--ray", "--weights", "synthetic:0", "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"warning: skipped {bad}: cannot read" in err and f"warning: skipped {missing}: image not found" in err
    assert holders and set(holders) == {f" (pid {os.getpid()})"} and exclusive_lock_holder(out) is None
    rows = {r["path"]: (r["label"], r["name"], r["prob"], r["error"])
            for r in pq.read_table(out / "predictions.parquet").to_pylist()}
    label, name, _, error = rows.pop(str(bad))
    assert (label, name) == (-1, "") and error.startswith("cannot read")
    label, name, _, missing_error = rows.pop(str(missing))
    assert (label, name, missing_error) == (-1, "", f"image not found: {missing}")
    assert rows == {p: expected[p] for p in chosen}
    before = (out / "predictions.parquet").read_bytes()
    assert main(argv) == 2  # an existing file is kept without --overwrite
    assert "exists: pass --overwrite" in capsys.readouterr().err
    assert (out / "predictions.parquet").read_bytes() == before
    assert main([*argv, "--format", "jsonl"]) == 1
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert records.count({"path": str(bad), "error": error}) == 1
    assert {r["path"]: (r["label"], r["name"], r["prob"], "") for r in records if "error" not in r} == \
        {p: expected[p] for p in chosen}
    assert sorted(p.name for p in out.iterdir()) == ["predictions.jsonl", "predictions.parquet"]


@pytest.mark.ray
def test_a_successful_cli_run_prints_only_its_own_lines(tmp_path):
    """A cluster of the CLI's own (a process of its own: Ray prints its noise as the process ends): no Ray
    start-up line, progress bar or raylet log (the actors ended at exit reported as SYSTEM_ERROR), only ours."""
    import os
    import subprocess
    import sys

    write_images(tmp_path / "photos", 3)
    env = {**os.environ, "ZOO_WEIGHTS": "synthetic"}
    done = subprocess.run([sys.executable, "-m", "zoo.run", "resnet18", "photos/", "--ray", "--out", "out"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "WARNING: ZOO_WEIGHTS=synthetic: resnet18 runs on synthetic weights (random values: outputs are meaningless) "
        "in place of timm/resnet18.tv_in1k/model.safetensors",
        "3 images; results in out/predictions.parquet"]


@pytest.mark.ray
def test_cli_runs_seg_and_pose_checkpoints_into_their_task_folders(cluster, tmp_path, monkeypatch, capsys):
    """A segmentation checkpoint's rows carry masks (COCO RLE structs in the Parquet file), a pose
    checkpoint's keypoints (the family's name given the file: its task); each in ultralytics' task folder."""
    import pyarrow.parquet as pq

    from yolo_tasks_fixtures import fixture_input, rebuild
    from zoo.run import main

    monkeypatch.chdir(tmp_path)
    seg, pose = rebuild("yolov8n-seg", tmp_path / "seg.pt"), rebuild("yolo11n-pose", tmp_path / "pose.pt")
    images = tmp_path / "images"  # absolute: the actors run where the cluster started, not here
    images.mkdir()
    Image.fromarray((fixture_input()[0].transpose(1, 2, 0) * 255).astype(np.uint8)).save(images / "a.png")
    options = ["--imgsz", "64", "--conf", "0.5", "--max-det", "3"]
    assert main([str(seg), str(images), "--ray", *options]) == 0
    table = pq.read_table("runs/segment/ray/predictions.parquet")
    assert str(table.schema.field("masks").type) == "list<element: struct<size: list<element: int64>, counts: string>>"
    row = table.to_pylist()[0]
    assert row["error"] == "" and len(row["masks"]) == len(row["boxes"]) > 0
    assert all(rle["size"] == [128, 160] and rle["counts"] for rle in row["masks"])
    assert main(["yolov8", str(images), "--weights", str(pose), "--ray", "--format", "jsonl", *options]) == 0
    record = json.loads(Path("runs/pose/ray/predictions.jsonl").read_text())
    assert len(record["keypoints"]) == len(record["boxes"]) > 0
    assert all(len(points) == 5 and all(len(p) == 2 for p in points) for points in record["keypoints"])
    assert "1 images; results in runs/pose/ray/predictions.jsonl" in capsys.readouterr().err
