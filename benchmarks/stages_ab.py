"""YOLOv8's compiled forward in stages against one trace and PyTorch, in one process.

    MLX_ENABLE_TF32=0 PYTHONPATH=../shared/bench/upstream/python:../shared/bench/upstream/stubs \\
        python benchmarks/stages_ab.py --rounds 60 yolov8n:16:float32 yolov8s:16:float16 yolov8n:1:float16

Per case (zoo.bench's model:batch:dtype, inputs, synthetic weights and PyTorch peer, TF32 off):
the user path with its stages forced on ("staged"), forced off ("whole"), as the model decides
("rule": models/yolov8's STAGED_FROM_GFLOP), and PyTorch eager, measured as zoo.bench measures
(zoo.bench.measure.run_rounds: first calls, warm-up, the peak of one call above the memory in use
before it), in ROUNDS interleaved rounds, each variant first in turn (the one after PyTorch's call
ran slower): median ms, its ratio to PyTorch's, and the peak. ``--starts 5``: the stages begin at
other layers (default: the architecture's stage_starts).
"""
from __future__ import annotations

import argparse
import dataclasses

import torch  # its cuDNN before MLX loads one (../shared/device/README.md)

torch.backends.cudnn.version()
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
import mlx.core as mx  # noqa: E402

import zoo.models.yolov8.model as yolo  # noqa: E402
from zoo.bench import measure as M  # noqa: E402
from zoo.bench.cases import IMAGE_SIZE, Case, MlxSide, TorchSide, case_inputs  # noqa: E402

CHOICES = {"staged": lambda *args: True, "whole": lambda *args: False, "rule": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+", help="model:batch:dtype, model yolov8n or yolov8s")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--warmup-seconds", type=float, default=1.0)
    ap.add_argument("--starts", help="comma list of the layers the stages begin at")
    args = ap.parse_args()
    if args.starts:
        starts = tuple(int(a) for a in args.starts.split(","))
        for name, arch in yolo.ARCHITECTURES.items():
            yolo.ARCHITECTURES[name] = dataclasses.replace(arch, stage_starts=starts)
    device = torch.device("cuda")
    for spec in args.cases:
        name, batch, dtype = spec.split(":")
        case = Case(name, int(batch), dtype, IMAGE_SIZE[name])
        inputs = case_inputs(case)
        variants = []
        for label, choice in CHOICES.items():
            side = MlxSide(name, dtype, 0)
            if choice is not None:
                side.model.compiled.staged = choice
            fn, fn_args, _ = side.call(case, inputs)
            variants.append(M.Variant(label, M.mlx_runner(fn, fn_args, eager=False), "mlx"))
        peer = TorchSide(name, dtype, device, 0, yolo_fused=False)
        tfn, targs, _ = peer.call(case, inputs)
        variants.append(M.Variant("torch", M.torch_runner(tfn, targs, device), "torch"))
        M.run_rounds(variants, device, 0.0, args.warmup_seconds, args.rounds, args.rounds, rotate=True)
        ms = {v.name: M.percentile(v.times_ms, 50) for v in variants}
        print(f"{spec}: " + " | ".join(f"{v.name} {ms[v.name]:.2f} ms {ms[v.name] / ms['torch']:.3f} "
                                       f"{v.record['peak_extra_mib']:.0f} MiB" for v in variants), flush=True)
        variants = side = peer = None
        mx.clear_cache()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
