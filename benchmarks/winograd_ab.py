"""Probe (temporary): python -m zoo.bench with the compiled forwards' Winograd form and thresholds set.

    python benchmarks/winograd_ab.py F4 2.0 64 --models resnet50 --dtypes float32 ...
"""
import runpy
import sys

import torch  # its cuDNN before MLX's (../shared/device/README.md)

torch.backends.cudnn.version()
from zoo.kernels import winograd  # noqa: E402

form, gflop, channels = sys.argv[1:4]
winograd.GPU_FORM = {"F2": winograd.F2, "F4": winograd.F4}[form]
winograd.MIN_GFLOP, winograd.MIN_CHANNELS = float(gflop), int(channels)
print(f"winograd {form}, MIN_GFLOP {gflop}, MIN_CHANNELS {channels}", flush=True)
sys.argv = ["zoo.bench", *sys.argv[4:]]
runpy.run_module("zoo.bench", run_name="__main__")
