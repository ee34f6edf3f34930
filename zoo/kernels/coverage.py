"""Which implementation each op ran, for whoever listens (the validator's coverage matrix).

The dispatch points (zoo.kernels.cpu, the GPU kernels, zoo.models.layers) call ``note(op, impl)``
when they choose; with no listener that is one empty-list check. Kernels and models know
nothing of the listener.
"""
from __future__ import annotations

import contextlib

CUSTOM_KERNEL = "custom kernel"  # zoo.kernels' own Metal/CUDA kernel
CPU_FORM = "CPU form"  # zoo.kernels.cpu's C routine or OpenBLAS-shaped rewrite
MLX_OP = "MLX op"  # MLX's own op (the fallback, or the op itself where there is no other form)

_listeners: list = []


def note(op: str, impl: str) -> None:
    for listener in _listeners:
        listener(op, impl)


@contextlib.contextmanager
def listening(callback):
    """Call ``callback(op, impl)`` for every note made inside the block."""
    _listeners.append(callback)
    try:
        yield
    finally:
        _listeners.remove(callback)
