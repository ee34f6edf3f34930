"""Ray Data on a local 2-CPU cluster (``ray.init(num_cpus=2)``): the documented recipe gives the in-process
results for every one of 200 images with the defaults (2 actors on 2 CPUs: no deadlock), and the CLI's ``--ray``
runs write their files once and print only their own lines.

A longer run, left out of the README's test command (about a minute and a half of two idle cores, most of it Ray
starting): ``python -m pytest tests/cluster``. tests/test_ray.py calls the same classes in-process.
"""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import zoo
import zoo.ray
from test_ray import N_IMAGES, write_images


@pytest.fixture(scope="module")
def resnet():
    return zoo.load("resnet18", weights="synthetic:0")


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
