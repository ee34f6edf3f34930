"""python -m zoo.validate MODEL: per-layer parity of the MLX model against the numpy reference."""
from __future__ import annotations

import json
import math
import sys

from zoo import devices, registry
from zoo.cli import ArgumentParser, add_model_arguments, guarded, model_name_from, usage_errors
from zoo.cli.validate_ops import main as ops_main
from zoo.files import check_output_file, write_atomic
from zoo.errors import ZooError
from zoo.validate import engine
from zoo.validate.capture import parse_fault


def _fmt(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2e}"


def print_table(report: engine.ModeReport, show: str) -> None:
    rows = [r for r in report.layers if show == "all" or r.status != "pass"]
    width = max([len(r.name) for r in rows] + [5])
    print(f"\n== {report.mode} (tolerance: rel err <= {report.tolerance:g}) ==")
    print(f"{'layer':<{width}}  {'shape':<20} {'max abs':>9} {'rel err':>9} {'cosine':>10}  status  flags")
    for r in rows:
        shape = "x".join(map(str, r.shape))
        cos = "-" if math.isnan(r.cosine) else f"{r.cosine:.7f}"
        print(f"{r.name:<{width}}  {shape:<20} {_fmt(r.max_abs):>9} {_fmt(r.rel):>9} {cos:>10}  {r.status:<6}  {', '.join(r.flags)}")


def summary(report: engine.ModeReport) -> str:
    compared = [r for r in report.layers if r.status != "n/a"]
    failed = [r for r in compared if r.failed]
    worst = max(compared, key=lambda r: (r.rel if not math.isnan(r.rel) else math.inf), default=None)
    line = (f"{report.mode}: {'PASS' if not failed else 'FAIL'} {len(compared) - len(failed)}/{len(compared)} layers"
            f" within rel err {report.tolerance:g}")
    if worst is not None:
        line += f"; worst {_fmt(worst.rel)} at {worst.name}" + (f" ({', '.join(worst.flags)})" if worst.flags else "")
    if failed:
        line += f"; first failing layer: {report.first_failure}"
    return line


@guarded
def main(argv: list[str]) -> int:
    if argv and argv[0] == "ops":  # the op known-answer suite, its own command line
        return ops_main(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print("python -m zoo.validate ops [--device gpu|cpu] [--dtype LIST] [--json PATH]: every op the models "
              "run against the numpy reference (ops --help)\n")
    spec = registry.get_spec(model_name_from(argv, "python -m zoo.validate"))
    case = engine.case_module(spec.family)
    parser = ArgumentParser(prog="python -m zoo.validate", description=__doc__)
    parser.add_argument("model")
    add_model_arguments(parser)
    parser.add_argument("--mode", choices=("both", *engine.MODES), default="both")
    parser.add_argument("--inject", metavar="NAME=KIND",
                        help="perturb one MLX module to prove the validator catches it: KIND zero|noise|nan|drop-residual")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the random input")
    parser.add_argument("--show", choices=("all", "failures"), default="all", help="table rows to print")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--overwrite", action="store_true", help="replace the --json file if it exists")
    if hasattr(case, "add_arguments"):
        case.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.json:
        check_output_file(args.json, "--json", [args.weights], args.overwrite)  # before the model is built
    with usage_errors():
        fault = parse_fault(args.inject)
        if args.seed < 0:
            raise ZooError(f"--seed {args.seed}: use a non-negative integer")
        inputs = case.make_inputs(spec, args)  # bad case options fail before the weights are read

    devices.use(args.device)
    weights = registry.read_weights(spec, args.weights, offline_fallback=True)
    model = registry.build(spec, weights, args.dtype)
    run = engine.Run(spec, model, weights.state_dict, case, inputs, args.dtype)
    modes = engine.MODES if args.mode == "both" else (args.mode,)
    reports = [run.compare_mode(mode, fault) for mode in modes]
    head = engine.header(spec, weights.source, args.dtype)

    print(f"{spec.name}  weights={head['weights']}  device={head['device']}  dtype={args.dtype}  "
          f"tf32={'on' if head['tf32'] else 'off'}  mlx={head['mlx']}" + (f"  inject={args.inject}" if fault else ""))
    if head["tf32"]:
        print("note: TF32 is on for float32 matmul/conv; set MLX_ENABLE_TF32=0 for float32 parity", file=sys.stderr)
    for report in reports:
        print_table(report, args.show)
    print()
    for report in reports:
        print(summary(report))
    if args.json:
        write_atomic(args.json, lambda tmp: tmp.write_text(json.dumps(engine.report_dict(head, reports), indent=1)))
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
