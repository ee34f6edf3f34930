"""Layer parity of any MLX module: the model under test, on its device and dtype, against a
reference pass of the same model on the CPU in float64 (``zoo.validate.compare``), or against
recorded PyTorch layers (``zoo.validate.compare_torch``), module call by module call.

This is the one place where a process uses two devices on purpose: the reference runs inside
``mx.stream(mx.cpu)`` and the model under test inside ``mx.stream(device)``, whatever the
process's device is.

* Reference pass (once): the model's floating parameters are cast to float64 for the pass (the
  original arrays put back after: the model is left as it was); every module call is recorded
  on the host, keyed by module path and call (``path``; ``path#k`` for a module called several
  times): its output in float64, its inputs (isolated mode) in float32. A module whose float64
  run raises (MLX 0.32's CPU has no float64 grouped, depthwise or dilated convolution, strided
  transposed convolution, quantized matmul or Hadamard transform) runs again in float32, with
  its submodules, and its rows say so; a reference value that comes out in another float dtype
  (MLX's FFTs compute in complex64) is said in its row too.
* Test pass (per dtype and mode): the model's floating parameters are cast to the dtype for the
  pass (arrays read outside their module's call, such as tied embeddings, too; the originals put
  back after); each module call is evaluated, copied to the host and
  judged against its reference as it completes, so no output stays on the device beyond the
  forward's own lifetime and nothing of the pass is kept but its figures.
  end-to-end: the model runs on its own activations. isolated: every module call gets the
  reference's inputs for that call (cast to the dtype), so a wrong layer is named even when
  errors compound; a call whose inputs differ in structure or shape is flagged ``not fed``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from zoo.compiled import eager
from zoo.errors import UsageError, ZooError
from zoo.validate import engine
from zoo.validate.capture import Call, Record, intercepting, submodules, tree_leaves

REFERENCES = {"cpu-float64": mx.float64, "cpu-float32": mx.float32}
OUTPUT = "output"  # the row of the model's own return value


@dataclass
class ReferenceCall:
    """One module call of the reference: leaf path -> host array (``tree_leaves`` paths)."""

    output: dict
    inputs: dict | None = None  # of (args, kwargs); isolated mode only
    notes: list = field(default_factory=list)  # said in the row, e.g. the precision it ran in


@dataclass
class Reference:
    """Module path -> its reference calls in order; ``output``: the model's return value."""

    calls: dict = field(default_factory=dict)
    output: ReferenceCall | None = None

    def get(self, name: str, index: int) -> ReferenceCall | None:
        calls = self.calls.get(name, ())
        return calls[index] if index < len(calls) else None

    def key(self, name: str, index: int) -> str:
        """A row's name: the module path, with ``#k`` for the k-th call of a module called several times."""
        return name if index == 0 and len(self.calls.get(name, ())) <= 1 else f"{name}#{index}"


class ModelRaised(UsageError):
    """The model (one of its modules) raised on the inputs it was given."""


def raised(where: str, args, kwargs, error: BaseException) -> ModelRaised:
    shapes = ", ".join(f"{_argument(p)} {tuple(v.shape)} {str(v.dtype).split('.')[-1]}"
                       for p, v in tree_leaves((args, kwargs)) if isinstance(v, (mx.array, np.ndarray))) or "none"
    message = " ".join(str(error).split()) or type(error).__name__
    return ModelRaised(f"{where} raised {type(error).__name__}: {message} (its array inputs: {shapes}): pass inputs "
                       "of the shapes, rank and dtype the model takes (MLX convolutions take channels last, NHWC)")


def _argument(path: str) -> str:
    """A ``tree_leaves`` path of (args, kwargs) in words: '/0/1/2' -> 'argument 1/2', '/1/mask' -> 'mask'."""
    _, group, first, *rest = path.split("/")
    return "/".join([f"argument {first}" if group == "0" else first, *rest])


def evaluated(fn, args, kwargs, where: str):
    """``fn(*args, **kwargs)``, evaluated; what it raises (not a ZooError) as ``raised``'s error."""
    try:
        out = fn(*args, **kwargs)
        mx.eval(arrays(out))
    except ZooError:
        raise
    except Exception as error:
        raise raised(where, args, kwargs, error) from error
    return out


def host(a: mx.array, dtype=np.float64) -> np.ndarray:
    """An MLX array on the host: floating values as ``dtype``, complex ones as (real, imag) pairs
    on a last axis of 2, others as they are."""
    if mx.issubdtype(a.dtype, mx.complexfloating):
        v = np.array(a)
        return np.stack([v.real, v.imag], -1).astype(dtype)
    if mx.issubdtype(a.dtype, mx.floating):
        return np.array(a if a.dtype != mx.bfloat16 else a.astype(mx.float32)).astype(dtype, copy=False)
    return np.array(a)


def arrays(value) -> list[mx.array]:
    return [v for _, v in tree_leaves(value) if isinstance(v, mx.array)]


def _floating(a) -> bool:
    return isinstance(a, mx.array) and mx.issubdtype(a.dtype, mx.floating)


def cast(value, dtype: mx.Dtype):
    """A copy of a nest of containers with every floating MLX or numpy array as an MLX array of ``dtype``."""
    def one(path, v):
        if isinstance(v, np.ndarray):
            v = mx.array(v, dtype=mx.float64 if dtype == mx.float64 else mx.float32) if v.dtype.kind == "f" else mx.array(v)
        return v.astype(dtype) if _floating(v) and v.dtype != dtype else v

    return rebuild(value, one, in_place=False)


def rebuild(value, fn, path: str = "", in_place: bool = True):
    """``value`` with each leaf replaced by ``fn(path, leaf)`` (``tree_leaves`` paths). With
    ``in_place``, lists and dicts are changed in place: a module may pop from a list it is given
    (diffusion UNets pop their skip connections), and its caller must see that."""
    def inner(item, sub):
        return rebuild(item, fn, f"{path}/{sub}", in_place)

    if isinstance(value, list):
        items = [inner(item, i) for i, item in enumerate(value)]
        if not in_place:
            return items
        value[:] = items
        return value
    if isinstance(value, tuple):
        items = [inner(item, i) for i, item in enumerate(value)]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict) and not isinstance(value, nn.Module):
        items = {key: inner(item, key) for key, item in value.items()}
        if not in_place:
            return items
        value.update(items)
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: inner(getattr(value, f.name), f.name)
                                             for f in dataclasses.fields(value) if f.init})
    return fn(path, value)


@contextlib.contextmanager
def parameters_as(model: nn.Module, dtype: mx.Dtype):
    """Every floating parameter of the model as ``dtype`` inside the block (arrays read outside
    their module's call, such as tied embeddings, too); the original arrays are put back on exit."""
    original = model.parameters()
    if all(not _floating(a) or a.dtype == dtype for a in arrays(original)):
        yield
        return
    model.update(tree_map(lambda a: a.astype(dtype) if _floating(a) else a, original))
    try:
        yield
    finally:
        model.update(original)


@contextlib.contextmanager
def evaluation_mode(model: nn.Module):
    """Every module in eval mode (no dropout, BatchNorm's running statistics) inside the block;
    each module's own training flag is put back on exit."""
    flags = [(m, m.training) for m in (model, *(m for _, m in submodules(model)))]
    model.eval()
    try:
        yield
    finally:
        for module, flag in flags:
            module._training = flag


@contextlib.contextmanager
def state_kept(model: nn.Module):
    """Each module's attributes as they were before the block, on exit: what a call caches on its
    module (a rotary table or mask built at the first call, in that call's dtype) is dropped, so each
    pass builds its own (the float64 reference's cached table made the float16 pass compute in float64)
    and the user's model is left without the validator's values."""
    modules = (model, *(m for _, m in submodules(model)))
    saved = [(m, dict(m), dict(m.__dict__)) for m in modules]
    try:
        yield
    finally:
        for module, items, attributes in saved:
            dict.clear(module)
            dict.update(module, items)
            module.__dict__.clear()
            module.__dict__.update(attributes)


def keeps_state(run_pass):
    """A pass that leaves the model's modules as it found them (state_kept)."""
    @functools.wraps(run_pass)
    def wrapper(model: nn.Module, *args, **kwargs):
        with state_kept(model):
            return run_pass(model, *args, **kwargs)
    return wrapper


@keeps_state
def reference_pass(model: nn.Module, inputs: tuple, dtype: mx.Dtype, keep_inputs: bool) -> Reference:
    """The model on the CPU in ``dtype`` (float64 or float32), every module call recorded on the host."""
    reference = Reference()
    fallback = [0]  # > 0: inside a float32 rerun, whose calls are neither cast nor recorded
    # each module's own parameters: after its call its float64 copies are dropped for new, lazy
    # casts (their dtype still reads float64), so one module's copies exist at a time, not the model's
    own = {id(m): {k: m[k] for k in m.parameters() if k not in m.children()}
           for m in (model, *(m for _, m in submodules(model)))}

    def release(module):
        for key, original in own[id(module)].items():
            module[key] = tree_map(lambda a: a.astype(dtype) if _floating(a) else a, original)

    def run(call: Call, args, kwargs):
        out = call.run(*args, **kwargs)
        mx.eval(arrays(out))
        return out

    def on_call(call: Call, args, kwargs):
        if fallback[0]:
            return run(call, args, kwargs)
        entry = ReferenceCall({})
        if keep_inputs:
            entry.inputs = {p: host(v, np.float32) for p, v in tree_leaves((args, kwargs)) if isinstance(v, mx.array)}
        try:
            out = run(call, args, kwargs)
        except ZooError:
            raise
        except Exception as error:
            if dtype == mx.float32:
                raise raised(f"{call.name} ({call.class_name}), in the reference pass,", args, kwargs, error) from error
            fallback[0] += 1
            try:
                with parameters_as(call.module, mx.float32):
                    out = run(call, cast(args, mx.float32), cast(kwargs, mx.float32))
            except Exception:
                raise raised(f"{call.name} ({call.class_name}), in the reference pass,", args, kwargs, error) from error
            finally:
                fallback[0] -= 1
            entry.notes.append(f"reference in float32: float64 raised ({' '.join(str(error).split())})")
            record(entry, out, dtype)
            out = cast(out, dtype)  # the float64 pass goes on in float64 after this module
        else:
            record(entry, out, dtype)
        reference.calls.setdefault(call.name, []).append(entry)
        release(call.module)
        return out

    with mx.stream(mx.cpu), eager(), parameters_as(model, dtype), intercepting(model, on_call):
        out = evaluated(model, cast(inputs, dtype), {}, f"the model ({type(model).__name__}), in the reference pass,")
        reference.output = ReferenceCall({})
        record(reference.output, out, dtype)
    entries = [reference.output, *(entry for calls in reference.calls.values() for entry in calls)]
    if not any(value.size for entry in entries for value in entry.output.values()):
        # every mode would PASS 0/0 layers (or layers of no element): a verdict on nothing
        raise UsageError(f"the model ({type(model).__name__}) returned {type(out).__name__} and none of its module "
                         "calls gave an array with elements: nothing to compare; return the arrays to check (MLX "
                         "arrays, or tuples, lists, dicts of them) and pass inputs that are not empty")
    return reference


def record(entry: ReferenceCall, out, dtype: mx.Dtype) -> None:
    entry.output = {p: host(v) for p, v in tree_leaves(out) if isinstance(v, mx.array)}
    other = sorted({str(v.dtype).split(".")[-1] for _, v in tree_leaves(out)
                    if isinstance(v, mx.array) and mx.issubdtype(v.dtype, mx.inexact) and v.dtype != dtype})
    if other and not entry.notes:
        entry.notes.append(f"reference computed in {', '.join(other)} here")


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A valid 3x3 NHWC convolution, (1, 6, 6, C) x (O, 3, 3, C) -> (1, 4, 4, O)."""
    return np.stack([np.einsum("hwc,ohwc->o", x[0, i:i + 3, j:j + 3], w) for i in range(4) for j in range(4)]
                    ).reshape(1, 4, 4, -1)


def _normed(x: np.ndarray, centred: bool) -> np.ndarray:
    y = x - x.mean(-1, keepdims=True) if centred else x
    return y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5)


# (MLX op, its float64 numpy equivalent) on x (1, 6, 6, 4) and w (3, 3, 3, 4)
PRECISION_PROBES = {
    "convolution": (lambda x, w: mx.conv2d(x, w), lambda x, w: _conv(x, w)),
    "matmul": (lambda x, w: x.reshape(6, 24) @ w.reshape(3, 36)[:, :24].T, lambda x, w: x.reshape(6, 24) @ w.reshape(3, 36)[:, :24].T),
    "layer_norm": (lambda x, w: mx.fast.layer_norm(x, None, None, 1e-5), lambda x, w: _normed(x, True)),
    "rms_norm": (lambda x, w: mx.fast.rms_norm(x, None, 1e-5), lambda x, w: _normed(x, False)),
    "softmax": (lambda x, w: mx.softmax(x, -1), lambda x, w: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    "exp": (lambda x, w: mx.exp(x), lambda x, w: np.exp(x)),
    "erf": (lambda x, w: mx.erf(x), lambda x, w: _erf(x)),
    "sin": (lambda x, w: mx.sin(x), lambda x, w: np.sin(x)),
    "tanh": (lambda x, w: mx.tanh(x), lambda x, w: np.tanh(x)),
    "sigmoid": (lambda x, w: mx.sigmoid(x), lambda x, w: 1 / (1 + np.exp(-x))),
}
EXACT = 1e-12  # a float64 op's relative error is ~1e-16; a float32 computation's ~1e-7


def float32_precision_ops() -> list[str]:
    """The probed ops that this MLX's CPU computes in float32 precision when given float64 (MLX
    0.32.4: convolutions, mx.fast's norms, exp, erf, sin): the float64 reference's own error there
    is float32's roundoff, ~1e-7 relative, against float32's bound of 1e-4."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 6, 6, 4)), rng.standard_normal((3, 3, 3, 4))
    found = []
    with mx.stream(mx.cpu):
        for name, (op, exact) in PRECISION_PROBES.items():
            want = exact(x, w)
            try:
                got = np.array(op(mx.array(x, dtype=mx.float64), mx.array(w, dtype=mx.float64)))
            except Exception:
                found.append(name)
                continue
            if got.dtype != np.float64 or np.abs(got - want).max() > EXACT * np.abs(want).max():
                found.append(name)
    return found


def same(ref: np.ndarray, shape: tuple, name: str) -> tuple[np.ndarray, str | None]:
    """compare's layout rule: the reference value as it is."""
    return ref, None


@keeps_state
def test_pass(model: nn.Module, inputs: tuple, reference: Reference, device: mx.Device, dtype: str, mode: str,
              fault=None, rtol: float | None = None, atol: float = 0.0, align=same) -> engine.ModeReport:
    """One run of the model under test, judged call by call against ``reference``.

    ``align(ref, shape, name) -> (ref in the layout of an MLX value of ``shape``, note or None)``
    (compare_torch's NCHW -> NHWC); it raises ValueError where no layout fits."""
    from zoo.devices import DTYPES

    mx_dtype = DTYPES[dtype]
    tol = engine.TOLERANCES[dtype][mode] if rtol is None else rtol
    rows: list[engine.LayerResult] = []
    heatmaps: dict = {}
    records: dict[str, Record] = {}
    judged: set[tuple[str, int]] = set()

    def judge(key: str, out, entry: ReferenceCall | None, notes: list[str]) -> None:
        got_leaves = {p: v for p, v in tree_leaves(out) if isinstance(v, mx.array)}
        for path, got in got_leaves.items():
            name = key + path
            ref = None if entry is None else entry.output.get(path)
            if ref is None:
                rows.append(engine.LayerResult(name, tuple(got.shape), status="n/a", flags=["no reference value"]))
                continue
            try:
                ref, layout = align(ref, tuple(got.shape), name)
            except ValueError as e:
                rows.append(engine.LayerResult(name, tuple(got.shape), flags=[str(e)], status="FAIL"))
                continue
            value = host(got)
            result = engine.compare(name, ref, value, tol, got.dtype if _floating(got) else mx.float32, atol)
            result.flags += [n for n in (*notes, *entry.notes, layout) if n]
            rows.append(result)
            if result.failed and len(heatmaps) < engine.HEATMAPS:
                heatmap = engine.error_map(*(channels_first(v) for v in (ref, value)))
                if heatmap is not None:
                    heatmaps[name] = heatmap
        if entry is not None:
            for path, ref in entry.output.items():
                if path not in got_leaves:
                    rows.append(engine.LayerResult(key + path, ref.shape, status="n/a",
                                                   flags=["not in the output of the model under test"]))

    def on_call(call: Call, args, kwargs):
        key = reference.key(call.name, call.index)
        entry = reference.get(call.name, call.index)
        notes = []
        if mode == "isolated":
            fed = None if entry is None or entry.inputs is None else feed(args, kwargs, entry.inputs, mx_dtype, align)
            if fed is None:
                notes.append("not fed")
            else:
                args, kwargs = fed
        out = evaluated(call.run, args, kwargs, f"{call.name} ({call.class_name})")
        judge(key, out, entry, notes)
        judged.add((call.name, call.index))
        records[key] = Record(None, None, call.ops, call.class_name)
        return out

    with mx.stream(device), eager(), parameters_as(model, mx_dtype), intercepting(model, on_call, fault):
        out = evaluated(model, cast(inputs, mx_dtype), {}, f"the model ({type(model).__name__})")
        judge(OUTPUT, out, reference.output, [])
    del out
    for name, calls in reference.calls.items():
        for index, entry in enumerate(calls):
            if (name, index) not in judged:
                rows.extend(engine.LayerResult(reference.key(name, index) + path, ref.shape, status="n/a",
                                               flags=["not called by the model under test"])
                            for path, ref in entry.output.items())
    return engine.ModeReport(mode, tol, rows, dtype, heatmaps, engine.coverage_rows(records), atol)


def channels_first(a: np.ndarray) -> np.ndarray:
    """An NHWC value as NCHW, for engine.error_map's maps (max over channels)."""
    return np.moveaxis(a, -1, 1) if a.ndim == 4 else a


def feed(args, kwargs, inputs: dict, dtype: mx.Dtype, align) -> tuple | None:
    """(args, kwargs) with every array replaced by the reference's input at the same place, cast to
    ``dtype``; None when the two differ in structure or shape."""
    own = {p: v for p, v in tree_leaves((args, kwargs)) if isinstance(v, mx.array)}
    if set(own) != set(inputs):
        return None
    fed = {}
    for path, value in own.items():
        try:
            ref, _ = align(inputs[path], tuple(value.shape), path)
        except ValueError:
            return None
        if ref.shape != tuple(value.shape):
            return None
        fed[path] = mx.array(ref).astype(dtype if _floating(value) else value.dtype)
    args, kwargs = rebuild((args, kwargs), lambda path, leaf: fed.get(path, leaf))
    return args, kwargs


def check_model(model, api: str = "compare") -> None:
    """``api``: the function the model was given to, named in the error."""
    if isinstance(model, nn.Module):
        if (path := back_reference(model)) is not None:  # model.eval() looped for ever: a hang, no word
            raise UsageError(f"{api}: the model's {path} is a module that contains it (a reference back to a parent): "
                             "MLX's eval(), parameters() and update() never end on such a cycle; hold it outside "
                             "the module tree (a weakref.ref)")
        return
    kind = type(model)
    if any(c.__module__.startswith("torch") for c in kind.__mro__):
        if api == "compare_torch":  # the two models swapped: "use compare_torch" was said to its caller
            raise UsageError(f"compare_torch takes the MLX model first, got a PyTorch {kind.__name__}: "
                             "call compare_torch(mlx_model, torch_model, *inputs)")
        raise UsageError(f"compare takes an mlx.nn.Module, got a PyTorch {kind.__name__}: "
                         "use zoo.validate.compare_torch(mlx_model, torch_model, *inputs)")
    raise UsageError(f"{api} takes an mlx.nn.Module, got {kind.__name__}: pass the model object itself "
                     "(a function or bound method has no modules to compare; wrap it in an nn.Module)")


def back_reference(model: nn.Module) -> str | None:
    """The path of the first module attribute that holds a module containing it (``self.block.parent =
    self``), or None: MLX's eval(), parameters() and update() walk the tree without end on such a cycle."""
    open_, done = set(), set()  # modules being walked (their ancestors' chain), and those walked in full

    def walk(path: str, value) -> str | None:
        if isinstance(value, nn.Module):
            if id(value) in open_:
                return path
            if id(value) in done:
                return None
            open_.add(id(value))
            items = value.items()
        elif isinstance(value, (list, tuple)):
            items = enumerate(value)
        elif isinstance(value, dict):
            items = value.items()
        else:
            return None
        found = next((hit for key, item in items if (hit := walk(f"{path}.{key}".lstrip("."), item))), None)
        if isinstance(value, nn.Module):
            open_.discard(id(value))
            done.add(id(value))
        return found

    return walk("", model)


def check_inputs(inputs: tuple) -> None:
    if not inputs:
        raise UsageError("no inputs: pass the model's inputs after it, as you would call it: compare(model, x, ...)")
    for path, leaf in tree_leaves(inputs):
        if isinstance(leaf, np.ndarray) and leaf.dtype.kind not in "biufc":
            raise UsageError(f"input {path.lstrip('/')} has dtype {leaf.dtype}: pass numeric arrays")


def describe_inputs(inputs: tuple) -> str:
    return ", ".join(f"{tuple(v.shape)} {str(v.dtype).split('.')[-1]}"
                     for _, v in tree_leaves(inputs) if isinstance(v, (mx.array, np.ndarray)))


def inputs_on_host(inputs: tuple) -> tuple:
    """A copy of the user's inputs with MLX arrays on the host (floating ones in float64): each
    pass makes its own arrays from them, on its own device."""
    return rebuild(tuple(inputs), lambda path, leaf: host(leaf) if isinstance(leaf, mx.array) else leaf, in_place=False)
