"""LaMa's memory on the CPU (issue 35: peak RSS of a single-image command under 2 GB): the
full-resolution tail runs in bands with the whole map's values, and a pass the bound cannot hold is
refused before anything is allocated for it, in one line naming the fixes."""
from __future__ import annotations

import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from PIL import Image

import zoo
from conftest import PEAK_RSS_KB
from zoo.errors import ZooError
from zoo.models import lama


@pytest.fixture(scope="module")
def model():
    return zoo.load("lama", weights="synthetic:0", device="cpu")


def generator_input(model, h: int, w: int, seed: int = 1) -> mx.array:
    rng = np.random.default_rng(seed)
    image = mx.array(rng.random((1, h, w, 3), np.float32))
    mask = mx.array((rng.random((1, h, w, 1)) > 0.5).astype(np.float32))
    return model.generator_input(image, mask)


@pytest.mark.parametrize("h, w", [(48, 40), (16, 72)])
def test_banded_tail_equals_the_whole_map(model, monkeypatch, h, w):
    """Compared before the sigmoid, relative to the largest value: the synthetic weights' logits reach ~6e3, and
    a band's products have other row counts than the whole map's, which OpenBLAS may sum in another order (its
    Haswell kernels, on an AVX2 host: 4.5e-07 of the largest logit, 2.7e-04 after the sigmoid). A wrong halo row
    is off by the values themselves."""
    monkeypatch.setattr(lama.Sigmoid, "__call__", lambda self, x: x)
    x = generator_input(model, h, w)
    assert lama.band_rows(w) >= h
    whole = model.generator(x)  # the CPU's path, one band: the whole map
    monkeypatch.setattr(lama, "BAND_PIXELS", lama.PAD_MULTIPLE * w)  # bands of 8 rows
    assert -(-h // lama.band_rows(w)) == h // 8
    banded = model.generator(x)  # the CPU's path: banded
    assert banded.shape == whole.shape
    assert mx.abs(banded - whole).max().item() <= 4e-6 * mx.abs(whole).max().item()


def test_bands_lower_the_tails_peak(model, monkeypatch):
    """The full-resolution tail's temporaries (the upsampled maps, the 7x7 convolution's padded input;
    about 1.2 kB per pixel) live for one band: its peak is well below the whole map's. (The whole
    forward's peak is the front's now, as large with bands as without.)"""
    x = generator_input(model, 128, 64)
    layers = model.generator.model.children_in_order()
    merged = x
    for layer in layers[:24]:
        merged = layer(merged)

    def whole_tail(x):
        for layer in layers[24:]:
            x = layer(x)
        return x

    def peak(tail):
        mx.eval(tail(merged))  # any weights' forms made before measuring
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        mx.eval(tail(merged))
        return mx.get_peak_memory() - before

    monkeypatch.setattr(lama, "BAND_PIXELS", 16 * 64)  # 8 bands
    whole, banded = peak(whole_tail), peak(model.generator.tail_in_bands)
    assert banded < 0.4 * whole, (banded, whole)


def test_the_default_bound_is_the_process_on_the_cpu():
    # the default strategies' largest passes fit: a resize pass at 1280 (either way round) and a crop
    # at the crop trigger with its margins
    for size, image_pixels in [((1280, 1280), 1280 * 1280), ((960, 1280), 4000 * 3000), ((1280, 960), 4000 * 3000),
                               ((800, 800), 800 * 800), ((1056, 1056), 4000 * 3000)]:
        assert lama.pass_memory(size, mx.float32, image_pixels) <= lama.PROCESS_BOUND
        lama.check_memory(size, None, mx.float32, image_pixels)
    need = lama.pass_memory((960, 1280), mx.float32, 60_000_000)  # the image counts too
    assert need > lama.PROCESS_BOUND
    with pytest.raises(ZooError, match=f"over 1280x960 pixels needs about {need / 1e9:.3g} GB"):
        lama.check_memory((960, 1280), None, mx.float32, 60_000_000)
    with pytest.raises(ZooError, match=r"^one big-lama pass over 4000x3000 pixels needs about 6.\d+ GB of memory, "
                                       r"more than the 2 GB one command may use by default: use "
                                       r"hd_strategy='crop' \(small holes\) or hd_strategy='resize' with a smaller "
                                       r"resize_limit=N \(large holes\), or a larger max_megapixels=N"):
        lama.check_memory((3000, 4000), None, mx.float32)
    # a strip's tail cannot be banded along its rows: its whole map counts as one band
    assert lama.band_pixels(16, 100_000) == 16 * 100_000
    with pytest.raises(ZooError, match="over 100000x16 pixels needs about"):
        lama.check_memory((16, 100_000), None, mx.float16)
    lama.check_memory((3000, 4000), 13, mx.float32)  # the user's own bound replaces it
    with pytest.raises(ZooError, match="has 12 megapixels, more than max_megapixels=4.0"):
        lama.check_memory((3000, 4000), 4.0, mx.float32)


def run_child(tmp_path, *argv: str) -> tuple[int, list[str], int]:
    """``python -m zoo.run`` in a child process: (exit status, stderr lines, its own peak RSS in KB)."""
    child = (PEAK_RSS_KB + "import sys\nfrom zoo.run import main\n"
             "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
             "print(code, peak_rss_kb())")
    done = subprocess.run([sys.executable, "-c", child, *argv], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    code, peak_kb = done.stdout.split()[-2:]
    return int(code), [line for line in done.stderr.splitlines() if not line.startswith("WARNING")], int(peak_kb)


def test_adversarial_shapes_stay_under_the_bound(tmp_path):
    """A 1x100000 strip all hole and a 4000x3000 photo with a hole over most of it: refused before the
    weights are read (one error line naming the fix) or run, the child's peak under 2 GB either way."""
    Image.new("RGB", (100_000, 1)).save(tmp_path / "strip.png")
    Image.new("L", (100_000, 1), 255).save(tmp_path / "strip_mask.png")
    photo_mask = np.zeros((3000, 4000), np.uint8)
    photo_mask[100:2900, 100:3900] = 255
    Image.new("RGB", (4000, 3000)).save(tmp_path / "photo.png")
    Image.fromarray(photo_mask).save(tmp_path / "photo_mask.png")
    common = ["--weights", "synthetic:0", "--device", "cpu"]

    code, err, peak_kb = run_child(tmp_path, "lama", "photo.png", "--mask", "photo_mask.png", *common)
    assert code == 1 and len(err) == 1, err
    # the crop around that hole (its margins reach the borders) is the whole photo
    assert err[0].startswith("error: one big-lama pass over 4000x3000 pixels needs about")
    assert "use --hd-strategy crop (small holes) or --hd-strategy resize with a smaller --resize-limit N" in err[0]
    assert peak_kb * 1024 < lama.PROCESS_BOUND  # refused once the hole was read, before the pass

    code, err, _ = run_child(tmp_path, "lama", "strip.png", "--mask", "strip_mask.png", *common)
    assert code == 1 and "one big-lama pass over 100000x1 pixels" in err[-1], err
    code, err, peak_kb = run_child(tmp_path, "lama", "strip.png", "--mask", "strip_mask.png", "--hd-strategy",
                                   "resize", "--resize-limit", "256", "--out", "strip_out.png", *common)
    assert code == 0, err
    assert Image.open(tmp_path / "strip_out.png").size == (100_000, 1)
    assert peak_kb * 1024 < lama.PROCESS_BOUND


@pytest.mark.parametrize("side", [32, 512])
def test_the_estimate_is_above_the_commands_peak(tmp_path, side):
    """pass_memory, which decides whether a pass may run, is above what a command running that pass
    holds at its peak (peak RSS of a child): PROCESS_BYTES at a tiny image, the per-pixel costs at 512."""
    rng = np.random.default_rng(side)
    Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(tmp_path / "photo.png")
    hole = np.zeros((side, side), np.uint8)
    hole[side // 8: side - side // 8, side // 8: side - side // 8] = 255  # the middle 75%: one pass, whole image
    Image.fromarray(hole).save(tmp_path / "hole.png")
    code, err, peak_kb = run_child(tmp_path, "lama", "photo.png", "--mask", "hole.png", "--hd-strategy", "original",
                                   "--weights", "synthetic:0", "--device", "cpu", "--out", "out.png")
    assert code == 0, err
    estimate = lama.pass_memory((side, side), mx.float32, side * side)
    assert peak_kb * 1024 <= estimate, (peak_kb * 1024 / 1e6, estimate / 1e6)
