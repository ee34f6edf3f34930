"""ultralytics' command line, ``yolo [TASK] MODE key=value ...``, as ``python -m zoo.run [TASK] MODE key=value ...``:
a tutorial's ``yolo predict model=yolo11n.pt source=bus.jpg conf=0.5`` runs with only ``yolo`` changed.

As ultralytics' own entry point does, it makes the model (``YOLO(model)``) and calls ``model.predict(**overrides)``,
saving and printing a line per image as its command line does by default: every key has the meaning of predict's
keyword (docs/yolov8.md), and errors name the keys so (``imgsz=0``). Values are read as ultralytics reads them
(``none``, ``true``, ``false``, Python literals, else text), never evaluated as code, the words joined as it joins
them (``conf = 0.5``; ``classes=[0, 2]`` split by the shell). No ``model=``: ultralytics' model of the task word.
What differs, each one error before the model loads: modes other than predict (not built here), a task word that is
not the model's (ultralytics takes the model's with a warning), no ``source=`` (ultralytics falls back to sample
images it ships)."""
from __future__ import annotations

import ast
import os
import sys

from zoo.errors import UsageError, ZooError, command_line

TASKS = ("detect", "segment", "pose", "classify", "obb")
MODES = ("predict", "track", "val", "train", "export", "benchmark", "tune")
# ultralytics' words that are no task: its quickstart's `yolo checks`, `yolo version`, `yolo settings`
SPECIAL = ("version", "checks", "settings")
# ultralytics' model when model= is left out: its TASK2MODEL for a task word, else yolo11n.pt
DEFAULT_MODELS = {"detect": "yolo11n.pt", "segment": "yolo11n-seg.pt", "pose": "yolo11n-pose.pt"}
NAMES = ("model", "weights", "project", "name")  # keys whose value is a name, whatever it looks like
HELP = """usage: python -m zoo.run [TASK] predict model=MODEL source=SOURCE [key=value ...]

ultralytics' command line (yolo [TASK] MODE key=value ...) with yolo replaced by python -m zoo.run: it makes
YOLO(model) and calls model.predict(source, **overrides), saving the annotated images and printing a line per
image (save=False, verbose=False turn them off). Every key is predict's keyword: {keys}.
A bool key alone is key=True. TASK: detect, segment or pose (must be the model's); modes other than predict are
not built here. mlx-zoo's own key: weights=PATH|synthetic, the model's checkpoint (--weights of mlx-zoo's form).
python -m zoo.run checks: the versions, device and CPU forms in use; python -m zoo.run version: mlx-zoo's.

  python -m zoo.run predict model=yolo11n.pt source=bus.jpg conf=0.5
  python -m zoo.run segment predict model=best.pt source=images/ save_txt project=runs name=seg

docs/yolov8.md, ultralytics' command line; python -m zoo.run --help: mlx-zoo's own form."""


def without_yolo(argv: list[str]) -> list[str]:
    """``argv`` without ultralytics' command word ``yolo`` in front (``python -m zoo.run yolo predict ...``: kept where
    python -m zoo.run was to replace it)."""
    return argv[1:] if argv[:1] == ["yolo"] else argv


def is_yolo_command(argv: list[str]) -> bool:
    """Whether ``argv`` is in ultralytics' form: a task or mode word first, or a ``key=value`` naming one."""
    argv = without_yolo(argv)
    if not argv:
        return False
    first = argv[0]  # with dashes it is ours: --model=lama is IOPaint's (model_option_as_name)
    named = first.partition("=")[0] in ("model", "source", "mode", "task") and "=" in first
    return first in TASKS + MODES + SPECIAL or named


def read_value(text: str):
    """A value as ultralytics' command line reads it: none/true/false in any case, a Python literal, else the text."""
    lowered = text.lower()
    if lowered in ("none", "true", "false"):
        return {"none": None, "true": True, "false": False}[lowered]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def joined(argv: list[str]) -> list[str]:
    """The words of ``argv`` as ultralytics reads them: a key and its value split by spaces around ``=`` (``conf =
    0.5``, ``conf= 0.5``, ``conf =0.5``) are one word, and so are the pieces of a list the shell split at its spaces
    (``classes=[0,`` ``2]`` is ``classes=[0,2]``)."""
    words = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "=" and words and i < len(argv):  # conf = 0.5
            words[-1] += f"={argv[i]}"
            i += 1
            continue
        if word.startswith("=") and words:  # conf =0.5
            words[-1] += word
            continue
        if word.endswith("=") and i < len(argv) and "=" not in argv[i]:  # conf= 0.5
            word += argv[i]
            i += 1
        if word.partition("=")[2].startswith("["):  # a list's pieces up to its closing bracket
            while word.count("[") > word.count("]") and i < len(argv):
                word += argv[i]
                i += 1
        words.append(word)
    return words


def parse(argv: list[str], flags: set[str]) -> tuple[str | None, str, dict]:
    """(task word or None, mode, overrides) of an ultralytics command line; ``flags``: the keys that stand alone
    for ``key=True`` (predict's keywords whose default is a bool)."""
    task = mode = None
    overrides = {}
    for word in joined(argv):
        word = word.removeprefix("--").removesuffix(",")  # ultralytics drops both, with a warning
        key, equals, text = (part.strip() for part in word.partition("="))
        if equals:
            if not key or not text:
                raise UsageError(f"{word!r}: pass key=value, e.g. conf=0.5 (ultralytics' arguments)")
            value = read_value(text)
            overrides[key] = text if key in NAMES and value is not None else value  # name=2024 is a folder's name
        elif word in TASKS:
            task = word
        elif word in MODES:
            mode = word
        elif word in flags:
            overrides[word] = True  # ultralytics: a bool key alone is key=True
        else:
            # most often a value the shell split at its spaces: source=my photos/a.jpg unquoted
            raise UsageError(f"{word!r} is not an ultralytics argument predict takes: pass key=value, e.g. conf=0.5 "
                             "(a value with spaces quoted: source='my photos/a.jpg'), "
                             f"a task ({', '.join(TASKS)}) or a mode ({', '.join(MODES)})")
    task = overrides.pop("task", task)
    return task, overrides.pop("mode", mode) or "predict", overrides


def main(argv: list[str]) -> int:
    argv = without_yolo(argv)
    if argv[:1] == ["version"]:
        import zoo

        print(zoo.__version__)
        return 0
    if argv[:1] == ["checks"]:
        return checks()
    if argv[:1] == ["settings"]:
        raise UsageError("mlx-zoo keeps no settings file: pass each option as a key of the command (key=value), "
                         "or to predict() in Python")
    with command_line(flags=False):  # its keys are predict's keywords: errors name imgsz=0, not a flag --imgsz
        return predict_command(argv)


def checks() -> int:
    """``yolo checks`` as mlx-zoo answers it: the versions and the hardware predict would use, a line each."""
    import platform

    import mlx.core as mx

    import zoo
    from zoo import blas, devices

    print(f"mlx-zoo {zoo.__version__}, Python {platform.python_version()}, MLX {mx.__version__}\n"
          f"OS {platform.platform()}\ndevice {devices.describe()}\n{blas.describe()}")
    return 0


def predict_command(argv: list[str]) -> int:
    from zoo.models.yolov8.model import UNBUILT_MODES, UNBUILT_PREDICT_OPTIONS, predict_options
    from zoo.models.yolov8.predict import BOOL_PREDICT_OPTIONS, PREDICT_OPTIONS, check_device, predict
    from zoo.registry import YOLO, YOLO_TASKS

    if {"-h", "--help", "help"} & set(argv):
        print(HELP.format(keys=" ".join(key for key in PREDICT_OPTIONS if key != "stream")))
        sys.exit(0)
    flags = {*BOOL_PREDICT_OPTIONS, *(k for k, default in UNBUILT_PREDICT_OPTIONS.items() if isinstance(default, bool))}
    task, mode, overrides = parse(argv, flags)
    if mode not in MODES:
        raise UsageError(f"mode={mode!r}: ultralytics' modes are {', '.join(MODES)}; mlx-zoo runs predict")
    if mode != "predict":
        raise UsageError(f"yolo {mode} is not available in mlx-zoo: {UNBUILT_MODES[mode]}")
    if task is not None and task not in YOLO_TASKS:
        raise UsageError(f"task={task!r}: the YOLO models here make {', '.join(YOLO_TASKS)}")
    if "source" not in overrides:
        raise UsageError("no source=: pass source=IMAGE, FOLDER, VIDEO, GLOB or URL (ultralytics falls back to "
                         "sample images it ships; mlx-zoo ships none)")
    source, model_name = overrides.pop("source"), overrides.pop("model", None)
    weights = overrides.pop("weights", None)  # mlx-zoo's, which its errors offer (no network: weights=PATH)
    overrides.pop("stream", None)  # the command line always streams
    if overrides.get("show") is True:  # predict's own line says r.show(), which a command line has no way to call
        raise UsageError("show=True (a window of each image or frame) is not available in mlx-zoo: the annotated "
                         "images and videos are saved in the run folder (save=True, the default here): open them there")
    try:  # the keys and the device, before the model loads
        overrides = predict_options({"save": True, "verbose": True, **overrides})  # as ultralytics' command line
        check_device(overrides.get("device"))
    except ZooError as e:
        raise UsageError(str(e)) from None
    if model_name is None:
        model_name = DEFAULT_MODELS[task or "detect"]
        print(f"note: no model=: {model_name}, as ultralytics", file=sys.stderr)
    model = YOLO(str(model_name), task=task, weights=weights,
                 dtype="float16" if overrides.get("half") is True else "float32")
    results = predict(model, source, stream=True, **overrides)  # overrides already predict_options
    labelled = sum(bool(r.boxes is not None and len(r.boxes)) for r in results)
    save_dir = os.path.relpath(model.predictor.save_dir)  # runs/detect/predict: ultralytics prints the absolute path
    if overrides["save"] or overrides.get("save_crop"):
        print(f"Results saved to {save_dir}", file=sys.stderr)
    if overrides.get("save_txt"):
        print(f"{labelled} label{'s' * (labelled != 1)} saved to {os.path.join(save_dir, 'labels')}",
              file=sys.stderr)
    skipped = len(model.predictor.skipped)
    if skipped:  # a command's bad input is an error (exit 1), as mlx-zoo's own form's, where predict() warns
        raise ZooError(f"{skipped} input{'s were' if skipped > 1 else ' was'} skipped, named in the warning"
                       f"{'s' * (skipped > 1)} above: fix or remove {'them' if skipped > 1 else 'it'} (the others "
                       "were processed)")
    return 0
