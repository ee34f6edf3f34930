"""Layer parity of every model against an independent numpy reference.

From the command line: ``python -m zoo.validate MODEL``. From Python (an app's own tests)::

    import zoo.validate

    report = zoo.validate.run("yolov8s", weights="best.pt", device="gpu", dtype="float16")
    report.passed, report.first_failure, report.layers
    report.to_json(), report.to_html()
    zoo.validate.assert_parity("resnet18", size=64)  # AssertionError naming the first failing layer

The command line calls ``run`` too: both give the same figures. MLX is imported on the first
call, not by ``import zoo.validate``.
"""
from __future__ import annotations

import sys

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
        modes = engine.MODES if mode == "both" else (mode,)
        if mode not in ("both", *engine.MODES):
            raise UsageError(f"mode {mode!r}: use both, end-to-end or isolated")
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
    if calibrate_bn:
        state_dict, fewest = engine.calibrate_batch_norms(spec, case, checkpoint.state_dict, inputs)
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
    head = engine.header(spec, checkpoint.source, dtypes[0] if len(dtypes) == 1 else "all")
    head["inject"] = inject
    head["input"] = _describe_input(settings)
    return Report(head, results)


def assert_parity(model: str, weights=None, **kwargs):
    """``run(model, weights, **kwargs)``; AssertionError naming the first failing layer (with its
    dtype, mode, rel err and flags) unless every layer passes. Returns the Report."""
    report = run(model, weights, **kwargs)
    failing = report.failing
    if failing is not None:
        row = next(r for r in failing.layers if r.name == failing.first_failure)
        raise AssertionError(
            f"{report.header['model']}: first failing layer {row.name} ({failing.dtype}, {failing.mode}): "
            f"rel err {row.rel:.3g} > {failing.tolerance:g}" + (f" [{', '.join(row.flags)}]" if row.flags else ""))
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
    from zoo.errors import UsageError

    chosen = list(DTYPES) if dtype == "all" else [dtype] if isinstance(dtype, str) else list(dtype)
    bad = [d for d in chosen if d not in DTYPES]
    if bad or not chosen:
        raise UsageError(f"dtype {', '.join(map(str, bad)) or 'none'}: use {', '.join(DTYPES)} or all")
    return chosen


def _describe_input(settings) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(vars(settings).items()) if v not in (None, [], False))


def __getattr__(name: str):
    if name == "Report":
        from zoo.validate.report import Report

        return Report
    raise AttributeError(f"module 'zoo.validate' has no attribute {name!r}")
