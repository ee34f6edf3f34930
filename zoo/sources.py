"""Input sources for every task: one class per source kind, all yielding the same Items.

Whatever a user passes -- a file, a folder, a glob, a list, a ``.txt``/``.csv``
list of paths, numpy arrays or PIL images, a video, a camera -- becomes a
``Source``: an iterable of ``Item`` in a fixed order (ultralytics'
``data/loaders`` is the model). Every task's CLI and library code reads its
inputs through here::

    from zoo.sources import open_source

    source = open_source(["photos/", "clip.mp4"], recursive=True, vid_stride=2)
    print(source.total)                 # images + kept video frames (None for a camera)
    for item in source:
        try:
            rgb = item.load()           # (H, W, 3) uint8 RGB
        except ZooError as e:           # this item is bad: report it, go on with the next
            print(f"error: {e}")
            continue
        item.path, item.index, item.frame, item.fps, item.frames, item.name

The kinds (``open_source`` picks one; each can be used directly):

====================  ===========================================================
``Files(paths)``      image and video files in the given order (a missing or
                      unreadable one is a bad item, not a failed run)
``Folder(dir)``       its images and videos, sorted; ``recursive=True`` walks
                      sub-folders; dot-files are skipped; empty is an error
``Glob(pattern)``     ``photos/**/*.jpg``; no match is an error
``PathList(file)``    a ``.txt`` (one path a line, ``#`` comments) or ``.csv``
                      (column ``path``/``filename``/``file``/``image``, else the
                      first) list; relative paths are relative to the list file
``Arrays(objects)``   numpy arrays and PIL images (``bgr=True``: 3/4-channel
                      arrays are BGR(A), as OpenCV and ultralytics hold them)
``Video(path)``       a video file (mp4, avi, mov, mkv, webm ...) or a stream
                      URL (rtsp://, http://), decoded by PyAV (extra ``video``)
``Camera(index)``     a camera by number: PyAV (v4l2 on Linux, avfoundation on
                      macOS) or OpenCV when installed
====================  ===========================================================

``vid_stride=N`` keeps every N-th frame of videos and cameras, ultralytics'
way: the last of each group of N (frames N-1, 2N-1, ...), so a video of F frames
gives F // N items. Image files are decoded only when ``item.load()`` is called
(a thread pool can decode them in parallel); video frames are decoded in order
by the iteration itself, and ``load()`` returns the decoded frame. A live source
(a camera, a stream URL) is decoded as fast as it comes and the iteration gets
its newest frame (the others are dropped, counted in one note at the end), as
ultralytics' streams; ``stream_buffer=True`` keeps every frame.

Per-item metadata (``Item``): ``path`` (the file, the video, ``camera0`` or
``image3`` for an in-memory object), ``index`` (0-based position in the source),
``frame`` (0-based frame number in its video; None for images), ``fps`` and
``frames`` (the video's rate and frame count; None for images and where the
container does not say, e.g. cameras), and ``name``: a name for the item's own
outputs, unique in the source, ignoring case as macOS and Windows folders do
(``cat``, ``cat_2`` for a second cat.*, ``clip_12`` for frame 12 of clip.mp4);
``stem`` is the same without the frame number (one annotated video per video).

Writers: ``VideoWriter`` (an annotated video at the source's frame rate, PyAV),
written to a temporary name in the output's folder and renamed when closed, so
no reader ever sees half a file; ``JsonlWriter`` (one JSON record a line) and
``JsonListWriter`` (a JSON list, one record a line), written in place and put
on disk per batch, so a killed run keeps its records and ``--resume`` reads
them back (``read_records``, ``read_json_list``).
"""
from __future__ import annotations

import csv
import errno
import glob as globlib
import hashlib
import itertools
import json
import os
import re
import stat
import sys
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator
from urllib.parse import unquote, urlsplit

import numpy as np
from PIL import Image

from .errors import UsageError, ZooError, keyword, option
from .extras import install_hint, require
from .files import (ClosedOnExit, OutputFile, being_written, cannot_write, create_exclusive, create_temporary,
                    file_identity, is_special, json_text, lock_exclusive, not_a_file, place, remove_own, write_text)
from .images import IMAGE_SUFFIXES, load_image, max_image_pixels, too_many_pixels

VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".asf", ".flv", ".ts")
STREAM_SCHEMES = ("rtsp://", "rtmp://", "http://", "https://", "udp://", "tcp://")
LIST_SUFFIXES = (".txt", ".csv")
YOUTUBE_HOSTS = ("www.youtube.com", "youtube.com", "m.youtube.com", "youtu.be")  # pages, not streams
CSV_PATH_COLUMNS = ("path", "filename", "file", "image", "img")


def is_video(path: str | Path) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


@dataclass(eq=False)
class Item:
    """One image or video frame of a source; ``load()`` gives its pixels or raises a one-line ZooError."""

    path: str
    index: int
    name: str
    stem: str
    frame: int | None = None
    fps: float | None = None
    frames: int | None = None
    _load: Callable[[], np.ndarray] | None = field(default=None, repr=False)
    is_file: bool = False  # ``path`` names a local file (an image or a video), not a stream, camera or object
    live: bool = False  # a frame of a camera or live stream (Source.live): its video ends where the run stops
    # a video frame's time in its stream, seconds (its timestamp, else frame / fps; None where neither is known):
    # a live source's frames sent before the run asked for its first one are told apart by it (NewestFrame)
    stream_time: float | None = None

    def load(self) -> np.ndarray:
        """The pixels as an (H, W, 3) uint8 RGB array; a ZooError naming the item when it cannot be read."""
        return self._load()

    @property
    def result_path(self) -> str:
        """``Results.path`` as ultralytics gives it: a file's absolute path, not resolved (its
        LoadImagesAndVideos: ``Path(p).absolute()``), else ``path`` as given (a stream's URL, ``camera0``,
        an in-memory image's ``image0.jpg``). Records keep ``path`` as the user spelled it."""
        return str(Path(self.path).absolute()) if self.is_file else self.path

    @property
    def meta(self) -> dict:
        """The metadata as a plain dict (for result records): path, and the video fields where they apply."""
        out = {"path": self.path}
        if self.frame is not None:
            out.update(frame=self.frame, fps=self.fps, frames=self.frames)
        return out


def failed(message: str) -> Callable[[], np.ndarray]:
    """A loader for an item known to be bad before decoding."""
    def load():
        raise ZooError(message)
    return load


class UniqueNames:
    """Stems made unique in one source (x, x_2, x_3 ...), compared ignoring case as macOS and Windows folders do.

    A video's frames are named ``<video stem>_<frame>``, and an image's labels and crops by its name, so an
    image's name is also taken when it is a frame name of a video named before (``clip_3.png`` beside
    ``clip.mp4`` becomes ``clip_3_2``), and a video's stem when an image named before has one of its frame
    names. An image with a video's own stem is numbered ``clip-2``: every ``clip_N`` is a frame's."""

    def __init__(self):
        self.taken: set[str] = set()
        self.videos: set[str] = set()

    def __call__(self, stem: str, video: bool = False) -> str:
        name, n = stem, 1
        separator = "-" if not video and stem.lower() in self.videos else "_"
        while self.clashes(name.lower(), video):
            n += 1
            name = f"{stem}{separator}{n}"
        self.taken.add(name.lower())
        if video:
            self.videos.add(name.lower())
        return name

    def clashes(self, name: str, video: bool) -> bool:
        if name in self.taken:
            return True
        if video:
            return any(t.startswith(f"{name}_") and t[len(name) + 1:].isdigit() for t in self.taken - self.videos)
        head, _, number = name.rpartition("_")
        return number.isdigit() and head in self.videos


class Source(ABC):
    """An iterable of Items in a fixed order. ``total``: how many it yields, None when unknown (cameras).
    ``live``: its frames come at their own pace (a camera, a stream), so a reader slower than them skips some
    (FrameSource)."""

    kind = "source"
    total: int | None = None
    live = False

    def __iter__(self) -> Iterator[Item]:
        return self.items(0, UniqueNames())

    @abstractmethod
    def items(self, start: int, names: UniqueNames) -> Iterator[Item]:
        """The Items, numbered from ``start``, their names made unique with ``names`` (shared when chained)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(total={self.total})"


# -- files ----------------------------------------------------------------------------------------

def load_image_file(path: Path) -> np.ndarray:
    """Decode an image file; Pillow's failures on a bad file (any mode it cannot convert) -> a ZooError naming it."""
    try:
        return load_image(path)
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        raise ZooError(f"cannot read {path}: {e}") from None


class Files(Source):
    """Image and video files in the given order; a missing or unreadable one becomes a bad item."""

    kind = "files"

    def __init__(self, paths: Iterable[str | Path], vid_stride: int = 1):
        self.paths = [Path(p) for p in paths]
        self.vid_stride = check_stride(vid_stride)
        self.videos: dict[Path, Video | str] = {}  # a video's Video, or why it does not open
        for p in self.paths:
            if is_video(p) and p.is_file():
                try:
                    self.videos[p] = Video(p, vid_stride)
                except ZooError as e:
                    self.videos[p] = str(e)
        counts = [v.total if isinstance(v := self.videos.get(p), Video) else 1 for p in self.paths]
        self.total = None if None in counts else sum(counts)  # None: a video that does not say its length

    def not_found(self, path: Path) -> str:
        return f"not found: {path}"

    def items(self, start: int, names: UniqueNames) -> Iterator[Item]:
        index = start
        for path in self.paths:
            video = self.videos.get(path)
            if isinstance(video, Video):
                for item in video.items(index, names):
                    yield item
                    index += 1
                continue
            name = names(path.stem)
            if isinstance(video, str):
                load = failed(video)
            elif not path.exists():
                load = failed(self.not_found(path))
            elif path.is_dir():
                load = failed(f"{path} is a folder, not an image or video file")
            else:
                load = lambda path=path: load_image_file(path)  # noqa: E731
            yield Item(str(path), index, name, name, _load=load, is_file=True)
            index += 1


def media_files(paths: Iterable[Path]) -> list[Path]:
    """The images and videos among ``paths``, dot-files (hidden, or our own partial outputs) left out."""
    return [p for p in paths if p.suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES
            and not p.name.startswith(".") and p.is_file()]


# the settings file a detect or LaMa run keeps in its --out (records_header's line; check_settings): a run that
# continues the folder's outputs (--resume, LaMa's skip of outputs that exist) checks them, so one folder never holds
# two runs' outputs (images and labels say nothing of the options that made them), and it marks a folder of this
# program's outputs for a walk of inputs
RUN_SETTINGS = "mlx_zoo_run.json"


def walk_inputs(folder: Path, outputs: Iterable[str | Path]) -> list[Path]:
    """The files under ``folder`` (as ``rglob``: links to folders are not followed), without the sub-folders that
    hold outputs: ``outputs`` (this run's output folders) and those holding an earlier run's settings file
    (RUN_SETTINGS): their annotated images are results, not inputs; a run into a folder inside its input read the
    last run's outputs as inputs. One note names what was left out; a folder named as an input itself is read."""
    skipped = {file_identity(Path(output).resolve()) for output in outputs} - {None}
    found, left_out = [], []
    for root, folders, names in os.walk(folder):
        here = Path(root)
        if here != folder and (file_identity(here) in skipped or RUN_SETTINGS in names):
            left_out.append(str(here))
            folders.clear()
            continue
        found.extend(here / name for name in names)
    if left_out:
        print(f"note: {folder}: left out {', '.join(sorted(left_out))}: output folder{'s' * (len(left_out) > 1)} "
              "(the results of a run, not inputs); pass one as an input to read it", file=sys.stderr)
    return found


class Folder(Files):
    """A folder's images and videos sorted by path; ``recursive=True`` walks its sub-folders too, without those
    holding outputs (walk_inputs: ``outputs``, this run's output folders, and earlier runs' folders); None: the
    caller has no such option (ultralytics' predict), whose way into sub-folders is a glob."""

    kind = "folder"

    def __init__(self, folder: str | Path, recursive: bool | None = False, vid_stride: int = 1,
                 outputs: Iterable = ()):
        folder = Path(folder)
        if not folder.is_dir():
            raise ZooError(f"folder not found: {folder}")
        files = sorted(media_files(walk_inputs(folder, outputs) if recursive else folder.iterdir()))
        if not files:
            if recursive is None:
                deeper = f"; pass source='{folder / '**' / '*'}' (a glob) to look in its sub-folders"
            else:
                deeper = "" if recursive else f"; pass {option('recursive')} to look in its sub-folders"
            raise ZooError(f"no images or videos in folder {folder} (looked for "
                           f"{', '.join(IMAGE_SUFFIXES + VIDEO_SUFFIXES)}){deeper}")
        super().__init__(files, vid_stride)


class Glob(Files):
    """Files matching a pattern (``**`` crosses folders), sorted."""

    kind = "glob"

    def __init__(self, pattern: str, vid_stride: int = 1):
        files = sorted(media_files(Path(p) for p in globlib.glob(str(pattern), recursive=True)))
        if not files:
            raise ZooError(f"no images or videos match {pattern}")
        super().__init__(files, vid_stride)


class PathList(Files):
    """The files a ``.txt`` (one path a line) or ``.csv`` (a path column) names, relative to the list's folder (a
    folder's images and videos, sorted); a relative entry that is not there but is from the current folder is read
    from there, as ultralytics reads it (its LoadImagesAndVideos tries the current folder first, then the list's)."""

    kind = "list"

    def __init__(self, listfile: str | Path, vid_stride: int = 1):
        listfile = Path(listfile)
        if not listfile.is_file():
            raise ZooError(f"list of paths not found: {listfile}")
        try:
            text = listfile.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as e:
            raise ZooError(f"cannot read the list {listfile}: {e}; pass a UTF-8 text file, one path a line") from None
        entries = csv_paths(text, listfile) if listfile.suffix.lower() == ".csv" else [
            line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if not entries:
            raise ZooError(f"the list {listfile} names no files")
        entries = [file_url_path(entry, listfile) for entry in entries]
        urls = [e for e in entries if is_url(e)]
        if urls:  # as a path, https://host/a.jpg was 'not found: https:/host/a.jpg' (a path collapses the '//')
            raise ZooError(f"{listfile} names {len(urls)} URL{'s' * (len(urls) > 1)} ({urls[0]}"
                           f"{', ...' if len(urls) > 1 else ''}): a list names files on this machine (as ultralytics' "
                           "lists); download them and list the files, or pass each URL as an input of its own")
        self.listfile = listfile
        paths = []
        for entry in entries:
            try:
                path = self.entry_path(user_path(entry))
                files = sorted(media_files(path.iterdir())) if path.is_dir() else None
            except OSError as e:  # a name the system refuses (too long ...): pathlib's checks raise it, not False
                raise ZooError(f"{listfile} names {entry}, which cannot be read: {e.strerror or e}; correct the "
                               "list") from None
            if path.suffix.lower() in LIST_SUFFIXES and path.is_file():  # else 'not an image file Pillow recognises'
                raise ZooError(f"{listfile} names {entry}, a list of paths itself: a list names images, videos and "
                               f"folders, not other lists (as ultralytics' lists); pass {path} as an input of its own "
                               f"(several inputs may be given), or name its files in {listfile}")
            if files is not None:  # a folder's images and videos, not its sub-folders', as ultralytics reads a list's
                if not files:
                    print(f"warning: skipped: {listfile} names the folder {path}, which holds no images or videos",
                          file=sys.stderr)
                paths.extend(files)
            else:
                paths.append(path)
        if not paths:
            raise ZooError(f"the list {listfile} names no files: its folders hold no images or videos")
        super().__init__(paths, vid_stride)

    def entry_path(self, entry: Path) -> Path:
        """The file a list's entry names: beside the list, else from the current folder (a list written there,
        `ls photos/*.jpg > lists/x.txt`, as ultralytics reads it), else beside the list (not found there)."""
        beside = self.listfile.parent / entry
        if entry.is_absolute() or beside.exists() or not entry.exists():
            if not entry.is_absolute() and beside.exists() and entry.exists() and not beside.samefile(entry):
                kind = "folder" if beside.is_dir() else "file"
                other = "folder" if entry.is_dir() else "file"
                print(f"note: {self.listfile} names {entry}, which is a {kind} beside the list and "
                      f"{'another' if other == kind else 'a'} {other} from the current folder: reading {beside} (a "
                      "list's relative paths are relative to its folder; ultralytics would read the current folder's: "
                      f"to read that one, write its full path, {os.path.abspath(entry)})", file=sys.stderr)
            return beside
        return entry


def csv_paths(text: str, listfile: Path) -> list[str]:
    """The paths a CSV names: the column headed path/filename/file/image/img (timm's output has ``filename``); a
    one-row CSV without such a header is ultralytics' comma-separated list (every cell a path); else the first
    column, when its first row names a file (no header row): a header mlx-zoo does not know is one error, not a
    path."""
    rows = [row for row in csv.reader(text.splitlines()) if row and any(cell.strip() for cell in row)]
    if not rows:
        return []
    header = [cell.strip().lower() for cell in rows[0]]
    column = next((header.index(c) for c in CSV_PATH_COLUMNS if c in header), None)
    if column is not None:
        rows = rows[1:]
    elif len(rows) == 1:
        return [cell.strip() for cell in rows[0] if cell.strip()]
    elif not is_url(rows[0][0].strip()) and not names_media(listfile.parent / user_path(rows[0][0].strip())):
        # (an absolute path joins as itself; a URL is refused by PathList, in its own words)
        raise ZooError(f"{listfile}: its first row ({', '.join(rows[0])}) is neither a header naming the path column "
                       f"({', '.join(CSV_PATH_COLUMNS)}) nor a file that exists: head the path column with one of "
                       "those names, or start the list with an existing file")
    return [row[column or 0].strip() for row in rows if len(row) > (column or 0) and row[column or 0].strip()]


def user_path(text: str) -> Path:
    """A path as written, ``~`` and ``~user`` expanded; pathlib raises a RuntimeError for a user not here."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise ZooError(f"{text}: its ~ names no home folder here (no such user, or HOME unset): write the path "
                       "in full") from None


def is_url(text: str) -> bool:
    """Whether a list's entry is an address (``https://host/a.jpg``, ``rtsp://cam/live``), not a path: a scheme of
    two letters or more (``C://x.jpg``, ``C:/x.jpg`` are a Windows drive's paths)."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]+://", text) is not None


def file_url_path(entry: str, listfile: Path) -> str:
    """A list's entry, a ``file://`` URL made the path on this machine it names, percent-decoded
    (``file:///abs/a%20b.jpg``, ``file://localhost/abs/a b.jpg``: ``/abs/a b.jpg``); other entries as they are.
    One of another machine, or that names no file (no path; a query or fragment), is one ZooError."""
    if entry[:7].lower() != "file://":
        return entry
    parts = urlsplit(entry)
    if parts.netloc.lower() not in ("", "localhost"):
        raise ZooError(f"{listfile} names {entry}, a file URL of the machine {parts.netloc} (this machine's are "
                       "file:///abs/a.jpg): list the file's path here (its folder mounted here)")
    if not parts.path.startswith("/") or parts.query or parts.fragment:
        raise ZooError(f"{listfile} names {entry}, which names no file (a file URL is file:///abs/a.jpg: a '?' or "
                       "'#' of a file name is %3F or %23 in it): correct the list, or list the file's path")
    return unquote(parts.path)


def names_media(path: Path) -> bool:
    """Whether a CSV's first cell is a path, no header: a file there, or an image's or video's name (a missing one
    is skipped as a .txt list's, not taken for an unknown header)."""
    return path.suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES or path.exists()  # (a name too long to stat)


# -- in-memory objects ----------------------------------------------------------------------------

class Arrays(Source):
    """numpy arrays and PIL images; ``bgr=True`` reads 3/4-channel arrays as BGR(A) (OpenCV's order)."""

    kind = "arrays"

    def __init__(self, objects: Iterable, bgr: bool = False):
        self.objects = list(objects)
        for i, obj in enumerate(self.objects):
            if not isinstance(obj, (np.ndarray, Image.Image)):
                raise ZooError(f"image {i} is a {type(obj).__name__}: pass numpy arrays or PIL images")
        self.bgr = bgr
        self.total = len(self.objects)

    def load(self, obj, what: str) -> np.ndarray:
        rgb = load_image(obj, what)
        if self.bgr and isinstance(obj, np.ndarray) and obj.ndim == 3 and obj.shape[2] in (3, 4):
            rgb = np.ascontiguousarray(rgb[:, :, ::-1])
        return rgb

    def items(self, start: int, names: UniqueNames) -> Iterator[Item]:
        """Paths as ultralytics gives them: a PIL image's file, else ``image<i>.jpg``; names ``image<i>``."""
        for i, obj in enumerate(self.objects):
            name = names(f"image{i}")
            path = getattr(obj, "filename", "") or f"image{i}.jpg"
            yield Item(path, start + i, name, name, _load=lambda obj=obj, n=name: self.load(obj, n))


# -- videos and cameras ---------------------------------------------------------------------------

def import_av():
    return require("av", "reading and writing videos")


def check_stride(vid_stride: int) -> int:
    if not isinstance(vid_stride, int) or vid_stride < 1:
        raise ZooError(f"vid_stride {vid_stride!r}: use a whole number >= 1")
    return vid_stride


def frame_count(stream) -> int | None:
    """The frames a video stream holds: the container's count, else its duration times its rate."""
    if stream.frames:
        return int(stream.frames)
    rate = stream.average_rate or stream.guessed_rate
    seconds = (stream.duration * stream.time_base if stream.duration and stream.time_base
               else stream.container.duration / 1_000_000 if stream.container.duration else None)
    return int(round(float(seconds * rate))) if seconds and rate else None


def upright(rgb: np.ndarray, rotation: float) -> np.ndarray:
    """A frame turned as its display matrix says (a phone's portrait video), as OpenCV's decoding does by default
    (CAP_PROP_ORIENTATION_AUTO, what ultralytics reads): ``rotation`` is PyAV's, degrees counter-clockwise."""
    turns = round((rotation or 0) / 90) % 4
    return np.ascontiguousarray(np.rot90(rgb, turns)) if turns else rgb


def promised_frames(stream) -> int | None:
    """The frames a video must decode to be whole: the container's own count (None where it has none), or, for
    MP4 and MOV, fewer where the edit list's duration says so: a video trimmed by its edit list (a phone's or
    an editor's cut without re-encoding) counts the samples cut away too, which neither FFmpeg nor OpenCV
    decodes. (An AVI's duration is what its demuxer found, so a truncated AVI keeps its header's count.)"""
    if not stream.frames:
        return None
    rate = stream.average_rate or stream.guessed_rate
    if "mp4" in stream.container.format.name.split(",") and stream.duration and stream.time_base and rate:
        return min(int(stream.frames), round(float(stream.duration * stream.time_base * rate)))
    return int(stream.frames)


def promised_seconds(stream) -> float | None:
    """A Matroska or WebM video track's length, its DURATION tag (FFmpeg's and mkvmerge's muxers write one per track;
    the container's own length is its longest track's, an audio track's maybe), where it counts no frames (an
    MP4's and an AVI's count: promised_frames); None for other formats and without the tag."""
    tag = stream.metadata.get("DURATION", "")
    if stream.frames or "matroska" not in stream.container.format.name.split(",") or tag.count(":") != 2:
        return None
    hours, minutes, seconds = tag.split(":")
    try:
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:  # a tag of another form: no length vouched for
        return None


# A camera's read fails once it is unplugged (FFmpeg's v4l2 input: ENODEV, or EIO for the read under way): its end
UNPLUGGED = (errno.ENODEV, errno.EIO)


class FrameSource(Source):
    """What videos and cameras share: decoding frames in order, keeping every vid_stride-th.

    A live source (a camera, a stream URL: ``live``) is decoded on a thread of its own as fast as its frames
    come, and the reader gets the newest frame each time it asks (NewestFrame), so a model slower than the
    stream takes the frames it can and never falls further behind (ultralytics' default for streams);
    ``stream_buffer=True`` keeps every frame, in order, as a file's (the stream then waits for the model)."""

    def __init__(self, path: str, what: str, vid_stride: int, stream_buffer: bool = False):
        self.path, self.what = path, what
        self.is_file = False  # a camera's; a video file's is True
        self.vid_stride = check_stride(vid_stride)
        self.stream_buffer = stream_buffer
        self.fps: float | None = None
        self.frames: int | None = None
        self.promised: int | None = None  # the frames the container vouches for: fewer decoded is a damaged file
        self.promised_seconds: float | None = None  # the length it vouches for where it counts no frames (Matroska)
        # a stream's or camera's (container, stream) opened to check it, decoded from: opened again, a server or
        # camera that takes one client refuses, and the frames in between are lost (a file is opened again)
        self.held = None
        self.opened_at: float | None = None  # when ``held`` was opened (NewestFrame.clock): its frames wait since

    @abstractmethod
    def open(self):
        """A fresh (container, video stream) pair, or a one-line ZooError."""

    @property
    def stem(self) -> str:
        """What its outputs are named by (UniqueNames makes it unique in a run): a video file's stem (clip.mp4,
        https://host/clip.mp4: clip), a camera's name (camera0), a live stream's address (stream_name)."""
        if self.kind != "video":
            return self.path
        return stream_name(self.path) if self.live else Path(self.path).stem

    def items(self, start: int, names: UniqueNames) -> Iterator[Item]:
        frames = self.decoded(start, names)
        if not self.live or self.stream_buffer:
            return frames
        return iter(NewestFrame(frames, self.path, self.opened_at if self.held else None))

    def hold(self) -> None:
        """Open the source now and keep it for the decoding (``held``), noting when its frames began to wait."""
        self.opened_at = NewestFrame.clock()
        self.held = self.open()

    def decoded(self, start: int, names: UniqueNames) -> Iterator[Item]:
        """Every kept frame, in order, as it is decoded."""
        av = import_av()
        stem = names(self.stem, video=True)
        (container, stream), self.held = self.held or self.open(), None
        index, n = start, -1
        span = [None, None]  # the first and the last decoded frame's time, seconds
        try:
            frames = container.decode(stream)
            while True:
                try:
                    frame = next(frames)
                except (av.error.FFmpegError, OSError) as e:
                    if self.kind != "camera" or getattr(e, "errno", None) not in UNPLUGGED:
                        yield self.broken(index, stem, n + 1, f"frame {n + 1} cannot be decoded ({e})")
                        return
                    frame = None  # the camera unplugged: its end, as when its input ends
                except StopIteration:
                    frame = None
                if frame is None:
                    if self.live:  # FFmpeg ends a stream its server closed as one that lost its connection
                        what, why = (("stream", "its server ended it, or the connection was lost")
                                     if self.kind == "video" else (self.kind, "it was disconnected or stopped sending"))
                        print(f"note: {self.path}: the {what} ended after {n + 1} frame{'s' * (n != 0)} ({why})",
                              file=sys.stderr)
                    if self.promised is not None and n + 1 < self.promised:
                        yield self.broken(index, stem, n + 1, f"it ends after {n + 1} of its {self.promised} frames")
                    elif (short := self.cut_short(*span)) is not None:
                        yield self.broken(index, stem, n + 1, short)
                    elif index == start:  # an empty result would read as a video without detections
                        yield self.unusable(index, stem, n + 1)
                    return
                n += 1
                if getattr(frame, "time", None) is not None:  # OpenCV's frames have none
                    span = [frame.time if span[0] is None else span[0], frame.time]
                if (limit := max_image_pixels()) is not None and frame.width * frame.height > limit:
                    # a stream may change its size midway: no frame above the limit is turned into an array
                    yield Item(self.path, index, f"{stem}_{n}", stem, n, self.fps, self.frames,
                               failed(too_many_pixels(f"{self.what} frame {n}", (frame.width, frame.height))),
                               self.is_file)
                    return
                if (n + 1) % self.vid_stride:
                    continue
                rgb = upright(frame.to_ndarray(format="rgb24"), getattr(frame, "rotation", 0))
                at = getattr(frame, "time", None)  # PyAV's pts in seconds; OpenCV's frames have none
                yield Item(self.path, index, f"{stem}_{n}", stem, n, self.fps, self.frames, lambda rgb=rgb: rgb,
                           self.is_file, self.live, at if at is not None else n / self.fps if self.fps else None)
                index += 1
        finally:
            container.close()

    def cut_short(self, first: float | None, last: float | None) -> str | None:
        """Where the decoded frames span less of the video than its header's length says, by more than two frames (a
        Matroska or WebM file cut short decoded the frames it kept, exit 0): the problem, else None."""
        if self.promised_seconds is None:
            return None
        frame = 1 / self.fps if self.fps else 0.1
        shown = 0.0 if first is None else last - first + frame
        if shown >= self.promised_seconds - 2 * frame:
            return None
        return f"it ends after {shown:.2f} s of its {self.promised_seconds:.2f} s"

    def broken(self, index: int, stem: str, frame: int, problem: str) -> Item:
        """The bad item of a video that breaks off; the frames before it stand."""
        return self.failing(index, stem, frame, f"{self.what} is damaged: {problem}")

    def unusable(self, index: int, stem: str, decoded: int) -> Item:
        """The bad item of a source that ended without a frame kept: none decoded, or fewer than vid_stride."""
        if not decoded:
            return self.failing(index, stem, 0, f"{self.what} holds no frames: pass a video with frames")
        return self.failing(index, stem, decoded, f"{self.what} ends after {decoded} frame(s): "
                            f"{keyword('vid_stride')} {self.vid_stride} keeps one frame in {self.vid_stride}, so none; "
                            f"pass {keyword('vid_stride')} {decoded} or less")

    def failing(self, index: int, stem: str, frame: int, message: str) -> Item:
        return Item(self.path, index, f"{stem}_{frame}", stem, frame, self.fps, self.frames, failed(message),
                    self.is_file)


class Video(FrameSource):
    """A video file or stream URL, decoded by PyAV; opened once now so a bad file fails before any work. A URL
    that does not name a video file (``rtsp://cam/live``, not ``https://host/clip.mp4``) is live, as ultralytics
    takes it."""

    kind = "video"

    def __init__(self, path: str | Path, vid_stride: int = 1, stream_buffer: bool = False):
        super().__init__(str(path), f"video {path}", vid_stride, stream_buffer)
        self.is_file = not str(path).startswith(STREAM_SCHEMES)
        self.live = not self.is_file and not is_video(path)
        if self.is_file:
            if not Path(path).exists():
                raise ZooError(f"video not found: {path}")
            container, stream = self.open()
        else:
            self.hold()
            container, stream = self.held
        try:
            rate = stream.average_rate or stream.guessed_rate
            self.fps = float(rate) if rate else None
            self.frames = frame_count(stream)
            self.promised = promised_frames(stream)
            self.promised_seconds = promised_seconds(stream) if self.is_file else None
            self.total = None if self.frames is None else self.frames // self.vid_stride
        except BaseException:
            container.close()
            raise
        if self.is_file:
            container.close()

    def open(self):
        av = import_av()
        try:
            container = av.open(self.path)
        except (av.error.FFmpegError, OSError) as e:
            if not self.is_file and not isinstance(e, av.error.InvalidDataError):  # the address, not the data
                image = Path(self.path.split("?")[0]).suffix.lower() in IMAGE_SUFFIXES
                raise ZooError(f"cannot open {self.path}: {e}; check the address and that this machine reaches it"
                               f"{' (or download the image and pass the file)' if image else ''}") from None
            raise ZooError(f"cannot read {self.what}: {e}; pass a video FFmpeg can decode") from None
        if not container.streams.video:
            kinds = sorted({stream.type for stream in container.streams})
            held = f"only {' and '.join(kinds)}" if kinds else "no streams"
            container.close()
            raise ZooError(f"{self.what} has no video stream ({held}): pass a video; a download cut short has none "
                           "either (an MP4's index comes last): download it again")
        stream = container.streams.video[0]
        limit = max_image_pixels()
        if limit is not None and stream.width * stream.height > limit:  # from the header, before any frame
            container.close()
            raise ZooError(too_many_pixels(f"video {self.path}", (stream.width, stream.height)))
        stream.thread_type = "AUTO"  # frame-parallel decoding
        return container, stream


class Camera(FrameSource):
    """A camera by number: PyAV's v4l2 (Linux) or avfoundation (macOS) device, else OpenCV when installed."""

    kind = "camera"
    live = True

    def __init__(self, index: int, vid_stride: int = 1, stream_buffer: bool = False):
        super().__init__(f"camera{index}", f"camera {index}", vid_stride, stream_buffer)
        self.index = index
        self.hold()
        rate = self.held[1].average_rate or self.held[1].guessed_rate
        self.fps = float(rate) if rate else None

    def open(self):
        try:
            import av
        except ImportError:
            av = None
        device = {"linux": (f"/dev/video{self.index}", "v4l2"), "darwin": (str(self.index), "avfoundation")}
        target = next((d for platform, d in device.items() if sys.platform.startswith(platform)), None)
        problem = "no PyAV camera input on this platform"
        if av is not None and target is not None:
            try:
                container = av.open(target[0], format=target[1])
                if container.streams.video:
                    return container, container.streams.video[0]
                container.close()
                problem = "it has no video stream"
            except (av.error.FFmpegError, OSError, ValueError) as e:
                problem = str(e)
        opencv = OpenCVCamera.open(self.index)
        if opencv is not None:
            return opencv, opencv
        fix = "" if av is not None else f" ({install_hint('av')} or opencv-python)"
        raise ZooError(f"camera {self.index} does not open ({problem}); check it is connected and not in use{fix}")


class NewestFrame:
    """A live source's frames, read on a thread of their own as they come, of which the reader gets the newest
    each time it asks: one frame is held, never more; a frame replaced before it was asked for is not handed on
    (counted, and said in one note when the iteration ends). Errors of the source reach the reader after the
    frames before them.

    The stream was opened (to check it) ``opened_at`` (``clock``), before the model loaded: what it sent meanwhile
    waits in the connection's buffer and decodes at once. Those frames are told by their own time in the stream
    (``Item.stream_time``), not by how fast they decode: a frame less than the wait (the clock's time from the
    opening to the iteration's start) after the stream's first one was sent before the run asked for any, and
    one not handed on is counted skipped while the model loaded; any later one is counted dropped for the
    model's speed, and only when it was replaced while the reader held the frame before it (a frame that comes
    while the reader waits is kept for it, however late the reader's thread wakes on a loaded machine). The
    first frame handed on is the first one past the wait, or the newest once the stream has sent nothing for
    QUIET_S or the reader has waited BACKLOG_LIMIT_S: these choose which frame comes first, never the counts."""

    QUIET_S = 0.25  # the stream sent nothing for this long: the frame held is the newest there is
    BACKLOG_LIMIT_S = 2.0  # the first frame is not held back longer than this (a backlog decoded slower than it came)
    clock = staticmethod(time.monotonic)  # the wait's clock (tests give their own)

    def __init__(self, frames: Iterator[Item], path: str, opened_at: float | None = None):
        self.frames, self.path, self.opened_at = frames, path, opened_at
        self.waited_s = 0.0  # from the opening to the iteration's start: the stream time of the frames waiting
        self.first: float | None = None  # the stream time of the source's first frame
        self.passed = False  # a frame sent after the wait came: every later one was too (whatever its timestamp)
        self.newest: Item | None = None
        self.newest_waited = False  # ``newest`` was sent before the run asked for its first frame
        self.error: BaseException | None = None
        self.dropped, self.skipped, self.ended, self.stopping = 0, 0, False, False
        self.started = False  # a frame past the wait came (or the reader stopped waiting for one)
        self.asking = False  # the reader waits for a frame
        self.changed = threading.Condition()

    def waiting(self, item: Item) -> bool:
        """Whether ``item`` was sent before the run asked for its first frame: its time in the stream is less
        than the wait after the first frame's, and no frame before it was past the wait (a frame of no known
        time is past it, and one before the first frame's: the stream's time jumped back, a re-sync or a restarted
        encoder, so its times no longer tell the wait)."""
        if self.passed or item.stream_time is None:
            self.passed = True
        else:
            if self.first is None:
                self.first = item.stream_time
            self.passed = not 0 <= item.stream_time - self.first < self.waited_s
        return not self.passed

    def read(self) -> None:
        """The decoding thread: every frame into the one slot, as fast as they come."""
        try:
            for item in self.frames:
                sent_before = self.waiting(item)
                with self.changed:
                    # the reader asked and was handed a frame it has not taken yet: kept for it, not replaced
                    self.changed.wait_for(lambda: self.stopping or not (self.started and self.asking
                                                                        and self.newest is not None))
                    if self.stopping:
                        break
                    if self.newest is not None:
                        self.skipped += self.newest_waited
                        self.dropped += not self.newest_waited
                    self.newest, self.newest_waited = item, sent_before
                    self.started = self.started or self.passed
                    self.changed.notify_all()
        except BaseException as e:  # carried to the reader, raised there
            self.error = e
        finally:
            self.frames.close()  # a generator is closed by the thread that runs it: the container with it
            with self.changed:
                self.ended = True
                self.changed.notify_all()

    def first_frame(self) -> None:
        """Under ``changed``: until the first frame to hand on is in the slot (or the source ended); at once after."""
        give_up = self.clock() + self.BACKLOG_LIMIT_S
        while not (self.started or self.ended):
            quiet = not self.changed.wait(timeout=self.QUIET_S)  # no frame came meanwhile
            if self.newest is not None and (quiet or self.clock() >= give_up):
                self.started = True

    def __iter__(self) -> Iterator[Item]:
        self.waited_s = max(0.0, self.clock() - self.opened_at) if self.opened_at is not None else 0.0
        reader = threading.Thread(target=self.read, name="zoo-live", daemon=True)
        reader.start()
        try:
            while True:
                with self.changed:
                    self.asking = True  # from here the frame handed on is kept for the reader (read)
                    self.first_frame()
                    self.changed.wait_for(lambda: self.newest is not None or self.ended)
                    item, self.newest, self.asking = self.newest, None, False
                    self.changed.notify_all()
                if item is None:
                    if self.error is not None:
                        raise self.error
                    return
                yield item
        finally:
            with self.changed:
                self.stopping = True
                self.changed.notify_all()
            reader.join(timeout=5)  # a stream that stalls ends with the process (a daemon thread)
            if self.skipped:
                print(f"note: {self.path}: {self.skipped} frame{'s' * (self.skipped != 1)} skipped: sent while the "
                      "model loaded, before the run asked for its first frame (it starts at the stream's newest)",
                      file=sys.stderr)
            if self.dropped:
                print(f"note: {self.path}: {self.dropped} frame{'s' * (self.dropped != 1)} dropped: the model was "
                      f"slower than the stream and took the newest frame each time ({option('stream_buffer')} "
                      "keeps every frame)", file=sys.stderr)


class OpenCVCamera:
    """OpenCV's camera shaped like a PyAV container and stream, for the platforms PyAV cannot open a camera on."""

    class Frame:
        def __init__(self, bgr):
            self.bgr = bgr

        def to_ndarray(self, format: str) -> np.ndarray:
            return np.ascontiguousarray(self.bgr[:, :, ::-1])

    def __init__(self, capture):
        self.capture = capture
        fps = capture.get(5)  # cv2.CAP_PROP_FPS
        self.average_rate = Fraction(fps).limit_denominator(1001) if fps and fps > 0 else None
        self.guessed_rate = None

    @classmethod
    def open(cls, index: int):
        try:
            import cv2
        except ImportError:
            return None
        # its lines on a camera that does not open (errors too, before OpenCV 4.13): our one error line says it.
        # OpenCV 4.13 moved the level functions from cv2 to cv2.utils.logging; level 0 is silent in both
        logging = getattr(cv2.utils, "logging", cv2)
        level = logging.getLogLevel()
        logging.setLogLevel(0)
        try:
            capture = cv2.VideoCapture(index)
        finally:
            logging.setLogLevel(level)
        if not capture.isOpened():
            capture.release()
            return None
        return cls(capture)

    def decode(self, stream) -> Iterator[Frame]:
        while True:
            ok, bgr = self.capture.read()
            if not ok:
                return
            yield self.Frame(bgr)

    def close(self) -> None:
        self.capture.release()


# -- picking the kind -------------------------------------------------------------------------------

class Chain(Source):
    """Several sources one after another, numbered and named as one."""

    kind = "chain"

    def __init__(self, sources: list[Source]):
        self.sources = sources
        self.live = any(s.live for s in sources)
        totals = [s.total for s in sources]
        self.total = None if None in totals else sum(totals)

    def items(self, start: int, names: UniqueNames) -> Iterator[Item]:
        index = start
        for source in self.sources:
            for item in source.items(index, names):
                yield item
                index += 1


def open_source(source, recursive: bool | None = False, vid_stride: int = 1, bgr: bool = False,
                stream_buffer: bool = False, outputs: Iterable[str | Path] = ()) -> Source:
    """The Source for what a user passes; a list may mix paths, folders, globs and lists of paths.
    ``outputs``: the run's output folders, left out of a folder's walk with ``recursive`` (walk_inputs; None: the
    caller takes no ``recursive``, Folder).

    A path that does not exist, an empty folder or a glob without match is a ZooError
    now (one line); a file that turns out unreadable is a bad item later.
    """
    check_stride(vid_stride)
    if isinstance(source, Source):
        return source
    if isinstance(source, (np.ndarray, Image.Image)):
        return Arrays([source], bgr)
    if isinstance(source, int) and not isinstance(source, bool):
        return Camera(source, vid_stride, stream_buffer)
    if isinstance(source, (str, Path)):
        return open_path(str(source), recursive, vid_stride, stream_buffer, outputs)
    if isinstance(source, (list, tuple)):
        if not source:
            raise ZooError("an empty list of inputs: pass image or video paths, or numpy arrays / PIL images, in it")
        if all(isinstance(s, (np.ndarray, Image.Image)) for s in source):
            return Arrays(source, bgr)
        if all(isinstance(s, (str, Path)) for s in source):
            parts = [open_path(str(s), recursive, vid_stride, stream_buffer, outputs) for s in source]
            return parts[0] if len(parts) == 1 else Chain(parts)
        raise ZooError("a list of inputs holds paths, or numpy arrays and PIL images, not both")
    if type(source).__module__.partition(".")[0] == "torch":  # ultralytics' LoadTensor: a BCHW RGB batch in 0-1
        raise ZooError("a torch.Tensor is no source here (ultralytics takes a (B, 3, H, W) RGB batch in 0-1): pass its "
                       "images as PIL images, [PIL.Image.fromarray(a) for a in (t.permute(0, 2, 3, 1) * 255).round()"
                       ".byte().cpu().numpy()]")
    raise ZooError(f"cannot read images from a {type(source).__name__}: pass paths, folders, a glob, "
                   "a .txt/.csv list, videos, a camera number, numpy arrays or PIL images")


def input_paths(source: Source) -> list[Path]:
    """The files on disk a source reads (for the output guard: no output may replace one)."""
    if isinstance(source, Chain):
        return [p for part in source.sources for p in input_paths(part)]
    if isinstance(source, Files):
        return list(source.paths)
    if isinstance(source, Video) and not source.path.startswith(STREAM_SCHEMES):
        return [Path(source.path)]
    return []


def input_names(source: Source) -> Iterator[str]:
    """The files, videos, streams and cameras a source reads, as its items name them (``Item.path``)."""
    if isinstance(source, Chain):
        for part in source.sources:
            yield from input_names(part)
    elif isinstance(source, Files):
        yield from map(str, source.paths)
    elif isinstance(source, FrameSource):
        yield source.path


def read_twice(source: Source) -> str | None:
    """The first input ``source`` reads twice, as its items name it (a path given twice, or a file given and also
    in a folder, glob or list given; a video or stream given twice), or None."""
    seen = set()
    for name in input_names(source):
        if name in seen:
            return name
        seen.add(name)
    return None


def planned_names(source: Source) -> list[str] | None:
    """The output names of a source's items, known before decoding; None when it holds videos or cameras
    (their frames are named as they are decoded)."""
    parts = source.sources if isinstance(source, Chain) else [source]
    if any(isinstance(p, FrameSource) or (isinstance(p, Files) and p.videos) for p in parts):
        return None
    return [item.name for item in source]


STREAM_NAME_LIMIT = 100  # characters: a file name stays well under the file systems' 255 bytes with its suffixes


def stream_name(url: str) -> str:
    """A live stream's address as a file name, each character but ASCII letters, digits, '.', '-' and '_' made '_'
    (rtsp://host/live/cam1 -> rtsp___host_live_cam1, as ultralytics names a stream's outputs), without the
    user and password an address may carry; its last part alone named tcp://127.0.0.1:5000?listen=1 127.0.0 and
    the cam1 of any host alike. A longer one is cut, a hash of the address keeping two such apart."""
    parts = urlsplit(url)
    address = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    name = re.sub(r"[^\w.-]", "_", address, flags=re.ASCII)
    if len(name) <= STREAM_NAME_LIMIT:
        return name
    return f"{name[:STREAM_NAME_LIMIT - 9]}_{hashlib.sha256(address.encode()).hexdigest()[:8]}"


def open_path(text: str, recursive: bool | None, vid_stride: int, stream_buffer: bool = False,
              outputs: Iterable[str | Path] = ()) -> Source:
    if not text:  # Path("") is the current folder: its images were read without a word
        raise ZooError("an empty path: pass a file, a folder, a glob, a .txt/.csv list, a URL or a camera number")
    if text.startswith(STREAM_SCHEMES):
        if urlsplit(text).hostname in YOUTUBE_HOSTS:  # ultralytics asks pafy/pytube for the video's stream
            raise ZooError(f"{text}: a YouTube page is no video stream here: pass the video's own address (yt-dlp -g "
                           "-f 'best[ext=mp4]' URL prints it) or download the video and pass its file")
        return Video(text, vid_stride, stream_buffer)
    if text.isdigit() and not Path(text).exists():
        return Camera(int(text), vid_stride, stream_buffer)
    try:
        return open_local(text, user_path(text), recursive, vid_stride, outputs)
    except OSError as e:  # a name the system refuses (too long ...): pathlib's checks raise it, not False
        raise ZooError(f"cannot read {text}: {e.strerror or e}; check the path") from None


def open_local(text: str, path: Path, recursive: bool | None, vid_stride: int,
               outputs: Iterable[str | Path]) -> Source:
    """The Source for a path on this machine (``text`` as the user wrote it, ``path`` with ``~`` expanded)."""
    if path.is_dir():
        return Folder(path, recursive, vid_stride, outputs)
    if path.suffix.lower() == ".streams":  # ultralytics' LoadStreams: a file of stream addresses read side by side
        raise ZooError(f"{text}: a .streams file (ultralytics' several live streams at once) is no source here: "
                       "pass each stream's address (rtsp://...) to a predict call of its own")
    if path.is_file():
        if path.suffix.lower() in LIST_SUFFIXES:
            return PathList(path, vid_stride)
        if is_video(path):
            return Video(path, vid_stride)
        return Files([path], vid_stride)
    if globlib.has_magic(text):
        return Glob(text, vid_stride)
    if text.lower().split()[:1] == ["screen"]:  # ultralytics' LoadScreenshots: 'screen' or 'screen N [L T W H]'
        raise ZooError(f"{text!r}: screenshots are no source here (ultralytics' source='screen'): grab the screen and "
                       "pass the image, PIL.ImageGrab.grab() (or mss: PIL.Image.frombytes('RGB', shot.size, "
                       "shot.rgb)), or save a screenshot and pass its file")
    what = "image " if path.suffix.lower() in IMAGE_SUFFIXES else "video " if is_video(path) else ""
    raise ZooError(f"{what}not found: {text}")


# -- writers --------------------------------------------------------------------------------------

MAX_VIDEO_SIDE = {"h264": 16384, "mpeg4": 8190}  # the longest side each encoder opens with (FFmpeg 7's)
VIDEO_FORMATS = {".mp4": ("mp4", "h264"), ".m4v": ("mp4", "h264"), ".mov": ("mov", "h264"),
                 ".mkv": ("matroska", "h264"), ".avi": ("avi", "mpeg4"), ".webm": ("webm", "libvpx-vp9")}


class VideoWriter(ClosedOnExit):
    """Frames to a video file at a given rate, through a temporary name renamed by ``close()``.

    ``with VideoWriter("out.mp4", fps=source.fps) as video: video.write(rgb)`` -- leaving
    the block by an exception deletes the partial file. Suffixes: .mp4 .m4v .mov .mkv
    (H.264), .avi (MPEG-4 part 2), .webm (VP9). Frames of odd width or height are padded
    by one edge pixel (4:2:0 video needs even sizes). A frame of another size than the first
    is an error; with ``fit=True`` (a stream that changes its size midway) it is scaled to fit
    the video, its aspect kept, on black, said in one note.
    """

    def __init__(self, path: str | Path, fps: float, overwrite: bool = False, quality: int = 23, fit: bool = False):
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in VIDEO_FORMATS:
            raise ZooError(f"cannot write video {self.path}: use one of {', '.join(VIDEO_FORMATS)}")
        if self.path.exists() and not overwrite:
            raise ZooError(f"{self.path} exists: pass another name, or {option('overwrite')} to replace it")
        if not fps or fps <= 0:
            raise ZooError(f"cannot write video {self.path} at {fps} frames per second")
        self.format, self.codec = VIDEO_FORMATS[suffix]
        self.rate = Fraction(fps).limit_denominator(1001)
        self.quality = quality
        self.fit, self.changed = fit, False  # changed: a frame of another size than the first was fitted
        self.first: tuple[int, int] | None = None  # the first frame's (even) width and height
        self.replace = overwrite
        self.output: OutputFile | None = None  # created with the first frame
        self.container = self.stream = None
        self.count = 0
        self.refused: ZooError | None = None  # a write that failed: the video is dropped, no frame follows it

    def write(self, rgb: np.ndarray) -> None:
        """Append one (H, W, 3) uint8 RGB frame; every frame has the first one's size."""
        if self.refused is not None:  # a next frame would start a new file: a video without the frames before
            raise self.refused
        try:
            self._write(rgb)
        except OSError as e:  # its file's write (a full disk), raised through PyAV
            self.abort()
            self.refused = cannot_write(self.path, e)
            raise self.refused from None

    def _write(self, rgb: np.ndarray) -> None:
        av = import_av()
        h, w = rgb.shape[:2]
        rgb = np.pad(rgb, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge") if h % 2 or w % 2 else rgb
        if self.container is None:
            width, height = self.video_size(rgb.shape[1], rgb.shape[0])
            self.output = OutputFile(self.path, replace=self.replace)
            try:
                self.container = av.open(self.output.file, "w", format=self.format)
            except (av.error.FFmpegError, OSError) as e:
                self.abort()
                raise ZooError(f"cannot write {self.path}: {e}; check the folder exists and is writable") from None
            self.stream = self.container.add_stream(self.codec, rate=self.rate)
            self.stream.width, self.stream.height, self.first = width, height, rgb.shape[1::-1]
            self.stream.pix_fmt = "yuv420p"
            if self.codec == "h264":
                self.stream.options = {"crf": str(self.quality)}
        elif rgb.shape[1::-1] != self.first:
            if not self.fit:
                raise ZooError(f"{self.path}: frame {self.count} is {w}x{h}, the video "
                               f"{self.stream.width}x{self.stream.height}")
            if not self.changed:
                print(f"note: {self.path}: frame {self.count} is {w}x{h}, the video {self.stream.width}x"
                      f"{self.stream.height} (its source changed size): such frames are scaled to fit it",
                      file=sys.stderr)
            self.changed = True
        if rgb.shape[1::-1] != (self.stream.width, self.stream.height):
            rgb = self.fitted_frame(rgb[:h, :w])
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.count
        frame.time_base = 1 / self.rate
        try:
            self.container.mux(self.stream.encode(frame))
        except av.error.FFmpegError as e:
            raise ZooError(f"cannot write video {self.path}: frame {self.count} ({e})") from None
        self.count += 1

    def video_size(self, width: int, height: int) -> tuple[int, int]:
        """The video's (width, height) for a first frame of this (even) size: its own, or scaled down to the longest
        side its encoder opens with (``fit``; else an error: FFmpeg's own was an internal error), said in a note."""
        longest = MAX_VIDEO_SIDE.get(self.codec)
        if longest is None or max(width, height) <= longest:
            return width, height
        if not self.fit:
            raise ZooError(f"cannot write video {self.path}: its frames are {width}x{height} and {self.codec} takes "
                           f"at most {longest} pixels a side: scale them down, or write .webm")
        scale = longest / max(width, height)
        size = tuple(max(2, 2 * round(side * scale / 2)) for side in (width, height))
        print(f"note: {self.path}: frames of {width}x{height} are more than {self.codec} takes ({longest} pixels a "
              f"side): the video is {size[0]}x{size[1]}, scaled", file=sys.stderr)
        return size

    def fitted_frame(self, rgb: np.ndarray) -> np.ndarray:
        """``rgb`` scaled to fit the video's size, its aspect kept, centred on black (the labels and records keep
        the frame's own size: only the annotated video is scaled)."""
        (h, w), width, height = rgb.shape[:2], self.stream.width, self.stream.height
        scale = min(width / w, height / h)
        size = (min(width, max(1, round(w * scale))), min(height, max(1, round(h * scale))))
        canvas = np.zeros((height, width, 3), np.uint8)
        top, left = (height - size[1]) // 2, (width - size[0]) // 2
        canvas[top:top + size[1], left:left + size[0]] = np.asarray(Image.fromarray(rgb).resize(size, Image.BILINEAR))
        return canvas

    def close(self) -> Path:
        """Finish the video and give it its real name."""
        if self.refused is not None:
            raise self.refused
        if self.container is None:
            raise ZooError(f"{self.path}: no frames to write")
        av = import_av()
        try:
            self.container.mux(self.stream.encode(None))
            self.container.close()
            self.container = None
            self.output.close()
        except OSError as e:  # the last frames' write (a full disk)
            raise cannot_write(self.path, e) from None
        except av.error.FFmpegError as e:  # PyAV's word for a write that failed in its callback
            raise ZooError(f"cannot write {self.path}: {e}; check its disk has space and is writable") from None
        finally:
            self.abort()
        return self.path

    def abort(self) -> None:
        """Drop the partial video (a no-op once closed)."""
        if self.container is not None:
            try:
                self.container.close()
            except Exception:  # the file is deleted next; closing only frees the encoder
                pass
            self.container = None
        if self.output is not None:
            self.output.abort()


# -- records (JSONL) -----------------------------------------------------------------------------

HEADER_KEY = "mlx_zoo"  # a run's header (records_header): {"mlx_zoo": 1, "task": ..., "model": ...}
RECORDS_VERSION = 1
# the key under which the first record of a record file carries the run's header, last among its keys: a line of its
# own (the layout before) was a row of NaN in pandas' read_json(lines=True), counted in every count and mean
RUN_KEY = "mlx_zoo_run"


def not_ours() -> str:
    """The fix for a record file this program did not write (or another task's)."""
    return f"pass another {option('jsonl', 'PATH')}, or {option('overwrite')} to replace it"


# The longest line a record file or a JSON list may have. A record is one line; the largest we write is detect's
# --jsonl record of a segmentation model, every mask's polygon (measured 2026-11-30: 240 masks of a 1920x1080 photo,
# 49.5 KB; one ragged mask over half a 9459x9459 photo, the pixel limit's largest, 471 KB with --retina-masks);
# predictions.json's longest, one mask's COCO RLE, 77 KB for that mask. A longer line is a damaged or foreign
# file, refused once this much is read rather than read whole (200 MB of garbage without a newline).
RECORD_LINE_LIMIT = 64 * 2**20


def capped_lines(file: BinaryIO, path: Path, fix: str) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line) of a binary file, each at most RECORD_LINE_LIMIT bytes: iterating a file by
    lines reads a line whole, however long. A longer line is one ZooError naming ``fix``."""
    for n in itertools.count(1):
        line = file.readline(RECORD_LINE_LIMIT + 1)
        if not line:
            return
        if len(line) > RECORD_LINE_LIMIT:
            raise ZooError(f"{path} line {n} is longer than {RECORD_LINE_LIMIT // 2**20} MiB, more than any record "
                           f"this program writes (damaged, or not a file it wrote): {fix}")
        yield n, line


class Header(dict):
    """A run's header (records_header) and ``given_as_unset``: options whose value this run gives is what a
    file of an earlier version recorded as not given (null), so such a file matches (not written to the file)."""
    given_as_unset: frozenset = frozenset()

    def without_folder(self) -> Header:
        """The header without its "folder": for a run that adds to a folder of outputs, not continuing its inputs."""
        header = Header({key: value for key, value in self.items() if key != "folder"})
        header.given_as_unset = self.given_as_unset
        return header


def records_header(task: str, model: str, settings: dict | None = None, given_as_unset=(),
                   folder: bool = False) -> Header:
    """The header of a run's records (their first record's RUN_KEY): which task and model wrote them, and
    ``settings``, the options that change the results ({"--top-k": 5, ...}): --resume checks them, so one file
    never mixes two runs'.
    ``folder``: the folder the run starts in too, for records that name inputs as given (relative paths are
    relative to it): --resume from another folder is refused, as those paths name other files there.
    ``given_as_unset``: Header's."""
    settings = json.loads(json.dumps(settings)) if settings else None  # as the file gives them back: tuples as lists
    header = Header({HEADER_KEY: RECORDS_VERSION, "task": task, "model": model,
                     **({"folder": os.getcwd()} if folder else {}), **({"settings": settings} if settings else {})})
    header.given_as_unset = frozenset(given_as_unset)
    return header


def shown_settings(settings: dict, keys: Iterable[str], exact: bool = False) -> str:
    """``keys`` of ``settings`` as a command line gives them: ``--imgsz 320 320 --agnostic-nms``; ``exact``: each
    value as JSON (``--top-k [5]``, ``--top-k "5"``), for values a command line would show alike."""
    def shown(key):
        value = settings.get(key)
        if exact:
            return f"{key} {json.dumps(value)}" if key in settings else f"{key} (not given)"
        if value is None or value is False:
            return f"{key} (not given)"
        return key if value is True else f"{key} {' '.join(map(str, value)) if isinstance(value, list) else value}"
    return " ".join(shown(key) for key in keys)


class RecordReader:
    """A record file's records, one at a time as its lines are read (memory holds one line, whatever the
    file's length): ``for record in RecordReader(file, path, header)``. The run's header is the first record's
    RUN_KEY (left out of the record given), or, in a settings file and a record file of an earlier version, a
    line of its own before the records (``header_line``). One-line ZooErrors for a damaged or
    foreign file, raised at the line: a line longer than RECORD_LINE_LIMIT (read that far, not whole), a line
    that is not a JSON object with a ``path`` (bytes that are not
    UTF-8, ``42``), or, when ``header`` is given, records without it before them, or another task's, model's
    or format's. Once read to the end: ``header`` (the file's, None without one), ``whole`` (the bytes up to
    the end of its last whole line) and ``torn`` (whether a torn last line, a run killed while writing it,
    lies beyond: left out)."""

    def __init__(self, file: BinaryIO, path: Path, header: dict | None = None, fix: str | None = None):
        self.file, self.path, self.expected = file, path, header
        self.fix = fix or not_ours()  # what to do about a damaged or foreign file, or one of other settings
        self.header: dict | None = None
        self.whole, self.torn, self.seen_record, self.header_line = 0, False, False, False

    def __iter__(self) -> Iterator[dict]:
        for n, line in capped_lines(self.file, self.path, self.fix):
            last = not line.endswith(b"\n")  # the bytes after the last newline: complete or torn
            if not line.strip():
                self.whole += len(line)
                continue
            try:  # a file edited in an editor that marks UTF-8 (Notepad) starts with a BOM: still ours
                record = json.loads(line.decode("utf-8-sig" if n == 1 else "utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                if last:
                    self.torn = True
                    return
                raise ZooError(f"{self.path} line {n} is not a JSON record (damaged, or not a file this program "
                               f"wrote): {self.fix}") from None
            self.whole += len(line)
            first = self.header is None and not self.seen_record
            if isinstance(record, dict) and HEADER_KEY in record and first:
                self.header, self.header_line = record, True
                self.check_header()
            elif (isinstance(record, dict) and isinstance(record.get("path"), str) and HEADER_KEY not in record
                  and (RUN_KEY not in record or first)):
                if RUN_KEY in record:
                    self.header = record.pop(RUN_KEY)
                    self.check_header()
                elif first and self.expected is not None:
                    raise ZooError(f"{self.path} has no header (its first record's \"{RUN_KEY}\"): it is not a record "
                                   f"file this program wrote (or an older version's): {self.fix}")
                self.seen_record = True
                yield record
            else:
                raise ZooError(f"{self.path} line {n} is not a record of this program (a JSON object with a "
                               f"\"path\"): {self.fix}")

    def check_header(self) -> None:
        expected, found = self.expected, self.header
        if not isinstance(found, dict):
            raise ZooError(f"{self.path} has a \"{RUN_KEY}\" that is not a JSON object: it is not a record file this "
                           f"program wrote (or it was edited): {self.fix}")
        if "settings" in found and not isinstance(found["settings"], dict):
            raise ZooError(f"{self.path} has a header whose \"settings\" is not a JSON object: it is not a "
                           f"record file this program wrote (or it was edited): {self.fix}")
        if expected is None:
            return
        if found.get(HEADER_KEY) != expected[HEADER_KEY]:
            raise ZooError(f"{self.path} is a record file of another version of this program (format "
                           f"{found.get(HEADER_KEY)!r}, this one writes {expected[HEADER_KEY]}): {self.fix}")
        theirs = (found.get("task"), found.get("model"))
        if not all(isinstance(name, str) for name in theirs):
            raise ZooError(f"{self.path} has a header without its task and model (it says which wrote the "
                           f"records): it is not a record file this program wrote (or it was edited): {self.fix}")
        if theirs != (expected["task"], expected["model"]):
            # the command line's model against its own file's, as other settings (--weights) below: exit 2
            raise UsageError(f"{self.path} holds {theirs[1]} ({theirs[0]}) records, not {expected['model']} "
                           f"({expected['task']}): {self.fix}")
        # a file written before headers held settings has none to compare: taken as it is
        if isinstance(found.get("settings"), dict) and "settings" in expected:
            was, now = found["settings"], expected["settings"]
            unset = getattr(expected, "given_as_unset", ())
            differ = [key for key in {**was, **now}
                      if was.get(key) != now.get(key) and not (key in unset and was.get(key) is None)]
            if differ:
                # values a command line shows alike ([5] and 5, "5" and 5: an edited file) are shown as JSON
                exact = shown_settings(was, differ) == shown_settings(now, differ)
                # the command line's options against its own outputs' (resumed, or added to): exit 2
                raise UsageError(f"{self.path} holds results of {shown_settings(was, differ, exact)}, not "
                                 f"{shown_settings(now, differ, exact)}: give the options that made them, "
                                 f"or {self.fix}")
        # a file of an earlier version holds no folder: its relative paths are read from this one, unchecked
        if "folder" in found and "folder" in expected and not same_folder(found["folder"], expected["folder"]):
            # (exit 2: the command line's folder against the one its relative inputs were read from)
            raise UsageError(f"{self.path} holds results of a run started in the folder {found['folder']}: its "
                             "relative input paths name other files from here; run from that folder (cd there), "
                             f"or {self.fix}")


def same_folder(recorded, here: str) -> bool:
    """Whether a header's "folder" (a string, if the file is ours) is the folder ``here``, however reached."""
    return isinstance(recorded, str) and os.path.realpath(recorded) == os.path.realpath(here)


def read_records(path: str | Path, header: dict | None = None) -> Iterator[dict]:
    """The records of the record file at ``path``, streamed (RecordReader: checked line by line against
    ``header`` when given, the header and a torn last line left out); a file that is not a regular
    file (a folder, a FIFO, a device) or cannot be read is a one-line ZooError."""
    return streamed(Path(path), lambda file, path: RecordReader(file, path, header),
                    "pass a file path for the results")


def check_header_file(path: str | Path, header: dict, fix: str) -> None:
    """The file at ``path``, one header line (records_header, a line of its own) as a run's output folder keeps
    its settings in, checked against ``header`` as a record file's (RecordReader: its task, model and settings);
    a damaged or foreign file is a one-line ZooError naming ``fix``."""
    reader = None

    def read(file: BinaryIO, path: Path) -> RecordReader:
        nonlocal reader
        reader = RecordReader(file, path, header, fix)
        return reader

    for _ in streamed(Path(path), read, fix):
        break  # a record: not a header file
    if reader is None or reader.header is None or reader.seen_record:
        raise ZooError(f"{path} is not a settings file this program wrote (one header line): {fix}")


def check_settings(path: Path, header: dict, others: Callable[[], str | None], overwrite: bool, resume: bool,
                   skipped: int, fix: str, unknown: str) -> str | None:
    """An output folder's settings file (RUN_SETTINGS), there from an earlier run: its settings checked against
    this run's ``header`` (a run that continues the folder's, ``resume``, always; a new run into it unless
    ``overwrite`` replaces its outputs); ``fix``: what else to do. Without the file, ``skipped`` outputs this run
    would take as done are refused (``unknown``: how that line starts). ``others()``: a file in the folder this run
    does not make, named, or None. -> what this run does with the file (apply_settings, before its first output):
    "write" it, "remove" it (``overwrite`` of other settings leaving outputs of the earlier ones: the folder's
    settings are then unknown), or None (kept as it is, or not written where the folder holds outputs of
    unknown settings: it would vouch for them)."""
    if path.exists() and (resume or not overwrite):
        # a new run adds outputs of its own inputs, from any folder; a resumed one takes the folder's as done
        check_header_file(path, header if resume else header.without_folder(), fix)
        return None
    if resume and skipped:
        # a folder of an earlier version (or another program's): which options made its outputs is not known
        raise UsageError(f"{unknown}{path} is not there, so the {skipped} output(s) in {path.parent} may be of other "
                         "options than these: run again with --overwrite (all made again) or into a new --out")
    other = others()
    if other is None:
        return "write"
    if path.exists() and not holds_settings(path, header.without_folder()):  # --overwrite of other settings
        print(f"note: {other} in {path.parent} stays, made with other options than this run's: its settings file "
              f"{path.name} is removed, so no later run takes it for this run's output", file=sys.stderr)
        return "remove"
    return None


def holds_settings(path: Path, header: dict) -> bool:
    """Whether the settings file at ``path`` holds ``header``'s settings (a damaged or foreign one does not)."""
    try:
        check_header_file(path, header, "")
    except ZooError:
        return False
    return True


def apply_settings(path: Path, header: dict, action: str | None, replace: bool) -> None:
    """check_settings' ``action`` on the folder's settings file, before the run's first output (a killed run's
    folder says which options made it; a run that writes no output leaves none)."""
    if action == "write":
        write_text(path, json_text(header) + "\n", replace=replace)
    elif action == "remove":
        path.unlink(missing_ok=True)


def other_file(folder: Path, own: Callable[[Path], bool]) -> str | None:
    """A file under ``folder`` that ``own`` does not take for this run's, named relative to it; None if none."""
    for file in (p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else ():
        if not own(file):
            return str(file.relative_to(folder))
    return None


def streamed(path: Path, reader: Callable[[BinaryIO, Path], Iterable[dict]], fix: str) -> Iterator[dict]:
    """The records ``reader(file, path)`` reads from the file at ``path``, a regular file (a folder, a FIFO, a
    device, or a file that cannot be read is a one-line ZooError naming ``fix``)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: opening a FIFO waits for a writer
            raise ZooError(f"{path} is not a regular file: {fix}")
        with open(path, "rb") as file:
            yield from reader(file, path)
    except OSError as e:
        raise ZooError(f"cannot read {path}: {e.strerror or e}") from None


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSONL file this program wrote (its header left out); a torn last line
    (a run killed mid-write) is left out too."""
    return list(read_records(path))


def note_torn(path: Path) -> None:
    print(f"note: {path}: its last line was cut off (a run killed, or its disk full, while writing it): dropped, its "
          "item is done again", file=sys.stderr)


def lock(fd: int, path: Path) -> None:
    """An exclusive lock on an open record file: a second run on the same file stops in one line."""
    if not lock_exclusive(fd, path):
        error = being_written(path, fd)
        os.close(fd)
        raise error


class JsonlWriter:
    """One JSON record a line, written to the final file as it comes: ``write`` hands each line to the
    operating system (a killed process loses at most the line being written), ``sync`` puts the
    lines on disk (the CLIs call it after every batch).

    ``header`` (``records_header(task, model)``): carried by the file's first record, under RUN_KEY (so pandas'
    ``read_json(path, lines=True)`` reads one row per record); ``resume`` checks it, and moves the header line
    of a file of an earlier version into its first record (the file rewritten). Without
    ``resume`` or ``overwrite`` the file must not exist: it is created exclusively (two runs on one
    path: the second stops in one line). ``resume=True`` continues an existing file, read as a stream
    (memory holds a line, not the records): ``kept`` of its records stay, those ``keep(record)`` accepts
    when given (the others are dropped from the file, e.g. error records whose items are tried again),
    ``kept_records()`` reads them back; a torn last line is dropped with a note.
    ``overwrite=True`` writes a new file that replaces the old one with its first record (a run that
    writes none leaves the old file as it was). The file is locked while open: a second writer of
    it stops in one line. A run that wrote no record leaves no file it created. Use as a context
    manager or call ``close()``. OSErrors and damaged or foreign files are one-line ZooErrors.
    """

    def __init__(self, path: str | Path, resume: bool = False, overwrite: bool = False,
                 keep: Callable[[dict], bool] | None = None, header: dict | None = None):
        self.path = Path(path)
        if self.path.is_dir():
            raise ZooError(f"{self.path} is a folder: pass a file path for the results")
        if is_special(self.path):
            raise not_a_file(self.path, "record file")
        if not self.path.parent.is_dir():
            raise ZooError(f"folder {self.path.parent} does not exist; create it or pass another path")
        self.header, self.kept, self.written = header, 0, 0
        self.unheaded = header is not None  # the next record written carries the header: the file has none yet
        self.created = False  # this run made the file: closed without a record, it is removed again
        self.pending: Path | None = None  # --overwrite: the new file, renamed over the old one with its first record
        self.refused: ZooError | None = None  # a write that failed: the file's last (_refusal)
        exists = os.path.lexists(self.path)
        if exists and not (resume or overwrite):
            raise ZooError(f"{self.path} exists: pass {option('resume')} to continue it or {option('overwrite')} to "
                               "replace it")
        try:
            if exists and resume:
                self._resume(keep)
            elif exists:
                self._replace()
            else:
                self._open(create_exclusive(self.path))
                self.created = True
                self._start([])
        except FileExistsError:
            raise ZooError(f"{self.path} was created by another run after this one started: pass {option('resume')} "
                           "to continue it once that run ends, or another path") from None
        except OSError as e:
            raise cannot_write(self.path, e) from None

    def _open(self, fd: int) -> None:
        lock(fd, self.path)
        self.identity = file_identity(fd)
        self.file = os.fdopen(fd, "w", encoding="utf-8")

    def _start(self, records: Iterable[dict]) -> None:
        """``records`` at the start of the file just opened (the first with the header), on disk before any new
        one."""
        for record in records:
            self._line(record)
        self._flush()

    def _line(self, record: dict) -> None:
        """``record`` as the file's next line, the header with it if none is there yet."""
        if self.unheaded:
            record, self.unheaded = {**record, RUN_KEY: self.header}, False
        self.file.write(json_text(record, self.path, ensure_ascii=False) + "\n")  # grep finds "café" in it

    def _reader(self, file: BinaryIO):
        return RecordReader(file, self.path, self.header)

    def _count_kept(self, fd: int, keep):
        """The file open at ``fd`` read once as a stream, counting the records ``keep`` accepts (``kept``); ->
        (the reader, how many records it dropped). A damaged file's error closes ``fd``."""
        dropped = 0
        try:
            with os.fdopen(os.dup(fd), "rb") as file:
                found = self._reader(file)
                for record in found:
                    if keep is None or keep(record):
                        self.kept += 1
                    else:
                        dropped += 1
        except BaseException:
            os.close(fd)
            raise
        if found.torn:
            note_torn(self.path)
        return found, dropped

    def _resume(self, keep) -> None:
        fd = self._open_locked()
        found, dropped = self._count_kept(fd, keep)
        if not dropped and not found.header_line and data_ends_a_line(fd, found.whole):
            os.ftruncate(fd, found.whole)  # the torn line, if any
            os.lseek(fd, 0, os.SEEK_END)
            self._open(fd)
            self.unheaded = self.header is not None and found.header is None  # a file of no record yet
            return
        self._rewrite(fd, self._kept_in(fd, keep))  # records dropped, or an earlier version's header line

    def _kept_in(self, fd: int, keep) -> Iterator[dict]:
        """The records of the file open at ``fd`` (read from its start again) that ``keep`` accepts."""
        with os.fdopen(os.dup(fd), "rb") as file:
            file.seek(0)
            yield from (r for r in self._reader(file) if keep is None or keep(r))

    def kept_records(self) -> Iterator[dict]:
        """The records kept from the earlier run (``resume=True``), read back from the file as a stream: a second
        read, of the file as kept (after any rewrite), so its readers see what it holds and the resume pass
        needs none of them (about 1 s per 100,000 classify records on this 2-core CPU, against the hours of
        model work they stand for)."""
        return itertools.islice(streamed(self.path, lambda file, path: self._reader(file), not_ours()), self.kept)

    def _open_locked(self) -> int:
        """The existing file opened for reading and writing (never through a link) and locked."""
        fd = os.open(self.path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        lock(fd, self.path)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ZooError(f"{self.path} is not a regular file: pass a file path for the results")
            if file_identity(fd) != file_identity(self.path):  # renamed over while this run waited for it
                raise ZooError(f"{self.path} is being written by another run: wait for it to end, or pass another "
                               "path")
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _rewrite(self, old: int, records: Iterable[dict]) -> None:
        """``records`` (those kept, read from ``old`` as they are written) in a new file created exclusively, on
        disk, then renamed over the old one, whose lock (``old``, an open descriptor) is held until then: no
        second run reads it meanwhile."""
        try:
            fd, tmp = create_temporary(self.path)
            identity = file_identity(fd)
            try:
                self._open(fd)
                self._start(records)
                os.replace(tmp, self.path)
            except BaseException:
                remove_own(tmp, identity)
                raise
        finally:
            os.close(old)

    def _replace(self) -> None:
        try:
            old = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)  # a FIFO: no wait
                          | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            old = None  # a link or unreadable: it is replaced, not read
        if old is not None:
            lock(old, self.path)  # the old file is not replaced under another run that writes it
            os.close(old)
        fd, self.pending = create_temporary(self.path)
        self._open(fd)
        self._start([])

    @property
    def count(self) -> int:
        """Records in the file: those kept from an earlier run and those written since."""
        return self.kept + self.written

    def write(self, record: dict) -> None:
        with self._refusal():
            self._line(record)
            self.file.flush()
        self.written += 1

    @contextmanager
    def _refusal(self):
        """The file's next bytes, written inside; a failed write (a full disk) is its last: nothing is written after
        it, on close neither, so the file ends at the cut (a torn last line, which a resume drops), never with lines
        after a gap (a text file's buffer drops the bytes a failed write held). A DiskRefused: the run ends."""
        if self.refused is not None:
            raise self.refused
        try:
            yield
        except OSError as e:
            self.refused = cannot_write(self.path, e, ends_run=True)
            raise self.refused from None

    def _flush(self) -> None:
        """Every line written so far on disk (fsync)."""
        with self._refusal():
            self.file.flush()
            os.fsync(self.file.fileno())

    def sync(self) -> None:
        """Every line written so far on disk; with --overwrite, the first records replace the old file."""
        self._flush()
        if self.pending is not None and self.count:
            self._place()

    def _place(self) -> None:
        """--overwrite: the new file renamed over the old one."""
        try:
            place(self.pending, self.path, replace=True)
        except OSError as e:
            raise cannot_write(self.path, e) from None
        self.pending = None

    def close(self) -> Path:
        """Keep every record written (also after an interrupt or a refused write); a file this run made and wrote no
        record in is removed, an old file it was to replace is kept (also when a write was refused before the new
        file replaced it)."""
        if self.file.closed:
            return self.path
        try:
            if self.count and self.refused is None:
                self.sync()
            elif self.pending is not None or (self.created and not self.count):
                remove_own(self.pending or self.path, self.identity)
        finally:
            self._close_file()
        return self.path

    def _close_file(self) -> None:
        """Close the file, and its lock with it, also when the flush of what a refused write left in its buffer (the
        rest of that write, the file's last bytes) is refused again."""
        try:
            self.file.close()
        except OSError:
            pass  # the file ends at the cut

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def data_ends_a_line(fd: int, whole: int) -> bool:
    """Whether the file's kept bytes end with a newline (or are none): new lines can follow them."""
    return whole == 0 or os.pread(fd, 1, whole - 1) == b"\n"


class JsonListReader:
    """The records of a JSON list as JsonListWriter writes it, one at a time as its lines are read (memory holds
    one line, whatever the file's length): ``[`` on its first line, one record a line, each but the last followed
    by a comma, ``]`` on the last line (``[]`` for none). A list its run did not finish (killed) has no ``]``,
    perhaps a torn last line (left out: ``torn``, once read to the end), or is empty (killed before the ``[``).
    One-line ZooErrors, at the line, for anything else: another layout (json.dump's one line, an indented
    list: ``overwrite`` replaces it), a line that is not a record, a line longer than RECORD_LINE_LIMIT."""

    def __init__(self, file: BinaryIO, path: Path):
        self.file, self.path = file, path
        self.torn = False

    def __iter__(self) -> Iterator[dict]:
        refuse = f"pass {option('overwrite')} to replace it"
        opened = closed = False
        records = 0
        comma = True  # whether the line before ends with one: a record may follow
        for n, line in capped_lines(self.file, self.path, refuse):
            text = line.strip()
            if not text:
                continue
            if closed:
                raise ZooError(f"{self.path} line {n} follows the list's closing bracket (damaged, or not a file this "
                               f"program wrote): {refuse}")
            if not opened:
                if text not in (b"[", b"[]"):
                    raise ZooError(f"{self.path} is not a JSON list of records as this program writes them ('[' "
                                   f"on the first line, one record a line): {refuse}")
                opened, closed = True, text == b"[]"
                continue
            if text == b"]" and not (comma and records):  # after a comma, a "]" would make the list invalid JSON
                closed = True
                continue
            try:
                record = json.loads(text.removesuffix(b",").decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                if not line.endswith(b"\n"):  # the bytes after the last newline: a run killed while writing them
                    self.torn = True
                    return
                record = None
            if not comma or not isinstance(record, dict):
                raise ZooError(f"{self.path} line {n} is not a record of an unfinished JSON list (damaged, or not a "
                               f"file this program wrote): {refuse}")
            yield record
            records += 1
            comma = text.endswith(b",")


def read_json_list(path: str | Path) -> Iterator[dict]:
    """The records of the JSON list at ``path``, streamed (JsonListReader: a torn last line left out)."""
    return streamed(Path(path), JsonListReader, f"pass {option('overwrite')} to replace it")


class JsonListWriter(JsonlWriter):
    """A JSON list, one record a line (``[``, records each but the last followed by a comma, ``]``; pycocotools
    and json.load read it), written in place as JsonlWriter writes lines: ``write`` buffers a record,
    ``sync`` puts the records so far on disk (the CLIs call it after every batch, before the batch's
    other outputs), ``close()`` adds the ``]`` (also after an error or an interrupt: the records so far
    stand). A killed run leaves a list without its ``]``, perhaps with a torn last line; ``resume=True``
    reads it back as a stream (JsonListReader: complete records only; a finished list too; memory holds a
    line, not the records), keeps those ``keep(record)`` accepts (``kept``, ``kept_records()``), and writes
    them, read again, to a new file created exclusively, renamed over the old one, which is then appended to.
    Damaged or foreign files are one-line ZooErrors. ``overwrite=True``: the new file replaces the old one at
    the first ``sync()``. Without either, an existing ``path`` is an error, and the file is created
    exclusively. Locked while open: a second writer stops in one line."""

    def __init__(self, path: str | Path, resume: bool = False, overwrite: bool = False,
                 keep: Callable[[dict], bool] | None = None):
        super().__init__(path, resume, overwrite, keep)  # no header: the file stays a plain JSON list

    def _start(self, records: Iterable[dict]) -> None:
        self.file.write("[")
        for n, record in enumerate(records):
            self._record(record, n)
        self._flush()

    def _reader(self, file: BinaryIO):
        return JsonListReader(file, self.path)

    def _resume(self, keep) -> None:
        fd = self._open_locked()
        self._count_kept(fd, keep)
        self._rewrite(fd, self._kept_in(fd, keep))  # without its ``]`` and its torn line, if any

    def _record(self, record: dict, n: int) -> None:
        """The list's ``n``-th record (from 0)."""
        self.file.write(("\n  " if n == 0 else ",\n  ") + json_text(record, self.path))

    def write(self, record: dict) -> None:
        with self._refusal():
            self._record(record, self.count)
        self.written += 1

    def sync(self) -> None:
        """The records so far on disk; with --overwrite, the first sync replaces the old file (whatever the count:
        the run's other outputs follow, and the old file's records are not theirs)."""
        self._flush()
        if self.pending is not None:
            self._place()

    def close(self) -> Path:
        """The closing bracket, on disk (a no-op once closed); after a refused write none: the list stays unfinished,
        as a killed run's, which a resume continues (with --overwrite the old file stays, if not yet replaced)."""
        if self.file.closed:
            return self.path
        try:
            if self.refused is None:
                with self._refusal():
                    self.file.write("\n]\n" if self.count else "]\n")
                self.sync()
            elif self.pending is not None:
                remove_own(self.pending, self.identity)
        finally:
            self._close_file()
        return self.path
