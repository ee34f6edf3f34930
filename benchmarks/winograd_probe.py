"""Probe (temporary): each distinct float32 3x3 stride-1 convolution of a model alone, as cuDNN
(mx.conv2d), Winograd F2 and F4: median ms per call (K calls per sync), peak MiB above input and
output, error against cuDNN. Then the sums per forward under three rules.

    MLX_ENABLE_TF32=0 python benchmarks/winograd_probe.py resnet50:32 yolov8n:16 ...
"""
import sys
import time
from collections import Counter

import mlx.core as mx
import numpy as np

import zoo
from zoo.compiled import eager
from zoo.kernels import winograd

MIB = 2 ** 20
DEVICE = "gpu" if mx.is_available(mx.gpu) else "cpu"


def record(name, batch):
    model = zoo.load(name, weights="synthetic:0", device=DEVICE, dtype="float32")
    side = 224 if name.startswith("resnet") else 512 if name == "lama" else 640
    x = mx.array(np.random.default_rng(0).uniform(0, 1, (batch, side, side, 3)).astype(np.float32))
    seen = Counter()
    original = mx.conv2d

    def recording(inp, weight, stride=1, padding=0, dilation=1, groups=1, **kw):
        pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
        if weight.shape[1:3] == (3, 3) and pair(stride) == (1, 1) and groups == 1 and pair(dilation) == (1, 1) \
                and pair(padding) in ((1, 1), (0, 0)):
            seen[(tuple(inp.shape), tuple(weight.shape), pair(padding)[0])] += 1
        return original(inp, weight, stride, padding, dilation, groups, **kw)

    mx.conv2d = recording
    try:
        with eager():
            args = (x, (x[..., :1] > 0.5).astype(x.dtype)) if name == "lama" else (x,)
            mx.eval(model(*args))
    finally:
        mx.conv2d = original
    return seen


def timed(fn, k=10, samples=15):
    mx.eval(fn())
    mx.synchronize()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    y = fn()
    mx.eval(y)
    mx.synchronize()
    peak = (mx.get_peak_memory() - before - y.nbytes) / MIB
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        mx.eval([fn() for _ in range(k)])
        mx.synchronize()
        times.append((time.perf_counter() - t) * 1e3 / k)
    return float(np.median(times)), peak, y


def main():
    rng = np.random.default_rng(1)
    for spec in sys.argv[1:]:
        name, batch = spec.split(":")
        convs = record(name, int(batch))
        totals = Counter()
        print(f"\n{spec}: x, O, count, gflop | cudnn ms/MiB | F2 ms/MiB/err | F4 ms/MiB/err | rule")
        for (xs, ws, pad), count in sorted(convs.items(), key=lambda kv: -np.prod(kv[0][0]) * kv[0][1][0]):
            x = mx.array(rng.standard_normal(xs).astype(np.float32))
            w = mx.array((rng.standard_normal(ws) / np.sqrt(9 * ws[-1])).astype(np.float32))
            b = mx.array(rng.standard_normal(ws[0]).astype(np.float32))
            mx.eval(x, w, b)
            gflop = 2 * np.prod(xs[:3]) * 9 * xs[3] * ws[0] / 1e9
            c_ms, c_mib, ref = timed(lambda: mx.conv2d(x, w, padding=pad) + b)
            row = [f"{xs} -> {ws[0]} x{count} {gflop:.2f}", f"{c_ms:.3f}/{c_mib:.0f}"]
            res = {"cudnn": c_ms}
            for form in (winograd.F2, winograd.F4):
                u = winograd.transform_weight(w, form)
                mx.eval(u)
                ms, mib, y = timed(lambda: winograd.conv3x3(x, u, b, pad))
                err = float(mx.abs(y - ref).max() / mx.abs(ref).max())
                res[form.tile] = ms
                row.append(f"{ms:.3f}/{mib:.0f}/{err:.1e}")
            rule = winograd.worth_it(xs, ws)
            row.append("W" if rule else "-")
            print(" | ".join(row))
            totals["cudnn"] += count * res["cudnn"]
            totals["rule F2"] += count * (res[2] if rule else res["cudnn"])
            totals["rule F4"] += count * (res[4] if rule else res["cudnn"])
            totals["best F4/cudnn"] += count * min(res[4], res["cudnn"])
            totals["best of three"] += count * min(res.values())
        print(spec, {k: round(v, 2) for k, v in totals.items()})


main()
