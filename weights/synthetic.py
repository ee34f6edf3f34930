"""Deterministic random weights in a checkpoint's own layout.

Parity and speed do not depend on trained weights, so validation and
benchmarks run fully offline with these. The recipe is the one the reference
cases in shared/reference were computed with, so ``synthetic:0`` reproduces
their weights exactly: for the i-th name in sorted order, a generator seeded
with ``[seed, i]`` draws BN variances in U(0.5, 1.5), means in N(0, 0.1),
1-D weights in U(0.5, 1.5), biases in N(0, 0.1), tensors of 2+ dims in
N(0, 1/sqrt(fan_in)), anything else in N(0, 0.1); integer tensors are zero.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from zoo.errors import ZooError


def read_manifest(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) in the upstream checkpoint's naming and layout."""
    with open(path) as f:
        params = json.load(f)["params"]
    return {name: (tuple(shape), dtype) for name, (shape, dtype) in params.items()}


def synthetic_state_dict(manifest: dict[str, tuple[tuple[int, ...], str]], seed: int) -> dict[str, np.ndarray]:
    out = {}
    for i, name in enumerate(sorted(manifest)):
        shape, dtype = manifest[name]
        rng = np.random.default_rng([seed, i])
        if np.dtype(dtype).kind in "iub":
            out[name] = np.zeros(shape, np.dtype(dtype))
            continue
        if name.endswith("running_var"):
            a = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("running_mean"):
            a = rng.normal(0.0, 0.1, shape)
        elif len(shape) == 1 and name.endswith("weight"):
            a = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("bias"):
            a = rng.normal(0.0, 0.1, shape)
        elif len(shape) >= 2:
            a = rng.normal(0.0, 1.0 / math.sqrt(max(1, math.prod(shape[1:]))), shape)
        else:
            a = rng.normal(0.0, 0.1, shape)
        out[name] = np.asarray(a, dtype=np.float32)
    return out


def parse_synthetic(weights: str) -> int | None:
    """The seed of a ``synthetic[:SEED]`` weights argument, or None if it is not one."""
    if weights != "synthetic" and not weights.startswith("synthetic:"):
        return None
    seed = weights.partition(":")[2] or "0"
    if not seed.isdigit():
        raise ZooError(f"bad weights {weights!r}: use synthetic or synthetic:SEED with an integer SEED")
    return int(seed)


def warn_synthetic(seed: int) -> None:
    print(
        f"WARNING: synthetic weights (seed {seed}): random values in the checkpoint's layout; "
        "outputs are meaningless (fine for parity checks and benchmarks)",
        file=sys.stderr,
    )
