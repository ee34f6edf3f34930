"""The user path's peak GPU memory and time under MLX's memory limit, against PyTorch in the same process.

    MLX_ENABLE_TF32=0 python benchmarks/memory_cap.py --upstream ../shared/bench/upstream/python \\
        --cases resnet50:32:float32,yolov8s:16:float32,lama:1:float32 --fractions 0,1.5,1,0.6 --yolo-torch-fused

For each case (model:batch:dtype, zoo.bench's models, inputs and peers) and each fraction f:
``mx.set_memory_limit(in use + f x PyTorch's peak of this run)`` (0: no limit; past the limit
MLX's eval waits for committed CUDA graphs to finish before encoding more), then the user
path's peak above the memory in use before a call, and the p50 of MLX and PyTorch calls
interleaved for ``--seconds`` (zoo.bench.measure.run_rounds). One JSON line per (case, f): memory and time ratios to PyTorch.
The compiled forwards' own cap (zoo.compiled, ``ZOO_GPU_MEMORY_FACTOR``) is off here, so that this
limit alone acts; the sweep that led to it (docs/speed-gpu.md).
"""
from __future__ import annotations

import argparse
import gc
import json
import os

from layer_timing import write_json  # same folder

from zoo.bench import __main__ as bench_main
from zoo.bench import cases as C
from zoo.bench import measure as M


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", required=True, help="comma list of model:batch:dtype")
    ap.add_argument("--fractions", default="0,1.5,1,0.6", help="limits as fractions of PyTorch's peak (0: none)")
    ap.add_argument("--upstream", action="append", default=[], metavar="DIR")
    ap.add_argument("--upstream-fallback", action="append", default=[], metavar="DIR")
    ap.add_argument("--yolo-torch-fused", action="store_true", help="YOLO peer Conv+BN-fused (model.fuse())")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--json", help="write every row here too")
    args = ap.parse_args()
    args.tf32, args.torch_threads, args.device = False, 0, "gpu"
    os.environ["ZOO_GPU_MEMORY_FACTOR"] = "off"  # this script's limit, not the forwards' own cap
    notes = bench_main.prepare_environment(args)
    torch, tdev = bench_main.import_torch(args, notes)
    import mlx.core as mx  # after torch: torch's cuDNN first

    from zoo import devices
    from zoo.bench import run as R

    devices.use("gpu")
    rows = []
    for spec in args.cases.split(","):
        model, batch, dtype = spec.split(":")
        case = C.Case(model, int(batch), dtype, 512 if model == "lama" else C.IMAGE_SIZE.get(model, 1024))
        inputs = C.case_inputs(case)
        mlx_side = C.MlxSide(model, dtype, 0)
        torch_side = C.TorchSide(model, dtype, tdev, 0, args.yolo_torch_fused)
        embedding = R.encoder_embedding(mlx_side, torch_side) if model == "mobilesam-decoder" else None
        mlx_run = M.mlx_runner(*mlx_side.call(case, inputs, embedding)[:2], eager=False)
        torch_run = M.torch_runner(*torch_side.call(case, inputs, embedding)[:2], tdev)
        for _ in range(3):  # the first calls trace (MLX) and autotune (cuDNN): not in the peaks
            mlx_run(), torch_run()
        peer = M.Variant("torch", torch_run, "torch")
        M.peak_memory(peer, tdev)
        torch_peak = peer.record["peak_extra_mib"]
        for f in (float(v) for v in args.fractions.split(",")):
            mx.synchronize()
            previous = mx.set_memory_limit(int(mx.get_active_memory() + f * torch_peak * M.MIB)) if f else None
            user, peer = M.Variant("user", mlx_run, "mlx"), M.Variant("torch", torch_run, "torch")
            try:  # warm-up, the peak of one call each, then interleaved timed rounds
                M.run_rounds([user, peer], tdev, args.seconds, 1.0, 10, 10_000)
            finally:
                if previous is not None:
                    mx.set_memory_limit(previous)
            row = {"model": model, "batch": case.batch, "dtype": dtype, "fraction": f,
                   "mlx_peak_mib": user.record["peak_extra_mib"], "torch_peak_mib": torch_peak,
                   "mlx_ms": round(M.percentile(user.times_ms, 50), 3),
                   "torch_ms": round(M.percentile(peer.times_ms, 50), 3)}
            row["memory_ratio"] = round(row["mlx_peak_mib"] / torch_peak, 2)
            row["time_ratio"] = round(row["mlx_ms"] / row["torch_ms"], 3)
            print(json.dumps(row), flush=True)
            rows.append(row)
        del mlx_side, torch_side, mlx_run, torch_run
        gc.collect()
        mx.clear_cache()
        torch.cuda.empty_cache()
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
