"""zoo.pipeline and the CLIs on it: order, batches, bad items, Ctrl-C and --resume, flat memory."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import PEAK_RSS_KB, file_tree
from zoo.errors import EXIT_INTERRUPTED, ZooError
from zoo.pipeline import Pipeline
from zoo.run import main
from zoo.sources import Item, Video, VideoWriter, read_jsonl, stream_name

ROOT = Path(__file__).parent.parent


def interrupt_after_the_first_batch(patch) -> None:
    """Pipeline.run, through ``patch`` (a monkeypatch or its context), with Ctrl-C (SIGINT) sent once its first batch
    is processed."""
    original_run = Pipeline.run

    def run(self, process):
        def process_then_ctrl_c(batch):
            process(batch)
            os.kill(os.getpid(), signal.SIGINT)
        return original_run(self, process_then_ctrl_c)

    patch.setattr(Pipeline, "run", run)


def serve_as_a_stream(monkeypatch, clip: Path) -> None:
    """Every Video (a stream URL too) opens ``clip``: a stream's frames without a server."""
    def served(self):
        import av

        container = av.open(str(clip))
        return container, container.streams.video[0]

    monkeypatch.setattr(Video, "open", served)

def items(n, bad=()):
    def load(i):
        if i in bad:
            raise ZooError(f"cannot read p{i}: damaged")
        return np.full(2, i)
    return [Item(f"p{i}", i, f"n{i}", f"n{i}", _load=lambda i=i: load(i)) for i in range(n)]


def test_order_batches_skip_and_bad_items(capsys):
    seen, errors = [], []
    run = Pipeline(items(9, bad={4}), batch=3, skip=lambda item: item.index == 7, workers=2,
                   on_error=lambda item, message: errors.append((item.index, message)))
    run.run(lambda batch: seen.append([int(r.data[0]) for r in batch]))
    assert seen == [[0, 1, 2], [3, 5, 6], [8]]  # source order, the bad one left out, the skipped one not read
    assert errors == [(4, "cannot read p4: damaged")]
    assert (run.done, run.failed, run.skipped, run.exit_code) == (7, 1, 1, 1)
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and err[0].endswith("error: cannot read p4: damaged")


def test_a_failing_batch_fails_its_items_and_the_run_goes_on():
    def process(batch):
        if batch[0].item.index == 2:
            raise ZooError("out of memory for this one")
    run = Pipeline(items(5), batch=2)
    run.run(process)
    assert (run.done, run.failed, run.exit_code) == (3, 2, 1)


def test_the_only_item_raises_its_error():
    with pytest.raises(ZooError, match="cannot read p0"):
        Pipeline(items(1, bad={0})).run(lambda batch: None)


def test_look_ahead_is_bounded():
    """At most `ahead` items are prepared beyond the batch in hand, however long the source."""
    prepared, held = [], []

    def prepare(item):
        prepared.append(item.index)
        return item.index

    def process(batch):
        time.sleep(0.005)  # a slow model: the reader must wait, not run ahead
        held.append(len(prepared) - batch[-1].data - 1)

    Pipeline(items(200), prepare, batch=4, workers=2, ahead=6).run(process)
    assert max(held) <= 6 + 1  # the queue, plus the one the reader holds while the queue is full


def test_first_sigint_finishes_the_batch_then_stops():
    processed = []

    def process(batch):
        processed.append([r.item.index for r in batch])
        if len(processed) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a batch is being processed
            time.sleep(0.05)
            processed[-1].append("finished")

    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN where a shell started us in the background
    run = Pipeline(items(20), batch=3)
    run.run(process)
    assert processed == [[0, 1, 2], [3, 4, 5, "finished"]]
    assert run.interrupted and run.exit_code == EXIT_INTERRUPTED and run.done == 6
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back


@pytest.mark.parametrize("command, hint", [
    (["resnet18", "imgs", "--jsonl", "r.jsonl"], "(the same command with --resume continues)"),
    (["resnet18", "imgs"], "(--resume needs the records of --jsonl PATH"),
    (["yolov8n", "imgs", "--imgsz", "64", "--out", "out"], "(the same command with --resume continues)"),
    (["lama", "imgs", "--mask", "mask.png", "--out", "out"], "(the same command without --overwrite continues"),
    (["mobilesam", "imgs", "--point", "8,8", "--out", "out"], None),  # no --resume: the line names none
    (["annotate", "imgs", "--det-weights", "synthetic", "--sam-weights", "synthetic", "--imgsz", "64"], None),
])
def test_ctrl_c_line_names_the_way_this_task_continues(command, hint, tmp_path, monkeypatch, capsys):
    """The line Ctrl-C prints says how the interrupted command continues; every task said '--resume
    continues', which lama, mobilesam and annotate do not have and classify has only with --jsonl."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    (tmp_path / "imgs").mkdir()
    for i in range(3):
        Image.fromarray(np.full((48, 64, 3), 40 * i, np.uint8)).save(tmp_path / "imgs" / f"{i}.png")
    Image.fromarray(np.full((48, 64), 255, np.uint8)).save(tmp_path / "mask.png")
    interrupt_after_the_first_batch(monkeypatch)
    assert main([*command, "--device", "cpu"]) == EXIT_INTERRUPTED
    line, = [line for line in capsys.readouterr().err.splitlines() if line.startswith("interrupted: stopped")]
    assert line.startswith("interrupted: stopped after 1 item(s); every finished output is kept")
    if hint is None:
        assert line.endswith("kept")
    else:
        assert hint in line


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """24 tiny images and one that is not an image."""
    root = tmp_path_factory.mktemp("pipeline")
    imgs = root / "imgs"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(24):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(imgs / f"{i:02d}.png")
    (imgs / "07b.png").write_bytes(b"not a png")
    return imgs


def classify(argv):
    return main(["resnet18", *argv, "--weights", "synthetic:0", "--device", "cpu", "--top-k", "2"])


@pytest.mark.parametrize("jsonl, fix", [(True, "the same command with --resume completes them"),
                                        (False, "run again with --overwrite for all")])
def test_ctrl_c_says_json_and_csv_are_partial(folder, tmp_path, monkeypatch, capsys, jsonl, fix):
    """Ctrl-C renamed classify's --json and --csv into place holding the images done: whole files that read as the
    run's results, the run saying only 'every finished output is kept'. One note says they are partial."""
    interrupt_after_the_first_batch(monkeypatch)
    out = {"json": tmp_path / "r.json", "csv": tmp_path / "r.csv"}
    argv = [str(folder), "--json", str(out["json"]), "--csv", str(out["csv"]),
            *(["--jsonl", str(tmp_path / "r.jsonl")] if jsonl else [])]
    assert classify(argv) == EXIT_INTERRUPTED
    assert len(json.loads(out["json"].read_text())) == 1 and len(out["csv"].read_text().splitlines()) == 2
    assert f"note: {out['json']} and {out['csv']} hold the images done before Ctrl-C only: {fix}" in (
        capsys.readouterr().err)


def test_classify_batch_is_batch_one_and_bad_items_are_error_records(folder, tmp_path, capsys):
    assert classify([str(folder), "--jsonl", str(tmp_path / "one.jsonl")]) == 1
    err = capsys.readouterr().err
    assert [line.split("error: ")[1] for line in err.splitlines() if "error:" in line] == [
        f"cannot read {folder / '07b.png'}: not an image file Pillow recognises"]
    assert classify([str(folder), "--batch", "5", "--jsonl", str(tmp_path / "five.jsonl"),
                     "--json", str(tmp_path / "five.json"), "--csv", str(tmp_path / "five.csv")]) == 1
    one, five = read_jsonl(tmp_path / "one.jsonl"), read_jsonl(tmp_path / "five.jsonl")
    # bit-identical probabilities; a bad image's record comes after the batch it fell in
    assert [r for r in one if "top" in r] == [r for r in five if "top" in r] and len(one) == len(five) == 25
    assert [r["path"] for r in one] == sorted(r["path"] for r in one)  # batch 1: the source's order
    assert [r for r in one if "error" in r] == [{"path": str(folder / "07b.png"),
                                                "error": f"cannot read {folder / '07b.png'}: not an image file Pillow recognises"}]
    # --json is the same object json.dumps writes at once; --csv one row per image
    assert (tmp_path / "five.json").read_text() == json.dumps({r["path"]: r["top"] for r in one if "top" in r}, indent=2)
    assert len((tmp_path / "five.csv").read_text().splitlines()) == 1 + 24
    assert not list(tmp_path.glob(".*.part"))


def test_resume_needs_jsonl_and_existing_jsonl_needs_a_flag(folder, tmp_path, capsys):
    assert classify([str(folder), "--resume"]) == 2
    assert "--resume continues the records of --jsonl" in capsys.readouterr().err
    (tmp_path / "r.jsonl").write_text("")
    assert classify([str(folder), "--jsonl", str(tmp_path / "r.jsonl")]) == 2
    assert "r.jsonl exists: pass --overwrite" in capsys.readouterr().err


def wait_for_lines(path: Path, n: int, proc, timeout: float = 300) -> None:
    start = time.time()
    while time.time() - start < timeout and proc.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never had {n} lines (exit {proc.poll()})")


def test_ctrl_c_keeps_finished_results_and_resume_does_only_the_rest(folder, tmp_path):
    """A real SIGINT to `python -m zoo.run`: exit 130, every finished record kept,
    then --resume classifies only the rest; the records equal an uninterrupted run's."""
    jsonl = tmp_path / "run.jsonl"
    command = [sys.executable, "-m", "zoo.run", "resnet18", str(folder), "--weights", "synthetic:0", "--device", "cpu",
               "--top-k", "2", "--batch", "2", "--jsonl", str(jsonl), "--json", str(tmp_path / "run.json")]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_lines(jsonl, 2, proc)  # two records (the first carries the header)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    kept = read_jsonl(jsonl)
    assert 2 <= len(kept) < 25 and "interrupted" in err and "Traceback" not in err
    assert set(json.loads((tmp_path / "run.json").read_text())) == {r["path"] for r in kept if "top" in r}
    assert not list(tmp_path.glob(".*.part"))

    done = subprocess.run(command + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr  # 1: the bad image failed again
    records = [r for r in read_jsonl(jsonl)]
    fresh = tmp_path / "fresh.jsonl"
    assert classify([str(folder), "--jsonl", str(fresh)]) == 1
    by_path = {r["path"]: r for r in records}
    assert len(records) == len(by_path) == 25  # nothing twice, the bad image's old error record replaced
    assert by_path == {r["path"]: r for r in read_jsonl(fresh)}
    resumed = [r for r in kept if "top" in r]
    assert f"{len(resumed)} skipped (done before)" in done.stderr
    assert f"{24 - len(resumed)} images classified" in done.stderr
    assert len(json.loads((tmp_path / "run.json").read_text())) == 24


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def test_kill_9_at_any_moment_then_resume_gives_every_input_once(folder, tmp_path):
    """SIGKILL (no handler runs: the OOM killer, a power cut) at several moments of a real run: the
    records reach the file as they come, --resume continues after each kill (a torn last line
    dropped with a note), and at the end every input has exactly one record."""
    jsonl = tmp_path / "k.jsonl"
    command = [sys.executable, "-m", "zoo.run", "resnet18", str(folder), "--weights", "synthetic:0", "--device", "cpu",
               "--top-k", "2", "--batch", "2", "--jsonl", str(jsonl)]
    for more in (1, 4):  # killed once the first record is written, then after a few more
        target = line_count(jsonl) + more
        proc = subprocess.Popen(command + ["--resume"] * jsonl.exists(), cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while proc.poll() is None and line_count(jsonl) < target:
            time.sleep(0.02)
        proc.kill()
        proc.wait(timeout=60)
    with open(jsonl, "a") as f:  # a kill in the middle of a line
        f.write(json.dumps({"path": str(folder / "23.png"), "top": [{"index": 1}]})[:30])
    done = subprocess.run(command + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr  # 1: the bad image failed again
    assert "its last line was cut off" in done.stderr and "internal error" not in done.stderr
    records = read_jsonl(jsonl)
    assert sorted(r["path"] for r in records) == sorted(str(p) for p in folder.iterdir())  # each input once
    assert sum("error" in r for r in records) == 1 and not list(tmp_path.glob(".*.part"))


def grey_video(path, n, fps=12.5, size=(64, 64)):
    with VideoWriter(path, fps=fps) as video:
        for i in range(n):
            video.write(np.full((*size, 3), 8 * i % 256, np.uint8))
    return path


def test_detect_video_keeps_count_rate_labels_and_crops(tmp_path, capsys):
    import av

    video = grey_video(tmp_path / "clip.mp4", 20)
    out = tmp_path / "out"
    argv = ["yolov8n", str(video), "--weights", "synthetic:0", "--device", "cpu", "--imgsz", "64", "--conf", "0.5",
            "--save-txt", "--save-conf", "--save-crop", "--vid-stride", "3", "--batch", "4", "--stream",
            "--jsonl", str(tmp_path / "d.jsonl"), "--out", str(out)]
    assert main(argv) == 0
    with av.open(str(out / "clip.mp4")) as container:
        stream = container.streams.video[0]
        assert sum(1 for _ in container.decode(stream)) == 20 // 3
        assert stream.average_rate == 12.5
    records = read_jsonl(tmp_path / "d.jsonl")
    assert [r["frame"] for r in records] == [2, 5, 8, 11, 14, 17]  # ultralytics' stride: the last of each 3
    # labels and crops named as ultralytics' predictor names them: the kept frames counted from 1
    for k, r in enumerate(records, 1):
        label = out / "labels" / f"clip_{k}.txt"
        lines = label.read_text().splitlines() if label.exists() else []
        assert len(lines) == len(r["detections"]) and all(len(line.split()) == 6 for line in lines)
    assert {p.name for p in (out / "labels").iterdir()} <= {f"clip_{k}.txt" for k in range(1, 7)}
    crops = list((out / "crops").rglob("*.jpg"))
    assert len(crops) == sum(len(r["detections"]) for r in records) > 0
    assert all((out / "crops" / r["detections"][0]["name"] / f"clip_{k}.jpg").exists()
               for k, r in enumerate(records, 1) if r["detections"])
    err = capsys.readouterr().err
    assert "6 images processed" in err and "Detections: " in err and "Speed: " in err
    # the annotated video exists: again without --overwrite is refused before any work
    assert main(argv) == 2
    assert "clip.mp4 exists" in capsys.readouterr().err


def test_detect_video_whose_frames_change_size_midway(tmp_path, capsys):
    """An MPEG-TS stream of 64x48 frames then 96x80 ones (two recordings joined): every frame after the change
    was an error ('frame 3 is 96x80, the video 64x48', exit 1) after its labels were written. Now every frame is
    a result, its labels in its own size, and the annotated video's frames from the change on are scaled to fit."""
    import av

    parts = []
    for size in ((64, 48), (96, 80)):
        with av.open(str(tmp_path / "part.ts"), "w") as container:
            stream = container.add_stream("mpeg2video", rate=10)
            stream.width, stream.height, stream.pix_fmt = *size, "yuv420p"
            for _ in range(3):
                container.mux(stream.encode(av.VideoFrame.from_ndarray(np.zeros((size[1], size[0], 3), np.uint8))))
            container.mux(stream.encode())
        parts.append((tmp_path / "part.ts").read_bytes())
    video = tmp_path / "joined.ts"
    video.write_bytes(b"".join(parts))
    with av.open(str(video)) as container:  # the first part's last frame is lost in the join
        sizes = [(f.width, f.height) for f in container.decode(video=0)]
    assert sizes[0] == (64, 48) and sizes[-1] == (96, 80)
    out = tmp_path / "out"
    argv = ["yolov8n", str(video), "--weights", "synthetic:0", "--device", "cpu", "--imgsz", "64", "--conf", "0",
            "--save-txt", "--jsonl", str(tmp_path / "d.jsonl"), "--out", str(out)]
    assert main(argv) == 0
    records = read_jsonl(tmp_path / "d.jsonl")
    assert [("error" in r, r["frame"]) for r in records] == [(False, n) for n in range(len(sizes))]
    assert sorted(p.name for p in (out / "labels").iterdir()) == [f"joined_{k}.txt" for k in range(1, len(sizes) + 1)]
    with av.open(str(out / "joined.mp4")) as container:
        assert [(f.width, f.height) for f in container.decode(video=0)] == [(64, 48)] * len(sizes)
    err = capsys.readouterr().err
    assert "error:" not in err
    assert err.count(f"note: {out / 'joined.mp4'}: frame {sizes.index((96, 80))} is 96x80, the video 64x48 (its "
                     "source changed size): such frames are scaled to fit it") == 1


RSS_PROBE = PEAK_RSS_KB + """
import sys
import numpy as np
import zoo
from zoo.models.yolov8.predict import predict
model = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
n = 0
for result in predict(model, sys.argv[1], stream=True, imgsz=64, conf=0.5, batch=int(sys.argv[2])):
    n += 1
print(n, peak_rss_kb())
"""


def test_stream_memory_is_flat_over_video_length(tmp_path):
    """issue 11: 300 frames through predict(stream=True) peak within 10% of 30 frames (each in its own process)."""
    peaks = {}
    for n in (30, 300):
        video = grey_video(tmp_path / f"v{n}.mp4", n)
        done = subprocess.run([sys.executable, "-c", RSS_PROBE, str(video), "4"], cwd=ROOT, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        frames, peak = map(int, done.stdout.split())
        assert frames == n
        peaks[n] = peak
    assert peaks[300] <= 1.10 * peaks[30], peaks


def test_yolov8_batch_is_batch_one_at_320():
    """Frames of one size: a batch of 4 gives each frame's batch-of-one boxes bit for bit (320 px)."""
    import zoo
    from zoo.models.yolov8.predict import predict

    model = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 256, (200, 320, 3), dtype=np.uint8) for _ in range(4)]
    batched = predict(model, frames, imgsz=320, conf=0.3, batch=4)
    single = predict(model, frames, imgsz=320, conf=0.3, batch=1)
    assert all(len(a.boxes) > 0 and np.array_equal(a.boxes.data, b.boxes.data) for a, b in zip(batched, single))


@pytest.mark.parametrize("command", [
    ["yolov8n", "--imgsz", "64", "--save-txt", "--jsonl", "r.jsonl", "--out", "out"],
    ["resnet18", "--jsonl", "r.jsonl"],
])
def test_a_live_stream_is_not_resumed(command, tmp_path, monkeypatch, capsys):
    """A stream URL (or camera) starts again at the frame it is showing, numbered from 0: Ctrl-C's line said 'the same
    command with --resume continues', and --resume then did detect's whole stream again, dropping the earlier run's
    records and replacing its label files with other frames' (classify: skipped the new run's first frames as done).
    Ctrl-C's line now says a live source is not resumed, and --resume over one is refused before any work. Ctrl-C is
    how a live source ends: its annotated video is kept (it was deleted as a video cut short, every time)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    clip = grey_video(tmp_path / "clip.mp4", 6)

    serve_as_a_stream(monkeypatch, clip)
    url = "tcp://127.0.0.1:9/live"
    with monkeypatch.context() as interrupted:
        interrupt_after_the_first_batch(interrupted)
        assert main([command[0], url, *command[1:], "--stream-buffer", "--device", "cpu"]) == EXIT_INTERRUPTED
    line, = [line for line in capsys.readouterr().err.splitlines() if line.startswith("interrupted: stopped")]
    assert line.endswith("kept (a camera or live stream is not resumed: its frames are new ones each run; run again "
                         "into new outputs)")
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 1
    if "--out" in command:  # the annotated stream so far is kept (it was dropped as a video cut short)
        assert frame_count(tmp_path / "out" / f"{stream_name(url)}.mp4") == 1
    before = file_tree(tmp_path)
    assert main([command[0], url, *command[1:], "--stream-buffer", "--device", "cpu", "--resume"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --resume cannot continue {url}: a camera's or live stream's frames are new ones each run, not those "
        "the earlier run left off at (its results would be replaced, or new frames skipped as done): run without "
        "--resume, into another --out or --jsonl")
    assert file_tree(tmp_path) == before


def frame_count(video: Path) -> int:
    import av

    with av.open(str(video)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_a_live_streams_video_is_kept_when_the_loop_is_left(tmp_path, monkeypatch):
    """predict(stream=True, save=True) over a camera or live stream ends when the caller leaves the loop: the
    annotated video of the frames so far is kept, as ultralytics keeps it (it was deleted as a video cut short).
    A video file left halfway is still dropped (its frames left unread: not a whole output), with the run folder
    it made."""
    import zoo

    clip = grey_video(tmp_path / "clip.mp4", 6)

    serve_as_a_stream(monkeypatch, clip)
    model = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    for source, kept in (("tcp://127.0.0.1:9/live", True), (str(clip), False)):
        results = model.predict(source, stream=True, save=True, stream_buffer=True, imgsz=64, verbose=False,
                                project=str(tmp_path / "runs"), name=Path(source).stem)
        for _ in zip(range(2), results):
            pass
        results.close()  # the loop left after two frames
        video = tmp_path / "runs" / Path(source).stem / f"{stream_name(source) if kept else Path(source).stem}.mp4"
        if kept:
            assert frame_count(video) == 2 and [p.name for p in video.parent.iterdir()] == [video.name]
        else:  # the run folder it made goes with it, empty (it was left behind)
            assert not video.parent.exists() and (tmp_path / "runs").is_dir()
