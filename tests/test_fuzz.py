"""Fuzzing (hypothesis) of everything that reads a user's bytes: torch files (zip and legacy
pickles), safetensors, images and LaMa masks, JSONL record files and JSON lists (predictions.json)
on --resume, temporary output names already taken, and the command lines of zoo.run and zoo.validate.

Every mutated or forged input is read or refused with one ZooError line: never another
exception, never a swallowed MemoryError, never more memory than the file justifies (traced
allocations, checkpoints), never over 2 s, and the file is never
modified. Time is CPU time (the machine may be shared; a wall-clock deadline would measure the
neighbours), and a watchdog ends the run with every thread's stack if a case hangs. Mutations: truncations, bit flips, overwritten, inserted and deleted bytes, and
interesting integers (0, -1, 2**31, 2**40 = 1 TiB, 2**63 ...) written over any field; forged
structures: zip central and local headers that lie about sizes, offsets and methods, pickle
opcode streams with globals on and off the allowlist, tensor geometries claiming terabytes,
safetensors headers with lying lengths, shapes, offsets and dtypes, PNG headers with any size.

ZOO_FUZZ_EXAMPLES sets the examples per test (default 25 here); docs/hardening.md has the long
run (10,000 per test) and its result.
"""
from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import io
import json
import math
import os
import pickle
import struct
import sys
import time
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from conftest import cli_inputs, file_tree
from torch_writer import Call, Glob, module, write_torch_zip
from zoo.errors import ZooError
from zoo.images import image_size, load_image
from zoo.weights.checkpoint import read_checkpoint_with_meta

EXAMPLES = int(os.environ.get("ZOO_FUZZ_EXAMPLES", "25"))
SECONDS_PER_CASE = 2.0
HANG_S = 60  # a case still running after this long is a hang: the watchdog ends the process
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
TORCHFILES = Path(__file__).parent / "fixtures" / "torchfiles"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@contextlib.contextmanager
def timed_case():
    """At most SECONDS_PER_CASE of CPU time; a hang ends the run with every thread's stack."""
    faulthandler.dump_traceback_later(HANG_S, exit=True, file=sys.__stderr__)
    start = time.process_time()
    try:
        yield
    finally:  # refusals are timed too
        faulthandler.cancel_dump_traceback_later()
        spent = time.process_time() - start
        assert spent <= SECONDS_PER_CASE, f"{spent:.2f} s of CPU time"


def refused_or_read(read, path: Path, data: bytes, allowance: int | None = None) -> None:
    """``read(path)`` on ``data`` succeeds or raises one ZooError line; the file is left as it was;
    with ``allowance``, the traced peak allocation stays under it."""
    path.write_bytes(data)
    before = hashlib.sha256(data).digest()
    if allowance is not None:
        tracemalloc.start()
    try:
        with timed_case():
            read(path)
    except ZooError as error:
        message = str(error)
        assert message and "\n" not in message, message
        assert "MemoryError" not in message, message  # an allocation too large to make, swallowed
    finally:
        if allowance is not None:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    if allowance is not None:
        assert peak <= allowance, f"{peak} bytes allocated reading {len(data)}"
    assert hashlib.sha256(path.read_bytes()).digest() == before


def checkpoint_allowance(data: bytes) -> int:
    """Memory a checkpoint's bytes can justify: its tensors (bfloat16 widened, a few shared) plus the reader's own."""
    return 16 * len(data) + (4 << 20)


# --- mutations ----------------------------------------------------------------------------------

LIES = (0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**38, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1)


def integers_of(width: int):
    """Values for a ``width``-byte field: the boundaries and lies above, or any."""
    top = 2 ** (8 * width)
    return st.one_of(st.sampled_from([v for v in LIES if v < top] + [top - 1]), st.integers(0, top - 1))


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(("flip", "truncate", "overwrite", "insert", "delete", "integer")))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=16))
            data[at:at + len(chunk)] = chunk
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 16))]
        else:
            width = draw(st.sampled_from((1, 2, 4, 8)))
            order = draw(st.sampled_from(("little", "big")))
            data[at:at + width] = draw(integers_of(width)).to_bytes(width, order)
    return bytes(data)


# --- torch files ----------------------------------------------------------------------------------


def deflated(data: bytes) -> bytes:
    """The same zip with every record deflated (torch stores them; a re-zipped file may not)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info))
    return out.getvalue()


ZIP_SEEDS = [(TORCHFILES / name).read_bytes() for name in ("state_dict_zip.pt", "nested_zip.pth", "lightning_like.ckpt")]
ZIP_SEEDS.append(deflated(ZIP_SEEDS[0]))
TORCH_SEEDS = [*ZIP_SEEDS, (TORCHFILES / "state_dict_legacy.pt").read_bytes()]


def read_torch(path: Path):
    return read_checkpoint_with_meta(path)


@FUZZ
@given(data=mutated(TORCH_SEEDS))
def test_mutated_torch_files(work, data):
    refused_or_read(read_torch, work / "mutated.pt", data, checkpoint_allowance(data))


# central directory (PK\1\2) and local header (PK\3\4) fields: (offset, width)
CENTRAL_FIELDS = {"method": (10, 2), "crc": (16, 4), "compressed": (20, 4), "size": (24, 4),
                  "name length": (28, 2), "extra length": (30, 2), "local offset": (42, 4)}
LOCAL_FIELDS = {"method": (8, 2), "compressed": (18, 4), "size": (22, 4), "name length": (26, 2),
                "extra length": (28, 2)}
METHODS = (0, 8, 12, 14, 93, 99, 65535)  # stored, deflate, bzip2, lzma, zstd, AES, junk


@st.composite
def lying_zips(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(ZIP_SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        central = draw(st.booleans())
        signature, fields = (b"PK\x01\x02", CENTRAL_FIELDS) if central else (b"PK\x03\x04", LOCAL_FIELDS)
        starts = [i for i in range(len(data) - 3) if data[i:i + 4] == signature]
        start = draw(st.sampled_from(starts))
        name = draw(st.sampled_from(sorted(fields)))
        offset, width = fields[name]
        value = draw(st.sampled_from(METHODS)) if name == "method" else draw(integers_of(width))
        data[start + offset:start + offset + width] = value.to_bytes(width, "little")
    return bytes(data)


@FUZZ
@given(data=lying_zips())
def test_zip_headers_that_lie(work, data):
    refused_or_read(read_torch, work / "lying.pt", data, checkpoint_allowance(data))


GLOBALS = [("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
           ("torch._tensor", "_rebuild_from_type_v2"), ("torch", "FloatStorage"), ("torch", "BFloat16Storage"),
           ("torch", "BoolStorage"), ("torch", "Size"), ("torch", "device"), ("collections", "OrderedDict"),
           ("collections", "defaultdict"), ("__builtin__", "set"), ("builtins", "range"), ("builtins", "tuple"),
           ("builtins", "frozenset"), ("builtins", "list"), ("builtins", "dict"), ("builtins", "str"),
           ("copyreg", "_reconstructor"), ("copyreg", "__newobj__"), ("_codecs", "encode"), ("numpy", "dtype"),
           ("numpy.core.multiarray", "scalar"), ("mypkg.nn", "Model"), ("torch.nn.modules.conv", "Conv2d"),
           # off the allowlist: refused, never run
           ("os", "system"), ("posix", "system"), ("subprocess", "Popen"), ("builtins", "eval"),
           ("builtins", "getattr"), ("__builtin__", "exec"), ("operator", "attrgetter"), ("io", "open"),
           ("importlib", "import_module"), ("numpy", "load"), ("torch", "load"), ("pickle", "loads")]
BARE_OPCODES = [op for op in (pickle.MARK, pickle.POP, pickle.POP_MARK, pickle.DUP, pickle.NONE, pickle.NEWTRUE,
                              pickle.NEWFALSE, pickle.EMPTY_DICT, pickle.EMPTY_LIST, pickle.EMPTY_TUPLE,
                              pickle.EMPTY_SET, pickle.TUPLE, pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3,
                              pickle.LIST, pickle.DICT, pickle.APPEND, pickle.APPENDS, pickle.SETITEM,
                              pickle.SETITEMS, pickle.ADDITEMS, pickle.FROZENSET, pickle.REDUCE, pickle.BUILD,
                              pickle.NEWOBJ, pickle.NEWOBJ_EX, pickle.STACK_GLOBAL, pickle.MEMOIZE, pickle.OBJ,
                              pickle.BINPERSID, pickle.NEXT_BUFFER, pickle.READONLY_BUFFER)]


def with_length(opcode: bytes, fmt: str, payload=st.binary(max_size=24)):
    """An opcode with a length prefix that tells the truth or lies (up to 2**64 - 1)."""
    width = struct.calcsize(fmt)
    return st.tuples(payload, st.one_of(st.none(), integers_of(width))).map(
        lambda p: opcode + (len(p[0]) if p[1] is None else p[1]).to_bytes(width, "little") + p[0])


OPCODES = st.one_of(
    st.sampled_from(BARE_OPCODES),
    st.sampled_from(GLOBALS).map(lambda g: pickle.GLOBAL + f"{g[0]}\n{g[1]}\n".encode()),
    st.sampled_from(GLOBALS).map(lambda g: b"".join(
        pickle.SHORT_BINUNICODE + bytes([len(s)]) + s.encode() for s in g) + pickle.STACK_GLOBAL),
    st.integers(-2**31, 2**31 - 1).map(lambda n: pickle.BININT + struct.pack("<i", n)),
    st.integers(0, 255).map(lambda n: pickle.BININT1 + bytes([n])),
    st.integers(0, 65535).map(lambda n: pickle.BININT2 + struct.pack("<H", n)),
    st.floats(allow_nan=True).map(lambda x: pickle.BINFLOAT + struct.pack(">d", x)),
    st.integers(0, 255).map(lambda n: pickle.BINPUT + bytes([n])),
    st.integers(0, 255).map(lambda n: pickle.BINGET + bytes([n])),
    st.integers(0, 2**32 - 1).map(lambda n: pickle.LONG_BINGET + struct.pack("<I", n)),
    st.integers(0, 255).map(lambda n: pickle.EXT1 + bytes([n])),
    st.sampled_from([2, 3, 4, 5, 6, 255]).map(lambda n: pickle.PROTO + bytes([n])),
    with_length(pickle.SHORT_BINUNICODE, "<B", st.text(max_size=12).map(str.encode)),
    with_length(pickle.BINUNICODE, "<I", st.text(max_size=12).map(str.encode)),
    with_length(pickle.BINUNICODE8, "<Q"),
    with_length(pickle.SHORT_BINBYTES, "<B"),
    with_length(pickle.BINBYTES, "<I"),
    with_length(pickle.BINBYTES8, "<Q"),
    with_length(pickle.BYTEARRAY8, "<Q"),
    with_length(pickle.FRAME, "<Q", st.just(b"")),
    with_length(pickle.LONG1, "<B"),
    with_length(pickle.LONG4, "<I"),
    st.sampled_from([b"I12\n", b"I01\n", b"L99999999999999999999L\n", b"L" + b"9" * 5000 + b"\n",
                     b"S'abc'\n", b"V\\u1234\n", b"Pstorage\n", b"F1e999\n", b"(I1\nI2\nl.", b"i__builtin__\nset\n"]),
)


@st.composite
def pickles(draw) -> bytes:
    body = b"".join(draw(st.lists(OPCODES, max_size=40)))
    return pickle.PROTO + b"\x02" + body + draw(st.sampled_from((pickle.STOP, b"")))


@FUZZ
@given(data=pickles(), zipped=st.booleans())
def test_pickle_opcode_streams(work, data, zipped):
    """Zipped: torch's data.pkl; raw: the first pickle of a legacy file."""
    path = work / "opcodes.pt"
    if zipped:
        data = write_torch_zip(path, data=data).read_bytes()
    refused_or_read(read_torch, path, data, checkpoint_allowance(data))


GEOMETRY = st.one_of(st.integers(0, 4), st.sampled_from((-1, 2**16, 2**20, 2**22, 2**31, 2**38, 2**40, 2**63, 2**64)))


@FUZZ
@given(elements=st.integers(0, 8), offset=st.one_of(st.just(0), GEOMETRY),
       dims=st.lists(st.tuples(GEOMETRY, st.one_of(st.just(0), GEOMETRY)), max_size=4), views=st.integers(1, 64))
def test_tensor_geometry_that_lies(work, elements, offset, dims, views):
    """Tensors claiming terabytes of a small storage (stride 0, huge sizes) or many views of one."""
    storage = np.arange(elements, dtype=np.float32)
    size, stride = (tuple(d[i] for d in dims) for i in (0, 1))
    weights = {f"w{i}": Call(Glob("torch._utils", "_rebuild_tensor_v2"),
                             (storage, offset, size, stride, False, {})) for i in range(views)}
    path = write_torch_zip(work / "geometry.pt", {"model": module("mypkg.Net", parameters=weights)})
    data = path.read_bytes()
    refused_or_read(read_torch, path, data, checkpoint_allowance(data))


# --- safetensors --------------------------------------------------------------------------------

ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "C64": 8}
DTYPES = st.one_of(st.sampled_from(sorted(ITEMSIZE)), st.sampled_from(["", "f32", "F128", "X"]), st.integers(), st.none())


@st.composite
def safetensors_files(draw) -> bytes:
    """A header that tells the truth, then (mostly) one lie: a dtype, a shape, an offset, the
    metadata or the header's own length."""
    header, body = {}, b""
    for i in range(draw(st.integers(0, 4))):
        dtype = draw(st.sampled_from(sorted(ITEMSIZE)))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        nbytes = math.prod(shape) * ITEMSIZE[dtype]
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + nbytes]}
        body += draw(st.binary(min_size=nbytes, max_size=nbytes))
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.sampled_from([{"format": "pt"}, {"n": 1}, [], None, "x", {"a": {"b": "c"}}]))
    lie = draw(st.sampled_from(("none", "dtype", "shape", "offsets", "length", "body", "name")))
    names = [n for n in header if n != "__metadata__"]
    if lie in ("dtype", "shape", "offsets") and names:
        entry = header[draw(st.sampled_from(names))]
        if lie == "dtype":
            entry["dtype"] = draw(DTYPES)
        elif lie == "shape":
            entry["shape"] = draw(st.lists(st.one_of(GEOMETRY, st.integers(-2**70, 2**70), st.just(1.5)), max_size=5))
        else:
            entry["data_offsets"] = draw(st.lists(st.one_of(GEOMETRY, st.integers(-5, 64)), max_size=3))
    elif lie == "name":
        header[draw(st.text(max_size=4))] = draw(st.sampled_from([{}, [], 1, {"dtype": "F32"}, None]))
    encoded = json.dumps(header).encode() + b" " * draw(st.integers(0, 8))  # the format pads with spaces
    length = draw(integers_of(8)) if lie == "length" else len(encoded)
    if lie == "body":
        body = body[:draw(st.integers(0, len(body)))] + draw(st.binary(max_size=8))
    return struct.pack("<Q", length) + encoded + body


def safetensors_seeds() -> list[bytes]:
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    return [save({"w": rng.standard_normal((3, 4)).astype(np.float32), "b": np.arange(5, dtype=np.int64),
                  "h": np.ones((2, 2), np.float16), "m": np.array([True, False])}, metadata={"format": "pt"})]


def read_safetensors(path: Path):
    return read_checkpoint_with_meta(path)


@FUZZ
@given(data=st.one_of(safetensors_files(), mutated(safetensors_seeds())))
def test_safetensors_files(work, data):
    refused_or_read(read_safetensors, work / "fuzz.safetensors", data, checkpoint_allowance(data))


# --- images and masks -----------------------------------------------------------------------------


def image_seeds() -> list[bytes]:
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
    seeds = []
    for image, kind, options in [(rgb, "PNG", {}), (rgb, "JPEG", {}), (rgb, "JPEG", {"progressive": True}),
                                 (rgb, "GIF", {}), (rgb, "BMP", {}), (rgb, "TIFF", {}), (rgb, "WEBP", {}),
                                 (rgb.convert("P"), "PNG", {}), (rgb.convert("RGBA"), "PNG", {}),
                                 (rgb.convert("L"), "TIFF", {"compression": "tiff_lzw"}),
                                 (Image.fromarray(rng.integers(0, 65536, (12, 16), dtype=np.uint16)), "PNG", {}),
                                 (rgb.convert("CMYK"), "JPEG", {}), (rgb, "ICO", {})]:
        buffer = io.BytesIO()
        image.save(buffer, kind, **options)
        seeds.append(buffer.getvalue())
    return seeds


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def forged_png(width: int, height: int, depth: int, colour: int, pixels: bytes) -> bytes:
    """A PNG whose header (with a valid checksum) states any size over whatever pixel data."""
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0))
            + png_chunk(b"IDAT", zlib.compress(pixels)) + png_chunk(b"IEND", b""))


SIDES = st.one_of(st.integers(0, 64), st.sampled_from((9459, 9460, 13000, 40000, 2**16, 2**31 - 1, 2**31, 2**32 - 1)))
FORGED = st.builds(forged_png, SIDES, SIDES, st.sampled_from((1, 2, 4, 8, 16, 3)),
                   st.sampled_from((0, 2, 3, 4, 6, 5)), st.binary(max_size=64))
IMAGES = st.one_of(mutated(image_seeds()), FORGED)


def read_image(path: Path):
    image_size(path)
    return load_image(path)


@FUZZ
@given(data=IMAGES)
def test_images(work, data):
    refused_or_read(read_image, work / "fuzz.png", data)


@FUZZ
@given(data=IMAGES)
def test_lama_masks(work, data):
    from zoo.models.lama import load_mask

    refused_or_read(lambda path: load_mask(path, (12, 16), threshold=128, dilate=1), work / "mask.png", data)


# --- record files and temporary names (issue 35) --------------------------------------------------

HEADER = {"mlx_zoo": 1, "task": "classify", "model": "resnet18"}


def record_seeds() -> list[bytes]:
    """Record files as the writer leaves them (the first record carries the header), and one of the layout
    before (the header a line of its own)."""
    header = json.dumps(HEADER).encode() + b"\n"
    tops = [{"path": f"imgs/{i}.jpg", "top": [{"index": i, "label": "cat", "probability": 0.5}]} for i in range(3)]
    records = [json.dumps(top).encode() + b"\n" for top in tops]
    headed = json.dumps({**tops[0], "mlx_zoo_run": HEADER}).encode() + b"\n"
    error = json.dumps({"path": "imgs/bad.jpg", "error": "cannot read imgs/bad.jpg"}).encode() + b"\n"
    return [headed + b"".join(records[1:]), headed + error + records[1], b"", headed + records[1][:20],
            header + b"".join(records)]


@FUZZ
@given(data=mutated(record_seeds()))
@example(data=json.dumps(HEADER, separators=(",", ":")).encode() + b"\n" + record_seeds()[0].split(b"\n", 1)[1])
def test_record_files(work, data):
    """--resume on a damaged record file (the writer's own checks: bit flips, torn lines, foreign
    headers, bytes that are not UTF-8): it continues -- the kept records, then the new one, once
    each, under the header -- or refuses in one ZooError line and leaves the file as it was; no
    temporary file is left either way."""
    from zoo.pipeline import without_errors
    from zoo.sources import JsonlWriter, read_records

    new = {"path": "new.jpg", "top": []}
    path, kept = resumed_or_refused(work / "records" / "r.jsonl", data, new, lambda path: JsonlWriter(
        path, resume=True, header=HEADER, keep=without_errors))
    if kept is not None:
        # the header as JSON, in the first record: a file kept as it was keeps its header's bytes (its spacing, say)
        assert json.loads(path.read_bytes().split(b"\n", 1)[0])["mlx_zoo_run"] == HEADER
        assert list(read_records(path, HEADER)) == [*kept, new]
    path.unlink()


def resumed_or_refused(path: Path, data: bytes, new: dict, writer):
    """``data`` at ``path`` continued by ``writer(path)`` with one ``new`` record: (path, the records it
    kept), or (path, None) when it refused in one ZooError line, the file as it was; no temporary file
    is left either way."""
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    kept = None
    try:
        with timed_case(), contextlib.redirect_stderr(io.StringIO()):
            with writer(path) as opened:
                kept = list(opened.kept_records())
                opened.write(new)
    except ZooError as error:
        assert str(error) and "\n" not in str(error), str(error)
        assert path.read_bytes() == data
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    return path, kept


def json_list_seeds() -> list[bytes]:
    records = [json.dumps({"image_id": i, "file_name": f"{i}.jpg", "category_id": 1, "bbox": [1.5, 2, 3, 4],
                           "score": 0.5}) for i in range(3)]
    unfinished = ("[\n  " + ",\n  ".join(records)).encode()
    return [unfinished, unfinished + b"\n]\n", unfinished[:-7], unfinished + b",", b"[", b"", b"[]\n",
            json.dumps(records).encode()]


@FUZZ
@given(data=mutated(json_list_seeds()))
def test_json_list_files(work, data):
    """--resume on a damaged predictions.json (what a killed run leaves -- no closing bracket, a torn
    last line -- then bit flips, inserted and deleted bytes): it continues -- the records read back,
    then the new one, a list json.loads reads -- or refuses in one ZooError line and leaves the file
    as it was; no temporary file is left either way."""
    from zoo.sources import JsonListWriter

    new = {"image_id": 9}
    path, kept = resumed_or_refused(work / "lists" / "predictions.json", data, new,
                                    lambda path: JsonListWriter(path, resume=True))
    if kept is not None:
        assert json.loads(path.read_bytes()) == [*kept, new]
    path.unlink()


@FUZZ
@given(taken=st.lists(st.sampled_from(["link", "dangling", "file", "folder", "fifo"]), max_size=6),
       fails=st.booleans(), exists=st.booleans())
def test_temporary_names_already_taken(work, taken, fails, exists):
    """Whatever lies at the temporary names drawn -- a link into an input, a dangling link, a user's
    file, a folder, a FIFO -- a write goes to a free name: the output is whole (or, failing, the old
    one is), and every other file is as it was."""
    from unittest import mock

    from zoo import files

    folder = work / "taken"
    folder.mkdir(exist_ok=True)
    for entry in folder.iterdir():
        entry.rmdir() if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    (folder / "input.png").write_bytes(b"an input")
    out = folder / "out.json"
    if exists:
        out.write_text("old")
    for i, kind in enumerate(taken):
        name = folder / f".out.json.t{i}.part"
        {"link": lambda: name.symlink_to(folder / "input.png"), "dangling": lambda: name.symlink_to(folder / "gone"),
         "file": lambda: name.write_text("a user's file"), "folder": name.mkdir, "fifo": lambda: os.mkfifo(name)}[kind]()
    before = entries(folder)
    draws = iter([f"t{i}" for i in range(len(taken))] + ["free"])

    def write(file):
        file.write(b"new")
        if fails:
            raise ZooError("the write failed")

    with mock.patch.object(files.secrets, "token_hex", lambda n: next(draws)), timed_case():
        try:
            files.write_atomic(out, write)
        except ZooError:
            assert fails
    after, old = entries(folder), before.pop("out.json", None)
    assert after.pop("out.json", None) == (old if fails else ("file", b"new"))
    assert after == before


def entries(folder: Path) -> dict[str, tuple]:
    """A folder's entries as they are, never opening a FIFO nor following a link."""
    def entry(path: Path) -> tuple:
        if path.is_symlink():
            return ("link", os.readlink(path))
        if path.is_dir():
            return ("folder",)
        return ("file", path.read_bytes()) if path.is_file() else ("fifo",)

    return {path.name: entry(path) for path in folder.iterdir()}


# --- command lines --------------------------------------------------------------------------------

WORDS = ["resnet18", "yolov8n", "yolov8", "mobilesam", "mobile_sam", "lama", "resnet19", "", "-", "--", "ok.jpg",
         "nope.jpg", "imgs", "mask.png", "ok.jpg/x", "/", "/sys", "--weights", "--device", "gpu", "cpu", "--dtype",
         "float16", "bfloat16", "float64", "--conf", "--iou", "--imgsz", "--top-k", "--json", "--out", "--point",
         "--box", "--mask", "--overwrite", "--exist-ok", "--hd-strategy", "crop", "resize", "original", "--ext",
         "--quality", "--max-det", "--classes", "--batch", "--save-txt", "--mode", "--inject", "--seed", "--show",
         "--report", "--coverage", "1,1", "5,5,10,10", "30,5,10,20", "1,2,3,4,5", "nan", "inf", "-1", "0", "1e9",
         "0.5", "x=y", "conv1=zero", "--jsonl", "--resume", "--csv", "bad.jsonl", "r.jsonl", "imgs/../imgs"]
TOKENS = st.one_of(st.sampled_from(WORDS), st.text(max_size=10), st.integers(-2**40, 2**40).map(str),
                   st.floats().map(str), st.lists(st.integers(-10, 100), min_size=1, max_size=5).map(
                       lambda xs: ",".join(map(str, xs))))


@contextlib.contextmanager
def working_directory(folder: Path):
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


@pytest.fixture(scope="module")
def cli_folder(tmp_path_factory) -> Path:
    folder = cli_inputs(tmp_path_factory.mktemp("cli"))
    (folder / "bad.jsonl").write_bytes(b"42\n\xff\xfe\n")  # a record file --resume must refuse in one line
    return folder


def one_error_line(main, argv: list[str], folder: Path) -> None:
    """``main(argv)`` ends with exit 1 or 2 and exactly one ``error:`` line, or prints help (exit 0);
    no traceback, no internal error, nothing written. The weights are an empty file, so no
    command line gets as far as running a model."""
    before = file_tree(folder)
    out, err = io.StringIO(), io.StringIO()
    with working_directory(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with timed_case():
                code = main([*argv, "--weights", "zero.pt"])
        except SystemExit as done:  # --help (or an abbreviation of it) prints and exits 0
            code = done.code
            assert code == 0 and "usage" in out.getvalue()
            return
    lines = err.getvalue().splitlines()
    assert code in (1, 2), (code, lines)
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], lines
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), lines
    assert file_tree(folder) == before


@FUZZ
@given(argv=st.lists(TOKENS, max_size=10).filter(lambda argv: "--debug" not in argv))
def test_zoo_run_command_lines(cli_folder, argv):
    from zoo.run import main

    one_error_line(main, argv, cli_folder)


@FUZZ
@given(argv=st.lists(TOKENS, max_size=10).filter(lambda argv: "--debug" not in argv and argv[:1] != ["ops"]))
def test_zoo_validate_command_lines(cli_folder, argv):
    from zoo.cli.validate import main

    one_error_line(main, argv, cli_folder)
