"""Never lose a user's file (issue 15, point 0): every CLI and save API, checked with file hashes.

An output that is an input is refused whatever the flags; an existing output is replaced only with
--overwrite/--exist-ok (overwrite=True); an output folder that cannot be created or written is one
`error:` line before the model loads; a refused run writes nothing (the tree's hashes are unchanged).
"""
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import file_tree
from zoo.errors import ZooError
from zoo.files import (check_output_file, increment_path, make_output_folder, refuse_inputs,
                       remove_created_folders)
from zoo.run import main

MISSING_WEIGHTS = "never-read.safetensors"  # a check that passed would reach it and fail differently


def save_image(path: Path, seed: int = 0, size=(48, 64)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (*size, 3), dtype=np.uint8)).save(path)
    return path


def save_mask(path: Path) -> Path:
    mask = np.zeros((48, 64), np.uint8)
    mask[10:30, 20:40] = 255
    Image.fromarray(mask).save(path)
    return path


def refused(argv: list[str], root: Path, capsys, message: str) -> None:
    """The run fails with exactly one `error:` line containing ``message``, no traceback, nothing written."""
    before = file_tree(root)
    code = main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code != 0 and "Traceback" not in err
    assert len(errors) == 1 and message in errors[0], err
    assert file_tree(root) == before


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A user's folder: real.jpg, r2.jpg, mask.png, imgs/ with two images; the current folder."""
    save_image(tmp_path / "real.jpg", 0)
    save_image(tmp_path / "r2.jpg", 1)
    save_mask(tmp_path / "mask.png")
    save_image(tmp_path / "imgs" / "a.jpg", 2)
    save_image(tmp_path / "imgs" / "b.png", 3)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: chmod for a user; root ignores modes, /sys refuses it."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp_path / "rodir"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


# the issue's reproductions: each one `error:` line, non-zero, nothing written, before the weights are read
@pytest.mark.parametrize("argv, message", [
    (["yolov8n", "real.jpg", "--out", "."], "is the input file real.jpg"),
    (["yolov8n", "imgs/", "--out", "imgs"], "--out imgs is the input folder imgs"),
    (["resnet18", "r2.jpg", "--json", "r2.jpg"], "--json r2.jpg is the input file r2.jpg"),
    (["lama", "r2.jpg", "--mask", "mask.png", "--out", "mask.png"], "is the input file mask.png"),
    (["lama", "imgs/", "--mask", "mask.png", "--out", "imgs"], "--out imgs is the input folder imgs"),
    (["mobilesam", "real.jpg", "--point", "5,5", "--out", "real.jpg"], "--out real.jpg is the input file real.jpg"),
    (["yolov8n", "real.jpg", "--out", "mask.png/sub"], "--out mask.png/sub cannot be created: mask.png is a file"),
    (["mobilesam", "real.jpg", "--point", "5,5", "--out", "mask.png/sub"], "mask.png is a file"),
    (["lama", "r2.jpg", "--mask", "mask.png", "--out", "mask.png/sub"], "mask.png is a file"),
    (["resnet18", "r2.jpg", "--json", "mask.png/sub/r.json"], "mask.png is a file"),
    (["resnet18", "imgs/", "--csv", "imgs/a.jpg", "--overwrite"], "--csv imgs/a.jpg is the input file imgs/a.jpg"),
    (["yolov8n", "real.jpg", "--weights", "w.pt", "--out", "."], None),  # weights below
])
def test_issue_reproductions_are_refused_before_any_work(work, capsys, argv, message):
    if message is None:  # an output named like the weights file: the weights are an input too
        (work / "w.pt").write_bytes(b"weights")
        refused(["yolov8n", "w.jpg", "--weights", "w.pt"], work, capsys, "image not found")
        save_image(work / "w.jpg")
        os.link(work / "w.jpg", work / "hardlink.jpg")  # one file under two names
        refused(["resnet18", "w.jpg", "--json", "hardlink.jpg", "--overwrite", "--weights", MISSING_WEIGHTS], work,
                capsys, "--json hardlink.jpg is the input file w.jpg")
        return
    refused([*argv, "--weights", MISSING_WEIGHTS], work, capsys, message)


@pytest.mark.parametrize("argv", [
    ["yolov8n", "real.jpg"], ["mobilesam", "real.jpg", "--point", "5,5"], ["lama", "r2.jpg", "--mask", "mask.png"]])
def test_unwritable_output_folder_is_one_line_before_the_weights(work, capsys, argv):
    out = unwritable_folder(work) / "sub"
    refused([*argv, "--out", str(out), "--weights", MISSING_WEIGHTS], work, capsys, f"--out {out} cannot be created")
    refused(["resnet18", "r2.jpg", "--json", str(out / "r.json"), "--weights", MISSING_WEIGHTS], work, capsys,
            "cannot be created")


SYNTHETIC = ["--weights", "synthetic:0", "--device", "cpu"]


def test_classify_json_and_csv(work, capsys):
    inputs = file_tree(work)
    (work / "old.json").write_text("{}")
    refused(["resnet18", "r2.jpg", "--json", "old.json", *SYNTHETIC], work, capsys, "--json old.json exists: pass --overwrite")
    assert main(["resnet18", "r2.jpg", "--json", "old.json", "--csv", "new.csv", "--overwrite", *SYNTHETIC]) == 0
    assert (work / "old.json").read_text() != "{}" and (work / "new.csv").exists()
    assert {k: v for k, v in file_tree(work).items() if k in inputs} == inputs


def test_detect_run_folders_increment_and_outputs_need_exist_ok(work, capsys):
    inputs = file_tree(work)
    args = ["yolov8n", "real.jpg", "imgs/", "--imgsz", "64", *SYNTHETIC]
    assert main(args) == 0 and main(args) == 0  # ultralytics' runs/detect/predict, predict2
    first, second = work / "runs/detect/predict", work / "runs/detect/predict2"
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in second.iterdir()) == ["a.jpg", "b.png", "real.jpg"]
    (first / "real.jpg").write_bytes(b"an earlier result")
    refused([*args, "--out", str(first)], work, capsys, "real.jpg exists: pass --overwrite")
    assert main([*args, "--out", str(first), "--exist-ok"]) == 0
    assert (first / "real.jpg").read_bytes() != b"an earlier result"
    assert main([*args, "--exist-ok"]) == 0 and not (work / "runs/detect/predict3").exists()  # exist_ok reuses predict
    assert {k: v for k, v in file_tree(work).items() if k in inputs} == inputs


def test_segment_outputs_need_overwrite(work, capsys, small_mobilesam):
    inputs = file_tree(work)
    args = ["mobilesam", "real.jpg", "--box", "5,5,40,30", *SYNTHETIC]
    assert main(args) == 0
    out = work / "runs/segment/predict"
    written = file_tree(out)
    assert "real_masks.json" in written
    refused([*args, "--out", str(out)], work, capsys, "exists: pass --overwrite")
    (out / "real_overlay.png").write_bytes(b"an earlier result")
    assert main([*args, "--out", str(out), "--overwrite"]) == 0
    assert file_tree(out) == written  # replaced by the same result
    assert {k: v for k, v in file_tree(work).items() if k in inputs} == inputs


def test_inpaint_keeps_existing_outputs_without_overwrite(work, capsys):
    inputs = file_tree(work)
    (work / "out").mkdir()
    (work / "out" / "r2.png").write_bytes(b"an earlier result")  # JPEG inputs are written as PNG in a folder
    args = ["lama", "r2.jpg", "real.jpg", "--mask", "mask.png", "--out", "out", *SYNTHETIC]
    assert main(args) == 0
    assert (work / "out" / "r2.png").read_bytes() == b"an earlier result" and (work / "out" / "real.png").exists()
    assert main([*args, "--overwrite"]) == 0
    assert (work / "out" / "r2.png").read_bytes() != b"an earlier result"
    assert {k: v for k, v in file_tree(work).items() if k in inputs} == inputs


def test_validate_json_needs_overwrite(work, capsys):
    from zoo.cli.validate import main as validate_main

    (work / "report.json").write_text("{}")
    argv = ["resnet18", "--weights", MISSING_WEIGHTS, "--size", "32", "--json", "report.json"]
    before = file_tree(work)
    assert validate_main(argv) == 2
    assert "--json report.json exists: pass --overwrite" in capsys.readouterr().err and file_tree(work) == before
    assert validate_main([*argv, "--overwrite"]) == 1  # now past the output check: the weights are read
    assert "never-read.safetensors" in capsys.readouterr().err


def test_results_save_never_replaces_its_image_nor_a_file_not_named(work):
    from zoo.results import Results

    image = np.asarray(Image.open(work / "real.jpg"))[..., ::-1]
    result = Results(image, str(work / "real.jpg"), {0: "thing"}, boxes=np.array([[1, 2, 30, 40, 0.9, 0]], np.float32))
    before = file_tree(work)
    for overwrite in (False, True):
        with pytest.raises(ZooError, match="is the input file"):
            result.save(work / "real.jpg", overwrite=overwrite)
    (work / "old.png").write_bytes(b"x")
    with pytest.raises(ZooError, match="old.png exists: pass overwrite=True"):
        result.save(work / "old.png", overwrite=False)
    assert file_tree(work) == {**before, "old.png": hashlib.sha256(b"x").hexdigest()}
    result.save(work / "old.png")  # named: replaced, as ultralytics does
    assert (work / "old.png").read_bytes() != b"x"
    (work / "results_real.jpg").write_bytes(b"x")
    with pytest.raises(ZooError, match="results_real.jpg exists: pass overwrite=True"):
        result.save()  # the default name is not the user's: nothing replaced


def test_increment_path_as_ultralytics(tmp_path):
    run = tmp_path / "predict"
    assert increment_path(run) == run
    run.mkdir()
    assert increment_path(run) == tmp_path / "predict2" and increment_path(run, exist_ok=True) == run
    (tmp_path / "predict2").mkdir()
    assert increment_path(run) == tmp_path / "predict3"


def test_folders_created_for_a_failed_run_are_removed(tmp_path):
    made = make_output_folder(tmp_path / "a" / "b", "--out")
    assert made.is_dir()
    remove_created_folders()
    assert not (tmp_path / "a").exists()
    kept = make_output_folder(tmp_path / "c", "--out")
    (kept / "result.txt").write_text("written")
    remove_created_folders()
    assert (kept / "result.txt").exists()


def test_guard_functions(tmp_path):
    image = save_image(tmp_path / "in" / "x.png")
    (tmp_path / "in" / "notes.md").write_text("not an input kind")
    with pytest.raises(ZooError, match="is a file of the input folder"):
        refuse_inputs(image, [tmp_path / "in"], "--json")
    refuse_inputs(tmp_path / "in" / "notes.md", [tmp_path / "in"], "--json")  # not a kind the sources read
    refuse_inputs(tmp_path / "in" / "new.json", [tmp_path / "in", None, 3], "--json")  # a new file is fine
    os.symlink(image, tmp_path / "link.png")
    with pytest.raises(ZooError, match="is the input file"):
        check_output_file(tmp_path / "link.png", "--json", [image], overwrite=True)
    with pytest.raises(ZooError, match="is a folder"):
        check_output_file(tmp_path / "in", "--json")
