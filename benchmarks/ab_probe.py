"""Probe (temporary): a model's user path under variants (stages forced on / off, the memory cap's
factor), interleaved with PyTorch eager in one process, as zoo.bench measures.

    MLX_ENABLE_TF32=0 python benchmarks/ab_probe.py --rounds 60 resnet50:32:float32 ...
variants: NAME[@FACTOR], NAME one of staged, whole, rule.
"""
from __future__ import annotations

import argparse
import os

import torch  # its cuDNN before MLX loads one

torch.backends.cudnn.version()
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
import mlx.core as mx  # noqa: E402

from zoo.bench import measure as M  # noqa: E402
from zoo.bench.cases import IMAGE_SIZE, Case, MlxSide, TorchSide, case_inputs  # noqa: E402

CHOICES = {"staged": lambda *args: True, "whole": lambda *args: False, "rule": None}


def with_factor(run, factor, floor):
    import zoo.compiled

    def call():
        zoo.compiled.CAP_FLOOR = floor
        if factor is None:
            os.environ.pop("ZOO_GPU_MEMORY_FACTOR", None)
        else:
            os.environ["ZOO_GPU_MEMORY_FACTOR"] = factor
        return run()
    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--variants", default="staged,whole")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--warmup-seconds", type=float, default=1.0)
    args = ap.parse_args()
    device = torch.device("cuda")
    for spec in args.cases:
        name, batch, dtype = spec.split(":")
        case = Case(name, int(batch), dtype, IMAGE_SIZE.get(name, 0))
        inputs = case_inputs(case)
        variants = []
        for label in args.variants.split(","):
            label_floor, _, floor = label.partition("#")
            choice, _, factor = label_floor.partition("@")
            floor = int(float(floor) * 2**20) if floor else 64 * 2**20
            side = MlxSide(name, dtype, 0)
            if CHOICES[choice] is not None:
                side.model.compiled.staged = CHOICES[choice]
            fn, fn_args, _ = side.call(case, inputs)
            variants.append(M.Variant(label, with_factor(M.mlx_runner(fn, fn_args, eager=False), factor or None, floor),
                                      "mlx"))
        peer = TorchSide(name, dtype, device, 0, yolo_fused=False)
        tfn, targs, _ = peer.call(case, inputs)
        variants.append(M.Variant("torch", M.torch_runner(tfn, targs, device), "torch"))
        M.run_rounds(variants, device, 0.0, args.warmup_seconds, args.rounds, args.rounds, rotate=True)
        ms = {v.name: M.percentile(v.times_ms, 50) for v in variants}
        print(f"{spec}: " + " | ".join(f"{v.name} {ms[v.name]:.2f} ms {ms[v.name] / ms['torch']:.3f} "
                                       f"{v.record.get('peak_extra_mib', float('nan')):.0f} MiB" for v in variants),
              flush=True)
        variants = side = peer = None
        mx.clear_cache()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
