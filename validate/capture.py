"""Record every named module's inputs and output of an MLX model, from outside.

MLX modules have no hooks, so each module instance is given, for the duration
of one forward pass, a subclass of its own class whose ``__call__`` records
and (for fault injection) perturbs; the original class is restored afterwards.
The models carry no code for this.

Each record also lists the op implementations (zoo.kernels.coverage: custom
kernel, CPU form, MLX op) chosen while the module's own code ran, its
submodules' excluded: the coverage matrix.
"""
from __future__ import annotations

import contextlib
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
    """'NAME=KIND' -> (NAME, KIND)."""
    if not spec:
        return None
    name, _, kind = spec.partition("=")
    if not name or kind not in FAULTS:
        raise ZooError(f"bad {option('inject', spec)}: use NAME=KIND with KIND one of {', '.join(FAULTS)}")
    return name, kind


@contextlib.contextmanager
def recording(model: nn.Module, fault: tuple[str, str] | None = None):
    """Yield a dict name -> Record, filled in completion order while the model runs."""
    records: dict[str, Record] = {}
    modules = [(name, m) for name, m in model.named_modules() if name]
    if fault is not None:
        names = {name for name, _ in modules}
        if fault[0] not in names:
            near = sorted(n for n in names if fault[0].split(".")[0] in n)[:8]
            raise ZooError(f"--inject: no module named {fault[0]!r} (some names: {', '.join(near or sorted(names)[:8])})")
    originals = []
    dropped = []  # calls of the dropped shortcut: none means the block adds nothing back
    calls = [{}]  # ops noted per module call in progress, innermost last; [0]: outside any module
    # the recording classes reach the records through this box, emptied on exit: a class is freed
    # only by the cyclic garbage collector, and must not keep the pass's arrays alive until then
    box = [records]
    with contextlib.ExitStack() as stack:
        stack.enter_context(coverage.listening(lambda op, impl: calls[-1].__setitem__(op, impl)))
        stack.callback(box.clear)
        stack.callback(_restore, originals)
        for name, module in modules:
            base = type(module)
            namespace = {"__call__": _recording_call(base, name, box, fault, calls)}
            if fault == (name, "drop-residual"):
                if not hasattr(base, "shortcut"):
                    raise ZooError(f"--inject {name}=drop-residual: {name} ({base.__name__}) has no residual connection")

                def shortcut(self, *args, _base=base):
                    dropped.append(True)
                    return tree_map(mx.zeros_like, _base.shortcut(self, *args), is_leaf=lambda v: isinstance(v, mx.array))

                namespace["shortcut"] = shortcut
            originals.append((module, base))
            module.__class__ = type(base.__name__, (base,), namespace)
        yield records
        if fault is not None and fault[1] == "drop-residual" and fault[0] in records and not dropped:
            block = type(dict(modules)[fault[0]]).__name__
            raise ZooError(f"--inject {fault[0]}=drop-residual: this {block} adds no residual in this model "
                           "(its shortcut is unused): pick a block that has one")


def _restore(originals):
    for module, base in originals:
        module.__class__ = base


def _recording_call(base, name, box, fault, calls):
    def __call__(self, *args, **kwargs):
        calls.append({})
        try:
            out = base.__call__(self, *args, **kwargs)
        finally:
            ops = calls.pop()
        if fault is not None and fault[0] == name and fault[1] != "drop-residual":
            out = _perturb(out, fault[1])
        records = box[0]
        earlier = records.pop(name, None)  # a module called twice: keep its last call, in completion order
        records[name] = Record(args, out, ops, base.__name__, 1 + (earlier.calls if earlier else 0))
        return out

    return __call__
