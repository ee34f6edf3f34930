"""Read PyTorch ``.pt/.pth/.ckpt`` files without torch and without running code from them.

A pickle can call any importable function; a weights file needs only a few.
The unpickler here imports nothing: the callables a checkpoint needs (tensor and
storage rebuilding, a few containers) are re-implemented below, every other
class becomes an inert stub, and a pickle that calls anything else, or names a
module such as ``os`` at all, is refused before anything runs.

Tensors come back as numpy arrays with torch's dtype, except bfloat16, which
numpy lacks: it is widened exactly to float32.
"""
from __future__ import annotations

import _compat_pickle
import collections
import math
import pickle
import struct
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided

from zoo.errors import ZooError


class UnsafeCheckpointError(ZooError):
    """The file's pickle asks for code the reader does not allow; nothing was executed."""


class _Refused(Exception):
    """A pickle named or called something off the allowlist (raised as UnsafeCheckpointError)."""

    def __init__(self, action: str, name: str):
        super().__init__(f"{action} {name}")


# --- stubs: classes that are never imported -------------------------------------------------


class _StubClass(type):
    """Type of the generated stub classes (so they show as stubs, not as the real class)."""

    def __repr__(cls):
        return f"<stub class {cls.stub_qualname}>"


class StubObject:
    """An object of a class that was not imported: inert, it only keeps what the pickle gave it.

    ``stub_args`` / ``stub_kwargs``: the constructor arguments (NEWOBJ); ``stub_state``: the
    pickled state, whose str keys are also attributes when it is a dict (``module._parameters``,
    ``model.names``); ``stub_items`` / ``stub_list``: what SETITEM(S) / APPEND(S) added.
    """

    __slots__ = ("stub_args", "stub_kwargs", "stub_state", "stub_items", "stub_list", "__dict__")
    stub_qualname = "?"

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls)
        obj.stub_args, obj.stub_kwargs, obj.stub_state = args, kwargs, None
        obj.stub_items, obj.stub_list = {}, []
        return obj

    def __setstate__(self, state):
        self.stub_state = state
        # (dict, slots) pairs are what classes with __slots__ pickle as their state
        parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
        for part in parts:
            if isinstance(part, dict):
                # a key such as 'extend' must not shadow the methods the unpickler calls
                vars(self).update((k, v) for k, v in part.items()
                                  if isinstance(k, str) and not hasattr(StubObject, k))

    def __setitem__(self, key, value):
        self.stub_items[key] = value

    def append(self, value):
        self.stub_list.append(value)

    def extend(self, values):
        self.stub_list.extend(values)

    def __repr__(self):
        return f"<stub {type(self).stub_qualname}>"


def _make_stub_class(module: str, name: str) -> type:
    return _StubClass(name, (StubObject,), {"__slots__": (), "stub_qualname": f"{module}.{name}"})


def _stub_new(cls, *args):
    """copyreg.__newobj__: create an object the way NEWOBJ does, for stub classes only."""
    if not isinstance(cls, _StubClass):
        raise _Refused("creates", _describe(cls))
    return cls.__new__(cls, *args)


def _stub_reconstructor(cls, base, state):
    """copyreg._reconstructor, for stub classes only: the base class's constructor is not run."""
    return _stub_new(cls) if state is None else _stub_new(cls, state)


def _describe(obj) -> str:
    if isinstance(obj, _StubClass):
        return obj.stub_qualname
    if isinstance(obj, StubObject):
        return f"a {type(obj).stub_qualname} object"
    return getattr(obj, "__qualname__", None) or f"a {type(obj).__name__}"


# --- tensors and storages -------------------------------------------------------------------

_STORAGE_DTYPES = {  # torch storage class -> numpy dtype of one little-endian element in the file
    "DoubleStorage": "<f8", "FloatStorage": "<f4", "HalfStorage": "<f2",
    "BFloat16Storage": "<u2",  # bits, widened to float32 after the copy
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "u1",  # compared with 0 after the copy: a stray byte must not become a numpy bool
}


@dataclass(frozen=True)
class _StorageType:
    """A torch storage class such as torch.HalfStorage, as named in the pickle."""

    name: str
    dtype: np.dtype


class _CopyBudget:
    """What one load may allocate for tensors: a few times the bytes of the storages it read.

    A tensor is a copy of a strided view; views can overlap (stride 0, many tensors on one
    storage), so without a bound a small file could ask for terabytes. Real checkpoints copy
    each storage about once: bfloat16 doubles (widened to float32), tied weights copy twice.
    """

    FACTOR = 4

    def __init__(self):
        self.storage_bytes = self.spent = 0

    def charge(self, nbytes: int) -> None:
        """Count ``nbytes`` before they are allocated; ValueError past the bound."""
        if self.spent + nbytes > self.FACTOR * self.storage_bytes:
            raise ValueError(f"its tensors would take {self.spent + nbytes} bytes, more than "
                             f"{self.FACTOR}x the {self.storage_bytes} bytes of its storages")
        self.spent += nbytes


@dataclass(frozen=True)
class _Storage:
    """A storage's elements (1-D); None while a legacy file's first pass only collects types."""

    kind: _StorageType
    elements: np.ndarray | None
    budget: _CopyBudget


@dataclass(frozen=True)
class TensorHeader:
    """A tensor as a checkpoint describes it, before its bytes are read: shape, dtype as read
    (bfloat16 widened to float32), and the bytes it will take."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int


def tensor_header(shape, dtype: np.dtype) -> TensorHeader:
    shape = tuple(int(n) for n in shape)
    if min(shape, default=0) < 0:
        raise ValueError(f"negative tensor size {shape}")
    return TensorHeader(shape, np.dtype(dtype), math.prod(shape) * np.dtype(dtype).itemsize)


def _read_dtype(kind: _StorageType) -> np.dtype:
    """The dtype a storage's tensors have once read (see _decode)."""
    return {"BFloat16Storage": np.dtype(np.float32), "BoolStorage": np.dtype(bool)}.get(kind.name, kind.dtype)


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) as float32: exact, bfloat16 is float32's upper half."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _storage_elements(raw: bytes, kind: _StorageType, big_endian: bool) -> np.ndarray:
    if big_endian:
        return np.frombuffer(raw, kind.dtype.newbyteorder(">")).astype(kind.dtype)
    return np.frombuffer(raw, kind.dtype)


def _rebuild_tensor(storage, storage_offset, size, stride):
    """A copy of the strided view torch would build on the storage."""
    if not isinstance(storage, _Storage):
        raise ValueError(f"tensor built on {type(storage).__name__}, not a storage")
    if storage.elements is None:  # headers only: the storages are not read
        return tensor_header(size, _read_dtype(storage.kind))
    elements, offset = storage.elements, int(storage_offset)
    size, stride = tuple(map(int, size)), tuple(map(int, stride))
    if len(size) != len(stride) or offset < 0 or min(size + stride, default=0) < 0:
        raise ValueError(f"bad tensor geometry: offset {offset}, size {size}, stride {stride}")
    if 0 in size:
        return _decode(np.zeros(size, elements.dtype), storage.kind)
    # as_strided does no bounds checking: a hostile stride would read foreign memory
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= elements.size:
        raise ValueError(f"tensor reaches element {last} of a storage of {elements.size}")
    itemsize = 4 if storage.kind.name == "BFloat16Storage" else elements.itemsize
    storage.budget.charge(math.prod(size) * itemsize)
    view = as_strided(elements[offset:], shape=size, strides=[s * elements.itemsize for s in stride])
    return _decode(np.array(view, copy=True), storage.kind)


def _decode(array: np.ndarray, kind: _StorageType) -> np.ndarray:
    if kind.name == "BFloat16Storage":
        return bfloat16_to_float32(array)
    if kind.name == "BoolStorage":
        return array != 0
    return array


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None):
    return data


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return data


_TENSOR_REBUILDERS = (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_parameter,
                      _rebuild_parameter_with_state)


def _rebuild_from_type_v2(func, new_type, args, state):
    """A tensor with Python attributes: ``func(*args)`` if func is one of ours; type and state dropped."""
    if not any(func is rebuilder for rebuilder in _TENSOR_REBUILDERS):
        raise _Refused("calls", f"torch._tensor._rebuild_from_type_v2 with {_describe(func)}")
    return func(*args)


# --- small values: torch.Size, torch.device, numpy scalars, protocol-2 bytes ------------------


def _torch_size(dims=()):
    return tuple(int(d) for d in dims)


def _torch_device(kind, index=None):
    return str(kind) if index is None else f"{kind}:{index}"


def _latin1_bytes(text, encoding="latin1"):
    """_codecs.encode as protocol-2 pickles use it to spell bytes; any other use is refused."""
    if not (isinstance(text, str) and encoding in ("latin1", "latin-1")):
        raise _Refused("calls", f"_codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


class _NumpyDtype:
    """numpy.dtype as pickled: only plain numeric types; BUILD gives just the byte order.

    Never a real np.dtype, whose __setstate__ would take flags and layout from the file.
    """

    def __init__(self, code, align=False, copy=False):
        if not (isinstance(code, str) and len(code) <= 4 and code[:1] in "biufc" and code[1:].isdigit()):
            raise _Refused("calls", f"numpy.dtype({code!r})")
        self.code, self.byteorder = code, "="

    def __setstate__(self, state):
        byteorder = state[1] if isinstance(state, tuple) and len(state) > 1 else "="
        self.byteorder = byteorder if byteorder in ("<", ">", "=", "|") else "="


def _numpy_scalar(dtype, data):
    """numpy.core.multiarray.scalar: a numpy scalar from its dtype and raw bytes."""
    if not isinstance(dtype, _NumpyDtype) or not isinstance(data, bytes):
        raise _Refused("calls", "numpy.core.multiarray.scalar with a non-numeric dtype or data")
    return np.frombuffer(data, np.dtype(dtype.code).newbyteorder(dtype.byteorder), count=1)[0]


def _value_of_tagged(value, type_tag):
    """torch.jit._pickle.restore_type_tag: the value (a dict or list), its TorchScript type string dropped."""
    return value


# --- the restricted unpickler -----------------------------------------------------------------

_ALLOWED = {
    "collections.OrderedDict": collections.OrderedDict,
    "collections.defaultdict": collections.defaultdict,
    **{f"builtins.{t.__name__}": t for t in (set, frozenset, tuple, list, dict, slice, range,
                                             complex, object, int, float, str, bool)},
    "copyreg._reconstructor": _stub_reconstructor,
    "copyreg.__newobj__": _stub_new,
    "_codecs.encode": _latin1_bytes,
    **{f"torch._utils.{f.__name__}": f for f in _TENSOR_REBUILDERS},
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    "torch.Size": _torch_size,
    "torch.device": _torch_device,
    # what torch.jit.save's pickle calls to type its lists and tagged values: the values as they are
    **{f"torch.jit._pickle.build_{kind}list": list for kind in ("int", "double", "bool", "tensor", "generic")},
    "torch.jit._pickle.restore_type_tag": _value_of_tagged,
    # training scripts' arguments as a plain namespace: a stub like any class ('types' is otherwise refused)
    "types.SimpleNamespace": _make_stub_class("types", "SimpleNamespace"),
    "numpy.dtype": _NumpyDtype,
    "numpy.core.multiarray.scalar": _numpy_scalar,
    "numpy._core.multiarray.scalar": _numpy_scalar,
    **{f"{module}.{name}": _StorageType(name, np.dtype(dtype))
       for name, dtype in _STORAGE_DTYPES.items()
       for module in ("torch", "torch.cuda")},  # torch.cuda: files saved from the GPU before 1.6
    "torch.storage.UntypedStorage": _StorageType("UntypedStorage", np.dtype("u1")),
    # dtypes pickled as values (e.g. in a config) stay readable names
    **{f"torch.{name}": f"torch.{name}" for name in (
        "float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8", "int16",
        "int32", "int64", "uint8", "bool", "short", "int", "long", "complex64", "complex128")},
}

# Named at all, even as a value, these mean the file was made to run code.
_FORBIDDEN_MODULES = frozenset({
    "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "_posixsubprocess", "sys", "builtins",
    "shutil", "socket", "importlib", "pickle", "_pickle", "marshal", "runpy", "code", "codeop",
    "ctypes", "_ctypes", "multiprocessing", "pty", "signal", "threading", "_thread", "types",
    "functools", "operator", "inspect", "io", "_io", "tempfile", "webbrowser", "pdb", "timeit",
    "site", "pkgutil", "zipimport", "gc", "asyncio",
})


def _python3_name(module: str, name: str) -> tuple[str, str]:
    """torch.save writes protocol 2, which spells names the Python 2 way (__builtin__.set)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


# Called by identity: a pickle can build unhashable or oddly-comparing values.
_CALLABLE_IDS = frozenset(id(value) for value in _ALLOWED.values()
                          if callable(value) and not isinstance(value, _StubClass))


def _no_lazy_iterables(func, args) -> None:
    """A pickled range is a harmless value, but tuple(range(10**12)) would fill memory: a call
    gets its elements only from lists, tuples, dicts ... that the file spells out."""
    if any(isinstance(arg, range) for arg in args):
        raise _Refused("expands", f"a range with {_describe(func)}")

_StorageReader = Callable[[str, _StorageType], np.ndarray]


class _Bounded:
    """A pickle stream whose reads never ask for more than is left of it.

    A pickle states lengths (frames, bytes, strings) before their data; passed on as they are,
    a lie of a terabyte would allocate that much before the short read is noticed (or, in a
    compressed zip entry, decompress that much). Here a read gets at most the bytes left, so
    the unpickler reports the truncation instead.
    """

    def __init__(self, file, size: int):
        self._file, self._left = file, max(0, size - file.tell())  # reads go through here only

    def read(self, n: int = -1) -> bytes:
        data = self._file.read(self._left if n is None or n < 0 else min(n, self._left))
        self._left -= len(data)
        return data

    def readline(self) -> bytes:
        data = self._file.readline(self._left)
        self._left -= len(data)
        return data


class _RestrictedUnpickler(pickle._Unpickler):
    """pickle's pure-Python unpickler with every opcode that runs code guarded.

    An unpickler runs code only by calling (REDUCE, INST, OBJ), by ``__new__`` (NEWOBJ) and
    by setting state (BUILD). Here calls go only to ``_ALLOWED``'s callables, ``__new__`` only
    to stubs and allowed builtin types, BUILD only into objects this load created; globals
    come from ``find_class``, which imports nothing. Tensors are built on storages from
    ``read_storage``; with None they come back as None and ``storage_types`` records each
    storage's type (a legacy file's storages follow its pickle, so it is read twice).
    """

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, size: int, read_storage: _StorageReader | None):
        super().__init__(_Bounded(file, size), encoding="utf-8")  # torch.load's choice for Python 2 str
        self._read_storage = read_storage
        self._budget = _CopyBudget()
        self._storages: dict[str, _Storage] = {}
        self._stubs: dict[tuple[str, str], type] = {}
        self.storage_types: dict[str, _StorageType] = {}

    def find_class(self, module, name):
        module, name = _python3_name(module, name)
        qualified = f"{module}.{name}"
        if qualified in _ALLOWED:
            return _ALLOWED[qualified]
        if module.split(".")[0] in _FORBIDDEN_MODULES:
            raise _Refused("references", qualified)
        if (module, name) not in self._stubs:
            self._stubs[module, name] = _make_stub_class(module, name)
        return self._stubs[module, name]

    def persistent_load(self, pid):
        typename = pid[0].decode("ascii") if isinstance(pid[0], bytes) else pid[0]
        if typename == "module":  # legacy files pickle nn.Module classes with their source: ignored
            return pid[1]
        if typename != "storage":
            raise ValueError(f"unknown persistent id {typename!r}")
        kind, key, _location, _numel, *view = pid[1:]
        if not isinstance(kind, _StorageType):
            raise ValueError(f"unsupported storage type {_describe(kind)}")
        storage = self._storage(str(key), kind)
        if view and view[0] is not None and storage.elements is not None:
            _view_key, offset, size = view[0]  # pre-0.4 storage views: a slice of the root storage
            return _Storage(kind, storage.elements[offset:offset + size], self._budget)
        return storage

    def _storage(self, key: str, kind: _StorageType) -> _Storage:
        if key not in self._storages:
            self.storage_types[key] = kind
            elements = None if self._read_storage is None else self._read_storage(key, kind)
            if elements is not None:
                self._budget.storage_bytes += elements.nbytes
            self._storages[key] = _Storage(kind, elements, self._budget)
        return self._storages[key]

    def _call(self, func, args):
        if isinstance(func, _StubClass) and not args:
            # (cls, (), state) is how types.SimpleNamespace reduces itself (ultralytics' IterableSimpleNamespace
            # in the train_args of every last.pt): an object, as NEWOBJ makes; a call with arguments stays refused
            return self._new(func, (), {})
        if id(func) not in _CALLABLE_IDS:
            raise _Refused("calls", _describe(func))
        _no_lazy_iterables(func, args)
        return func(*args)

    def _new(self, cls, args, kwargs):
        if not (isinstance(cls, _StubClass) or (isinstance(cls, type) and id(cls) in _CALLABLE_IDS)):
            raise _Refused("creates", _describe(cls))
        _no_lazy_iterables(cls, (*args, *kwargs.values()))
        return cls.__new__(cls, *args, **kwargs)

    def load_reduce(self):
        args = self.stack.pop()
        self.stack[-1] = self._call(self.stack[-1], args)

    def load_newobj(self):
        args = self.stack.pop()
        self.stack[-1] = self._new(self.stack[-1], args, {})

    def load_newobj_ex(self):
        kwargs, args = self.stack.pop(), self.stack.pop()
        self.stack[-1] = self._new(self.stack[-1], args, kwargs)

    def _instantiate(self, klass, args):  # INST and OBJ, protocols 0 and 1
        self.append(self._call(klass, args) if args else self._new(klass, (), {}))

    def load_build(self):
        state, inst = self.stack.pop(), self.stack[-1]
        if isinstance(inst, (StubObject, _NumpyDtype)):
            type(inst).__setstate__(inst, state)
        elif type(inst) is collections.OrderedDict and isinstance(state, dict):
            vars(inst).update(state)  # torch's state_dict._metadata
        else:
            raise ValueError(f"cannot set the state of {_describe(inst)}")

    def load_bytearray8(self):
        # pickle's own allocates the stated length before reading: read first, then copy
        length, = struct.unpack("<Q", self.read(8))
        data = self.read(length)
        if len(data) != length:
            raise pickle.UnpicklingError("pickle data was truncated")
        self.append(bytearray(data))

    def load_ext(self):
        # copyreg's extension cache can hand back real classes without asking find_class
        raise ValueError("pickle extension codes are not supported")

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.BYTEARRAY8[0]] = load_bytearray8
    dispatch.update(dict.fromkeys((pickle.EXT1[0], pickle.EXT2[0], pickle.EXT4[0]), load_ext))


# --- file formats -----------------------------------------------------------------------------

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


# torch.save stores every record uncompressed; a re-zipped file may deflate them, but float
# weights barely compress: a record that claims to expand more than this is a zip bomb
_MAX_EXPANSION = 100


class _Records:
    """A zip archive's records, each checked against the archive's size before it is read.

    The central directory states every size; a hostile one can claim terabytes, point many
    records at the same bytes, or hold a deflate bomb. A record is read only if its stored
    bytes fit in the file, what it expands to is at most _MAX_EXPANSION times that, and all
    records read so far together occupy no more than the file.
    """

    def __init__(self, archive: zipfile.ZipFile, size: int):
        self.archive, self._size, self._used = archive, size, 0

    def info(self, name: str) -> zipfile.ZipInfo:
        info = self.archive.getinfo(name)
        stored, expanded = info.compress_size, info.file_size
        if info.compress_type == zipfile.ZIP_STORED and expanded != stored:
            raise ValueError(f"zip entry {name} is stored but claims {expanded} bytes for {stored}")
        if expanded > _MAX_EXPANSION * max(stored, 1):
            raise ValueError(f"zip entry {name} claims to expand {stored} bytes to {expanded}")
        self._used += stored
        if info.header_offset + stored > self._size or self._used > self._size:
            raise ValueError(f"zip entry {name} claims {stored} bytes that a file of {self._size} "
                             "does not hold")
        return info

    def read(self, name: str) -> bytes:
        info = self.info(name)
        with self.archive.open(info) as record:
            return _Bounded(record, info.file_size).read()


def _load_zip(path: Path, tensors: bool = True):
    """torch >= 1.6: <archive>/data.pkl, storages in <archive>/data/<key>, optional byteorder."""
    with zipfile.ZipFile(path) as archive:
        records = _Records(archive, path.stat().st_size)
        listed = archive.namelist()
        pickles = [n for n in listed if n.endswith("/data.pkl") and n.count("/") == 1]
        if not pickles:
            raise ValueError("a zip file without <archive>/data.pkl")
        names = set(listed)
        if len(names) != len(listed):  # which copy a reader takes is its own choice: PyTorch may load other weights
            twice = sorted(n for n in names if listed.count(n) > 1)
            raise ValueError(f"the zip holds {', '.join(twice[:3])} more than once (torch.save writes each record "
                             "once)")
        if len(pickles) != 1:
            raise ValueError(f"a zip file of {len(pickles)} archives ({', '.join(pickles[:3])}): torch.save writes one")
        prefix = pickles[0][: -len("data.pkl")]
        big_endian = (prefix + "byteorder" in names
                      and records.read(prefix + "byteorder").strip() == b"big")

        def read_storage(key, kind):
            return _storage_elements(records.read(f"{prefix}data/{key}"), kind, big_endian)

        info = records.info(pickles[0])
        with archive.open(info) as pickled:
            return _RestrictedUnpickler(pickled, info.file_size, read_storage if tensors else None).load()


def _load_legacy(path: Path, tensors: bool = True):
    """torch < 1.6: magic, protocol, sys_info and main pickles, storage keys, then raw storages."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        if _RestrictedUnpickler(file, size, None).load() != _LEGACY_MAGIC:
            raise ValueError("neither a zip archive nor a legacy torch.save file")
        _RestrictedUnpickler(file, size, None).load()  # protocol version
        sys_info = _RestrictedUnpickler(file, size, None).load()
        byteorder = "little" if sys_info.get("little_endian", True) else "big"
        main = file.tell()
        first_pass = _RestrictedUnpickler(file, size, None)
        headers = first_pass.load()
        if not tensors:
            return headers
        keys = _RestrictedUnpickler(file, size, None).load()
        elements = {}
        for key in keys:
            kind = first_pass.storage_types[key]
            count = int.from_bytes(file.read(8), byteorder)
            nbytes = count * kind.dtype.itemsize
            if nbytes > size - file.tell():  # checked before reading: a count can claim terabytes
                raise ValueError(f"storage {key} claims {nbytes} bytes; the file has {size - file.tell()} left")
            elements[key] = _storage_elements(file.read(nbytes), kind, byteorder == "big")
        file.seek(main)
        return _RestrictedUnpickler(file, size, lambda key, kind: elements[key]).load()


def load_torch_file(path, tensors: bool = True) -> object:
    """The unpickled object tree of a torch.save file, tensors as numpy arrays (``tensors``
    False: as TensorHeaders, no storage read).

    Raises UnsafeCheckpointError for a pickle that names or calls code off the allowlist
    (nothing has run), ZooError for anything else unreadable.
    """
    path = Path(path)
    try:
        return _load_zip(path, tensors) if zipfile.is_zipfile(path) else _load_legacy(path, tensors)
    except _Refused as refused:
        raise UnsafeCheckpointError(
            f"{path}: refused to load: its pickle {refused}, which a weights "
            "file does not need; nothing was executed. Convert it to .safetensors from a trusted "
            "source") from None
    except ZooError:
        raise
    except Exception as error:  # whatever a corrupt or foreign file makes the unpickler raise
        reason = " ".join(f"{type(error).__name__}: {error}".split()).removesuffix(":")  # EOFError has no text
        raise ZooError(f"{path}: cannot read this PyTorch file ({reason}); re-download it or "
                       "convert it to .safetensors") from None


# --- finding the weights in the tree ----------------------------------------------------------

# where training scripts put the weights, best first: timm's train.py keeps its EMA beside 'state_dict'
# and its load_checkpoint takes the EMA by default; ultralytics keeps its EMA under 'ema' beside 'model'
# (None in its current last.pt and best.pt, a second copy in 8.0's) and its load_checkpoint takes
# ckpt.get("ema") or ckpt["model"]
EMA_KEYS = ("state_dict_ema", "model_ema", "ema")
_WEIGHT_KEYS = (*EMA_KEYS, "state_dict", "model_state_dict", "model")


def state_dict_from(obj) -> dict[str, np.ndarray]:
    """The weights in a loaded checkpoint, named as torch's ``state_dict()`` names them.

    ``obj`` may be a flat name -> array mapping, a pickled nn.Module (parameters, then
    persistent buffers, then submodules), or either under timm's EMA keys ('state_dict_ema',
    'model_ema') or ultralytics' ('ema'), 'state_dict', 'model_state_dict' or 'model'.
    """
    weights = _find_weights(obj)
    if not weights:
        raise ZooError("no weights found: expected a name -> tensor mapping or a pickled nn.Module, "
                       "at the top or under 'state_dict', 'model_state_dict', 'model' or 'ema'")
    return weights


def _find_weights(obj) -> dict[str, np.ndarray]:
    if isinstance(obj, StubObject):
        return _module_state_dict(obj, "")
    if not isinstance(obj, Mapping):
        return {}
    for key in _WEIGHT_KEYS:
        if weights := _find_weights(obj.get(key)):
            return weights
    return {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, (np.ndarray, TensorHeader))}


# torch.jit.save pickles a module as a __torch__.<class> object whose state is every attribute at once
# (parameters, buffers, submodules, flags): no _parameters, _buffers or _modules
TORCHSCRIPT_PREFIX = "__torch__."


def is_torchscript(module) -> bool:
    return isinstance(module, StubObject) and type(module).stub_qualname.startswith(TORCHSCRIPT_PREFIX)


def _script_state_dict(module: StubObject, prefix: str) -> dict[str, np.ndarray]:
    weights = {}
    for name, value in vars(module).items():
        if isinstance(value, (np.ndarray, TensorHeader)):
            weights[prefix + name] = value
        elif is_torchscript(value):
            weights.update(_script_state_dict(value, f"{prefix}{name}."))
    return weights


def _module_state_dict(module: StubObject, prefix: str) -> dict[str, np.ndarray]:
    attributes = vars(module)
    if is_torchscript(module) and "_parameters" not in attributes:
        return _script_state_dict(module, prefix)

    def mapping(name):
        value = attributes.get(name)
        return value if isinstance(value, Mapping) else {}

    non_persistent = attributes.get("_non_persistent_buffers_set") or ()
    tensors = [*mapping("_parameters").items(),
               *((n, b) for n, b in mapping("_buffers").items() if n not in non_persistent)]
    weights = {prefix + name: t for name, t in tensors if isinstance(t, (np.ndarray, TensorHeader))}
    for name, child in mapping("_modules").items():
        if isinstance(child, StubObject):
            weights.update(_module_state_dict(child, f"{prefix}{name}."))
    return weights


# torch's wrappers for data-parallel training: the model is their one child, .module
DATA_PARALLEL_CLASSES = ("torch.nn.parallel.data_parallel.DataParallel",
                         "torch.nn.parallel.distributed.DistributedDataParallel")


def root_module(obj) -> StubObject | None:
    """The checkpoint's pickled root nn.Module: ``obj`` itself or the first under a weight key; the model
    inside a DataParallel or DistributedDataParallel wrapper (whose class and attributes say nothing of it)."""
    candidates = [obj] + ([obj.get(k) for k in _WEIGHT_KEYS] if isinstance(obj, Mapping) else [])
    root = next((c for c in candidates if isinstance(c, StubObject)), None)
    if root is not None and type(root).stub_qualname in DATA_PARALLEL_CLASSES:
        inner = (vars(root).get("_modules") or {}).get("module")
        return inner if isinstance(inner, StubObject) else root
    return root


def module_attribute(obj, name: str, default=None):
    """An attribute of the checkpoint's pickled root nn.Module (``obj`` itself or under a weight key).

    E.g. ultralytics' class names: ``module_attribute(load_torch_file("yolov8n.pt"), "names")``
    -> ``{0: 'person', ...}``. ``default`` when there is no such module or attribute.
    """
    module = root_module(obj)
    return default if module is None else vars(module).get(name, default)
