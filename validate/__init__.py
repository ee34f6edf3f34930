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

DTYPES = ("float32", "float16", "bfloat16")


def run(model: str, weights=None, *, device: str | None = None, dtype="float32", mode: str = "both",
        inject: str | None = None, image=None, seed: int = 1234, **options):
    """Validate ``model`` layer by layer; returns a zoo.validate.report.Report.

    ``weights``: a checkpoint path, ``synthetic[:SEED]`` or None (the cached Hub weights, else
    synthetic:0); ``device``: "gpu" | "cpu" | None (the process's device, the GPU when there is
    one); ``dtype``: "float32" | "float16" | "bfloat16", "all" or a list of them; ``mode``: "both",
    "end-to-end" or "isolated"; ``inject``: "NAME=KIND" (a fault in one MLX module); ``image``: an
    image file instead of the random input; ``seed``: the random input's; ``options``: the
    family's input options (``size=64`` for ResNet, ``imgsz=[128]`` for YOLOv8, ``point=[...]``
    for MobileSAM, ``mask=...`` for LaMa), as the command line's.
    Bad options raise zoo.errors.UsageError before the weights are read.
    """
    from zoo import devices, registry
    from zoo.cli import usage_errors
    from zoo.errors import UsageError
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
            raise UsageError(f"--seed {seed}: use a non-negative integer")
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
