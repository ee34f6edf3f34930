"""`kill -9` at any moment, then --resume: every input exactly once in every record file (issue 35).

A real SIGKILL (no handler runs, as the OOM killer or a power cut) ends a child `python -m zoo.run`
at chosen moments, by a hook the child installs on the writers before it runs (no sleeps tuned to
the machine's speed): right after a batch's records reached predictions.json and before its
annotated images, halfway through writing a record (a torn last line), right after an annotated
image (the last of an image's files: --resume takes it as done) and before its --jsonl record, just
before the closing ``]``; and at a moment the test does
not choose (once a file grows, wherever the run has got to by then). Each kill is followed by
--resume, killed again; the last --resume finishes. The records then equal an uninterrupted run's:
none lost, none twice, predictions.json read by json.load and pycocotools' COCO.loadRes. Also: a
video killed halfway, two inputs of one file name, classify's --json/--csv (written again from
--jsonl), and a damaged list refused in one line.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import cli_error
from zoo.run import main
from zoo.sources import read_jsonl

ROOT = Path(__file__).resolve().parent.parent

# the child: install the hook named by argv[1] ("WHERE:K"), then run zoo.run with the rest of argv
CHILD = r"""
import json, os, signal, sys
from zoo.results import Results, ResultFiles
from zoo.sources import JsonListWriter, JsonlWriter
from zoo.run import main

where, k = sys.argv[1].split(":")
k, calls = int(k), [0]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def after(owner, name):  # SIGKILL once the k-th call has returned
    original = getattr(owner, name)
    def hooked(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls[0] += 1
        if calls[0] == k:
            die()
        return out
    setattr(owner, name, hooked)

def torn_record(self, record):  # the k-th record half written, on disk, then SIGKILL
    calls[0] += 1
    if calls[0] == k:
        line = json.dumps(record)
        self.file.write((",\n  " if self.count else "\n  ") + line[: len(line) // 2])
        self.file.flush()
        die()
    written(self, record)

written = JsonListWriter.write
if where == "synced":      # the batch's records on disk, its annotated images not yet
    after(JsonListWriter, "sync")
elif where == "annotated":  # an image's outputs written, its --jsonl record not yet
    after(ResultFiles, "write")
elif where == "saved":      # an annotated image written (the last of an image's outputs)
    after(Results, "save")
elif where == "recorded":   # a batch's --jsonl records on disk
    after(JsonlWriter, "sync")
elif where == "torn":
    JsonListWriter.write = torn_record
elif where == "closing":   # every image done, the list's "]" not yet
    JsonListWriter.close = lambda self: die()
sys.exit(main(sys.argv[2:]))
"""

# (name, height, width) in the folder's order: numeric stems take their number as COCO image_id, the others
# a running one; with --classes refrigerator the synthetic weights find 3 in a 64x64 image and none in a
# wide one (letterboxed to 32x64): images without detections
IMAGES = [("000000000139", 64, 64), ("000000000285", 8, 64), ("42", 64, 64), ("7", 20, 64), ("cat", 64, 64),
          ("dog", 8, 64), ("street", 64, 64), ("wide", 20, 64)]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kill") / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, h, w in IMAGES:
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"{name}.png")
    return folder


@pytest.fixture(scope="module")
def raw_weights(tmp_path_factory) -> Path:
    """yolov8n's synthetic_state_dict as drawn (``synthetic:0`` gives the head an untrained detector's
    biases, one box an image): its class scores spread, so some images have detections and some none."""
    from safetensors.numpy import save_file

    from conftest import MANIFESTS
    from zoo.weights.synthetic import read_manifest, synthetic_state_dict

    path = tmp_path_factory.mktemp("weights") / "yolov8n_raw.safetensors"
    save_file(synthetic_state_dict(read_manifest(MANIFESTS / "yolov8n.json"), 0), str(path))
    return path


@pytest.fixture(autouse=True)
def in_root(monkeypatch):
    """Run here in ROOT, the children's folder (they import zoo from it): a run resumed here continues theirs
    (records keep the folder a run started in, and --resume from another folder is refused)."""
    monkeypatch.chdir(ROOT)


def detect_argv(inputs: list[Path], out: Path, jsonl: Path | None, weights: Path) -> list[str]:
    return ["yolov8n", *map(str, inputs), "--weights", str(weights), "--device", "cpu", "--imgsz", "64", "--conf", "0.59",
            "--classes", "refrigerator", "--batch", "1", "--save-json", "--save-txt", "--out", str(out),
            *(["--jsonl", str(jsonl)] if jsonl else [])]


def killed_run(argv: list[str], hook: str) -> None:
    """The run in a child process, ended by SIGKILL where ``hook`` says (or finished, when it never came)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, hook, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode in (-signal.SIGKILL, 0), proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def killed_somewhere(argv: list[str], grows: Path) -> None:
    """The run in a child process, SIGKILLed once ``grows`` has more bytes than before: wherever the run has
    got to by the time the signal lands (a moment the test does not choose), or finished before it."""
    before = grows.stat().st_size if grows.exists() else 0
    proc = subprocess.Popen([sys.executable, "-m", "zoo.run", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        while proc.poll() is None and (grows.stat().st_size if grows.exists() else 0) <= before:
            time.sleep(0.005)  # polling: how soon the kill lands does not matter
    finally:
        proc.kill()
        proc.wait(timeout=60)


def outputs(out: Path) -> dict[str, bytes]:
    """The run folder's finished files (a killed run's hidden temporary files left out)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def check_coco(path: Path, image_ids: set[int]) -> list[dict]:
    """predictions.json as json.load and pycocotools read it."""
    from pycocotools.coco import COCO

    with open(path) as f:
        records = json.load(f)
    ground_truth = COCO()
    ground_truth.dataset = {"images": [{"id": i} for i in sorted(image_ids)], "annotations": [],
                            "categories": [{"id": c} for c in {r["category_id"] for r in records}]}
    ground_truth.createIndex()
    assert len(ground_truth.loadRes(str(path)).getAnnIds()) == len(records)
    return records


@pytest.mark.parametrize("hooks, with_jsonl", [
    (["synced:2", "saved:2", "torn:4", "closing:0"], False),
    (["synced:1", "annotated:3", "torn:2", "somewhere"], True),
])
def test_detect_killed_at_any_moment_then_resumed_has_every_image_once(images, raw_weights, tmp_path, capsys, hooks,
                                                                     with_jsonl):
    fresh_out = tmp_path / "fresh"
    fresh_jsonl = tmp_path / "fresh.jsonl" if with_jsonl else None
    assert main(detect_argv([images], fresh_out, fresh_jsonl, raw_weights)) == 0
    expected = outputs(fresh_out)
    fresh = json.loads(expected.pop("predictions.json"))
    assert {r["file_name"] for r in fresh} == {f"{n}.png" for n, h, w in IMAGES if (h, w) == (64, 64)}  # 3 each
    ids = {r["image_id"] for r in fresh} | {139, 42, 7, 285} | set(range(286, 286 + len(IMAGES)))

    out, jsonl = tmp_path / "out", tmp_path / "d.jsonl" if with_jsonl else None
    argv = detect_argv([images], out, jsonl, raw_weights)
    for n, hook in enumerate(hooks):
        resume = ["--resume"] * (n > 0)
        if hook == "somewhere":
            killed_somewhere(argv + resume, out / "predictions.json")
        else:
            killed_run(argv + resume, hook)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    assert "internal error" not in capsys.readouterr().err
    # every image once: the same records as the uninterrupted run's (order aside), and the same files
    records = check_coco(out / "predictions.json", ids)
    assert sorted(map(json.dumps, records)) == sorted(map(json.dumps, fresh))
    assert {k: v for k, v in outputs(out).items() if k != "predictions.json"} == expected
    if with_jsonl:
        def summary(path):
            return sorted((r["path"], json.dumps(r["detections"])) for r in read_jsonl(path))
        assert summary(jsonl) == summary(fresh_jsonl)  # one record an image, none twice


def test_a_damaged_predictions_json_is_refused_before_the_model_loads(images, tmp_path, capsys, raw_weights):
    out = tmp_path / "out"
    argv = detect_argv([images], out, None, raw_weights)
    killed_run(argv, "synced:1")
    left = (out / "predictions.json").read_bytes()
    assert left.startswith(b"[\n  {") and not left.rstrip().endswith(b"]")  # unfinished: its records on disk
    # left by a killed run: still refused without --resume
    assert "predictions.json exists: pass --overwrite" in cli_error(argv, capsys)
    damaged = left.replace(b",\n", b",\n  garbage\n", 1) + b",\n  {}"
    (out / "predictions.json").write_bytes(damaged)
    before = outputs(out)
    error = cli_error([*argv, "--resume"], capsys)
    assert error == (f"error: {out / 'predictions.json'} line 3 is not a record of an unfinished JSON list "
                     "(damaged, or not a file this program wrote): pass --overwrite to replace it")
    assert outputs(out) == before  # nothing written, nothing removed


def test_classify_killed_then_resumed_writes_json_and_csv_with_every_image_once(images, tmp_path, capsys):
    """classify's --json and --csv are whole files (a killed run leaves none under their names); --resume,
    which needs --jsonl, writes them again from every record, the killed run's included."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for name in ("cat", "dog", "wide"):
        (inputs / f"{name}.png").write_bytes((images / f"{name}.png").read_bytes())
    argv = ["resnet18", str(inputs), "--weights", "synthetic:0", "--device", "cpu", "--top-k", "2",
            *(f"--{kind}={tmp_path}/run.{kind}" for kind in ("jsonl", "json", "csv"))]
    killed_run(argv, "recorded:1")  # the first image's record on disk
    assert len(read_jsonl(tmp_path / "run.jsonl")) == 1 and not (tmp_path / "run.json").exists()
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    assert "2 images classified, 1 skipped" in capsys.readouterr().err
    records = read_jsonl(tmp_path / "run.jsonl")
    assert sorted(r["path"] for r in records) == sorted(str(p) for p in inputs.iterdir())
    assert json.loads((tmp_path / "run.json").read_text()) == {r["path"]: r["top"] for r in records}
    rows = (tmp_path / "run.csv").read_text().splitlines()
    assert sorted(row.split(",")[0] for row in rows[1:]) == sorted(r["path"] for r in records)


def test_resume_tells_images_of_one_file_name_apart(images, tmp_path, capsys, raw_weights):
    """Two inputs named x.png (running ids 1 and 2): the second killed after its records, before its
    annotated image x_2.png; --resume keeps the first's records and makes the second's again, once."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.png").write_bytes((images / "cat.png").read_bytes())
    argv = detect_argv([tmp_path / "a" / "x.png", tmp_path / "b" / "x.png"], tmp_path / "out", None, raw_weights)
    assert main(argv) == 0
    fresh = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert sorted({(r["image_id"], r["file_name"]) for r in fresh}) == [(1, "x.png"), (2, "x.png")]
    (tmp_path / "out" / "x_2.png").unlink()
    assert main([*argv, "--resume"]) == 0
    assert "1 image processed, 1 skipped" in capsys.readouterr().err
    again = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert sorted(map(json.dumps, again)) == sorted(map(json.dumps, fresh))


def test_detect_killed_inside_a_video_then_resumed_has_every_frame_once(images, tmp_path, raw_weights):
    """A video's annotated file is renamed into place when its last frame is written: killed after some of
    its frames' records reached predictions.json, --resume does the video again and drops those records."""
    from zoo.sources import VideoWriter

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    with VideoWriter(inputs / "clip.mp4", fps=10) as video:
        for i in range(6):
            video.write(np.full((64, 64, 3), 40 * i, np.uint8))
    (inputs / "street.png").write_bytes((images / "cat.png").read_bytes())
    assert main(detect_argv([inputs], tmp_path / "fresh", None, raw_weights)) == 0
    fresh = json.loads((tmp_path / "fresh" / "predictions.json").read_text())
    assert {r["file_name"] for r in fresh} == {"clip.mp4", "street.png"}
    argv = detect_argv([inputs], tmp_path / "out", None, raw_weights)
    killed_run(argv, "synced:3")  # three frames' records on disk, the video not yet
    assert not (tmp_path / "out" / "clip.mp4").exists()
    assert main([*argv, "--resume"]) == 0
    records = check_coco(tmp_path / "out" / "predictions.json", {r["image_id"] for r in fresh})
    assert sorted(map(json.dumps, records)) == sorted(map(json.dumps, fresh))


def test_save_json_first_given_on_resume_is_refused(images, tmp_path, capsys, raw_weights):
    """A list of only the resumed images' records would miss the images done before: refused, nothing written."""
    out = tmp_path / "out"
    argv = [a for a in detect_argv([images], out, None, raw_weights) if a != "--save-json"]
    killed_run(argv, "annotated:2")
    before = outputs(out)
    error = cli_error([*argv, "--save-json", "--resume"], capsys)
    assert "predictions.json is not there" in error and "done before would have no records" in error
    assert outputs(out) == before


def two_images_saved_as_json(images: Path, tmp_path: Path, raw_weights) -> tuple[Path, list[str], list[dict]]:
    """A --save-json run over a folder of b.png and c.png (image_ids 1 and 2): the folder, the command, its
    predictions.json."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for name, source in (("b", "cat"), ("c", "dog")):
        (inputs / f"{name}.png").write_bytes((images / f"{source}.png").read_bytes())
    argv = [*detect_argv([inputs], tmp_path / "out", None, raw_weights), "--conf", "0.001"]
    assert main(argv) == 0
    first = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert {(r["image_id"], r["file_name"]) for r in first} == {(1, "b.png"), (2, "c.png")}
    return inputs, argv, first


def refused_until_it_comes_last(argv: list[str], capsys, added: Path, error: str) -> list[dict]:
    """--resume with ``added`` before the inputs done: refused in one line (``error``), nothing written; renamed to
    come after them (d.*), resumed. -> the predictions.json then."""
    out = Path(argv[argv.index("--out") + 1])
    before = outputs(out)
    assert cli_error([*argv, "--resume"], capsys) == error
    assert outputs(out) == before
    added.rename(added.with_stem("d"))
    assert main([*argv, "--resume"]) == 0
    return json.loads((out / "predictions.json").read_text())


def test_resume_refuses_a_predictions_json_whose_ids_this_run_gives_to_other_images(images, tmp_path, capsys,
                                                                                    raw_weights):
    """Running image_ids follow the images' order: an image added before those of the run --resume continues
    shifts them. Before, b.png's records (id 1) were dropped as a.png's and c.png's (id 2) kept as b.png's, without
    a word; refused now, nothing written. An image added after them changes no id: resumed as before."""
    inputs, argv, first = two_images_saved_as_json(images, tmp_path, raw_weights)
    (inputs / "a.png").write_bytes((images / "wide.png").read_bytes())
    again = refused_until_it_comes_last(
        argv, capsys, inputs / "a.png",
        f"error: --save-json on --resume: {tmp_path / 'out' / 'predictions.json'} gives image_id 1 to b.png, which "
        "this run gives to a.png (images were added or removed before it since): the two runs' ids would mix and its "
        "records be dropped or taken for another image's; run again into a new --out, or continue without --save-json")
    assert [r for r in again if r["file_name"] != "d.png"] == first and {r["image_id"] for r in again} == {1, 2, 3}


def test_resume_refuses_a_video_not_done_before_inputs_done_with_records(images, tmp_path, capsys, raw_weights):
    """A video's frames get their ids as they are decoded. A video added before the images of the run --resume
    continues took the ids their kept records hold: b.png's id 1 went to a.mp4's first frame as well, two images
    of one id in predictions.json, without a word. Refused now, before the model loads, nothing written; a video
    added after them resumes as before."""
    from zoo.sources import VideoWriter

    inputs, argv, first = two_images_saved_as_json(images, tmp_path, raw_weights)
    with VideoWriter(inputs / "a.mp4", fps=10) as video:
        for i in range(3):
            video.write(np.full((64, 64, 3), 40 * i, np.uint8))
    refused_until_it_comes_last(
        argv, capsys, inputs / "a.mp4",
        f"error: --save-json on --resume: {tmp_path / 'out' / 'predictions.json'} holds b.png (image_id 1), done "
        "before a.mp4 is, which comes before it: the video's frames get their ids as they are decoded and would take "
        "the ids its records hold; run again into a new --out, or continue without --save-json")
    again = check_coco(tmp_path / "out" / "predictions.json", {1, 2, 3, 4, 5})
    assert [r for r in again if r["file_name"] != "d.mp4"] == first
    assert {r["image_id"] for r in again if r["file_name"] == "d.mp4"} == {3, 4, 5}  # its 3 frames, after c.png's 2


@pytest.mark.parametrize("damaged", [False, True])
def test_a_video_then_images_killed_after_an_image_is_resumed(images, tmp_path, capsys, raw_weights, damaged):
    """A video's annotated file was finished (renamed into place) only when the next video began or the run ended:
    killed after an image that follows a video read to its end (or to its damage), the video was not done, and
    --resume --save-json took it for one added before the images done (whose frames would take their kept ids):
    refused, with no way to continue into that --out with --save-json (a damaged video never ends otherwise). The
    video is finished when the next input's first result comes now: --resume skips it, the images' ids are those
    of the first run, and the records equal an uninterrupted run's."""
    from zoo.sources import VideoWriter

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    clip = inputs / f"a.{'avi' if damaged else 'mp4'}"  # AVI: its header counts the frames, so a cut one is damaged
    with VideoWriter(clip, fps=10) as video:
        for i in range(40 if damaged else 3):
            video.write(np.full((64, 64, 3), 6 * i, np.uint8))
    if damaged:
        clip.write_bytes(clip.read_bytes()[:clip.stat().st_size * 2 // 3])
    for name, source in (("b", "cat"), ("c", "street")):
        (inputs / f"{name}.png").write_bytes((images / f"{source}.png").read_bytes())
    assert main(detect_argv([inputs], tmp_path / "fresh", None, raw_weights)) == int(damaged)
    fresh = json.loads((tmp_path / "fresh" / "predictions.json").read_text())
    assert {r["file_name"] for r in fresh} >= {"b.png", "c.png"}
    out = tmp_path / "out"
    argv = detect_argv([inputs], out, None, raw_weights)
    killed_run(argv, "saved:1")  # b.png's annotated image written, c.png not begun
    assert (out / "a.mp4").exists() and (out / "b.png").exists() and not (out / "c.png").exists()
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0  # the damaged video's bad frame was reported by the first run
    assert "1 image processed" in capsys.readouterr().err
    records = check_coco(out / "predictions.json", {r["image_id"] for r in fresh})
    assert sorted(map(json.dumps, records)) == sorted(map(json.dumps, fresh))
    assert sorted(outputs(out)) == sorted(outputs(tmp_path / "fresh"))


def test_resume_refuses_an_input_done_before_that_is_not_there(images, tmp_path, monkeypatch, capsys, raw_weights):
    """A .txt list's entry is read from the current folder where it is not beside the list (ultralytics' order), so
    --resume after that file moved found an input done before nowhere: with --jsonl it was done again (its records
    name another path), failed 'not found', and its records were dropped from --jsonl and predictions.json while
    its annotated image stayed. One error now, before any work; the records are kept. (Resumed from another folder
    it is refused before that: test_outputs.py::test_resume_from_another_folder_is_refused.)"""
    work = tmp_path / "work"
    (work / "imgs").mkdir(parents=True)
    for name in ("cat", "dog"):
        (work / "imgs" / f"{name}.png").write_bytes((images / f"{name}.png").read_bytes())
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "x.txt").write_text("imgs/cat.png\nimgs/dog.png\n")  # written from work/
    argv = detect_argv([tmp_path / "lists" / "x.txt"], tmp_path / "out", tmp_path / "r.jsonl", raw_weights)
    monkeypatch.chdir(work)
    assert main(argv) == 0
    records = {p: p.read_bytes() for p in (tmp_path / "r.jsonl", tmp_path / "out" / "predictions.json")}
    (work / "imgs" / "cat.png").rename(tmp_path / "cat.png")  # not there now, nor beside the list
    assert cli_error([*argv, "--resume"], capsys).startswith(
        f"error: --resume: {tmp_path / 'lists' / 'imgs' / 'cat.png'} is not there, but its output ")
    assert {p: p.read_bytes() for p in records} == records
    (tmp_path / "cat.png").rename(work / "imgs" / "cat.png")
    assert main([*argv, "--resume"]) == 0 and "2 skipped" in capsys.readouterr().err
