"""A disk that fills, a file size limit: every writer fails in one line, leaves no temporary file and no output
cut short under its final name, keeps every record written before, and --resume then finishes the run with every
item once.

A full disk is made in-process (``FullDisk``: the files zoo opens for writing fill it at a chosen write, which is cut
short, the next ones refused with ENOSPC, as the kernel does); a file size limit in a child process (RLIMIT_FSIZE,
whose EFBIG also cuts a write short first): both run unprivileged, as root too.
"""
from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from zoo.run import main
from zoo.sources import read_jsonl

ROOT = Path(__file__).resolve().parent.parent


def path_of(fd: int) -> str:
    if hasattr(fcntl, "F_GETPATH"):  # macOS
        return fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024)).rstrip(b"\0").decode()
    return os.readlink(f"/proc/self/fd/{fd}")


class FullDisk:
    """``os.fdopen`` for writing (zoo.files' OutputFile, zoo.sources' record files) on a disk that fills at the write
    call ``full_at`` (counted from 0 over all files, or those whose path holds ``where``: each writer of a run in
    turn, whatever the bytes, which a record's timings make vary): that write is cut short, half its bytes written,
    and every one after it raises ENOSPC. ``writes``: the write calls made (a first run on an endless disk counts
    them)."""

    def __init__(self, full_at: int = 1 << 62, where: str = ""):
        self.full_at, self.where, self.writes = full_at, where, 0
        self.fdopen = os.fdopen

    def open(self, fd, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True):
        if not {"w", "a", "+"} & set(mode):
            return self.fdopen(fd, mode, buffering, encoding, errors, newline, closefd)
        disk, counted = self, self.where in path_of(fd)

        class Raw(io.FileIO):
            def write(self, data):
                if not counted:
                    return super().write(data)
                disk.writes += 1
                if disk.writes - 1 > disk.full_at or disk.writes - 1 == disk.full_at and len(data) < 2:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return super().write(memoryview(data)[:len(data) // 2] if disk.writes - 1 == disk.full_at else data)

        buffered = io.BufferedWriter(Raw(fd, "w", closefd=closefd))
        return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding, errors, newline)


def run_on(disk: FullDisk | None, argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    with monkeypatch.context() as patch:
        if disk is not None:
            patch.setattr(os, "fdopen", disk.open)
        code = main(argv)
    return code, capsys.readouterr().err


def one_error(code: int, err: str, *words: str) -> str:
    """The run failed in exactly one `error:` line holding ``words``, without a traceback."""
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 1 and len(errors) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert all(word in errors[0] for word in words), errors[0]
    return errors[0]


def hidden(folder: Path) -> list[str]:
    """Temporary files left behind."""
    return sorted(str(p) for p in folder.rglob(".*"))


def finished(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("disk") / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for n in range(4):
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(folder / f"im{n}.jpg", quality=95)
    return folder


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # records name inputs as given: the resumed runs start here too


def test_a_full_disk_ends_a_detect_run_in_one_line_and_resume_loses_nothing(images, tmp_path, capsys, monkeypatch):
    def argv(out: str, jsonl: str) -> list[str]:
        # no --save-crop: an image done again adds its crops beside those of its first try (im0.jpg, im02.jpg)
        return ["yolov8n", str(images), "--weights", "synthetic", "--imgsz", "64", "--conf", "0.01", "--save-txt",
                "--save-json", "--out", out, "--jsonl", jsonl]

    measure = FullDisk()
    assert run_on(measure, argv("fresh", "fresh.jsonl"), capsys, monkeypatch)[0] == 0
    expected = finished(tmp_path / "fresh")
    fresh = json.loads(expected.pop("predictions.json"))
    for full_at in range(min(16, measure.writes)):  # each writer of the first images in turn
        out, jsonl = f"o{full_at}", f"o{full_at}.jsonl"
        code, err = run_on(FullDisk(full_at), argv(out, jsonl), capsys, monkeypatch)
        # the first refused write ends the run: every image after it would fail alike, each after its model work
        error = one_error(code, err, "its disk is full", "free space")
        assert "--resume" in error or "the run stopped" not in error  # before the run (predictions.json's "[")
        assert hidden(tmp_path / out) == [] and not list(tmp_path.glob(".*.part"))
        code, err = run_on(None, [*argv(out, jsonl), "--resume"], capsys, monkeypatch)
        assert code == 0, err
        done = finished(tmp_path / out)
        assert sorted(map(json.dumps, json.loads(done.pop("predictions.json")))) == sorted(map(json.dumps, fresh))
        assert done == expected, full_at
        # every image's record once: the first run's records stand, none lost (an image whose outputs were
        # written before its record was refused is done again), none twice
        assert sorted(r["path"] for r in read_jsonl(jsonl)) == sorted(r["path"] for r in read_jsonl("fresh.jsonl"))


def test_a_full_disk_ends_a_classify_run_leaving_no_temporary_file(images, tmp_path, capsys, monkeypatch):
    def argv(name: str) -> list[str]:
        return ["resnet18", str(images), "--weights", "synthetic", "--jsonl", f"{name}.jsonl", "--json",
                f"{name}.json", "--csv", f"{name}.csv"]

    measure = FullDisk()
    assert run_on(measure, argv("fresh"), capsys, monkeypatch)[0] == 0
    # the records' writes, then the --json and --csv files' (written on close)
    for full_at in range(measure.writes):
        code, err = run_on(FullDisk(full_at), argv(f"r{full_at}"), capsys, monkeypatch)
        one_error(code, err, "its disk is full", "free space")
        assert hidden(tmp_path) == [], full_at  # the --json/--csv temporary files too, whichever close failed
        code, err = run_on(None, [*argv(f"r{full_at}"), "--resume"], capsys, monkeypatch)
        assert code == 0, err
        for suffix in (".json", ".csv"):
            assert Path(f"r{full_at}{suffix}").read_text() == Path(f"fresh{suffix}").read_text()
        assert [r["path"] for r in read_jsonl(f"r{full_at}.jsonl")] == [r["path"] for r in read_jsonl("fresh.jsonl")]


def noise_video(path: Path, frames: int) -> Path:
    """A 96x64 MPEG-4 video of random frames (which compress little: a large annotated video)."""
    import av

    rng = np.random.default_rng(1)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 96, 64, "yuv420p"
        for _ in range(frames):
            rgb = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())
    return path


def test_a_video_the_disk_fills_midway_is_dropped_and_resumed_whole(tmp_path, capsys, monkeypatch):
    pytest.importorskip("av")  # the video extra
    noise_video(tmp_path / "clip.mp4", frames=60)  # more than H.264's lookahead: written while frames come
    argv = ["yolov8n", "clip.mp4", "--weights", "synthetic", "--imgsz", "64", "--out", "o", "--jsonl", "o.jsonl"]
    measure = FullDisk(where="clip.mp4")
    assert run_on(measure, [*argv[:-4], "--out", "fresh", "--jsonl", "fresh.jsonl"], capsys, monkeypatch)[0] == 0
    for full_at in (0, measure.writes // 2, measure.writes - 1):  # the video's first write, one midway, its last
        code, err = run_on(FullDisk(full_at, "clip.mp4"), [*argv, "--overwrite"], capsys, monkeypatch)
        one_error(code, err, "o/clip.mp4", "its disk is full")
        assert not (tmp_path / "o" / "clip.mp4").exists() and hidden(tmp_path / "o") == [], full_at
        code, err = run_on(None, [*argv, "--resume"], capsys, monkeypatch)
        assert code == 0, err
        assert (tmp_path / "o" / "clip.mp4").read_bytes() == (tmp_path / "fresh" / "clip.mp4").read_bytes()
        assert [r["frame"] for r in read_jsonl("o.jsonl")] == list(range(60))
        (tmp_path / "o" / "clip.mp4").unlink()


# a child under a file size limit (bytes; SIGXFSZ ignored, as Python does): writes past it are cut short, then EFBIG
LIMITED = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.argv = sys.argv[1:]
exec(sys.argv[1])
"""


def limited(limit: int, code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LIMITED, str(limit), code, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_an_image_cut_short_by_a_file_size_limit_is_an_error_not_a_truncated_file(images, tmp_path):
    # Pillow's JPEG encoder writes to the file's descriptor itself and missed a short write: the annotated image,
    # cut at the limit, was renamed into place as whole (exit 0), and --resume took it as done
    cli = "from zoo.run import main; sys.exit(main(sys.argv[2:]))"
    proc = limited(1500, cli, tmp_path, "yolov8n", str(images / "im0.jpg"), "--weights", "synthetic", "--imgsz", "64",
                   "--out", "o")
    one_error(proc.returncode, proc.stderr, "o/im0.jpg", "largest file allowed", "ulimit -f")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["mlx_zoo_run.json"]  # nothing cut, nothing hidden
    api = ("import zoo\nfrom zoo.errors import ZooError\nresult = zoo.YOLO('yolov8n', weights='synthetic')"
           "(sys.argv[2], imgsz=64)[0]\ntry:\n    result.save('a.jpg')\nexcept ZooError as e:\n    print(e)\n")
    proc = limited(1500, api, tmp_path, str(images / "im1.jpg"))
    assert proc.returncode == 0 and "cannot write a.jpg: it would pass the largest file allowed" in proc.stdout, proc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_a_record_file_past_the_file_size_limit_ends_the_run_and_resume_completes_it(images, tmp_path):
    cli = "from zoo.run import main; sys.exit(main(sys.argv[2:]))"
    argv = ["resnet18", str(images), "--weights", "synthetic", "--jsonl", "r.jsonl", "--csv", "r.csv"]
    proc = limited(1000, cli, tmp_path, *argv)  # the records of two images fit, the third's is cut
    one_error(proc.returncode, proc.stderr, "r.jsonl", "largest file allowed", "--resume")
    assert hidden(tmp_path) == []
    whole = (tmp_path / "r.jsonl").read_text().splitlines(keepends=True)
    assert all(line.endswith("\n") for line in whole[:-1]) and len(whole) >= 2  # the records before stand
    proc = subprocess.run([sys.executable, "-m", "zoo.run", *argv, "--resume"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["path"] for r in read_jsonl(tmp_path / "r.jsonl")) == sorted(
        str(images / f"im{n}.jpg") for n in range(4))
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 5  # the header and each image once


def test_a_video_past_the_file_size_limit_fails_alone_not_every_input_after_it(images, tmp_path):
    pytest.importorskip("av")
    noise_video(tmp_path / "clip.mp4", frames=10)  # its annotated video passes the limit, an image's does not
    cli = "from zoo.run import main; sys.exit(main(sys.argv[2:]))"
    proc = limited(12000, cli, tmp_path, "yolov8n", "clip.mp4", *(str(images / f"im{n}.jpg") for n in range(4)),
                   "--weights", "synthetic", "--imgsz", "64", "--out", "o")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "no frames to write" not in proc.stderr, proc.stderr  # each image after it failed so
    assert {f"im{n}.jpg" for n in range(1, 4)} <= {p.name for p in (tmp_path / "o").iterdir()}
    assert not (tmp_path / "o" / "clip.mp4").exists() and hidden(tmp_path / "o") == []
