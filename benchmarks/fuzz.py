"""The long fuzz run: every test of tests/test_fuzz.py with many examples, each in a pytest process of its own.

    nice python benchmarks/fuzz.py [--examples 10000] [--jobs 2] [--tests images,safetensors_files=5000,...] [--json out.json]

Each test runs as ``ZOO_FUZZ_EXAMPLES=N python -m pytest tests/test_fuzz.py::TEST
--hypothesis-show-statistics``; the summary counts, per test, the examples that passed (read, or
refused with one ZooError line, within the memory and 2 s CPU bounds), the failures (any other
exception, or a bound broken: pytest's exit code 1), crashes (killed by a signal) and hangs (the
test's watchdog ends the process after 60 s in one case; here any process running longer than
--timeout is also killed and counted). Runs ``--jobs`` tests at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["test_mutated_torch_files", "test_zip_headers_that_lie", "test_pickle_opcode_streams",
         "test_tensor_geometry_that_lies", "test_safetensors_files", "test_images", "test_lama_masks",
         "test_record_files", "test_temporary_names_already_taken", "test_zoo_run_command_lines",
         "test_zoo_validate_command_lines"]
PASSING = re.compile(r"(\d+) passing examples?, (\d+) failing examples?, (\d+) invalid examples?")


def run(test: str, examples: int, timeout: float) -> dict:
    start = time.perf_counter()
    env = {**os.environ, "ZOO_FUZZ_EXAMPLES": str(examples)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
               f"tests/test_fuzz.py::{test}"]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        code, output = "timeout", (expired.stdout or b"").decode(errors="replace")
    counts = [tuple(map(int, m)) for m in PASSING.findall(output)]
    passing = sum(c[0] for c in counts)
    return {"test": test, "examples": examples, "passing": passing, "failing": sum(c[1] for c in counts),
            "exit": code, "crash": isinstance(code, int) and code < 0, "hang": code == "timeout",
            "seconds": round(time.perf_counter() - start), "tail": output.strip().splitlines()[-3:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tests", default=",".join(TESTS),
                        help="comma-separated test names (test_ may be left out), each with =N for its own --examples")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one test may take in all")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    tests = []
    for item in args.tests.split(","):
        name, _, examples = item.partition("=")
        tests.append(("" if name.startswith("test_") else "test_") + name)
        tests[-1] = (tests[-1], int(examples) if examples else args.examples)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = []
        for row in pool.map(lambda test: run(*test, args.timeout), tests):
            rows.append(row)
            verdict = "ok" if row["exit"] == 0 and row["passing"] >= row["examples"] else f"FAILED {row['tail']}"
            print(f"{row['test']:<34} {row['passing']:>6} passing  {row['failing']} failing  crash {int(row['crash'])}  "
                  f"hang {int(row['hang'])}  {row['seconds']:>5} s  {verdict}", flush=True)
    import hypothesis
    import PIL
    import safetensors

    report = {"started": started, "python": platform.python_version(),
              "hypothesis": hypothesis.__version__, "pillow": PIL.__version__, "safetensors": safetensors.__version__,
              "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    sys.exit(0 if all(r["exit"] == 0 for r in rows) else 1)


if __name__ == "__main__":
    main()
