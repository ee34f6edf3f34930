"""Bombs and lies about sizes: each file claims far more memory than it holds and is refused with
one ZooError line, in a child process whose peak RSS stays under 1 GB (the file's own size, the
interpreter and its imports: nothing is allocated for what a header claims).

Fixtures are made on the fly: a 40000x40000 PNG is 190 KB of compressed 1-bit rows, a terabyte
is a number in a header.
"""
from __future__ import annotations

import io
import json
import pickle
import struct
import subprocess
import sys
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import PEAK_RSS_KB
from torch_writer import Call, Glob, Writer, module, tensor, write_torch_zip
from zoo.errors import ZooError
from zoo.images import image_size, load_image

TIB = 2**40
LIMIT_KB = 1 << 20  # 1 GB of peak RSS

# Reads one file in a fresh interpreter; prints the ZooError's message (or nothing) and the peak RSS in KB.
CHILD = PEAK_RSS_KB + r"""
import sys
from zoo.errors import ZooError
kind, path = sys.argv[1:]
try:
    if kind == "image":
        from zoo.images import load_image
        load_image(path)
    else:
        from zoo.weights.checkpoint import read_checkpoint
        read_checkpoint(path)
    message = ""
except ZooError as error:
    message = str(error)
print(message.replace("\n", "\\n"))
print(peak_rss_kb())
"""


def refused_in_child(kind: str, path: Path) -> str:
    """The one-line ZooError reading ``path`` gives, checked to peak under 1 GB of RSS."""
    done = subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    message, peak_kb = done.stdout.splitlines()
    assert message and "\\n" not in message, f"not refused: {message!r}"
    assert "MemoryError" not in message, message
    assert int(peak_kb) < LIMIT_KB, f"peak RSS {int(peak_kb) >> 10} MiB refusing {path.name}"
    return message


# --- images ---------------------------------------------------------------------------------------


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def black_png(width: int, height: int) -> bytes:
    """A real 1-bit PNG of ``width`` x ``height`` black pixels (rows compressed in blocks, never whole in memory)."""
    row = bytes(1 + (width + 7) // 8)  # filter byte, then the bits
    compressor, parts, block = zlib.compressobj(9), [], row * 1000
    for _ in range(height // 1000):
        parts.append(compressor.compress(block))
    parts += [compressor.compress(row * (height % 1000)), compressor.flush()]
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", b"".join(parts))
            + png_chunk(b"IEND", b""))


def forged_png(width: int, height: int) -> bytes:
    """A PNG whose header states ``width`` x ``height`` over one row of pixels."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(b"\0" * 4))
            + png_chunk(b"IEND", b""))


def test_a_40000x40000_png_is_refused_before_decoding(tmp_path):
    path = tmp_path / "bomb.png"
    path.write_bytes(black_png(40000, 40000))
    assert path.stat().st_size < 300_000
    message = refused_in_child("image", path)
    assert message.startswith(f"{path} is larger than the limit of 89,478,485 pixels"), message
    assert "ZOO_MAX_IMAGE_PIXELS" in message


def test_above_the_limit_is_refused_where_pillow_only_warns(tmp_path):
    """Pillow warns from its limit to twice it and refuses only beyond; here all of it is refused, one line, no warning."""
    path = tmp_path / "big.png"
    path.write_bytes(forged_png(10000, 10000))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for read in (load_image, image_size):
            with pytest.raises(ZooError) as error:
                read(path)
            assert str(error.value) == (
                f"{path} is 10000x10000 (100,000,000 pixels), above the limit of 89,478,485 pixels that guards "
                "against decompression bombs: set ZOO_MAX_IMAGE_PIXELS to a larger number (or none) if you trust the file")
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]


def test_the_pixel_limit_is_settable(tmp_path, monkeypatch):
    path = tmp_path / "small.png"
    Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # restored after the test
    monkeypatch.setenv("ZOO_MAX_IMAGE_PIXELS", "191")
    with pytest.raises(ZooError, match=r"is 16x12 \(192 pixels\), above the limit of 191 pixels"):
        load_image(path)
    monkeypatch.setenv("ZOO_MAX_IMAGE_PIXELS", "192")
    assert load_image(path).shape == (12, 16, 3)
    monkeypatch.setenv("ZOO_MAX_IMAGE_PIXELS", "none")
    big = tmp_path / "big.png"
    big.write_bytes(forged_png(10000, 10000))
    with pytest.raises(ZooError, match="the file is damaged or truncated"):  # decoded: its one row is short
        load_image(big)
    monkeypatch.setenv("ZOO_MAX_IMAGE_PIXELS", "lots")
    with pytest.raises(ZooError, match="ZOO_MAX_IMAGE_PIXELS='lots' is not a number of pixels"):
        load_image(path)


# --- safetensors ----------------------------------------------------------------------------------


def safetensors_bytes(header: dict, body: bytes, length: int | None = None) -> bytes:
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded) if length is None else length) + encoded + body


@pytest.mark.parametrize("lie", ["header length", "tensor", "overlapping tensors"])
def test_safetensors_claiming_a_terabyte(tmp_path, lie):
    one = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}
    data = {
        "header length": safetensors_bytes(one, bytes(16), length=TIB),
        "tensor": safetensors_bytes({"w": {"dtype": "F32", "shape": [TIB // 4], "data_offsets": [0, TIB]}}, bytes(16)),
        # 4096 names on the same 1 MiB: 4 GiB if each were read
        "overlapping tensors": safetensors_bytes(
            {f"w{i}": {"dtype": "U8", "shape": [2**20], "data_offsets": [0, 2**20]} for i in range(4096)},
            bytes(2**20)),
    }[lie]
    path = tmp_path / "lie.safetensors"
    path.write_bytes(data)
    message = refused_in_child("weights", path)
    assert message.startswith(f"{path}: not a valid .safetensors file (SafetensorError: "), message


# --- torch files ----------------------------------------------------------------------------------


def legacy_file(path: Path, count: int) -> Path:
    """A torch < 1.6 file: magic, protocol, sys_info, the main pickle, storage keys, then each
    storage as an 8-byte element count and its bytes -- here a count of ``count`` over 4 floats."""
    main = io.BytesIO()
    Writer(main).dump({"w": tensor([1, 2, 3, 4])})
    sys_info = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}
    parts = [pickle.dumps(0x1950A86A20F9469CFC6C, 2), pickle.dumps(1001, 2), pickle.dumps(sys_info, 2),
             main.getvalue(), pickle.dumps(["0"], 2), count.to_bytes(8, "little"),
             np.float32([1, 2, 3, 4]).tobytes()]
    path.write_bytes(b"".join(parts))
    return path


def test_legacy_file_is_read_as_written(tmp_path):
    """The forged layout below is the real one: with a true count it reads."""
    from zoo.weights.checkpoint import read_checkpoint

    np.testing.assert_array_equal(read_checkpoint(legacy_file(tmp_path / "ok.pt", 4))["w"], [1, 2, 3, 4])


def deflate_bomb(path: Path, nbytes: int) -> Path:
    """A torch zip whose one storage deflates from about nbytes / 230 to ``nbytes`` of zeros (deflate's
    fastest level: a third of the default's time, still twice the expansion the reader allows)."""
    pickled = io.BytesIO()
    writer = Writer(pickled)
    writer.dump({"w": Call(Glob("torch._utils", "_rebuild_tensor_v2"), (np.zeros(4, np.float32), 0, (4,), (1,), False, {}))})
    with zipfile.ZipFile(path, "w", compresslevel=1) as archive:
        archive.writestr("archive/data.pkl", pickled.getvalue())
        info = zipfile.ZipInfo("archive/data/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as record:
            zeros = bytes(1 << 20)
            for _ in range(nbytes >> 20):
                record.write(zeros)
    return path


class SharedStorages(Writer):
    """torch's layout for tensors that share a storage: one record, one key, many views."""

    def persistent_id(self, obj):
        if isinstance(obj, np.ndarray):
            for key, seen in enumerate(self.storages):
                if seen is obj:
                    return ("storage", Glob("torch", "FloatStorage"), str(key), "cpu", obj.size)
        return super().persistent_id(obj)


def shared_storage_zip(path: Path, obj) -> Path:
    pickled = io.BytesIO()
    writer = SharedStorages(pickled)
    writer.dump(obj)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled.getvalue())
        for key, array in enumerate(writer.storages):
            archive.writestr(f"archive/data/{key}", array.astype("<f4").tobytes())
    return path


def lying_pickle(path: Path, opcodes: bytes) -> Path:
    return write_torch_zip(path, data=b"\x80\x05" + opcodes + b".")


@pytest.mark.parametrize("lie, expected", [
    ("legacy storage count", "storage 0 claims 1099511627776 bytes; the file has 16 left"),
    ("bytes length", "cannot read this PyTorch file"),
    ("bytearray length", "pickle data was truncated"),
    ("frame length", "no weights found"),  # the frame is what the file holds
    ("stride 0", "more than 4x the 16 bytes of its storages"),
    ("many views", "more than 4x the 4194304 bytes of its storages"),
    ("range", "its pickle expands a range with tuple"),
    ("deflate bomb", "claims to expand"),
])
def test_torch_files_claiming_a_terabyte(tmp_path, lie, expected):
    path = tmp_path / "lie.pt"
    big = np.zeros(2**20, np.float32)  # a 4 MiB storage
    view = Glob("torch._utils", "_rebuild_tensor_v2")
    if lie == "legacy storage count":
        legacy_file(path, TIB // 4)
    elif lie == "bytes length":
        lying_pickle(path, pickle.BINBYTES8 + TIB.to_bytes(8, "little") + b"abc")
    elif lie == "bytearray length":
        lying_pickle(path, pickle.BYTEARRAY8 + TIB.to_bytes(8, "little") + b"abc")
    elif lie == "frame length":
        lying_pickle(path, pickle.FRAME + TIB.to_bytes(8, "little") + pickle.NONE)
    elif lie == "stride 0":  # 2**38 float32 elements, all the same 4 bytes
        write_torch_zip(path, {"w": Call(view, (np.zeros(4, np.float32), 0, (2**18, 2**20), (0, 0), False, {}))})
    elif lie == "many views":  # 300 full views of one 4 MiB storage: 1.2 GB of copies
        shared_storage_zip(path, {"model": module("m.Net", parameters={
            f"w{i}": Call(view, (big, 0, (2**20,), (1,), False, {})) for i in range(300)})})
    elif lie == "range":
        tuple_of_range = Call(Glob("builtins", "tuple"), (Call(Glob("builtins", "range"), (TIB,)),))
        write_torch_zip(path, {"w": tensor([1.0]), "steps": tuple_of_range})
    else:
        deflate_bomb(path, 1 << 30)  # 1 GiB of zeros in about 1 MB
    message = refused_in_child("weights", path)
    assert str(path) in message and expected in message, message


def test_a_stored_zip_entry_claiming_more_than_the_file(tmp_path):
    """The central directory says the stored storage is 4 GiB - 1: refused before reading."""
    path = write_torch_zip(tmp_path / "w.pt", {"w": tensor([1.0, 2.0])})
    data = bytearray(path.read_bytes())
    entry = data.rfind(b"PK\x01\x02", 0, data.rfind(b"archive/data/0"))
    data[entry + 20:entry + 28] = struct.pack("<II", 2**32 - 1, 2**32 - 1)  # compressed and real size
    path.write_bytes(bytes(data))
    message = refused_in_child("weights", path)
    assert "zip entry archive/data/0 claims 4294967295 bytes that a file of" in message, message


def h264(size: int, frames: int, container: str) -> bytes:
    """``frames`` black size x size H.264 frames in a ``container`` (bytes)."""
    import av

    data = io.BytesIO()
    with av.open(data, "w", format=container) as output:
        stream = output.add_stream("libx264", rate=10)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.zeros((size, size, 3), np.uint8), format="rgb24")
            frame.pts = i
            output.mux(stream.encode(frame))
        output.mux(stream.encode(None))
    return data.getvalue()


def test_videos_answer_to_the_image_pixel_limit(tmp_path, monkeypatch):
    """A video's frames are images: the same limit, from the header before any frame is decoded (a 295 KB
    10000x10000 MP4 took 3.6 GB to read), and for a stream whose frames grow midway, before that frame becomes
    an array; the frames before it stand."""
    from zoo.sources import open_source

    pytest.importorskip("av")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # restored after the test
    monkeypatch.setenv("ZOO_MAX_IMAGE_PIXELS", "1000")
    video = tmp_path / "big.mp4"
    video.write_bytes(h264(64, 2, "mp4"))
    with pytest.raises(ZooError, match=rf"^video {video} is 64x64 \(4,096 pixels\), above the limit of 1,000 pixels "
                                        "that guards against decompression bombs: set ZOO_MAX_IMAGE_PIXELS"):
        open_source(video)
    growing = tmp_path / "growing.ts"  # MPEG-TS streams concatenate: 16x16 frames, then 64x64 ones
    growing.write_bytes(h264(16, 3, "mpegts") + h264(64, 3, "mpegts"))
    loaded = []
    for item in open_source(growing):
        try:
            loaded.append(item.load().shape)
        except ZooError as e:
            loaded.append(str(e))
    assert loaded[:3] == [(16, 16, 3)] * 3 and len(loaded) == 4
    assert loaded[3].startswith(f"video {growing} frame 3 is 64x64 (4,096 pixels), above the limit of 1,000")
    monkeypatch.setenv("ZOO_MAX_IMAGE_PIXELS", "none")
    assert len(list(open_source(video))) == 2
