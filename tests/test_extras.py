"""A missing optional dependency is one ``error:`` line naming the mlx-zoo extra that installs it, said before
any work: every command here names ``zero.pt`` (an empty file) as weights, which would fail if it were read."""
from __future__ import annotations

import sys

import pytest

import zoo
from conftest import cli_error, cli_inputs
from zoo.errors import ZooError
from zoo.models.mobilesam import amg
from zoo.models.mobilesam.automatic_mask_generator import SamAutomaticMaskGenerator


def block(monkeypatch, *modules: str) -> None:
    for name in modules:  # None in sys.modules: `import name` raises ImportError
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(cli_inputs(tmp_path))
    (tmp_path / "clip.mp4").write_bytes(b"not read: PyAV is checked first")
    return tmp_path


@pytest.mark.parametrize("missing, argv, said", [
    (["cv2"], ["annotate", "imgs/", "--det-weights", "zero.pt", "--sam-weights", "zero.pt"],
     "annotate (its label polygons are OpenCV's contours) needs OpenCV"),
    (["cv2"], ["mobilesam", "ok.jpg", "--everything", "--min-mask-region-area", "100", "--weights", "zero.pt"],
     "--min-mask-region-area N above 0 needs OpenCV"),
    # a segmentation model's label lines and records hold its mask polygons: every image failed on them, one by one
    (["cv2"], ["yolov8n-seg", "imgs/", "--save-txt", "--out", "o", "--weights", "zero.pt"],
     "--save-txt of a segmentation model (its mask polygons) needs OpenCV"),
    (["cv2"], ["yolov8n-seg", "imgs/", "--jsonl", "r.jsonl", "--out", "o", "--weights", "zero.pt"],
     "--jsonl of a segmentation model (its mask polygons) needs OpenCV"),
    (["ray", "ray.data"], ["resnet18", "imgs/", "--ray", "--weights", "zero.pt"], "Ray Data needs Ray"),
    (["av"], ["yolov8n", "clip.mp4", "--weights", "zero.pt"], "reading and writing videos needs PyAV"),
])
def test_cli_names_the_extra_before_any_work(missing, argv, said, inputs, monkeypatch, capsys):
    block(monkeypatch, *missing)
    extra = {"cv2": "sam", "ray": "ray", "av": "video"}[missing[0]]
    assert cli_error(argv, capsys) == f'error: {said}: pip install "mlx-zoo[{extra}]"'


def test_validate_report_names_the_extra_before_any_work(inputs, monkeypatch, capsys):
    from zoo.cli.validate import main

    block(monkeypatch, "matplotlib")
    assert main(["resnet18", "--weights", "zero.pt", "--report", "r.html"]) == 1
    assert capsys.readouterr().err.strip() == 'error: the HTML report needs matplotlib: pip install "mlx-zoo[validate]"'


def test_api_names_the_extra_in_its_own_words(inputs, monkeypatch):
    block(monkeypatch, "cv2")
    with pytest.raises(ZooError, match=r'label polygons .* needs OpenCV: pip install "mlx-zoo\[sam\]"'):
        zoo.auto_annotate("imgs/", det_weights="zero.pt", sam_weights="zero.pt")
    with pytest.raises(ZooError, match=r"min_mask_region_area=N above 0 needs OpenCV"):
        SamAutomaticMaskGenerator(None, min_mask_region_area=10)


def test_coco_rle_needs_no_pycocotools(monkeypatch):
    """Segment everything's COCO RLE is zoo's own encoding (zoo.instances.rle_string): the records come
    out with pycocotools missing, and pycocotools (here, after) decodes them to the masks."""
    import numpy as np

    block(monkeypatch, "pycocotools", "pycocotools.mask")
    masks = np.zeros((2, 6, 5), bool)
    masks[0, 1:4, 2:] = True
    masks[1, 0] = True
    encoded = [amg.coco_encode_rle(rle) for rle in amg.mask_to_rle(masks)]
    monkeypatch.undo()
    from pycocotools import mask as mask_utils

    assert all(isinstance(e["counts"], str) for e in encoded)
    np.testing.assert_array_equal(np.moveaxis(mask_utils.decode(encoded), -1, 0), masks)


def test_to_df_names_the_pandas_extra(monkeypatch):
    """to_df() without pandas said 'pip install pandas', the one optional dependency without an extra of its own."""
    import numpy as np

    from zoo.results import Results

    block(monkeypatch, "pandas")
    result = Results(np.zeros((4, 4, 3), np.uint8), "a.jpg", {0: "a"}, np.zeros((0, 6), np.float32))
    with pytest.raises(ZooError, match=r'^to_df\(\) needs pandas: pip install "mlx-zoo\[pandas\]"$'):
        result.to_df()
