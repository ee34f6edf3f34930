"""One entry point for weight files: ``.safetensors``, or PyTorch ``.pt/.pth/.ckpt/.bin`` read without torch.

Arrays keep the file's dtype, except bfloat16, which numpy lacks: it comes back as
float32 (exact).
"""
from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open

from zoo.errors import ZooError

from .torchfile import (EMA_KEYS, StubObject, TensorHeader, bfloat16_to_float32, load_torch_file, module_attribute,
                        root_module, state_dict_from, tensor_header)

# .pth.tar: timm's train.py (model_best.pth.tar); .torchscript: torch.jit.save's, as `yolo export` names it
_TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pth.tar", ".torchscript")
# how the files and folders of graphs for other runtimes end (ultralytics' `yolo export format=...`), and their
# formats; a .torchscript is read (its tensors are the model's)
EXPORT_ENDINGS = {".onnx": "ONNX", ".engine": "TensorRT", ".mlpackage": "CoreML", ".mlmodel": "CoreML",
                  ".tflite": "TensorFlow Lite", ".pb": "TensorFlow GraphDef", ".mnn": "MNN", ".rknn": "RKNN",
                  "_openvino_model": "OpenVINO", "_saved_model": "TensorFlow SavedModel", "_web_model": "TensorFlow.js",
                  "_paddle_model": "PaddlePaddle", "_ncnn_model": "NCNN", "_imx_model": "IMX", "_rknn_model": "RKNN"}


def export_format(name: str | Path) -> str | None:
    """The format of an export for another runtime that ``name`` (a file or folder) ends as, or None."""
    name = str(name).rstrip("/\\").lower()
    return next((fmt for ending, fmt in EXPORT_ENDINGS.items() if name.endswith(ending)), None)


SUFFIXES = (".safetensors", *_TORCH_SUFFIXES)
_FIX = "pass a .safetensors, .pt, .pth or .ckpt file"
DATA_PARALLEL_PREFIX = "module."  # torch's DataParallel / DistributedDataParallel wrap the model as .module


def weights_suffix(path) -> str:
    """A weight file's suffix, lower case; ``.pth.tar`` (timm's training checkpoints) as one."""
    name = Path(path).name.lower()
    return ".pth.tar" if name.endswith(".pth.tar") else Path(name).suffix

_SAFETENSORS_DTYPES = {  # safetensors name -> numpy dtype of the stored little-endian elements
    "F64": "<f8", "F32": "<f4", "F16": "<f2",
    "BF16": "<u2",  # bits, widened to float32
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1",
    "BOOL": "u1",  # compared with 0: a stray byte must not become a numpy bool
}


def read_checkpoint(path) -> dict[str, np.ndarray]:
    """The weights in a .safetensors or PyTorch file, by name."""
    return read_checkpoint_with_meta(path)[0]


def read_checkpoint_with_meta(path) -> tuple[dict[str, np.ndarray], dict]:
    """The weights and the file's metadata.

    Metadata: a safetensors file's ``__metadata__``; for a torch file the plain Python
    values at its top (epoch, versions, train args ...) and the model's ``names`` (class
    names of an ultralytics checkpoint) when it has them.
    """
    return _read(path, tensors=True)


def read_checkpoint_header(path) -> tuple[dict[str, TensorHeader], dict]:
    """What ``read_checkpoint_with_meta`` would return, each tensor as its TensorHeader (name,
    shape, dtype as read, bytes): from the safetensors header, or the torch pickle without its
    storages. Nothing is allocated for the tensors, so a file can be checked against a model first."""
    return _read(path, tensors=False)


def _read(path, tensors: bool):
    path = Path(path)
    suffix = weights_suffix(path)
    export = export_format(path)
    if export is not None:
        raise ZooError(f"{path} is an export ({export}: a graph for another runtime, without "
                       "the model's weights as PyTorch names them): pass the .pt it was exported from (e.g. "
                       "yolov8n.pt, best.pt) or a .safetensors file")
    if path.is_dir():
        raise ZooError(f"{path} is a folder: pass the weights file in it (.safetensors, .pt, .pth or .ckpt)")
    if suffix not in SUFFIXES:
        raise ZooError(f"{path}: unknown weights format {path.suffix or 'without a suffix'}; {_FIX}")
    if not path.exists():
        raise ZooError(f"{path}: no such file; {_FIX}")
    if not path.is_file():
        raise ZooError(f"{path}: not a file; {_FIX}")
    if path.stat().st_size == 0:
        raise ZooError(f"{path} is empty (0 bytes): re-download it")
    if suffix == ".safetensors":
        return _read_safetensors(path, tensors)
    if not _is_torch_save(path):
        with open(path, "rb") as file:
            if file.read(4) == b"PK\x03\x04":  # a zip's first entry, without the directory a zip ends with
                raise ZooError(f"{path} is a truncated or damaged zip archive (its directory at the end is "
                               "missing): re-download it or copy it again")
        raise ZooError(f"{path} is not a PyTorch checkpoint (neither a zip archive nor a pickle): "
                       "re-download it or pass the model's .pt or .safetensors file")
    tree = load_torch_file(path, tensors)
    try:
        weights, meta = state_dict_from(tree), _torch_metadata(tree)
    except ZooError as error:
        raise ZooError(f"{path}: {error}; {_FIX} that holds model weights") from None
    except RecursionError:  # a pickle can make a dict that contains itself
        raise ZooError(f"{path}: its object tree is cyclic or nested too deeply; re-download it "
                       "or convert it to .safetensors") from None
    if weights and all(name.startswith(DATA_PARALLEL_PREFIX) for name in weights):  # timm's clean_state_dict
        weights = {name[len(DATA_PARALLEL_PREFIX):]: tensor for name, tensor in weights.items()}
    ema = next((key for key in EMA_KEYS if isinstance(tree, Mapping) and tree.get(key)), None)
    beside = ema is not None and any(tree.get(key) for key in ("state_dict", "model_state_dict", "model"))
    if beside and tensors:  # state_dict_from took the EMA over the plain weights: say so (not on a header read)
        loader = "ultralytics' load_checkpoint" if ema == "ema" else "timm's load_checkpoint by default"
        print(f"note: {path}: its EMA weights ({ema}) are loaded, as {loader} does", file=sys.stderr)
    return weights, meta


def _is_torch_save(path: Path) -> bool:
    """torch.save writes a zip archive (torch >= 1.6) or pickles starting with the PROTO opcode (0x80)."""
    with open(path, "rb") as file:
        return file.read(1) == b"\x80" or zipfile.is_zipfile(file)


def _torch_metadata(tree) -> dict:
    meta = {}
    for key, value in tree.items() if isinstance(tree, Mapping) else ():
        plain = _as_plain(value)  # a namespace of plain values (ultralytics' train_args, timm's args): a dict
        if isinstance(key, str) and (plain is not None or value is None):
            meta[key] = plain
    names = module_attribute(tree, "names")
    if names is not None and _is_plain(names):
        meta["names"] = names
    module = root_module(tree)
    if module is not None:
        # the pickled model's class and its plain attributes (ultralytics: yaml, args, nc ...);
        # an object that only holds plain state (a namespace of training arguments) reads as a dict
        meta["module_class"] = type(module).stub_qualname
        meta["module_attributes"] = {k: _as_plain(v) for k, v in vars(module).items()
                                     if isinstance(k, str) and not k.startswith("_") and _as_plain(v) is not None}
    return meta


def _as_plain(value):
    if isinstance(value, StubObject) and isinstance(value.stub_state, dict) and _is_plain(value.stub_state):
        return value.stub_state
    return value if value is not None and _is_plain(value) else None


def _is_plain(value) -> bool:
    """True for None, bool, int, float, str, and lists / tuples / dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(map(_is_plain, value))
    if isinstance(value, dict):
        return all(_is_plain(k) and _is_plain(v) for k, v in value.items())
    return False


def _read_safetensors(path: Path, tensors: bool = True) -> tuple[dict, dict]:
    """8-byte little-endian header length, a JSON header, then the raw little-endian bytes.

    The safetensors library checks the header against the file first (its size, every dtype,
    shape and offset: contiguous, no overlap, inside the body), so nothing is allocated for a
    header that lies. numpy has no bfloat16, so the bytes are read here at the offsets it accepted.
    """
    try:
        with safe_open(path, framework="numpy") as checked:
            meta = checked.metadata() or {}
        with open(path, "rb") as file:
            header_length = int.from_bytes(file.read(8), "little")
            header = json.loads(file.read(header_length))
            header.pop("__metadata__", None)
            body = 8 + header_length
            read = _read_tensor if tensors else _tensor_header
            weights = {name: read(file, body, name, entry) for name, entry in header.items()}
    except (SafetensorError, OSError, ValueError) as error:
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        raise ZooError(f"{path}: not a valid .safetensors file ({reason}); re-download or "
                       "re-export it") from None
    return weights, meta


def _tensor_header(file, body: int, name: str, entry: dict) -> TensorHeader:
    _check_dtype(name, entry)
    read_as = {"BF16": np.float32, "BOOL": bool}.get(entry["dtype"], _SAFETENSORS_DTYPES[entry["dtype"]])
    return tensor_header(entry["shape"], read_as)


def _check_dtype(name: str, entry: dict) -> None:
    if entry["dtype"] not in _SAFETENSORS_DTYPES:
        raise ValueError(f"{name}: unsupported dtype {entry['dtype']}")


def _read_tensor(file, body: int, name: str, entry: dict) -> np.ndarray:
    _check_dtype(name, entry)
    start, end = entry["data_offsets"]
    file.seek(body + start)
    buffer = bytearray(end - start)  # numpy takes it over: no second copy, and the array is writable
    file.readinto(buffer)
    array = np.frombuffer(buffer, _SAFETENSORS_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    if entry["dtype"] == "BF16":
        return bfloat16_to_float32(array)
    return array != 0 if entry["dtype"] == "BOOL" else array
