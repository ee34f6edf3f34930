"""The seg/pose checkpoints of tests/fixtures/yolo_tasks, rebuilt exactly as ultralytics saved them
(make_fixtures.py): the zip's records in their order, data.pkl as written, each tensor the synthetic
recipe at the case's seed in the file's dtype, the small records as written."""
from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import FIXTURES
from zoo import instances
from zoo.weights.synthetic import synthetic_state_dict

HERE = FIXTURES / "yolo_tasks"
CASES = ("yolov8n-seg", "yolov8n-pose", "yolo11n-seg", "yolo11n-pose")
INPUT_SHAPE = (1, 3, 128, 160)  # make_fixtures.py's input and image
ORIG_SHAPE = (100, 150)


def rebuild(case: str, path: Path) -> Path:
    recipe = json.loads((HERE / f"{case}.json").read_text())
    manifest = {name: (tuple(shape), dtype) for name, (shape, dtype) in recipe["params"].items()}
    weights = synthetic_state_dict(manifest, recipe["seed"])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for record in recipe["records"]:
            if record.get("pickle"):
                data = (HERE / f"{case}.pkl").read_bytes()
            elif "tensor" in record:
                data = weights[record["tensor"]].astype(record["dtype"]).tobytes()
            else:
                data = base64.b64decode(record["base64"])
            archive.writestr(record["record"], data)
    return path


def expected(case: str) -> dict[str, np.ndarray]:
    return dict(np.load(HERE / f"{case}.npz"))


def whole_masks(result) -> np.ndarray:
    """A result's masks at its image's size, (N, H, W) bool, all at once by instances.scale_masks: what the
    tests compare the band-at-a-time masks (Masks.bands) and the drawings with."""
    data = np.asarray(result.masks.data, np.float32)
    if not len(data):
        return np.zeros((0, *result.orig_shape), bool)
    return instances.scale_masks(data, result.orig_shape) > 0.5


def fixture_input() -> np.ndarray:
    """(1, 3, H, W) float32 in [0, 1): the input upstream's outputs were computed on."""
    return np.random.default_rng(1234).uniform(0, 1, INPUT_SHAPE).astype(np.float32)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Each case's checkpoint as `yolo train` leaves best.pt (rebuild), once per test module."""
    folder = tmp_path_factory.mktemp("yolo_tasks")
    return {case: rebuild(case, folder / f"{case}.pt") for case in CASES}


@pytest.fixture(scope="module")
def models(checkpoints):
    import zoo

    return {case: zoo.load(str(path), device="cpu") for case, path in checkpoints.items()}


def as_jpeg(image: np.ndarray) -> np.ndarray:
    """``image`` as its JPEG reads back, written with Pillow's defaults as Results.save writes a .jpg: predict saves
    its annotated images as .jpg (ultralytics' names), so a saved one equals this of the plot, not the plot."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG")
    return np.asarray(Image.open(buffer))
