"""Every code block of README.md and docs/*.md runs as written, in order, twice.

The blocks are found, not listed: a fenced block tagged ``python`` runs in one namespace per page; a
block tagged ``bash``/``sh``/``shell`` or an untagged one holding commands (``python ...``, ``pip ...``)
runs command by command; other blocks (output, tables) are text. Every page runs in a folder of its
own holding tiny copies of the files the docs name (bus.jpg, photo.jpg, mask.png, photos/, best.pt ...),
with ``ZOO_WEIGHTS=synthetic`` (the documented offline default weights) and no network; the live sources
the docs name are the tests' own: an RTSP server at their stream URL (tests/rtsp_server.py), camera 0
simulated where PyAV opens it (tests/simulated_camera.py). The second
run of a page proves its examples can be run again: each command then succeeds or refuses in one
``error:`` line that names ``--overwrite``/``--resume``, and a refused command changes no file.

``python -m zoo.run``/``zoo.validate`` commands run in-process; other ``python`` commands (the
benchmarks/ scripts, ``python -c``, any command under ``nice``, ``prlimit`` or ``/usr/bin/time``, or setting an
``MLX_*`` variable MLX reads as it starts) run as child processes of this interpreter in the page's folder,
which links benchmarks/ and holds tests/any_models.py; ``python -m pytest tests/...`` (the project's
own tests, never tests/docs), ``python -m pytest`` alone (the suite: README's test command) and ``python
tests/...`` (a script of theirs) run in the repository's root.
A command continues on the next line while a quote is open (``python -c "..."`` over several lines).

A block that cannot run here says why in an HTML comment on the line before it
(``<!-- not-run: needs a cluster -->``); the test lists those. A block that needs more than this machine
says what in a mark of MARKS: here it is listed, and a test of its own runs it, as written, twice, where
that is found: ``<!-- gpu -->`` an MLX GPU (tests/gpu/test_docs_gpu.py; with ``../shared`` beside the clone
where it names the PyTorch peers), ``<!-- peers -->`` the PyTorch peers on the CPU
(tests/peers/test_docs_peers.py: torch and polars beside the project, ``../shared`` beside the clone),
``<!-- cluster -->`` a machine of its own, where ``ray stop`` ends no one else's Ray
(tests/cluster/test_docs_cluster.py). Commands that start Ray (``--ray``, ``ray_*.py``, Ray's ``ray start``/``stop``,
``import ray``) run in the ``ray``-marked test (``pytest -m ray``), in the same order.

As in a shell, ``export NAME=value`` sets NAME for the page's later commands, and ``$NAME``/``${NAME}`` outside
single quotes is NAME's value (one that is not set fails the test: the page says what to set). A console script
of an installed package (Ray's ``ray``) runs as its entry point under this interpreter.
"""
from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import FIXTURES, MANIFESTS
from rtsp_server import RTSPServer, moving_picture
from simulated_camera import SimulatedCamera
from torch_writer import module_tree, tensor, write_torch_zip
from zoo.errors import ZooError

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->")
# What a block marked <!-- NAME --> needs, and the test that runs it
MARKS = {"gpu": "needs a GPU (tests/gpu/test_docs_gpu.py runs it)",
         "peers": "needs the PyTorch peers: torch, polars, ../shared (tests/peers/test_docs_peers.py runs it)",
         "cluster": "needs a machine where no other Ray runs: ray stop ends every Ray process of the machine "
                    "(tests/cluster/test_docs_cluster.py runs it)"}
MARK = re.compile(r"<!--\s*(" + "|".join(MARKS) + r")\s*-->")
SHELL_TAGS = {"bash", "sh", "shell", "console", "zsh"}
COMMAND = re.compile(r"^(\w+=\S*\s+)*(nice\s+|prlimit(\s+-[-\w=]+)*\s+)?(/usr/bin/time(\s+-\w+)*\s+)?"
                     r"(python3?|pip|ray|zoo-run|zoo-validate)\s")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    tag: str
    text: str
    not_run: str | None  # the reason given in a <!-- not-run: ... --> comment before it
    mark: str | None  # a key of MARKS, from a <!-- gpu -->, <!-- peers --> or <!-- cluster --> comment before it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        if self.tag in ("python", "py"):
            return "python"
        if self.tag in SHELL_TAGS or (not self.tag and any(COMMAND.match(c) for c in commands(self.text))):
            return "shell"
        return "text"

    @property
    def uses_ray(self) -> bool:
        return self.kind == "python" and re.search(r"^\s*import ray\b|zoo\.ray\b", self.text, re.M) is not None


def blocks(page: Path) -> list[Block]:
    found, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, end = opening.group(1), i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        reason, mark = NOT_RUN.search(before), MARK.search(before)
        found.append(Block(page, i + 1, opening.group(2).lower(), "\n".join(lines[i + 1:end]),
                           reason.group(1) if reason else None, mark.group(1) if mark else None))
        i = end + 1
    return found


def commands(text: str) -> list[str]:
    """A shell block's commands: continuation lines joined, and lines joined while a quote is open;
    comment lines and blank lines dropped (a command's own comment stays: ``# exit 1`` there is the
    exit code the docs promise)."""
    found, current = [], None
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        if current is not None:  # inside a quote: every line is the command's, "#" lines too
            current += "\n" + line
        elif line.strip() and not line.strip().startswith("#"):
            current = line
        else:
            continue
        if _quotes_closed(current):
            found += [current.strip()] if "\n" in current else [part.strip() for part in current.split(" && ")]
            current = None
    return found + ([current.strip()] if current is not None else [])  # a quote never closed: shlex says so


def _quotes_closed(line: str) -> bool:
    try:
        shlex.split(line, comments=True)
    except ValueError:  # No closing quotation
        return False
    return True


def uses_ray(command: str) -> bool:
    """``--ray``, a script that starts Ray itself (benchmarks/ray_bench.py), or Ray's command line (``ray start``)."""
    words = shlex.split(command, comments=True)
    program = next((word for word in words if not re.fullmatch(r"\w+=.*", word)), "")
    return program == "ray" or "--ray" in words or \
        any(Path(word).name.startswith("ray_") and word.endswith(".py") for word in words)


def expand(command: str) -> str:
    """``command`` with ``$NAME`` and ``${NAME}`` outside single quotes replaced by NAME's value, as the shell does."""
    def value(match: re.Match) -> str:
        if match.group(0).startswith("'"):
            return match.group(0)
        name = match.group(1) or match.group(2)
        if name not in os.environ:
            pytest.fail(f"{command!r}: ${name} is not set (the page says what to set it to)")
        return os.environ[name]

    return re.sub(r"'[^']*'|\$(\w+)|\$\{(\w+)\}", value, command)


# --- the files the docs name, tiny --------------------------------------------------------------------------

def _image(path: Path, size: tuple[int, int], seed: int) -> None:
    """A smooth picture with a few blocks of colour (JPEG-friendly, not noise)."""
    width, height = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], -1).astype(np.uint8)
    for _ in range(3):
        x0, y0 = rng.integers(0, width // 2), rng.integers(0, height // 2)
        rgb[y0:y0 + height // 3, x0:x0 + width // 3] = rng.integers(0, 255, 3)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgb).save(path)


def _mask(path: Path, size: tuple[int, int]) -> None:
    width, height = size
    mask = np.zeros((height, width), np.uint8)
    mask[height // 3:height // 2, width // 3:width // 2] = 255
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(mask).save(path)


def _video(path: Path, frames: int = 4, size: tuple[int, int] = (64, 48)) -> None:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = *size, "yuv420p"
        for i in range(frames):
            rgb = np.full((size[1], size[0], 3), 40 * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())


def _untrained_head(source: Path, target: Path) -> None:
    """``source``, a `yolo train` best.pt, with the head an untrained detector has (the synthetic weights'
    zoo.models.yolov8.synthetic_init): its random head scores every anchor ~0.5 (300 boxes per image,
    minutes of annotate), this one finds a few dozen boxes of its first class. Each tensor lies in a
    storage of its own in the zip: those of the changed tensors are found by their bytes and replaced."""
    from zoo.models.yolov8 import synthetic_init
    from zoo.weights.checkpoint import read_checkpoint_with_meta

    state_dict, _ = read_checkpoint_with_meta(source)
    head = synthetic_init({name: a.astype(np.float32) for name, a in state_dict.items()})
    replaced = {state_dict[name].tobytes(): head[name].astype(state_dict[name].dtype).tobytes()
                for name in state_dict if not np.array_equal(state_dict[name], head[name])}
    found = set()
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for item in original.infolist():
            data = original.read(item)
            if data in replaced:
                found.add(data)
            copy.writestr(item, replaced.get(data, data))
    assert len(found) == len(replaced), f"{source}: a changed tensor shares its storage"


SMALL = (64, 48)
STREAM_URL = "rtsp://localhost:8554/live"
CAMERA_COMMAND = re.compile(r"^python -m zoo\.run \S+ 0 ", re.M)  # the run of camera 0 (docs/yolov8.md)
# The photo and the folder of photos, as small as each page's commands allow (their cost grows with
# the pixels: LaMa's pass, segment everything's masks): a page's prompts must lie in them.
PHOTO_SIZES = {"photo": (640, 480), "photos": SMALL}  # --box 320,40,600,400 (mobilesam.md, ray.md)
PAGE_PHOTO_SIZES = {
    "README.md": {"photo": (416, 408)},  # --point 100,400,0 --box 50,60,400,300
    "lama.md": {"photo": SMALL},  # no prompts
    "mobilesam.md": {"photos": (208, 208)},  # mobilesam photos/ --box 10,10,200,200
}


# Pages whose best.pt is another `yolo train` file than the 3-class YOLOv8n detector the others use:
# (manifest, ultralytics' model class, names or None for COCO's, yaml file, training imgsz)
PAGE_BEST_PT = {
    "segment-pose.md": (MANIFESTS / "yolov8n-seg.json", "SegmentationModel", None, "yolov8n-seg.yaml", 640),
    "yolo11.md": (FIXTURES / "yolo11" / "custom_best.manifest.json", "DetectionModel",
                  {0: "person", 1: "forklift", 2: "pallet"}, "yolo11n.yaml", 320),
}


def _yolo_best_pt(path: Path, manifest: Path, model_class: str, names: dict | None, yaml: str, imgsz: int) -> None:
    """A `yolo train` best.pt as strip_optimizer leaves it (the model in fp16, its training args) holding
    synthetic:0 weights with an untrained detector's head (zoo.models.yolov8.synthetic_init)."""
    from zoo.models.yolov8 import class_names, synthetic_init
    from zoo.weights.synthetic import read_manifest, synthetic_state_dict

    names = names or dict(enumerate(class_names()))
    state_dict = synthetic_init(synthetic_state_dict(read_manifest(manifest), 0))
    half = {name: a.astype(np.float16) for name, a in state_dict.items() if a.dtype == np.float32}
    args = {"task": "segment" if model_class == "SegmentationModel" else "detect", "mode": "train", "model": yaml,
            "imgsz": imgsz}
    model = module_tree(half, f"ultralytics.nn.tasks.{model_class}", names=names, nc=len(names),
                        stride=tensor([8, 16, 32]), yaml={"nc": len(names), "scale": "n", "yaml_file": yaml}, args=args)
    path.unlink(missing_ok=True)  # a hard link to the shared samples: never written through
    write_torch_zip(path, {"epoch": -1, "best_fitness": None, "model": model, "ema": None, "updates": None,
                           "optimizer": None, "train_args": args})


def _photos(root: Path, sizes: dict[str, tuple[int, int]]) -> None:
    """photo.jpg with mask.png, photos/ with masks/ (a mask per photo), replacing any there."""
    for path in [root / "photo.jpg", root / "mask.png", *root.glob("photos/*"), *root.glob("masks/*")]:
        path.unlink(missing_ok=True)  # a hard link to the shared samples: never written through
    _image(root / "photo.jpg", sizes["photo"], 0)
    _mask(root / "mask.png", sizes["photo"])
    for i, name in enumerate(["a", "b"]):
        _image(root / "photos" / f"{name}.jpg", sizes["photos"], 10 + i)
        _mask(root / "masks" / f"{name}.png", sizes["photos"])


def _coco_val(root: Path) -> None:
    """val2017/ with one image named as COCO's, and annotations/instances_val2017.json: its ground truth
    (one person), in COCO's 91-id categories; person_keypoints_val2017.json: that person's keypoints."""
    from zoo.models.yolov8 import COCO91_IDS, class_names

    _image(root / "val2017" / "000000397133.jpg", SMALL, 20)
    (root / "annotations").mkdir()
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps({
        "images": [{"id": 397133, "file_name": "000000397133.jpg", "width": SMALL[0], "height": SMALL[1]}],
        "annotations": [{"id": 1, "image_id": 397133, "category_id": 1, "bbox": [8, 8, 32, 24], "area": 768,
                         "iscrowd": 0}],
        "categories": [{"id": i, "name": name} for i, name in zip(COCO91_IDS, class_names())]}))
    # segment-pose.md's keypoints ground truth: that person with COCO's 17 keypoints, all labelled
    keypoints = [[8 + 2 * (k % 5), 8 + 4 * (k // 5), 2] for k in range(17)]
    (root / "annotations" / "person_keypoints_val2017.json").write_text(json.dumps({
        "images": [{"id": 397133, "file_name": "000000397133.jpg", "width": SMALL[0], "height": SMALL[1]}],
        "annotations": [{"id": 1, "image_id": 397133, "category_id": 1, "bbox": [8, 8, 32, 24], "area": 768,
                         "iscrowd": 0, "num_keypoints": 17, "keypoints": sum(keypoints, [])}],
        "categories": [{"id": 1, "name": "person", "keypoints": [f"k{k}" for k in range(17)], "skeleton": []}]}))


def _make_samples(root: Path) -> None:
    from zoo.weights.synthetic import read_manifest, synthetic_state_dict

    (root / "samples").mkdir()
    shutil.copy(ROOT / "samples" / "chelsea.png", root / "samples")
    _photos(root, PHOTO_SIZES)
    for i, name in enumerate(["bus.jpg", "cat.jpg", "a.jpg", "b.jpg", "images/street.jpg", "images/park.jpg",
                              "data/a.png", "panorama.tif", "people.jpg", "yard.jpg"]):
        _image(root / name, SMALL, i + 1)
    for name in ["hole.png", "a_mask.png", "data/a_mask001.png"]:
        _mask(root / name, SMALL)
    (root / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "any_models.py", root / "tests")  # validate-any-model.md's --module
    for name in ["clip.mp4", "video.mp4", "videos/a.mp4", "videos/b.mp4"]:
        (root / name).parent.mkdir(exist_ok=True)
        _video(root / name)
    _coco_val(root)
    _untrained_head(FIXTURES / "yolov8" / "custom_best.pt", root / "best.pt")  # a `yolo train` best.pt, 3 classes
    for path in ["runs/detect/train/weights/best.pt", "runs/train/weights/best.pt"]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "best.pt", root / path)
    state_dict = synthetic_state_dict(read_manifest(MANIFESTS / "mobilesam.json"), 0)
    write_torch_zip(root / "mobile_sam.pt", {k: tensor(v) for k, v in state_dict.items()})


@pytest.fixture(scope="session")
def samples(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("doc-samples")
    _make_samples(root)
    return root


@pytest.fixture
def page_folder(samples, tmp_path, monkeypatch, request) -> Iterator[Path]:
    """A fresh folder with the samples (hard links: no command writes into an input) and the page's
    photo sizes, the page's cwd; an RTSP server of a short stream at STREAM_URL for a page that names it, and
    a simulated camera 0 (tests/simulated_camera.py) for a page that runs one."""
    folder = tmp_path / "page"
    shutil.copytree(samples, folder, copy_function=os.link)
    sizes = PAGE_PHOTO_SIZES.get(request.node.callspec.params["page"].name)
    if sizes:
        _photos(folder, {**PHOTO_SIZES, **sizes})
    best_pt = PAGE_BEST_PT.get(request.node.callspec.params["page"].name)
    if best_pt:
        _yolo_best_pt(folder / "best.pt", *best_pt)
    (folder / "benchmarks").symlink_to(ROOT / "benchmarks", target_is_directory=True)  # the scripts, read only
    if (ROOT.parent / "shared").is_dir():  # ../shared as beside the clone: the PyTorch peers of gpu/peers blocks
        (folder.parent / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    text = request.node.callspec.params["page"].read_text()
    with contextlib.ExitStack() as live_sources:
        if STREAM_URL in text:  # the stream a page's command reads
            live_sources.enter_context(RTSPServer("localhost", 8554, "/live", frames=40, fps=20))
        if CAMERA_COMMAND.search(text):  # camera 0, simulated where PyAV opens it: this machine has none
            live_sources.enter_context(SimulatedCamera())
        yield folder


# --- running them --------------------------------------------------------------------------------------------

ENTRY_POINTS = {"zoo.run": "zoo.run", "zoo.validate": "zoo.cli.validate"}


def run_command(command: str, monkeypatch, in_process: bool = True) -> tuple[int, str]:
    """One documented command, in-process (the entry points; ``in_process=False``: every command a process of its
    own, as typed in a terminal): its exit code and what it printed."""
    import importlib

    words = shlex.split(expand(command), comments=True)
    with monkeypatch.context() as scoped:
        mlx_settings = False  # MLX reads its MLX_* variables once, as it starts: a process of their own
        while words and re.fullmatch(r"\w+=.*", words[0]):  # VAR=value before the command
            name, _, value = words.pop(0).partition("=")
            scoped.setenv(name, value)
            mlx_settings |= name.startswith("MLX_") and name != "MLX_ENABLE_TF32"
        if not in_process or words[:2] != ["python", "-m"] or len(words) < 3 or words[2] not in ENTRY_POINTS \
                or mlx_settings:
            return run_child(words)
        main, argv = importlib.import_module(ENTRY_POINTS[words[2]]).main, words[3:]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(argv)
            except SystemExit as e:  # --help
                code = e.code or 0
    return code, out.getvalue()


def run_child(words: list[str]) -> tuple[int, str]:
    """A ``python`` command other than the entry points, in a child process of this interpreter: in the
    page's folder, or in the repository's root for the project's own tests (``python -m pytest tests/...``)
    and their scripts (``python tests/...``). A console script (``ray``) runs as its entry point under this
    interpreter, as the script its package installed beside it would (Ray's nodes then start their workers
    with it)."""
    program = words
    while program[:1] in (["nice"], ["/usr/bin/time"], ["prlimit"]):  # with its options (-v, --as=BYTES)
        program = program[1:]
        while program and program[0].startswith("-"):
            program = program[1:]
    prefix = words[:len(words) - len(program)]
    script = console_script(program[0]) if program else None
    if script:
        program = ["python", "-c", f"import sys; from {script.module} import {script.attr}; "
                   f"sys.argv[0] = {program[0]!r}; sys.exit({script.attr}())", *program[1:]]
    if not program or program[0] not in ("python", "python3"):
        pytest.fail(f"cannot run {shlex.join(words)!r}: run it here, or mark its block <!-- not-run: REASON -->")
    argv, cwd, limit = [sys.executable, *program[1:]], None, 600
    if program[1:3] == ["-m", "pytest"]:  # no path: the suite, README's test command (the long runs left out)
        paths = [word.split("::")[0] for word in program[3:]
                 if not word.startswith("-") and (ROOT / word.split("::")[0]).exists()]  # not an option's value
        assert all(path.startswith("tests/")
                             and not path.startswith(("tests/docs", "tests/gpu/test_docs", "tests/peers"))
                             and path.rstrip("/") != "tests/gpu" for path in paths), \
            f"{shlex.join(words)!r}: a page runs files of tests/ (never tests/docs, tests/gpu/test_docs_gpu.py or " \
            "tests/peers, which run the pages)"
        cwd, limit = ROOT, 3600
    elif program[1:2] and program[1].startswith("tests/"):  # a script of the tests, named from the root as written
        cwd = ROOT
    done = subprocess.run([*prefix, *argv], cwd=cwd, capture_output=True, text=True, timeout=limit)
    printed = done.stdout + done.stderr
    if "/usr/bin/time" in prefix:  # its report follows what the command printed
        printed = re.split(r"^(?:Command exited with non-zero status \d+$|\tCommand being timed:)", printed, maxsplit=1,
                           flags=re.M)[0]
    return done.returncode, printed


def console_script(name: str):
    """The entry point of the console script ``name`` of an installed package, or None."""
    from importlib.metadata import entry_points

    return next(iter(entry_points(group="console_scripts", name=name)), None)


def files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def run_shell(block: Block, folder: Path, monkeypatch, again: bool, ray: bool) -> None:
    for command in commands(block.text):
        if command.startswith("pip "):
            continue  # installing is the reader's step
        if command.startswith("export "):  # for the page's later commands, whichever run they are in
            for setting in shlex.split(expand(command), comments=True)[1:]:
                monkeypatch.setenv(*setting.split("=", 1))
            continue
        if uses_ray(command) != ray:
            continue
        before = files(folder)
        code, printed = run_command(command, monkeypatch)
        last = printed.strip().splitlines()[-1] if printed.strip() else ""
        promised = re.search(r"#.*\bexit (\d+)", command)
        if code == (int(promised.group(1)) if promised else 0):
            continue
        assert again, f"{block.where}: {command!r} exited {code}:\n{printed[-3000:]}"
        # run again: refusing to replace what the first run wrote is right, in one line that says how
        assert last.startswith("error: ") and ("--overwrite" in last or "--resume" in last), \
            f"{block.where}: run again, {command!r} exited {code}:\n{printed[-3000:]}"
        assert files(folder) == before, f"{block.where}: {command!r} refused but changed files"


def run_python(block: Block, namespace: dict, folder: Path, again: bool) -> None:
    text = block.text + "\n"
    linecache.cache[block.where] = (len(text), None, text.splitlines(True), block.where)  # tracebacks show it
    code = compile(text, block.where, "exec")
    before = files(folder)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(code, namespace)
    except ZooError as e:
        # run again: refusing to replace what the first run wrote is right, saying how to ask for it
        if not again or not ("overwrite=True" in str(e) or "resume=True" in str(e)):
            raise
        assert files(folder) == before, f"{block.where}: refused ({e}) but changed files"


def run_page(page: Path, folder: Path, monkeypatch, ray: bool, mark: str | None = None) -> list[str]:
    """Run the page's blocks twice in ``folder`` (``mark``: only those marked <!-- MARK -->, else all
    unmarked ones); the ones not run are returned as 'where: reason'."""
    skipped = []
    for again in (False, True):
        namespace = {"__name__": f"docs:{page.name}"}
        for block in blocks(page):
            if block.kind == "text" or block.mark != mark:
                if block.mark not in (None, mark) and not again:
                    skipped.append(f"{block.where}: {MARKS[block.mark]}")
                continue
            if block.not_run is not None:
                if not again:
                    skipped.append(f"{block.where}: {block.not_run}")
                continue
            if block.kind == "shell":
                run_shell(block, folder, monkeypatch, again, ray)
            elif block.uses_ray == ray:
                run_python(block, namespace, folder, again)
        if ray:  # the page's script ends: so does the cluster its ray.init started
            import ray as ray_module

            ray_module.shutdown()
    return skipped


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_runs_twice(page, page_folder, monkeypatch, capsys):
    skipped = run_page(page, page_folder, monkeypatch, ray=False)
    with capsys.disabled():  # the list of blocks that did not run, in every run's output
        print("".join(f"\nnot run: {line}" for line in skipped), end="\n" if skipped else "")


def test_the_yolov8_camera_line_annotates_the_frames_the_camera_gave(tmp_path, monkeypatch):
    """yolov8.md's camera line, as written, on camera 0 simulated where PyAV opens it (tests/simulated_camera.py: 30
    frames of 640x480 at 10 frames/s, then unplugged, mid-run). The run ends cleanly (exit 0): one line per frame it
    took, in the camera's order, the last frame among them; notes that count the frames not taken and say the
    camera ended; runs/cam/camera0.mp4 whole (nothing else left beside it but the run's settings), holding the
    frames of those lines, each the camera's picture under the boxes."""
    import av

    [command] = [command for block in blocks(ROOT / "docs" / "yolov8.md") if block.kind == "shell"
                 for command in commands(block.text) if CAMERA_COMMAND.match(command)]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    with SimulatedCamera(frames=30, fps=10) as camera:
        code, printed = run_command(command, monkeypatch)
    assert code == 0 and camera.opened == 1, printed
    taken = [int(k) for k in re.findall(r"^camera0 frame (\d+): ", printed, re.M)]  # frame k: 1-based
    not_taken = sum(int(n) for n in re.findall(r"^note: camera0: (\d+) frames? (?:skipped|dropped): ", printed, re.M))
    assert "note: camera0: the camera ended after 30 frames (it was disconnected or stopped sending)" in printed
    assert taken == sorted(set(taken)) and taken[-1] == 30 and len(taken) + not_taken == 30, printed
    assert sorted(os.listdir("runs/cam")) == ["camera0.mp4", "mlx_zoo_run.json"]
    with av.open("runs/cam/camera0.mp4") as video:
        shown = [frame.to_ndarray(format="rgb24") for frame in video.decode(video.streams.video[0])]
    assert len(shown) == len(taken) and all(rgb.shape == (480, 640, 3) for rgb in shown)
    pictures = [moving_picture(k, (640, 480)).astype(np.int16) for k in range(30)]
    for k, rgb in zip(taken, shown):  # the camera's picture it is closest to, pixel by pixel, outside the boxes
        alike = [np.mean(np.all(np.abs(rgb - picture) < 12, axis=-1)) for picture in pictures]
        assert int(np.argmax(alike)) == k - 1, f"the line of frame {k} shows the camera's frame {np.argmax(alike) + 1}"


RAY_PAGES = [page for page in PAGES
             if any(b.mark is None and (b.kind == "python" and b.uses_ray or b.kind == "shell" and b.not_run is None
                                        and any(uses_ray(c) for c in commands(b.text))) for b in blocks(page))]


@pytest.mark.ray
@pytest.mark.parametrize("page", RAY_PAGES, ids=page_id)
def test_every_ray_block_runs_twice(page, page_folder, monkeypatch):
    run_page(page, page_folder, monkeypatch, ray=True)


def test_blocks_are_found_and_marked_with_reasons():
    """The finder sees every kind of block, and a not-run mark gives a reason."""
    found = [b for page in PAGES for b in blocks(page)]
    kinds = {b.kind for b in found}
    assert kinds == {"python", "shell", "text"}
    assert all(b.not_run for b in found if b.not_run is not None)
    assert {b.mark for b in found} == {None, *MARKS} and not any(b.mark and b.not_run is not None for b in found)
    assert sum(text.count("```") for text in (p.read_text() for p in PAGES)) == 2 * len(found)
