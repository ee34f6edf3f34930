"""`zoo.run lama` over folders as IOPaint's batch mode, and `inpaint` returning the kind it was given.

The folder case: 20 small photos (PNG, JPEG, TIFF; some stored sideways with an
EXIF orientation), each with an ICC profile and EXIF tags, and masks of other
sizes and names (a.png <- a.png, a_mask.png, a.jpg). Hole rectangles sit on the
masks' scale factors, so the hole at image resolution is known exactly.
"""

import json

import numpy as np
import pytest
from PIL import ExifTags, Image, ImageCms

import zoo
from conftest import cli_error
from zoo.run import main
from zoo.sources import RUN_SETTINGS

H, W = 48, 64  # as displayed (after EXIF orientation)
N = 20
HOLE = (slice(8, 24), slice(16, 40))  # rows, cols at image resolution
ICC = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
# EXIF orientation -> how to store an upright picture so that applying the tag gives it back
STORED = {1: None, 3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}
MASK_SCALES = (1, 0.5, 2, 1.5)  # the mask's size relative to its image
WEIGHTS = ["--weights", "synthetic:0", "--device", "cpu"]


def make_exif(i: int, orientation: int) -> Image.Exif:
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = "ZooCam"
    exif[ExifTags.Base.Model] = f"Model {i}"
    exif[ExifTags.Base.Orientation] = orientation
    exif.get_ifd(ExifTags.IFD.Exif)[ExifTags.Base.DateTimeOriginal] = f"2024:01:{i + 1:02d} 10:00:00"
    exif.get_ifd(ExifTags.IFD.GPSInfo)[ExifTags.GPS.GPSLatitudeRef] = "N"
    return exif


def save_mask(path, scale: float, fmt: str | None = None) -> None:
    mask = np.zeros((int(H * scale), int(W * scale)), np.uint8)
    mask[int(HOLE[0].start * scale):int(HOLE[0].stop * scale), int(HOLE[1].start * scale):int(HOLE[1].stop * scale)] = 255
    Image.fromarray(mask).save(path, format=fmt)


def exif_tags(exif: Image.Exif) -> dict:
    """Every tag of IFD0 and of the Exif and GPS directories (pointer offsets left out: they move)."""
    tags = {k: v for k, v in exif.items() if k not in (ExifTags.IFD.Exif, ExifTags.IFD.GPSInfo)}
    tags.update({("exif", k): v for k, v in exif.get_ifd(ExifTags.IFD.Exif).items()})
    tags.update({("gps", k): v for k, v in exif.get_ifd(ExifTags.IFD.GPSInfo).items()})
    return tags


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """20 photos and their masks; returns (images folder, masks folder, {name: (upright pixels, exif)})."""
    root = tmp_path_factory.mktemp("batch")
    images, masks = root / "images", root / "masks"
    images.mkdir()
    masks.mkdir()
    rng = np.random.default_rng(0)
    expected = {}
    for i in range(N):
        upright = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        orientation = (1, 6, 3, 8)[i % 4]
        # TIFF only upright: Pillow's TIFF writer turns a picture saved with an orientation tag itself
        suffix = (".tif" if i % 8 == 0 else ".png", ".png", ".jpg", ".png")[i % 4]
        stored = Image.fromarray(upright)
        if STORED[orientation] is not None:
            stored = stored.transpose(STORED[orientation])
        exif = make_exif(i, orientation)
        name = f"photo{i:02d}{suffix}"
        stored.save(images / name, exif=exif.tobytes(), icc_profile=ICC, **({"quality": 95} if suffix == ".jpg" else {}))
        # what the file holds, decoded and turned upright (JPEG is lossy: its decoded pixels are the input)
        with Image.open(images / name) as f:
            pixels = np.asarray(f.convert("RGB"))
        if orientation != 1:
            pixels = np.asarray(Image.fromarray(pixels).transpose(
                {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_270, 8: Image.Transpose.ROTATE_90}[orientation]))
        assert pixels.shape == (H, W, 3)
        expected[name] = (pixels, exif)
        stem = name.rsplit(".", 1)[0]
        mask_name = (f"{stem}.png", f"{stem}_mask.png", f"{stem}.bmp", f"{stem}_mask001.png")[i % 4]
        save_mask(masks / mask_name, MASK_SCALES[i % len(MASK_SCALES)])
    return images, masks, expected


@pytest.fixture(scope="module")
def first_run(photos, tmp_path_factory):
    images, masks, _ = photos
    out = tmp_path_factory.mktemp("out")
    code = main(["lama", str(images), "--mask", str(masks), "--out", str(out), "--ext", "png", *WEIGHTS])
    return code, out


def test_folder_of_20_inpaints_in_one_command(photos, first_run):
    images, _, expected = photos
    code, out = first_run
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [RUN_SETTINGS, *(f"{name.rsplit('.', 1)[0]}.png" for name in expected)])
    hole = np.zeros((H, W), bool)
    hole[HOLE] = True
    for name, (pixels, exif) in expected.items():
        with Image.open(out / f"{name.rsplit('.', 1)[0]}.png") as result:
            got = np.asarray(result)
            assert result.info.get("icc_profile") == ICC, name
            got_exif = result.getexif()
        assert got.shape == (H, W, 3), name
        assert np.array_equal(got[~hole], pixels[~hole]), name  # byte-identical outside the hole
        assert (got[hole] != pixels[hole]).mean() > 0.5, name  # and the hole was filled
        want = exif_tags(exif)
        del want[ExifTags.Base.Orientation]
        assert exif_tags(got_exif) == want, name  # every tag but the orientation, now applied


def test_second_run_skips_everything_without_reading_weights(photos, first_run, capsys, monkeypatch):
    from zoo import registry

    images, masks, _ = photos
    _, out = first_run
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    monkeypatch.setattr(registry, "load", None)  # never called: nothing is left to do
    assert main(["lama", str(images), "--mask", str(masks), "--out", str(out), "--ext", "png", *WEIGHTS]) == 0
    err = capsys.readouterr().err
    assert f"note: skipping {N} outputs in {out}: already written (--overwrite replaces them)" in err
    assert f"lama: 0 inpainted, {N} skipped (already written) in 0.0 s -> {out}" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_outputs_named_like_the_inputs_jpeg_as_png_quality_and_overwrite(photos, tmp_path, capsys):
    images, masks, expected = photos
    picked = tmp_path / "in"
    picked.mkdir()
    names = ["photo01.png", "photo02.jpg"]
    for name in names:
        (picked / name).write_bytes((images / name).read_bytes())
    out = tmp_path / "out"
    argv = ["lama", str(picked), "--mask", str(masks), "--out", str(out), *WEIGHTS]
    # the masks of the other 18 images match nothing here: a note each (IOPaint ignores them), the two images done
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("mask of no image") == N - 2 and "error:" not in err
    assert "note: .jpg inputs are written as .png, which keeps the pixels outside the hole exact (--ext jpg keeps " \
           "their format, lossy)" in err
    assert sorted(p.name for p in out.iterdir()) == [RUN_SETTINGS, "photo01.png", "photo02.png"]
    hole = np.zeros((H, W), bool)
    hole[HOLE] = True
    pixels = expected["photo02.jpg"][0]
    assert np.array_equal(np.asarray(Image.open(out / "photo02.png"))[~hole], pixels[~hole])
    # --ext jpg keeps the format, at --quality, and JPEG changes pixels outside the hole: why PNG is the default;
    # --overwrite replaces an output that exists
    (out / "photo01.jpg").write_bytes(b"stale")
    assert main([*argv, "--ext", "jpg", "--quality", "80", "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "note: .jpg is lossy: pixels outside the hole change; write .png (--ext png) to keep them" in err
    # the .png outputs stay, of other settings (no --quality): the folder's settings file goes, with a note
    assert f"note: photo01.png in {out} stays, made with other options than this run's" in err
    assert sorted(p.name for p in out.iterdir()) == ["photo01.jpg", "photo01.png", "photo02.jpg", "photo02.png"]
    with Image.open(out / "photo02.jpg") as jpeg, Image.open(out / "photo01.jpg") as replaced:
        reference = tmp_path / "q80.jpg"
        Image.fromarray(pixels).save(reference, quality=80)
        assert jpeg.format == "JPEG" and jpeg.quantization == Image.open(reference).quantization
        assert (np.asarray(jpeg)[~hole] != pixels[~hole]).any(axis=-1).mean() > 0.5
        assert replaced.format == "JPEG" and replaced.size == (W, H)


def test_bad_files_one_line_each_the_rest_processed(tmp_path, capsys):
    images, masks, out = tmp_path / "images", tmp_path / "masks", tmp_path / "out"
    images.mkdir()
    masks.mkdir()
    rng = np.random.default_rng(1)
    for stem in ("good1", "good2", "nomask", "broken", "truncated"):
        Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)).save(images / f"{stem}.png")
    (images / "broken.png").write_bytes(b"not a png at all")
    whole = (images / "truncated.png").read_bytes()
    (images / "truncated.png").write_bytes(whole[: len(whole) // 2])
    (images / "notes.txt").write_text("not an image suffix: ignored")
    for stem in ("good1", "good2", "broken", "truncated", "orphan"):
        save_mask(masks / f"{stem}.png", 1)
    code = main(["lama", str(images), "--mask", str(masks), "--out", str(out), *WEIGHTS])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert code == 1  # files that could not be read; the pairing gaps alone exit 0 (IOPaint's batch mode goes on)
    assert len(errors) == 2, errors
    assert any("broken.png: not an image file Pillow recognises" in e for e in errors)
    assert any("truncated.png: the file is damaged or truncated" in e for e in errors)
    assert any("nomask.png: no mask in" in n and "looked for nomask.* and nomask_mask*.*): skipped" in n for n in notes)
    assert any("orphan.png: mask of no image" in n for n in notes)
    assert sorted(p.name for p in out.iterdir()) == ["good1.png", "good2.png", RUN_SETTINGS]
    assert "lama: 2 inpainted, 1 skipped (no mask), 2 failed (see the error lines)" in err.splitlines()[-1]


def test_one_mask_for_all_resized_threshold_and_dilation(tmp_path, capsys):
    rng = np.random.default_rng(2)
    images = tmp_path / "images"
    images.mkdir()
    pixels = {}
    for stem in ("a", "b"):
        pixels[stem] = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        Image.fromarray(pixels[stem]).save(images / f"{stem}.png")
    mask = np.zeros((H // 2, W // 2), np.uint8)
    mask[4:12, 8:20] = 200  # hole at threshold 127
    mask[20:22, 2:4] = 100  # below it: kept
    Image.fromarray(mask).save(tmp_path / "mask.png")
    out = tmp_path / "out"
    assert main(["lama", str(images), "--mask", str(tmp_path / "mask.png"), "--out", str(out), *WEIGHTS,
                 "--mask-threshold", "127", "--dilate", "3"]) == 0
    err = capsys.readouterr().err
    assert err.count("note: resized mask mask.png from 32x24 to 64x48 (nearest) for a.png") == 1  # once per size
    assert "lama: 2 inpainted in" in err.splitlines()[-1]
    hole = np.zeros((H, W), bool)
    hole[8 - 3:24 + 3, 16 - 3:40 + 3] = True  # the resized rectangle grown by 3 px
    for stem in ("a", "b"):
        got = np.asarray(Image.open(out / f"{stem}.png"))
        assert np.array_equal(got[~hole], pixels[stem][~hole])
        assert (got[hole] != pixels[stem][hole]).mean() > 0.5
        ring = hole.copy()
        ring[HOLE] = False
        assert (got[ring] != pixels[stem][ring]).any(axis=-1).mean() > 0.5  # the dilated ring was filled too


def test_lama_layout_images_and_masks_in_one_folder(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for stem in ("a", "b"):
        Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)).save(folder / f"{stem}.png")
    save_mask(folder / "a_mask.png", 1)
    save_mask(folder / "b_mask001.png", 1)
    out = tmp_path / "out"
    assert main(["lama", str(folder), "--mask", str(folder), "--out", str(out), *WEIGHTS]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "b.png", RUN_SETTINGS]
    # an output folder that is an input folder is refused, --overwrite or not, before any work
    assert main(["lama", str(folder), "--mask", str(folder), "--out", str(folder), "--overwrite", *WEIGHTS]) == 2
    assert capsys.readouterr().err.count(f"is the input folder {folder}: pass another output path") == 1


def test_outputs_of_both_formats_share_a_folder(tmp_path, capsys):
    """--ext jpg and then PNG outputs into one --out (or the reverse): --quality was recorded for JPEG outputs
    alone, so the second run was refused as other settings with no option that could match."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    for folder in (images, masks):
        folder.mkdir()
    Image.fromarray(np.full((H, W, 3), 90, np.uint8)).save(images / "a.png")
    save_mask(masks / "a.png", 1)
    for first, second in ((["--ext", "jpg"], []), ([], ["--ext", "jpg"])):
        out = tmp_path / f"out{len(first)}"
        base = ["lama", str(images), "--mask", str(masks), "--out", str(out), *WEIGHTS]
        assert main([*base, *first]) == 0
        assert main([*base, *second]) == 0, capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == ["a.jpg", "a.png", RUN_SETTINGS]


def test_a_folder_run_over_outputs_of_other_settings_is_refused(tmp_path, capsys):
    """A re-run into an --out with another --mask-threshold skipped the outputs there, made at the earlier
    threshold, and wrote the new ones beside them without a word. The folder keeps the run's settings
    (mlx_zoo_run.json, as detect's --out): a run with other options that change the pixels is refused before any
    work (exit 2), the same options spelled otherwise are taken, --overwrite of part of the folder with other
    options removes the file (one note), and a folder of outputs without it is refused in one line."""
    from conftest import file_tree

    images, masks, out = tmp_path / "images", tmp_path / "masks", tmp_path / "out"
    for folder in (images, masks):
        folder.mkdir()
    for stem in ("a", "b"):
        Image.fromarray(np.full((H, W, 3), 90, np.uint8)).save(images / f"{stem}.png")
        save_mask(masks / f"{stem}.png", 1)
    base = ["lama", str(images), "--mask", str(masks), "--out", str(out), *WEIGHTS]
    settings = out / RUN_SETTINGS
    assert main(base) == 0
    assert json.loads(settings.read_text())["settings"] == {
        "--weights": "synthetic:0", "--dtype": "float32", "--mask-threshold": 127, "--dilate": 0,
        "--hd-strategy": "crop", "--resize-limit": None, "--crop-margin": 128, "--crop-trigger-size": 800,
        "--quality": 95}
    for other, shown in ((["--mask-threshold", "1"], "--mask-threshold 127, not --mask-threshold 1"),
                         (["--dilate", "8"], "--dilate 0, not --dilate 8"),
                         (["--weights", "synthetic:1"], "--weights synthetic:0, not --weights synthetic:1"),
                         (["--dtype", "bfloat16"], "--dtype float32, not --dtype bfloat16"),
                         (["--hd-strategy", "resize"], "--hd-strategy crop --resize-limit (not given) "
                          "--crop-margin 128 --crop-trigger-size 800, not --hd-strategy resize --resize-limit 1280 "
                          "--crop-margin (not given) --crop-trigger-size (not given)")):
        before = file_tree(tmp_path)
        assert main([*base, *other]) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"error: {settings} holds results of {shown}: give the options that made them, or pass another --out "
            "DIR, or --overwrite to replace its outputs")
        assert file_tree(tmp_path) == before
    config = tmp_path / "cfg.json"
    config.write_text('{"hd_strategy": "Crop", "hd_strategy_crop_margin": 128}')
    for same in (["--config", str(config)], ["--crop-trigger-size", "800"]):
        assert main([*base, *same]) == 0
        assert "0 inpainted, 2 skipped (already written)" in capsys.readouterr().err
    # the options of a strategy that is not used are no settings
    assert main([*base, "--out", str(tmp_path / "whole"), "--hd-strategy", "original", "--crop-margin", "16"]) == 0
    assert main([*base, "--out", str(tmp_path / "whole"), "--hd-strategy", "original"]) == 0
    # --overwrite of one image with the same options: the settings file stays
    assert main(["lama", str(images / "a.png"), "--mask", str(masks), "--out", str(out), "--overwrite", *WEIGHTS]) == 0
    assert "stays" not in capsys.readouterr().err and settings.exists()
    # --overwrite of one image with other options: the other's output stays, so the settings file goes
    assert main(["lama", str(images / "a.png"), "--mask", str(masks), "--out", str(out), "--mask-threshold", "1",
                 "--overwrite", *WEIGHTS]) == 0
    assert (f"note: b.png in {out} stays, made with other options than this run's: its settings file {RUN_SETTINGS} "
            "is removed, so no later run takes it for this run's output") in capsys.readouterr().err
    assert not settings.exists()
    for argv in (base, [*base, "--mask-threshold", "1"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"error: outputs exist, but {settings} is not there, so the 2 output(s) in {out} may be of other options "
            "than these: run again with --overwrite (all made again) or into a new --out")
    assert main([*base, "--mask-threshold", "1", "--overwrite"]) == 0  # all made again: the settings are this run's
    assert json.loads(settings.read_text())["settings"]["--mask-threshold"] == 1
    # one image whose output file is named keeps no settings file
    assert main(["lama", str(images / "a.png"), "--mask", str(masks / "a.png"), "--out", str(tmp_path / "a.png"),
                 *WEIGHTS]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "cfg.json", "images", "masks", "out", "whole"]


def test_cli_argument_errors(photos, tmp_path, capsys):
    images, masks, _ = photos
    assert "several images need an output folder: pass --out DIR" in cli_error(
        ["lama", str(images), "--mask", str(masks), *WEIGHTS], capsys)
    assert "--ext png names the outputs in a folder" in cli_error(
        ["lama", str(images / "photo01.png"), "--mask", str(masks / "photo01_mask.png"), "--out",
         str(tmp_path / "x.png"), "--ext", "png", *WEIGHTS], capsys)


def test_inpaint_returns_an_array_for_every_kind_of_image(tmp_path):
    lama = zoo.load("lama", weights="synthetic:0", device="cpu")
    rng = np.random.default_rng(4)
    rgb = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    hole = np.zeros((H, W), bool)
    hole[HOLE] = True
    from_array = lama.inpaint(rgb, hole)
    assert isinstance(from_array, np.ndarray) and from_array.shape == (H, W, 3) and from_array.dtype == np.uint8
    assert np.array_equal(lama.inpaint(Image.fromarray(rgb), hole), from_array)
    Image.fromarray(rgb).save(tmp_path / "p.png", icc_profile=ICC)
    Image.fromarray(hole.astype(np.uint8) * 255).save(tmp_path / "m.png")
    assert np.array_equal(lama.inpaint(tmp_path / "p.png", str(tmp_path / "m.png")), from_array)
    assert np.array_equal(lama.inpaint(str(tmp_path / "p.png"), hole), from_array)
    # alpha is set aside and put back: the model sees the raw colours
    alpha = rng.integers(0, 256, (H, W), dtype=np.uint8)
    rgba = np.dstack([rgb, alpha])
    assert np.array_equal(lama.inpaint(Image.fromarray(rgba, "RGBA"), hole), np.dstack([from_array, alpha]))
    assert np.array_equal(lama.inpaint(rgba, hole), np.dstack([from_array, alpha]))


def test_iopaint_run_flags_threshold_png_and_missing_masks(tmp_path, capsys):
    """`iopaint run --image DIR --mask DIR --output DIR` as written, with IOPaint 1.6's batch rules
    (iopaint/batch_processing.py): mask levels >= 127 are hole, outputs are PNG, an image without a
    mask is logged and skipped; and ours: inputs and masks untouched, no output in their folders."""
    images, masks, out = tmp_path / "images", tmp_path / "masks", tmp_path / "out"
    images.mkdir()
    masks.mkdir()
    rng = np.random.default_rng(4)
    decoded = {}
    for stem in ("a", "b", "c"):
        Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)).save(images / f"{stem}.jpg", quality=95)
        decoded[stem] = np.asarray(Image.open(images / f"{stem}.jpg").convert("RGB"))
    mask = np.zeros((H, W), np.uint8)
    mask[HOLE] = 127  # hole
    mask[30:40, 4:12] = 126  # kept
    for stem in ("a", "b"):  # none for c
        Image.fromarray(mask).save(masks / f"{stem}.png")
    given = {p: p.read_bytes() for folder in (images, masks) for p in folder.iterdir()}
    assert main(["lama", "--image", str(images), "--mask", str(masks), "--output", str(out), *WEIGHTS]) == 0
    err = capsys.readouterr().err
    assert f"note: {images / 'c.jpg'}: no mask in {masks} (looked for c.* and c_mask*.*): skipped (add one" in err
    assert "error:" not in err and "lama: 2 inpainted, 1 skipped (no mask) in" in err.splitlines()[-1]
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "b.png", RUN_SETTINGS]  # and the run's settings
    hole = mask >= 127
    for stem in ("a", "b"):
        got = np.asarray(Image.open(out / f"{stem}.png"))
        assert np.array_equal(got[~hole], decoded[stem][~hole])  # the level-126 patch kept, as every known pixel
        assert (got[hole] != decoded[stem][hole]).mean() > 0.5
    assert {p: p.read_bytes() for folder in (images, masks) for p in folder.iterdir()} == given
    # nothing could be processed: no image has a mask -> exit 1
    (tmp_path / "lone").mkdir()
    (tmp_path / "lone" / "c.jpg").write_bytes(given[images / "c.jpg"])
    err = cli_error(["lama", "--image", str(tmp_path / "lone"), "--mask", str(masks), "--output",
                     str(tmp_path / "out2"), *WEIGHTS], capsys)
    assert f"no image of {tmp_path / 'lone'} has a mask in {masks}: name each mask after its image" in err
    assert not (tmp_path / "out2").exists()
    assert f"is the input folder {masks}" in cli_error(  # never write into the mask folder
        ["lama", "--image", str(images), "--mask", str(masks), "--output", str(masks), *WEIGHTS], capsys)
