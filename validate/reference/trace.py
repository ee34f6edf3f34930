"""Records every module's output under its upstream name, like forward hooks.

``Trace(name, fn, *inputs)`` runs one module of the reference forward pass.
End-to-end mode: the reference runs on its own activations. Isolated mode
(``feed`` given): a module whose inputs the other implementation recorded is
run on *those* inputs instead, so each layer is judged on its own and a wrong
op shows up at exactly that layer.
"""
from __future__ import annotations

import numpy as np


def leaves(tree) -> list:
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in leaves(item)]
    return [tree]


def _same_shapes(a, b) -> bool:
    la, lb = leaves(a), leaves(b)
    return len(la) == len(lb) and all(
        np.shape(x) == np.shape(y) for x, y in zip(la, lb) if isinstance(x, np.ndarray) or isinstance(y, np.ndarray)
    )


class Trace:
    def __init__(self, feed: dict | None = None):
        self.outputs: dict[str, object] = {}
        self.feed = feed or {}
        self.fed: set[str] = set()

    def __call__(self, name: str, fn, *inputs):
        fed = self.feed.get(name)
        if fed is not None and _same_shapes(tuple(fed), inputs):
            inputs = tuple(fed)
            self.fed.add(name)
        out = fn(*inputs)
        self.outputs[name] = out
        return out
