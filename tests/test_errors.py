"""docs/errors.md, row by row: every bad input listed there gives exactly its one `error:` line,
its exit code (2 usage, 1 runtime) or exception, no traceback, and writes nothing.

The table is the test's input: a row is run as written (in a folder of the files named below), so
a row added without a working command fails here, and a message changed in the code but not in the
docs fails too.
"""
import io
import os
import py_compile
import re
import shlex
import shutil
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from safetensors.numpy import load_file, save_file

import zoo
import zoo.annotate  # rows call zoo.annotate.check_kept_masks
import zoo.instances  # and zoo.instances.check_retina_masks
import zoo.models.lama
from conftest import cli_inputs, file_tree, synthetic_checkpoint, write_video
from test_bombs import TIB, forged_png, legacy_file, safetensors_bytes
from zoo.errors import ZooError

ERRORS_MD = Path(__file__).parent.parent / "docs" / "errors.md"
ROW = re.compile(r"^\| *(E\d+) *\| *(.+?) *\| *`(.+?)` *\| *(.+?) *\| *`(.+)` *\|$")


def table(section: str) -> list[tuple]:
    """The rows of one table of docs/errors.md: (id, input, command, outcome, message)."""
    text = ERRORS_MD.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [ROW.match(line).groups() for line in text.splitlines() if line.startswith("| E")]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The files the table's commands name."""
    root = cli_inputs(tmp_path_factory.mktemp("errors"))
    (root / "zero.jpg").write_bytes(b"")
    (root / "text.jpg").write_text("hello, not a picture\n")
    jpeg = (root / "ok.jpg").read_bytes()
    (root / "trunc.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (root / "junk.pt").write_bytes(np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8).tobytes())
    (root / "old.json").write_text("{}\n")
    (root / "gaps.txt").write_text("ok.jpg\nmissing.jpg\n")  # E97
    synthetic_checkpoint("yolov8n", root / "yolo.safetensors")
    (root / "empty").mkdir()
    (root / "dangling").symlink_to("gone/target")  # E76
    (root / "notes.mp4").write_text("not a video\n")
    save_file({"conv1.weight": np.zeros((8, 3, 7, 7), np.float32),  # a ResNet stem and one block (E86)
               "layer1.0.conv1.weight": np.zeros((8, 8, 3, 3), np.float32)}, str(root / "odd_resnet.safetensors"))
    (root / "iopaint.json").write_text('{"hd_strategy": "Resize", "hd_strategy_resize_limit": 8}')  # E85
    cut = write_video(root / "cut.mp4", 4).read_bytes()  # E88
    (root / "cut.mp4").write_bytes(cut[: len(cut) // 2])
    save_file({"model.0.conv.weight": np.zeros((16, 3, 3, 3), np.float32),  # a YOLOv8 oriented-box head
               "model.22.cv4.0.2.weight": np.zeros((1, 1, 1, 1), np.float32)}, str(root / "obb.safetensors"))
    save_file({"model.0.conv.weight": np.zeros((16, 3, 3, 3), np.float32),  # a pose head of 5 x 2 keypoints
               "model.22.cv4.0.2.weight": np.zeros((10, 1, 1, 1), np.float32)}, str(root / "pose.safetensors"),
              metadata={"kpt_shape": "[17, 3]"})
    save_file({"model.0.conv.weight": np.zeros((16, 3, 3, 3), np.float32),  # YOLO26's head: no DFL, one2one (E112)
               "model.23.cv2.0.2.weight": np.zeros((4, 16, 1, 1), np.float32),
               "model.23.one2one_cv2.0.2.weight": np.zeros((4, 16, 1, 1), np.float32)},
              str(root / "yolo26n.safetensors"))
    (root / "best.onnx").write_bytes(b"an ONNX graph")  # E113
    save_file({"model.0.conv.weight": np.zeros((16, 3, 3, 3), np.float32),  # BatchNorm folded in (E114)
               "model.0.conv.bias": np.zeros(16, np.float32)}, str(root / "fused.safetensors"))
    (root / "blur").mkdir()  # timm's resnetblur18: ResNet-18's very tensors, its config.json beside them (E115)
    synthetic_checkpoint("resnet18", root / "blur" / "model.safetensors")
    (root / "blur" / "config.json").write_text('{"architecture": "resnetblur18", "pretrained_cfg": {"tag": "bh_in1k"}}')
    save_file({"image_encoder.pos_embed": np.zeros((1, 1, 1, 768), np.float32),  # SAM's ViT-B encoder (E116)
               "image_encoder.patch_embed.proj.weight": np.zeros((768, 3, 16, 16), np.float32)},
              str(root / "sam_vit_b.safetensors"))
    save_file({"conv1.weight": np.zeros((64, 3, 7, 7), np.float32),  # timm's seresnet50: attention in its blocks (E117)
               "layer1.0.conv1.weight": np.zeros((64, 64, 1, 1), np.float32),
               "layer1.0.se.fc1.weight": np.zeros((16, 256, 1, 1), np.float32)}, str(root / "seresnet50.safetensors"))
    synthetic_checkpoint("resnet18", root / "r18.safetensors")  # E118
    (root / "big.png").write_bytes(forged_png(10000, 10000))
    (root / "bomb.png").write_bytes(forged_png(40000, 40000))
    (root / "lie.safetensors").write_bytes(safetensors_bytes(
        {"w": {"dtype": "F32", "shape": [TIB // 4], "data_offsets": [0, TIB]}}, bytes(16)))
    legacy_file(root / "lie.pt", TIB // 4)
    (root / "sparse.safetensors").write_bytes(safetensors_bytes(
        {"weight": {"dtype": "BF16", "shape": [3 << 29], "data_offsets": [0, 3 << 30]}}, b""))
    with open(root / "sparse.safetensors", "r+b") as sparse:  # 3 GiB of holes: nothing on disk
        sparse.truncate(sparse.seek(0, 2) + (3 << 30))
    Image.new("RGB", (5000, 1), (120, 30, 200)).save(root / "strip.png")
    Image.fromarray(np.array([[0.5, np.nan], [0.25, 1.0]], np.float32), "F").save(root / "nan.tif")  # E83
    (root / "factories.py").write_text(  # python -m zoo.validate --module's factories (E100-E102)
        "import mlx.nn as nn\n\n\nclass Constant(nn.Module):\n    def __call__(self, x):\n        return 0\n\n\n"
        "def constant():\n    return Constant()\n\n\ndef builder():\n    return nn.Linear\n\n\n"
        "def quits():\n    raise SystemExit(3)\n")
    py_compile.compile(str(root / "factories.py"))  # its import then writes no __pycache__ into the tree compared
    diverged = load_file(synthetic_checkpoint("resnet18", root / "diverged.safetensors"))  # E103
    diverged["layer1.0.conv1.weight"][0, 0, 0, 0] = np.nan
    save_file(diverged, str(root / "diverged.safetensors"))
    from zoo.run import main

    # a detect run's --out and records, and an --out as an earlier version left it: no settings file (E74, E75, E79)
    assert main(["yolov8n", str(root / "ok.jpg"), "--out", str(root / "run"), "--imgsz", "64", "--jsonl",
                 str(root / "detect.jsonl"), "--weights", "synthetic"]) == 0
    assert main(["lama", str(root / "imgs"), "--mask", str(root / "mask.png"), "--out", str(root / "lama_run"),
                 "--weights", "synthetic"]) == 0  # a LaMa folder run's --out (E80)
    started = os.getcwd()
    try:  # classify records of a run started in another folder, /, its input named in full (E81)
        os.chdir("/")
        assert main(["resnet18", str(root / "ok.jpg"), "--jsonl", str(root / "elsewhere.jsonl"),
                     "--weights", "synthetic"]) == 0
    finally:
        os.chdir(started)
    shutil.copytree(root / "run", root / "old_run")
    (root / "old_run" / "mlx_zoo_run.json").unlink()
    return root


def run_row(command: str) -> tuple[str, str]:
    """(outcome, stderr): 'exit N' for a command line, the exception's class name for a Python call."""
    if command.startswith("python -m "):
        from zoo.cli.validate import main as validate_main
        from zoo.run import main as run_main

        argv = shlex.split(command)[2:]
        main = {"zoo.run": run_main, "zoo.validate": validate_main}[argv[0]]
        err = io.StringIO()
        with redirect_stderr(err):
            code = main(argv[1:])
        return f"exit {code}", err.getvalue()
    try:
        eval(command, {"zoo": zoo, "np": np})
    except ZooError as e:
        return type(e).__name__, f"error: {e}\n"
    return "no error", ""


@pytest.mark.parametrize("row", table("Refused"), ids=lambda row: row[0])
def test_each_row_gives_its_one_line(files, monkeypatch, row):
    _, _, command, outcome, message = row
    monkeypatch.chdir(files)
    before = file_tree(files)
    got, err = run_row(command)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "Traceback" not in err
    assert (got, errors) == (outcome, [f"error: {message}"])
    assert file_tree(files) == before  # nothing written, nothing created


def test_rows_are_numbered_once():
    ids = [row[0] for section in ("Refused", "Converted") for row in table_rows(section)]
    assert len(ids) == len(set(ids)) and len(table("Refused")) == len(table_rows("Refused")) > 30


def test_converted_inputs(tmp_path, capsys):
    """docs/errors.md's Converted table: each mode becomes RGB uint8 by its rule, and a run over all exits 0."""
    from zoo.images import load_image
    from zoo.run import main

    folder = tmp_path / "converted"
    folder.mkdir()
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    grey16 = rng.integers(0, 65536, (12, 16), dtype=np.uint16)
    Image.fromarray(grey16).save(folder / "c1.png")
    Image.fromarray(rgb).convert("CMYK").save(folder / "c2.jpg", quality=100)
    Image.fromarray(rgb).quantize(16).save(folder / "c3.png")
    Image.fromarray(rgb[..., 0]).save(folder / "c4.png")
    alpha = np.where(rng.random((12, 16)) < 0.5, 0, 255).astype(np.uint8)
    Image.fromarray(np.dstack([rgb, alpha])).save(folder / "c5.png")
    Image.fromarray(np.dstack([rgb[..., 1], alpha]), "LA").save(folder / "c6.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb).save(folder / "c7.png", exif=exif)

    white = lambda grey, a: np.where(a[..., None] == 255, grey, 255)  # noqa: E731
    expected = {
        "c1.png": np.repeat(np.rint(grey16 / 65535 * 255).astype(np.uint8)[..., None], 3, axis=2),
        "c2.jpg": np.asarray(Image.open(folder / "c2.jpg").convert("RGB")),
        "c3.png": np.asarray(Image.open(folder / "c3.png").convert("RGB")),
        "c4.png": np.repeat(rgb[..., :1], 3, axis=2),
        "c5.png": white(rgb, alpha),
        "c6.png": white(np.repeat(rgb[..., 1:2], 3, axis=2), alpha),
        "c7.png": np.rot90(rgb, -1),  # orientation 6: the camera was turned a quarter clockwise
    }
    assert [row[0] for row in table_rows("Converted")] == ["C1", "C2", "C3", "C4", "C5", "C6", "C7"]
    for name, want in expected.items():
        got = load_image(folder / name)
        assert got.dtype == np.uint8 and got.shape == want.shape, name
        assert np.array_equal(got, want), name
    assert main(["resnet18", str(folder), "--weights", "synthetic:0", "--top-k", "1"]) == 0
    assert "error:" not in capsys.readouterr().err


def table_rows(section: str) -> list[list[str]]:
    text = ERRORS_MD.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()
            if re.match(r"\| *[EC]\d+ *\|", line)]


def test_help_lists_the_options_and_the_aliases(capsys):
    from zoo.run import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for expected in ("yolov8n (yolov8)", "mobilesam (mobile_sam)", "--weights", "--device", "--dtype", "--debug",
                     "--conf", "--imgsz", "--overwrite", "--point", "--box", "--mask", "--top-k", "--json"):
        assert expected in text, expected


@pytest.mark.parametrize("argv, says_ray", [(["--help"], True), (["resnet18", "--help"], True),
                                             (["yolov8n-pose", "--help"], True), (["lama", "--help"], False)])
def test_help_names_ray_where_it_runs(argv, says_ray, capsys):
    """--ray (README, docs/ray.md) has options of its own that no --help named: a newcomer could not find it."""
    from zoo.run import main

    with pytest.raises(SystemExit):
        main(argv)
    text = " ".join(capsys.readouterr().out.split())
    assert ("python -m zoo.run MODEL --ray --help shows its options" in text) == says_ray
    if says_ray:
        with pytest.raises(SystemExit):
            main(["resnet18", "--ray", "--help"])
        assert "--actors" in capsys.readouterr().out  # the options the note points to


def test_batch_help_says_what_batching_does_to_each_tasks_results(capsys):
    """detect's --batch help said 'the results are the same', but images of different sizes are letterboxed to
    one square in a batch (as ultralytics): 44 then 64 boxes on two photos (synthetic weights)."""
    from zoo.run import main

    for model, says in (("resnet18", "the results are the same"),
                        ("yolov8n", "images of different sizes are letterboxed to one --imgsz square")):
        with pytest.raises(SystemExit):
            main([model, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        batch_help = text.split("--batch N images per forward pass (default 1; ", 1)[1].split(")", 1)[0]
        assert says in batch_help
        assert model == "resnet18" or "the results are the same" not in text


def test_debug_shows_the_traceback(capsys):
    from zoo.run import main

    with pytest.raises(ZooError, match="image not found"):
        main(["resnet18", "nope.jpg", "--weights", "synthetic", "--debug"])
