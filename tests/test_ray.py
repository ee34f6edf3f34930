"""zoo.ray: the task classes give the in-process results (no cluster). Ray Data on a local cluster:
tests/cluster/test_ray_cluster.py, a longer run of its own (``python -m pytest tests/cluster``)."""
import http.server
import os
import socket
import threading
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


def closed_port() -> int:
    """A port of this machine that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # its lines would mix with the command's
        pass


def test_cli_refuses_an_address_where_no_ray_head_answers(tmp_path, capsys, monkeypatch):
    """--ray-address (or RAY_ADDRESS) without a Ray head behind it: one line naming it and the fix, before Ray's client
    is given it (a closed port printed nothing for over 10 minutes, and SIGTERM did not end it)."""
    from conftest import cli_error

    monkeypatch.setattr(zoo.ray, "ADDRESS_TIMEOUT_S", 0.5)  # the silent port's wait
    images = write_images(tmp_path / "images", 1)[0].parent
    out = tmp_path / "out"
    command = ["resnet18", str(images), "--ray", "--weights", "synthetic:0", "--out", str(out)]
    closed = closed_port()
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), QuietHandler)  # an HTTP port, e.g. Ray's dashboard
    threading.Thread(target=web.serve_forever, daemon=True).start()
    with socket.socket() as silent, web:  # listening, never answering
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        problems = {f"127.0.0.1:{closed}": f"nothing listens on port {closed} of 127.0.0.1",
                    f"ray://127.0.0.1:{closed}": f"nothing listens on port {closed} of 127.0.0.1",
                    "no-such-host.invalid:6379": "the host no-such-host.invalid does not resolve",
                    f"127.0.0.1:{silent.getsockname()[1]}": "is not a Ray head",
                    f"127.0.0.1:{web.server_address[1]}": "is not a Ray head"}
        try:
            for address, problem in problems.items():
                line = cli_error([*command, "--ray-address", address], capsys)
                assert line.startswith(f"error: --ray-address {address}: ") and problem in line, line
                assert "`ray start --head`" in line and "--ray-address auto" in line
            monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed}")
            assert cli_error(command, capsys).startswith(f"error: RAY_ADDRESS 127.0.0.1:{closed}: nothing listens")
        finally:
            web.shutdown()
    assert not out.exists()


def test_an_s3_input_that_cannot_be_read_is_one_line_before_ray_starts(tmp_path, capsys, monkeypatch, s3_bucket):
    """A malformed or unreachable endpoint, a missing bucket or path: one line naming the URI and what to check,
    before the model or a cluster starts (a malformed endpoint was an internal error after Ray had started)."""
    from conftest import cli_error

    moto = os.environ["AWS_ENDPOINT_URL"]
    out = tmp_path / "out"
    command = ["yolov8n", "--ray", "--weights", "synthetic:0", "--out", str(out)]
    assert cli_error([*command, "s3://nobucket/photos/"], capsys).startswith(
        "error: s3://nobucket/photos/: nothing there (no such bucket, folder or file): check the URI")
    for endpoint, reason in (("http://127.0.0.1:a", "not a valid URI"), (f"http://127.0.0.1:{closed_port()}",
                                                                         "Could not connect")):
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        line = cli_error([*command, "s3://bucket/photos/"], capsys)
        assert line.startswith("error: cannot read s3://bucket/photos/ (") and reason in line, line
        assert line.endswith("check the storage's endpoint (AWS_ENDPOINT_URL for S3), the credentials "
                             "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and the bucket's name")
    assert not out.exists()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto)
    photo = write_images(tmp_path / "images", 1)[0]
    s3_bucket.put_object(Bucket="bucket", Key="photos/a.png", Body=photo.read_bytes())
    zoo.ray.check_uri("s3://bucket/photos/")  # there: no error
    with pytest.raises(zoo.ZooError, match="^s3://bucket/elsewhere/: nothing there"):
        zoo.ray.run("resnet18", "s3://bucket/elsewhere/", weights="synthetic:0")


def test_run_refuses_an_option_its_task_does_not_take_before_ray_starts(tmp_path):
    """zoo.ray.run(..., address=...) (ray.init's keyword) went to every actor as a model option and failed there, after
    a local cluster had started: one line now, naming the options there are, before Ray starts."""
    ray = pytest.importorskip("ray")
    images = write_images(tmp_path / "images", 1)[0].parent
    cluster = "; pick the cluster with ray\\.init"
    for model, message in (("yolov8n", r"^zoo\.ray\.run: Detector \(yolov8n\) takes no option address: its options "
                                        r"are dtype, device, batch, conf, iou, .*" + cluster),
                           ("resnet18", r"^zoo\.ray\.run: resnet18 takes no option address: its options are "
                                        r"num_classes, .* \(and dtype, device, batch\)" + cluster)):
        with pytest.raises(zoo.ZooError, match=message):
            zoo.ray.run(model, images, weights="synthetic:0", address="auto")
    with pytest.raises(zoo.ZooError, match=r"Segmenter \(mobilesam\) takes no option conf: its options are dtype, "
                                             r"device$"):
        zoo.ray.run("mobilesam", images, weights="synthetic:0", conf=0.5)
    assert not ray.is_initialized()
