"""Compiled inference: a network's forward through ``mx.compile``, one trace per input signature.

Every user path (``model(x)``, ``predict``, ``set_image``/``predict``, ``inpaint``, the
CLIs) calls its network through a ``CompiledForward``. ``mx.compile`` fuses the
element-wise chains between the convolutions and matmuls (BatchNorm + activation,
residual adds, GELU, ...) into single GPU kernels (on an H100, float16, ResNet-50 at
batch 1 went from 1.17x to 0.51x PyTorch's time in issue 10's side-by-side measurement;
the project's own figures: docs/speed-gpu.md).

- One trace per input signature (shapes, dtypes and the constant arguments): YOLO's
  letterbox shapes, LaMa's padded sizes and SAM's point counts each trace once. At most
  ``MAX_TRACES`` are kept, least recently used first out, so a stream of new sizes does
  not grow memory without bound.
- The module's arrays are the compiled function's inputs (``mx.compile(inputs=...)``),
  not constants frozen into the trace: weights loaded or cast later are used.
- ``ZOO_COMPILE``: ``auto`` (default) compiles on the GPU only. On the CPU ``mx.compile``
  gained nothing (measured, issue 10), and zoo.kernels.cpu's fast C forms of the slow
  CPU ops need evaluated inputs, which a trace does not have; ``on`` compiles on any
  device (tests), ``off`` never.
- BatchNorm folded into the preceding convolution (as ultralytics fuses Conv+BN at
  predict): a model names its (conv, BatchNorm) pairs (or other arrays to derive from a conv and
  a partner module: zoo.compiled.FoldedConvs), and inside its compiled forward
  ``folded(conv)`` gives that convolution's weight scaled by the BatchNorm and its bias
  (models.layers.conv_bn runs them). The folded arrays are inputs of the trace, built
  on the first compiled call and again whenever one of their source arrays was replaced
  (weights loaded or cast later). A forward with a module in training mode runs eagerly: its
  BatchNorms update their running statistics, which a trace would leave holding its tracers. A
  module set in place of one inside the network after it was built (``Structure``) makes its
  folds and stages be built again where the model gives them as ``parts`` (ResNet), else its
  forward run uncompiled from then on, said in one line (its folds and traces held the old one).
- A memory cap on MLX's CUDA backend (``ZOO_GPU_MEMORY_FACTOR``): MLX keeps every op's inputs
  (and cuDNN workspace) until the GPU has passed the commit after it, with up to ten commits in
  flight, so a big batch held several times PyTorch's peak. The first call of each trace is
  evaluated one commit at a time (``least_memory``: MLX's memory limit at the memory in use),
  which gives the least memory this forward runs in under MLX; every later call is scheduled
  (``mx.async_eval``) under ``mx.set_memory_limit(in use + FACTOR x that least memory)``, past
  which MLX's eval waits for committed work to finish before encoding more. Such a wait leaves the
  GPU idle while the host encodes what follows: 2-7% of a big float32 batch's time, 4-8% in
  float16 and MobileSAM's encoder (H200, 2026-12-01; docs/speed-gpu.md has the trade). The cap is
  never tighter than ``CAP_FLOOR`` (32 MiB) above the memory in use: below that its waits kept the
  host and the GPU to one commit at a time to save a few MiB (ResNet-50 batch 1 float32 on an
  H200: 3.25 ms and 19 MiB capped at its least memory, 2.11 ms and 31 MiB at the floor).
- Stages (``CompiledForward(stages=...)``; the big inputs of YOLO and ResNet): a forward compiled as a chain of
  traces, each stage's outputs scheduled on MLX's CUDA backend before the next stage's graph is
  built, so that the GPU computes while the host builds; one memory cap spans them.
- The validator records every layer with eager modules: inside ``eager()`` every
  ``CompiledForward`` is a plain call of the eager network (separate BatchNorms, the
  upstream layer names), as is any ``mx.compile``'d function.
"""
from __future__ import annotations

import contextlib
import inspect
import operator
import os
import sys
import threading
from collections import OrderedDict
from typing import Callable, NamedTuple

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from zoo import devices
from zoo.concurrency import lock_of, release_mlx_at_thread_exit
from zoo.errors import ZooError
from zoo.kernels import winograd

ENV_VAR = "ZOO_COMPILE"
MODES = ("auto", "on", "off")
MAX_TRACES = 8
MEMORY_FACTOR_VAR = "ZOO_GPU_MEMORY_FACTOR"
DEFAULT_MEMORY_FACTOR = 1.0
CAP_FLOOR = 32 * 2**20  # bytes: no cap tighter than this above the memory in use (the module's docstring says why)
# A forward's convolution GFLOPs from which it runs in stages (``stages_pay``), keyed by "float32". Stages pay where
# the GPU's work outlasts the host's building of the next stage's graph: on an H100 from about 60 GFLOP a call in
# float32 (YOLOv8s b4, YOLOv8n b8 at 640) and 300 in float16 (YOLOv8s b16); below that each stage's ~0.1 ms of host
# time is lost. ResNet-50 on an H200 alike: staged at b32 in float32 (262 GFLOP), not in float16 nor at b1
# (docs/speed-gpu.md, "YOLOv8 in stages" and "ResNet in stages, and a floor under the memory cap").
STAGED_FROM_GFLOP = {True: 60.0, False: 300.0}
TRANSFORM_REFUSAL = "[async_eval] Not allowed inside a graph transformation"  # MLX's message
_capping = threading.Lock()  # the limit is process-wide: one capped scheduling at a time

_eager_depth = 0  # > 0 inside eager(): every CompiledForward calls its eager network
_tracing = threading.local()  # .folds: the FoldedConvs of the forward being traced on this thread


def mode() -> str:
    value = os.environ.get(ENV_VAR, "auto").lower() or "auto"
    if value not in MODES:
        raise ZooError(f"{ENV_VAR}={value!r}: use one of {', '.join(MODES)}")
    return value


def enabled() -> bool:
    """Whether a CompiledForward compiles now (``ZOO_COMPILE``, the default device, outside ``eager()``)."""
    chosen = mode()
    if _eager_depth:
        return False
    if chosen == "auto":
        return mx.default_device() == mx.gpu
    return chosen == "on"


def memory_factor() -> float:
    """``ZOO_GPU_MEMORY_FACTOR``: a compiled forward's memory cap in multiples of its least memory
    (``DEFAULT_MEMORY_FACTOR`` when unset); 0 for 'off'."""
    value = os.environ.get(MEMORY_FACTOR_VAR, "").strip().lower()
    if value == "":
        return DEFAULT_MEMORY_FACTOR
    if value == "off":
        return 0.0
    try:
        factor = float(value)
    except ValueError:
        factor = -1.0
    if not factor >= 1:
        raise ZooError(f"{MEMORY_FACTOR_VAR}={value!r}: use a number >= 1 (the cap in multiples of a forward's "
                       f"least memory), or 'off'")
    return factor


def cuda_backend() -> bool:
    """Whether arrays are computed by MLX's CUDA backend (the default device is its GPU)."""
    return mx.default_device() == mx.gpu and devices.gpu_backend() == "cuda"


def capping() -> bool:
    """Whether compiled forwards run under a memory cap: MLX's CUDA backend and the factor not 'off'.
    Metal keeps MLX's own scheduling (nothing measured there), the CPU holds no in-flight buffers."""
    return memory_factor() > 0 and cuda_backend()


def _schedule(arrays) -> bool:
    """mx.async_eval(arrays); False where they are a caller's tracers (inside its mx.compile, grad,
    vmap), which MLX does not schedule."""
    try:
        mx.async_eval(arrays)
    except ValueError as e:
        if not str(e).startswith(TRANSFORM_REFUSAL):
            raise
        return False
    return True


def _lazy(arrays) -> None:
    """A stage's outputs left lazy (no CUDA backend: MLX's own scheduling, nothing measured)."""


def least_memory(inputs, out) -> int | None:
    """Evaluate ``out``, a forward's first call on ``inputs`` (a tree), one commit at a time
    (MLX's memory limit at the memory in use: each commit waits for those before it to finish
    and free their buffers). Returns the peak above the memory in use before it (the inputs
    evaluated first), the least this forward runs in under MLX; None for a caller's tracers.
    MLX's peak counter is reset for it."""
    with _capping:
        if not _schedule([a for _, a in tree_flatten(inputs) if isinstance(a, mx.array)]):
            return None
        mx.synchronize()
        before = mx.get_active_memory()
        mx.reset_peak_memory()
        previous = mx.set_memory_limit(min(mx.get_memory_limit(), before))
        try:
            scheduled = _schedule(out)
            mx.synchronize()
        finally:
            mx.set_memory_limit(previous)
        return mx.get_peak_memory() - before if scheduled else None


def schedule_capped(run: Callable, cap: int):
    """``run(schedule)`` (a forward that calls ``schedule`` on each stage's outputs but the last)
    and its outputs scheduled under MLX's memory limit at most ``cap`` bytes above the memory in
    use (a lower limit the user set stays), then the limit put back. Only the encoding waits: the
    outputs are computed asynchronously, as lazy ones would be."""
    with _capping:
        previous = mx.set_memory_limit(min(mx.get_memory_limit(), mx.get_active_memory() + cap))
        try:
            out = run(_schedule)
            _schedule(out)
        finally:
            mx.set_memory_limit(previous)
        return out


def stages_pay(gflop: float, dtype: mx.Dtype) -> bool:
    """Whether a forward of ``gflop`` convolution GFLOPs in ``dtype`` runs in stages (STAGED_FROM_GFLOP): where
    the GPU's work outlasts the host's building of the next stage's graph."""
    return gflop >= STAGED_FROM_GFLOP[dtype == mx.float32]


def _signature(value):
    """Hashable description of an argument tree: arrays by shape and dtype, constants by value."""
    if isinstance(value, mx.array):
        return ("array", tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *((k, _signature(v)) for k, v in sorted(value.items())))
    return value


class FoldedConvs:
    """Arrays a compiled forward derives from a convolution and a partner module, made once per
    change of their weights. By default the partner is the convolution's following inference
    BatchNorm, folded in: weight * scale and bias * scale + shift, scale = gamma /
    sqrt(running_var + eps), shift = beta - mean * scale, computed in float32 and stored in the
    convolution's dtype. An entry's third element, ``make(conv, partner) -> {name: array}``,
    derives other arrays (another layout of the fold, two convolutions merged); its partner may be
    None (arrays derived from the convolution alone) or a tuple of modules (arrays derived from
    several layers' weights: MobileSAM's merged projections)."""

    def __init__(self, entries):
        self.pairs = {id(entry[0]): entry[:2] for entry in entries}
        self.makers = {id(entry[0]): entry[2] for entry in entries if len(entry) > 2}
        # an input tree of the trace, {id: {name: array}}; each entry's dict is refilled in place, so
        # that a stage's part of it (within) follows
        self.arrays: dict[int, dict[str, mx.array]] = {key: {} for key in self.pairs}
        self.sources: dict[int, tuple] = {}
        # Every call checks all entries at once (one flat list, compared by identity in C): entry by
        # entry the checks took 250 of YOLOv8s's 830 us of host time per call (2-core CPU, 2026-11-27).
        self.modules = [m for conv, partner in self.pairs.values() for m in members(conv, partner)]
        self.batch_norms = [m for m in self.modules if isinstance(m, nn.BatchNorm)]
        self.named: list = []  # (module, name) of every array the entries derive from: refresh() sets it
        self.known: list | None = None  # those arrays, and the modules' sizes, when last derived

    def all_sources(self) -> list | None:
        """The arrays of every entry's modules, and their modules' sizes (None where an array was
        removed since; a size tells one added)."""
        try:
            return [m[name] for m, name in self.named] + [sum(map(len, self.modules))]
        except KeyError:
            return None

    def refresh(self) -> None:
        """Derive again every entry one of whose arrays was replaced since it was derived."""
        now = self.all_sources()
        if now is not None and self.known is not None and now[-1] == self.known[-1] \
                and all(map(operator.is_, now[:-1], self.known[:-1])):
            return
        for key, (conv, partner) in self.pairs.items():
            sources = sources_of(*members(conv, partner))
            if replaced(sources, self.sources.get(key)):
                self.sources[key] = sources
                derived = self.makers.get(key, fold_in_conv_dtype)(conv, partner)
                self.arrays[key].clear()
                self.arrays[key].update(derived)
        evaluated(self.arrays)
        self.named = [(m, name) for m in self.modules for name, value in m.items() if isinstance(value, mx.array)]
        self.known = self.all_sources()

    def retraced(self) -> None:
        """After a trace: mx.compile put its input arrays back into the modules as new Python
        objects holding the same arrays; remember those so the next call does not derive again."""
        self.sources = {key: sources_of(*members(conv, partner)) for key, (conv, partner) in self.pairs.items()}
        self.known = self.all_sources()

    def within(self, modules: list) -> dict[int, dict[str, mx.array]]:
        """The part of ``arrays`` whose convolutions are inside ``modules`` (a stage's input tree)."""
        inside = {id(m) for module in modules for m in module.modules()}
        return {key: self.arrays[key] for key in self.pairs if key in inside}

    def usable(self) -> bool:
        """Every BatchNorm with running statistics to fold (a forward in training mode runs eagerly)."""
        return all(bn.track_running_stats and "weight" in bn for bn in self.batch_norms)


def members(conv, partner) -> tuple:
    """A FoldedConvs entry's modules: the convolution and its partner (none, one, or a tuple)."""
    if partner is None:
        return (conv,)
    return (conv, *partner) if isinstance(partner, tuple) else (conv, partner)


def sources_of(*modules) -> tuple:
    """The arrays that arrays derived from ``modules`` (a conv's, a BatchNorm's) depend on: each
    module's own arrays (not its submodules'), read from its dict, not through parameters(): this
    runs for every derivation on every call."""
    return tuple(v for m in modules if m is not None for v in m.values() if isinstance(v, mx.array))


_TRAINING = operator.attrgetter("_training")  # mlx.nn.Module.training's attribute


def replaced(sources: tuple, known: tuple | None) -> bool:
    """Whether arrays derived from ``known`` must be made again from ``sources``: a first time, or
    one of them is another object (weights loaded or cast since; MLX arrays are never changed in
    place), or one was added or removed."""
    return known is None or len(sources) != len(known) or any(a is not b for a, b in zip(sources, known))


def kept(owner, name: str, modules: tuple, make: Callable):
    """``make()``, kept on ``owner`` (outside its parameters) until one of ``modules``' arrays is
    replaced (weights loaded or cast later): arrays an eager forward derives from weights once."""
    sources = sources_of(*modules)
    held = owner.__dict__.get(name)
    if held is None or replaced(sources, held[0]):
        held = owner.__dict__[name] = (sources, evaluated(make()))
    return held[1]


def evaluated(tree):
    """``tree``'s arrays evaluated now, where they are kept for later calls: a lazy array holds its thread's
    stream, and another thread's call could not evaluate it ("There is no Stream(cpu, 2) in current thread").
    Inside a trace (MLX refuses to evaluate there) they are the trace's own."""
    with contextlib.suppress(ValueError):  # "Attempting to eval an array during function transformations"
        mx.eval(tree)
    return tree


def arrays_in(tree, found: list | None = None) -> list[tuple]:
    """Every array in a tree of lists and dicts (modules are dicts) as (container, key, array)."""
    found = [] if found is None else found
    for key, value in (tree.items() if isinstance(tree, dict) else enumerate(tree)):
        if isinstance(value, mx.array):
            found.append((tree, key, value))
        elif isinstance(value, (dict, list)):
            arrays_in(value, found)
    return found


def recording_layers() -> bool:
    """Inside ``eager()``: the upstream layers run as themselves (the validator records them)."""
    return _eager_depth > 0


def batch_norm_affine(bn) -> tuple[mx.array, mx.array]:
    """An inference BatchNorm as x * scale + shift, in float32: scale = gamma / sqrt(running_var + eps),
    shift = beta - mean * scale."""
    f32 = mx.float32
    scale = bn.weight.astype(f32) * mx.rsqrt(bn.running_var.astype(f32) + bn.eps)
    return scale, bn.bias.astype(f32) - bn.running_mean.astype(f32) * scale


def fold_batch_norm(conv, bn) -> tuple[mx.array, mx.array]:
    """``conv`` followed by the inference BatchNorm ``bn`` as one convolution: its float32 weight and bias."""
    f32 = mx.float32
    scale, shift = batch_norm_affine(bn)
    bias = shift if "bias" not in conv else conv.bias.astype(f32) * scale + shift
    return conv.weight.astype(f32) * scale.reshape(-1, *(1,) * (conv.weight.ndim - 1)), bias


def fold_in_conv_dtype(conv, bn) -> dict[str, mx.array]:
    """The default derivation: ``conv`` with ``bn`` folded in, {weight, bias[, winograd]} in the conv's dtype."""
    weight, bias = fold_batch_norm(conv, bn)
    dtype = conv.weight.dtype
    return with_winograd(conv, {"weight": weight.astype(dtype), "bias": bias.astype(dtype)})


def with_winograd(conv, arrays: dict[str, mx.array], form: winograd.Form | None = None) -> dict[str, mx.array]:
    """``arrays`` (a derived weight and bias of ``conv``) with, where ``conv`` may run as Winograd's
    form (zoo.kernels.winograd.preferred), the weight transformed for ``form`` (default
    winograd.GPU_FORM) as "winograd"."""
    weight = arrays["weight"]
    if winograd.preferred(weight.dtype, weight.shape, conv.stride, conv.padding, conv.groups, conv.dilation):
        arrays["winograd"] = winograd.transform_weight(weight, form or winograd.GPU_FORM)
    return arrays


def folding() -> bool:
    """Inside a compiled forward that derives arrays from its convolutions (``folded``): modules may
    hand each other forms the eager network does not have (models/yolov8's half-size Upsample)."""
    return getattr(_tracing, "folds", None) is not None


def folded(conv) -> dict[str, mx.array] | None:
    """Inside a compiled forward that derives arrays from ``conv`` (FoldedConvs): those arrays (the
    trace's inputs; a fold's are {weight, bias}); else None."""
    folds = getattr(_tracing, "folds", None)
    return None if folds is None else folds.arrays.get(id(conv))


class Structure:
    """Where each module a forward reads sits (its container and key) and how many modules each list or
    Sequential holds, when the forward was built: a module set in place of another since (a BatchNorm
    inside a block, a block of a stage) would leave the traces and folds running the one they were made
    with, a wrong answer. Checked on every call, by identity, in C."""

    def __init__(self, roots):
        self.containers, self.keys, self.children, self.paths = [], [], [], []
        self.sized: list = []  # lists and Sequentials of modules, whose lengths are checked
        for root in roots:
            self._walk(root, type(root).__name__)
        self.sizes = list(map(len, self.sized))
        # modules read by dict's own __getitem__ in C (a subclass's, as zoo's Sequential's int indexing, ran in
        # Python: 67 us a call for a YOLOv8n, 216 for LaMa), lists and tuples by theirs
        by_kind = {kind: [i for i, c in enumerate(self.containers) if isinstance(c, dict) == (kind is dict)]
                   for kind in (dict, list)}
        self.lookups = [(dict.__getitem__ if kind is dict else operator.getitem, [self.containers[i] for i in picked],
                         [self.keys[i] for i in picked], [self.children[i] for i in picked])
                        for kind, picked in by_kind.items()]

    def _walk(self, container, path: str) -> None:
        items = list(container.items() if isinstance(container, dict) else enumerate(container))
        holds = False
        for key, value in items:
            if isinstance(value, (nn.Module, list, tuple)) and _holds_modules(value):
                holds = True
                self.containers.append(container)
                self.keys.append(key)
                self.children.append(value)
                self.paths.append(f"{path}.{key}")
                self._walk(value, f"{path}.{key}")
        digits = all(isinstance(k, str) and k.isdigit() for k, _ in items)  # a Sequential's children
        if holds and (isinstance(container, (list, tuple)) or digits):
            self.sized.append(container)

    def changed(self) -> str | None:
        """The path of a module replaced since (or of a list or Sequential resized), or None."""
        try:
            same = all(all(map(operator.is_, map(get, containers, keys), children))
                       for get, containers, keys, children in self.lookups)
        except (KeyError, IndexError):
            same = False
        if same and list(map(len, self.sized)) == self.sizes:
            return None
        for container, key, child, path in zip(self.containers, self.keys, self.children, self.paths):
            try:
                if container[key] is not child:
                    return path
            except (KeyError, IndexError):
                return path
        return "a list or Sequential of modules"


def _holds_modules(value) -> bool:
    if isinstance(value, nn.Module):
        return True
    return any(_holds_modules(v) for v in value if isinstance(v, (nn.Module, list, tuple)))


class Stage(NamedTuple):
    """A part of a compiled forward: ``fn`` maps the previous stage's outputs (spread when a
    tuple; the forward's arguments for the first stage) to its own, reading the arrays of
    ``modules`` only."""

    fn: Callable
    modules: list


class CompiledForward:
    """``fn`` (a forward of ``modules``) compiled once per input signature.

    ``fn`` takes trees of arrays and constants (ints, floats, strings, None) and returns
    a tree of arrays; ``modules`` are the modules whose arrays it reads; ``folds`` the
    (conv, partner[, make]) entries whose derived arrays the compiled forward uses (``folded``). Calls with tracer
    inputs (inside a caller's own ``mx.compile``/``vmap``/``grad``) trace ``fn`` as it is.

    ``stages`` (optional): ``fn`` as a chain of Stages, each compiled apart, for the signatures
    ``staged(*args)`` accepts (default: all). On MLX's CUDA backend each stage's outputs are
    scheduled before the next stage's graph is built, so the GPU runs one stage while the host
    builds the next: MLX rebuilds a compiled graph on every call (about 1 ms for YOLOv8's), which
    the GPU otherwise waits out. Each stage costs the host about 0.1 ms, so small inputs run
    whole (docs/speed-gpu.md).

    ``cap_floor=False``: the memory cap at the forward's least memory however small (no ``CAP_FLOOR``),
    for a forward whose waits under it cost no time.

    ``parts``: a callable giving the (folds, stages) afresh: a module set in place of one of
    ``modules``' submodules after the forward was built (``Structure``) builds them again. Without it
    such a change makes the forward run uncompiled from then on, said in one line: eager, the results
    are the network's.

    ``prepare``: maps the call's arguments to those the traces take, before their signature: the
    network's own input boundary where it takes what a trace cannot (a numpy image, made an mx.array
    in the model's dtype).

    ``owner``: whose lock (zoo.concurrency) each call holds, the first module by default (a SAM model's
    networks: the model, whose predictor's calls hold it too).
    """

    def __init__(self, fn: Callable, modules, max_traces: int = MAX_TRACES, folds=(), stages=(),
                 staged: Callable[..., bool] | None = None, cap_floor: bool = True,
                 parts: Callable[[], tuple] | None = None, prepare: Callable[..., tuple] | None = None,
                 owner=None):
        self.fn = fn
        self.signature = inspect.signature(fn)
        self.prepare = prepare
        self.cap_floor = cap_floor
        self.modules = modules
        self.roots = [m for m in (modules if isinstance(modules, (list, tuple)) else [modules])
                      if isinstance(m, nn.Module)]
        self.owner = owner if owner is not None else self.roots[0] if self.roots else self
        self.max_traces = max_traces
        self.traces: OrderedDict = OrderedDict()
        self.staged = staged or (lambda *args: True)
        self.parts = parts
        self._build(*(parts() if parts else (folds, stages)))

    def _build(self, folds, stages) -> None:
        """The folds, the stages and the structure they were made for; no trace."""
        self.traces.clear()
        self.folds = FoldedConvs(folds)
        self.whole = [(Stage(self.fn, self.modules), self.folds.arrays)]
        # each stage's trace reads only its own arrays: handing every stage the whole model's cost
        # 130 us per call and stage for YOLOv8n (2-core CPU)
        self.stages = [(stage, self.folds.within(stage.modules)) for stage in stages] or self.whole
        outside = set(self.folds.pairs) - {key for _, arrays in self.stages for key in arrays}
        if outside:
            raise ValueError(f"{len(outside)} folded convolutions are in no stage's modules")
        self.structure: Structure | None = Structure(self.roots)

    def __call__(self, *args, **kwargs):
        if kwargs:  # the traces are keyed by position: keywords are bound to theirs, defaults filled in
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            args = bound.args
        release_mlx_at_thread_exit()
        # calls take turns (zoo.concurrency): the traces, folds and derived weights are the model's, shared by
        # threads; two threads at once in a trace crashed the process (a segfault in 4 of 5 runs)
        with lock_of(self.owner):
            return self._call(*args)

    def _call(self, *args):
        if not enabled():
            return self.fn(*args)
        if self.prepare is not None:
            args = self.prepare(*args)
        if self.structure is not None and (replaced_at := self.structure.changed()) is not None:
            if self.parts is not None:
                self._build(*self.parts())
            else:
                self.structure = None
                self.traces.clear()
                print(f"note: {replaced_at} was set in place of the module this model was built with: its forward "
                      "runs uncompiled from now on (the same results, slower); load the model again to compile it",
                      file=sys.stderr)
        # _training read directly: through the property it was 40 us per call for YOLOv8n (2-core CPU)
        if self.structure is None or any(map(_TRAINING, self.roots)) or any(map(_TRAINING, self.folds.modules)):
            # in training mode its BatchNorms update their running statistics: a trace would leave them tracers
            return self.fn(*args)
        folding = self.folds.usable()
        if folding:
            self.folds.refresh()
        key = (folding, _signature(args))
        traced, least = self.traces.pop(key, (None, None))
        new = traced is None
        if new:
            if len(self.traces) >= self.max_traces:
                self.traces.popitem(last=False)  # frees that trace's compiled graph
            # new function objects per signature: mx.compile caches by the function's identity
            parts = self.stages if self.staged(*args) else self.whole
            traced = [mx.compile(self._tracer(stage.fn, folding), inputs=[stage.modules, arrays if folding else {}])
                      for stage, arrays in parts]
            inputs = arrays_in([self.roots, self.folds.arrays])
        try:
            out = self._run(traced, key, least, folding, args)
        except BaseException:
            if new:  # a trace that raised left mx.compile's inputs as its tracers: every later call failed
                for container, name, array in inputs:
                    container[name] = array
            raise
        if new and folding:
            self.folds.retraced()
        return out

    def _run(self, traced: list, key: tuple, least: int | None, folding: bool, args: tuple):
        """The traced stages on ``args``, scheduled under the memory cap; the trace kept under ``key``."""
        def run(schedule):
            out = traced[0](*args)
            for stage in traced[1:]:
                schedule(out)
                out = stage(*out) if isinstance(out, tuple) else stage(out)
            return out

        if capping() and least is None:
            # traced first: the arrays a trace makes (constants it holds) are not the forward's
            # memory, nor are the folded weights made on this call (inputs, evaluated first)
            out = run(_lazy)
            least = least_memory((args, self.folds.arrays if folding else {}), out)
        elif capping():
            out = schedule_capped(run, max(int(memory_factor() * least), CAP_FLOOR if self.cap_floor else 0))
        else:
            out = run(_schedule if cuda_backend() else _lazy)
        self.traces[key] = (traced, least)
        return out

    def _tracer(self, fn: Callable, folding: bool) -> Callable:
        def trace(*args):
            _tracing.folds = self.folds if folding else None
            try:
                return fn(*args)
            finally:
                _tracing.folds = None
        return trace

    def clear(self) -> None:
        self.traces.clear()


@contextlib.contextmanager
def eager():
    """Run every CompiledForward (and any mx.compile'd function) eagerly inside the block."""
    global _eager_depth
    _eager_depth += 1
    mx.disable_compile()
    try:
        yield
    finally:
        mx.enable_compile()
        _eager_depth -= 1
