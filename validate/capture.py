"""Record every named module's inputs and output of an MLX model, from outside.

MLX modules have no hooks, so each module instance is given, for the duration
of one forward pass, a subclass of its own class whose ``__call__`` goes through
the caller's ``on_call`` (``intercepting``: record, feed other inputs, compare)
and, for fault injection, perturbs; the original class is restored afterwards.
The models carry no code for this.

``recording`` keeps each module's last call: its inputs, output and the op
implementations (zoo.kernels.coverage: custom kernel, CPU form, MLX op) chosen
while the module's own code ran, its submodules' excluded: the coverage matrix.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map

from zoo.errors import ZooError, option
from zoo.kernels import coverage

FAULTS = ("zero", "noise", "nan", "drop-residual")


@dataclass
class Record:
    inputs: tuple
    output: object
    ops: dict  # op -> implementation, noted in this module's own code (not its submodules')
    module: str  # the module's class name
    calls: int = 1  # how many times the module ran in the pass


class Call:
    """One call of an intercepted module, as ``on_call`` sees it: ``name`` (its path), ``index``
    (0 for its first call in the pass), ``module``; ``run(*args, **kwargs)`` runs the module's own
    code with the injected fault applied; ``ops``: the op implementations that code noted."""

    def __init__(self, name: str, index: int, module: nn.Module, base: type, fault, stack: list):
        self.name, self.index, self.module, self.base = name, index, module, base
        self.ops: dict = {}
        self._fault, self._stack = fault, stack

    @property
    def class_name(self) -> str:
        return self.base.__name__

    def run(self, *args, **kwargs):
        self._stack.append({})
        try:
            out = self.base.__call__(self.module, *args, **kwargs)
        finally:
            self.ops = self._stack.pop()
        fault = self._fault
        if fault is not None and fault_hits(fault, self.name, self.index) and fault[1] != "drop-residual":
            out = _perturb(out, fault[1])
        return out


def tree_leaves(value, path: str = ""):
    """(path, leaf) of a nest of tuples, lists, dicts and dataclasses: paths '/0', '/key', '/field'."""
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from tree_leaves(item, f"{path}/{i}")
    elif isinstance(value, dict) and not isinstance(value, nn.Module):
        for key, item in value.items():
            yield from tree_leaves(item, f"{path}/{key}")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from tree_leaves(getattr(value, f.name), f"{path}/{f.name}")
    else:
        yield path, value


def submodules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every submodule once, under its first path: those in attributes, lists, tuples and dicts
    (MLX's ``named_modules`` skips tuples and lists a shared module twice)."""
    seen, found = {id(model)}, []

    def walk(path, value):
        if isinstance(value, nn.Module):
            if id(value) in seen:
                return
            seen.add(id(value))
            found.append((path, value))
            for key, item in value.items():
                walk(f"{path}.{key}", item)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(f"{path}.{i}", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{path}.{key}", item)

    for key, item in model.items():
        walk(key, item)
    return found


def _perturb(out, kind: str):
    def one(a):
        if not isinstance(a, mx.array) or not mx.issubdtype(a.dtype, mx.floating):
            return a
        if kind == "zero":
            return mx.zeros_like(a)
        if kind == "noise":
            key = mx.random.key(0)
            scale = mx.maximum(mx.std(a.astype(mx.float32)), 1e-3)
            return (a + 0.5 * scale * mx.random.normal(a.shape, key=key)).astype(a.dtype)
        flat = mx.arange(a.size).reshape(a.shape)
        return mx.where(flat == 0, mx.array(float("nan"), a.dtype), a)

    return tree_map(one, out, is_leaf=lambda v: isinstance(v, mx.array))


def parse_fault(spec: str | None) -> tuple[str, str] | None:
    """'NAME=KIND' -> (NAME, KIND); NAME may end in '#K': the module's call K only (0: its first)."""
    if spec is None or spec == "":
        return None
    name, _, kind = spec.partition("=") if isinstance(spec, str) else ("", "", "")
    module, _, index = name.partition("#")
    if not module or kind not in FAULTS or (index and not index.isdigit()):
        raise ZooError(f"bad {option('inject', spec)}: use NAME=KIND or NAME#CALL=KIND with KIND one of {', '.join(FAULTS)}")
    return name, kind


def fault_hits(fault: tuple[str, str], name: str, index: int) -> bool:
    module, _, call = fault[0].partition("#")
    return module == name and (not call or int(call) == index)


def check_fault(modules: list[tuple[str, nn.Module]], fault: tuple[str, str] | None) -> str | None:
    """The module path a fault names (``submodules``' names), or a ZooError naming some paths."""
    if fault is None:
        return None
    target = fault[0].partition("#")[0]
    names = {name for name, _ in modules}
    if target not in names:
        near = sorted(n for n in names if target.split(".")[0] in n)[:8]
        raise ZooError(f"{option('inject', '='.join(fault))}: no module named {target!r} (some names: "
                       f"{', '.join(near or sorted(names)[:8])}): pass one of the model's module paths")
    return target


@contextlib.contextmanager
def intercepting(model: nn.Module, on_call, fault: tuple[str, str] | None = None):
    """For one pass, every submodule's call becomes ``on_call(call: Call, args, kwargs) -> output``."""
    modules = submodules(model)
    target = check_fault(modules, fault)
    originals = []
    dropped = []  # calls of the dropped shortcut: none means the block adds nothing back
    stack = [{}]  # ops noted per module call in progress, innermost last; [0]: outside any module
    counts: dict[str, int] = {}
    # the intercepting classes reach on_call through this box, emptied on exit: a class is freed
    # only by the cyclic garbage collector, and must not keep the pass's arrays alive until then
    box = [on_call]
    with contextlib.ExitStack() as exits:
        exits.enter_context(coverage.listening(lambda op, impl: stack[-1].__setitem__(op, impl)))
        exits.callback(box.clear)
        exits.callback(_restore, originals)
        for name, module in modules:
            base = type(module)
            namespace = {"__call__": _intercepted_call(base, name, box, fault, stack, counts)}
            if fault is not None and target == name and fault[1] == "drop-residual":
                if not hasattr(base, "shortcut"):
                    raise ZooError(f"{option('inject', name + '=drop-residual')}: {name} ({base.__name__}) has no "
                                   "residual connection")

                def shortcut(self, *args, _base=base):
                    dropped.append(True)
                    return tree_map(mx.zeros_like, _base.shortcut(self, *args), is_leaf=lambda v: isinstance(v, mx.array))

                namespace["shortcut"] = shortcut
            originals.append((module, base))
            module.__class__ = type(base.__name__, (base,), namespace)
        yield
        call = fault[0].partition("#")[2] if fault is not None else ""
        if fault is not None and counts.get(target, 0) <= (int(call) if call else 0):
            raise ZooError(f"{option('inject', '='.join(fault))}: the model called {target} {counts.get(target, 0)} "
                           "time(s) in this pass (a module whose arrays are read directly is never called): pick a "
                           "module call it makes")
        if fault is not None and fault[1] == "drop-residual" and target in counts and not dropped:
            block = type(dict(modules)[target]).__name__
            raise ZooError(f"{option('inject', target + '=drop-residual')}: this {block} adds no residual in this "
                           "model (its shortcut is unused): pick a block that has one")


@contextlib.contextmanager
def recording(model: nn.Module, fault: tuple[str, str] | None = None):
    """Yield a dict name -> Record, filled in completion order while the model runs."""
    records: dict[str, Record] = {}

    def keep(call: Call, args, kwargs):
        out = call.run(*args, **kwargs)
        earlier = records.pop(call.name, None)  # a module called twice: keep its last call, in completion order
        records[call.name] = Record(args, out, call.ops, call.class_name, 1 + (earlier.calls if earlier else 0))
        return out

    with intercepting(model, keep, fault):
        yield records


def _restore(originals):
    for module, base in originals:
        module.__class__ = base


def _intercepted_call(base, name, box, fault, stack, counts):
    def __call__(self, *args, **kwargs):
        index = counts.get(name, 0)
        counts[name] = index + 1
        return box[0](Call(name, index, self, base, fault, stack), args, kwargs)

    return __call__
