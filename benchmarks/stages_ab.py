"""YOLOv8's compiled forward in stages against one trace and PyTorch, in one process.

    MLX_ENABLE_TF32=0 PYTHONPATH=../shared/bench/upstream/python:../shared/bench/upstream/stubs \\
        python benchmarks/stages_ab.py --rounds 60 yolov8n:16:float32 yolov8s:16:float16 yolov8n:1:float16

Per case (zoo.bench's model:batch:dtype, inputs, synthetic weights and PyTorch peer, TF32 off):
the user path with its stages forced on ("staged"), forced off ("whole"), as the model decides
("rule": models/yolov8's STAGED_FROM_GFLOP), and PyTorch eager. After 8 warm-up rounds, the peak
of one call above the memory in use before it, then ROUNDS interleaved rounds, each variant
first in turn (the one after PyTorch's call ran slower): median ms, its ratio to PyTorch's, and
the peak. ``--starts 5``: the stages begin at other layers (default: STAGE_STARTS).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch  # its cuDNN before MLX loads one (../shared/device/README.md)

torch.backends.cudnn.version()
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
import mlx.core as mx  # noqa: E402

import zoo.models.yolov8.model as yolo  # noqa: E402
from zoo.bench.cases import IMAGE_SIZE, Case, MlxSide, TorchSide, case_inputs  # noqa: E402
from zoo.bench.measure import mlx_runner, torch_runner  # noqa: E402

MIB = 2**20
CHOICES = {"staged": lambda *args: True, "whole": lambda *args: False, "rule": None}


def mlx_peak(run) -> float:
    mx.synchronize()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    run()
    return (mx.get_peak_memory() - before) / MIB


def torch_peak(run) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run()
    return (torch.cuda.max_memory_allocated() - before) / MIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+", help="model:batch:dtype, model yolov8n or yolov8s")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--starts", help="comma list of the layers the stages begin at")
    args = ap.parse_args()
    if args.starts:
        yolo.STAGE_STARTS = tuple(int(a) for a in args.starts.split(","))
    device = torch.device("cuda")
    for spec in args.cases:
        name, batch, dtype = spec.split(":")
        case = Case(name, int(batch), dtype, IMAGE_SIZE[name])
        inputs = case_inputs(case)
        runs = {}
        for label, choice in CHOICES.items():
            side = MlxSide(name, dtype, 0)
            if choice is not None:
                side.model.compiled.staged = choice
            fn, fn_args, _ = side.call(case, inputs)
            runs[label] = mlx_runner(fn, fn_args, eager=False)
        peer = TorchSide(name, dtype, device, 0, yolo_fused=False)
        tfn, targs, _ = peer.call(case, inputs)
        runs["torch"] = torch_runner(tfn, targs, device)
        for _ in range(8):
            for run in runs.values():
                run()
        peaks = {k: torch_peak(r) if k == "torch" else mlx_peak(r) for k, r in runs.items()}
        times: dict[str, list[float]] = {k: [] for k in runs}
        order = list(runs)
        for i in range(args.rounds):
            for k in order[i % len(order):] + order[:i % len(order)]:
                t = time.perf_counter()
                runs[k]()
                times[k].append(time.perf_counter() - t)
        ms = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
        print(f"{spec}: " + " | ".join(f"{k} {ms[k]:.2f} ms {ms[k] / ms['torch']:.3f} {peaks[k]:.0f} MiB" for k in runs),
              flush=True)
        runs = side = peer = None
        mx.clear_cache()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
