"""python -m zoo.validate MODEL: per-layer parity of the MLX model against the numpy reference;
python -m zoo.validate --module PKG.MOD:FACTORY --input SHAPE ...: any MLX model against itself on
the CPU in float64 (zoo.validate.compare)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from zoo.errors import UsageError, interrupted_exits

with interrupted_exits():  # Ctrl-C while MLX loads: 'interrupted', exit 130
    import mlx.nn as nn
    import numpy as np

    from zoo import registry, validate
    from zoo.cli import ArgumentParser, add_model_arguments, guarded, model_name_from
    from zoo.cli.validate_ops import main as ops_main
    from zoo.files import check_output_file, write_text
    from zoo.searchpath import after_standard_library
    from zoo.validate import engine
    from zoo.validate.report import coverage_counts, format_error


def print_table(report: engine.ModeReport, show: str, with_dtype: bool = False) -> None:
    rows = [r for r in report.layers if show == "all" or r.status != "pass"]
    width = max([len(r.name) for r in rows] + [5])
    print(f"\n== {_title(report, with_dtype)} (tolerance: {report.bound}) ==")
    print(f"{'layer':<{width}}  {'shape':<20} {'max abs':>9} {'rel err':>9} {'cosine':>10}  status  flags")
    for r in rows:
        shape = "x".join(map(str, r.shape))
        cos = "-" if math.isnan(r.cosine) else f"{r.cosine:.7f}"
        print(f"{r.name:<{width}}  {shape:<20} {format_error(r.max_abs):>9} {format_error(r.rel):>9} {cos:>10}  {r.status:<6}  {', '.join(r.flags)}")


def _title(report: engine.ModeReport, with_dtype: bool) -> str:
    return f"{report.dtype} {report.mode}" if with_dtype else report.mode


def summary(report: engine.ModeReport, with_dtype: bool = False) -> str:
    compared = report.compared
    failed = [r for r in compared if r.failed]
    worst = report.worst
    line = (f"{_title(report, with_dtype)}: {'PASS' if not failed else 'FAIL'} {len(compared) - len(failed)}/{len(compared)} layers"
            f" within {report.bound if report.atol else f'rel err {report.tolerance:g}'}")
    if worst is not None:
        line += f"; worst {format_error(worst.rel)} at {worst.name}" + (f" ({', '.join(worst.flags)})" if worst.flags else "")
    if failed:
        first = failed[0]
        line += f"; first failing layer: {first.name}" + (f" ({', '.join(first.flags)})" if first.flags else "")
    return line


def print_coverage(rows: list[dict], device: str) -> None:
    """The coverage matrix: per op, the implementation that ran and on how many layers; then per layer."""
    width = max([len(r["layer"]) for r in rows] + [5])
    print(f"\n== coverage on {device}: the implementation each op ran ==")
    for (op, impl), n in coverage_counts(rows).items():
        print(f"{op:<36} {impl:<14} {n:>5} layer(s)")
    print()
    for r in rows:
        print(f"{r['layer']:<{width}}  {r['module']:<22} {r['op']:<36} {r['implementation']}")


def add_report_arguments(parser) -> None:
    """The options of a parity run that every form of the command takes."""
    parser.add_argument("--mode", choices=("both", *engine.MODES), default="both")
    parser.add_argument("--inject", metavar="NAME=KIND",
                        help="perturb one MLX module to prove the validator catches it: KIND zero|noise|nan|drop-residual "
                             "(NAME#K=KIND: its K-th call only)")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the random input")
    parser.add_argument("--show", choices=("all", "failures"), default="all", help="table rows to print")
    parser.add_argument("--coverage", action="store_true",
                        help="print which implementation (custom kernel, CPU form, MLX op) each layer ran")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--report", metavar="PATH", help="write the report as one self-contained HTML file (its "
                        'plots: pip install "mlx-zoo[validate]")')
    parser.add_argument("--overwrite", action="store_true", help="replace the --json/--report file if it exists")


PROG = "python -m zoo.validate"
OPS_LINE = (f"{PROG} ops [--device gpu|cpu] [--dtype LIST] [--json PATH]: every op the models run against the numpy "
            f"reference ({PROG} ops --help)")
MODULE_LINE = (f"{PROG} --module PKG.MOD:FACTORY --input SHAPE [--input ...]: any MLX model against itself on the CPU "
               f"in float64 ({PROG} --module X --help)")


def validate_parser(case=None) -> ArgumentParser:
    """The validator's command line; with a family's parity ``case``, its input options too."""
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            usage=None if case else f"{PROG} MODEL [options] | {PROG} ops [options] | "
                                                    f"{PROG} --module PKG.MOD:FACTORY --input SHAPE [options]")
    parser.add_argument("model", help=", ".join(registry.list_models()) + " (a family name, e.g. yolov8, takes "
                        "the variant of --weights), or a checkpoint file (best.pt) that says which model it holds")
    add_model_arguments(parser, (*validate.DTYPES, "all"), "all: float32, float16 and bfloat16 in one report",
                        "the model's Hub weights when cached, else synthetic:0 (parity does not depend on trained "
                        "weights; said in a note)")
    add_report_arguments(parser)
    parser.add_argument("--calibrate-bn", action="store_true",
                        help="first set every BatchNorm's running mean and variance to its input's statistics on "
                             "this input, as training leaves them: synthetic weights then keep a trained network's "
                             "magnitudes (float16 LaMa needs it with synthetic weights)")
    if case is not None and hasattr(case, "add_arguments"):
        case.add_arguments(parser)
    return parser


def general_help() -> str:
    """``--help`` without a model: the validator's options, each family's input options, the ops suite, --module."""
    lines = [validate_parser().format_help(), "model input options (MODEL --help shows them in full):"]
    for family in dict.fromkeys(spec.family for spec in registry.REGISTRY.values()):
        case = engine.case_module(family)
        names = [name for name, spec in registry.REGISTRY.items() if spec.family == family]
        case_parser = ArgumentParser(prog=f"{PROG} {names[0]}", add_help=False)
        if hasattr(case, "add_arguments"):
            case.add_arguments(case_parser)
        usage = case_parser.format_usage().removeprefix("usage: ").strip()
        lines.append(f"  {family} ({', '.join(names)}):\n    {' '.join(usage.split())}")
    lines.append(f"\nop known-answer suite:\n  {OPS_LINE}")
    lines.append(f"\nany MLX model:\n  {MODULE_LINE}")
    return "\n".join(lines)


def check_outputs(args, inputs: list) -> None:
    """The --json/--report files, before anything runs (and matplotlib for --report)."""
    if args.json and args.report and Path(args.json).resolve() == Path(args.report).resolve():
        raise UsageError(f"--json and --report both name {args.report}: the HTML would replace the JSON; "
                         "give each its own file")
    for path, flag in ((args.json, "--json"), (args.report, "--report")):
        if path:
            check_output_file(path, flag, inputs, args.overwrite)
    if args.report:
        from zoo.validate.report import pyplot

        pyplot()  # matplotlib missing: say so before the run


def print_report(report, args, title: str) -> int:
    """The header line, the tables, the summaries, the coverage; the --json/--report files; the exit code."""
    head = report.header
    print(f"{title}  device={head['device']}  dtype={', '.join(report.dtypes)}  "
          f"tf32={'on' if head['tf32'] else 'off'}  mlx={head['mlx']}" + (f"  inject={args.inject}" if args.inject else ""))
    if head["tf32"]:
        print("note: TF32 is on for float32 matmul/conv; set MLX_ENABLE_TF32=0 for float32 parity", file=sys.stderr)
    if head.get("reference_float32_precision"):
        print(f"note: this MLX's CPU computes {', '.join(head['reference_float32_precision'])} in float32 precision "
              "when given float64: the reference's own error there is ~1e-7 relative (docs/validate-any-model.md)",
              file=sys.stderr)
    several = len(report.dtypes) > 1
    for mode_report in report.modes:
        print_table(mode_report, args.show, several)
    print()
    for mode_report in report.modes:
        print(summary(mode_report, several))
    if args.coverage:
        for one in report.dtypes:
            print_coverage(report.coverage(one), head["device"] + (f", {one}" if several else ""))
    if args.json:
        write_text(args.json, report.to_json())
    if args.report:
        write_text(args.report, report.to_html())
    return 0 if report.passed else 1


@guarded
def main(argv: list[str]) -> int:
    if argv and argv[0] == "ops":  # the op known-answer suite, its own command line
        return ops_main(argv[1:])
    if any(a == "--module" or a.startswith("--module=") for a in argv):  # any MLX model, against itself
        return module_main(argv)
    name, checkpoint = model_name_from(argv, PROG, general_help), None
    if registry.is_weights_file(name):  # python -m zoo.validate best.pt: the file names its model, as in zoo.run
        checkpoint, name = name, registry.identify(name)[0].name
    spec = registry.get_spec(name)
    case = engine.case_module(spec.family)
    parser = validate_parser(case)
    args = parser.parse_args(argv)
    if checkpoint is not None:  # validated as the family's name with the file as its weights
        registry.refuse_second_checkpoint(checkpoint, args.weights)
        args.model, args.weights = name, checkpoint
    options = {name: getattr(args, name) for name in vars(validate.case_defaults(case))}
    check_outputs(args, [args.weights, *(v for k, v in options.items() if k in ("image", "mask") and v)])

    report = validate.run(args.model, args.weights, device=args.device,
                          dtype=args.dtype, mode=args.mode, inject=args.inject, calibrate_bn=args.calibrate_bn,
                          **options)
    return print_report(report, args, f"{spec.name}  weights={report.header['weights']}")


def module_main(argv: list[str]) -> int:
    """python -m zoo.validate --module pkg.mod:factory --input SHAPE ...: zoo.validate.compare."""
    parser = ArgumentParser(prog=PROG,
                            description="Any MLX model layer by layer: on --device in --dtype against itself on the "
                                        "CPU in float64 (docs/validate-any-model.md).")
    parser.add_argument("--module", required=True, metavar="PKG.MOD:FACTORY",
                        help="a function taking no argument that returns the mlx.nn.Module (random init is fine); "
                             "PATH/TO/FILE.py:FACTORY too")
    parser.add_argument("--input", action="append", required=True, metavar="SHAPE[:int32[:HIGH]]",
                        help="one positional input per --input, in order: e.g. 1,224,224,3 (float, normal(0, 1) of "
                             "--seed) or 1,77:int32:49408 (integers in [0, HIGH), default 10)")
    parser.add_argument("--reference", choices=("cpu-float64", "cpu-float32"), default="cpu-float64")
    parser.add_argument("--rtol", type=float, help="rel err bound in place of the dtype's (docs/validation.md)")
    parser.add_argument("--atol", type=float, help="a layer also passes with max abs err <= atol + rtol x max |ref|")
    parser.add_argument("--device", choices=("gpu", "cpu"), help="default: the GPU when MLX has one")
    parser.add_argument("--dtype", choices=(*validate.DTYPES, "all"), default="float32",
                        help="all: float32, float16 and bfloat16 in one report")
    add_report_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = parser.parse_args(argv)
    inputs = make_inputs(args.input, args.seed)
    check_outputs(args, [module_source(args.module)])  # --json model.py --overwrite replaced the model's source
    model = load_model(args.module)
    report = validate.compare(model, *inputs, device=args.device, dtype=args.dtype, reference=args.reference,
                              mode=args.mode, inject=args.inject, rtol=args.rtol, atol=args.atol, name=args.module)
    return print_report(report, args, f"{args.module}  reference={args.reference}")


INPUT_DTYPES = {"float32": np.float32, "int32": np.int32}
INPUT_ELEMENTS = 1 << 28  # 1 GiB of float32 for the inputs together: a shape past it is a typo


def make_inputs(specs: list[str], seed: int) -> list[np.ndarray]:
    """--input SHAPE[:DTYPE[:HIGH]] values -> random arrays, each checked before any is made."""
    if seed < 0:
        raise UsageError(f"--seed {seed}: use a non-negative integer")
    parsed = []
    for spec in specs:
        shape_text, _, rest = spec.partition(":")
        dtype, _, high = rest.partition(":")
        try:
            shape = tuple(int(n) for n in shape_text.split(","))
            high = int(high) if high else 10
        except ValueError:
            shape = ()
        if not shape or min(shape) < 1 or (dtype or "float32") not in INPUT_DTYPES or high < 1 or (
                high != 10 and dtype != "int32"):
            raise UsageError(f"--input {spec!r}: use SHAPE[:int32[:HIGH]], e.g. 1,224,224,3 or 1,77:int32:49408")
        if math.prod(shape) > INPUT_ELEMENTS:
            raise UsageError(f"--input {spec}: {math.prod(shape)} elements; at most {INPUT_ELEMENTS} per input")
        parsed.append((shape, dtype or "float32", high))
    # each was under the bound, and ten of them were 10 GiB (20 in the reference's float64 copies)
    if (total := sum(math.prod(shape) for shape, _, _ in parsed)) > INPUT_ELEMENTS:
        raise UsageError(f"--input: {total} elements in all; at most {INPUT_ELEMENTS} for the inputs together")
    rng = np.random.default_rng(seed)
    return [rng.integers(0, high, shape).astype(np.int32) if dtype == "int32"
            else rng.standard_normal(shape, dtype=np.float32) for shape, dtype, high in parsed]


def module_source(spec: str) -> str | None:
    """The file --module names (PATH.py, or the source of PKG.MOD when it can be found without running it)."""
    import importlib.util

    where = spec.rpartition(":")[0]
    if where.endswith(".py"):
        return where
    try:
        found = importlib.util.find_spec(where) if where else None
    except Exception:  # its package fails to import: load_model says so
        return None
    return getattr(found, "origin", None)


def load_model(spec: str):
    """PKG.MOD:FACTORY or PATH.py:FACTORY -> FACTORY()."""
    import importlib
    import importlib.util
    from pathlib import Path

    where, _, factory = spec.rpartition(":")
    if not where or not factory.isidentifier():
        raise UsageError(f"--module {spec!r}: use PKG.MOD:FACTORY or PATH/TO/FILE.py:FACTORY")
    argv = sys.argv
    # the file imported as `python FILE.py` runs it: its folder first on the path (its `from layers import
    # Block` finds the sibling file), and a command line of its own (a module-level argparse takes its
    # defaults instead of reading the validator's options)
    sys.argv = [where]
    try:
        if where.endswith(".py"):
            if not Path(where).is_file():
                raise UsageError(f"--module {spec}: no file {where}: pass an existing .py file or a module name")
            after_standard_library(str(Path(where).resolve().parent))  # a copy.py beside it is not the copy module
            name = Path(where).stem
            source = sys.modules.get(name)
            if Path(getattr(source, "__file__", None) or "").resolve() != Path(where).resolve():  # not imported yet
                # a name another module holds (copy.py: the standard library's copy) is not taken from it
                loaded = importlib.util.spec_from_file_location(name if source is None else f"_validated_{name}",
                                                                where)
                source = importlib.util.module_from_spec(loaded)
                sys.modules[loaded.name] = source  # dataclasses look their module up by name
                loaded.loader.exec_module(source)
        else:
            source = importlib.import_module(where)
    except UsageError:
        raise
    except SystemExit as e:  # an argparse of the file's own with required options
        raise UsageError(f"--module {spec}: importing {where} exited (code {e.code}): it reads a command line of "
                         "its own when imported; move that under `if __name__ == '__main__':`") from None
    except Exception as e:  # the user's module failed to import: say which and why
        raise UsageError(f"--module {spec}: importing {where} raised {type(e).__name__}: {e}") from e
    finally:
        sys.argv = argv
    make = getattr(source, factory, None)
    if not callable(make):
        raise UsageError(f"--module {spec}: {where} has no function {factory}: name one that returns the model")
    try:
        model = make()
    except TypeError as e:  # most often the arguments it wants
        raise UsageError(f"--module {spec}: {factory}() raised TypeError: {e}: it must build the model with no "
                         "arguments") from e
    except Exception as e:
        raise UsageError(f"--module {spec}: {factory}() raised {type(e).__name__}: {e} (--debug: the traceback)") from e
    except SystemExit as e:  # sys.exit() in the factory ended the validator with no word
        raise UsageError(f"--module {spec}: {factory}() exited (code {e.code}): it must return the model") from None
    if not isinstance(model, nn.Module):  # compare's own error would name the API, not the flag
        what = f"the class {model.__name__}" if isinstance(model, type) else type(model).__name__
        raise UsageError(f"--module {spec}: {factory}() returned {what}, not an mlx.nn.Module: name a function "
                         "that returns the model (an instance)")
    return model


if __name__ == "__main__":
    sys.exit(main())
