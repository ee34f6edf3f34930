"""MobileSAM's prompt + mask decoder user path (sam.decode_prompt) with this checkout's mask decoder against
another commit's, same process, interleaved rounds (the machine may be loaded: compare the per-round ratios).

    python benchmarks/decoder_ab.py --old-commit 6555d10 --rounds 30
    python benchmarks/avx2_emulation.py benchmarks/decoder_ab.py --old-commit 6555d10 --rounds 30

synthetic:0 weights, one random (1, 64, 64, 256) embedding, ``--prompt-sets`` sets of sbs.py's two points
(labels 1, 0), multimask output, on the CPU. The old decoder is that commit's models/mobilesam/mask_decoder.py
(its modules' classes swapped in; the rest of the code, C routines included, is this checkout's). Prints the
largest difference of the outputs, then per variant the median and lowest ms, the median per-round ratio to
the old one, and the process's CPU time per call (all threads).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zoo  # before mlx: zoo.blas

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402

import zoo.models.mobilesam.mask_decoder as new_decoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def old_decoder(commit: str):
    """That commit's mask_decoder.py, imported as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:models/mobilesam/mask_decoder.py"],
                            capture_output=True, text=True)
    if source.returncode != 0:
        sys.exit(f"error: git show {commit}:models/mobilesam/mask_decoder.py failed: {source.stderr.strip()}; "
                 "name a commit of this repository")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source.stdout)
    spec = importlib.util.spec_from_file_location("old_mask_decoder", file.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Path(file.name).unlink()
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-commit", required=True, help="the commit whose mask decoder is the baseline")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--prompt-sets", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    variants = {"old": old_decoder(args.old_commit), "new": new_decoder}
    sam = zoo.load("mobilesam", weights="synthetic:0", device="cpu", dtype=args.dtype)
    rng = np.random.default_rng(0)
    embedding = mx.array(rng.standard_normal((1, 64, 64, 256)).astype(np.float32) * 0.5).astype(sam.dtype)
    points = np.array([[[512.0, 384.0], [200.0, 700.0]]], np.float32)
    coords = mx.array(np.repeat(points, args.prompt_sets, 0)
                      + 7 * np.arange(args.prompt_sets, dtype=np.float32)[:, None, None])
    labels = mx.array(np.repeat(np.array([[1, 0]], np.int32), args.prompt_sets, 0))

    def use(module):
        for _, m in sam.mask_decoder.named_modules():
            cls = getattr(module, type(m).__name__, None)
            if isinstance(cls, type) and issubclass(cls, nn.Module):
                m.__class__ = cls

    def run():
        out = sam.decode_prompt(embedding, (coords, labels), None, None, True)
        mx.eval(out)
        return out

    outputs = {}
    for name, module in variants.items():
        use(module)
        outputs[name] = [np.array(o.astype(mx.float32)) for o in run()]
    for a, b, what in zip(outputs["old"], outputs["new"], ("masks", "iou")):
        print(f"{what}: largest difference {np.abs(a - b).max():.2e} (largest value {np.abs(a).max():.2f})")
    wall = {name: [] for name in variants}
    cpu = {name: [] for name in variants}
    order = list(variants.items())
    for r in range(args.rounds + 2):  # two warm-up rounds
        for name, module in (order if r % 2 else order[::-1]):
            use(module)
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            if r >= 2:
                wall[name].append((time.perf_counter() - start) * 1e3)
                cpu[name].append((time.process_time() - start_cpu) * 1e3)
    for name in variants:
        ratio = statistics.median(a / b for a, b in zip(wall[name], wall["old"]))
        print(f"{name}: median {statistics.median(wall[name]):.2f} ms, lowest {min(wall[name]):.2f}, "
              f"per-round ratio to old {ratio:.3f}, CPU {statistics.median(cpu[name]):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
