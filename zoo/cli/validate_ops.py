"""python -m zoo.validate ops: every primitive the four models run, checked against the numpy
reference on this device, in each dtype (a known-answer suite; exit 1 when any op fails).

Each row names the op, what the models call, the implementation that ran on the device (custom
kernel, CPU form of zoo.kernels.cpu, or MLX op) and per dtype PASS/FAIL
with the relative error (max abs error / max |reference|). Ops with a custom path run again as
'NAME [fallback]' with ZOO_KERNELS=fallback. docs/validation.md explains the tolerances.
"""
from __future__ import annotations

import math
import sys
from collections import defaultdict

from zoo import devices
from zoo.cli import ArgumentParser, guarded, usage_errors
from zoo.errors import UsageError
from zoo.files import check_output_file, json_text, write_text


def parse_dtypes(text: str) -> tuple[str, ...]:
    dtypes = tuple(dict.fromkeys(d.strip() for d in text.split(",") if d.strip()))
    unknown = [d for d in dtypes if d not in devices.DTYPES]
    if not dtypes or unknown:
        raise UsageError(f"--dtype {text}: use a comma-separated list of {', '.join(devices.DTYPES)}")
    return dtypes


def _cell(row) -> str:
    if row is None:
        return "-"
    if math.isnan(row.rel):
        return row.status
    return f"{row.status} {row.rel:.1e}"


def print_table(rows, dtypes, show: str) -> None:
    """One line per op: name, API, implementation, then PASS/FAIL and rel err per dtype."""
    by_name: dict[str, dict] = defaultdict(dict)
    for row in rows:
        by_name[row.name][row.dtype] = row
    lines = []
    for name, cells in by_name.items():
        if show == "failures" and not any(r.failed for r in cells.values()):
            continue
        first = next(iter(cells.values()))
        impls = dict.fromkeys(r.impl for r in cells.values())
        lines.append((name, first.api, " | ".join(impls), [_cell(cells.get(d)) for d in dtypes]))
    widths = [max([len(h)] + [len(line[i]) for line in lines]) for i, h in enumerate(("op", "calls", "impl"))]
    head = ["op", "calls", "impl"]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  " + "  ".join(d.ljust(14) for d in dtypes))
    for name, api, impl, cells in lines:
        print("  ".join(v.ljust(w) for v, w in zip((name, api, impl), widths)) + "  " +
              "  ".join(c.ljust(14) for c in cells))
    for row in rows:
        if row.failed and row.detail:
            print(f"FAIL {row.name} ({row.dtype}): {row.detail}")


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m zoo.validate ops", description=__doc__)
    parser.add_argument("--device", choices=("gpu", "cpu"), help="default: the GPU when MLX has one")
    parser.add_argument("--dtype", default="float32,float16,bfloat16", metavar="LIST",
                        help="comma-separated dtypes (default: float32,float16,bfloat16)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this op or prefix (e.g. conv2d, resize/nearest-4x5); repeatable")
    parser.add_argument("--inject-op", metavar="NAME",
                        help="give this op (or prefix) a wrong result, to show the suite catches it by name")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--show", choices=("all", "failures"), default="all", help="table rows to print")
    parser.add_argument("--json", metavar="PATH", help="write the environment and every row as JSON")
    parser.add_argument("--overwrite", action="store_true", help="replace the --json file if it exists")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = parser.parse_args(argv)
    dtypes = parse_dtypes(args.dtype)
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: use a non-negative integer")
    if args.json:
        check_output_file(args.json, "--json", (), args.overwrite)

    from zoo.validate import opcheck  # imports MLX and the models: after the command line is checked

    with usage_errors():
        opcheck.check_name(args.inject_op, "--inject-op")
        for name in args.only or ():
            opcheck.check_name(name, "--only")
    devices.use(args.device)
    env = opcheck.environment()
    print(f"ops  device={env['device']}  mlx={env['mlx']}  tf32={'on' if env['tf32'] else 'off'}  "
          f"cpu-forms={'on' if env['cpu_forms'] else 'off'}  ZOO_KERNELS={env['zoo_kernels']}  {env['date']}"
          + (f"  inject-op={args.inject_op}" if args.inject_op else ""))
    if env["tf32"]:
        print("note: TF32 is on for float32 matmul/conv; set MLX_ENABLE_TF32=0 for float32 parity", file=sys.stderr)
    rows = opcheck.run(dtypes, args.seed, args.inject_op, args.only)
    print_table(rows, dtypes, args.show)
    failed = sorted({r.name for r in rows if r.failed})
    tolerances = ", ".join(f"{d} {opcheck.tolerance(d, False):g}" for d in dtypes)
    print(f"\n{'PASS' if not failed else 'FAIL'}: {len(rows) - sum(r.failed for r in rows)}/{len(rows)} checks "
          f"within rel err ({tolerances}; 0 for ops that only move values)"
          + (f"; failing ops: {', '.join(failed)}" if failed else ""))
    if args.json:
        report = opcheck.report_dict(env, rows)
        write_text(args.json, json_text(report, args.json, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
