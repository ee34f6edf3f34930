"""LaMa inpainting: the upstream predict pipeline, HD strategies, `zoo.run lama`, and bad input."""
import json
import re

import mlx.core as mx
import numpy as np
import pytest
from PIL import Image

import zoo
from zoo.errors import ZooError
from zoo.models.lama import check_memory, crop_boxes, pass_sizes, plan_passes
from zoo.run import main
from zoo.validate.reference import lama as reference
from zoo.weights.synthetic import read_manifest, synthetic_state_dict
from conftest import MANIFESTS, cli_error

H, W = 45, 61  # not multiples of 8


@pytest.fixture(scope="module")
def model():
    return zoo.load("lama", weights="synthetic:0", device="cpu")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A photo with two holes: one of grey level 255, one of grey level 7."""
    folder = tmp_path_factory.mktemp("lama")
    image = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    mask = np.zeros((H, W), np.uint8)
    mask[5:14, 6:20] = 255
    mask[30:40, 48:57] = 7
    Image.fromarray(image).save(folder / "photo.png")
    Image.fromarray(mask).save(folder / "mask.png")
    return folder, image, mask > 0


def upstream_pipeline(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """bin/predict.py in numpy: [0, 1] floats, symmetric pad to 8 at bottom/right, mask > 0
    after padding, the generator (float64 reference), inpainted, crop, clip(x*255) truncated."""
    h, w = mask.shape
    pad = ((0, -h % 8), (0, -w % 8))
    img = np.pad(image.transpose(2, 0, 1).astype(np.float32) / 255, ((0, 0), *pad), mode="symmetric")[None]
    m = (np.pad(mask.astype(np.float32)[None] / 255, ((0, 0), *pad), mode="symmetric") > 0)[None].astype(np.float32)
    sd = synthetic_state_dict(read_manifest(MANIFESTS / "lama.json"), 0)
    predicted = reference.forward(sd, img.astype(np.float64), m.astype(np.float64))
    out = reference.inpainted(img, m, predicted.astype(np.float32))[0].transpose(1, 2, 0)[:h, :w]
    return np.clip(out * 255, 0, 255).astype(np.uint8)


def test_inpaint_is_the_upstream_predict_pipeline(model):
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (21, 30, 3), dtype=np.uint8)
    mask = np.zeros((21, 30), np.uint8)
    mask[4:12, 10:27] = rng.integers(1, 256, (8, 17))  # grey levels: all hole
    mask[18:, :4] = 255  # at the padded border
    got = model.inpaint(image, mask, hd_strategy="original")
    expected = upstream_pipeline(image, mask)
    hole = mask > 0
    assert np.array_equal(got[~hole], image[~hole])
    # float32 against the float64 reference: a truncation may land one level apart
    diff = np.abs(got.astype(int) - expected)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01
    assert (got[hole] != image[hole]).mean() > 0.5


def test_mask_is_binarised_as_upstream(model, tmp_path):
    image = np.random.default_rng(2).integers(0, 256, (16, 20, 3), dtype=np.uint8)
    binary = np.zeros((16, 20), bool)
    binary[3:9, 4:15] = True
    expected = model.inpaint(image, binary)
    grey = np.where(binary, np.arange(16 * 20).reshape(16, 20) % 255 + 1, 0).astype(np.uint8)
    assert np.array_equal(model.inpaint(image, grey), expected)
    # a mask file as RGBA: PIL's convert("L"), as upstream, ignores alpha
    rgba = np.zeros((16, 20, 4), np.uint8)
    rgba[binary] = (0, 0, 9, 0)  # luma of blue 9: 9 * 114 / 1000 rounds to 1, nonzero
    Image.fromarray(rgba, "RGBA").save(tmp_path / "mask.png")
    assert np.array_equal(model.inpaint(image, tmp_path / "mask.png"), expected)


def test_mask_without_hole_returns_the_image_unchanged(model):
    image = np.random.default_rng(3).integers(0, 256, (10, 12, 3), dtype=np.uint8)
    with pytest.warns(UserWarning, match="no pixel as hole: the image is returned unchanged"):
        out = model.inpaint(image, np.zeros((10, 12), np.uint8))
    assert np.array_equal(out, image) and out is not image


@pytest.mark.parametrize("size", [(1, 1), (5, 7), (8, 8), (9, 17)])
def test_tiny_images_are_padded_to_16(model, size):
    image = np.random.default_rng(4).integers(0, 256, (*size, 3), dtype=np.uint8)
    hole = np.zeros(size, bool)
    hole[size[0] // 2, size[1] // 2] = True
    out = model.inpaint(image, hole)
    assert out.shape == image.shape and np.array_equal(out[~hole], image[~hole])


def test_a_mask_of_negative_values_is_refused(model):
    """A 0/255 mask cast to int8 (255 is -1): no level above 0, so 'the mask marks no pixel as hole' and the image
    came back unchanged, the hole the user drew ignored. Negative levels are refused, naming the fix."""
    image = np.zeros((20, 30, 3), np.uint8)
    hole = np.zeros((20, 30), np.uint8)
    hole[5:10, 5:10] = 255
    for mask in (hole.astype(np.int8), -hole.astype(np.float32)):
        with pytest.raises(ZooError, match=rf"^mask has negative values \(-\d+(\.0)?, dtype {mask.dtype}\): pass "
                                           r"0 for known pixels and positive values for the hole \(uint8 0/255 "
                                           r"or bool\)$"):
            model.inpaint(image, mask)


def test_a_three_channel_bool_mask_is_its_hole(model):
    """np.dstack of a bool mask (or image == colour): 'mask array has dtype bool: pass uint8, ...', though a 2-D bool
    mask is the documented form. Every channel's True is hole, as the 2-D mask's."""
    image = np.random.default_rng(4).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    hole = np.zeros((20, 30), bool)
    hole[5:10, 5:12] = True
    assert np.array_equal(model.inpaint(image, np.dstack([hole] * 3)), model.inpaint(image, hole))


@pytest.mark.parametrize("option, value, problem", [
    ("crop_margin", 2.5, "crop_margin 2.5 is not a whole number of pixels: pass an int"),  # was a TypeError
    ("resize_limit", float("nan"), "resize_limit nan is not a whole number of pixels: pass an int"),  # ran no resize
    ("crop_trigger_size", -5, "crop_trigger_size -5: use a positive number of pixels"),  # the command line's check
    ("max_megapixels", float("nan"), "max_megapixels nan: use a positive number"),  # 'more than max_megapixels=nan'
    ("max_megapixels", -1, "max_megapixels -1: use a positive number"),
])
def test_library_pass_options_are_checked(model, option, value, problem):
    """inpaint's keyword arguments get the command line's checks, in their own words, before any pass runs."""
    image = np.zeros((40, 60, 3), np.uint8)
    hole = np.zeros((40, 60), bool)
    hole[5:10, 5:10] = True
    strategy = {"crop_margin": "crop", "crop_trigger_size": "crop", "resize_limit": "resize"}.get(option, "original")
    kwargs = {"crop_trigger_size": 20} if option == "crop_margin" else {}
    with pytest.raises(ZooError, match=f"^{re.escape(problem)}$"):
        model.inpaint(image, hole, hd_strategy=strategy, **{option: value, **kwargs})


def test_library_bad_inputs(model):
    image = np.zeros((20, 30, 3), np.uint8)
    with pytest.raises(ZooError, match="the mask is 20x30 but the image is 30x20"):
        model.inpaint(image, np.ones((30, 20), np.uint8))
    with pytest.raises(ZooError, match="NaN or Inf"):
        model.inpaint(image, np.full((20, 30), np.nan))
    with pytest.raises(ZooError, match="unknown hd strategy 'tiles'"):
        model.inpaint(image, np.ones((20, 30), np.uint8), hd_strategy="tiles")
    from zoo.models.lama import compose

    with pytest.raises(ZooError, match="NaN/Inf in the hole .* --dtype bfloat16 or float32"):
        compose(image, np.ones((20, 30), bool), np.full((20, 30, 3), np.nan, np.float32))


def test_huge_image_gets_memory_guidance():
    # the default bound on the CPU is one command's 2 GB (tests/test_lama_memory.py has the estimate)
    with pytest.raises(ZooError, match=r"4000x3000 pixels needs about .* GB of memory, more than the 2 GB"):
        check_memory((3000, 4000), None, mx.float32)
    with pytest.raises(ZooError, match=r"use hd_strategy='crop' .* or hd_strategy='resize' .* larger max_megapixels=N"):
        check_memory((3000, 4000), 4.0, mx.float16)
    check_memory((1000, 1000), 1.0, mx.float32)


def test_crop_boxes_cover_each_hole_with_its_margin():
    hole = np.zeros((300, 400), bool)
    hole[10:20, 30:50] = True  # near the top border: the crop shifts down, keeping its size
    hole[200:230, 300:310] = True
    hole[215, 335] = True  # 25 px right of the second hole: their crops overlap and merge
    boxes = crop_boxes(hole, margin=16)
    assert boxes == [(0, 14, 42, 66), (184, 284, 246, 352)]
    for top, left, bottom, right in boxes:
        assert hole[top:bottom, left:right].any()
    covered = np.zeros_like(hole)
    for top, left, bottom, right in boxes:
        covered[top:bottom, left:right] = True
    assert covered[hole].all()
    assert crop_boxes(hole, margin=200) == [(0, 0, 300, 400)]


def test_iopaints_crop_strategy_by_its_name_is_the_model_on_each_crop(model, files):
    """hd_strategy="Crop" (IOPaint's HDStrategy value, as its InpaintRequest holds it) was 'unknown hd strategy'.
    Each crop is its hole's bounding box grown by crop_margin; the result there is the model run on that crop by
    hand, and every pixel outside the crops is the input's."""
    _, image, hole = files
    got = model.inpaint(image, hole, hd_strategy="Crop", crop_margin=4, crop_trigger_size=40)
    crops = [(slice(5 - 4, 14 + 4), slice(6 - 4, 20 + 4)), (slice(30 - 4, 40 + 4), slice(48 - 4, 57 + 4))]
    outside = np.ones(hole.shape, bool)
    for crop in crops:
        assert np.array_equal(got[crop], model.inpaint(image[crop], hole[crop], hd_strategy="original"))
        outside[crop] = False
    assert np.array_equal(got[outside], image[outside])
    assert not np.array_equal(got, model.inpaint(image, hole, hd_strategy="original"))  # the crops' own context


def test_strategies_plan_their_passes():
    hole = np.zeros((100, 300), bool)
    hole[40:50, 10:20] = True
    assert plan_passes(hole, "original", 64, 8, 50) == (1.0, [(0, 0, 100, 300)])
    scale, boxes = plan_passes(hole, "resize", 64, 8, 50)
    assert pass_sizes(hole.shape, scale, boxes) == [(21, 64)]
    assert plan_passes(hole, "resize", 300, 8, 50) == (1.0, [(0, 0, 100, 300)])  # not above the limit
    assert plan_passes(hole, "crop", 64, 8, 50) == (1.0, [(32, 2, 58, 28)])
    assert plan_passes(hole, "crop", 64, 8, 300) == (1.0, [(0, 0, 100, 300)])  # not above the trigger
    with pytest.raises(ZooError, match="crop_margin -1 is negative"):
        plan_passes(hole, "crop", 64, -1, 50)
    with pytest.raises(ZooError, match="resize_limit 8 is too small"):
        plan_passes(hole, "resize", 8, 8, 50)


def test_a_large_holes_box_takes_no_index_per_pixel():
    """The crop strategy's box of a hole took np.nonzero of its region: two int64 indices per pixel, 576 MB for a
    36-megapixel hole before any pass was checked. Its rows and columns are enough: same boxes."""
    import tracemalloc

    from zoo.models.lama import hole_boxes

    hole = np.zeros((1200, 1200), bool)
    hole[3:1198, 5:1190] = True
    tracemalloc.start()
    try:
        boxes = hole_boxes(hole)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert boxes == [(3, 5, 1198, 1190)]
    assert peak < 4 * hole.size, peak / hole.size  # before: 16 bytes a pixel


CLI_STRATEGIES = {
    "original": ["--hd-strategy", "original"],
    "resize": ["--hd-strategy", "resize", "--resize-limit", "32"],
    "crop": ["--hd-strategy", "crop", "--crop-trigger-size", "40", "--crop-margin", "6", "--dtype", "float16"],
    # below the size a strategy starts at: one pass over the whole image, said so ('1 pass (crop)' read as a crop)
    "small-crop": ["--hd-strategy", "crop", "--crop-trigger-size", "61"],
    "small-resize": ["--hd-strategy", "resize", "--resize-limit", "64"],
}


@pytest.mark.parametrize("strategy", CLI_STRATEGIES)
def test_cli_keeps_every_pixel_outside_the_hole(files, strategy, capsys, monkeypatch):
    from zoo.models.lama import LaMa

    folder, image, hole = files
    out = folder / f"out_{strategy}.png"
    argv = ["lama", str(folder / "photo.png"), "--mask", str(folder / "mask.png"), "--out", str(out),
            "--weights", "synthetic:0", "--device", "cpu", *CLI_STRATEGIES[strategy],
            "--mask-threshold", "1"]  # lama's rule (any nonzero level): the fixture's second hole is level 7
    passes = []  # the model's passes as run, each (height, width): what the plan line below reports
    inpaint_pass = LaMa._inpaint_pass
    monkeypatch.setattr(LaMa, "_inpaint_pass", lambda self, image, hole: passes.append(hole.shape)
                        or inpaint_pass(self, image, hole))
    assert main(argv) == 0
    err = capsys.readouterr().err
    result = np.asarray(Image.open(out))
    assert result.shape == image.shape
    assert np.array_equal(result[~hole], image[~hole])
    assert (result[hole] != image[hole]).mean() > 0.5
    assert not list(folder.glob(".*.part"))
    expected = {"original": "1 pass (original)", "resize": "1 pass at scale 0.525 (resize)",
                "crop": "2 passes (crop)", "small-crop": "1 pass (the whole image: crop only above 61 px)",
                "small-resize": "1 pass (the whole image: resize only above 64 px)"}[strategy]
    assert expected in err
    assert len(passes) == {"crop": 2}.get(strategy, 1)
    if strategy.startswith("small"):
        assert passes == [(45, 61)]  # the whole image
    if strategy == "crop":  # each crop a region around a hole, smaller than the image
        assert all(h < image.shape[0] or w < image.shape[1] for h, w in passes)


def test_cli_default_output_and_empty_mask(files, tmp_path, capsys):
    _, image, _ = files
    Image.fromarray(np.zeros((H, W), np.uint8)).save(tmp_path / "empty.png")
    Image.fromarray(image).save(tmp_path / "photo.png")
    assert main(["lama", str(tmp_path / "photo.png"), "--mask", str(tmp_path / "empty.png"),
                 "--weights", "synthetic:0", "--device", "cpu"]) == 0
    assert "marks no pixel as hole" in capsys.readouterr().err
    assert np.array_equal(np.asarray(Image.open(tmp_path / "photo_inpainted.png")), image)




def test_a_single_image_run_over_its_output_with_other_settings_is_refused(files, tmp_path, capsys):
    """A single image's output keeps no record of its options: a second run with another --dilate kept the first
    run's output without a word ('skipping photo_inpainted.png: already written'); it is refused (exit 2) unless
    --overwrite replaces it, as any other command's existing output."""
    folder, image, _ = files
    Image.fromarray(image).save(tmp_path / "photo.png")
    run = ["lama", str(tmp_path / "photo.png"), "--mask", str(folder / "mask.png"), "--weights", "synthetic:0",
           "--device", "cpu", "--hd-strategy", "original"]
    out = tmp_path / "photo_inpainted.png"
    assert main(run) == 0
    first = out.read_bytes()
    assert main([*run, "--dilate", "4"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {out} exists and may be of other options than these (a single output keeps no record of them): "
        "pass --overwrite to replace it, or another --out PATH")
    assert out.read_bytes() == first
    assert main([*run, "--dilate", "4", "--overwrite"]) == 0
    assert out.read_bytes() != first


def test_cli_takes_the_image_after_options(files, tmp_path, capsys):
    """`lama --device cpu photo.png --mask m.png` (IOPaint's order: options first) was 'unrecognized
    arguments: photo.png': the optional IMAGES positional had matched nothing right after the model name."""
    folder, image, hole = files
    out = tmp_path / "out.png"
    assert main(["lama", "--weights", "synthetic:0", "--device", "cpu", str(folder / "photo.png"),
                 "--mask", str(folder / "mask.png"), "--out", str(out), "--hd-strategy", "original"]) == 0
    assert np.array_equal(np.asarray(Image.open(out))[~hole], image[~hole])


def test_cli_bad_inputs_fail_before_the_weights(files, tmp_path, capsys):
    """Every check runs before the weights are read: a missing weights file is never reached."""
    folder, _, _ = files
    base = ["lama", str(folder / "photo.png"), "--weights", str(tmp_path / "missing.safetensors"), "--device", "cpu"]
    mask = ["--mask", str(folder / "mask.png")]
    assert "has 0.00307 megapixels, more than --max-megapixels 0.001: use --hd-strategy crop" in cli_error(
        [*base, *mask, "--hd-strategy", "original", "--max-megapixels", "0.001"], capsys)
    assert "cannot write .xyz; use .png" in cli_error([*base, *mask, "--out", str(tmp_path / "r.xyz")], capsys)
    assert "its output " + str(folder / "photo.png") + " is the input file" in cli_error(
        [*base, *mask, "--out", str(folder / "photo.png")], capsys)
    # --out the image's folder: it said 'outputs exist, but mlx_zoo_run.json is not there ...: run again with
    # --overwrite', which then refused the input as the output
    assert cli_error([*base, *mask, "--out", str(folder)], capsys) == (
        f"error: {folder / 'photo.png'}: its output {folder / 'photo.png'} is the input file {folder / 'photo.png'}: "
        "pass another output path")
    assert "mask not found: nope.png" in cli_error(["lama", "nope.png", "--mask", "nope.png", "--weights", "synthetic"], capsys)
    assert "image not found: nope.png" in cli_error(["lama", "nope.png", *mask, "--weights", "synthetic"], capsys)
    (tmp_path / "notes.png").write_text("not a picture")
    assert f"cannot read {tmp_path / 'notes.png'}: not an image file Pillow recognises" in cli_error(
        ["lama", str(tmp_path / "notes.png"), *mask, "--weights", str(tmp_path / "missing.safetensors")], capsys)
    assert "--quality 0: use 1 to 100" in cli_error([*base, *mask, "--quality", "0"], capsys)
    assert "--mask-threshold 256: use 1 to 255" in cli_error([*base, *mask, "--mask-threshold", "256"], capsys)
    assert "--dilate -1: use 0 to 10000" in cli_error([*base, *mask, "--dilate", "-1"], capsys)
    # exit 1 and the API's words, 'resize limit 0 is too small', before
    assert main([*base, *mask, "--hd-strategy", "resize", "--resize-limit", "0"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: --resize-limit 0 is too small: use at least 16 pixels"
    assert main([*base, *mask, "--crop-margin", "-1"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: --crop-margin -1 is negative: use 0 or more pixels"
    assert "invalid choice: 'tiles'" in cli_error(  # argparse names the choices
        ["lama", str(folder / "photo.png"), "--hd-strategy", "tiles", *mask], capsys)
    # a video: it said 'output clip.mp4: unknown image suffix: cannot write .mp4; use .png'
    (tmp_path / "clip.mp4").write_bytes(b"not read")
    assert cli_error([*base[:1], str(tmp_path / "clip.mp4"), *base[2:], *mask], capsys) == (
        f"error: {tmp_path / 'clip.mp4'} is a video: LaMa inpaints images; extract its frames (e.g. ffmpeg -i "
        f"{tmp_path / 'clip.mp4'} frames/%05d.png) and pass that folder with a folder of masks")
    # the image as its own mask: it said 'no images to inpaint in photo.png: the files there are all masks'
    assert cli_error([*base, "--mask", str(folder / "photo.png")], capsys) == (
        f"error: {folder / 'photo.png'} is given as the image and as its mask: pass the mask of the image "
        "(white = the hole) with --mask")


def test_cli_gif_output_gets_the_lossy_note(files, tmp_path, capsys):
    folder, _, _ = files
    assert main(["lama", str(folder / "photo.png"), "--mask", str(folder / "mask.png"), "--out", str(tmp_path / "r.gif"),
                 "--weights", "synthetic:0", "--device", "cpu", "--hd-strategy", "original"]) == 0
    assert "note: .gif is lossy: pixels outside the hole change; write .png (--out NAME.png) to keep them" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["r.gif"]


def test_cli_says_when_a_deeper_image_is_written_in_8_bits(files, tmp_path, capsys):
    """a 16-bit grey PNG (Pillow's I;16) and an 8-bit one: only the first gets the note (its output is 8-bit RGB)"""
    folder, _, _ = files
    grey = np.tile(np.linspace(0, 65535, 40), (30, 1)).astype(np.uint16)
    Image.fromarray(grey).save(tmp_path / "deep.png")
    Image.fromarray((grey >> 8).astype(np.uint8)).save(tmp_path / "flat.png")
    hole = np.zeros((30, 40), np.uint8)
    hole[5:10, 5:10] = 255
    Image.fromarray(hole).save(tmp_path / "hole.png")
    assert main(["lama", str(tmp_path / "deep.png"), str(tmp_path / "flat.png"), "--mask", str(tmp_path / "hole.png"),
                 "--out", str(tmp_path / "out"), "--weights", "synthetic:0", "--device", "cpu"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "8 bits" in line]
    assert notes == ["note: deep.png has more than 8 bits a channel; LaMa reads and writes 8, so deep.png is "
                     "8-bit RGB, outside the hole too (the input keeps its depth)"]
    assert Image.open(tmp_path / "out" / "deep.png").mode == "RGB"


def test_cli_reads_iopaints_config_file(model, files, tmp_path, capsys):
    """iopaint run --config cfg.json (IOPaint's InpaintRequest) set the HD strategy; it was 'unrecognized arguments'"""
    folder, _, _ = files
    config = tmp_path / "cfg.json"
    settings = {"hd_strategy": "Resize", "hd_strategy_resize_limit": 40, "sd_steps": 50, "prompt": ""}
    config.write_text(json.dumps(settings))
    base = ["lama", "--image", str(folder / "photo.png"), "--mask", str(folder / "mask.png"),
            "--weights", "synthetic:0", "--device", "cpu", "--config", str(config)]
    assert main([*base, "--output", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"note: --config {config}: prompt, sd_steps do not apply to LaMa (IOPaint's other models read them): " \
        "ignored" in err and "1 pass at scale" in err
    hole = np.asarray(Image.open(folder / "mask.png")) >= 127  # the command's default threshold (IOPaint's)
    expected = model.inpaint(folder / "photo.png", hole, hd_strategy="resize", resize_limit=40)
    assert np.array_equal(np.asarray(Image.open(tmp_path / "out" / "photo.png")), expected)
    assert cli_error([*base, "--resize-limit", "64", "--output", str(tmp_path / "o2")], capsys) == \
        "error: --resize-limit 64 and --config's hd_strategy_resize_limit 40 disagree: give one of them"
    # a size the file sets is named by its key and the file: it was '--resize-limit 8 is too small', a flag not given
    for key, value, problem in (("hd_strategy_resize_limit", 8, "is too small: use at least 16 pixels"),
                                ("hd_strategy_crop_margin", -1, "is negative: use 0 or more pixels"),
                                ("hd_strategy_crop_trigger_size", 0, ": use a positive number of pixels")):
        config.write_text(json.dumps({"hd_strategy": "Resize", key: value}))
        assert cli_error([*base, "--output", str(tmp_path / "o3")], capsys) == \
            f"error: --config {config}: {key} {value}{' ' * (problem[0] != ':')}{problem}"
    config.write_text(json.dumps({"hd_strategy": "Tile"}))
    assert cli_error([*base, "--output", str(tmp_path / "o3")], capsys) == \
        f"error: --config {config}: hd_strategy 'Tile': use Original, Resize or Crop"
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def test_cli_out_that_cannot_be_written_fails_before_the_weights(files, tmp_path, capsys):
    folder, _, _ = files
    base = ["lama", str(folder / "photo.png"), "--mask", str(folder / "mask.png"),
            "--weights", str(tmp_path / "missing.safetensors")]
    (tmp_path / "results").write_text("a file")
    err = cli_error([*base, "--out", str(tmp_path / "results")], capsys)
    assert f"--out {tmp_path / 'results'} exists and is not a folder: pass a folder" in err
    (tmp_path / "out" / "photo.png").mkdir(parents=True)  # the output name, taken by a folder
    err = cli_error([*base, "--out", str(tmp_path / "out")], capsys)
    assert f"its output {tmp_path / 'out' / 'photo.png'} is a folder: remove it or pass another --out" in err
