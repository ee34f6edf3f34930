"""Writes PyTorch-format files without torch, for tests: pickles name torch's globals
(GLOBAL module name) without importing them, exactly as torch.save lays them out."""
from __future__ import annotations

import io
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

@dataclass(frozen=True)
class Glob:
    """Written as GLOBAL module name: names anything without importing it."""

    module: str
    name: str


@dataclass(frozen=True)
class Call:
    """Written as func, args, REDUCE."""

    func: object
    args: tuple


@dataclass(frozen=True)
class New:
    """Written as cls, (), NEWOBJ, state, BUILD: how protocol 2 pickles an nn.Module."""

    cls: Glob
    state: dict


@dataclass(frozen=True)
class Reduced:
    """Written as cls, (), REDUCE, state, BUILD: how types.SimpleNamespace (and ultralytics'
    IterableSimpleNamespace) pickles itself, by its own __reduce__."""

    cls: Glob
    state: dict


STORAGES = {np.dtype(np.float32): "FloatStorage", np.dtype(np.float16): "HalfStorage",
            np.dtype(np.int64): "LongStorage"}  # BatchNorm's num_batches_tracked


class Writer(pickle._Pickler):
    """A protocol-2 pickler for the markers above; arrays become torch storages of their dtype
    (float32 or float16)."""

    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file):
        super().__init__(file, protocol=2)
        self.storages: list[np.ndarray] = []

    def persistent_id(self, obj):
        if isinstance(obj, np.ndarray):
            self.storages.append(obj)
            return ("storage", Glob("torch", STORAGES[obj.dtype]), str(len(self.storages) - 1), "cpu", obj.size)
        return None

    def save_glob(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())

    def save_call(self, obj):
        self.save(obj.func)
        self.save(obj.args)
        self.write(pickle.REDUCE)

    def save_new(self, obj):
        self.save_built(obj, pickle.NEWOBJ)

    def save_reduced(self, obj):
        self.save_built(obj, pickle.REDUCE)

    def save_built(self, obj, make: bytes):
        """obj.cls made with no arguments by ``make`` (NEWOBJ as pickle's protocol 2, or a call: REDUCE), then
        given obj.state (BUILD)."""
        self.save(obj.cls)
        self.save(())
        self.write(make)
        self.save(obj.state)
        self.write(pickle.BUILD)

    dispatch[Glob] = save_glob
    dispatch[Reduced] = save_reduced
    dispatch[Call] = save_call
    dispatch[New] = save_new


def tensor(values, dtype=np.float32) -> Call:
    array = np.ascontiguousarray(values, dtype)
    stride = tuple(s // array.itemsize for s in array.strides)
    return Call(Glob("torch._utils", "_rebuild_tensor_v2"), (array, 0, array.shape, stride, False, {}))


def write_torch_zip(path: Path, obj=None, *, data: bytes | None = None, big_endian=False,
                    records: dict[str, bytes] | None = None) -> Path:
    """A torch zip-format file holding ``obj`` (or the raw pickle ``data``), and ``records`` beside it
    (archive/<name>: a TorchScript archive's code/..., constants.pkl)."""
    buffer, writer = io.BytesIO(), None
    if data is None:
        writer = Writer(buffer)
        writer.dump(obj)
        data = buffer.getvalue()
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data)
        archive.writestr("archive/byteorder", "big" if big_endian else "little")
        for name, record in (records or {}).items():
            archive.writestr(f"archive/{name}", record)
        for key, array in enumerate(writer.storages if writer else []):
            archive.writestr(f"archive/data/{key}", array.astype(array.dtype.newbyteorder(">" if big_endian else "<"))
                             .tobytes())
    return path


def module(cls: str, parameters=None, buffers=None, children=None, non_persistent=(), **attributes) -> New:
    module_name, _, name = cls.rpartition(".")
    return New(Glob(module_name, name), {
        "training": False, "_parameters": parameters or {}, "_buffers": buffers or {},
        "_non_persistent_buffers_set": set(non_persistent), "_modules": children or {}, **attributes})


def nested_names(state_dict: dict) -> dict:
    """``state_dict``'s dotted names as nested dicts: {"a.b.w": x} -> {"a": {"b": {"w": x}}}."""
    nested: dict = {}
    for key, value in state_dict.items():
        *path, leaf = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def module_tree(state_dict: dict, cls: str, **attributes) -> New:
    """A pickled nn.Module tree of class ``cls`` holding ``state_dict`` (tensors in their dtypes,
    running statistics as buffers), its children plain Modules."""
    nested = nested_names(state_dict)

    def build(node: dict, cls: str, **attributes) -> New:
        stats = ("running_mean", "running_var")
        return module(cls, {k: tensor(v, v.dtype) for k, v in node.items() if isinstance(v, np.ndarray) and k not in stats},
                      {k: tensor(v, v.dtype) for k, v in node.items() if k in stats},
                      {k: build(v, "torch.nn.modules.module.Module") for k, v in node.items() if isinstance(v, dict)},
                      **attributes)

    return build(nested, cls, **attributes)


def script_tree(state_dict: dict, cls: str) -> New:
    """A module as torch.jit.save pickles it: a __torch__.<cls> object whose state holds every attribute
    (tensors, submodules as __torch__ objects, flags), without _parameters, _buffers or _modules."""
    nested = nested_names(state_dict)

    def build(node: dict, cls: str) -> New:
        return New(Glob("__torch__" + ("." + cls.rpartition(".")[0] if "." in cls else ""), cls.rpartition(".")[2]),
                   {"training": False, **{k: build(v, "torch.nn.modules.module.Module") if isinstance(v, dict)
                                          else tensor(v, v.dtype) for k, v in node.items()}})

    return build(nested, cls)
