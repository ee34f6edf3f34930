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
from dataclasses import asdict, dataclass, field

import mlx.core as mx
import numpy as np

from zoo import devices
from zoo.compiled import eager
from zoo.errors import ZooError
from zoo.validate.capture import recording
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

    @property
    def first_failure(self) -> str | None:
        return next((r.name for r in self.layers if r.failed), None)

    @property
    def passed(self) -> bool:
        return self.first_failure is None


def case_module(family: str):
    try:
        return importlib.import_module(f"zoo.validate.cases.{family}")
    except ModuleNotFoundError:
        raise ZooError(f"no parity case for the {family} family yet") from None


def _to_numpy(value, nhwc: bool, cache: dict | None = None):
    """MLX value -> float64 numpy in the reference's layout (NHWC -> NCHW for 4-D).

    ``cache`` converts each MLX array once (a module's output is the next one's input):
    the copies are read-only because they are shared.
    """
    if isinstance(value, (tuple, list)):
        return type(value)(_to_numpy(v, nhwc, cache) for v in value)
    if not isinstance(value, mx.array):
        return value
    if cache is not None:
        key = (id(value), nhwc)
        if key not in cache:
            cache[key] = _to_numpy(value, nhwc)
            cache[key].flags.writeable = False
        return cache[key]
    a = np.array(value.astype(mx.float32) if mx.issubdtype(value.dtype, mx.floating) else value)
    if nhwc and a.ndim == 4:
        a = a.transpose(0, 3, 1, 2)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def _flatten(name: str, value) -> dict[str, object]:
    """Tuple outputs become name/0, name/1, ... ."""
    if isinstance(value, (tuple, list)):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(f"{name}/{i}", v))
        return out
    return {name: value}


def compare(name: str, ref: np.ndarray, got: np.ndarray, tol: float) -> LayerResult:
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    if ref.shape != got.shape:
        return LayerResult(name, got.shape, flags=[f"shape {got.shape} vs ref {ref.shape}"], status="FAIL")
    result = LayerResult(name, ref.shape)
    bad_ref = ~np.isfinite(ref)
    if np.isnan(got).any() and not np.isnan(ref).any():
        result.flags.append("NaN")
    if np.isinf(got).any() and not np.isinf(ref).any():
        result.flags.append("Inf")
    if got.size and not got.any() and ref.any():
        result.flags.append("all-zero")
    finite = ~bad_ref & np.isfinite(got)
    diff = np.abs(got[finite] - ref[finite])
    result.max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(ref[finite]).max()) if diff.size else 0.0
    result.rel = result.max_abs / scale if scale > 0 else (0.0 if result.max_abs == 0 else math.inf)
    a, b = got[finite].ravel(), ref[finite].ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    result.cosine = float(a @ b / denom) if denom > 0 else float(np.array_equal(a, b))
    if result.flags or not result.rel <= tol:
        result.status = "FAIL"
    return result


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

    def reference_pass(self, feed=None):
        trace = Trace(feed)
        inputs = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in self.inputs.items()}
        out = self.case.run_reference(self.spec, self.state_dict, inputs, trace)
        return out, trace

    def compare_mode(self, mode: str, fault=None) -> ModeReport:
        tol = TOLERANCES[self.dtype][mode]
        out, records = self.mlx_pass(fault)
        mlx_outputs: dict[str, object] = {}
        cache: dict = {}  # the records hold the arrays, so their ids stay unique meanwhile
        for name, rec in records.items():
            mlx_outputs.update(_flatten(name, _to_numpy(rec.output, not self.same_layout(name), cache)))
        mlx_outputs.update(_flatten("output", _to_numpy(out, not self.same_layout("output"), cache)))
        feed = None
        if mode == "isolated":
            feed = {name: _to_numpy(rec.inputs, not self.same_layout(name), cache) for name, rec in records.items()}
        ref_out, trace = self.reference_pass(feed)
        ref_outputs: dict[str, object] = {}
        for name, value in trace.outputs.items():
            ref_outputs.update(_flatten(name, value))
        ref_outputs.update(_flatten("output", ref_out))

        # rows in the MLX side's completion order, then reference-only names
        order = [n for n in mlx_outputs if n in ref_outputs] + [n for n in ref_outputs if n not in mlx_outputs]
        layers = []
        for name in order:
            ref = ref_outputs[name]
            if name not in mlx_outputs:
                layers.append(LayerResult(name, np.shape(ref), status="n/a", flags=["no MLX module of this name"]))
                continue
            layer_tol = self.case.tolerance(name, mode, self.dtype, tol) if hasattr(self.case, "tolerance") else tol
            result = compare(name, ref, mlx_outputs[name], layer_tol)
            if layer_tol != tol:
                result.flags.append(f"case tolerance {layer_tol:.2g}")
            if mode == "isolated" and name.split("/")[0] not in ("output", *trace.fed):
                result.flags.append("not fed")
            layers.append(result)
        return ModeReport(mode, tol, layers)


def report_dict(header: dict, reports: list[ModeReport]) -> dict:
    return {
        **header,
        "passed": all(r.passed for r in reports),
        "modes": {
            r.mode: {
                "passed": r.passed,
                "first_failure": r.first_failure,
                "tolerance": r.tolerance,
                "layers": [{**asdict(layer), "shape": list(layer.shape)} for layer in r.layers],
            }
            for r in reports
        },
    }


def header(spec, weights_source: str, dtype: str) -> dict:
    return {
        "model": spec.name,
        "weights": weights_source,
        "device": devices.describe(),
        "dtype": dtype,
        "tf32": devices.tf32_enabled(),
        "mlx": mx.__version__,
    }
