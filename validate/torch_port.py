"""A port against its PyTorch original (``zoo.validate.compare_torch``).

PyTorch's side is recorded once with forward hooks, on the CPU in float64, into the same
``modules.Reference`` that ``compare``'s own reference pass fills; the MLX model is then judged
against it by ``modules.test_pass``. Everything but ``record_torch`` works on recorded arrays and
needs no torch: renaming PyTorch paths to MLX ones (``renamer``), pairing the layers and listing
the unpaired ones (``pair``, ``unpaired_rows``), each value's layout (``aligner``: NCHW -> NHWC
where the shapes say so) and the weights' (``parameter_report``, with zoo.weights.convert's
Conv/ConvTranspose layouts).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from zoo.errors import UsageError
from zoo.validate import engine
from zoo.validate.capture import tree_leaves
from zoo.validate.modules import Reference, ReferenceCall, host

LAYOUTS = ("auto", "channels-last", "same")


@dataclass
class Recorded:
    """PyTorch's pass: module path -> its calls in order, the model's output, its weights (float64)."""

    calls: dict = field(default_factory=dict)
    output: ReferenceCall | None = None
    parameters: dict = field(default_factory=dict)


def renamer(name_map):
    """PyTorch path -> MLX path (or None: not paired). ``name_map``: None, a function, or a dict of
    path prefixes (matched on dot boundaries, the longest first) to their MLX names."""
    if name_map is None:
        return lambda path: path
    if callable(name_map):
        def checked(path: str) -> str | None:  # an int or a tuple from it paired nothing, without a word
            new = name_map(path)
            if new is not None and not isinstance(new, str):
                raise UsageError(f"name_map({path!r}) returned {type(new).__name__} {new!r}: return the MLX path "
                                 "(a str), or None to leave the layer unpaired")
            return new

        return checked
    if not isinstance(name_map, dict) or not all(isinstance(k, str) and isinstance(v, (str, type(None)))
                                                 for k, v in name_map.items()):
        raise UsageError("name_map: pass a dict of PyTorch path prefixes to MLX ones (e.g. {'features': 'layers'}) "
                         "or a function path -> path")
    prefixes = sorted(name_map, key=len, reverse=True)

    def rename(path: str) -> str | None:
        for prefix in prefixes:
            if path == prefix or path.startswith(prefix + ".") or not prefix:
                new = name_map[prefix]
                if new is None:
                    return None
                rest = path[len(prefix):].lstrip(".")
                return ".".join(p for p in (new, rest) if p)
        return path

    return rename


def channels_last(a: np.ndarray) -> np.ndarray:
    return np.moveaxis(a, 1, -1)


def aligner(layout):
    """``align(ref, shape, name) -> (ref as the MLX value of ``shape`` holds it, note or None)`` for
    ``layout`` ("auto", "channels-last", "same" or a dict of fnmatch patterns of MLX paths -> one of
    them); ValueError when no layout maps the PyTorch shape onto the MLX one."""
    rules = layout if isinstance(layout, dict) else {"*": layout}
    for value in rules.values():
        if value not in LAYOUTS:
            raise UsageError(f"layout {value!r}: use {', '.join(LAYOUTS)} (or a dict of MLX path patterns to them)")

    def align(ref: np.ndarray, shape: tuple, name: str):
        rule = next((v for p, v in rules.items() if fnmatch.fnmatchcase(name, p)), "auto")
        moved = channels_last(ref) if ref.ndim >= 3 else None
        as_is = ref.shape == shape
        fits = moved is not None and moved.shape == shape
        if rule == "same" and as_is or rule == "channels-last" and fits:
            return (ref if rule == "same" else moved), None
        if rule == "auto":
            if as_is and fits and ref.ndim >= 4 and not np.array_equal(ref, moved):
                return moved, "layout ambiguous: taken as NCHW -> NHWC"
            if as_is and fits and not np.array_equal(ref, moved):  # (B, N, C) tokens, or a Conv1d's NCL with N == C
                return ref, "layout ambiguous: taken as it is (pass layout='channels-last' for NCL)"
            if as_is:
                return ref, None
            if fits:
                return moved, None
        raise ValueError(f"shape {shape} vs PyTorch {ref.shape}: no layout ({rule}) maps one onto the other")

    return align


def torch_inputs(inputs: tuple, layout) -> list:
    """The MLX model's inputs as PyTorch takes them: floating 4-D arrays NHWC -> NCHW unless ``layout`` is "same";
    with "channels-last", every floating array of 3 or more axes channels-first (a Conv1d's NLC -> NCL)."""
    def one(value):
        lowest = 3 if layout == "channels-last" else 4
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim >= lowest and layout != "same":
            return np.ascontiguousarray(np.moveaxis(value, -1, 1))
        return value

    return [one(v) for v in inputs]


def record_torch(torch_model, inputs: list, dtype: mx.Dtype, keep_inputs: bool) -> Recorded:
    """PyTorch's pass on the CPU in ``dtype`` (float64 or float32) on a copy of ``torch_model`` in
    eval mode, every named module's calls recorded with hooks: output, and inputs if ``keep_inputs``."""
    import copy

    try:
        import torch
    except ImportError:
        raise UsageError("compare_torch needs PyTorch: pip install torch (zoo itself does not)") from None

    if not isinstance(torch_model, torch.nn.Module):
        raise UsageError(f"compare_torch's second argument must be a torch.nn.Module, got {type(torch_model).__name__}")
    torch_dtype = torch.float64 if dtype == mx.float64 else torch.float32
    model = copy.deepcopy(torch_model).to(device="cpu", dtype=torch_dtype).eval()
    recorded = Recorded()
    pending: dict[str, list] = {}

    def to_host(value, as_dtype):
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            if value.is_complex():
                return np.stack([value.real.numpy(), value.imag.numpy()], -1).astype(as_dtype)
            return value.numpy().astype(as_dtype) if value.is_floating_point() else value.numpy()
        return value

    def leaves(value, as_dtype):
        return {p: to_host(v, as_dtype) for p, v in tree_leaves(value) if isinstance(v, torch.Tensor)}

    def before(name):
        def hook(module, args, kwargs):
            pending.setdefault(name, []).append(leaves((args, kwargs), np.float32) if keep_inputs else None)
        return hook

    def after(name):
        def hook(module, args, kwargs, output):
            entry = ReferenceCall(leaves(output, np.float64), pending[name].pop())
            recorded.calls.setdefault(name, []).append(entry)
        return hook

    handles = []
    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_pre_hook(before(name), with_kwargs=True))
            handles.append(module.register_forward_hook(after(name), with_kwargs=True))
    tensors = [torch.from_numpy(np.ascontiguousarray(v)).to(torch_dtype if v.dtype.kind == "f" else None)
               if isinstance(v, np.ndarray) else v for v in inputs]
    try:
        with torch.no_grad():
            out = model(*tensors)
    except Exception as e:  # the inputs do not fit the original: one line, with what it was given
        given = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" if isinstance(t, torch.Tensor)
                          else type(t).__name__ for t in tensors)
        raise UsageError(f"the PyTorch model raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
                         f"(given {given}): it gets the MLX model's inputs, floating 4-D ones as NCHW; pass "
                         "layout='channels-last' for channels-first 3-D inputs too (Conv1d), 'same' for none") from None
    finally:
        for handle in handles:
            handle.remove()
    recorded.output = ReferenceCall(leaves(out, np.float64))
    recorded.parameters = {k: to_host(v, np.float64) for k, v in model.state_dict().items()}
    return recorded


def pair(recorded: Recorded, mlx_paths: list[str], rename) -> tuple[Reference, list[str]]:
    """The PyTorch calls under their MLX paths, and the PyTorch paths with no MLX module."""
    known = set(mlx_paths)
    reference = Reference(output=recorded.output)
    unpaired = []
    for path, calls in recorded.calls.items():
        target = rename(path)
        if target in known and target not in reference.calls:
            reference.calls[target] = calls
        else:
            unpaired.append(path)
    return reference, unpaired


def unpaired_rows(unpaired: list[str]) -> list[engine.LayerResult]:
    return [engine.LayerResult(path, (), status="n/a", flags=["PyTorch layer with no MLX module of its name (name_map)"])
            for path in unpaired]


def parameter_report(parameters: dict, mlx_model, rename, dtype: str) -> engine.ModeReport:
    """Every PyTorch weight against the MLX parameter it pairs with, in MLX's layout (mode "parameters")."""
    from mlx.utils import tree_flatten

    from zoo.devices import DTYPES, dtype_name
    from zoo.weights.convert import TORCH_ONLY_SUFFIXES, to_mlx_layout

    mine = dict(tree_flatten(mlx_model.parameters()))
    owners = dict(mlx_model.named_modules())
    rows, paired, meant = [], set(), False  # meant: a weight name_map did not drop on purpose (None)
    for torch_name, value in parameters.items():
        if torch_name.endswith(TORCH_ONLY_SUFFIXES) or not isinstance(value, np.ndarray):
            continue
        target = rename(torch_name)
        meant = meant or target is not None
        if target not in mine:
            rows.append(engine.LayerResult(torch_name, value.shape, status="n/a",
                                           flags=["PyTorch weight with no MLX parameter of its name (name_map)"]))
            continue
        paired.add(target)
        got = mine[target]
        kind = dtype_name(got.dtype) if got.dtype in DTYPES.values() else "float32"
        value = to_mlx_layout(value, owners.get(target.rpartition(".")[0], mlx_model))
        result = engine.compare(target, value, host(got), engine.TOLERANCES[kind]["isolated"],
                                got.dtype if got.dtype in DTYPES.values() else mx.float32)
        if target != torch_name:
            result.flags.append(f"PyTorch {torch_name}")
        rows.append(result)
    rows += [engine.LayerResult(n, tuple(v.shape), status="n/a", flags=["MLX parameter with no PyTorch weight"])
             for n, v in mine.items() if n not in paired]
    if mine and meant and not paired:  # rows of n/a alone passed: no weight compared
        rows.insert(0, engine.LayerResult("parameters", (), status="FAIL", flags=[
            "no PyTorch weight pairs with an MLX parameter: pass name_map= mapping PyTorch paths to the MLX model's"]))
    return engine.ModeReport("parameters", engine.TOLERANCES["float32"]["isolated"], rows, dtype)
