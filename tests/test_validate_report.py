"""The validator's HTML report: one self-contained file (no network), plots, the failing layer named."""
import base64
import re
from html.parser import HTMLParser

import numpy as np
import pytest

import zoo.validate
from zoo.cli.validate import main as validate_main
from zoo.validate import engine

pytest.importorskip("matplotlib")


class Page(HTMLParser):
    """Tags and the URLs they would fetch."""

    def __init__(self):
        super().__init__()
        self.tags, self.urls, self.images = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href") and value:
                (self.images if value.startswith("data:image/png;base64,") else self.urls).append(value)


def parsed(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


def test_failing_run_report_is_self_contained_and_names_the_layer(tmp_path, capsys):
    out = tmp_path / "report.html"
    argv = ["yolov8n", "--weights", "synthetic:0", "--imgsz", "64", "--inject", "model.6.m.0=noise",
            "--report", str(out)]
    assert validate_main(argv) == 1
    capsys.readouterr()
    text = out.read_text(encoding="utf-8")
    page = parsed(text)
    assert page.urls == [] and "<script" not in text and "@import" not in text  # nothing to fetch
    assert "<style>" in text
    # plot(s) of rel err, and a heatmap of the failing layer: real PNGs
    assert len(page.images) >= 2
    for image in page.images:
        assert base64.b64decode(image.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "first failing layer <b>model.6.m.0</b>" in text
    assert re.search(r'<tr class="first"[^>]*><td class="num">\d+</td><td>model\.6\.m\.0</td>', text)
    assert "Where the error sits" in text and "isolated: model.6.m.0" in text
    for field in ("MLX", "device", "TF32", "weights", "synthetic:0", "Coverage"):
        assert field in text
    # an existing report is not replaced without --overwrite
    assert validate_main(argv) == 2
    assert "--report" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == text


def test_passing_report_has_no_failure_and_every_dtype(tmp_path):
    report = zoo.validate.run("resnet18", weights="synthetic:0", size=32, dtype="all", mode="isolated")
    text = report.to_html()
    assert "PASS: every layer within its tolerance" in text and 'class="first"' not in text
    assert len(parsed(text).images) == 3  # one plot per dtype, no heatmap
    for dtype in ("float32", "float16", "bfloat16"):
        assert f"<h2>{dtype}</h2>" in text


def test_report_may_not_replace_an_input(tmp_path, capsys):
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"x")
    assert validate_main(["resnet18", "--weights", str(weights), "--size", "32", "--report", str(weights)]) == 2
    assert "error: --report" in capsys.readouterr().err
    assert weights.read_bytes() == b"x"


def test_error_map_locates_the_error():
    ref = np.zeros((1, 8, 200, 100))
    got = ref.copy()
    got[0, 3, 150:160, 10:20] = 1.0
    got[0, 5, 0, 0] = np.nan
    error = engine.error_map(ref, got)
    assert error.shape == (50, 50)  # at most 64 per side: 200 rows in blocks of 4, 100 columns in blocks of 2
    rows, cols = np.nonzero(error)
    assert set(rows) == {0, *range(37, 40)} and set(cols) == {0, *range(5, 10)}
    assert error[0, 0] == 1.0  # NaN counts as the largest error
    assert engine.error_map(np.zeros((2, 3)), np.zeros((3, 2))) is None
