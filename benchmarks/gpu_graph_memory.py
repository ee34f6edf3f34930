"""Peak GPU memory and time of a model's user path for one CUDA-graph size, with or without a memory limit.

    for ops in 100 20 6; do for limit in 0 300; do
        MLX_USE_CUDA_GRAPHS=1 MLX_MAX_OPS_PER_BUFFER=$ops MLX_ENABLE_TF32=0 python benchmarks/gpu_graph_memory.py resnet50 32 float16 $limit
    done; done

One configuration per process: MLX reads MLX_MAX_OPS_PER_BUFFER and MLX_USE_CUDA_GRAPHS once, when
it first uses the GPU (set here, they override the values ``import zoo`` would choose: 6 ops a
commit, graphs off; docs/speed-gpu.md's tables of graph sizes ran with MLX_USE_CUDA_GRAPHS=1).
After 5 warm-up calls: the peak of one call above the memory in use before it
(``mx.get_peak_memory``), then the median of 30 synchronised calls. ``LIMIT_MIB`` > 0 sets ``mx.set_memory_limit(in use + LIMIT_MIB)``, past which
MLX's eval waits for committed work to finish before encoding more. Prints one JSON line.
Models: resnet50 (224 px), yolov8n/yolov8s (640 px), lama (512 px, its generator eagerly);
synthetic weights.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import zoo

SIZES = {"resnet50": 224, "yolov8n": 640, "yolov8s": 640, "lama": 512}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=tuple(SIZES))
    parser.add_argument("batch", type=int)
    parser.add_argument("dtype", choices=("float16", "float32", "bfloat16"))
    parser.add_argument("limit_mib", type=float, nargs="?", default=0.0)
    args = parser.parse_args()
    import mlx.core as mx

    model = zoo.load(args.model, weights="synthetic:0", dtype=args.dtype)
    size = SIZES[args.model]
    x = mx.array(np.random.default_rng(0).random((args.batch, size, size, 3), dtype=np.float32)).astype(model.dtype)
    if args.model == "lama":
        def call():
            return model.generator(mx.concatenate([x, x[..., :1]], axis=-1))
    else:
        def call():
            return model(x)
    for _ in range(5):
        mx.eval(call())
    mx.synchronize()
    base = mx.get_active_memory()
    if args.limit_mib:
        mx.set_memory_limit(int(base + args.limit_mib * 2**20))
    mx.reset_peak_memory()
    mx.eval(call())
    mx.synchronize()
    peak = (mx.get_peak_memory() - base) / 2**20
    times = []
    for _ in range(30):
        start = time.perf_counter()
        mx.eval(call())
        mx.synchronize()
        times.append(time.perf_counter() - start)
    print(json.dumps({"model": args.model, "batch": args.batch, "dtype": args.dtype, "limit_mib": args.limit_mib,
                      "graph_ops": os.environ.get("MLX_MAX_OPS_PER_BUFFER"),
                      "cuda_graphs": os.environ.get("MLX_USE_CUDA_GRAPHS"), "peak_extra_mib": round(peak, 1),
                      "ms": round(1000 * float(np.median(times)), 3), "device": str(mx.default_device())}))


if __name__ == "__main__":
    main()
