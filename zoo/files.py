"""Output files, for the models and the CLIs alike: checked before any work, written whole or not at all.

The guard every writer goes through: an output that is an input (image, mask, weights, list file,
by resolved path or hard link) is refused whatever the flags; an existing output is replaced only
with an explicit flag (``--overwrite`` / ``--exist-ok``, ``overwrite=True``); output folders are
created and proved writable before the model loads; default run folders increment as ultralytics'
(``runs/detect/predict``, ``predict2`` ...); files are written to a temporary file created
exclusively beside them (a random hidden name; never an existing file, never through a link) and
renamed; nothing is deleted that the run did not create.
"""
from __future__ import annotations

import errno
import fcntl
import io
import json
import math
import os
import re
import secrets
import stat
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from PIL import Image

from .errors import UsageError, ZooError, option


# the non-finite values json_text wrote as null, by the file they went to: a command line names them in one note
# at its end (note_nulled, from zoo.cli.guarded), not one a record
NULLED: Counter[str] = Counter()


# a lone surrogate: what Python makes of a file name's bytes that are not UTF-8 (os.fsdecode), which no UTF-8 text holds
SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(value, where: str | Path | None = None, **options) -> str:
    """``json.dumps(value, **options)`` that is always valid JSON: NaN and infinities, which json.dumps writes as
    ``NaN`` and ``Infinity`` (no JSON reader but Python's takes them: jq, browsers and pandas' strict readers
    refuse the file), are written as ``null`` and counted in NULLED under ``where``, the file the text goes to.
    Values without them (every record a model of sound weights makes) are dumped once, unchanged. With
    ``ensure_ascii=False`` the text is UTF-8 all the same: a lone surrogate is escaped (``\\udcff``) as
    ``ensure_ascii=True`` escapes it."""
    try:
        text = json.dumps(value, allow_nan=False, **options)
    except ValueError:  # a non-finite float somewhere (or a circular reference, which the second call raises)
        nulled = []
        text = json.dumps(finite_or_none(value, nulled), allow_nan=False, **options)
        if where is not None:
            NULLED[str(where)] += len(nulled)
    if not options.get("ensure_ascii", True):
        text = SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    return text


def finite_or_none(value, nulled: list):
    """``value`` with each non-finite float in its dicts, lists and tuples made None (and appended to ``nulled``)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        nulled.append(value)
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item, nulled) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item, nulled) for item in value]
    return value


def note_nulled() -> None:
    """One ``note:`` line naming the values json_text wrote as null into files since the last call (a command
    line's run) and where; then NULLED is empty again."""
    if not NULLED:
        return
    files = [f"{count} in {path}" for path, count in NULLED.items()]
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more files" if len(files) > 3 else "")
    print(f"note: {sum(NULLED.values())} NaN or infinite value(s) written as null (JSON has no NaN; a float16 "
          f"overflow or broken weights make them): {shown}", file=sys.stderr)
    NULLED.clear()


def create_exclusive(path: Path, mode: int = 0o666) -> int:
    """Open a new file at ``path`` for writing: O_EXCL (never an existing file, whatever it is) and
    O_NOFOLLOW (never through a link); FileExistsError when the name is taken."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, mode)


def create_temporary(path: Path) -> tuple[int, Path]:
    """A new file beside ``path`` (the rename stays on one file system) under a hidden name of its own
    (a random part: two runs, or a user's file of that name, never meet), created exclusively."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name[:120]}.{secrets.token_hex(6)}.part")
        try:
            return create_exclusive(tmp), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


def file_identity(fd_or_path: int | Path) -> tuple[int, int] | None:
    """(device, inode) of an open file or of a name itself (a link is not followed); None when gone."""
    try:
        st = os.fstat(fd_or_path) if isinstance(fd_or_path, int) else os.lstat(fd_or_path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class WrittenFiles:
    """Files this process wrote, each as it left them, which it may later write over: one replaced, changed or
    removed since by anything else (another path, inode, size or time) is no longer one of them."""

    def __init__(self):
        self.stamps: dict[Path, tuple[int, int, int, int]] = {}

    @staticmethod
    def stamp(path: Path) -> tuple[int, int, int, int] | None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def record(self, path: str | Path) -> None:
        """``path`` as it is now is this process's (nothing when there is no file: a save_txt without boxes)."""
        stamp = self.stamp(Path(path))
        if stamp is not None:
            self.stamps[Path(os.path.abspath(path))] = stamp

    def __contains__(self, path: str | Path) -> bool:
        stamp = self.stamp(Path(path))
        return stamp is not None and self.stamps.get(Path(os.path.abspath(path))) == stamp


def remove_own(path: Path, identity: tuple[int, int] | None) -> None:
    """Delete ``path`` only while it is still the file this process created (``identity``): a name
    that another program has taken over since is left alone."""
    if identity is not None and file_identity(path) == identity:
        try:
            os.unlink(path)
        except OSError:
            pass  # gone already


def is_special(path: Path) -> bool:
    """Whether ``path`` is, or links to, something other than a file or a folder: a device, a FIFO, a
    socket (``/dev/stdout``, ``/dev/null``, a named pipe), which an output must never replace."""
    try:
        mode = os.stat(path).st_mode  # links followed: /dev/stdout is a link to the process's pipe
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def not_a_file(path: Path, what: str = "output") -> UsageError:
    return UsageError(f"{what} {path} is not a regular file (a device, pipe or socket, such as /dev/stdout): "
                      "results are written to files only; pass a file path")


def place(tmp: Path, path: Path, replace: bool) -> None:
    """Rename ``tmp`` to ``path``; with ``replace`` False never over an existing ``path`` (a hard link
    fails on a taken name: FileExistsError), so a file that appeared since the checks is kept; with
    ``replace`` never over a device, pipe or socket (renaming over /dev/stdout replaces it for everyone)."""
    if replace:
        if is_special(path):
            raise not_a_file(path)
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:  # no hard links on this file system (FAT, some network shares): check, then rename
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "exists", str(path)) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def name_max(folder: Path) -> int:
    """The most bytes a file name may have in ``folder`` (or its nearest existing parent): 255 on most file systems."""
    for place in (folder, *folder.parents):
        try:
            return os.pathconf(place, "PC_NAME_MAX")
        except (OSError, ValueError):
            continue
    return 255


def name_too_long(path: Path) -> str | None:
    """``'PATH is a name of N bytes, more than this file system takes (255)'`` (PATH's name shortened) when ``path``'s
    name is longer than its folder's file system takes, else None: writing it was 'File name too long', an internal
    error (an output named after an input of 251 bytes with ``_2`` or a frame number added, say)."""
    size, limit = len(os.fsencode(path.name)), name_max(path.parent)
    if size <= limit:
        return None
    return (f"{path.parent / (path.name[:20] + '...' + path.name[-20:])} is a name of {size} bytes, more than this "
            f"file system takes ({limit})")


class DiskRefused(ZooError):
    """A write the disk refused whatever the file (full, over its quota, read-only), or one of a run's record file:
    zoo.pipeline ends the run at it, where another failed write fails one item and the run goes on (each item after
    it would fail alike, after its model work)."""


# the disk's refusals of any write on it: (the problem, what to do); a file too large (EFBIG) is the one file's
DISK_REFUSALS = {
    errno.ENOSPC: ("its disk is full", "free space there, or write to another disk"),
    errno.EDQUOT: ("the disk quota there is used up", "free space in it, or write to another disk"),
    errno.EROFS: ("its file system is read-only (mounted so, or remounted after disk errors)",
                  "write to another disk"),
}
WRITE_REFUSALS = {
    errno.EFBIG: ("it would pass the largest file allowed there", "raise the file size limit (ulimit -f), or write "
                  "to a file system that takes larger files"),
    errno.EACCES: ("permission denied", "make its folder writable, or write to another folder"),
    errno.EPERM: ("not permitted", "make its folder writable, or write to another folder"),
}


def cannot_write(path: Path, error: OSError, ends_run: bool = False) -> ZooError:
    """One line for a failed write of ``path``: the problem and what to do. A disk that takes no more (DISK_REFUSALS),
    or any failure of a file whose loss ``ends_run`` (a run's record file), is a DiskRefused."""
    if error.errno == errno.ENAMETOOLONG:
        return ZooError(f"cannot write {path}: its name is longer than this file system takes: pass a shorter one")
    if isinstance(error, FileExistsError):
        return ZooError(f"cannot write {path}: it appeared while this run was writing it (another run?): "
                        f"pass another path, or {option('overwrite')} to replace it")
    known = DISK_REFUSALS.get(error.errno) or WRITE_REFUSALS.get(error.errno)
    message = (f"cannot write {path}: {known[0]} ({error.strerror}): {known[1]}" if known else
               f"cannot write {path}: {error.strerror or error}; check the folder exists and is writable")
    return (DiskRefused if ends_run or error.errno in DISK_REFUSALS else ZooError)(message)


class ClosedOnExit:
    """A writer as a context manager: ``close()`` when the block ends, ``abort()`` when an exception leaves it."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, trace):
        if kind is None:
            self.close()
        else:
            self.abort()


class OutputFile(ClosedOnExit):
    """One output written whole: an exclusively created temporary file beside ``path`` (create_temporary),
    renamed into place by ``close()`` after its bytes reach the disk; ``abort()`` (or leaving the
    ``with`` block by an exception) removes it, and only it. ``replace`` False: an existing ``path`` is
    never replaced, even one that appeared after the run's checks. ``file`` is binary, or text
    (UTF-8) with ``text=True``. OSErrors are one-line ZooErrors naming ``path``."""

    def __init__(self, path: str | Path, replace: bool = True, text: bool = False, newline: str | None = None):
        self.path, self.replace = Path(path), replace
        try:
            fd, self.tmp = create_temporary(self.path)
        except OSError as e:
            raise cannot_write(self.path, e) from None
        self.identity = file_identity(fd)
        # a file name that is not UTF-8 (an old archive's Latin-1 caf\xe9.png) is written as its bytes on disk, as
        # Python reads it (surrogateescape): strict UTF-8 ended a --csv run in an internal error
        self.file = (os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline=newline) if text
                     else os.fdopen(fd, "wb"))

    def close(self) -> Path:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            place(self.tmp, self.path, self.replace)
        except OSError as e:
            raise cannot_write(self.path, e) from None
        finally:
            self.abort()
        return self.path

    def abort(self) -> None:
        """Close and remove the temporary file (a no-op once closed)."""
        try:
            self.file.close()
        except (OSError, ValueError):
            pass  # its bytes are dropped with it
        remove_own(self.tmp, self.identity)


def close_all(closes: Iterable[Callable[[], object]], error: BaseException | None = None) -> None:
    """Call every one of ``closes`` (a run's writers), also after one raised; then raise the first one's error, unless
    ``error`` (what ended the run) is on its way already: once a disk is full each close fails again, and the first
    failure is the one that says what happened (a ``finally`` raises the last)."""
    first = None
    for close in closes:
        try:
            close()
        except Exception as e:
            first = first or e
    if first is not None and error is None:
        raise first


@contextmanager
def closing_all(*closes: Callable[[], object]):
    """The block, then close_all(closes): the block's own error, else the first close's, is the one raised."""
    try:
        yield
    except BaseException as error:
        close_all(closes, error)
        raise
    close_all(closes)


class WithoutDescriptor:
    """A file that hides its descriptor (``fileno``) from the code writing it: Pillow's encoders (JPEG's) write
    to a file's descriptor themselves when it has one, and miss a short write there (a disk filling up: a
    truncated image was renamed into place as whole). Through the file's own ``write`` a short write is
    retried and the disk's refusal raised."""

    def __init__(self, file: BinaryIO):
        self.file = file

    def __getattr__(self, name: str):
        if name == "fileno":
            raise io.UnsupportedOperation("fileno")
        return getattr(self.file, name)


def write_atomic(path: str | Path, write: Callable[[BinaryIO], object], replace: bool = True) -> Path:
    """``write(file)`` into an OutputFile, then rename it to ``path``: a failure or an interrupted run
    never leaves half a file under the real name, nor the temporary file; an OSError becomes a
    one-line ZooError naming ``path``. ``replace`` False: never over an existing file."""
    with OutputFile(path, replace) as out:
        try:
            write(WithoutDescriptor(out.file))
        except OSError as e:  # a full disk, a lost network share
            raise cannot_write(out.path, e) from None
    return Path(path)


def write_text(path: str | Path, text: str, replace: bool = True) -> Path:
    """``text`` as UTF-8, written whole (write_atomic)."""
    return write_atomic(path, lambda file: file.write(text.encode("utf-8")), replace)


def save_png(image: Image.Image, path: str | Path, replace: bool = True) -> Path:
    """A PIL image written whole (write_atomic) as PNG."""
    return write_atomic(path, lambda file: image.save(file, format="PNG"), replace)


def save_mask(mask, path: str | Path, replace: bool = True) -> Path:
    """An (H, W) bool mask as a PNG, white = inside, written whole."""
    return save_png(Image.fromarray(mask.astype("uint8") * 255), path, replace)


def _resolved(path: str | Path) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare as written
        return Path(os.path.abspath(path))


def _input_suffixes() -> tuple[str, ...]:
    from .sources import IMAGE_SUFFIXES, LIST_SUFFIXES, VIDEO_SUFFIXES  # sources imports this module

    return IMAGE_SUFFIXES + VIDEO_SUFFIXES + LIST_SUFFIXES


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino) if path.is_file() else None


class Inputs:
    """A run's inputs on disk, indexed once (by resolved path, by inode for hard links, and the
    folders), so that checking every output of a run of many files stays linear. ``outputs``: the run's
    output folders, which a walk of an input folder leaves out (zoo.sources.open_source's ``outputs``):
    their files are the run's own, no inputs, so a resume may replace them there."""

    def __init__(self, given: Iterable, outputs: Iterable[str | Path] = ()):
        self.outputs = {_resolved(Path(folder)) for folder in outputs}
        self.files: dict[Path, Path] = {}
        self.inodes: dict[tuple[int, int], Path] = {}
        self.folders: dict[Path, Path] = {}
        for item in given:
            if item is None or not isinstance(item, (str, os.PathLike)):
                continue  # arrays, PIL images, camera numbers: nothing on disk to protect
            item = Path(item)
            (self.folders if item.is_dir() else self.files).setdefault(_resolved(item), item)
            inode = _inode(item)
            if inode is not None:
                self.inodes.setdefault(inode, item)

    def refuse(self, path: str | Path, what: str) -> Path:
        path = Path(path)
        resolved = _resolved(path)
        folder = self.folders.get(resolved)
        if folder is not None:
            raise UsageError(f"{what} {path} is the input folder {folder}: pass another output path")
        given = self.files.get(resolved) or self.inodes.get(_inode(path) or (-1, -1))
        if given is not None:
            raise UsageError(f"{what} {path} is the input file {given}: pass another output path")
        if self.folders and os.path.isfile(path) and path.suffix.lower() in _input_suffixes():  # a too long name: False
            folder = next((self.folders[p] for p in resolved.parents if p in self.folders), None)
            if folder is not None and not self.outputs.intersection(resolved.parents):
                raise UsageError(f"{what} {path} is a file of the input folder {folder}: pass an output path "
                                 "outside it")
        return path


def refuse_inputs(path: str | Path, inputs: Iterable | Inputs, what: str) -> Path:
    """UsageError when writing ``path`` could touch an input: it is one (same resolved path or a hard
    link of it: image, mask, weights, list file), it is an input folder, or it is an existing image,
    video or list file inside an input folder. No flag lifts this: inputs are never replaced.
    Pass an ``Inputs`` to check many outputs against one set of inputs."""
    return (inputs if isinstance(inputs, Inputs) else Inputs(inputs)).refuse(path, what)


def refuse_empty(value, what: str, fix: str) -> None:
    """ZooError for a path argument of the Python API given as '' (an unset variable?): Path('') is the current
    folder, and ultralytics takes '' as the default, both without a word; as the CLI's empty arguments (E55)."""
    if isinstance(value, str) and not value:
        raise ZooError(f"{what}='' is empty (an unset variable?): {fix}")


def check_distinct(outputs: dict[str, str | Path]) -> None:
    """UsageError when two of a run's outputs (``{"--jsonl": path, ...}``) are one path, however
    spelled: the second would replace the first, or a file would be written into its own folder."""
    seen: dict[Path, str] = {}
    for what, path in outputs.items():
        other = seen.setdefault(_resolved(path), what)
        if other != what:
            raise UsageError(f"{what} {path} is also the {other} path: pass another path")


def check_new_file(path: str | Path, what: str, overwrite: bool, flag: str | None = None) -> Path:
    """ZooError when ``path`` exists and ``overwrite`` was not asked for (``flag`` names how to ask; default
    ``--overwrite`` / ``overwrite=True``, as the caller's interface says it)."""
    path = Path(path)
    if (too_long := name_too_long(path)) is not None:
        raise UsageError(f"{what} {too_long}: pass a shorter name")
    if path.is_dir():
        raise UsageError(f"{what} {path} is a folder: pass a file path")
    if is_special(path):
        raise not_a_file(path, what)
    if path.exists() and not overwrite:
        raise UsageError(f"{what} {path} exists: pass {flag or option('overwrite')} to replace it, or another path")
    return path


def check_output_file(path: str | Path, what: str, inputs: Iterable = (), overwrite: bool = False,
                      flag: str | None = None) -> Path:
    """Fail now, before any work, when ``path`` cannot become a new file: it is an input or a folder,
    it exists (without ``overwrite``), or its folder cannot be created or written."""
    path = refuse_inputs(path, inputs, what)
    check_new_file(path, what, overwrite, flag)
    make_output_folder(path.parent, f"{what} {path}: its folder")
    return path


def check_output_folder(path: str | Path, what: str, inputs: Iterable = ()) -> Path:
    """Fail now, before any work, when ``path`` cannot be an output folder: it is an input, or it
    exists and is not a folder (it is created by make_output_folder)."""
    path = refuse_inputs(path, inputs, what)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} exists and is not a folder: pass a folder")
    return path


# flock's answers where a file system keeps no locks (NFS without its lock daemon, some FUSE file systems and
# shares), or none on a folder: NFS emulates flock by byte-range locks, whose exclusive kind needs a descriptor
# open for writing, which a folder's never is (flock(2): EBADF; our descriptors are open, so EBADF says only this)
NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EBADF}
_unlocked_devices: set[int] = set()  # file systems whose missing locks were said (one note each)


def lock_exclusive(fd: int, path: str | Path) -> bool:
    """An exclusive ``flock`` on an open file or folder (``path``, named in a note), without waiting: False when
    another open file (another run) holds it. The lock goes when the descriptor is closed, or its process ends,
    killed or not. On a file system without locks the run goes on unlocked, said in one note: refusing would
    make such a folder unusable, and only a second run at the same time needs the lock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno not in NO_LOCKS:
            raise
        device = os.fstat(fd).st_dev
        if device not in _unlocked_devices:
            _unlocked_devices.add(device)
            print(f"note: {path}: its file system does not lock files ({e.strerror}): a second run writing the same "
                  "outputs at the same time would not be stopped", file=sys.stderr)
    return True


def lock_holder(fd: int, shared: bool = False) -> str:
    """`` (pid N)`` of the process holding a flock on ``fd``'s file (``shared``: a shared one only), where the
    system says (Linux's /proc/locks; a pid outside this process's namespace reads 0); else nothing."""
    st = os.fstat(fd)
    target = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as locks:
            for line in locks:
                fields = line.split()  # 1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF (shared: READ)
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == target and fields[4] not in ("0", "-1") \
                        and (fields[3] == "READ" or not shared):
                    return f" (pid {fields[4]})"
    except OSError:
        pass  # no /proc (macOS): the message goes without the pid
    return ""


def being_written(path: Path, fd: int, fix: str = "pass another path") -> ZooError:
    """The file or folder at ``path`` (open as ``fd``) is locked by another run: one line naming it. A folder only
    a shared lock holds is around another run's output folder (lock_ancestors), said so."""
    around = lock_holder(fd, shared=True)
    if around:
        return ZooError(f"{path} holds the output folder of another run{around} inside it: wait for it to end, "
                        f"or {fix}")
    return ZooError(f"{path} is being written by another run{lock_holder(fd)}: wait for it to end, or {fix}")


# output folders this process holds locked, by (device, inode): a second run into one stops before any work
_locked_folders: dict[tuple[int, int], int] = {}
# the folders above them, held by shared locks: a run into one of them (exclusive) stops, runs beside go on
_shared_folders: dict[tuple[int, int], int] = {}


def open_folder(path: Path) -> int:
    return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))


def lock_output_folder(path: str | Path, what: str, inputs: Iterable = ()) -> Path:
    """Check ``path`` (check_output_folder: never one of ``inputs``), create it (make_output_folder) and lock
    it for this run, before its files are checked: a second run into the same folder (or the
    same folder under another name), into a folder inside it, or into a folder around it, stops in one line,
    before any work, whatever its flags (--resume, --overwrite): nested runs would replace or take as their own
    each other's files. The lock is an exclusive ``flock`` on the folder's own descriptor, so no file is added to
    the folder, and a shared one on each folder above it (lock_ancestors); they are released by
    release_output_folders() (the CLIs' entry point calls it) or when the process ends, killed or not. Locking
    a folder this process holds already is a no-op."""
    path = make_output_folder(check_output_folder(path, what, inputs), what)
    try:
        fd = open_folder(path)
    except OSError as e:
        raise ZooError(f"{what} {path} cannot be opened ({e.strerror or e}): pass a folder you can write") from None
    identity = file_identity(fd)
    if identity in _locked_folders:
        os.close(fd)
        return path
    if identity in _shared_folders:  # a folder above an earlier output folder of this run: its lock made exclusive
        os.close(fd)
        fd = _shared_folders.pop(identity)
    if not lock_exclusive(fd, path):
        error = being_written(path, fd, f"pass another {what}")
        os.close(fd)
        raise error
    _locked_folders[identity] = fd
    lock_ancestors(path, what)
    return path


def lock_ancestors(path: Path, what: str) -> None:
    """A shared ``flock`` on each folder above ``path`` (resolved, up to the root, across mount points: a folder
    on another file system is still around it), without waiting: it conflicts only with another run's exclusive
    lock of that folder as its output folder. A folder that cannot be opened (no read permission), or whose file
    system keeps no locks, is passed over: it never fails a run (the nesting it would show goes unseen)."""
    try:
        ancestors = path.resolve().parents
    except (OSError, RuntimeError):
        return  # a symlink loop above the folder: nothing to lock by
    for ancestor in ancestors:
        try:
            fd = open_folder(ancestor)
        except OSError:
            continue
        identity = file_identity(fd)
        if identity in _locked_folders or identity in _shared_folders:
            os.close(fd)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            error = ZooError(f"{what} {path} is inside {ancestor}, which is being written by another run"
                             f"{lock_holder(fd)}: wait for it to end, or pass another {what} outside it")
            os.close(fd)
            raise error from None
        except OSError:
            os.close(fd)  # no locks there (NO_LOCKS) or none on folders: passed over
            continue
        _shared_folders[identity] = fd


def release_output_folders() -> None:
    """Unlock the output folders this process locked, and the folders above them (the run is over)."""
    for held in (_locked_folders, _shared_folders):
        while held:
            os.close(held.popitem()[1])


# folders this process created for its outputs; a run that fails removes those left empty
_created_folders: list[Path] = []


def make_output_folder(path: str | Path, what: str) -> Path:
    """Create ``path`` (and its parents) and prove it writable by writing a probe file there: an
    unwritable output is found before the model loads, not after the work. One-line ZooError."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ZooError(f"{what} {path} cannot be created: {blocking} is a file: pass a folder path")
    broken = next((p for p in missing if p.is_symlink()), None)
    if broken is not None:  # mkdir said 'File exists' of it
        raise ZooError(f"{what} {path} cannot be created: {broken} {broken_link(broken)}, or pass another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ZooError(f"{what} {path} cannot be created ({e.strerror or e}): pass a folder you can write") from None
    _created_folders.extend(reversed(missing))
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".zoo-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ZooError(f"{what} {path} is not writable ({e.strerror or e}): pass a folder you can write") from None
    return path


def broken_link(path: Path) -> str:
    """What a link that leads nowhere is, and the fix: a link to a missing path, or one in a loop of links."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a link in a loop of links: remove or change the link"
    return f"is a link to a missing path ({os.readlink(path)}): create the folder it points to"


def remove_created_folders(path: str | Path | None = None) -> None:
    """Remove the output folders this process created and left empty: all of them (a failed run: nothing
    written), or ``path`` and those created above it (a run folder whose one output was dropped)."""
    chain = None if path is None else {Path(path), *Path(path).parents}
    for folder in reversed(list(_created_folders)):  # deepest first
        if chain is None or folder in chain:
            _created_folders.remove(folder)
            try:
                folder.rmdir()
            except OSError:
                pass  # not empty (or gone): keep it


def increment_path(path: str | Path, exist_ok: bool = False) -> Path:
    """ultralytics' run folders: ``path`` if free (or ``exist_ok``), else path2, path3 ... the first free one."""
    path = Path(path)
    if exist_ok or not path.exists():
        return path
    n = 2
    while path.with_name(f"{path.name}{n}").exists():
        n += 1
    return path.with_name(f"{path.name}{n}")


def writable_format(path: str | Path) -> str | None:
    """Pillow's format name that writes ``path``, from its suffix; None when Pillow cannot write it."""
    fmt = Image.registered_extensions().get(Path(path).suffix.lower())
    return fmt if fmt in Image.SAVE else None  # some formats Pillow only reads (.psd)


def image_format(path: str | Path, what: str | None = None) -> str:
    """writable_format, or a ZooError that names ``what`` (default: the path)."""
    path = Path(path)
    fmt = writable_format(path)
    if fmt is None:
        known = Image.registered_extensions().get(path.suffix.lower())
        problem = f"Pillow only reads {known}" if known else "unknown image suffix" if path.suffix else "no image suffix"
        raise ZooError(f"{what or path}: {problem}: cannot write {path.suffix or 'a file without suffix'}; use .png")
    return fmt
