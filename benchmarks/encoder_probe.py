"""Probe (temporary): MobileSAM's encoder user path with its BatchNorms folded or not, whole or in stages,
interleaved with PyTorch eager in one process, as zoo.bench measures.

    MLX_ENABLE_TF32=0 python benchmarks/encoder_probe.py --rounds 60 float32 float16
variants: built (sam.encode_image as the model builds it), staged, whole (both folded), nofolds (whole). The
upstream code is read from .up/ (../shared/bench/upstream copied beside the clone).
"""
from __future__ import annotations

import argparse
import sys

sys.path.insert(0, ".up/python")
sys.path.append(".up/stubs")

import torch  # its cuDNN before MLX loads one

torch.backends.cudnn.version()
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
import mlx.core as mx  # noqa: E402

from zoo.bench import measure as M  # noqa: E402
from zoo.bench.cases import IMAGE_SIZE, Case, MlxSide, TorchSide, case_inputs  # noqa: E402
from zoo.compiled import CompiledForward  # noqa: E402


def variant(side, name):
    enc = side.model.image_encoder
    if name == "nofolds":
        side.model.encode_image = CompiledForward(enc, enc)
    elif name == "whole":
        side.model.encode_image = CompiledForward(enc, enc, folds=enc.folds())
    elif name == "staged":
        side.model.encode_image = CompiledForward(enc, enc, folds=enc.folds(), stages=enc.stages())
    return side


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dtypes", nargs="+")
    ap.add_argument("--variants", default="built,staged,whole,nofolds")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--warmup-seconds", type=float, default=1.0)
    args = ap.parse_args()
    device = torch.device("cuda")
    name = "mobilesam-encoder"
    for dtype in args.dtypes:
        case = Case(name, 1, dtype, IMAGE_SIZE.get(name, 0))
        inputs = case_inputs(case)
        variants, outs = [], {}
        for label in args.variants.split(","):
            side = variant(MlxSide(name, dtype, 0), label)
            fn, fn_args, out = side.call(case, inputs)
            outs[label] = out(fn(*fn_args))[0]
            variants.append(M.Variant(label, M.mlx_runner(fn, fn_args, eager=False), "mlx"))
        peer = TorchSide(name, dtype, device, 0, yolo_fused=False)
        tfn, targs, tout = peer.call(case, inputs)
        variants.append(M.Variant("torch", M.torch_runner(tfn, targs, device), "torch"))
        M.run_rounds(variants, device, 0.0, args.warmup_seconds, args.rounds, args.rounds, rotate=True)
        ms = {v.name: M.percentile(v.times_ms, 50) for v in variants}
        first = next(iter(outs.values()))
        print(f"{dtype}: " + " | ".join(f"{v.name} {ms[v.name]:.2f} ms {ms[v.name] / ms['torch']:.3f} "
                                        f"{v.record.get('peak_extra_mib', float('nan')):.0f} MiB" for v in variants),
              "| max diff to first:", {k: float(abs(o - first).max()) for k, o in outs.items()}, flush=True)
        variants = side = peer = None
        mx.clear_cache()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
