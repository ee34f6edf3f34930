"""Compiled inference: a network's forward through ``mx.compile``, one trace per input signature.

Every user path (``model(x)``, ``predict``, ``set_image``/``predict``, ``inpaint``, the
CLIs) calls its network through a ``CompiledForward``. ``mx.compile`` fuses the
element-wise chains between the convolutions and matmuls (BatchNorm + activation,
residual adds, GELU, ...) into single GPU kernels (on an H100, float16, ResNet-50 at
batch 1 went from 1.17x to 0.51x PyTorch's time: benchmarks/README.md).

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
- The validator records every layer with eager modules: ``mx.disable_compile()`` (or
  calling ``eager``) turns every ``CompiledForward`` into a plain call.
"""
from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from typing import Callable

import mlx.core as mx

from zoo.errors import ZooError

ENV_VAR = "ZOO_COMPILE"
MODES = ("auto", "on", "off")
MAX_TRACES = 8


def mode() -> str:
    value = os.environ.get(ENV_VAR, "auto").lower() or "auto"
    if value not in MODES:
        raise ZooError(f"{ENV_VAR}={value!r}: use one of {', '.join(MODES)}")
    return value


def enabled() -> bool:
    """Whether a CompiledForward compiles now (``ZOO_COMPILE`` and the default device)."""
    chosen = mode()
    if chosen == "auto":
        return mx.default_device() == mx.gpu
    return chosen == "on"


def _signature(value):
    """Hashable description of an argument tree: arrays by shape and dtype, constants by value."""
    if isinstance(value, mx.array):
        return ("array", tuple(value.shape), value.dtype)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *((k, _signature(v)) for k, v in sorted(value.items())))
    return value


class CompiledForward:
    """``fn`` (a forward of ``modules``) compiled once per input signature.

    ``fn`` takes trees of arrays and constants (ints, floats, strings, None) and returns
    a tree of arrays; ``modules`` are the modules whose arrays it reads. Calls with
    tracer inputs (inside a caller's own ``mx.compile``/``vmap``/``grad``) trace ``fn``
    as it is.
    """

    def __init__(self, fn: Callable, modules, max_traces: int = MAX_TRACES):
        self.fn = fn
        self.modules = modules
        self.max_traces = max_traces
        self.traces: OrderedDict = OrderedDict()

    def __call__(self, *args):
        if not enabled():
            return self.fn(*args)
        key = _signature(args)
        traced = self.traces.pop(key, None)
        if traced is None:
            if len(self.traces) >= self.max_traces:
                self.traces.popitem(last=False)  # frees that trace's compiled graph
            # a new function object per signature: mx.compile caches by the function's identity
            traced = mx.compile(lambda *a: self.fn(*a), inputs=self.modules)
        self.traces[key] = traced
        return traced(*args)

    def clear(self) -> None:
        self.traces.clear()


@contextlib.contextmanager
def eager():
    """Run every CompiledForward (and any mx.compile'd function) eagerly inside the block."""
    mx.disable_compile()
    try:
        yield
    finally:
        mx.enable_compile()
