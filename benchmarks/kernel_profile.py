"""Probe (removed once its decision was written in docs/speed-gpu.md): which GPU kernels a compiled user path spends its time in, by CUPTI through
torch.profiler (it records every kernel of the process, MLX's included).

    MLX_ENABLE_TF32=0 python benchmarks/kernel_profile.py yolo11n-pose:16:float32 resnet50:32:float32 ...
"""
import sys
import time

import torch  # its cuDNN before MLX's
from torch.profiler import ProfilerActivity, profile

torch.backends.cudnn.version()
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402


def user_path(name, batch, dtype):
    if name.startswith("mobilesam"):
        sam = zoo.load("mobilesam", weights="synthetic:0", device="gpu", dtype=dtype)
        x = mx.array(np.random.default_rng(0).standard_normal((1, 1024, 1024, 3)).astype(np.float32)).astype(sam.dtype)
        return lambda: sam.encode_image(x)
    model = zoo.load(name, weights="synthetic:0", device="gpu", dtype=dtype)
    side = 224 if name.startswith("resnet") else 640
    x = mx.array(np.random.default_rng(0).uniform(0, 1, (batch, side, side, 3)).astype(np.float32)).astype(model.dtype)
    mx.eval(x)
    return lambda: model(x)


def main():
    for spec in sys.argv[1:]:
        name, batch, dtype = spec.split(":")
        run = user_path(name, int(batch), dtype)
        for _ in range(5):
            mx.eval(run())
        mx.synchronize()
        calls = 10
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                mx.eval(run())
            mx.synchronize()
        wall = (time.perf_counter() - t) * 1e3 / calls
        events = [e for e in prof.key_averages() if e.device_time_total > 0]
        total = sum(e.device_time_total for e in events) / 1e3 / calls
        print(f"\n{spec}: {wall:.2f} ms a call (profiled), GPU kernels {total:.2f} ms a call, "
              f"{sum(e.count for e in events) // calls} launches a call")
        for e in sorted(events, key=lambda e: -e.device_time_total)[:40]:
            print(f"  {e.device_time_total / 1e3 / calls:7.3f} ms  x{e.count // calls:4d}  {e.key[:110]}")


main()
