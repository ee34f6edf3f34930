"""Layer parity of every model against an independent numpy reference.

From the command line: ``python -m zoo.validate MODEL``. From Python (an app's own tests)::

    import zoo.validate

    report = zoo.validate.run("yolov8s", weights="best.pt", device="gpu", dtype="float16")
    report.passed, report.first_failure, report.layers
    report.to_json(), report.to_html()
    zoo.validate.assert_parity("resnet18", size=64)  # AssertionError naming the first failing layer

Any MLX model, against itself on the CPU in float64 (docs/validate-any-model.md)::

    report = zoo.validate.compare(model, x, device="gpu", dtype="float16")
    zoo.validate.assert_close(model, x, t, cond)               # in pytest
    zoo.validate.compare_torch(mlx_model, torch_model, x)      # a port against its PyTorch original

The command line calls ``run`` (``compare`` with ``--module``) too: both give the same figures.
MLX is imported on the first call, not by ``import zoo.validate``.
"""
from __future__ import annotations

import sys

from zoo.errors import interrupted_exits

with interrupted_exits(commands_only=True):  # python -m zoo.validate: runpy imports this package before the command
    import dataclasses

DTYPES = ("float32", "float16", "bfloat16")
# calibrate_bn: fewer values per channel than this make a BatchNorm's statistics noisy (LaMa in
# float16 on the CPU: 40 per channel at 64 px gave an end-to-end error of 4.0e-2 against the
# bound 5e-2, 144 at 128 px 1.4e-2, 12 at 32 px failed)
CALIBRATION_VALUES = 100


def run(model: str, weights=None, *, device: str | None = None, dtype="float32", mode: str = "both",
        inject: str | None = None, image=None, seed: int = 1234, calibrate_bn: bool = False, **options):
    """Validate ``model`` layer by layer; returns a zoo.validate.report.Report.

    ``weights``: a checkpoint path, ``synthetic[:SEED]`` or None (the cached Hub weights, else
    synthetic:0); ``device``: "gpu" | "cpu" | None (the process's device, the GPU when there is
    one); ``dtype``: "float32" | "float16" | "bfloat16", "all" or a list of them; ``mode``: "both",
    "end-to-end" or "isolated"; ``inject``: "NAME=KIND" (a fault in one MLX module); ``image``: an
    image file instead of the random input; ``seed``: the random input's; ``calibrate_bn``: give
    every BatchNorm the statistics of its input on this input first, as training leaves them
    (engine.calibrate_batch_norms: synthetic weights then keep a trained network's magnitudes;
    float16 LaMa needs it with synthetic weights); ``options``: the
    family's input options (``size=64`` for ResNet, ``imgsz=[128]`` for YOLOv8, ``point=[...]``
    for MobileSAM, ``mask=...`` for LaMa), as the command line's.
    Bad options raise zoo.errors.UsageError before the weights are read.
    """
    import dataclasses

    from zoo import devices, registry
    from zoo.cli import usage_errors
    from zoo.errors import UsageError, option
    from zoo.validate import engine
    from zoo.validate.capture import parse_fault
    from zoo.validate.report import Report

    spec = registry.get_spec(model)
    case = engine.case_module(spec.family)
    with usage_errors():
        dtypes = _dtypes(dtype)
        modes = _modes(mode)
        fault = parse_fault(inject)
        if seed < 0:
            raise UsageError(f"{option('seed', seed)}: use a non-negative integer")
        settings = case_defaults(case)
        for name, value in {**options, "image": image, "seed": seed}.items():
            if not hasattr(settings, name):
                if name == "image" and value is None:
                    continue
                raise UsageError(f"{spec.name}: the parity case takes no option {name!r} "
                                 f"(its options: {', '.join(sorted(vars(settings)))})")
            setattr(settings, name, value)
        inputs = case.make_inputs(spec, settings)  # bad case options fail before the weights are read

    devices.use(device)
    checkpoint = registry.read_weights(spec, weights, offline_fallback=True)
    spec = registry.fitted_spec(spec, checkpoint)  # what the file holds (e.g. a pose model's kpt_shape)
    if calibrate_bn:
        state_dict, fewest = engine.calibrate_batch_norms(spec, case, checkpoint.state_dict, inputs)
        if fewest is not None and fewest < 2:  # its variance is 0/0: NaN statistics, and a run of NaN on both sides
            raise UsageError(f"{option('calibrate_bn')}: a BatchNorm saw {fewest} value per channel of this input, "
                             "which has no variance: use a larger input")
        if fewest is not None and fewest < CALIBRATION_VALUES:
            print(f"note: a BatchNorm saw {fewest} values per channel of this input: its statistics are noisy "
                  "and float16 parity may fail on them; use a larger input", file=sys.stderr)
        checkpoint = dataclasses.replace(checkpoint, state_dict=state_dict,
                                         source=f"{checkpoint.source}, BatchNorm statistics of the input")
    results = []
    for one in dtypes:
        built = registry.build(spec, checkpoint, one)
        run_ = engine.Run(spec, built, checkpoint.state_dict, case, inputs, one)
        results.extend(run_.compare_mode(m, fault) for m in modes)
        del built, run_
    head = engine.header(spec.name, checkpoint.source, dtypes[0] if len(dtypes) == 1 else "all")
    head["inject"] = inject
    head["input"] = _describe_input(settings)
    return Report(head, results)


def assert_parity(model: str, weights=None, **kwargs):
    """``run(model, weights, **kwargs)``; AssertionError naming the first failing layer (with its
    dtype, mode, rel err and flags) unless every layer passes. Returns the Report."""
    return _assert_passed(run(model, weights, **kwargs))


def compare(model, *inputs, device: str | None = None, dtype="float32", reference: str = "cpu-float64",
            mode: str = "both", inject: str | None = None, rtol: float | None = None, atol: float | None = None,
            name: str | None = None):
    """Any ``mlx.nn.Module`` layer by layer: the model on ``device`` in ``dtype`` against the same
    model on the CPU in float64 (``reference="cpu-float32"``: in float32), both in this process,
    called as ``model(*inputs)``; returns the same Report as ``run``.

    ``inputs``: MLX or numpy arrays (floating ones are cast to each side's dtype; integer ones
    kept), numbers, or lists, tuples, dicts of them. ``device``: "gpu" | "cpu" | None (the
    process's device); ``dtype``: "float32" | "float16" | "bfloat16", "all" or a list; ``mode``:
    "both", "end-to-end" or "isolated" (each module call gets the reference's inputs); ``inject``:
    "PATH=KIND" or "PATH#CALL=KIND", a fault in the model under test; ``rtol``: the bound of rel err
    (max abs err / max |ref|) in place of the dtype's (engine.TOLERANCES); ``atol``: a layer also
    passes with max abs err <= atol + rtol x max |ref|; ``name``: the report's model name (default:
    the class name). Rows are module paths (``path#k``: the k-th call of a module called several
    times; ``/0``, ``/key``, ``/field``: parts of a tuple, dict or dataclass output); ``output`` is
    the model's return value. The model is run in eval mode and its parameters and training flags
    are as they were afterwards. Bad arguments raise zoo.errors.UsageError before anything runs.
    """
    from zoo.validate import modules
    from zoo.validate.report import Report

    run_ = _comparison(model, inputs, device, dtype, reference, mode, inject, rtol, atol)
    with modules.evaluation_mode(model):
        expected = modules.reference_pass(model, run_.inputs, run_.reference, keep_inputs="isolated" in run_.modes)
        results = [modules.test_pass(model, run_.inputs, expected, run_.device, one, m, run_.fault, run_.rtol,
                                     run_.atol) for one in run_.dtypes for m in run_.modes]
    head = run_.header(name or type(model).__name__, f"{reference} (the same MLX model)")
    head["reference_float32_precision"] = modules.float32_precision_ops() if reference == "cpu-float64" else []
    return Report(head, results)


def assert_close(model, *inputs, **kwargs):
    """``compare(model, *inputs, **kwargs)``; AssertionError naming the first failing layer (with its
    dtype, mode, rel err and flags) unless every layer passes. Returns the Report."""
    return _assert_passed(compare(model, *inputs, **kwargs))


def compare_torch(mlx_model, torch_model, *inputs, name_map=None, layout="auto", device: str | None = None,
                  dtype="float32", reference: str = "cpu-float64", mode: str = "both", inject: str | None = None,
                  rtol: float | None = None, atol: float | None = None, name: str | None = None):
    """A port against its PyTorch original: ``mlx_model`` on ``device`` in ``dtype`` against
    ``torch_model`` on the CPU in float64 (a copy; the original is left as it is), layer by layer,
    with the same Report as ``compare`` plus a "parameters" mode comparing every weight.

    Layers and weights are paired by module path: ``name_map`` renames PyTorch paths to MLX ones
    ({"features": "layers"}: the longest matching prefix, on dot boundaries; or a function path ->
    path or None); unpaired layers and weights are listed as ``n/a`` rows. ``layout``: "auto"
    (each value as its shapes say: NCHW -> NHWC where that is what fits), "channels-last" (every
    3-D and wider PyTorch value is channels-first), "same", or a dict of fnmatch patterns of MLX
    paths -> one of those. ``inputs`` are the MLX model's; floating 4-D ones are given to PyTorch
    as NCHW unless ``layout="same"``. Weight layouts (Conv, ConvTranspose) are converted as
    zoo.weights.convert does. torch is imported here only.
    """
    from zoo.validate import modules, torch_port
    from zoo.validate.capture import submodules
    from zoo.validate.report import Report

    align, rename = torch_port.aligner(layout), torch_port.renamer(name_map)
    run_ = _comparison(mlx_model, inputs, device, dtype, reference, mode, inject, rtol, atol, "compare_torch")
    recorded = torch_port.record_torch(torch_model, torch_port.torch_inputs(run_.inputs, layout), run_.reference,
                                       keep_inputs="isolated" in run_.modes)
    expected, unpaired = torch_port.pair(recorded, [n for n, _ in submodules(mlx_model)], rename)
    results = [torch_port.parameter_report(recorded.parameters, mlx_model, rename, run_.dtypes[0])]
    with modules.evaluation_mode(mlx_model):
        for one in run_.dtypes:
            for m in run_.modes:
                result = modules.test_pass(mlx_model, run_.inputs, expected, run_.device, one, m, run_.fault, run_.rtol,
                                           run_.atol, align)
                result.layers += torch_port.unpaired_rows(unpaired)
                results.append(result)
    head = run_.header(name or type(mlx_model).__name__, f"{reference} (PyTorch {type(torch_model).__name__})")
    head["layout"] = str(layout)
    return Report(head, results)


@dataclasses.dataclass
class _Comparison:
    """compare's and compare_torch's checked arguments; ``inputs`` on the host (modules.inputs_on_host)."""

    dtypes: list
    modes: tuple
    fault: tuple | None
    reference: object  # the reference's mx.Dtype
    rtol: float | None
    atol: float
    device: object  # the mx.Device under test
    inputs: tuple
    inject: str | None
    described: str

    def header(self, model: str, reference: str) -> dict:
        from zoo.validate import engine

        head = engine.header(model, "the model's own", self.dtypes[0] if len(self.dtypes) == 1 else "all")
        head.update(reference=reference, inject=self.inject, input=self.described, rtol=self.rtol, atol=self.atol)
        return head


def _comparison(model, inputs, device, dtype, reference, mode, inject, rtol, atol, api="compare") -> _Comparison:
    """The arguments checked (UsageError before anything runs), the device chosen, the inputs copied."""
    import mlx.core as mx

    from zoo import devices
    from zoo.cli import usage_errors
    from zoo.validate import modules
    from zoo.validate.capture import check_fault, parse_fault, submodules

    modules.check_model(model, api)
    with usage_errors():
        dtypes, modes, fault = _dtypes(dtype), _modes(mode), parse_fault(inject)
        check_fault(submodules(model), fault)
        reference_dtype = _reference(reference)
        rtol, atol = _tolerance("rtol", rtol), _tolerance("atol", atol) or 0.0
        modules.check_inputs(inputs)
    target = mx.gpu if devices.use(device) == "gpu" else mx.cpu
    return _Comparison(dtypes, modes, fault, reference_dtype, rtol, atol, target, modules.inputs_on_host(inputs),
                       inject, modules.describe_inputs(inputs))


def _assert_passed(report):
    failing = report.failing
    if failing is not None:
        row = next(r for r in failing.layers if r.name == failing.first_failure)
        raise AssertionError(
            f"{report.header['model']}: first failing layer {row.name} ({failing.dtype}, {failing.mode}): "
            + (f"rel err {row.rel:.3g} > {failing.tolerance:g}" if not failing.atol else
               f"max abs err {row.max_abs:.3g} > {failing.atol:g} + {failing.tolerance:g} x max |ref|")
            + (f" [{', '.join(row.flags)}]" if row.flags else ""))
    return report


def case_defaults(case):
    """The parity case's input options with their defaults (its command-line options), seed included."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--seed", type=int, default=1234)
    if hasattr(case, "add_arguments"):
        case.add_arguments(parser)
    return parser.parse_args([])


def _dtypes(dtype) -> list[str]:
    """dtype= as the names of the dtypes to run, each once: a name, "all", an mx.Dtype (zoo.load's forms) or a
    list or tuple of them."""
    import mlx.core as mx

    from zoo.devices import DTYPES as BY_NAME
    from zoo.errors import UsageError

    def name(one):
        return next((n for n, d in BY_NAME.items() if d == one), one) if isinstance(one, mx.Dtype) else one

    chosen = list(DTYPES) if isinstance(dtype, str) and dtype == "all" else (
        [name(d) for d in dtype] if isinstance(dtype, (list, tuple)) else [name(dtype)])
    bad = [d for d in chosen if not isinstance(d, str) or d not in DTYPES]
    if bad or not chosen:
        raise UsageError(f"dtype {', '.join(map(str, bad)) or 'none'}: use {', '.join(DTYPES)} or all")
    return list(dict.fromkeys(chosen))  # ['float16', 'float16'] ran float16 twice


def _modes(mode: str) -> tuple[str, ...]:
    from zoo.errors import UsageError
    from zoo.validate.engine import MODES

    if mode not in ("both", *MODES):
        raise UsageError(f"mode {mode!r}: use both, end-to-end or isolated")
    return MODES if mode == "both" else (mode,)


def _reference(reference: str):
    from zoo.errors import UsageError
    from zoo.validate.modules import REFERENCES

    if reference not in REFERENCES:
        raise UsageError(f"reference {reference!r}: use {' or '.join(REFERENCES)}")
    return REFERENCES[reference]


def _tolerance(name: str, value) -> float | None:
    import numbers

    from zoo.errors import UsageError

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:  # np.float32(1e-3) too
        raise UsageError(f"{name} {value!r}: pass a non-negative number (or None for the dtype's bound)")
    return float(value)


def _describe_input(settings) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(vars(settings).items()) if v not in (None, [], False))


def __getattr__(name: str):
    if name == "Report":
        from zoo.validate.report import Report

        return Report
    raise AttributeError(f"module 'zoo.validate' has no attribute {name!r}")
