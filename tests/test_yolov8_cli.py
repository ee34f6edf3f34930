"""python -m zoo.run yolov8n: end to end on generated images, and one-line errors for bad input."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from zoo.cli.detect import output_name
from zoo.models import yolov8
from zoo.sources import Files, read_jsonl
from zoo.errors import ZooError
from zoo.results import Results
from zoo.run import main
from conftest import cli_error


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (90, 120, 3), dtype=np.uint8)).save(folder / "street.png")
    Image.fromarray(rng.integers(0, 256, (100, 70, 3), dtype=np.uint8)).save(folder / "tall.jpg")
    return folder


def detect(argv, tmp_path):
    return main(["yolov8n", *argv, "--weights", "synthetic:0", "--device", "cpu", "--imgsz", "64",
                 "--out", str(tmp_path / "out")])


def test_end_to_end_writes_annotated_images_and_json(images, tmp_path, capsys):
    assert detect([str(images / "street.png"), "--conf", "0.05", "--save-json"], tmp_path) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and re.fullmatch(r"street\.png: (\d+ [a-z ]+, )*\d+ [a-z ]+ \(\d+\.\d ms\)", printed[0])
    out = tmp_path / "out"
    with Image.open(out / "street.png") as im:
        assert im.size == (120, 90)
    rows = json.loads((out / "predictions.json").read_text())
    assert rows and set(rows[0]) == {"image_id", "file_name", "category_id", "bbox", "score"}
    assert len(rows[0]["bbox"]) == 4 and all(r["score"] > 0.05 for r in rows)
    assert {(r["image_id"], r["file_name"]) for r in rows} == {(1, "street.png")}  # no numeric stem: a running id
    counts = {}
    for r in rows:  # COCO's category ids: the synthetic weights carry COCO's 80 names
        name = yolov8.class_names()[yolov8.COCO91_IDS.index(r["category_id"])]
        counts[name] = counts.get(name, 0) + 1
    assert all(f"{n} {name}" in printed[0] for name, n in counts.items())
    assert not [p for p in out.iterdir() if p.name.endswith(".part")]


def test_folder_with_a_corrupt_file_and_class_filter(images, tmp_path, capsys):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for f in images.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    (folder / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    assert detect([str(folder), "--conf", "0.05", "--classes", "remote,0", "--max-det", "3",
                   "--agnostic-nms", "--iou", "0.5"], tmp_path) == 1  # 1: one image failed
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["street.png", "tall.jpg"]
    for line in lines:
        found = re.findall(r"(\d+) ([a-z ]+)", line.split(": ")[1].split(" (")[0])
        singular = {name[:-1] if int(n) > 1 else name for n, name in found}  # ultralytics' '2 remotes'
        # class 0 is person: the synthetic detector's only class (zoo.models.yolov8.synthetic_init)
        assert found and singular <= {"remote", "person"}
        assert sum(int(n) for n, _ in found) <= 3
    errors = [line for line in captured.err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "broken.jpg" in errors[0]
    assert "2 images processed, 1 failed" in captured.err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mlx_zoo_run.json", "street.png", "tall.jpg"]


def test_imgsz_not_a_multiple_of_32_is_rounded_up_with_a_warning(images, tmp_path, capsys):
    assert main(["yolov8n", str(images / "tall.jpg"), "--weights", "synthetic:0", "--imgsz", "50",
                 "--out", str(tmp_path)]) == 0
    assert "imgsz 50 is not a multiple of 32; using 64" in capsys.readouterr().err




@pytest.mark.parametrize("extra, message", [
    # the command line's words (they named the keyword arguments, conf 1.5): test_yolov8.py checks the API's
    (["--conf", "1.5"], r"error: --conf 1.5 is outside [0, 1]"),
    (["--iou", "-0.2"], r"error: --iou -0.2 is outside [0, 1]"),
    (["--max-det", "0"], "error: --max-det 0 must be a positive integer"),
    (["--imgsz", "0"], "error: --imgsz 0 must be from 1 to"),
    (["--classes", "person,unicorn"], "unknown classes 'unicorn': use names or ids 0-79 of person, bicycle, car"),
    (["--imgsz", "320", "320", "320"], "--imgsz takes one or two values"),
])
def test_bad_options(images, extra, message, capsys):
    assert message in cli_error(["yolov8n", str(images / "street.png"), "--weights", "synthetic:0", *extra], capsys)


def test_missing_path(capsys):
    assert "image not found: nowhere.jpg" in cli_error(["yolov8n", "nowhere.jpg", "--weights", "synthetic:0"], capsys)


def test_empty_folder(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("no images here")
    assert f"no images or videos in folder {tmp_path}" in cli_error(["yolov8n", str(tmp_path), "--weights", "synthetic:0"], capsys)


def test_only_corrupt_files(tmp_path, capsys):
    (tmp_path / "a.png").write_bytes(b"nope")
    err = cli_error(["yolov8n", str(tmp_path / "a.png"), "--weights", "synthetic:0", "--out", str(tmp_path / "o")], capsys)
    assert f"cannot read {tmp_path / 'a.png'}: not an image file Pillow recognises" in err
    assert not (tmp_path / "o").exists()


def test_offline_without_weights_fails_in_one_line(images, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-m", "zoo.run", "yolov8", str(images / "street.png"), "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Ultralytics/YOLOv8/yolov8n.pt is not in the Hub cache")
    assert "--weights" in lines[0]


def test_output_names_are_unique_ignoring_case_and_writable():
    files = [Path("a/x.png"), Path("b/x.png"), Path("c/x_2.png"), Path("d/X.jpg"), Path("e/scan.psd"), Path("f/raw")]
    names = [output_name(item.path, item.name) for item in Files(files)]
    assert names == ["x.png", "x_2.png", "x_2_2.png", "X_3.jpg", "scan.png", "raw.png"]


def test_same_stems_and_a_suffixless_input_get_their_own_outputs(images, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes((images / "tall.jpg").read_bytes())
    (folder / "cat.png").write_bytes((images / "street.png").read_bytes())
    (tmp_path / "raw").write_bytes((images / "street.png").read_bytes())  # a PNG without suffix
    assert detect([str(folder), str(tmp_path / "raw"), "--save-json"], tmp_path) == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "cat.jpg", "cat_2.png", "mlx_zoo_run.json", "predictions.json", "raw.png"]
    rows = json.loads((out / "predictions.json").read_text())
    assert {(r["image_id"], r["file_name"]) for r in rows} == {(1, "cat.jpg"), (2, "cat.png"), (3, "raw")}
    with Image.open(out / "cat_2.png") as im:
        assert im.size == (120, 90)
    with Image.open(out / "raw.png") as im:
        assert im.format == "PNG"


def test_a_numeric_stem_another_input_has_is_named_in_its_note(images, tmp_path, capsys):
    """train/7.png and val/7.png (or 7.png and 007.png) share one number: the second got a running image_id, and
    the note said it had no numeric file stem ('3 input(s) without a numeric file stem (7_2, ...)'), so the user
    looked for a file without one. Now the inputs whose number another input has are a note of their own, naming
    the first of them, its id and the input that has the number."""
    for folder, name in (("train", "7.png"), ("val", "7.png"), ("val", "007.png"), ("val", "cat.png")):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_bytes((images / "street.png").read_bytes())
    assert detect([str(tmp_path / "train"), str(tmp_path / "val"), "--conf", "0.05", "--save-json"], tmp_path) == 0
    err = capsys.readouterr().err
    assert "note: --save-json: 1 input(s) without a numeric file stem (cat) get a running image_id" in err
    assert (f"note: --save-json: 2 input(s) have a file stem's number another input has: {tmp_path / 'val' / '007.png'}"
            f" gets a running image_id (9), {tmp_path / 'train' / '7.png'} the number 7; run them into separate "
            "--out folders to give each its number") in err
    rows = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert sorted({(r["image_id"], r["file_name"]) for r in rows}) == [(7, "7.png"), (9, "007.png"), (10, "7.png"),
                                                                      (11, "cat.png")]
    # one file a list names twice: said as such (it said 'run them into separate --out folders')
    (tmp_path / "twice.txt").write_text(f"{tmp_path / 'train' / '7.png'}\n" * 2)
    assert detect([str(tmp_path / "twice.txt"), "--conf", "0.01", "--save-json"], tmp_path / "again") == 0
    assert (f"note: --save-json: {tmp_path / 'train' / '7.png'} is given twice: its second records get a running "
            "image_id (9), not 7; give each image once") in capsys.readouterr().err


def test_inputs_of_one_file_name_are_named_in_a_note(images, tmp_path, capsys):
    """train/cat.png and val/cat.png get running ids, and the note said to map those by file_name, which is
    cat.png in both records: a note names them now, and says the ids run in the inputs' order."""
    for folder in ("train", "val"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cat.png").write_bytes((images / "street.png").read_bytes())
    (tmp_path / "val" / "dog.png").write_bytes((images / "street.png").read_bytes())
    assert detect([str(tmp_path / "train"), str(tmp_path / "val"), "--conf", "0.01", "--save-json"], tmp_path) == 0
    assert (f"note: --save-json: 2 of them share their file_name with another ({tmp_path / 'train' / 'cat.png'}, "
            f"{tmp_path / 'val' / 'cat.png'}): their records tell them apart by image_id only, running in the inputs' "
            "order") in capsys.readouterr().err
    rows = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert sorted({(r["image_id"], r["file_name"]) for r in rows}) == [(1, "cat.png"), (2, "cat.png"), (3, "dog.png")]


def test_a_videos_frames_records_say_their_frame(images, tmp_path, capsys):
    """--save-json gave every frame of clip.mp4 the file_name clip.mp4 and nothing else, while the note said to map
    running ids to the ground truth's by file_name: the frames could not be told apart. Each frame's records now
    carry "frame", its 0-based number in the video as --jsonl's (frame 3 is clip_2.txt with --vid-stride 2), and the
    note names it; images have none."""
    from conftest import write_video

    write_video(tmp_path / "clip.mp4", frames=4)
    argv = [str(tmp_path / "clip.mp4"), str(images / "street.png"), "--conf", "0.01", "--vid-stride", "2",
            "--save-json", "--save-txt"]
    assert detect(argv, tmp_path) == 0
    assert "by file_name (a video's frames: and frame)" in capsys.readouterr().err
    rows = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert sorted({(r["image_id"], r["file_name"], r.get("frame")) for r in rows}) == [
        (1, "clip.mp4", 1), (2, "clip.mp4", 3), (3, "street.png", None)]
    assert sorted(p.name for p in (tmp_path / "out" / "labels").iterdir()) == ["clip_1.txt", "clip_2.txt", "street.txt"]


def test_ctrl_c_says_predictions_json_is_partial(images, tmp_path, monkeypatch, capsys):
    """Ctrl-C closes predictions.json with its ']': a valid list, which COCOeval took for the run's and scored the
    images not done as missed, the run having said only 'every finished output is kept'. One note says so now."""
    from test_pipeline import interrupt_after_the_first_batch

    interrupt_after_the_first_batch(monkeypatch)
    assert detect([str(images), "--conf", "0.01", "--save-json"], tmp_path) == 130
    predictions = tmp_path / "out" / "predictions.json"
    assert {r["file_name"] for r in json.loads(predictions.read_text())} == {"street.png"}
    assert (f"note: --save-json: {predictions} holds the records of the images done before Ctrl-C only: COCOeval "
            "would count the others' objects as missed; --resume completes it") in capsys.readouterr().err


def test_save_refuses_a_suffix_pillow_only_reads(tmp_path):
    det = Results(np.zeros((8, 8, 3), np.uint8), "x.png", {0: "a"})
    with pytest.raises(ZooError, match="x.psd: Pillow only reads PSD: cannot write .psd; use .png"):
        det.save(tmp_path / "x.psd")
    assert not list(tmp_path.iterdir())


def test_resume_does_only_the_images_not_annotated_yet(images, tmp_path, capsys):
    argv = [str(images), "--save-txt", "--conf", "0.05", "--jsonl", str(tmp_path / "d.jsonl"), "--save-json"]
    assert detect(argv, tmp_path) == 0
    out = tmp_path / "out"
    first = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    predictions = json.loads(first["predictions.json"])
    assert {r["file_name"] for r in predictions} == {"street.png", "tall.jpg"}
    (out / "tall.jpg").unlink()  # as if the run had been interrupted before it
    capsys.readouterr()
    assert detect([*argv, "--resume"], tmp_path) == 0
    err = capsys.readouterr().err
    assert "1 image processed, 1 skipped (done before)" in err
    # the skipped image's detections kept, the other's made again: the same records, none twice
    again = json.loads((out / "predictions.json").read_text())
    assert sorted(map(json.dumps, again)) == sorted(map(json.dumps, predictions))
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.suffix == ".txt"} == {
        k: v for k, v in first.items() if k.endswith(".txt")}
    assert [r["path"] for r in read_jsonl(tmp_path / "d.jsonl")] == [str(images / "street.png"), str(images / "tall.jpg")]
    # killed after tall.jpg was written but before its record: it is done again (its outputs replaced),
    # and the folder spelled another way is the same inputs: each recorded once
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(jsonl.read_text().splitlines(keepends=True)[:-1]))
    assert detect([*argv[1:], "--resume", f"{images}/../{images.name}/"], tmp_path) == 0
    assert "1 image processed, 1 skipped (done before)" in capsys.readouterr().err
    assert sorted(Path(r["path"]).resolve() for r in read_jsonl(jsonl)) == [images / "street.png", images / "tall.jpg"]


def test_a_resume_with_everything_done_gives_no_detections_or_times(images, tmp_path, capsys):
    """A --resume with every image done before said 'Detections: no detections' and 'Speed: 0.0ms preprocess ...
    per image' of the images it skipped (their detections are in the first run's outputs): those lines are left
    out when the run processed nothing."""
    argv = [str(images), "--conf", "0.05", "--jsonl", str(tmp_path / "d.jsonl")]
    assert detect(argv, tmp_path) == 0
    assert "Detections: " in capsys.readouterr().err
    assert detect([*argv, "--resume"], tmp_path) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any("0 images processed, 2 skipped (done before)" in line for line in lines), lines
    assert not [line for line in lines if line.startswith(("Detections:", "Speed:"))], lines
    assert f"Results saved to {tmp_path / 'out'}" in lines


def test_ultralytics_command_line_runs_as_its_yolo_command(images, tmp_path, monkeypatch, capsys):
    """ultralytics' `yolo predict model=... source=... key=value` (its CLI docs, its tutorials) with only `yolo`
    changed: it was 'unknown model predict'. As ultralytics' entry point, it is YOLO(model).predict(**overrides)
    saving and printing each image: the run folder, labels and images equal the Python call's; ultralytics' value
    syntax (a bool key alone, lists, true/none) and leading dashes are read as ultralytics reads them."""
    import zoo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    argv = ["detect", "predict", "model=yolov8n.pt", f"source={images}", "conf=0.05", "imgsz=64", "save_txt",
            "--save_conf=True", "classes=[0, 2]", "device=cpu", "project=cli", "name=run", "verbose=none"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "Results saved to cli/run\n" in err and re.search(r"\n\d labels? saved to cli/run/labels\n", err)
    zoo.load("yolov8n.pt").predict(str(images), conf=0.05, imgsz=64, save=True, save_txt=True, save_conf=True,
                                   classes=[0, 2], project="api", name="run")
    listed = sorted(p.relative_to("cli/run").as_posix() for p in Path("cli/run").rglob("*") if p.is_file())
    assert listed == sorted(p.relative_to("api/run").as_posix() for p in Path("api/run").rglob("*") if p.is_file())
    assert "street.jpg" in listed and all(Path("cli/run", name).read_bytes() == Path("api/run", name).read_bytes()
                                          for name in listed if name.endswith(".txt"))
    assert main(argv) == 0 and Path("cli/run2/street.jpg").is_file()  # a taken name: run2, as ultralytics
    assert main([*argv, "exist_ok"]) == 0 and not Path("cli/run3").exists()
    assert main([*argv, "name=2024"]) == 0 and Path("cli/2024/street.jpg").is_file()  # a name, not the number 2024


@pytest.mark.parametrize("argv, message", [
    (["train", "model=yolov8n.pt", "data=coco8.yaml"], r"yolo train is not available in mlx-zoo: it runs inference "
                                                       r"only: train with ultralytics"),
    (["val", "model=yolov8n.pt"], r"yolo val is not available in mlx-zoo: write the predictions with .* --save-json"),
    (["predict", "model=yolov8n.pt"], r"no source=: pass source=IMAGE, FOLDER, VIDEO, GLOB or URL"),
    (["segment", "predict", "model=yolov8n.pt", "source=x.png"], r"YOLO\('yolov8n.pt', task='segment'\): the model "
                                                                r"makes 'detect'"),
    (["classify", "predict", "model=yolov8n.pt", "source=x.png"], r"task='classify': the YOLO models here make detect"),
    (["predict", "model=yolov8n.pt", "source=x.png", "sav_txt=True"], r"sav_txt"),
    # predict's line says to call r.show(), which a command line cannot: it names the saved images instead
    (["predict", "model=yolov8n.pt", "source=x.png", "show"], r"^error: show=True \(a window of each image or frame\) "
                                                             r"is not available in mlx-zoo: the annotated images"),
    (["predict", "model=yolov8n.pt", "source=x.png", "conf"], r"'conf' is not an ultralytics argument predict takes: "
                                                             r"pass key=value, e.g. conf=0.5"),
    # a path with spaces the shell split: it says to quote it (it said only key=value)
    (["predict", "model=yolov8n.pt", "source=my", "photos/x.png"], r"'photos/x.png' is not an ultralytics argument .*"
                                                                  r"\(a value with spaces quoted: source='my photos/"),
    (["predict", "model=yolov8n.pt", "source=x.png", "conf="], r"'conf=': pass key=value, e.g. conf=0.5"),
    (["predict", "model=yolov8n.pt", "source=x.png", "device=0,1"], r"device=\(0, 1\): MLX runs on one device"),
    # its keys are predict's keywords: the errors name them so, not as flags it does not take (--imgsz, --conf)
    (["predict", "model=yolov8n.pt", "source=x.png", "imgsz=0"], r"^error: imgsz 0 must be from 1 to"),
    (["predict", "model=yolov8n.pt", "source=x.png", "conf=2"], r"^error: conf 2 is outside \[0, 1\]"),
    # a bool key's text, which ultralytics' check_cfg refuses too (it was true: save=no saved)
    (["predict", "model=yolov8n.pt", "source=x.png", "save=no"], r"predict\(save='no'\): pass save=True or save=False"),
    # an export of the model (ultralytics runs it): it was 'unknown model best.onnx', and yolov8n.onnx 'no tagged
    # weights of yolov8n' (.onnx taken for a weights tag)
    (["predict", "model=yolov8n.onnx", "source=x.png"], r"^error: yolov8n.onnx is an exported model \(ONNX, from "
                                                       r"yolo export\): mlx-zoo runs the PyTorch checkpoint"),
    (["predict", "model=best_openvino_model/", "source=x.png"],
     r"best_openvino_model/ is an exported model \(OpenVINO"),
    (["best.engine", "x.png"], r"^error: best.engine is an exported model \(TensorRT"),
    # a run folder without a name to number (it was an internal error, ValueError from Path.with_name)
    (["predict", "model=yolov8n.pt", "source=x.png", "project=.", "name=."], r"project='\.', name='\.' is the folder "
                                                                           r".*, which exists .*: pass exist_ok=True"),
])
def test_ultralytics_command_line_errors_are_one_line(argv, message, images, tmp_path, monkeypatch, capsys):
    """Modes not built, a missing source, a task word the model does not make, keys predict does not take: one
    error line each, before the model loads (but for the task word, which the checkpoint decides), nothing written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    Image.open(images / "street.png").save("x.png")
    assert re.search(message, error := cli_error(argv, capsys)), error
    assert sorted(os.listdir()) == ["x.png"]


def test_ultralytics_command_line_joins_words_as_ultralytics(images, tmp_path, monkeypatch):
    """Spaces around = (conf = 0.5, conf= 0.5, conf =0.5) and a list the shell split at its spaces (classes=[0, 2]
    unquoted) are one key=value each, as ultralytics' merge_equals_args reads them: each was an error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    Image.open(images / "street.png").save("x.png")
    common = ["predict", "model=yolov8n.pt", "save_txt", "save=False", "verbose=False"]
    assert main([*common, "source=x.png", "imgsz=64", "conf=0.05", "classes=[0,2]", "project=compact"]) == 0
    assert main([*common, "source=", "x.png", "imgsz", "=64", "conf", "=", "0.05", "classes=[0,", "2]",
                 "project=spaced"]) == 0
    assert Path("spaced/predict/labels/x.txt").read_text() == Path("compact/predict/labels/x.txt").read_text() != ""


def test_ultralytics_command_line_exits_1_when_inputs_were_skipped(images, tmp_path, monkeypatch, capsys):
    """predict() skips an input it cannot read with a warning, as ultralytics'; the command line then exited 0 (a
    damaged image in a folder, a list naming a missing file), where mlx-zoo's own form exits 1: the others are
    processed and saved, then one error line, exit 1."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    Path("photos").mkdir()
    Image.open(images / "street.png").save("photos/x.png")
    Path("photos/bad.jpg").write_text("not an image\n")
    assert main(["predict", "model=yolov8n.pt", "source=photos", "imgsz=64"]) == 1
    err = capsys.readouterr().err
    assert "warning: skipped: cannot read photos/bad.jpg" in err
    assert err.endswith("\nerror: 1 input was skipped, named in the warning above: fix or remove it (the others were "
                        "processed)\n")
    assert Path("runs/detect/predict/x.jpg").is_file()


def test_ultralytics_command_line_with_yolo_left_in_front(images, tmp_path, monkeypatch):
    """`python -m zoo.run yolo predict ...` (yolo kept where python -m zoo.run was to replace it) was 'unknown model
    yolo': it is the command without it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    Image.open(images / "street.png").save("x.png")
    assert main(["yolo", "predict", "model=yolov8n.pt", "source=x.png", "imgsz=64", "save_txt", "conf=0.05"]) == 0
    assert Path("runs/detect/predict/x.jpg").is_file() and Path("runs/detect/predict/labels/x.txt").is_file()


def test_ultralytics_checks_and_version_answer(capsys):
    """ultralytics' quickstart runs `yolo checks` (and `yolo version`): both said 'unknown model'."""
    import mlx.core as mx

    import zoo

    assert main(["checks"]) == 0
    out = capsys.readouterr().out
    assert f"mlx-zoo {zoo.__version__}" in out and f"MLX {mx.__version__}" in out and "device cpu" in out
    assert "CPU: BLAS" in out
    assert main(["yolo", "version"]) == 0 and capsys.readouterr().out == f"{zoo.__version__}\n"


def test_ultralytics_command_line_takes_the_weights_its_errors_offer(images, tmp_path, monkeypatch):
    """Offline, yolov8s.pt's download failed with 'pass weights=PATH to a local checkpoint (or
    weights='synthetic' ...)', and weights= was then refused as no predict keyword: it is mlx-zoo's key for the
    model's checkpoint, as --weights in mlx-zoo's own form."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZOO_WEIGHTS", raising=False)
    Image.open(images / "street.png").save("x.png")
    assert main(["predict", "model=yolov8s.pt", "weights=synthetic", "source=x.png", "imgsz=64"]) == 0
    assert Path("runs/detect/predict/x.jpg").is_file()


@pytest.mark.parametrize("task, model", [("segment", "yolo11n-seg.pt"), ("pose", "yolo11n-pose.pt")])
def test_ultralytics_command_line_task_word_without_model_is_the_tasks_model(task, model, images, tmp_path,
                                                                            monkeypatch, capsys):
    """`yolo segment predict source=...` without model= runs ultralytics' model of that task (its TASK2MODEL): it
    took yolo11n.pt, a detection model, and refused the task word."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    Image.open(images / "street.png").save("x.png")
    assert main([task, "predict", "source=x.png", "imgsz=64"]) == 0
    assert f"note: no model=: {model}, as ultralytics" in capsys.readouterr().err
    assert Path(f"runs/{task}/predict/x.jpg").is_file()


def test_predict_on_a_folder_of_sub_folders_names_the_glob_it_takes(images, tmp_path, monkeypatch, capsys):
    """predict takes no recursive (nor does ultralytics'): a folder whose images lie in sub-folders said to pass
    recursive=True (--recursive on ultralytics' command line), which predict refuses; it names the glob to pass."""
    import zoo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    Path("nested/sub").mkdir(parents=True)
    Image.open(images / "street.png").save("nested/sub/x.png")
    hint = "; pass source='nested/**/*' (a glob) to look in its sub-folders"
    assert cli_error(["predict", "model=yolov8n.pt", "source=nested"], capsys).endswith(hint)
    with pytest.raises(ZooError, match=re.escape(hint)):
        zoo.YOLO("yolov8n.pt").predict("nested")
    assert main(["predict", "model=yolov8n.pt", "source=nested/**/*", "imgsz=64", "save=False"]) == 0
    assert "x.png: " in capsys.readouterr().err
