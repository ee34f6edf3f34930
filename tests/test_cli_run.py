"""python -m zoo.run end to end, and the one-line errors for bad input."""
import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from safetensors.numpy import save_file

import zoo
from conftest import cli_error, synthetic_checkpoint
from zoo.errors import ZooError
from zoo.files import check_new_file, image_format, write_atomic, write_text
from zoo.run import main


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    path = tmp_path_factory.mktemp("img") / "photo.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(path)
    return path


def test_classify_end_to_end_json(photo, tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["resnet18", str(photo), "--weights", "synthetic:0", "--device", "cpu", "--top-k", "3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())[str(photo)]
    assert len(result) == 3 and result[0]["label"] in printed
    assert not list(tmp_path.glob("*.part"))


def test_float16_run(photo, capsys):
    assert main(["resnet18", str(photo), "--weights", "synthetic:0", "--dtype", "float16"]) == 0
    assert "%" in capsys.readouterr().out




def test_missing_image(capsys):
    assert "image not found: nope.jpg" in cli_error(["resnet18", "nope.jpg", "--weights", "synthetic"], capsys)


def test_not_an_image(tmp_path, capsys):
    bad = tmp_path / "notes.jpg"
    bad.write_text("hello")
    assert "not an image file" in cli_error(["resnet18", str(bad), "--weights", "synthetic"], capsys)


def test_unknown_model(photo, capsys):
    err = cli_error(["resnet9", str(photo)], capsys)
    assert "unknown model 'resnet9'" in err and "resnet50" in err and "yolov8n" in err


def test_corrupt_file_among_good_ones_is_skipped(photo, tmp_path, capsys):
    (tmp_path / "bad.png").write_bytes(b"not a png")
    assert main(["resnet18", str(photo), str(tmp_path / "bad.png"), "--weights", "synthetic"]) == 1  # one failed
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "bad.png" in errors[0] and "1 failed" in captured.err and str(photo) in captured.out


def test_wrong_shaped_weights(photo, tmp_path, capsys):
    weights = synthetic_checkpoint("resnet18", tmp_path / "r18.safetensors")
    err = cli_error(["resnet50", str(photo), "--weights", str(weights)], capsys)
    assert "r18.safetensors holds a resnet18 (basic blocks (2, 2, 2, 2) a stage), not a resnet50: load it as " \
           "'resnet18'" in err


def test_missing_weights_file(photo, capsys):
    assert "missing.safetensors: no such file" in cli_error(["resnet18", str(photo), "--weights", "missing.safetensors"], capsys)


def test_offline_without_weights(photo, capsys):
    err = cli_error(["resnet18", str(photo)], capsys)
    assert "timm/resnet18.tv_in1k/model.safetensors" in err and "pass --weights PATH" in err


def test_api_errors_name_keyword_arguments_and_cli_errors_flags(photo, tmp_path, capsys):
    """One check, two interfaces: the Python API's error names its keyword argument, the CLI's its flag."""
    with pytest.raises(ZooError, match=r"pass weights=PATH .* weights='synthetic'") as api:
        zoo.load("resnet18")
    assert "--" not in str(api.value)
    (tmp_path / "out.json").write_text("{}")
    with pytest.raises(ZooError, match="pass overwrite=True to replace it"):
        check_new_file(tmp_path / "out.json", "output", overwrite=False)
    assert "pass --overwrite to replace it" in cli_error(
        ["resnet18", str(photo), "--json", str(tmp_path / "out.json"), "--weights", "synthetic"], capsys)
    # a checkpoint given as the model that no family claims: the command line's form (it named zoo.load)
    checkpoint = tmp_path / "finetuned.safetensors"
    save_file({"head.weight": np.zeros((2, 8), np.float32)}, str(checkpoint))  # a ResNet's file is identified
    assert cli_error([str(checkpoint), str(photo)], capsys).endswith(
        f"name the model (e.g. resnet50) and give the file as --weights {checkpoint}")
    with pytest.raises(ZooError, match=f"give the file as weights='{checkpoint}'"):
        zoo.load(str(checkpoint))


def test_zoo_weights_synthetic_runs_offline_and_says_so(photo, monkeypatch, capsys):
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic:3")
    assert main(["resnet18", str(photo), "--top-k", "1"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "synthetic" in line]
    assert said == ["WARNING: ZOO_WEIGHTS=synthetic:3: resnet18 runs on synthetic:3 weights (random values: outputs "
                    "are meaningless) in place of timm/resnet18.tv_in1k/model.safetensors"]
    monkeypatch.setenv("ZOO_WEIGHTS", "yes")
    assert "ZOO_WEIGHTS='yes': use synthetic or synthetic:SEED" in cli_error(["resnet18", str(photo)], capsys)


def test_no_network_without_weights_fails_fast(photo, tmp_path):
    """The real no-network path (not HF_HUB_OFFLINE): an unresolvable Hub host fails at once, in one line."""
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path), "HF_ENDPOINT": "https://hub.invalid", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "zoo.run", "resnet18", str(photo), "--device", "cpu"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: cannot reach the Hugging Face Hub to download timm/resnet18.tv_in1k/model.safetensors (no network): "
        "pass --weights PATH to a local checkpoint (or --weights synthetic for random test weights; "
        "ZOO_WEIGHTS=synthetic for every model)"]


def test_bad_dtype_and_device_choices(photo, capsys):
    assert "argument --dtype: invalid choice: 'float64'" in cli_error(["resnet18", str(photo), "--dtype", "float64"], capsys)


def test_write_atomic_never_leaves_half_a_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")

    def fail(file):
        file.write(b"half")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        write_atomic(target, fail)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
    missing = tmp_path / "nowhere" / "out.json"
    with pytest.raises(ZooError, match=f"cannot write {missing}: No such file or directory") as e:
        write_text(missing, "x")
    assert "\n" not in str(e.value)
    assert write_text(target, "new") == target and target.read_text() == "new"
    with pytest.raises(ZooError, match="it appeared while this run was writing it"):
        write_text(target, "newer", replace=False)  # a file that appeared after the checks is kept
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["out.json"]


@pytest.mark.parametrize("name, message", [
    ("x.xyz", "x.xyz: unknown image suffix: cannot write .xyz; use .png"),
    ("x.psd", "x.psd: Pillow only reads PSD: cannot write .psd; use .png"),  # a KeyError in Pillow's save
    ("x", "x: no image suffix: cannot write a file without suffix; use .png"),
])
def test_image_format_names_what_cannot_be_written(name, message):
    assert image_format("a.PNG") == "PNG" and image_format("b.jpeg") == "JPEG"
    with pytest.raises(ZooError) as e:
        image_format(name)
    assert str(e.value) == message


def test_json_path_is_checked_before_the_weights(photo, tmp_path, capsys):
    base = ["resnet18", str(photo), "--weights", str(tmp_path / "missing.safetensors")]
    under_a_file = photo / "sub" / "out.json"
    assert f"--json {under_a_file}: its folder {under_a_file.parent} cannot be created: {photo} is a file" in cli_error(
        [*base, "--json", str(under_a_file)], capsys)
    assert f"--json {tmp_path} is a folder: pass a file path" in cli_error([*base, "--json", str(tmp_path)], capsys)


def test_no_readable_image_fails_and_writes_nothing(tmp_path, capsys):
    for name in ("a.png", "b.jpg"):
        (tmp_path / name).write_bytes(b"not an image")
    out = tmp_path / "out.json"
    err = cli_error(["resnet18", str(tmp_path), "--weights", "synthetic:0", "--device", "cpu", "--json", str(out)], capsys)
    assert "no input could be read (2 failed, each named above)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.jpg"]


@pytest.mark.parametrize("entry, argv, own", [
    ("zoo.run", [], "task options:"),
    ("zoo.run", ["yolov8n"], "--save-json"),
    ("zoo.run", ["annotate"], "--det DET"),
    ("zoo.run", ["resnet50", "--ray"], "--ray-address"),
    ("zoo.run", ["predict"], "model=MODEL source=SOURCE [key=value ...]"),  # ultralytics' form
    ("zoo.cli.validate", [], "--inject NAME=KIND"),
    ("zoo.cli.validate", ["lama"], "--calibrate-bn"),
    ("zoo.cli.validate", ["ops"], "--inject-op"),
])
def test_every_entry_point_helps_with_its_own_options(entry, argv, own, capsys):
    import importlib

    with pytest.raises(SystemExit) as done:
        importlib.import_module(entry).main([*argv, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    prog = "python -m zoo.validate" if entry == "zoo.cli.validate" else "python -m zoo.run"
    assert out.startswith(f"usage: {prog}") and own in out
    if entry == "zoo.cli.validate":
        assert "--save-json" not in out and "--top-k" not in out  # not zoo.run's options
    if entry == "zoo.cli.validate" and argv != ["ops"]:  # it said the Hub weights, where it falls back offline
        assert "else synthetic:0" in " ".join(out.split()) and 'mlx-zoo[validate]' in out
    if entry == "zoo.run" and argv == ["yolov8n"]:  # its MODEL: the detectors, not every task's models
        assert "yolo11s," in out and "resnet18" not in out and "mobilesam" not in out


@pytest.mark.parametrize("argv, help_command", [
    (["resnet50", "PHOTO", "--out", "x"], "python -m zoo.run resnet50"),
    (["yolov8n", "PHOTO", "--conf", "high"], "python -m zoo.run yolov8n"),
    (["resnet18", "PHOTO", "--ray", "--frobnicate"], "python -m zoo.run resnet18 --ray"),
])
def test_an_unknown_option_names_the_help_that_lists_the_tasks_options(photo, argv, help_command, capsys):
    """resnet50 --out said '(see python -m zoo.run --help)', whose general help has none of a task's option texts:
    the task's own help, which lists what it takes."""
    argv = [str(photo) if word == "PHOTO" else word for word in argv]
    assert cli_error([*argv, "--weights", "synthetic"], capsys).endswith(f"(see {help_command} --help)")


def test_help_piped_to_a_reader_that_left_ends_quietly():
    """``python -m zoo.run --help | head -1`` printed 'error: internal error (BrokenPipeError ...)' after the line
    head showed: the reader left, which is no error of the command. Now no line, and the exit code of a writer
    stopped by SIGPIPE (141), as other commands piped to head end."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before the command writes
    try:
        proc = subprocess.run([sys.executable, "-m", "zoo.run", "--help"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")


@pytest.mark.parametrize("argv, message", [
    (["yolov8n", "imgs", "--out", "", "--imgsz", "64"], "an empty argument after --out"),
    (["resnet18", "imgs", "--jsonl="], "--jsonl= is empty"),
    (["yolov8n", "", "--imgsz", "64"], "an empty argument after yolov8n"),
    (["mobilesam", "ok.jpg", "--point", "5,5", "--out", ""], "an empty argument after --out"),
])
def test_an_empty_argument_is_refused(argv, message, tmp_path, monkeypatch, capsys):
    """An empty argument (``--out "$DIR"`` with DIR unset): argparse took it and an empty path is the current folder:
    detect and mobilesam wrote their outputs there, ``--jsonl ""`` wrote no records at all, an empty input ran on
    the images of the current folder, each without a word. Refused in one line now, nothing written."""
    from conftest import cli_inputs, file_tree

    monkeypatch.chdir(cli_inputs(tmp_path))
    before = file_tree(tmp_path)
    assert cli_error([*argv, "--weights", "synthetic"], capsys) == (
        f"error: {message} (an unset shell variable?): pass a value")
    assert file_tree(tmp_path) == before


@pytest.mark.parametrize("argv", [["yolov8n", "PHOTO", "--imgsz", "64"], ["resnet18", "PHOTO", "--jsonl", "r.jsonl"],
                                  ["yolov8n", "PHOTO", "--imgsz", "64", "--out", "OUT", "--jsonl", "JSONL"]])
def test_a_removed_current_folder_is_one_error(tmp_path, argv):
    """A command run from a folder removed while the shell was in it ended in 'internal error (FileNotFoundError)'
    (relative paths and the records' folder cannot be resolved): one error line now, exit 1, nothing written."""
    from pathlib import Path

    photo = tmp_path / "a.png"
    Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(photo)
    gone = tmp_path / "gone"
    gone.mkdir()
    words = [{"PHOTO": str(photo), "OUT": str(tmp_path / "out"), "JSONL": str(tmp_path / "r.jsonl")}.get(w, w)
             for w in argv]
    script = f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); from zoo.run import main; " \
             f"sys.exit(main({[*words, '--weights', 'synthetic']!r}))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr.splitlines()[-1]) == (1, "error: the current folder no longer exists (removed "
                                                               "while this shell was in it): cd to an existing folder "
                                                               "and run again"), proc.stderr
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["a.png"]


# a site hook that presses Ctrl-C (a real SIGINT, once) as the process starts to import INTERRUPT_AT: at that point
# of its start-up every time, not at a delay's luck (MLX loads for seconds on a Mac)
INTERRUPTING_SITE = """
import os, signal, sys

# Ctrl-C's handler as a terminal's process has it: a shell's background job ('pytest &') starts with SIGINT ignored,
# which its children inherit and Python then leaves ignored
signal.signal(signal.SIGINT, signal.default_int_handler)

class Interrupt:
    pressed = False

    def find_spec(self, name, path=None, target=None):
        if name == os.environ["INTERRUPT_AT"] and not self.pressed:
            self.pressed = True
            os.kill(os.getpid(), signal.SIGINT)

sys.meta_path.insert(0, Interrupt())
"""
# points of `import zoo` itself (its errors, OpenBLAS's loading, the native build's check), of `import zoo.validate`
# (dataclasses, first imported there by python -m zoo.validate), then of the commands' own imports (MLX, the registry)
INTERRUPT_POINTS = ["zoo.errors", "zoo.blas", "scipy_openblas32", "zoo.native", "dataclasses", "mlx.core",
                    "zoo.registry"]


def interrupted_start(argv: list[str], module: str, folder) -> subprocess.CompletedProcess:
    """``argv`` run in ``folder`` with Ctrl-C pressed as it starts to import ``module``."""
    import os

    (folder / "sitecustomize.py").write_text(INTERRUPTING_SITE)
    env = {**os.environ, "INTERRUPT_AT": module,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module", INTERRUPT_POINTS)
@pytest.mark.parametrize("command", [["-m", "zoo.run", "yolov8n", "x.jpg"], ["-m", "zoo", "yolov8n", "x.jpg"],
                                     ["-m", "zoo.validate", "yolov8n"], ["zoo-run", "yolov8n", "x.jpg"],
                                     ["zoo-validate", "yolov8n"]])
def test_ctrl_c_while_a_command_imports_is_one_line(tmp_path, command, module):
    """Ctrl-C before the run starts (while its modules load) printed a KeyboardInterrupt traceback; now, as during
    the run, the line 'interrupted' and exit 130, for every entry point. The commands' own imports said so first;
    a Ctrl-C inside `import zoo` (which runpy, or the console script, imports before the command's module) still
    printed the traceback until 2026-11-30."""
    from pathlib import Path

    script = Path(sys.executable).parent / command[0]
    if command[0] != "-m" and not script.exists():
        pytest.fail(f"{script} is not installed: pip install -e . makes it")
    argv = [sys.executable, *command] if command[0] == "-m" else [str(script), *command[1:]]
    proc = interrupted_start(argv, module, tmp_path)
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")


@pytest.mark.parametrize("program", [["-c", "import zoo"], ["mine.py"], ["-m", "mine"]])
def test_ctrl_c_while_a_program_imports_zoo_is_its_keyboard_interrupt(tmp_path, program):
    """A user's program that imports zoo keeps Python's KeyboardInterrupt (its to catch; uncaught, the traceback and
    the process ended by SIGINT): only mlx-zoo's commands turn it into 'interrupted', exit 130."""
    import signal

    (tmp_path / "mine.py").write_text("import zoo\n")
    proc = interrupted_start([sys.executable, *program], "zoo.blas", tmp_path)
    assert proc.returncode == -signal.SIGINT
    assert "Traceback" in proc.stderr and proc.stderr.splitlines()[-1] == "KeyboardInterrupt"


@pytest.mark.parametrize("argv, orig_argv, command", [
    (["-m", "x.jpg"], ["python", "-X", "dev", "-m", "zoo.run", "x.jpg"], True),  # runpy importing zoo for -m zoo.run
    (["-m", "x.jpg"], ["python", "-Im", "zoo.validate", "x.jpg"], True),
    (["-m"], ["python", "-mzoo"], True),
    (["-m", "zoo"], ["python", "-m", "mypkg.tool", "zoo"], False),  # a user's module, given 'zoo' as an argument
    (["-m"], ["python", "-m", "zoo2"], False),
    (["/venv/bin/zoo-validate", "yolov8n"], ["python", "/venv/bin/zoo-validate", "yolov8n"], True),
    (["-c"], ["python", "-c", "import zoo"], False),
    (["mine.py"], ["python", "mine.py"], False),
    ([""], ["python"], False),  # the interactive interpreter
])
def test_a_command_is_told_from_a_program_importing_zoo(argv, orig_argv, command, monkeypatch):
    from zoo.errors import started_as_command

    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    assert started_as_command() is command


def test_a_batch_larger_than_memory_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """--batch 100000 read ahead and stacked as many inputs as the source held until memory ran out; the batch's
    inputs (at most the source's) times the model's measured memory per input pixel is checked against the
    device's memory before the weights are read, with a --batch that fits."""
    import zoo.devices

    for i in range(40):
        Image.new("RGB", (32, 24), (i, 0, 0)).save(tmp_path / f"{i}.png")
    missing = str(tmp_path / "missing.safetensors")  # never reached: the check comes first
    monkeypatch.setattr(zoo.devices, "device_memory", lambda: 10_000_000_000)
    assert cli_error(["yolov8n", str(tmp_path), "--batch", "100000", "--imgsz", "4096", "--weights", missing,
                      "--out", str(tmp_path / "out")], capsys) == (
        "error: --batch 100000 needs about 37.6 GB of memory for 40 inputs of 4096x4096 pixels (940 MB each), "
        "more than 80% of the 10 GB here: use --batch 8 or less")
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(zoo.devices, "device_memory", lambda: 100_000_000)
    assert cli_error(["resnet18", str(tmp_path), "--batch", "100000", "--weights", missing], capsys) == (
        "error: --batch 100000 needs about 0.241 GB of memory for 40 inputs of 224x224 pixels (6 MB each), "
        "more than 80% of the 0.1 GB here: use --batch 13 or less")
    for batch, dtype in (("13", "float32"), ("26", "float16")):  # half precision: half the memory
        assert "missing.safetensors" in cli_error(["resnet18", str(tmp_path), "--batch", batch, "--dtype", dtype,
                                                   "--weights", missing], capsys)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_a_resnet_checkpoint_given_as_the_model_is_identified_by_its_blocks(photo, tmp_path, suffix, capsys):
    """python -m zoo.run my_resnet.safetensors photos/ said 'cannot tell which model it holds' (as a YOLO file is
    told): the file's blocks name the ResNet (34: basic blocks, 3-4-6-3), which classifies as resnet34 --weights
    FILE does; blocks of no registered ResNet are one line."""
    from safetensors.numpy import load_file
    from torch_writer import tensor, write_torch_zip

    source = synthetic_checkpoint("resnet34", tmp_path / "source.safetensors")
    path = tmp_path / f"my_resnet{suffix}"
    if suffix == ".pt":
        write_torch_zip(path, {key: tensor(value, value.dtype) for key, value in load_file(source).items()})
    else:
        source.rename(path)
    runs = {}
    for name, argv in (("file", [str(path)]), ("named", ["resnet34", "--weights", str(path)])):
        assert main([*argv, str(photo), "--device", "cpu", "--jsonl", str(tmp_path / f"{name}.jsonl")]) == 0
        record, = (json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines())
        runs[name] = record["mlx_zoo_run"]["model"], record["top"]
    assert runs["file"] == runs["named"] and runs["file"][0] == "resnet34"
    state = load_file(synthetic_checkpoint("resnet18", tmp_path / "r18.safetensors"))
    save_file({key: value for key, value in state.items() if not key.startswith("layer4.1.")},
              str(tmp_path / "odd.safetensors"))
    assert cli_error([str(tmp_path / "odd.safetensors"), str(photo)], capsys) == (
        f"error: {tmp_path / 'odd.safetensors'}: it holds a ResNet of basic blocks (2, 2, 2, 1) a stage, which is "
        "none of resnet18, resnet34, resnet50, resnet101, resnet152: mlx-zoo builds only these")
