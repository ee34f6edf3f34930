"""Layer parity: the MLX model against the numpy reference, module by module.

Modes:
  end-to-end  both sides run on their own activations: shows where error grows.
  isolated    each reference module is fed the MLX side's input for that
              module: pins a wrong op to exactly its layer.

Per layer: shape, max abs error, relative error (max abs error / max |ref|:
relative to the layer's magnitude, so near-zero elements cannot blow it up),
cosine similarity, NaN/Inf/all-zero flags, pass/fail against a tolerance that
depends on the dtype and mode (docs/validation.md says why).
"""
from __future__ import annotations

import fnmatch
import importlib
import math
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from zoo import devices
from zoo.blas import return_freed_memory
from zoo.compiled import eager
from zoo.errors import ZooError
from zoo.kernels.coverage import MLX_OP
from zoo.validate.capture import recording, tree_leaves
from zoo.validate.reference import ops
from zoo.validate.reference.trace import Trace

MODES = ("end-to-end", "isolated")

# Relative error bound (max abs error / max |ref|) per dtype and mode. The
# reference runs in float64. float32's unit roundoff is 6e-8, float16's 4.9e-4,
# bfloat16's 3.9e-3; a layer's error is a few roundoffs of its inputs, weights
# and accumulation, and end-to-end it compounds over the depth of the network.
TOLERANCES = {
    "float32": {"isolated": 1e-4, "end-to-end": 1e-4},
    "float16": {"isolated": 1e-2, "end-to-end": 5e-2},
    "bfloat16": {"isolated": 5e-2, "end-to-end": 2e-1},
}


@dataclass
class LayerResult:
    name: str
    shape: tuple
    max_abs: float = math.nan
    rel: float = math.nan
    cosine: float = math.nan
    flags: list = field(default_factory=list)
    status: str = "pass"  # pass | FAIL | n/a

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"


@dataclass
class ModeReport:
    mode: str
    tolerance: float
    layers: list[LayerResult]
    dtype: str = "float32"
    heatmaps: dict = field(default_factory=dict)  # failing layer -> 2-D error map (error_map)
    coverage: list = field(default_factory=list)  # coverage_rows of the MLX pass
    atol: float = 0.0  # a layer also passes with max abs err <= atol + tolerance x max |ref|

    @property
    def bound(self) -> str:
        """The pass rule in words, as the tables and summaries print it."""
        if self.atol > 0:
            return f"max abs err <= {self.atol:g} + {self.tolerance:g} x max |ref|"
        return f"rel err <= {self.tolerance:g}"

    @property
    def first_failure(self) -> str | None:
        return next((r.name for r in self.layers if r.failed), None)

    @property
    def passed(self) -> bool:
        return self.first_failure is None

    @property
    def compared(self) -> list[LayerResult]:
        """The layers both sides have (status not n/a)."""
        return [r for r in self.layers if r.status != "n/a"]

    @property
    def worst(self) -> LayerResult | None:
        """The compared layer with the largest rel err (NaN counts as the largest)."""
        return max(self.compared, key=lambda r: r.rel if not math.isnan(r.rel) else math.inf, default=None)


def case_module(family: str):
    try:
        return importlib.import_module(f"zoo.validate.cases.{family}")
    except ModuleNotFoundError:
        raise ZooError(f"no parity case for the {family} family yet") from None


def _to_numpy(value, nhwc: bool):
    """MLX value -> float64 numpy in the reference's layout (NHWC -> NCHW for 4-D)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_to_numpy(v, nhwc) for v in value)
    if not isinstance(value, mx.array):
        return value
    a = np.array(value.astype(mx.float32) if mx.issubdtype(value.dtype, mx.floating) else value)
    if nhwc and a.ndim == 4:
        a = a.transpose(0, 3, 1, 2)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def _flatten(name: str, value) -> dict[str, object]:
    """Tuple outputs become name/0, name/1, ...; dicts name/key, dataclasses name/field."""
    return {name + path: leaf for path, leaf in tree_leaves(value)}


def compare(name: str, ref: np.ndarray, got: np.ndarray, tol: float, dtype: mx.Dtype = mx.float32,
            atol: float = 0.0, reference_fed: bool = False) -> LayerResult:
    """One layer's figures; ``dtype``: the MLX value's, whose range the reference may exceed. It
    passes with no flag and max abs error <= ``atol`` + ``tol`` x max |ref| (rel err <= tol at atol 0).
    ``reference_fed``: the reference ran on the MLX side's inputs (the family validator's isolated mode), so
    its NaN may be the MLX side's passed on, and NaN on both sides is no fault of this layer."""
    # integers and booleans (class indices, token ids, masks) are right or wrong: a relative bound
    # would pass class 40 for class 48 (rel err 0.17 < bfloat16's 0.2)
    exact = np.asarray(got).dtype.kind in "biu"
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    if ref.shape != got.shape:
        return LayerResult(name, got.shape, flags=[f"shape {got.shape} vs ref {ref.shape}"], status="FAIL")
    result = LayerResult(name, ref.shape)
    if exact and (differing := int(np.count_nonzero(got != ref))):
        result.flags.append(f"{differing} of {got.size} integer values differ")
    bad_ref = ~np.isfinite(ref)
    # element by element: the figures below leave out every non-finite element, so a NaN elsewhere in the
    # reference must not excuse one here (an MLX NaN or +inf where the reference is finite or -inf)
    nan_got, inf_got = np.isnan(got), np.isinf(got)
    if nan_got.any() and not np.isnan(ref[nan_got]).all():
        result.flags.append("NaN")
    # a NaN of the reference is no value to agree with: matched or not, nothing of it was checked (a model
    # whose every value is NaN on both sides compared no element, and passed with rel err 0)
    if not reference_fed and (nan_ref := int(np.count_nonzero(np.isnan(ref)))):
        result.flags.append(f"{nan_ref} of {ref.size} reference values NaN")
    if inf_got.any() and (got[inf_got] != ref[inf_got]).any():
        result.flags.append("Inf")
    if got.size and not got.any() and ref.any():
        result.flags.append("all-zero")
    finite_ref = ref[~bad_ref] if bad_ref.any() else ref
    peak = float(max(finite_ref.max(), -finite_ref.min())) if finite_ref.size else 0.0
    del finite_ref
    largest = float(mx.finfo(dtype).max)
    if peak > largest:  # no model holds this layer in this dtype: the weights or the input, not a wrong op
        result.flags.append(f"ref {peak:.3g} beyond {str(dtype).split('.')[-1]}'s {largest:.5g}")
    finite = ~bad_ref & np.isfinite(got)
    # the finite elements in C order; without a copy when all are (a layer of MobileSAM's first
    # stage is 134 MB in float64: every temporary here counts in the run's peak memory)
    a, b = (got.ravel(), ref.ravel()) if finite.all() else (got[finite], ref[finite])
    del finite, bad_ref
    diff = np.subtract(a, b)
    np.abs(diff, out=diff)
    result.max_abs = float(diff.max()) if diff.size else 0.0
    del diff
    scale = float(max(b.max(), -b.min())) if b.size else 0.0  # max |ref|, no |ref| copy
    result.rel = result.max_abs / scale if scale > 0 else (0.0 if result.max_abs == 0 else math.inf)
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    result.cosine = float(a @ b / denom) if denom > 0 else float(np.array_equal(a, b))
    if result.flags or not result.max_abs <= atol + tol * scale:
        result.status = "FAIL"
    return result


HEATMAP_SIDE = 64  # an error map is reduced to at most this many cells per side
HEATMAPS = 4  # error maps kept per mode: the first failing layers'


def error_map(ref: np.ndarray, got: np.ndarray) -> np.ndarray | None:
    """Where in the tensor the error sits: |got - ref| of the first batch item, reduced (max)
    over channels for NCHW maps (over the last axis for token/row data), then block-max
    pooled to at most HEATMAP_SIDE per side. A non-finite error counts as the largest one."""
    if ref.shape != got.shape or ref.ndim == 0:
        return None
    err = np.abs(np.asarray(got, np.float64) - ref)
    finite = np.isfinite(err)
    err = np.where(finite, err, err[finite].max() if finite.any() else 1.0)
    if err.ndim == 4:
        err = err[0].max(axis=0)
    elif err.ndim == 3:
        err = err[0]
    elif err.ndim == 1:
        err = err[None]
    else:
        err = err.reshape(-1, err.shape[-1]) if err.ndim > 2 else err
    rows, cols = (-(-n // HEATMAP_SIDE) for n in err.shape)
    h, w = -(-err.shape[0] // rows), -(-err.shape[1] // cols)
    padded = np.zeros((h * rows, w * cols))
    padded[:err.shape[0], :err.shape[1]] = err
    return padded.reshape(h, rows, w, cols).max(axis=(1, 3)).astype(np.float32)


@dataclass
class Run:
    """What one parity run needs: the model, its upstream checkpoint, its case."""

    spec: object
    model: object
    state_dict: dict
    case: object
    inputs: dict
    dtype: str

    def same_layout(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in getattr(self.case, "SAME_LAYOUT", ()))

    def mlx_pass(self, fault=None):
        with eager(), recording(self.model, fault) as records:  # recording needs the eager modules
            out = self.case.run_mlx(self.model, self.inputs)
            mx.eval(out, [r.output for r in records.values()], [r.inputs for r in records.values()])
        return out, records

    def reference_pass(self, feed=None, on_output=None):
        trace = Trace(feed, on_output)
        out = self.case.run_reference(self.spec, self.state_dict, _float64(self.inputs), trace)
        return out, trace

    def compare_mode(self, mode: str, fault=None) -> ModeReport:
        """Both sides' layers, compared as the reference produces each one.

        The MLX side's values stay MLX arrays in the model's dtype; each is converted to float64
        only when the reference reaches its layer, and a module's MLX values are dropped once the
        reference has produced it as often as the MLX side ran it, so the run never holds a
        float64 copy of the whole pass (docs/validation.md: memory)."""
        tol = TOLERANCES[self.dtype][mode]
        out, records = self.mlx_pass(fault)
        if mode == "end-to-end":  # only isolated mode feeds the MLX inputs to the reference
            for record in records.values():
                record.inputs = None
        mlx_values: dict[str, tuple] = {}  # flattened name -> (MLX value, NHWC?)
        for name, rec in records.items():
            nhwc = not self.same_layout(name)
            mlx_values.update({k: (v, nhwc) for k, v in _flatten(name, rec.output).items()})
        mlx_values.update({k: (v, not self.same_layout("output")) for k, v in _flatten("output", out).items()})
        mlx_order = list(mlx_values)
        del out
        results: dict[str, LayerResult] = {}
        heatmaps: dict[str, np.ndarray] = {}
        produced: dict[str, int] = {}
        last_name, last_value = None, None  # judged last: a block traced again around itself repeats them
        freed = 0  # bytes of MLX values dropped since memory was last handed back

        def judge(name: str, value) -> None:
            nonlocal last_name, last_value, freed
            if last_name == name and last_value is value:  # the same value under the same name: same figures
                return
            for key, ref in _flatten(name, value).items():
                if key not in mlx_values:
                    if key not in results or results[key].status == "n/a":
                        results[key] = LayerResult(key, np.shape(ref), status="n/a", flags=["no MLX module of this name"])
                    continue
                value, nhwc = mlx_values[key]
                layer_tol = self.case.tolerance(key, mode, self.dtype, tol) if hasattr(self.case, "tolerance") else tol
                floating = isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating)
                got = _to_numpy(value, nhwc)
                result = compare(key, ref, got, layer_tol, value.dtype if floating else mx.float32,
                                 reference_fed=mode == "isolated")
                if layer_tol != tol:
                    result.flags.append(f"case tolerance {layer_tol:.2g}")
                results[key] = result
                if result.failed and (key in heatmaps or len(heatmaps) < HEATMAPS):
                    heatmap = error_map(np.asarray(ref, np.float64), np.asarray(got, np.float64))
                    if heatmap is not None:
                        heatmaps[key] = heatmap
            last_name, last_value = name, value
            record = records.get(name)
            produced[name] = produced.get(name, 0) + 1
            if record is not None and produced[name] >= record.calls:  # the MLX side ran it no more often
                for key in _flatten(name, record.output):
                    dropped = mlx_values.pop(key, (None,))[0]
                    freed += dropped.nbytes if isinstance(dropped, mx.array) else 0
                record.output = record.inputs = None
                if freed >= RETURN_BYTES:
                    return_freed_memory()
                    freed = 0

        feed = _Feed(records, self.same_layout) if mode == "isolated" else None
        ref_out, trace = self.reference_pass(feed, judge)
        last_name, last_value = None, None
        judge("output", ref_out)
        del ref_out

        # rows in the MLX side's completion order, then reference-only names
        known = set(mlx_order)
        order = [n for n in mlx_order if n in results] + [n for n in results if n not in known]
        layers = []
        for name in order:
            result = results[name]
            if mode == "isolated" and result.status != "n/a" and name.split("/")[0] not in ("output", *trace.fed):
                result.flags.append("not fed")
            layers.append(result)
        return ModeReport(mode, tol, layers, self.dtype,
                          {k: v for k, v in heatmaps.items() if results[k].failed}, coverage_rows(records))


def _float64(arrays: dict) -> dict:
    return {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in arrays.items()}


def calibrate_batch_norms(spec, case, state_dict: dict, inputs: dict) -> tuple[dict, int | None]:
    """``state_dict`` with every BatchNorm's running mean and variance set to the statistics of
    what reaches it when the reference runs the case's input (reference.ops.batch_norm_statistics),
    in the checkpoint's dtypes; and the fewest values per channel a BatchNorm saw (None: it has none).

    Synthetic weights draw those statistics at random, so activations grow block by block where
    a trained network's stay bounded: synthetic LaMa's pass float16's 65504 at 256 px (PyTorch's
    float16 LaMa gives NaN there too). Statistics of few values are noisy: the BatchNorms of LaMa's
    global branch see 12 per channel at 32 px, where float16 error then grows past its bound."""
    sd = _float64(state_dict)
    with ops.batch_norm_statistics() as counts:
        case.run_reference(spec, sd, _float64(inputs), Trace(on_output=lambda name, value: None))
    calibrated = {k: sd[k].astype(v.dtype) if k.endswith((".running_mean", ".running_var")) else v
                  for k, v in state_dict.items()}
    return calibrated, min(counts, default=None)


def coverage_rows(records) -> list[dict]:
    """The coverage matrix: per module, in completion order, the implementation of each op its
    own code chose (zoo.kernels.coverage); a leaf module that noted none ran MLX's own ops."""
    names = list(records)
    rows = []
    for name, record in records.items():
        leaf = not any(other.startswith(name + ".") for other in names)
        if record.ops:
            rows.extend({"layer": name, "module": record.module, "op": op, "implementation": impl}
                        for op, impl in record.ops.items())
        elif leaf:
            rows.append({"layer": name, "module": record.module, "op": record.module, "implementation": MLX_OP})
    return rows


RETURN_BYTES = 256 << 20  # dropped MLX values between two hand-backs of freed memory (zoo.blas)


class _Feed:
    """Isolated mode's inputs: a module's MLX inputs, converted when the reference asks for them."""

    def __init__(self, records, same_layout):
        self.records = records
        self.same_layout = same_layout

    def get(self, name: str):
        record = self.records.get(name)
        if record is None or record.inputs is None:
            return None
        return _to_numpy(record.inputs, not self.same_layout(name))


def header(model: str, weights_source: str, dtype: str) -> dict:
    import platform

    return {
        "model": model,
        "weights": weights_source,
        "device": devices.describe(),
        "dtype": dtype,
        "tf32": devices.tf32_enabled(),
        "mlx": mx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
