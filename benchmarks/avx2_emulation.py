"""Run a Python script with every CPU library held to AVX2 and FMA, on an AVX-512 host: the stand-in for
an AVX2 host that docs/speed-cpu.md's "emulated AVX2" rows were measured with (a Zen 4 running AVX2 code
is not an AVX2 CPU: its caches, clocks and cores stay; say so beside any figure).

    python benchmarks/avx2_emulation.py [--path DIR] SCRIPT [ARG ...]

- zoo's C routines: zoo/native/cpu_ops.c built again, into a temporary folder, with -march=x86-64-v3
  and no per-level clones (-DZOO_CLONES=), so every routine and the packed products take their AVX2
  forms (``import zoo``'s debug line says "avx2 (one level, as compiled), ... half panels (AVX2)");
- OpenBLAS (MLX's products): OPENBLAS_CORETYPE=Haswell;
- PyTorch: ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2.

SCRIPT runs in this process's child (this interpreter) after ``import zoo`` (as ../shared/bench/sbs.py
wants), with ``--path DIR`` appended to sys.path (where torch lives, when it is not installed beside zoo).
For example, the CPU speed check of docs/speed-cpu.md (tests/peers runs it):

    python benchmarks/avx2_emulation.py ../shared/bench/sbs.py --device cpu --dtypes float32 --batches 1 \\
        --lama-size 256 --seconds 20 --min-rounds 3 --cases resnet50,yolov8n,mobilesam,lama \\
        --variants mlx,torch --torch-threads 2
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the test extra's backport
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "zoo" / "native" / "cpu_ops.c"
HELD_TO_AVX2 = ["-march=x86-64-v3", "-DZOO_CLONES="]
HELD = {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2"}

# The child: zoo.native.cpu_ops found at the AVX2 build (zoo loads it with ctypes from its spec's origin)
BOOT = """
import importlib.machinery, runpy, sys
library, script, extra = sys.argv[1], sys.argv[2], sys.argv[3]

class AVX2Build:
    @staticmethod
    def find_spec(name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, None, origin=library) if name == "zoo.native.cpu_ops" else None

sys.meta_path.insert(0, AVX2Build)
if extra:
    sys.path.append(extra)
import zoo  # noqa: F401 (before MLX, as sbs.py asks)
sys.argv = [script] + sys.argv[4:]
runpy.run_path(script, run_name="__main__")
"""


def build(folder: Path) -> Path:
    """zoo's C routines for AVX2 only, in ``folder``: the library's path."""
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    modules = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["ext-modules"]
    flags = next(m for m in modules if m["name"] == "zoo.native.cpu_ops")["extra-compile-args"]  # the install's
    library = folder / "cpu_ops_avx2.so"
    done = subprocess.run(compiler + flags + HELD_TO_AVX2 + ["-shared", "-fPIC", str(SOURCE), "-o", str(library),
                                                             "-lpthread", "-lm"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: building {SOURCE.name} for AVX2 failed (a C compiler with -march=x86-64-v3 is needed):\n"
                 f"{done.stderr.strip()}")
    return library


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="", help="a folder appended to the child's sys.path (e.g. torch's)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args()
    if not Path(args.script).is_file():
        parser.exit(2, f"error: {args.script}: no such script; name a Python file to run\n")
    with tempfile.TemporaryDirectory(prefix="zoo-avx2-") as folder:
        library = build(Path(folder))
        env = {**os.environ, **HELD}
        print("avx2_emulation: " + " ".join(f"{k}={v}" for k, v in HELD.items()) + f", zoo's C: {library.name} "
              f"({' '.join(HELD_TO_AVX2)})", file=sys.stderr, flush=True)
        return subprocess.run([sys.executable, "-c", BOOT, str(library), args.script, args.path, *args.args],
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
