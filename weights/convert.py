"""Checkpoint (PyTorch layout) -> MLX model: layouts converted once, keys matched strictly.

The only place that knows PyTorch's and MLX's tensor layouts:
  Conv1d/2d weight     (out, in/groups, *k)  -> (out, *k, in/groups)
  ConvTranspose2d      (in, out/groups, kH, kW) -> (out, kH, kW, in)
Everything else (Linear, norms, embeddings) has the same layout in both.
The layout is chosen by the type of the MLX module that owns the parameter,
so no model needs its own conversion code.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_map_with_path

from zoo.errors import ZooError

# Bookkeeping tensors that torch saves and no forward pass reads.
TORCH_ONLY_SUFFIXES = (".num_batches_tracked",)


def _owners(model: nn.Module) -> dict[str, nn.Module]:
    return {name: module for name, module in model.named_modules()}


def to_mlx_layout(value: np.ndarray, owner: nn.Module) -> np.ndarray:
    if isinstance(owner, (nn.ConvTranspose1d, nn.ConvTranspose2d)) and value.ndim >= 3:
        return np.moveaxis(value, 0, -1)
    if isinstance(owner, (nn.Conv1d, nn.Conv2d)) and value.ndim >= 3:
        return np.moveaxis(value, 1, -1)
    return value


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return f"{len(names)} ({shown}{', ...' if len(names) > limit else ''})"


def mismatch(source: str, model_name: str, missing: list[str], unexpected: list[str], misshaped: list[str]) -> str:
    """The one line that says how the weights in ``source`` differ from the model's."""
    parts = [f"{label} {_listing(items)}" for label, items in
             (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped)) if items]
    return f"weights {source} do not match {model_name}: " + "; ".join(parts) + ": pass the checkpoint of this model variant"


def load_state_dict(model: nn.Module, state_dict: dict[str, np.ndarray], source: str, dtype: mx.Dtype = mx.float32,
                    model_name: str | None = None, kept: set[str] = frozenset()) -> None:
    """Load a checkpoint into ``model`` strictly, converting layouts and dtype once.

    Missing, unexpected and mis-shaped keys are all reported in one error.
    ``kept``: parameters that are not in the checkpoint on purpose (a new head):
    they keep the model's values, cast to ``dtype``.
    """
    expected = dict(tree_flatten(model.parameters()))
    owners = _owners(model)
    params, unexpected, misshaped, nonfinite = {}, [], [], []
    for name, value in state_dict.items():
        if name not in expected:
            if not name.endswith(TORCH_ONLY_SUFFIXES):
                unexpected.append(name)
            continue
        owner = owners.get(name.rpartition(".")[0], model)
        value = to_mlx_layout(np.asarray(value), owner)
        if tuple(value.shape) != tuple(expected[name].shape):
            misshaped.append(f"{name} {tuple(value.shape)} vs model {tuple(expected[name].shape)}")
            continue
        if value.dtype.kind == "f" and not np.isfinite(value).all():  # a diverged training run's last.pt
            nonfinite.append(name)
        params[name] = mx.array(value.astype(np.float32, copy=False)).astype(dtype)
    for name in kept:
        params[name] = expected[name].astype(dtype)
    missing = sorted(set(expected) - set(state_dict) - set(kept))
    if missing or unexpected or misshaped:
        raise ZooError(mismatch(source, model_name or type(model).__name__, missing, unexpected, misshaped))
    if nonfinite:  # loaded, the model ran to no detection or one class for every image, without a word
        raise ZooError(f"weights {source}: {_listing(nonfinite)} hold NaN or infinite values (a training run that "
                       "diverged saves such weights): pass a checkpoint of finite weights (an earlier epoch's)")
    # rebuilt along the model's own tree: tree_unflatten would turn the "0", "1"
    # children of a torch-named Sequential into a list the module cannot take
    model.update(tree_map_with_path(lambda path, _: params[path], model.parameters()))
    mx.eval(model.parameters())
