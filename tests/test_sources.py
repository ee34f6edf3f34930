"""zoo.sources: every source kind yields the same Items; bad items are reported one by one; writers are atomic."""
import errno
import io
import itertools
import json
import os
import re
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import PEAK_RSS_KB, write_video
from zoo import sources
from zoo.errors import UsageError, ZooError
from zoo.sources import (RECORD_LINE_LIMIT, RUN_KEY, Arrays, Camera, Chain, Files, Folder, Glob, JsonListReader,
                         JsonListWriter, JsonlWriter, PathList, RecordReader, Video, VideoWriter, open_source,
                         read_json_list, read_jsonl, read_records, records_header)

av = pytest.importorskip("av")  # the `video` extra, part of `test`


def save(path, value=0, size=(12, 16), mode="RGB"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size[::-1], value if mode != "RGB" else (value, value, value)).save(path)
    return path


def loaded(source):
    """(name, shape or the error) per item."""
    out = []
    for item in source:
        try:
            out.append((item.name, item.load().shape))
        except ZooError as e:
            out.append((item.name, f"error: {e}"))
    return out


def grey_video(path, n, fps=10.0, size=(24, 32), stride=1):
    """n frames whose grey level says their number (frame i: 8 * i), readable after lossy coding."""
    with VideoWriter(path, fps=fps) as video:
        for i in range(n):
            video.write(np.full((*size, 3), 8 * i % 256, np.uint8))
    return path


def test_folder_sorted_unique_names_hidden_files_skipped(tmp_path):
    save(tmp_path / "b.png", 10)
    save(tmp_path / "a.jpg", 20)
    save(tmp_path / "A.png", 30, size=(5, 7))  # same stem ignoring case: its outputs must not collide
    save(tmp_path / ".hidden.png")
    (tmp_path / ".out.png.part").write_bytes((tmp_path / "b.png").read_bytes())  # our partial outputs are no inputs
    (tmp_path / "notes.txt").write_text("not an image")
    source = open_source(tmp_path)
    assert isinstance(source, Folder) and source.total == 3
    items = list(source)
    assert [Path_name(i.path) for i in items] == ["A.png", "a.jpg", "b.png"]
    assert [i.name for i in items] == ["A", "a_2", "b"]
    assert [i.index for i in items] == [0, 1, 2]
    assert items[0].load().shape == (5, 7, 3) and items[2].load()[0, 0, 0] == 10
    assert items[0].meta == {"path": str(tmp_path / "A.png")} and items[0].frame is None


def Path_name(p):
    return p.rsplit("/", 1)[-1]


def test_recursive_folder_and_empty_folder(tmp_path):
    save(tmp_path / "top.png")
    save(tmp_path / "sub" / "deep" / "x.png")
    assert open_source(tmp_path).total == 1
    assert [i.name for i in open_source(tmp_path, recursive=True)] == ["x", "top"]
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    save(tmp_path / "empty" / "sub" / "y.png")
    with pytest.raises(ZooError, match="no images or videos in folder .*recursive=True"):
        Folder(tmp_path / "empty")
    with pytest.raises(ZooError, match="^not found: "):
        open_source(tmp_path / "nope")
    with pytest.raises(ZooError, match="^an empty list of inputs: pass image or video paths, or numpy arrays"):
        open_source([])  # predict([]): said what to pass, where 'no inputs given' left it to guess


def test_ultralytics_special_sources_are_one_error_saying_what_to_do(tmp_path, monkeypatch):
    """ultralytics takes 'screen' (LoadScreenshots), a .streams file (LoadStreams), YouTube pages (through pafy) and a
    torch.Tensor (LoadTensor) as sources: here each is one error saying so and what to pass instead, not 'not found:
    screen', a .streams file read as an image, a page opened as a video or 'cannot read images from a Tensor'."""
    monkeypatch.chdir(tmp_path)
    for given in ("screen", "SCREEN", "screen 0 100 100 640 480", ["screen"]):
        with pytest.raises(ZooError, match=r"screenshots are no source here .*PIL\.ImageGrab\.grab\(\)"):
            open_source(given)
    (tmp_path / "cams.streams").write_text("rtsp://host/a\nrtsp://host/b\n")
    for given in ("cams.streams", "other.streams"):
        with pytest.raises(ZooError, match=r"\.streams file .* is no source here: pass each stream's address"):
            open_source(given)
    for page in ("https://youtu.be/LNwODJXcvt4", "https://www.youtube.com/watch?v=LNwODJXcvt4"):
        with pytest.raises(ZooError, match=r"a YouTube page is no video stream here: pass the video's own address"):
            open_source(page)
    tensor = type("Tensor", (), {"__module__": "torch"})()  # torch's class, as far as open_source looks
    with pytest.raises(ZooError, match=r"^a torch\.Tensor is no source here .*: pass its images as PIL images, "
                                       r"\[PIL\.Image\.fromarray\(a\) for a in \(t\.permute\(0, 2, 3, 1\)"):
        open_source(tensor)
    save(tmp_path / "shot.png").rename(tmp_path / "screen")  # a file of that name is still the file
    assert [i.load().shape for i in open_source("screen")] == [(12, 16, 3)]


def test_a_recursive_walk_leaves_out_output_folders_with_one_note(tmp_path, capsys, monkeypatch):
    """--recursive with --out inside the input folder: the next run read the last run's annotated images as inputs
    (results of results, beside the results). The walk leaves out the run's output folders and folders holding an
    earlier run's settings file, in one note; such a folder named as the input itself is read."""
    from zoo.run import main

    for name in ("imgs/a.png", "imgs/sub/b.png"):
        save(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    run = ["yolov8n", "imgs", "--recursive", "--imgsz", "64", "--weights", "synthetic:0", "--device", "cpu"]
    assert main([*run, "--out", "imgs/out"]) == 0
    err = capsys.readouterr().err
    assert "2 images processed" in err and "note:" not in err
    note = ("note: imgs: left out imgs/out: output folder (the results of a run, not inputs); pass one as an input to "
            "read it")
    assert main([*run, "--out", "imgs/sub/next"]) == 0  # beside an earlier run's folder (its settings file)
    err = capsys.readouterr().err
    assert "2 images processed" in err and note in err.splitlines()
    assert sorted(os.listdir(tmp_path / "imgs" / "sub" / "next")) == ["a.png", "b.png", "mlx_zoo_run.json"]
    assert sorted(os.listdir(tmp_path / "imgs" / "out")) == ["a.png", "b.png", "mlx_zoo_run.json"]
    # its --out's images are the run's own, not the input folder's: resumed (was 'output imgs/out/a.png is a file
    # of the input folder imgs', so a run into it could not be continued)
    assert main([*run, "--out", "imgs/out", "--resume"]) == 0
    assert "2 skipped (done before)" in capsys.readouterr().err
    # a folder the user names is read, whatever it holds; a walk without outputs in it says nothing
    assert [i.name for i in open_source(tmp_path / "imgs" / "out", recursive=True)] == ["a", "b"]
    (tmp_path / "plain").mkdir()
    save(tmp_path / "plain" / "deep" / "c.png")
    assert [i.name for i in open_source(tmp_path / "plain", recursive=True, outputs=[tmp_path / "plain" / "new"])] == [
        "c"]
    assert "note:" not in capsys.readouterr().err
    with pytest.raises(ZooError, match="no images or videos in folder"):  # named by another spelling: left out too
        open_source("plain", recursive=True, outputs=[tmp_path / "plain" / "deep"])
    assert capsys.readouterr().err.startswith("note: plain: left out plain/deep: output folder (the results")


def test_glob_txt_and_csv_lists(tmp_path):
    for n in ("a", "b", "c"):
        save(tmp_path / "imgs" / f"{n}.png")
    glob = open_source(str(tmp_path / "imgs" / "[ab].png"))
    assert isinstance(glob, Glob) and [i.name for i in glob] == ["a", "b"]
    with pytest.raises(ZooError, match="no images or videos match"):
        open_source(str(tmp_path / "*.tif"))

    # relative entries are read relative to the list file; comments and blank lines are skipped
    (tmp_path / "list.txt").write_text("# mine\nimgs/c.png\n\n  imgs/missing.png\n" + str(tmp_path / "imgs/a.png"))
    txt = open_source(tmp_path / "list.txt")
    assert isinstance(txt, PathList) and txt.total == 3
    assert loaded(txt) == [("c", (12, 16, 3)), ("missing", f"error: not found: {tmp_path / 'imgs/missing.png'}"),
                           ("a", (12, 16, 3))]

    # a list written from the current folder into a sub-folder: its entries are read from there, as ultralytics
    # reads them; a folder named is its images and videos; an entry both beside the list and from the current folder
    # is the list's, with a note
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "here.txt").write_text("imgs/c.png\nimgs\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert [(i.path, i.name) for i in open_source("lists/here.txt")] == [
            ("imgs/c.png", "c"), ("imgs/a.png", "a"), ("imgs/b.png", "b"), ("imgs/c.png", "c_2")]
        with pytest.raises(ZooError, match="names no files: its folders hold no images or videos"):
            (tmp_path / "lists" / "empty").mkdir()
            (tmp_path / "lists" / "none.txt").write_text("empty\n")
            open_source("lists/none.txt")
        save(tmp_path / "lists" / "imgs" / "c.png")  # now beside the list too: the list's
        assert [i.path for i in open_source("lists/here.txt")][0] == "lists/imgs/c.png"

    (tmp_path / "timm.csv").write_text("index_0,filename\n3,imgs/b.png\n4,imgs/a.png\n")  # timm's column name
    assert [i.name for i in open_source(tmp_path / "timm.csv")] == ["b", "a"]
    (tmp_path / "bare.csv").write_text("imgs/c.png,1\nimgs/b.png,2\n")  # no header: the first column
    assert [i.name for i in open_source(tmp_path / "bare.csv")] == ["c", "b"]
    # one row: ultralytics' comma-separated list (LoadImagesAndVideos splits a .csv at its commas), every cell a path
    (tmp_path / "row.csv").write_text("imgs/c.png, imgs/a.png\n")
    assert [i.name for i in open_source(tmp_path / "row.csv")] == ["c", "a"]
    # a header mlx-zoo does not know is not taken for a path (ultralytics has no header rows): one error
    (tmp_path / "header.csv").write_text("image_path,score\nimgs/c.png,1\n")
    with pytest.raises(ZooError, match=r"header.csv: its first row \(image_path, score\) is neither a header naming "
                                       r"the path column \(path, filename, file, image, img\) nor a file that exists"):
        open_source(tmp_path / "header.csv")
    # a first row naming an image that is not there is a path (skipped as a .txt list's), not an unknown header
    (tmp_path / "gone.csv").write_text("imgs/missing.png,1\nimgs/c.png,2\n")
    assert loaded(open_source(tmp_path / "gone.csv")) == [
        ("missing", f"error: not found: {tmp_path / 'imgs/missing.png'}"), ("c", (12, 16, 3))]
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ZooError, match="names no files"):
        open_source(tmp_path / "empty.txt")


def test_a_url_in_a_list_is_named_as_written(tmp_path, monkeypatch):
    """A URL in a .txt/.csv list was taken for a relative path, its '//' collapsed: 'not found: https:/host/a.jpg',
    an error line naming no address the user wrote (and a .csv whose first cell was rtsp://cam/live was refused as
    an unknown header). ultralytics' lists name files too (LoadImagesAndVideos: 'does not exist'): one line now,
    before any work, naming the URL as written and what to do."""
    save(tmp_path / "a.png")
    monkeypatch.chdir(tmp_path)
    Path("urls.txt").write_text("a.png\nhttps://host/a.jpg\nrtsp://cam/live\n")
    with pytest.raises(ZooError) as refused:
        open_source("urls.txt")
    assert str(refused.value) == (
        "urls.txt names 2 URLs (https://host/a.jpg, ...): a list names files on this machine (as ultralytics' lists); "
        "download them and list the files, or pass each URL as an input of its own")
    Path("cams.csv").write_text("rtsp://cam/live,1\na.png,2\n")
    with pytest.raises(ZooError, match=r"^cams.csv names 1 URL \(rtsp://cam/live\): a list names files"):
        open_source("cams.csv")
    Path("paths.txt").write_text("a.png\n.//a.png\n")  # a path that holds '//' is still a path
    assert [item.name for item in open_source("paths.txt")] == ["a", "a_2"]


def test_a_file_url_in_a_list_is_the_file_it_names(tmp_path, monkeypatch):
    """A file:// URL names a file on this machine: it was refused as a URL, with advice to download it. It is read
    as the path it names (percent-decoded, file://localhost/ too); one of another host, or naming no file, is one
    error saying so. A Windows drive's path (C:/x.jpg, C://x.jpg) is a path, never a URL."""
    save(tmp_path / "a b.png")
    monkeypatch.chdir(tmp_path)
    Path("files.txt").write_text(f"file://{tmp_path}/a%20b.png\nFILE://localhost{tmp_path}/a b.png\n")
    assert [(item.path, item.name) for item in open_source("files.txt")] == [
        (f"{tmp_path}/a b.png", "a b"), (f"{tmp_path}/a b.png", "a b_2")]
    Path("files.csv").write_text(f"path\nfile://{tmp_path}/a%20b.png\n")
    assert [item.path for item in open_source("files.csv")] == [f"{tmp_path}/a b.png"]
    for entry, error in ((f"file://host{tmp_path}/a.png", "a file URL of the machine host (this machine's are "
                                                         "file:///abs/a.jpg): list the file's path here"),
                         ("file://", "which names no file"), (f"file://{tmp_path}/a.png#1", "which names no file")):
        Path("other.txt").write_text(f"{entry}\n")
        with pytest.raises(ZooError) as refused:
            open_source("other.txt")
        assert str(refused.value).startswith(f"other.txt names {entry}, ") and error in str(refused.value)
    Path("drives.txt").write_text("C:/x.jpg\nC://y.jpg\n")  # paths (missing here), not URLs
    assert [item.name for item in open_source("drives.txt")] == ["x", "y"]


def test_a_list_naming_another_list_or_a_folder_says_so(tmp_path, monkeypatch, capsys):
    """A list naming another list failed 'cannot read other.txt: not an image file Pillow recognises'; lists do not
    nest (nor do ultralytics'): one error before any work saying so and what to do. An entry that is a folder beside
    the list and another from the current folder ('.') was called 'a file' in the note."""
    save(tmp_path / "lists" / "a.png")
    save(tmp_path / "b.png")
    monkeypatch.chdir(tmp_path)
    Path("lists/other.txt").write_text("a.png\n")
    Path("lists/outer.txt").write_text("a.png\nother.txt\n")
    with pytest.raises(ZooError) as refused:
        open_source("lists/outer.txt")
    assert str(refused.value) == (
        "lists/outer.txt names other.txt, a list of paths itself: a list names images, videos and folders, not other "
        "lists (as ultralytics' lists); pass lists/other.txt as an input of its own (several inputs may be given), or "
        "name its files in lists/outer.txt")
    Path("lists/here.txt").write_text(".\n")
    assert [item.name for item in open_source("lists/here.txt")] == ["a"]
    assert capsys.readouterr().err == (
        "note: lists/here.txt names ., which is a folder beside the list and another folder from the current folder: "
        "reading lists (a list's relative paths are relative to its folder; ultralytics would read the current "
        f"folder's: to read that one, write its full path, {tmp_path})\n")


def test_a_path_the_system_refuses_is_one_error(tmp_path, monkeypatch, capsys):
    """A name longer than the file system takes (os.stat: 'File name too long') or a ~user that is no user here
    (pathlib's expanduser: RuntimeError) ended the run in 'internal error', as an input or a list's entry (a list
    now stats each entry as it is read, to find it beside the list or from the current folder): one error naming
    the path, and the list it is in."""
    from conftest import cli_error

    save(tmp_path / "a.png")
    monkeypatch.chdir(tmp_path)
    long = "a" * 300 + ".jpg"
    for listed in ("paths.txt", "paths.csv"):
        Path(listed).write_text(f"{long}\na.png\n")
        with pytest.raises(ZooError, match=rf"^{listed} names a{{300}}\.jpg, which cannot be read: File name too long; "
                                           "correct the list$"):
            open_source(listed)
    Path("home.txt").write_text("a.png\n~no_such_user_here/a.png\n")
    for source, named in ((long, f"cannot read {long}: File name too long; check the path"),
                          ("~no_such_user_here/a.png", "~no_such_user_here/a.png: its ~ names no home folder here"),
                          ("home.txt", "~no_such_user_here/a.png: its ~ names no home folder here")):
        with pytest.raises(ZooError, match=f"^{re.escape(named)}"):
            open_source(source)
    assert cli_error(["yolov8n", long, "--weights", "synthetic:0", "--device", "cpu", "--out", "o"], capsys) == \
        f"error: cannot read {long}: File name too long; check the path"


def test_list_of_sources_is_one_numbering(tmp_path):
    save(tmp_path / "one" / "x.png")
    save(tmp_path / "two" / "x.png")
    source = open_source([tmp_path / "one", tmp_path / "two" / "x.png"])
    assert isinstance(source, Chain) and source.total == 2
    assert [(i.index, i.name) for i in source] == [(0, "x"), (1, "x_2")]
    with pytest.raises(ZooError, match="not both"):
        open_source([tmp_path / "one", np.zeros((2, 2, 3), np.uint8)])


def test_arrays_rgb_and_bgr():
    bgr = np.zeros((4, 5, 3), np.uint8)
    bgr[..., 0] = 255  # blue in OpenCV's order
    pil = Image.new("L", (3, 2), 7)
    rgb_items = list(open_source([bgr, pil]))
    assert [i.path for i in rgb_items] == ["image0.jpg", "image1.jpg"]  # as ultralytics names in-memory images
    assert rgb_items[0].load()[0, 0].tolist() == [255, 0, 0]
    assert rgb_items[1].load().shape == (2, 3, 3)
    as_bgr = list(Arrays([bgr, pil], bgr=True))
    assert as_bgr[0].load()[0, 0].tolist() == [0, 0, 255]
    assert as_bgr[1].load()[0, 0].tolist() == [7, 7, 7]  # PIL images are RGB whatever bgr says
    with pytest.raises(ZooError, match="image 1 is a str"):
        Arrays([bgr, "x.png"])


def test_bad_items_reported_one_by_one(tmp_path):
    save(tmp_path / "a.png")
    (tmp_path / "b.jpg").write_bytes(b"not a jpeg")
    good = tmp_path / "c.png"
    save(good, size=(64, 64))
    (tmp_path / "d.png").write_bytes(good.read_bytes()[:60])  # truncated
    (tmp_path / "e.mp4").write_bytes(b"not a video")
    save(tmp_path / "f.png")
    result = dict(loaded(open_source(tmp_path)))
    assert result["a"] == result["c"][:0] + (12, 16, 3) and result["f"] == (12, 16, 3)
    for bad in ("b", "d", "e"):
        assert result[bad].startswith("error: ") and "\n" not in result[bad], result[bad]
    assert str(tmp_path / "e.mp4") in result["e"]


def test_video_frames_stride_and_metadata(tmp_path):
    path = grey_video(tmp_path / "clip.mp4", 12, fps=12.5)
    video = open_source(path)
    assert isinstance(video, Video) and (video.fps, video.frames, video.total) == (12.5, 12, 12)
    items = list(video)
    assert [i.frame for i in items] == list(range(12)) and items[3].name == "clip_3" and items[3].stem == "clip"
    assert [round(float(i.load().mean()) / 8) for i in items] == list(range(12))
    assert items[5].meta == {"path": str(path), "frame": 5, "fps": 12.5, "frames": 12}
    strided = list(open_source(path, vid_stride=3))  # ultralytics: the last frame of each group of 3
    assert [i.frame for i in strided] == [2, 5, 8, 11] and [i.index for i in strided] == [0, 1, 2, 3]
    assert Video(path, vid_stride=5).total == 2 == len(list(Video(path, vid_stride=5)))


def rotated(path, matrix):
    """The MP4 at ``path`` with its track's display matrix set (a, b, c, d of the 3x3; 16.16 fixed point), as a
    phone writes a portrait video: the pixels stay landscape, the player turns them."""
    data = bytearray(path.read_bytes())
    tkhd = data.find(b"tkhd")
    assert data[tkhd + 4] == 0  # version 0: the matrix lies 44 bytes after the box's type
    data[tkhd + 44:tkhd + 80] = struct.pack(">9i", matrix[0], matrix[1], 0, matrix[2], matrix[3], 0, 0, 0, 1 << 30)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("matrix, turn", [((0, 1 << 16, -1 << 16, 0), -1), ((-1 << 16, 0, 0, -1 << 16), 2),
                                          ((0, -1 << 16, 1 << 16, 0), 1)])
def test_rotated_video_frames_are_upright_as_opencv_reads_them(tmp_path, matrix, turn):
    """ultralytics reads videos with OpenCV, which turns frames by the display matrix (CAP_PROP_ORIENTATION_AUTO):
    frames decoded sideways would give boxes in another picture's coordinates."""
    picture = np.zeros((32, 64, 3), np.uint8)
    picture[:, :32] = 255  # left half white
    path = tmp_path / "portrait.mp4"
    with VideoWriter(path, fps=10) as video:
        video.write(picture)
        video.write(picture)
    frames = [item.load() for item in open_source(rotated(path, matrix))]
    expected = np.rot90(picture, turn)  # 90 degrees clockwise: the left half on top
    assert len(frames) == 2 and all(f.shape == expected.shape for f in frames)
    assert all(np.abs(f.astype(int) - expected).max() < 40 for f in frames)


def test_videos_in_folders_mix_with_images(tmp_path):
    save(tmp_path / "a.png")
    grey_video(tmp_path / "b.mkv", 6)
    save(tmp_path / "c.png")
    source = Folder(tmp_path, vid_stride=2)
    assert source.total == 1 + 3 + 1
    assert [(i.index, i.name, i.frame) for i in source] == [
        (0, "a", None), (1, "b_1", 1), (2, "b_3", 3), (3, "b_5", 5), (4, "c", None)]
    # every suffix ultralytics reads as a video (its VID_FORMATS but .gif) is one here: a folder of .asf
    # (Windows Media) files was skipped as holding no videos
    wmv = tmp_path / "wm"
    wmv.mkdir()
    with av.open(str(wmv / "d.asf"), "w", format="asf") as container:
        stream = container.add_stream("wmv2", rate=10)
        stream.width = stream.height = 16
        for i in range(2):
            frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    assert [i.name for i in Folder(wmv)] == ["d_0", "d_1"]


def test_image_names_never_equal_a_video_frame_name(tmp_path):
    """Frame 3 of clip.mp4 is named clip_3: an image clip_3.png, or a second clip.* numbered clip_2, would share
    its label file, and one run would replace its own labels (with --overwrite) or refuse one of them."""
    grey_video(tmp_path / "clip.mp4", 4)
    save(tmp_path / "clip.png")
    save(tmp_path / "clip_3.png")
    names = [i.name for i in Folder(tmp_path)]
    assert names == ["clip_0", "clip_1", "clip_2", "clip_3", "clip-2", "clip_3_2"]
    assert len({n.lower() for n in names}) == len(names)
    other = tmp_path / "other"  # an image first: the video's stem moves off the image's name
    save(other / "a_1.png")
    grey_video(other / "a.mkv", 2)
    assert [i.name for i in Files([other / "a_1.png", other / "a.mkv"])] == ["a_1", "a_2_0", "a_2_1"]
    twice = [i.name for i in Files([tmp_path / "clip.mp4", tmp_path / "clip.mp4"])]  # two videos: as before
    assert twice == ["clip_0", "clip_1", "clip_2", "clip_3", "clip_2_0", "clip_2_1", "clip_2_2", "clip_2_3"]


@pytest.mark.parametrize("suffix", [".mp4", ".avi", ".mov", ".mkv", ".webm"])
def test_video_writer_every_container_keeps_count_and_rate(tmp_path, suffix):
    path = grey_video(tmp_path / f"v{suffix}", 5, fps=29.97, size=(15, 21))  # odd sizes are padded
    video = Video(path)
    assert video.fps == pytest.approx(29.97, abs=1e-3) and video.frames == 5
    frames = [i.load() for i in video]
    assert len(frames) == 5 and frames[0].shape == (16, 22, 3)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_video_writer_is_atomic_and_guards_existing(tmp_path):
    path = tmp_path / "out.mp4"
    with pytest.raises(RuntimeError):
        with VideoWriter(path, fps=5) as video:
            video.write(np.zeros((8, 8, 3), np.uint8))
            assert not path.exists()  # only the temporary file exists while writing
            raise RuntimeError("the run breaks off")
    assert list(tmp_path.iterdir()) == []
    grey_video(path, 2)
    with pytest.raises(ZooError, match="exists"):
        VideoWriter(path, fps=5)
    VideoWriter(path, fps=5, overwrite=True).abort()
    with pytest.raises(ZooError, match="cannot write video .*use one of"):
        VideoWriter(tmp_path / "x.gif", fps=5)
    with VideoWriter(tmp_path / "y.mp4", fps=5) as video:
        video.write(np.zeros((8, 8, 3), np.uint8))
        with pytest.raises(ZooError, match="frame 1 is 10x8"):
            video.write(np.zeros((8, 10, 3), np.uint8))


def test_video_writer_frames_wider_than_the_encoder_takes(tmp_path, capsys):
    """A 20000x8 video's annotated frames: libx264 opens with at most 16384 pixels a side; FFmpeg's refusal was an
    internal error. Strict, one ZooError naming the limit, nothing written; fit=True (detect's annotated video)
    scales the video down, said in one note."""
    wide = np.zeros((8, 20000, 3), np.uint8)
    with pytest.raises(ZooError, match=r"^cannot write video .*wide.mp4: its frames are 20000x8 and h264 takes at "
                                       r"most 16384 pixels a side: scale them down, or write .webm$"):
        VideoWriter(tmp_path / "wide.mp4", fps=5).write(wide)
    assert list(tmp_path.iterdir()) == []
    with VideoWriter(tmp_path / "wide.mp4", fps=5, fit=True) as video:
        video.write(wide)
        video.write(wide)
    assert capsys.readouterr().err == (f"note: {tmp_path / 'wide.mp4'}: frames of 20000x8 are more than h264 takes "
                                       "(16384 pixels a side): the video is 16384x6, scaled\n")
    with av.open(str(tmp_path / "wide.mp4")) as container:
        assert [(f.width, f.height) for f in container.decode(video=0)] == [(16384, 6)] * 2


def test_unreadable_video_and_missing_camera_are_one_line(tmp_path, capfd):
    (tmp_path / "bad.mp4").write_bytes(b"\x00" * 100)
    with pytest.raises(ZooError, match=r"^cannot read video .*bad.mp4: .*; pass a video FFmpeg can decode$"):
        open_source(tmp_path / "bad.mp4")
    for camera in (99, "99"):
        with pytest.raises(ZooError) as e:
            open_source(camera)
        assert str(e.value).startswith("camera 99 does not open (") and "\n" not in str(e.value)
    assert capfd.readouterr().err == ""  # OpenCV's own '[ WARN:0@0.010] ... can't open camera by index' lines too
    with pytest.raises(ZooError, match="vid_stride 0"):
        Camera(0, vid_stride=0)


@pytest.mark.parametrize("error", [errno.ENODEV, errno.EIO], ids=["ENODEV", "EIO"])
def test_a_camera_unplugged_ends_as_its_end(error, capsys):
    """A camera unplugged mid-run: FFmpeg's v4l2 read of it fails (ENODEV once it is gone, EIO for a read under way;
    tests/simulated_camera.py at PyAV's open of /dev/video0). Its frames stand and it ends as one whose input ended,
    in the same note, no bad item (detect's run exits 0, its video kept); before, the last item failed, 'camera 0 is
    damaged: frame 5 cannot be decoded ([Errno 19] No such device)', and the run exited 1."""
    from simulated_camera import SimulatedCamera

    with SimulatedCamera(frames=5, fps=50, size=(64, 48), unplugged=OSError(error, os.strerror(error))) as camera:
        got = [(item.frame, item.load().shape) for item in open_source(0, stream_buffer=True)]
    assert camera.opened == 1 and got == [(k, (48, 64, 3)) for k in range(5)]
    assert capsys.readouterr().err == "note: camera0: the camera ended after 5 frames (it was disconnected or " \
                                      "stopped sending)\n"


def test_damaged_video_keeps_the_frames_before_the_damage(tmp_path):
    path = grey_video(tmp_path / "v.avi", 40, size=(64, 64))  # AVI: the header counts the frames
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    frames = loaded(Files([path]))
    assert 10 < len(frames) < 40
    assert all(isinstance(shape, tuple) for _, shape in frames[:-1])
    name, error = frames[-1]
    assert error == f"error: video {path} is damaged: it ends after {name.split('_')[1]} of its 40 frames"


def test_a_video_without_a_video_stream_says_what_it_holds(tmp_path):
    """An MP4 cut in half (a download cut short: its index, at the end, is gone) and an audio-only file were both
    'has no video stream', without a fix, the first as if it were not a video at all."""
    cut = write_video(tmp_path / "cut.mp4", 4)  # MPEG-4 in MP4 as PyAV writes it: the index after the frames
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    with av.open(str(tmp_path / "sound.mp4"), "w") as container:
        stream = container.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        container.mux(stream.encode(frame))
        container.mux(stream.encode())
    fix = "pass a video; a download cut short has none either (an MP4's index comes last): download it again"
    for path, held in ((cut, "only data"), (tmp_path / "sound.mp4", "only audio")):
        with pytest.raises(ZooError) as e:
            open_source(path)
        assert str(e.value) == f"video {path} has no video stream ({held}): {fix}"


def test_a_video_that_ends_without_a_frame_kept_is_a_bad_item(tmp_path):
    """A video of 4 frames with vid_stride 5, and an AVI without frames, gave no item at all: the run said
    '0 images processed', exit 0, as if the video held nothing to detect. Each is now one bad item naming the fix."""
    short = grey_video(tmp_path / "short.mp4", 4)
    with av.open(str(tmp_path / "empty.avi"), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        container.start_encoding()
    assert loaded(Files([short, tmp_path / "empty.avi"], vid_stride=5)) == [
        ("short_4", f"error: video {short} ends after 4 frame(s): vid_stride 5 keeps one frame in 5, so none; "
                    "pass vid_stride 4 or less"),
        ("empty_0", f"error: video {tmp_path / 'empty.avi'} holds no frames: pass a video with frames")]
    assert [name for name, _ in loaded(Files([short], vid_stride=4))] == ["short_3"]


@pytest.mark.parametrize("suffix", [".mkv", ".webm"])
def test_a_matroska_video_cut_short_is_damaged(tmp_path, suffix):
    """Matroska counts no frames, so a file cut in half (a download cut short) decoded the frames it kept and the
    run ended with exit 0, as if the video were that long. Its video track's length (the DURATION tag) is checked:
    the frames before the cut stand, then one error; the whole file has none."""
    whole, noise = tmp_path / f"whole{suffix}", np.random.default_rng(0)
    with VideoWriter(whole, fps=10) as video:  # noise: every frame of about one size, so half the file is half
        for _ in range(20):
            video.write(noise.integers(0, 256, (24, 32, 3), np.uint8))
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert all(isinstance(shape, tuple) for _, shape in loaded(Files([whole]))) and len(loaded(Files([whole]))) == 20
    frames = loaded(Files([cut]))
    assert 3 < len(frames) < 20 and all(isinstance(shape, tuple) for _, shape in frames[:-1])
    assert re.fullmatch(rf"error: video {re.escape(str(cut))} is damaged: it ends after 0\.\d0 s of its 2\.00 s",
                        frames[-1][1])


def trimmed(path, frames, fps):
    """The MP4 at ``path`` with its edit list cutting its first ``frames`` frames, as an editor trims without
    re-encoding: the samples stay in the file and in its frame count; players and decoders skip them."""
    data = bytearray(path.read_bytes())
    timescale = {box: struct.unpack(">I", data[data.find(box) + 16:data.find(box) + 20])[0] for box in (b"mvhd", b"mdhd")}
    elst = data.find(b"elst")
    assert data[elst + 4] == 0 and struct.unpack(">I", data[elst + 8:elst + 12])[0] == 1  # version 0, one edit
    duration, start = struct.unpack(">Ii", data[elst + 12:elst + 20])
    cut = frames / fps
    data[elst + 12:elst + 20] = struct.pack(">Ii", duration - round(cut * timescale[b"mvhd"]),
                                            start + round(cut * timescale[b"mdhd"]))
    path.write_bytes(data)
    return path


def test_a_video_trimmed_by_its_edit_list_is_not_damaged(tmp_path):
    """Its frame count includes the frames cut away, which FFmpeg (and OpenCV, ultralytics' reader) never
    decode: the frames it shows are the video, not a file that breaks off (an error record, exit code 1)."""
    path = trimmed(grey_video(tmp_path / "cut.mp4", 20), 3, fps=10.0)
    video = Video(path)
    assert video.frames == 20  # what the container (and OpenCV's CAP_PROP_FRAME_COUNT) says
    assert [round(float(f.mean()) / 8) for f in (item.load() for item in video)] == list(range(3, 20))


HEADER = {"mlx_zoo": 1, "task": "classify", "model": "resnet18"}


def lines_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def headed(record: dict) -> dict:
    """``record`` as a record file's first line: the run's header with it (RUN_KEY)."""
    return {**record, RUN_KEY: HEADER}


def test_jsonl_writer_appends_to_the_file_and_resumes(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    writer = JsonlWriter(path, header=HEADER)
    writer.write({"path": "a", "label": 1})
    assert lines_of(path) == [headed({"path": "a", "label": 1})]  # in the file as it comes: a killed run keeps it
    with pytest.raises(ZooError, match=rf"is being written by another run \(pid {os.getpid()}\): wait for it"):
        JsonlWriter(path, resume=True, header=HEADER)
    writer.close()
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]
    with pytest.raises(ZooError, match="exists: pass resume=True .* or overwrite=True"):
        JsonlWriter(path)
    with JsonlWriter(path, resume=True, header=HEADER) as writer:
        assert list(writer.kept_records()) == [{"path": "a", "label": 1}]
        writer.write({"path": "b", "label": 2})
    assert [r["path"] for r in read_jsonl(path)] == ["a", "b"]
    path.write_text(path.read_text() + '{"path": "c", "la')  # a torn last line (a killed writer)
    assert [r["path"] for r in read_jsonl(path)] == ["a", "b"]
    with JsonlWriter(path, resume=True, header=HEADER) as writer:
        assert [r["path"] for r in writer.kept_records()] == ["a", "b"]
        writer.write({"path": "c", "label": 3})
    assert "its last line was cut off" in capsys.readouterr().err
    assert lines_of(path) == [headed({"path": "a", "label": 1}), {"path": "b", "label": 2}, {"path": "c", "label": 3}]
    with JsonlWriter(path, overwrite=True, header=HEADER) as writer:
        assert list(writer.kept_records()) == []  # a run that writes nothing leaves the old file as it was
    assert [r["path"] for r in read_jsonl(path)] == ["a", "b", "c"]
    with JsonlWriter(path, overwrite=True, header=HEADER) as writer:
        writer.write({"path": "z"})
    assert lines_of(path) == [headed({"path": "z"})]
    JsonlWriter(tmp_path / "none.jsonl", header=HEADER).close()  # no record: no file left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


def test_jsonl_records_are_utf8_with_lone_surrogates_escaped(tmp_path):
    """--jsonl escaped every character past ASCII: grep for a class named "café", or a photo in été/, found nothing
    in the file (it held "caf\\u00e9"). UTF-8 text now, as pandas reads it; a lone surrogate (a file name's bytes
    that are not UTF-8) is escaped as before, so the file stays UTF-8."""
    path = tmp_path / "r.jsonl"
    records = [{"path": "été/a.jpg", "label": "café"}, {"path": "b\udcff.jpg", "label": "狗"}]
    with JsonlWriter(path, header=HEADER) as writer:
        for record in records:
            writer.write(record)
    text = path.read_bytes().decode("utf-8")
    assert '"path": "été/a.jpg", "label": "café"' in text and '"b\\udcff.jpg", "label": "狗"' in text
    assert read_jsonl(path) == records


def test_record_writers_write_valid_json_for_nan_and_infinities(tmp_path):
    """--jsonl, --save-json and classify's --json records with a NaN or infinite value (a model of broken weights)
    were written as NaN / Infinity, which no JSON reader but Python's takes: now null, the other values as they
    were."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    record = {"path": "a.jpg", "score": float("nan"), "box": [1.5, float("inf"), -float("inf")], "n": 3}
    for writer, path in ((JsonlWriter, tmp_path / "r.jsonl"), (JsonListWriter, tmp_path / "predictions.json")):
        with writer(path) as opened:
            opened.write(record)
        text = path.read_text()
        read = json.loads(text, parse_constant=refuse) if writer is JsonListWriter else [
            json.loads(line, parse_constant=refuse) for line in text.splitlines()]
        assert read == [{"path": "a.jpg", "score": None, "box": [1.5, None, None], "n": 3}]
    from zoo.cli.classify import JsonObjectWriter  # classify --json

    writer = JsonObjectWriter(tmp_path / "r.json", replace=False)
    writer.write("a.jpg", [{"index": 0, "label": "cat", "probability": float("nan")}])
    writer.close()
    assert json.loads((tmp_path / "r.json").read_text(), parse_constant=refuse) == {
        "a.jpg": [{"index": 0, "label": "cat", "probability": None}]}


def test_json_list_is_written_in_place_and_resumed_from_what_a_killed_run_left(tmp_path, capsys):
    path = tmp_path / "predictions.json"
    writer = JsonListWriter(path)
    writer.write({"image_id": 1})
    writer.write({"image_id": 2})
    writer.sync()
    assert path.read_text() == '[\n  {"image_id": 1},\n  {"image_id": 2}'  # on disk as it comes, no "]" yet
    with pytest.raises(ZooError, match=rf"is being written by another run \(pid {os.getpid()}\): wait for it"):
        JsonListWriter(path, resume=True)
    writer.close()
    assert path.read_text() == '[\n  {"image_id": 1},\n  {"image_id": 2}\n]\n'  # json.dumps(indent)-like
    with pytest.raises(ZooError, match="exists: pass resume=True .* or overwrite=True"):
        JsonListWriter(path)
    with JsonListWriter(path, resume=True, keep=lambda r: r["image_id"] == 1) as writer:  # a finished list
        assert list(writer.kept_records()) == [{"image_id": 1}]
        writer.write({"image_id": 3})
    assert json.loads(path.read_text()) == [{"image_id": 1}, {"image_id": 3}]
    # what a killed run leaves: no "]", a torn last line, or a comma before the record that never came
    for left, records in [('[\n  {"image_id": 1},\n  {"image_id": 2},\n  {"image_', [1, 2]),
                          ('[\n  {"image_id": 1},\n  {"image_id": 2},', [1, 2]),
                          ('[\n  {"image_id": 1},\n', [1]), ("[", []), ("", [])]:
        path.write_text(left)
        assert list(read_json_list(path)) == [{"image_id": n} for n in records]
        with JsonListWriter(path, resume=True) as writer:
            writer.write({"image_id": 9})
        assert json.loads(path.read_text()) == [{"image_id": n} for n in [*records, 9]]
        assert ("its last line was cut off" in capsys.readouterr().err) == left.endswith("image_")
    with JsonListWriter(path, overwrite=True) as writer:
        writer.write({"image_id": 5})
        assert json.loads(path.read_text()) == [{"image_id": 9}]  # the old file, until the first sync
        writer.sync()
        assert path.read_text() == '[\n  {"image_id": 5}'
    JsonListWriter(tmp_path / "none.json").close()
    assert (tmp_path / "none.json").read_text() == "[]\n"  # a run without detections says so
    assert sorted(p.name for p in tmp_path.iterdir()) == ["none.json", "predictions.json"]


@pytest.mark.parametrize("content, message", [
    ("{}", ("is not a JSON list of records as this program writes them ('[' on the first line, one record a line): "
            "pass overwrite=True to replace it")),
    ("[1, 2]", "is not a JSON list of records"),
    ('{"image_id": 1\n', "is not a JSON list of records as this program writes them"),
    ('[{"image_id": 1}, {"image_id": 2}]', "is not a JSON list of records as this program writes them"),  # json.dump's
    ('[\n  {\n    "image_id": 1\n  }\n]\n', "line 2 is not a record of an unfinished JSON list"),  # indent=2's
    ('[\n  {"image_id": 1},\n]\n', "line 3 is not a record of an unfinished JSON list"),  # invalid JSON
    ('[\n  {"image_id": 1},\n  garbage,\n  {"image_id": 2}', "line 3 is not a record of an unfinished JSON list"),
    ('[\n  {"image_id": 1}\n  {"image_id": 2}', "line 3 is not a record of an unfinished JSON list"),
    ('[\n  {"image_id": 1},\n  \udcff,\n  {"image_id": 2}', "line 3 is not a record"),
    ('[\n  {"image_id": 1},\n  [3],\n', "line 3 is not a record"),
    ('[\n  {"image_id": 1}\n]\n]\n', "line 4 follows the list's closing bracket"),
])
def test_json_list_damaged_beyond_a_torn_tail_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "predictions.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    for read in (lambda p: list(read_json_list(p)), lambda p: JsonListWriter(p, resume=True)):
        with pytest.raises(ZooError, match=re.escape(message)) as e:
            read(path)
        assert "\n" not in str(e.value) and str(path) in str(e.value)
    assert path.read_bytes() == content.encode("utf-8", "surrogateescape")
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.json"]


def test_jsonl_resume_drops_what_keep_refuses_and_a_missing_header_is_written(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("")  # created, then killed before the header
    with JsonlWriter(path, resume=True, header=HEADER) as writer:
        writer.write({"path": "a", "error": "bad"})
        writer.write({"path": "b"})
    with JsonlWriter(path, resume=True, header=HEADER, keep=lambda r: "error" not in r) as writer:
        assert list(writer.kept_records()) == [{"path": "b"}]
        writer.write({"path": "a"})
    assert lines_of(path) == [headed({"path": "b"}), {"path": "a"}]
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


def test_pandas_reads_one_row_per_record_and_a_header_line_of_before_moves_into_the_first_record(tmp_path):
    """The run's header was a line of its own: pandas' read_json(path, lines=True), the first thing a pandas user
    types, read it as a row of NaN, counted in every count and mean. The first record carries it now (RUN_KEY, its
    last key); a file of the layout before is still resumed, its header checked, then moved into its first record."""
    import pandas

    path = tmp_path / "r.jsonl"
    with JsonlWriter(path, header=HEADER) as writer:
        writer.write({"path": "a", "score": 1.0})
        writer.write({"path": "b", "score": 3.0})
    table = pandas.read_json(path, lines=True)
    assert list(table["path"]) == ["a", "b"] and table["score"].mean() == 2.0 and table.columns[-1] == RUN_KEY
    assert read_jsonl(path) == [{"path": "a", "score": 1.0}, {"path": "b", "score": 3.0}]
    before = tmp_path / "before.jsonl"
    before.write_text(json.dumps(HEADER) + "\n" + json.dumps({"path": "a", "score": 1.0}) + "\n")
    with pytest.raises(UsageError, match=re.escape("holds resnet18 (classify) records, not resnet50 (classify)")):
        JsonlWriter(before, resume=True, header={**HEADER, "model": "resnet50"})
    with JsonlWriter(before, resume=True, header=HEADER) as writer:
        assert list(writer.kept_records()) == [{"path": "a", "score": 1.0}]
        writer.write({"path": "b", "score": 3.0})
    assert before.read_text() == path.read_text()


@pytest.mark.parametrize("content, message", [
    (b"42\n", "line 1 is not a record of this program"),
    (b"\xff\xfe\n", "line 1 is not a JSON record (damaged"),
    (json.dumps(HEADER).encode() + b"\n\xff\xfe{\n{}\n", "line 2 is not a JSON record (damaged"),
    (json.dumps(HEADER).encode() + b"\n[1, 2]\n", "line 2 is not a record of this program"),
    (json.dumps(HEADER).encode() + b"\n{\"path\": 3}\n", "line 2 is not a record of this program"),
    (json.dumps(HEADER).encode() + b"\n" + json.dumps(HEADER).encode() + b"\n", "line 2 is not a record"),
    (b'{"path": "a.jpg", "top": []}\n', "has no header (its first record's \"mlx_zoo_run\"): it is not a record file"),
    (json.dumps(headed({"path": "a"})).encode() + b"\n" + json.dumps(headed({"path": "b"})).encode() + b"\n",
     "line 2 is not a record of this program"),
    (json.dumps({"path": "a", RUN_KEY: 5}).encode() + b"\n", '"mlx_zoo_run" that is not a JSON object'),
    (json.dumps({"path": "a", RUN_KEY: {**HEADER, "model": "resnet50"}}).encode() + b"\n",
     "holds resnet50 (classify) records, not resnet18 (classify)"),
    (json.dumps({**HEADER, "task": "detect", "model": "yolov8n"}).encode() + b"\n",
     "holds yolov8n (detect) records, not resnet18 (classify)"),
    # an edited or foreign header: was taken silently, or said 'holds None (None) records'
    (json.dumps({**HEADER, "settings": 5}).encode() + b"\n",
     'has a header whose "settings" is not a JSON object: it is not a record file this program wrote'),
    (json.dumps({"mlx_zoo": 1}).encode() + b"\n", "has a header without its task and model"),
    (json.dumps({**HEADER, "model": None}).encode() + b"\n", "has a header without its task and model"),
])
def test_a_damaged_or_foreign_record_file_is_one_error_and_stays_as_it_was(tmp_path, content, message):
    path = tmp_path / "r.jsonl"
    path.write_bytes(content)
    with pytest.raises(ZooError, match=re.escape(message)) as raised:
        JsonlWriter(path, resume=True, header=HEADER)
    assert "\n" not in str(raised.value) and "overwrite=True" in str(raised.value)
    assert path.read_bytes() == content and [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


def test_resume_names_the_settings_that_differ_as_a_command_line_gives_them(tmp_path):
    settings = {"--conf": 0.25, "--imgsz": (320, 320), "--agnostic-nms": False, "--classes": None}
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"path": "a.jpg", RUN_KEY: records_header("detect", "yolov8n", settings)}) + "\n")
    assert json.loads(path.read_text())[RUN_KEY]["settings"]["--imgsz"] == [320, 320]
    JsonlWriter(path, resume=True, header=records_header("detect", "yolov8n", settings)).close()  # the same: taken
    other = {**settings, "--imgsz": None, "--agnostic-nms": True}
    with pytest.raises(UsageError, match=re.escape("r.jsonl holds results of --imgsz 320 320 --agnostic-nms (not "
                                                   "given), not --imgsz (not given) --agnostic-nms: give the options "
                                                   "that made them, or pass another")):
        JsonlWriter(path, resume=True, header=records_header("detect", "yolov8n", other))


def test_resume_shows_settings_a_command_line_shows_alike_as_json(tmp_path):
    """A setting edited to [5] (or "5") against 5 said 'holds results of --top-k 5, not --top-k 5'."""
    path = tmp_path / "r.jsonl"
    for was, message in (([5], "--top-k [5], not --top-k 5"), ("5", '--top-k "5", not --top-k 5')):
        path.write_text(json.dumps(records_header("classify", "resnet18", {"--top-k": was})) + "\n")
        with pytest.raises(ZooError, match=re.escape(f"r.jsonl holds results of {message}: give the options")):
            JsonlWriter(path, resume=True, header=records_header("classify", "resnet18", {"--top-k": 5}))


def test_a_record_file_starting_with_a_utf8_bom_is_still_ours(tmp_path):
    """A record file saved by an editor that marks UTF-8 (Notepad) was refused as 'line 1 is not a JSON record
    (damaged...)': its BOM is taken, its records kept and continued, the file's bytes before the end kept."""
    path = tmp_path / "r.jsonl"
    content = b"\xef\xbb\xbf" + json.dumps(headed({"path": "a"})).encode() + b"\n"
    path.write_bytes(content)
    assert list(read_records(path, HEADER)) == [{"path": "a"}]
    with JsonlWriter(path, resume=True, header=HEADER) as writer:
        assert list(writer.kept_records()) == [{"path": "a"}]
        writer.write({"path": "b"})
    assert path.read_bytes() == content + json.dumps({"path": "b"}).encode() + b"\n"
    assert list(read_records(path, HEADER)) == [{"path": "a"}, {"path": "b"}]


def test_jsonl_writer_refuses_what_is_no_regular_file(tmp_path):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ZooError, match="is not a regular file"):
        JsonlWriter(fifo, resume=True, header=HEADER)
    # nor replaced: renaming over /dev/stdout (a link to the process's pipe) replaced it for every later process
    (tmp_path / "stdout").symlink_to(fifo)
    for special in (fifo, tmp_path / "stdout"):
        with pytest.raises(ZooError, match="is not a regular file .*such as /dev/stdout.*pass a file path"):
            JsonlWriter(special, overwrite=True, header=HEADER)
    assert fifo.is_fifo() and (tmp_path / "stdout").is_symlink() and len(list(tmp_path.iterdir())) == 2
    (tmp_path / "secret.txt").write_text("keep")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ZooError, match="cannot write .*link.jsonl"):  # never written through a link
        JsonlWriter(tmp_path / "link.jsonl", resume=True, header=HEADER)
    assert (tmp_path / "secret.txt").read_text() == "keep"


# a child that resumes a record file (dropping its error records: the streamed rewrite) and reads the kept
# records back, printing its own peak RSS (KB) before and after
RESUME_CHILD = PEAK_RSS_KB + r"""
import json, sys
from zoo.pipeline import without_errors
from zoo.sources import JsonlWriter
before = peak_rss_kb()
with JsonlWriter(sys.argv[1], resume=True, header=json.loads(sys.argv[2]), keep=without_errors) as writer:
    kept = sum(1 for _ in writer.kept_records())
    writer.write({"path": "new.jpg", "top": []})
print(json.dumps({"before": before, "after": peak_rss_kb(), "kept": kept, "counted": writer.kept}))
"""


def test_resume_streams_a_large_record_file(tmp_path):
    """--resume reads the record file as a stream: a 300,000-record file (27 MiB) held as record dicts took 356
    MiB (measured 2026-11-30 on main b3bc88d: the child's peak grew from 40 to 404 MiB); streamed, the resume
    and its rewrite (error records dropped) add nothing measurable to the peak (0 MiB measured). Here 100,000
    records (a third: about 119 MiB held); the bound, 16 MiB, leaves room for the allocator and the readers'
    buffers, a seventh of what the records would take."""
    import subprocess
    import sys

    path = tmp_path / "r.jsonl"
    n = 100_000
    top, error = '"top": [{"index": 281, "label": "tabby cat", "probability": 0.5}]', '"error": "bad"'
    path.write_text("".join([json.dumps(HEADER) + "\n",
                             *(f'{{"path": "imgs/{i:07d}.jpg", {top if i % 1000 else error}}}\n'
                               for i in range(n)),
                             '{"path": "imgs/torn.jpg", "to']))  # a torn last line: dropped with a note
    child = subprocess.run([sys.executable, "-c", RESUME_CHILD, str(path), json.dumps(HEADER)], capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert "its last line was cut off" in child.stderr
    peak = json.loads(child.stdout)
    assert peak["kept"] == peak["counted"] == n - n // 1000
    assert peak["after"] - peak["before"] < 16 * 1024, peak
    lines = path.read_text().splitlines()  # the kept records in order, the first with the header, the new one
    assert json.loads(lines[0]) == headed(json.loads(f'{{"path": "imgs/0000001.jpg", {top}}}'))
    assert json.loads(lines[-1]) == {"path": "new.jpg", "top": []}
    assert lines[1:-1] == [f'{{"path": "imgs/{i:07d}.jpg", {top}}}' for i in range(2, n) if i % 1000]
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]


# a child that resumes a COCO predictions.json (dropping the records of the images it does again: every
# thousandth) and reads the kept records back, printing its own peak RSS (KB) before and after
RESUME_LIST_CHILD = PEAK_RSS_KB + r"""
import json, sys
from zoo.sources import JsonListWriter
before = peak_rss_kb()
with JsonListWriter(sys.argv[1], resume=True, keep=lambda r: r["image_id"] % 1000 != 0) as writer:
    kept = sum(1 for _ in writer.kept_records())
    writer.write({"image_id": -1})
print(json.dumps({"before": before, "after": peak_rss_kb(), "kept": kept, "counted": writer.kept}))
"""


def test_resume_streams_a_large_json_list(tmp_path):
    """--resume --save-json reads predictions.json as a stream: 100,000 COCO records (a 13 MiB list a killed run
    left, a torn last line) held as record dicts took 128 MiB (measured 2026-11-30 on 42fa7e2: the child's peak
    grew from 38 to 166 MiB; 200,000 records: 256 MiB); streamed, the resume and its rewrite add nothing measurable
    (0.02 MiB). The bound, 16 MiB, leaves room for the allocator and the readers' buffers, an eighth of what the
    records took."""
    import subprocess
    import sys

    path = tmp_path / "predictions.json"
    n = 100_000
    record = '{{"image_id": {}, "file_name": "{:012d}.jpg", "category_id": 1, "bbox": [12.5, 20.25, 100.0, 80.75], ' \
             '"score": 0.87654}}'
    path.write_text("[\n  " + ",\n  ".join(record.format(i, i) for i in range(n)) + ',\n  {"image_id": 7, "fi')
    child = subprocess.run([sys.executable, "-c", RESUME_LIST_CHILD, str(path)], capture_output=True, text=True,
                           timeout=300, check=False)
    assert child.returncode == 0, child.stderr
    assert "its last line was cut off" in child.stderr
    peak = json.loads(child.stdout)
    assert peak["kept"] == peak["counted"] == n - n // 1000
    assert peak["after"] - peak["before"] < 16 * 1024, peak
    assert json.loads(path.read_text()) == [*(json.loads(record.format(i, i)) for i in range(n) if i % 1000),
                                            {"image_id": -1}]
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.json"]


class CountingFile(io.FileIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def readinto(self, buffer) -> int:
        n = super().readinto(buffer)
        self.read_bytes += n or 0
        return n


def test_a_line_longer_than_any_record_is_refused_without_reading_it_whole(tmp_path):
    """A record file or predictions.json of one line without a newline (200 MB of garbage: here a sparse file of
    zeros, or a damaged file) was read whole into memory (a child's peak 444 MiB) and then taken for a torn last
    line: it is refused in one line once RECORD_LINE_LIMIT bytes (64 MiB) are read (peak 168 MiB), and stays as
    it was."""
    huge = 200 * 2**20
    for name, start, read, reader in [
            ("r.jsonl", b"", lambda p: JsonlWriter(p, resume=True, header=HEADER), RecordReader),
            ("predictions.json", b"[\n", lambda p: JsonListWriter(p, resume=True), JsonListReader)]:
        path = tmp_path / name
        path.write_bytes(start)
        with open(path, "r+b") as file:
            file.truncate(huge)
        line = start.count(b"\n") + 1
        for refused in (read, lambda p: list(read_json_list(p) if p.suffix == ".json" else read_records(p))):
            with pytest.raises(ZooError, match=rf"{name} line {line} is longer than 64 MiB, more than any record "
                                               r"this program writes \(damaged, or not a file it wrote\): pass ") as e:
                refused(path)
            assert "\n" not in str(e.value)
        with io.BufferedReader(CountingFile(path)) as counted, pytest.raises(ZooError, match="longer than 64 MiB"):
            list(reader(counted, path))
        assert counted.raw.read_bytes <= len(start) + RECORD_LINE_LIMIT + 2 * io.DEFAULT_BUFFER_SIZE
        assert path.stat().st_size == huge
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.json", "r.jsonl"]  # no temporary file left


def test_record_lines_up_to_the_limit_are_read(tmp_path, monkeypatch):
    """The limit counts a line's newline: a record line of exactly RECORD_LINE_LIMIT bytes is read, one byte
    more is refused (the limit lowered to 100 bytes for the test)."""
    monkeypatch.setattr(sources, "RECORD_LINE_LIMIT", 100)
    path = tmp_path / "r.jsonl"
    header = json.dumps(HEADER) + "\n"

    def line(size: int) -> str:  # a record line of ``size`` bytes
        return '{"path": "x", "pad": "' + "p" * (size - 25) + '"}\n'

    assert len(line(100)) == 100
    path.write_text(header + line(100))
    assert [len(json.dumps(r)) + 1 for r in read_records(path, HEADER)] == [100]
    path.write_text(header + line(101))
    with pytest.raises(ZooError, match="line 2 is longer than"):
        list(read_records(path, HEADER))


class FakeLiveFeed:
    """A camera's container and stream (PyAV's shape, as OpenCVCamera's): ``n`` frames, frame k holding k and
    stamped k / 25 s (25 frames/s), made as fast as they are read but at most 10 ahead of the last one the reader
    ``took`` (a camera keeps its pace: it does not wait for a slow model, nor race ahead of a test), each array
    counted while it lives. ``made`` (under ``changed``): the frame being decoded, so every frame before it has
    been handed on."""

    average_rate = guessed_rate = None

    class Frame:
        width = height = 4
        rotation = 0

        def __init__(self, feed, n):
            self.feed, self.n = feed, n
            self.time = n / 25

        def to_ndarray(self, format):
            import weakref

            rgb = np.full((4, 4, 3), self.n % 256, np.uint8)
            with self.feed.changed:
                self.feed.alive += 1
            weakref.finalize(rgb, self.feed.freed)
            return rgb

    def __init__(self, n):
        import threading

        self.n, self.made, self.taken = n, -1, 0
        self.changed = threading.Condition()
        self.alive = 0  # the frames' arrays not yet freed: what the source holds, and the reader

    def freed(self):
        with self.changed:
            self.alive -= 1

    def decode(self, stream):
        for k in range(self.n):
            with self.changed:
                assert self.changed.wait_for(lambda k=k: k <= self.taken + 10, timeout=20)
                self.made = k
                self.changed.notify_all()
            yield self.Frame(self, k)

    def close(self):
        pass

    def took(self, frame):
        with self.changed:
            self.taken = frame
            self.changed.notify_all()

    def wait_for(self, frame):
        """Until frame ``frame`` (or the last) is being decoded: every frame before it is in the source's hands."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.made >= min(frame, self.n - 1), timeout=20)


def fake_camera(feed, stream_buffer=False):
    class FakeCamera(Camera):
        def open(self):
            return feed, feed

    return FakeCamera(0, stream_buffer=stream_buffer)


class FakeClock:
    """NewestFrame's clock, still unless set: ``now`` seconds. Its wall-clock rules (QUIET_S, BACKLOG_LIMIT_S)
    are put out of reach, so only the frames' own times say which were sent while the model loaded."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        monkeypatch.setattr(sources.NewestFrame, "clock", staticmethod(lambda: self.now))
        monkeypatch.setattr(sources.NewestFrame, "QUIET_S", 600.0)


def loaded_for(seconds, monkeypatch, feed, stream_buffer=False):
    """``fake_camera(feed)`` opened, then the model loading for ``seconds`` by the camera's clock."""
    clock = FakeClock(monkeypatch)
    camera = fake_camera(feed, stream_buffer)
    clock.now += seconds
    return camera


def test_a_live_source_gives_its_newest_frame_and_keeps_one(capsys, monkeypatch):
    """A camera whose frames come faster than the reader takes them (the reader waits for 5 more frames after
    each): the reader gets the newest frame each time (ultralytics' default for streams), never one older
    than the 5 made meanwhile; the frames between are dropped, counted in one note; the last frame arrives;
    the source holds at most one frame besides the reader's and the one being decoded. With
    stream_buffer=True every frame comes, in order (as a video file's; the camera waits for the reader).
    Before, every frame came in order: a model slower than a stream fell ever further behind it."""
    feed = FakeLiveFeed(200)
    got = []
    for item in loaded_for(0.4, monkeypatch, feed):  # 10 frames of 25 frames/s sent while the model loaded
        got.append(int(item.load()[0, 0, 0]))
        assert item.frame == got[-1] and feed.alive <= 3
        feed.took(item.frame)
        feed.wait_for(item.frame + 6)  # frames frame+1 .. frame+5 made: the newest of them is at least frame+5
    assert got[-1] == 199 and all(b >= a + 5 for a, b in itertools.pairwise(got[:-1])) and len(got) <= 40
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    # the 10 frames stamped before 0.4 s are the backlog (skipped before the first frame)
    assert got[0] == 10 and notes == [
        "note: camera0: the camera ended after 200 frames (it was disconnected or stopped sending)",
        "note: camera0: 10 frames skipped: sent while the model loaded, before the run asked for its first frame (it "
        "starts at the stream's newest)",
        f"note: camera0: {200 - 10 - len(got)} frames dropped: the model was slower than the stream and took the "
        "newest frame each time (stream_buffer=True keeps every frame)"]
    feed, got = FakeLiveFeed(40), []
    for item in fake_camera(feed, stream_buffer=True):
        got.append(item.frame)
        feed.took(item.frame)
    assert got == list(range(40))
    assert capsys.readouterr().err == "note: camera0: the camera ended after 40 frames (it was disconnected or " \
                                      "stopped sending)\n"


def test_a_pipeline_over_a_live_source_takes_the_newest_frames(monkeypatch):
    """The CLIs' loop reads ahead of a live source by one batch only (a file's: a batch and two per decoding
    thread): the model gets frames made while it ran, the others are dropped."""
    from zoo.pipeline import Pipeline

    feed = FakeLiveFeed(200)
    got = []

    def process(batch):
        got.extend(ready.item.frame for ready in batch)
        feed.took(batch[-1].item.frame)
        feed.wait_for(batch[-1].item.frame + 6)

    pipeline = Pipeline(loaded_for(0, monkeypatch, feed), progress=False)
    assert pipeline.ahead == 1
    pipeline.run(process)
    assert got == sorted(set(got)) and got[-1] == 199 and len(got) < 100 and pipeline.done == len(got)


def test_a_stream_is_opened_once(tmp_path):
    """A stream URL or camera opened to check it is decoded from that opening: opened again, a server or camera
    that takes one client refused the run (FFmpeg's tcp listen: 'Connection refused' after the check), and the
    frames between the two were lost. A video file is opened again (its check reads only the header)."""
    import av

    clip = grey_video(tmp_path / "clip.mp4", 6)
    opened = []

    class CountedVideo(Video):
        def open(self):
            opened.append(self.path)
            container = av.open(str(clip))
            return container, container.streams.video[0]

    for url, live in (("tcp://127.0.0.1:9/live", True), ("https://host/clip.mp4", False)):
        opened.clear()
        frames = [item.frame for item in CountedVideo(url, stream_buffer=True)]
        assert frames == list(range(6)) and opened == [url], (url, opened)
        assert CountedVideo(url).live == live
    opened.clear()
    assert [item.frame for item in CountedVideo(str(clip))] == list(range(6)) and len(opened) == 2


def test_a_live_stream_is_named_by_its_whole_address(tmp_path):
    """A live stream's outputs were named by its address's last part: tcp://127.0.0.1:5000?listen=1 gave 127.0.0.mp4,
    and two ports of one host (or the cam1 of two hosts) one name, so --resume took the second stream as done. Its
    whole address now, as ultralytics makes a stream's a file name, without a user and password; a video file, a
    video file's URL and a camera keep their names. detect's outputs checked before the run are named alike."""
    import av

    from zoo.cli.detect import fixed_outputs

    clip = grey_video(tmp_path / "clip.mp4", 2)

    class ClipVideo(Video):  # any address, decoded from the clip
        def open(self):
            container = av.open(str(clip))
            return container, container.streams.video[0]

    names = {"tcp://127.0.0.1:5000?listen=1": "tcp___127.0.0.1_5000_listen_1",
             "tcp://127.0.0.1:5001?listen=1": "tcp___127.0.0.1_5001_listen_1",
             "rtsp://admin:secret@host/live/cam1": "rtsp___host_live_cam1",
             "rtsp://other/live/cam1": "rtsp___other_live_cam1",
             "https://host/clip.mp4": "clip", str(clip): "clip"}
    for address, stem in names.items():
        assert {item.stem for item in ClipVideo(address, stream_buffer=True)} == {stem}, address
    long = [f"http://host/live?token={'a' * 200}{n}" for n in range(2)]
    streams = [ClipVideo(address, stream_buffer=True) for address in [*names, *long]]
    stems = list(dict.fromkeys(item.stem for item in Chain(streams)))
    assert len(stems) == len(streams) and all(len(stem) <= sources.STREAM_NAME_LIMIT for stem in stems)
    assert stems[-1] != stems[-2] and stems[-1].startswith("http___host_live_token_aaa")
    assert [out.name for _, out, *_ in fixed_outputs(Chain(streams), tmp_path)] == [f"{stem}.mp4" for stem in stems]


def test_an_rtsp_stream_is_run_to_its_end(tmp_path, monkeypatch, capsys):
    """A live RTSP stream as a camera or mediamtx serves it (H.264 over RTP in the RTSP connection; FFmpeg asks for
    UDP first, then TCP), run by detect's CLI as docs/yolov8.md writes it: its every --vid-stride-th frame is
    each detected, or said skipped (sent while the model loaded) or dropped (the model slower than the stream),
    none lost without a word; the run ends with the stream (the server's RTCP BYE), exit 0, its records and
    annotated video written, and says the stream ended (FFmpeg ends one whose connection was lost alike: it ended
    without a word)."""
    from rtsp_server import RTSPServer
    from zoo.run import main

    monkeypatch.chdir(tmp_path)
    with RTSPServer(frames=100, fps=20) as server:
        assert main(["yolov8n", server.url, "--vid-stride", "5", "--weights", "synthetic:0", "--conf", "0.9",
                     "--jsonl", "preds.jsonl"]) == 0
    assert server.played == 1
    err = capsys.readouterr().err
    records = [json.loads(line) for line in Path("preds.jsonl").read_text().splitlines()]
    frames = [record["frame"] for record in records if "frame" in record]
    counted = {kind: int(n) for n, kind in re.findall(r"(\d+) frames? (skipped|dropped)", err)}
    assert frames and frames == sorted(set(frames)) and all(frame % 5 == 4 for frame in frames), frames
    assert len(frames) + counted.get("skipped", 0) + counted.get("dropped", 0) == 100 // 5, (frames, err)
    assert f"note: {server.url}: the stream ended after 100 frames (its server ended it, or the connection was " \
           "lost)" in err
    stem = f"rtsp___127.0.0.1_{server.server_address[1]}_live"
    assert {path.name for path in Path("runs/detect/predict").iterdir()} >= {f"{stem}.mp4"}


def test_an_rtsp_stream_read_with_stream_buffer_gives_every_frame(capsys):
    """The Python API on a live RTSP stream with ``stream_buffer=True`` (ultralytics' keyword): every
    ``vid_stride``-th frame, in order, none skipped or dropped, each result naming the stream and its frame."""
    import zoo
    from rtsp_server import RTSPServer

    model = zoo.load("yolov8n", weights="synthetic:0")
    with RTSPServer(frames=30, fps=30) as server:
        results = model.predict(server.url, stream=True, stream_buffer=True, vid_stride=3, imgsz=160, conf=0.9)
        assert [(r.path, r.frame) for r in results] == [(server.url, frame) for frame in range(2, 30, 3)]
    assert server.played == 1
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {server.url}: the stream ended after 30 frames (its server ended it, or the connection "
                     "was lost)"]


def test_a_url_that_does_not_open_names_the_address_not_the_video(monkeypatch):
    """A stream or image URL this machine cannot reach: the line names the address and the network; it said
    'pass a video FFmpeg can decode' of an image's URL."""
    with pytest.raises(ZooError) as refused:
        open_source("rtsp://127.0.0.1:1/live")  # a closed port: refused at once, no network needed
    assert str(refused.value).startswith("cannot open rtsp://127.0.0.1:1/live: ")
    assert str(refused.value).endswith("; check the address and that this machine reaches it")
    with pytest.raises(ZooError, match=r"^cannot open http://127.0.0.1:1/bus.jpg\?s=1: .*; check the address and "
                                       r"that this machine reaches it \(or download the image and pass the file\)$"):
        open_source("http://127.0.0.1:1/bus.jpg?s=1")


def test_an_empty_path_is_refused(tmp_path, monkeypatch):
    """open_source("") (predict(""), a list holding ""): Path("") is the current folder, whose images and videos were
    read without a word; one ZooError now."""
    save(tmp_path / "a.png")
    monkeypatch.chdir(tmp_path)
    for source in ("", ["", "a.png"]):  # Path("") is Path("."), which names the folder
        with pytest.raises(ZooError, match=r"^an empty path: pass a file, a folder, a glob, a .txt/.csv list, a URL "
                                           r"or a camera number$"):
            open_source(source)


def test_a_stalled_live_source_is_said_once_and_the_run_goes_on(monkeypatch):
    """A stream whose server stops sending (the connection open) left the run waiting without a word: after
    pipeline.STALL_NOTE_S without a frame one note says so and that Ctrl-C stops; the frames after the stall
    are taken as before. With --stream-buffer and without."""
    from zoo import pipeline

    monkeypatch.setattr(pipeline, "STALL_NOTE_S", 0.2)
    for stream_buffer in (False, True):
        noted, lines = threading.Event(), []

        def write(line, file=None, lines=lines, noted=noted):
            lines.append(line)
            noted.set()

        monkeypatch.setattr(pipeline.tqdm, "write", write)

        class StallingFeed(FakeLiveFeed):
            def decode(self, stream, noted=noted):
                yield self.Frame(self, 0)
                assert noted.wait(timeout=10), "no note while the stream sent nothing"
                yield self.Frame(self, 1)

        got = []
        run = pipeline.Pipeline(loaded_for(0, monkeypatch, StallingFeed(2), stream_buffer), progress=False)
        run.run(lambda batch: got.extend(ready.item.frame for ready in batch))
        assert got == [0, 1] and run.failed == 0
        assert lines == ["note: camera0: the stream sent nothing for 0.2 s; still waiting (Ctrl-C stops; every "
                         "finished output is kept)"]


def test_a_live_sources_backlog_is_skipped_not_blamed_on_the_model(capsys, monkeypatch):
    """A stream opened (to check it) before the model loaded has frames waiting in its buffer when the run starts:
    they were all decoded at once and dropped one by one while the model took the first of them, and the note
    said the model was slower than the stream (46 of 75 frames, a 12 ms model on a 25 frames/s stream). Now the
    run starts at the newest frame once the backlog is read, the frames before it are said skipped while the
    model loaded, and a model that keeps up drops none."""

    class BackloggedFeed(FakeLiveFeed):
        """``backlog`` frames ready at once, then one frame each time the reader took the one before."""

        def decode(self, stream, backlog=20):
            for k in range(self.n):
                if k > backlog:
                    with self.changed:
                        assert self.changed.wait_for(lambda k=k: self.taken >= k - 1, timeout=20)
                yield self.Frame(self, k)

    feed, got = BackloggedFeed(40), []
    for item in loaded_for(0.8, monkeypatch, feed):  # 20 frames of 25 frames/s
        got.append(item.frame)
        feed.took(item.frame)
    assert got == list(range(20, 40))
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")] == [
        "note: camera0: the camera ended after 40 frames (it was disconnected or stopped sending)",
        "note: camera0: 20 frames skipped: sent while the model loaded, before the run asked for its first frame (it "
        "starts at the stream's newest)"]


def test_a_loaded_machines_pause_in_the_backlog_is_not_blamed_on_the_model(capsys, monkeypatch):
    """The backlog was told by the wall clock: the first frame handed on was the one after which the decoding
    waited 20 ms, so a loaded machine pausing in the middle of the backlog handed on a frame of it, and the rest of
    the backlog, decoded while the model ran on that frame, was counted dropped 'the model was slower than the
    stream'. Frames are counted by their own time in the stream now: here the decoding stops after 10 of the 20
    frames sent while the model loaded until the reader took one (the stream quiet for QUIET_S: that frame was the
    newest there was), and the other 10 still count as skipped while the model loaded, none as dropped."""

    class PausingFeed(FakeLiveFeed):
        def decode(self, stream, backlog=20):
            for k in range(self.n):
                if k == 10 or k > backlog:  # the pause; after the backlog, one frame each time the reader took one
                    with self.changed:
                        assert self.changed.wait_for(lambda k=k: self.taken >= k - 1, timeout=20)
                with self.changed:
                    self.made = k
                    self.changed.notify_all()
                yield self.Frame(self, k)

    feed, got = PausingFeed(40), []
    camera = loaded_for(0.8, monkeypatch, feed)  # 20 frames of 25 frames/s
    monkeypatch.setattr(sources.NewestFrame, "QUIET_S", 0.05)  # the pause is longer: the decoding waits for the reader
    for item in camera:
        got.append(item.frame)
        feed.took(item.frame)
        if item.frame == 9:
            feed.wait_for(20)  # the model runs while the rest of the backlog decodes
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    # (the stream may seem quiet before frame 9 too, where the machine pauses longer than QUIET_S: an earlier first)
    assert got[0] <= 9 and 9 in got and got[-1] == 39 and got == sorted(got) and len(notes) == 2
    assert notes[0] == "note: camera0: the camera ended after 40 frames (it was disconnected or stopped sending)"
    assert notes[1] == (f"note: camera0: {40 - len(got)} frames skipped: sent while the model loaded, before the run "
                        "asked for its first frame (it starts at the stream's newest)")


def test_a_stream_whose_time_jumps_back_is_not_held_nor_counted_skipped(capsys, monkeypatch):
    """A stream's time that jumps back in its first seconds (an RTSP stream re-synced by its first sender report, an
    encoder restarted, a wrapped timestamp) put every later frame before the first one's time, so inside the wait
    for good: the first frame was held back until BACKLOG_LIMIT_S (the whole stream, where shorter) and every frame
    the model missed was counted 'skipped: sent while the model loaded'. A jump ends the wait now: the frames after
    it are the model's to drop, as those of a stream without timestamps."""

    class JumpingFeed(FakeLiveFeed):
        class Frame(FakeLiveFeed.Frame):
            def __init__(self, feed, n):
                super().__init__(feed, n)
                self.time = n / 25 - (10 if n >= 5 else 0)  # frame 5 stamped 10 s back

    feed, got = JumpingFeed(40), []
    for item in loaded_for(0.8, monkeypatch, feed):  # 20 frames of 25 frames/s waiting, by their times
        got.append(item.frame)
        feed.took(item.frame)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    skipped = [int(re.match(r"note: camera0: (\d+) frames? skipped", n)[1]) for n in notes if "skipped" in n]
    assert got[-1] == 39 and got == sorted(got) and sum(skipped) <= 5  # only frames 0-4, stamped before the jump


def test_a_frame_that_comes_while_the_reader_waits_is_kept_for_it(capsys, monkeypatch):
    """Two frames coming back to back while the reader waited for one: the first was replaced by the second
    unless the reader's thread woke in between (on a loaded machine, often not), and counted dropped 'the model
    was slower than the stream' while the model waited. The frame is kept for the reader now: a frame is dropped
    only when replaced while the reader held the one before it."""
    FakeClock(monkeypatch)
    live = None

    def frames():
        for k in range(0, 20, 2):
            with live.changed:  # the reader asks, its slot empty: two frames come at once
                while not (live.asking and live.newest is None):
                    live.changed.wait(timeout=0.01)
            for n in (k, k + 1):
                yield sources.Item("camera0", n, f"camera0_{n}", "camera0", n, live=True, stream_time=n / 25)

    live = sources.NewestFrame(frames(), "camera0", opened_at=0.0)
    assert [item.frame for item in live] == list(range(20))
    assert capsys.readouterr().err == ""
