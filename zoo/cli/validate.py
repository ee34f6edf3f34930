"""python -m zoo.validate MODEL: per-layer parity of the MLX model against the numpy reference."""
from __future__ import annotations

import math
import sys

from zoo import registry, validate
from zoo.cli import ArgumentParser, add_model_arguments, guarded, model_name_from
from zoo.cli.validate_ops import main as ops_main
from zoo.files import check_output_file, write_atomic
from zoo.validate import engine
from zoo.validate.report import coverage_counts, format_error


def print_table(report: engine.ModeReport, show: str, with_dtype: bool = False) -> None:
    rows = [r for r in report.layers if show == "all" or r.status != "pass"]
    width = max([len(r.name) for r in rows] + [5])
    print(f"\n== {_title(report, with_dtype)} (tolerance: rel err <= {report.tolerance:g}) ==")
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
            f" within rel err {report.tolerance:g}")
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


PROG = "python -m zoo.validate"
OPS_LINE = (f"{PROG} ops [--device gpu|cpu] [--dtype LIST] [--json PATH]: every op the models run against the numpy "
            f"reference ({PROG} ops --help)")


def validate_parser(case=None) -> ArgumentParser:
    """The validator's command line; with a family's parity ``case``, its input options too."""
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            usage=None if case else f"{PROG} MODEL [options] | {PROG} ops [options]")
    parser.add_argument("model", help=", ".join(registry.list_models()) + " (a family name, e.g. yolov8, takes "
                        "the variant of --weights)")
    add_model_arguments(parser, (*validate.DTYPES, "all"), "all: float32, float16 and bfloat16 in one report")
    parser.add_argument("--mode", choices=("both", *engine.MODES), default="both")
    parser.add_argument("--inject", metavar="NAME=KIND",
                        help="perturb one MLX module to prove the validator catches it: KIND zero|noise|nan|drop-residual")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the random input")
    parser.add_argument("--calibrate-bn", action="store_true",
                        help="first set every BatchNorm's running mean and variance to its input's statistics on "
                             "this input, as training leaves them: synthetic weights then keep a trained network's "
                             "magnitudes (float16 LaMa needs it with synthetic weights)")
    parser.add_argument("--show", choices=("all", "failures"), default="all", help="table rows to print")
    parser.add_argument("--coverage", action="store_true",
                        help="print which implementation (custom kernel, CPU form, MLX op) each layer ran")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--report", metavar="PATH", help="write the report as one self-contained HTML file")
    parser.add_argument("--overwrite", action="store_true", help="replace the --json/--report file if it exists")
    if case is not None and hasattr(case, "add_arguments"):
        case.add_arguments(parser)
    return parser


def general_help() -> str:
    """``--help`` without a model: the validator's options, each family's input options, the ops suite."""
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
    return "\n".join(lines)


@guarded
def main(argv: list[str]) -> int:
    if argv and argv[0] == "ops":  # the op known-answer suite, its own command line
        return ops_main(argv[1:])
    spec = registry.get_spec(model_name_from(argv, PROG, general_help))
    case = engine.case_module(spec.family)
    parser = validate_parser(case)
    args = parser.parse_args(argv)
    options = {name: getattr(args, name) for name in vars(validate.case_defaults(case))}
    inputs = [args.weights, *(v for k, v in options.items() if k in ("image", "mask") and v)]
    outputs = [(path, flag) for path, flag in ((args.json, "--json"), (args.report, "--report")) if path]
    for path, flag in outputs:  # before the model is built
        check_output_file(path, flag, inputs, args.overwrite)
    if args.report:
        from zoo.validate.report import pyplot

        pyplot()  # matplotlib missing: say so before the run

    report = validate.run(args.model, args.weights, device=args.device,
                          dtype=args.dtype, mode=args.mode, inject=args.inject, calibrate_bn=args.calibrate_bn,
                          **options)
    head = report.header
    print(f"{spec.name}  weights={head['weights']}  device={head['device']}  dtype={', '.join(report.dtypes)}  "
          f"tf32={'on' if head['tf32'] else 'off'}  mlx={head['mlx']}" + (f"  inject={args.inject}" if args.inject else ""))
    if head["tf32"]:
        print("note: TF32 is on for float32 matmul/conv; set MLX_ENABLE_TF32=0 for float32 parity", file=sys.stderr)
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
        write_atomic(args.json, lambda tmp: tmp.write_text(report.to_json()))
    if args.report:
        write_atomic(args.report, lambda tmp: tmp.write_text(report.to_html(), encoding="utf-8"))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
