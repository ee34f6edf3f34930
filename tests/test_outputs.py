"""Never lose a user's file (issue 15, point 0): every CLI and save API, checked with file hashes.

An output that is an input is refused whatever the flags; an existing output is replaced only with
--overwrite/--exist-ok (overwrite=True); an output folder that cannot be created or written is one
`error:` line before the model loads; a refused run writes nothing (the tree's hashes are unchanged).
"""
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import file_tree
from zoo.errors import ZooError
from zoo.files import (OutputFile, check_output_file, increment_path, make_output_folder, refuse_inputs,
                       remove_created_folders, save_png, write_atomic, write_text)
from zoo.run import main
from zoo.sources import read_jsonl

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


def refused(argv: list[str], root: Path, capsys, message: str) -> int:
    """The run fails with exactly one `error:` line containing ``message``, no traceback, nothing written;
    -> its exit code."""
    before = file_tree(root)
    code = main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code != 0 and "Traceback" not in err
    assert len(errors) == 1 and message in errors[0], err
    assert file_tree(root) == before
    return code


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A user's folder: real.jpg, r2.jpg, mask.png, imgs/ with two images, masks/ with their masks; the current folder."""
    save_image(tmp_path / "real.jpg", 0)
    save_image(tmp_path / "r2.jpg", 1)
    save_mask(tmp_path / "mask.png")
    save_image(tmp_path / "imgs" / "a.jpg", 2)
    save_image(tmp_path / "imgs" / "b.png", 3)
    (tmp_path / "masks").mkdir()
    save_mask(tmp_path / "masks" / "a_mask.png")
    save_mask(tmp_path / "masks" / "b_mask.png")
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
    # issue 35: every output rule on every path and flag combination
    (["lama", "imgs/", "--mask", "masks", "--out", "masks"], "--out masks is the input folder masks"),
    (["lama", "imgs/", "--mask", "masks/", "--out", "./masks"], "--out masks is the input folder masks"),
    (["yolov8n", "imgs/", "--out", "res", "--jsonl", "res"], "--jsonl res is also the --out path"),
    (["yolov8n", "imgs/", "--out", "res", "--jsonl", "./res/", "--resume"], "--jsonl ./res/ is also the --out path"),
    # --jsonl named as one of --out's outputs: it said 'output res/a.jpg exists' (the record file it had created)
    (["yolov8n", "imgs/", "--out", "res", "--jsonl", "res/a.jpg"], "output res/a.jpg is also the --jsonl path"),
    (["yolov8n", "imgs/", "--out", "res", "--save-txt", "--jsonl", "res/labels/b.txt"],
     "output res/labels/b.txt is also the --jsonl path"),
    (["resnet18", "imgs/", "--json", "r.json", "--csv", "./r.json"], "--csv ./r.json is also the --json path"),
    (["resnet18", "imgs/", "--jsonl", "r.jsonl", "--json", "r.jsonl", "--overwrite"], "--json r.jsonl is also the --jsonl"),
    (["resnet18", "imgs/", "--ray", "--out", "imgs"], "--out imgs is the input folder imgs"),
    (["yolov8n", "imgs/", "--ray", "--out", "./imgs/", "--format", "jsonl"], "--out imgs is the input folder imgs"),
    (["resnet18", "imgs/a.jpg", "--ray", "--out", "imgs/a.jpg"], "--out imgs/a.jpg is the input file imgs/a.jpg"),
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


def test_a_file_name_that_is_not_utf8_is_written_and_printed_as_on_disk(work, capsys, monkeypatch):
    """An old archive's Latin-1 name (caf\\xe9.jpg) ended the run in an internal error: --csv and stdout (strict
    UTF-8 outside the C locale) could not encode it. Both hold the name's bytes, as ls prints it; records and JSON
    escape it."""
    import io
    import sys

    name = os.fsdecode(b"caf\xe9.jpg")
    save_image(work / "latin" / name)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["resnet18", "latin", "--csv", "r.csv", "--json", "r.json", "--top-k", "1", *SYNTHETIC]) == 0
    stdout.flush()
    assert b"latin/caf\xe9.jpg:" in stdout.buffer.getvalue() and stdout.errors == "strict"
    assert (work / "r.csv").read_bytes().splitlines()[1].startswith(b"latin/caf\xe9.jpg,")
    assert list(json.loads((work / "r.json").read_text())) == [f"latin/{name}"]


def test_output_names_longer_than_the_file_system_takes_are_one_line(work, capsys):
    """Two inputs of 255-byte names, a.jpg and a.png with a 251-byte stem: the second's outputs, a_2.png and
    labels/a_2.txt, are 257 bytes; and a --json of 305 bytes: each was an internal error ('File name too long').
    Each is now one line naming the output and the fix, before any work."""
    stem = "y" * 251
    save_image(work / "long" / f"{stem}.jpg")
    save_image(work / "long" / f"{stem}.png")
    refused(["yolov8n", "long", "--out", "o", "--save-txt", "--imgsz", "64", *SYNTHETIC], work, capsys,
            f"error: long/{stem}.png: its output o/{'y' * 20}...{'y' * 14}_2.png is a name of 257 bytes, more than "
            "this file system takes (255): rename the input shorter")
    refused(["resnet18", "real.jpg", "--json", "j" * 300 + ".json", *SYNTHETIC], work, capsys,
            f"error: --json {'j' * 20}...{'j' * 15}.json is a name of 305 bytes, more than this file system takes "
            "(255): pass a shorter name")


def test_detect_run_folders_increment_and_outputs_need_exist_ok(work, capsys):
    inputs = file_tree(work)
    args = ["yolov8n", "real.jpg", "imgs/", "--imgsz", "64", *SYNTHETIC]
    assert main(args) == 0 and main(args) == 0  # ultralytics' runs/detect/predict, predict2
    first, second = work / "runs/detect/predict", work / "runs/detect/predict2"
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in second.iterdir()) == [
        "a.jpg", "b.png", "mlx_zoo_run.json", "real.jpg"]
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
    args = ["lama", "r2.jpg", "real.jpg", "--mask", "mask.png", "--out", "out", *SYNTHETIC]
    assert main([*args[:2], *args[3:]]) == 0  # an earlier run of the same options (its settings in out): r2 alone
    (work / "out" / "r2.png").write_bytes(b"an earlier result")  # JPEG inputs are written as PNG in a folder
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


# -- issue 35: temporary files are created exclusively, never through a link, never someone else's -------

def test_a_link_at_the_old_temporary_name_never_leads_a_write_into_an_input(work):
    before = file_tree(work)
    (work / ".out.png.part").symlink_to(work / "real.jpg")  # the fixed temporary name of before
    save_png(Image.new("RGB", (4, 3)), work / "out.png")
    assert Image.open(work / "out.png").size == (4, 3)
    assert (work / ".out.png.part").is_symlink() and {k: v for k, v in file_tree(work).items() if k in before} == before


def test_a_temporary_name_already_taken_is_never_used_nor_deleted(work, monkeypatch):
    """Whatever lies at a temporary name drawn (a link into an input, a user's file), the write goes
    to another name and leaves it as it was, whether the write succeeds or fails."""
    import zoo.files

    draws = iter(["taken", "mine", "free", "taken", "free2"])
    monkeypatch.setattr(zoo.files.secrets, "token_hex", lambda n: next(draws))
    (work / ".out.json.taken.part").symlink_to(work / "real.jpg")
    (work / ".out.json.mine.part").write_text("a user's file")
    before = file_tree(work)
    write_text(work / "out.json", "{}")
    assert (work / "out.json").read_text() == "{}"
    with pytest.raises(ZooError, match="boom"):  # a failed write removes its own temporary file only
        write_atomic(work / "out.json", lambda file: (file.write(b"half"), raise_(ZooError("boom"))))
    assert (work / "out.json").read_text() == "{}"
    assert {k: v for k, v in file_tree(work).items() if k != "out.json"} == before
    assert (work / ".out.json.taken.part").is_symlink()


def raise_(error):
    raise error


def test_a_temporary_file_replaced_meanwhile_is_not_deleted(work):
    out = OutputFile(work / "out.txt")
    out.tmp.unlink()
    out.tmp.write_text("someone else's file, since")
    out.abort()
    assert out.tmp.read_text() == "someone else's file, since" and not (work / "out.txt").exists()


def test_two_writers_of_one_output(work):
    first, second = OutputFile(work / "out.txt"), OutputFile(work / "out.txt", replace=False)
    first.file.write(b"first")
    second.file.write(b"second")
    first.close()
    with pytest.raises(ZooError, match="it appeared while this run was writing it"):
        second.close()  # a new file is never written over one that appeared after the checks
    assert (work / "out.txt").read_text() == "first" and not list(work.glob(".out.txt*"))


def test_an_input_at_the_old_temporary_name_survives(work, capsys):
    """The image is named like --json's old temporary file: before issue 35 the results went into
    the image, and the rename took it away."""
    (work / ".r.json.part").write_bytes((work / "r2.jpg").read_bytes())
    before = file_tree(work)
    assert main(["resnet18", ".r.json.part", "--json", "r.json", *SYNTHETIC]) == 0
    assert "internal error" not in capsys.readouterr().err
    assert {k: v for k, v in file_tree(work).items() if k != "r.json"} == before
    assert list(json.loads((work / "r.json").read_text())) == [".r.json.part"]


def test_ray_out_rules_are_checked_before_ray(work, capsys, monkeypatch):
    import zoo.ray

    monkeypatch.setattr(zoo.ray, "import_ray", lambda: pytest.fail("Ray was imported before the checks"))
    refused(["resnet18", "imgs", "--ray", "--out", "imgs/../imgs", *SYNTHETIC], work, capsys, "is the input folder")
    (work / "out").mkdir()
    (work / "out" / "predictions.parquet").write_bytes(b"an earlier run")
    refused(["resnet18", "imgs", "--ray", "--out", "out", *SYNTHETIC], work, capsys,
            "predictions.parquet exists: pass --overwrite")


def test_overwrite_removes_only_the_masks_the_earlier_run_listed(tmp_path):
    """segment --everything --overwrite: the earlier run's masks it does not write again go; a user's
    file named like a mask, or one a hostile JSON names outside --out, stays."""
    from zoo.cli.segment import listed_masks, remove_stale_masks

    (tmp_path / "secret.png").write_bytes(b"keep")
    out = tmp_path / "out"
    out.mkdir()
    for i in range(3):
        (out / f"photo_everything{i}.png").write_bytes(b"mask")
    (out / "photo_everything7.png").write_bytes(b"a user's file")
    listed = ["photo_everything0.png", "photo_everything1.png", "photo_everything2.png", "../secret.png"]
    (out / "photo_masks.json").write_text(json.dumps({"masks": [{"file": name} for name in listed]}))
    earlier = listed_masks(out / "photo_masks.json")
    remove_stale_masks(out, "photo", earlier, keep={"photo_everything0.png"})
    assert sorted(p.name for p in out.iterdir()) == ["photo_everything0.png", "photo_everything7.png", "photo_masks.json"]
    assert (tmp_path / "secret.png").read_bytes() == b"keep"
    (out / "photo_masks.json").write_text("[42")  # damaged: lists nothing, so nothing is removed
    assert listed_masks(out / "photo_masks.json") == set() and listed_masks(out / "none.json") == set()


# -- issue 35: --jsonl records: one run at a time, resumed by resolved path, a foreign file refused --------

def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resume_keys_inputs_by_resolved_path(work, capsys):
    assert main(["resnet18", "imgs", "--jsonl", "r.jsonl", *SYNTHETIC]) == 0
    for spelling in (str(work / "imgs"), "./imgs/../imgs/"):
        assert main(["resnet18", spelling, "--jsonl", "r.jsonl", "--resume", *SYNTHETIC]) == 0
        assert "0 images classified, 2 skipped (done before)" in capsys.readouterr().err
    records = records_of(work / "r.jsonl")  # the first record carries the run's header
    assert records[0]["mlx_zoo_run"] == {"mlx_zoo": 1, "task": "classify", "model": "resnet18", "folder": str(work),
                                         "settings": {"--weights": "synthetic:0", "--dtype": "float32", "--top-k": 5,
                                                      "--num-classes": None}}
    assert sorted(r["path"] for r in records) == ["imgs/a.jpg", "imgs/b.png"]


def test_resume_from_another_folder_is_refused(work, capsys, monkeypatch):
    """Records name inputs as given: resumed from another folder, imgs/a.jpg there (another file) was skipped as
    done, the results being the first file's. The header keeps the folder the run started in (--jsonl, and detect's
    --out settings file): another folder is one error naming it. A file of an earlier version (no folder) is
    taken as before, unchecked."""
    runs = {"classify": ["resnet18", "imgs/a.jpg", "--jsonl", f"{work}/c.jsonl", *SYNTHETIC],
            "detect --jsonl": ["yolov8n", "imgs/a.jpg", "--imgsz", "64", "--out", f"{work}/d", "--jsonl",
                               f"{work}/d.jsonl", *SYNTHETIC],
            "detect --out": ["yolov8n", "imgs/a.jpg", "--imgsz", "64", "--out", f"{work}/o", *SYNTHETIC]}
    for argv in runs.values():
        assert main(argv) == 0
    elsewhere = work / "elsewhere"
    save_image(elsewhere / "imgs" / "a.jpg", 4)  # another file at the same relative path
    monkeypatch.chdir(elsewhere)
    for argv in runs.values():
        refused([*argv, "--resume"], work, capsys, f"holds results of a run started in the folder {work}: its "
                "relative input paths name other files from here; run from that folder (cd there), or pass another")
    monkeypatch.chdir(work)  # from the folder itself: taken
    for argv in runs.values():
        assert main([*argv, "--resume"]) == 0 and "1 skipped" in capsys.readouterr().err
    for record_file in (work / "c.jsonl", work / "o" / "mlx_zoo_run.json"):  # an earlier version's: no folder
        lines = record_file.read_text().splitlines()
        first = json.loads(lines[0])  # a record carrying the header, or the settings file's header line
        del first.get("mlx_zoo_run", first)["folder"]
        record_file.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    monkeypatch.chdir(elsewhere)
    for argv in (runs["classify"], runs["detect --out"]):
        assert main([*argv, "--resume"]) == 0 and "1 skipped" in capsys.readouterr().err
    # a new run (not resumed) adds to a detect --out from any folder
    assert main(["yolov8n", f"{work}/imgs/b.png", "--imgsz", "64", "--out", f"{work}/d", *SYNTHETIC]) == 0


def test_resume_refuses_records_of_other_settings(work, capsys):
    """--resume with other options than the run it continues: the file mixed two runs' results without a word
    (top-2 and top-5 lists, or two checkpoints' classes); a header without settings (older files) is taken."""
    assert main(["resnet18", "imgs/a.jpg", "--jsonl", "r.jsonl", "--top-k", "2", *SYNTHETIC]) == 0
    before = (work / "r.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["resnet18", "imgs", "--jsonl", "r.jsonl", "--resume", "--top-k", "5",
                 "--weights", "synthetic:7", "--device", "cpu"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: r.jsonl holds results of --weights synthetic:0 --top-k 2, not --weights synthetic:7 --top-k 5: give "
        "the options that made them, or pass another --jsonl PATH, or --overwrite to replace it")
    assert (work / "r.jsonl").read_bytes() == before
    assert main(["resnet18", "imgs", "--jsonl", "r.jsonl", "--resume", "--top-k", "2", *SYNTHETIC]) == 0
    assert "1 image classified, 1 skipped (done before)" in capsys.readouterr().err
    lines = (work / "r.jsonl").read_text().splitlines(keepends=True)
    first = json.loads(lines[0])  # the record that carries the header
    del first["mlx_zoo_run"]["settings"]
    (work / "r.jsonl").write_text(json.dumps(first) + "\n" + "".join(lines[1:]))
    assert main(["resnet18", "imgs", "--jsonl", "r.jsonl", "--resume", "--top-k", "5", *SYNTHETIC]) == 0
    # detect: --batch letterboxes images of different sizes to one square (other boxes), so it is a setting too
    assert main(["yolov8n", "imgs/a.jpg", "--out", "res", "--jsonl", "d.jsonl", "--imgsz", "64", *SYNTHETIC]) == 0
    capsys.readouterr()
    assert main(["yolov8n", "imgs", "--out", "res", "--jsonl", "d.jsonl", "--imgsz", "64", "--batch", "2",
                 "--resume", *SYNTHETIC]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "error: d.jsonl holds results of --batch 1, not --batch 2: give the options that made them")


def test_resume_takes_any_spelling_of_one_class_filter(work, capsys):
    """--classes car,person resumed with person,car, 2,0 or PERSON,2 gives the same boxes: taken, in the records'
    header and in --out's settings file alike; another filter is still refused."""
    assert main(["yolov8n", "imgs/a.jpg", "--out", "res", "--jsonl", "d.jsonl", "--imgsz", "64", "--classes",
                 "car,person", *SYNTHETIC]) == 0
    for spelling in ("person,car", "2,0", "PERSON, 2"):
        for resume in (["--jsonl", "d.jsonl"], []):  # the records' header, --out's settings file
            capsys.readouterr()
            assert main(["yolov8n", "imgs/a.jpg", "--out", "res", *resume, "--imgsz", "64", "--classes", spelling,
                         "--resume", *SYNTHETIC]) == 0, capsys.readouterr().err
            assert "1 skipped (done before)" in capsys.readouterr().err
    refused(["yolov8n", "imgs/a.jpg", "--out", "res", "--imgsz", "64", "--classes", "car", "--resume", *SYNTHETIC],
            work, capsys, "res/mlx_zoo_run.json holds results of --classes 0,2, not --classes 2: give the options that "
            "made them, or pass another --out DIR")
    assert records_of(work / "d.jsonl")[0]["mlx_zoo_run"]["settings"]["--classes"] == "0,2"


def test_resume_takes_imgsz_omitted_as_the_size_the_model_runs_at(work, capsys):
    """--imgsz omitted was recorded as null, so --imgsz 640 (the official checkpoints' default) on --resume was
    refused as other settings: the settings hold the size the model runs at, the checkpoint's training size
    when omitted (a file trained at 96 runs at 96); another size is still refused."""
    from safetensors.numpy import load_file, save_file
    from conftest import synthetic_checkpoint

    weights = synthetic_checkpoint("yolov8n", work / "y96.safetensors")
    save_file(load_file(weights), str(weights), metadata={"imgsz": "96"})
    for given, model, size in ((["--imgsz", "640"], SYNTHETIC, 640), ([], ["--weights", str(weights)], 96)):
        base = ["yolov8n", "imgs/a.jpg", "--out", f"res{size}", "--jsonl", f"d{size}.jsonl", *model]
        assert main([*base, *given]) == 0
        assert records_of(work / f"res{size}" / "mlx_zoo_run.json")[0]["settings"]["--imgsz"] == [size, size]
        for spelling in ([], [str(size)], [str(size), str(size)]):
            for resume in (base, [arg for arg in base if arg not in ("--jsonl", f"d{size}.jsonl")]):
                capsys.readouterr()
                assert main([*resume, *(["--imgsz", *spelling] if spelling else []), "--resume"]) == 0, \
                    capsys.readouterr().err
                assert "1 skipped (done before)" in capsys.readouterr().err
        assert refused([*base, "--imgsz", "128", "--resume"], work, capsys, f"d{size}.jsonl holds results of "
                       f"--imgsz {size} {size}, not --imgsz 128 128: give the options that made them") == 2


def test_resume_takes_an_earlier_versions_imgsz_null_as_the_checkpoints_size(work, capsys):
    """Record files and settings files of earlier versions hold "--imgsz": null where it was omitted (the
    checkpoint's size then too): resumed by a run at that size (omitted, 640 or 640 640) they were refused with no
    option that could match; another size is still refused."""
    base = ["yolov8n", "imgs/a.jpg", "--out", "res", "--jsonl", "d.jsonl", *SYNTHETIC]
    assert main(base) == 0
    for written in (work / "d.jsonl", work / "res" / "mlx_zoo_run.json"):  # as an earlier version wrote them
        lines = written.read_text().splitlines(keepends=True)
        first = json.loads(lines[0])
        header = first.pop("mlx_zoo_run", first)  # carried by a record file's first record: a line of its own then
        header["settings"]["--imgsz"] = None
        written.write_text("".join(json.dumps(line) + "\n" for line in {id(header): header, id(first): first}.values())
                           + "".join(lines[1:]))
    for spelling in ([], ["640"], ["640", "640"]):
        for resume in (base, [arg for arg in base if arg not in ("--jsonl", "d.jsonl")]):
            capsys.readouterr()
            assert main([*resume, *(["--imgsz", *spelling] if spelling else []), "--resume"]) == 0, \
                capsys.readouterr().err
            assert "1 skipped (done before)" in capsys.readouterr().err
    # resumed, the record file of the layout before was written again, its header (now its first record's) this run's
    assert refused([*base, "--imgsz", "128", "--resume"], work, capsys, "d.jsonl holds results of "
                   "--imgsz 640 640, not --imgsz 128 128: give the options that made them") == 2
    without_jsonl = [arg for arg in base if arg not in ("--jsonl", "d.jsonl")]
    assert refused([*without_jsonl, "--imgsz", "128", "--resume"], work, capsys,
                   "res/mlx_zoo_run.json holds results of --imgsz (not given), not --imgsz 128 128") == 2


def test_nan_written_as_null_is_one_note_for_the_run(work, capsys):
    """A model whose outputs are NaN (broken weights, a float16 overflow) got null in its records without a word
    (zoo.files.json_text keeps the JSON valid): now one note at the end of the run, not one a record, names how
    many values and in which files; the next run, without them, has none."""
    from safetensors.numpy import load_file, save_file
    from conftest import synthetic_checkpoint

    weights = synthetic_checkpoint("resnet18", work / "nan.safetensors")
    state = load_file(weights)
    state["fc.weight"][:] = 3e38  # every logit +inf, past float32 (NaN weights are refused as they load)
    save_file(state, str(weights))
    argv = ["resnet18", "imgs", "--top-k", "3", "--device", "cpu"]
    assert main([*argv, "--jsonl", "r.jsonl", "--json", "r.json", "--weights", str(weights)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "written as null" in line]
    assert notes == ["note: 12 NaN or infinite value(s) written as null (JSON has no NaN; a float16 overflow or "
                     "broken weights make them): 6 in r.jsonl, 6 in r.json"]
    assert all(t["probability"] is None for record in read_jsonl(work / "r.jsonl") for t in record["top"])
    assert main([*argv, "--jsonl", "s.jsonl", "--weights", "synthetic:0"]) == 0
    assert "written as null" not in capsys.readouterr().err


def test_resume_takes_a_top_k_beyond_the_classes_as_all_of_them(work, capsys):
    """classify with --num-classes 3: --top-k 5 and 10 both list the 3 classes, so either continues the other."""
    base = ["resnet18", "imgs", "--jsonl", "r.jsonl", "--num-classes", "3", *SYNTHETIC]
    assert main([*base, "--top-k", "5"]) == 0
    assert main([*base, "--top-k", "10", "--resume"]) == 0, capsys.readouterr().err
    assert "0 images classified, 2 skipped (done before)" in capsys.readouterr().err
    refused([*base, "--top-k", "2", "--resume"], work, capsys, "r.jsonl holds results of --top-k 3, not --top-k 2")


def test_classes_setting_is_one_spelling_where_names_are_unknown():
    """A checkpoint's own names are read with the model, after --resume's checks: names (any case) and ids,
    deduplicated and sorted."""
    from zoo.cli.detect import classes_setting

    assert classes_setting("Car, person,2,car,02", None) == classes_setting("2,person,CAR", None) == "2,car,person"
    assert classes_setting("person,car", [0, 2]) == "0,2" and classes_setting(None, None) is None


def test_resume_without_jsonl_refuses_an_out_of_other_settings(work, capsys):
    """detect --resume without --jsonl: its annotated images were taken as done whatever the options that made
    them (another --conf, other weights: two runs' outputs in one folder without a word); --out keeps the run's
    settings (mlx_zoo_run.json) and --resume checks them. A folder without that file (an earlier version's)
    with outputs to skip is one line saying what to do; one without outputs is simply continued."""
    base = ["yolov8n", "imgs/a.jpg", "--out", "res", "--imgsz", "64", *SYNTHETIC]
    assert main(base) == 0
    settings = work / "res" / "mlx_zoo_run.json"
    assert records_of(settings) == [{"mlx_zoo": 1, "task": "detect", "model": "yolov8n", "folder": str(work),
                                     "settings": {
        "--weights": "synthetic:0", "--dtype": "float32", "--conf": 0.25, "--iou": 0.7, "--classes": None,
        "--agnostic-nms": False, "--max-det": 300, "--imgsz": [64, 64], "--retina-masks": False, "--batch": 1}}]
    refused([*base, "--conf", "0.5", "--resume"], work, capsys,
            "res/mlx_zoo_run.json holds results of --conf 0.25, not --conf 0.5: give the options that made "
            "them, or pass another --out DIR")
    refused(["yolov8n", "imgs", "--out", "res", "--imgsz", "64", "--weights", "synthetic:3", "--device", "cpu",
             "--resume"], work, capsys, "holds results of --weights synthetic:0, not --weights synthetic:3")
    assert main(["yolov8n", "imgs", "--out", "res", "--imgsz", "64", "--resume", *SYNTHETIC]) == 0  # the same: taken
    assert "1 image processed, 1 skipped (done before)" in capsys.readouterr().err
    settings.unlink()  # a folder of an earlier version
    refused([*base, "--resume"], work, capsys, "--resume: res/mlx_zoo_run.json is not there, so the 1 output(s) in "
            "res may be of other options than these: run again with --overwrite (all made again) or into a new --out")
    settings.write_text("not ours\n")
    refused([*base, "--resume"], work, capsys, "res/mlx_zoo_run.json line 1 is not a JSON record")
    assert main(["yolov8n", "imgs", "--out", "res", "--imgsz", "64", "--overwrite", *SYNTHETIC]) == 0
    assert records_of(settings)[0]["model"] == "yolov8n"  # every output made again: replaced
    # a new run into the folder: the same settings are taken, others refused (two runs' outputs in one folder)
    refused(["yolov8n", "r2.jpg", "--out", "res", "--imgsz", "64", "--conf", "0.5", *SYNTHETIC], work, capsys,
            "holds results of --conf 0.25, not --conf 0.5: give the options that made them, or pass another "
            "--out DIR, or --overwrite to replace its outputs")
    assert main(["yolov8n", "r2.jpg", "--out", "res", "--imgsz", "64", *SYNTHETIC]) == 0
    refused([*base, "--jsonl", "res/mlx_zoo_run.json"], work, capsys,
            "--jsonl res/mlx_zoo_run.json is also the settings file path: pass another path")
    assert main(["yolov8n", "imgs/a.jpg", "--out", "new", "--imgsz", "64", "--resume", *SYNTHETIC]) == 0
    assert (work / "new" / "mlx_zoo_run.json").exists()  # nothing to skip: continued, and its settings kept


def test_overwrite_of_other_settings_does_not_vouch_for_the_outputs_it_leaves(work, capsys):
    """--overwrite of one image with other options replaced the folder's settings file while the other image's
    output, made with the earlier options, stayed: a --resume with the new options then took it as done. Now the
    settings file goes (one note), so --resume asks for --overwrite; a folder of unknown settings gets none."""
    base = ["yolov8n", "imgs", "--out", "res", "--imgsz", "64", *SYNTHETIC]
    settings = work / "res" / "mlx_zoo_run.json"
    assert main(base) == 0
    assert main(["yolov8n", "imgs/a.jpg", "--out", "res", "--imgsz", "64", "--conf", "0.5", "--overwrite",
                 *SYNTHETIC]) == 0
    assert ("note: b.png in res stays, made with other options than this run's: its settings file mlx_zoo_run.json is "
            "removed, so no later run takes it for this run's output") in capsys.readouterr().err
    assert not settings.exists()
    refused([*base, "--conf", "0.5", "--resume"], work, capsys, "--resume: res/mlx_zoo_run.json is not there")
    assert main([*base, "--conf", "0.5", "--overwrite"]) == 0  # every output made again: the settings are this run's
    assert records_of(settings)[0]["settings"]["--conf"] == 0.5
    settings.unlink()  # outputs of unknown settings: a new run beside them writes no settings file vouching for them
    assert main(["yolov8n", "r2.jpg", "--out", "res", "--imgsz", "64", "--conf", "0.5", *SYNTHETIC]) == 0
    assert not settings.exists()


def test_a_second_run_on_one_jsonl_stops_in_one_line(work, capsys, monkeypatch):
    from zoo import registry
    from zoo.sources import JsonlWriter, records_header

    header = records_header("classify", "resnet18")
    with JsonlWriter(work / "r.jsonl", header=header) as other:  # another run, writing
        other.write({"path": "imgs/a.jpg", "top": []})
        refused(["resnet18", "imgs", "--jsonl", "r.jsonl", "--resume", *SYNTHETIC], work, capsys,
                f"r.jsonl is being written by another run (pid {os.getpid()}): wait for it to end")
    load = registry.load

    def load_while_another_run_starts(*args, **kwargs):  # the other run creates the file after our checks
        JsonlWriter(work / "late.jsonl", header=header).write({"path": "x", "top": []})
        return load(*args, **kwargs)

    monkeypatch.setattr(registry, "load", load_while_another_run_starts)
    assert main(["resnet18", "imgs", "--jsonl", "late.jsonl", *SYNTHETIC]) == 1
    err = capsys.readouterr().err
    assert "error: late.jsonl exists: pass --resume to continue it" in err and "internal error" not in err
    assert records_of(work / "late.jsonl") == [{"path": "x", "top": [], "mlx_zoo_run": header}]
    assert not list(work.glob(".*.part"))


FOREIGN = {"resnet18": ("detect", "yolov8n"), "yolov8n": ("classify", "resnet18")}


@pytest.mark.parametrize("content, message", [
    (b"42\n", "r.jsonl line 1 is not a record of this program"),
    (b"\xff\xfe\n", "r.jsonl line 1 is not a JSON record (damaged"),
    (b'{"path": "imgs/a.jpg", "top": []}\n', "r.jsonl has no header"),
    (None, "another model's records"),
])
@pytest.mark.parametrize("model", ["resnet18", "yolov8n"])
def test_a_damaged_or_foreign_jsonl_is_refused_before_the_model_loads(work, capsys, content, message, model):
    """A damaged file is a problem of the file (exit 1); another model's records are the command line's model
    against its own file's, as a settings mismatch (exit 2)."""
    foreign = content is None
    if foreign:
        task, other = FOREIGN[model]
        content = json.dumps({"mlx_zoo": 1, "task": task, "model": other}).encode() + b"\n"
        message = f"r.jsonl holds {other} ({task}) records, not {model}"
    (work / "r.jsonl").write_bytes(content)
    out = ["--out", "res"] if model == "yolov8n" else []
    code = refused([model, "imgs", "--jsonl", "r.jsonl", "--resume", *out, "--weights", MISSING_WEIGHTS], work, capsys,
                   message)
    assert code == (2 if foreign else 1)


def test_a_jsonl_that_is_no_regular_file_is_refused_before_the_model_loads(tmp_path, capsys):
    from conftest import cli_error

    save_image(tmp_path / "a.jpg")
    os.mkfifo(tmp_path / "fifo.jsonl")  # reading it would wait for a writer for ever
    assert "fifo.jsonl is not a regular file" in cli_error(
        ["resnet18", str(tmp_path / "a.jpg"), "--jsonl", str(tmp_path / "fifo.jsonl"), "--resume", "--weights",
         MISSING_WEIGHTS], capsys)
    # --overwrite never replaces one either (as root, --jsonl /dev/stdout --overwrite replaced /dev/stdout)
    (tmp_path / "stdout").symlink_to(tmp_path / "fifo.jsonl")
    for flag, path in (("--jsonl", "fifo.jsonl"), ("--csv", "stdout"), ("--json", "stdout")):
        assert f"{flag} {tmp_path / path} is not a regular file" in cli_error(
            ["resnet18", str(tmp_path / "a.jpg"), flag, str(tmp_path / path), "--overwrite", "--weights",
             MISSING_WEIGHTS], capsys)
    assert (tmp_path / "fifo.jsonl").is_fifo() and (tmp_path / "stdout").is_symlink()



@pytest.mark.parametrize("code", ["ENOLCK", "EBADF"])
def test_a_file_system_without_locks_runs_unlocked_with_one_note(code, work, monkeypatch, capsys):
    """A folder on a file system that keeps no locks (NFS without its lock daemon: flock fails with ENOLCK), or none
    on a folder (NFS's flock of a descriptor not open for writing: EBADF): the run goes on, unlocked, and says so
    once. Before, --out there was 'error: internal error (OSError: [Errno 37] No locks available)', and --jsonl there
    'cannot write r.jsonl: No locks available', leaving the empty r.jsonl it had created, which the next run refused
    as existing."""
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(getattr(errno, code), "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    monkeypatch.setattr("zoo.files._unlocked_devices", set(), raising=False)  # a note per process
    assert main(["yolov8n", "imgs", "--out", "o", "--jsonl", "r.jsonl", "--imgsz", "64", *SYNTHETIC]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == ["note: o: its file system does not lock files (No locks available): a second run writing the "
                     "same outputs at the same time would not be stopped"]  # one note: o and r.jsonl share it
    assert sorted(os.listdir(work / "o")) == ["a.jpg", "b.png", "mlx_zoo_run.json"]
    assert [r["path"] for r in read_jsonl(work / "r.jsonl")] == ["imgs/a.jpg", "imgs/b.png"]

# a run paused inside its work: its first image written, it waits for its stdin to close (then it goes on)
PAUSED_RUN = r"""
import sys
from zoo.results import ResultFiles
from zoo.run import main

write = ResultFiles.write

def write_then_wait(self, *args):
    write(self, *args)
    print("paused", flush=True)
    sys.stdin.read()

ResultFiles.write = write_then_wait
sys.exit(main(sys.argv[1:]))
"""


def test_a_second_run_into_one_out_folder_stops_before_any_work(work, capsys):
    """Two runs into one --out: the second stops in one line naming the first, whatever its task or flags (a --ray
    run too), and writes nothing; the folder's lock is a flock on the folder itself (no file added), gone when the
    first ends, even by SIGKILL. Before, a second detect run interleaved with the first (each failed half the images
    on the other's files), --resume took the first run's images as its own and did the rest beside it; a --ray run
    took no lock at all (with --overwrite it replaced the predictions file of a --ray run writing there)."""
    import signal
    import subprocess
    import sys

    first = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, "yolov8n", "imgs", "--out", "o", "--imgsz", "64",
                              *SYNTHETIC], cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "paused\n"  # a.jpg annotated, b.png not yet
        assert sorted(os.listdir(work / "o")) == ["a.jpg", "mlx_zoo_run.json"]
        busy = f"o is being written by another run (pid {first.pid}): wait for it to end, or pass another --out"
        missing = ["--weights", MISSING_WEIGHTS]  # were the lock not there, the run would go on to read them
        for argv in (["yolov8n", "imgs", "--out", "o", *missing],
                     ["yolov8n", "imgs", "--out", "o", "--resume", *missing],
                     ["yolov8n", "imgs", "--out", "./o/", "--overwrite", *missing],  # however spelled
                     ["yolo11n-seg", "real.jpg", "--out", str(work / "o"), "--save-txt", *missing],
                     ["mobilesam", "imgs", "--point", "5,5", "--out", "o", *missing],
                     ["lama", "imgs", "--mask", "masks", "--out", "o", *missing],
                     ["annotate", "real.jpg", "--out", "o", "--det-weights", MISSING_WEIGHTS],
                     ["resnet18", "imgs", "--ray", "--out", "o", *missing]):  # a Ray run too, before Ray starts
            refused(argv, work, capsys, busy.replace("o is", f"{Path(argv[argv.index('--out') + 1])} is"))
    finally:
        first.kill()  # SIGKILL: no handler of the run's own releases anything
        assert first.wait(timeout=60) == -signal.SIGKILL
    assert main(["yolov8n", "imgs", "--out", "o", "--resume", "--imgsz", "64", *SYNTHETIC]) == 0
    assert "1 image processed, 1 skipped (done before)" in capsys.readouterr().err
    assert sorted(os.listdir(work / "o")) == ["a.jpg", "b.png", "mlx_zoo_run.json"]  # and no lock file


@pytest.mark.parametrize("argv, message", [
    (["yolov8n", "real.jpg", "--out", "dangling"], "--out dangling cannot be created: dangling is a link to a missing "
     "path (gone/target): create the folder it points to, or pass another path"),
    (["mobilesam", "real.jpg", "--point", "5,5", "--out", "dangling/sub"], "dangling is a link to a missing path"),
    (["resnet18", "real.jpg", "--json", "dangling/r.json"],
     "its folder dangling cannot be created: dangling is a link"),
    (["yolov8n", "real.jpg", "--out", "loop"], "loop is a link in a loop of links: remove or change the link, or pass "
     "another path"),
])
def test_an_out_folder_on_a_link_to_nowhere_says_so(work, capsys, argv, message):
    """--out on a link to a missing path (or a loop of links) said 'cannot be created (File exists): pass a folder
    you can write', of a name that exists nowhere to be seen."""
    (work / "dangling").symlink_to("gone/target")
    (work / "loop").symlink_to("loop")
    refused([*argv, "--weights", MISSING_WEIGHTS], work, capsys, message)


def test_runs_into_nested_out_folders_stop_and_runs_beside_go_on(work, capsys):
    """A run into a folder inside another run's --out, or around it, stops in one line naming the other run, before
    any work: each run holds a shared flock on every folder above its --out. Before, a run into o/crops/person
    beside a run into o went on: with --overwrite it replaced the other's files, with --resume it took them as its
    own done images. A folder beside the other's --out is no conflict."""
    import subprocess
    import sys

    first = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, "yolov8n", "imgs", "--out", "mid/o", "--imgsz", "64",
                              *SYNTHETIC], cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "paused\n"
        missing = ["--weights", MISSING_WEIGHTS]  # were the locks not there, the run would go on to read them
        inside = (f"is inside {(work / 'mid' / 'o').resolve()}, which is being written by another run "
                  f"(pid {first.pid}): wait for it to end, or pass another --out outside it")
        for out in ("mid/o/crops/person", "mid/o/sub"):
            for flag in ("--overwrite", "--resume"):
                refused(["yolov8n", "imgs", "--out", out, flag, *missing], work, capsys, f"--out {out} {inside}")
        refused(["lama", "imgs", "--mask", "masks", "--out", "mid/o/x", *missing], work, capsys, inside)
        refused(["yolov8n", "imgs", "--ray", "--out", "mid/o/x", *missing], work, capsys, inside)
        for out in ("mid", "."):  # around the first run's --out
            for ray in ([], ["--ray"]):
                refused(["yolov8n", "imgs", "--out", out, "--overwrite", *ray, *missing], work, capsys,
                        f"{Path(out)} holds the output folder of another run (pid {first.pid}) inside it: wait for it "
                        "to end, or pass another --out")
        assert main(["yolov8n", "imgs", "--out", "mid/beside", "--imgsz", "64", *SYNTHETIC]) == 0
        assert main(["yolov8n", "imgs", "--out", "mid/o2", "--imgsz", "64", *SYNTHETIC]) == 0  # a name's prefix only
        first.stdin.close()
        assert first.wait(timeout=120) == 0
    finally:
        first.kill()
    assert sorted(os.listdir(work / "mid")) == ["beside", "o", "o2"]
    assert sorted(os.listdir(work / "mid" / "o")) == ["a.jpg", "b.png", "mlx_zoo_run.json"]
    # the locks went with the runs: nested runs one after the other are free (their own outputs kept apart)
    assert main(["yolov8n", "imgs", "--out", "mid/o/sub", "--imgsz", "64", *SYNTHETIC]) == 0


def test_one_process_locks_nested_folders_of_its_own(tmp_path):
    """A process locking a folder and then one around it (its shared lock made exclusive), or the reverse, never
    stops itself; another open file (another run) then finds both held; release_output_folders frees them all."""
    import fcntl

    from zoo.files import lock_output_folder, release_output_folders

    def held(folder: Path, operation: int) -> bool:
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    try:
        lock_output_folder(tmp_path / "o" / "sub", "--out")
        assert held(tmp_path / "o" / "sub", fcntl.LOCK_SH) and held(tmp_path / "o", fcntl.LOCK_EX)
        assert not held(tmp_path / "o", fcntl.LOCK_SH)  # only shared: a run beside o/sub goes on
        lock_output_folder(tmp_path / "o", "--out")
        lock_output_folder(tmp_path / "o" / "sub" / "deeper", "--out")
        assert held(tmp_path / "o", fcntl.LOCK_SH) and held(tmp_path / "o" / "sub" / "deeper", fcntl.LOCK_SH)
    finally:
        release_output_folders()
    assert not any(held(tmp_path / f, fcntl.LOCK_EX) for f in ("o", "o/sub", "o/sub/deeper"))


def test_an_ancestor_that_cannot_be_opened_or_locked_never_fails_a_run(work, monkeypatch):
    """The shared locks above --out are passed over where a folder cannot be opened (no read permission) or its
    file system keeps no locks: the run goes on, its own folder locked."""
    import errno
    import fcntl

    from zoo import files

    flock = fcntl.flock

    def shared_fails(fd, operation):
        if operation & fcntl.LOCK_SH:
            raise OSError(errno.ENOLCK, "No locks available")
        return flock(fd, operation)

    opened = files.open_folder
    monkeypatch.setattr(fcntl, "flock", shared_fails)
    monkeypatch.setattr(files, "open_folder", lambda path: (
        opened(path) if path == Path("o") else (_ for _ in ()).throw(PermissionError(errno.EACCES, "denied"))))
    assert main(["yolov8n", "imgs", "--out", "o", "--imgsz", "64", *SYNTHETIC]) == 0
    monkeypatch.setattr(files, "open_folder", opened)
    assert main(["yolov8n", "imgs", "--out", "o", "--imgsz", "64", "--overwrite", *SYNTHETIC]) == 0
    assert sorted(os.listdir(work / "o")) == ["a.jpg", "b.png", "mlx_zoo_run.json"]


@pytest.mark.parametrize("flag, folder", [("--save-txt", "labels"), ("--save-crop", "crops")])
def test_a_file_where_detect_writes_its_labels_or_crops_is_refused_before_any_work(flag, folder, work, capsys):
    """A file named labels (crops) in --out: every image failed on it, each after its annotated image was
    written, then 'none of the 2 images could be read: pass image files Pillow can open' (--save-crop: internal
    error)."""
    (work / "o").mkdir()
    (work / "o" / folder).write_text("mine")
    refused(["yolov8n", "imgs", "--out", "o", flag, *SYNTHETIC], work, capsys,
            f"o/{folder} is a file, where {flag} writes its {folder}: move it, or pass another --out")
