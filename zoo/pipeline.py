"""The loop every task's CLI runs over its inputs: decoding overlaps the model, memory stays flat.

One ``Pipeline`` per run. It reads a ``zoo.sources`` Source on a background thread, runs
``prepare(item)`` (decoding, resizing, normalising: numpy and Pillow, never MLX) on a small
thread pool, and hands the prepared items to ``process`` in source order, ``batch`` at a time,
in the calling thread (the one that runs the model)::

    from zoo.pipeline import Pipeline
    from zoo.sources import open_source

    source = open_source(args.images, recursive=args.recursive)
    pipeline = Pipeline(source, prepare=lambda item: preprocess(item.load()), batch=8,
                        skip=lambda item: (out / item.name).exists(),      # --resume: done before
                        on_error=lambda item, message: jsonl.write({**item.meta, "error": message}),
                        desc="classify")

    def process(batch):                       # list of Ready(item, data), in source order
        outputs = model(np.stack([ready.data for ready in batch]))
        for ready, output in zip(batch, outputs):
            write_atomic(out / ready.item.name, ...)   # outputs written as they come
            # pipeline.fail(ready.item, "why") fails this one item and not the rest

    pipeline.run(process)
    print(pipeline.summary("classified"))     # "3 images classified, 1 failed ..., 2.1 s (1.4 images/s)"
    return pipeline.exit_code                 # 0; 1 when any item failed; 130 when interrupted

What it guarantees:

* **Order and flat memory.** Items come out in the source's order. At most ``ahead`` items
  (default ``batch + 2 * workers``) are read ahead of the batch being processed, so a run over
  10,000 images or a long video holds a few items, not the run.
* **Bad items.** An item whose ``prepare`` raises ``ZooError`` (unreadable file, wrong mode,
  broken video frame), or whose ``process`` call raises one, is reported as one ``error:`` line
  naming it, passed to ``on_error(item, message)`` (write the error record there), counted, and
  skipped; the run goes on and ``exit_code`` is 1 at the end. A bad item met while a batch was
  being gathered is reported after that batch, so records keep the source's order at batch 1.
  When the source holds exactly one item (or ``single=True``), its ZooError is the run's own and
  is raised (zoo.cli.guarded prints it).
* **A disk that takes no more.** A ``zoo.files.DiskRefused`` (the output disk full, over its quota or
  read-only, or the record file refused) is no item's: the run ends at it, raised with the items
  finished and how to continue (``resume``) added; the caller's writers close on the way out.
* **Ctrl-C.** Inside ``run`` the first SIGINT lets the batch being processed finish, then ``run``
  returns with ``interrupted`` set (``exit_code`` 130): the caller's writers close normally, so
  every finished item's output is kept and nothing is half-written (files go through
  ``zoo.files.write_atomic``). A second Ctrl-C raises KeyboardInterrupt at once.
* **Resume.** ``skip(item) -> bool`` runs before ``prepare``: a skipped image file is never
  decoded (video frames are, by the source's own iteration); skipped items are counted, not timed
  (``resume_keys(records)`` and ``item_key(item)`` match items to a JSONL file's results).
* **Progress.** A tqdm bar on stderr (items/s), off for a single item and where stderr is not a
  terminal; ``tqdm.write`` keeps printed lines above it.

A CLI adds the shared options with ``add_arguments(parser)`` (--recursive, --vid-stride, --batch,
--resume, --workers) and checks them with ``check_arguments(args)``.

Threads, not processes: forking a process after an MLX computation hangs the child, and the
decoding this overlaps (Pillow, PyAV, numpy) releases the GIL.
"""
from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tqdm import tqdm

from .errors import EXIT_INTERRUPTED, UsageError, ZooError
from .files import DiskRefused
from .sources import Item, Source

STALL_NOTE_S = 5.0  # seconds a live source may send nothing before the run says it is waiting for it


@dataclass
class Ready:
    """A prepared item: the source's ``item`` and what ``prepare`` returned for it."""

    item: Item
    data: Any


class Skipped:
    """Queue marker: an item ``skip`` said is done."""

    def __init__(self, item: Item):
        self.item = item


class SourceFailed:
    """Queue marker: the source itself raised while being read (carried to the calling thread)."""

    def __init__(self, error: BaseException):
        self.error = error


END = object()


def default_workers() -> int:
    """Decoding threads: two (one on a one-core machine); the model's own threads run beside them."""
    return min(2, os.cpu_count() or 1)


def load(item: Item) -> Any:
    return item.load()


class Pipeline:
    """One run over ``source``: ``run(process)`` calls ``process(batch)`` for each batch of prepared items.

    ``prepare(item)``: runs on the thread pool (default: ``item.load()``); must not use MLX.
    ``batch``: items per ``process`` call. ``workers``: decoding threads. ``ahead``: items read
    ahead at most. ``skip(item)``: True for an item done before (--resume). ``on_error(item,
    message)``: called in the calling thread for each bad item. ``single``: a bad item's ZooError
    is raised as the run's (default: when the source holds one item). ``desc``/``unit``: the bar's label.
    ``resume``: how the user continues an interrupted run, said in the line Ctrl-C prints (each task
    has its own way, or none: a wrong hint sends the user to an option their command does not have).
    """

    def __init__(self, source: Source | Iterable[Item], prepare: Callable[[Item], Any] = load, *,
                 batch: int = 1, workers: int | None = None, ahead: int | None = None,
                 skip: Callable[[Item], bool] | None = None,
                 on_error: Callable[[Item, str], None] | None = None, single: bool | None = None,
                 desc: str | None = None, unit: str = "image", progress: bool = True,
                 resume: str | None = None):
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ZooError(f"batch {batch!r}: use a whole number >= 1")
        self.source, self.prepare, self.batch = source, prepare, batch
        self.workers = workers or default_workers()
        # a live source's frames are taken as they are asked for (zoo.sources.NewestFrame): read ahead by one
        # batch, so that the model gets the frames made while it ran the last one, not older ones
        self.ahead = ahead or batch + (0 if getattr(source, "live", False) else 2 * self.workers)
        self.skip, self.on_error = skip, on_error
        if resume is not None and getattr(source, "live", False):
            resume = LIVE_NOT_RESUMED  # the task's way continues files, not a live source (check_resumable)
        self.desc, self.unit, self.progress, self.resume = desc, unit, progress, resume
        self.total = getattr(source, "total", None)
        if self.total is None and isinstance(source, (list, tuple)):
            self.total = len(source)
        self.single = self.total == 1 if single is None else single
        self.done = self.failed = self.skipped = 0
        self.interrupted = False
        self.seconds = 0.0
        self.bar: tqdm | None = None
        self._failed_now: set[int] = set()  # ids of the items of the current batch that failed

    # -- the caller's side --------------------------------------------------------------------

    def run(self, process: Callable[[list[Ready]], None]) -> Pipeline:
        """Prepare and process every item (or until Ctrl-C); returns self for the counts."""
        start = time.perf_counter()
        self.bar = tqdm(total=self.total, desc=self.desc, unit=self.unit, file=sys.stderr, dynamic_ncols=True,
                        # None: off where stderr is not a terminal (a log file gets the lines, not the bar)
                        disable=True if not self.progress or (self.total is not None and self.total < 2) else None)
        previous = self._catch_sigint()
        try:
            for batch in self._batches():
                self._failed_now.clear()
                try:
                    process(batch)
                except DiskRefused:
                    raise
                except ZooError as e:
                    for ready in batch:
                        self.fail(ready.item, str(e))
                ok = sum(id(ready.item) not in self._failed_now for ready in batch)
                self.done += ok
                self.bar.update(ok)
                if self.interrupted:
                    break
        except DiskRefused as e:  # every next output would fail alike (an error record too): the run ends here
            if self.single:
                raise
            after = f" after {self.done} {self.unit}{'s' * (self.done != 1)}" if self.done else ""
            resume = f" ({self.resume})" if self.resume else ""
            raise DiskRefused(f"{e}; the run stopped there{after}{resume}") from None
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            self.bar.close()
            self.seconds = time.perf_counter() - start
        if self.interrupted:
            tqdm.write(f"interrupted: stopped after {self.done + self.failed} item(s); every finished output is "
                       f"kept{f' ({self.resume})' if self.resume else ''}", file=sys.stderr)
        return self

    def fail(self, item: Item, message: str) -> None:
        """Report ``item`` as bad: one ``error:`` line naming it, ``on_error``, counted as failed."""
        if self.single:
            raise ZooError(message)  # the only item: its problem is the run's
        if id(item) in self._failed_now:
            return
        self._failed_now.add(id(item))
        line = message if item.path in message else f"{item.path}{'' if item.frame is None else f' frame {item.frame}'}: {message}"
        tqdm.write(f"error: {line}", file=sys.stderr)
        self.failed += 1
        if self.bar is not None:
            self.bar.update(1)
        if self.on_error is not None:
            self.on_error(item, message)

    def refuse_nothing_read(self) -> None:
        """After the run: one more line when every item failed (a video's failure is no image's)."""
        if self.done == 0 and self.failed and not self.skipped:
            raise ZooError(f"no input could be read ({self.failed} failed, each named above): pass image files Pillow "
                           "can open or videos FFmpeg can decode")

    @property
    def exit_code(self) -> int:
        return EXIT_INTERRUPTED if self.interrupted else 1 if self.failed else 0

    def summary(self, verb: str = "done") -> str:
        """One line: counts, time and rate, e.g. '998 images classified, 2 failed (see the error lines)'."""
        units = f"{self.unit}{'s' * (self.done != 1)}"
        parts = [f"{self.done} {units} {verb}"]
        if self.skipped:
            parts.append(f"{self.skipped} skipped (done before)")
        if self.failed:
            parts.append(f"{self.failed} failed (see the error lines)")
        if self.interrupted:
            parts.append("interrupted")
        rate = self.done / self.seconds if self.seconds > 0 else 0.0
        return f"{', '.join(parts)} in {self.seconds:.1f} s ({rate:.2f} {self.unit}s/s)"

    # -- the reading side ---------------------------------------------------------------------

    def _catch_sigint(self):
        """First Ctrl-C: finish the batch in hand, then stop; the second: KeyboardInterrupt as usual."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def stop(signum, frame):
            self.interrupted = True
            signal.signal(signal.SIGINT, signal.default_int_handler)
            tqdm.write("interrupted: finishing the current batch (Ctrl-C again to stop at once)", file=sys.stderr)

        return signal.signal(signal.SIGINT, stop)

    def _batches(self) -> Iterable[list[Ready]]:
        """Prepared items in order, ``batch`` at a time; bad ones reported and left out."""
        futures: queue.Queue = queue.Queue(maxsize=self.ahead)
        stopping = threading.Event()
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="zoo-prepare")

        def put(entry) -> bool:
            while not stopping.is_set():
                try:
                    futures.put(entry, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def feed():
            items = iter(self.source)
            try:
                for item in items:
                    if stopping.is_set():
                        return
                    if self.skip is not None and self.skip(item):
                        entry = Skipped(item)
                    else:
                        entry = pool.submit(self._prepare, item)
                    if not put(entry):
                        return
            except BaseException as e:  # carried to the calling thread, raised there
                put(SourceFailed(e))
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()  # a video's container is closed by its generator
                put(END)

        feeder = threading.Thread(target=feed, name="zoo-source", daemon=True)
        feeder.start()
        chunk: list[Ready] = []
        pending: list[tuple[Item, str]] = []  # bad items met while a batch was being gathered
        live = getattr(self.source, "live", False)
        waiting_since, noted = time.monotonic(), False
        try:
            while not self.interrupted:
                try:
                    entry = futures.get(timeout=0.1)
                except queue.Empty:
                    # a stream whose server stops sending keeps its connection open: say so once, not wait mutely
                    if live and not noted and time.monotonic() - waiting_since >= STALL_NOTE_S:
                        noted = True
                        tqdm.write(f"note: {getattr(self.source, 'path', 'the live source')}: the stream sent "
                                   f"nothing for {STALL_NOTE_S:g} s; still waiting (Ctrl-C stops; every finished "
                                   "output is kept)", file=sys.stderr)
                    continue
                waiting_since, noted = time.monotonic(), False
                if entry is END:
                    break
                if isinstance(entry, SourceFailed):
                    raise entry.error
                if isinstance(entry, Skipped):
                    self.skipped += 1
                    if self.bar.total is not None:
                        self.bar.total -= 1
                        self.bar.refresh()
                    continue
                while True:  # short waits, so Ctrl-C is seen while a slow item decodes
                    try:
                        item, data, error = entry.result(timeout=0.1)
                        break
                    except TimeoutError:
                        if self.interrupted:
                            return
                if error is not None:
                    if chunk:  # reported after the items before it, so records keep the source's order
                        pending.append((item, error))
                    else:
                        self.fail(item, error)
                    continue
                chunk.append(Ready(item, data))
                if len(chunk) == self.batch:
                    yield chunk
                    chunk = []
                    waiting_since = time.monotonic()  # the model's time is not the stream's silence
                    self._report(pending)
            if chunk and not self.interrupted:
                yield chunk
                self._report(pending)
        finally:
            stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            # a stalled stream's read never returns: Ctrl-C does not wait for it (a daemon thread, nothing to keep)
            feeder.join(timeout=0.5 if live and self.interrupted else 5)

    def _report(self, pending: list[tuple[Item, str]]) -> None:
        """The bad items held back while a batch was gathered, now that the batch is done."""
        for item, error in pending:
            self.fail(item, error)
        pending.clear()

    def _prepare(self, item: Item):
        try:
            return item, self.prepare(item), None
        except ZooError as e:
            return item, None, str(e)

def input_identity(path: str) -> str:
    """An input's identity across runs, however it was spelled: its resolved path (``imgs/a.jpg``,
    ``./imgs/a.jpg`` and ``$PWD/imgs/a.jpg`` are one file); a stream URL as it is."""
    return path if "://" in path else os.path.realpath(path)


# A live source (a camera, a stream URL that names no video file) starts again at the frame it is showing: its frames
# are numbered from 0 each run, so --resume would take the new run's first frames as the old run's (classify: skipped
# as done) or do the whole source again over the old run's records and files (detect: dropped and replaced)
LIVE_NOT_RESUMED = ("a camera or live stream is not resumed: its frames are new ones each run; run again into new "
                    "outputs")


def check_resumable(source: Source, resume: bool) -> None:
    """UsageError for --resume over a live source, before any work (why: LIVE_NOT_RESUMED's comment)."""
    if resume and getattr(source, "live", False):
        live = next(part.path for part in getattr(source, "sources", [source]) if part.live)
        raise UsageError(f"--resume cannot continue {live}: a camera's or live stream's frames are new ones each run, "
                         "not those the earlier run left off at (its results would be replaced, or new frames skipped "
                         "as done): run without --resume, into another --out or --jsonl")


def resume_keys(records: Iterable[dict]) -> set[tuple]:
    """The items a JSONL file holds a result for (error records excluded: those items are tried again),
    as ``item_key`` gives them; ``records`` may be a stream (zoo.sources.read_records): only the keys are kept."""
    return {(input_identity(r["path"]), r.get("frame")) for r in records if "error" not in r}


def item_key(item: Item) -> tuple:
    """An item's identity across runs: its resolved path and, for a video frame, the frame number."""
    return (input_identity(item.path), item.frame)


def without_errors(record: dict) -> bool:
    """For JsonlWriter(keep=...): an error record is dropped on --resume, as its item is tried again."""
    return "error" not in record


def add_arguments(parser, batch: str = "the results are the same",
                  resume: str = "skip the items whose outputs exist") -> None:
    """The options every pipelined CLI shares: --recursive, --vid-stride, --stream-buffer, --batch (``batch``:
    what batching does to the task's results), --resume, --workers."""
    parser.add_argument("--recursive", action="store_true", help="look for images and videos in sub-folders too")
    parser.add_argument("--vid-stride", type=int, default=1, metavar="N",
                        help="videos and cameras: keep every N-th frame (default 1)")
    parser.add_argument("--stream-buffer", action="store_true",
                        help="cameras and stream URLs: keep every frame, in order (default: the newest frame each "
                             "time the model is ready, as ultralytics; the frames skipped are counted at the end)")
    parser.add_argument("--batch", type=int, default=1, metavar="N",
                        help=f"images per forward pass (default 1; {batch})")
    parser.add_argument("--resume", action="store_true", help=f"continue an interrupted run: {resume}")
    parser.add_argument("--workers", type=int, metavar="N",
                        help=f"decoding threads beside the model (default {default_workers()})")


def check_arguments(args) -> None:
    """UsageErrors for the shared options' values, before anything is read."""
    for option in ("batch", "vid_stride", "workers"):
        value = getattr(args, option, None)
        if value is not None and value < 1:
            raise UsageError(f"--{option.replace('_', '-')} {value}: use a whole number >= 1")


def check_batch_memory(batch: int, total: int | None, size: tuple[int, int], bytes_per_pixel: int,
                       dtype: str) -> None:
    """UsageError, before anything is read, for a --batch whose forward cannot fit in the device's memory (its
    MEMORY_SHARE): ``batch`` model inputs of ``size`` (height, width) at ``bytes_per_pixel`` (the model's memory
    per input pixel in float32, measured on the smallest model of the family; half precision takes half), at most
    the source's ``total`` items. An estimate: larger models take more, the decoded images read ahead are not counted,
    and a letterboxed input may be smaller than ``size``."""
    from zoo.devices import MEMORY_SHARE, device_memory, parse_dtype

    item = size[0] * size[1] * bytes_per_pixel * parse_dtype(dtype).size // 4
    items = batch if total is None else min(batch, total)
    memory = device_memory()
    fits = max(1, int(MEMORY_SHARE * memory // item))
    if items > fits:
        each = f"{item / 1e6:,.0f}" if item >= 1e7 else f"{item / 1e6:.2g}"
        raise UsageError(f"--batch {batch} needs about {items * item / 1e9:.3g} GB of memory for {items} inputs of "
                         f"{size[1]}x{size[0]} pixels ({each} MB each), more than {MEMORY_SHARE:.0%} of the "
                         f"{memory / 1e9:.3g} GB here: use --batch {fits} or less")
