"""Micro-benchmark: zoo.kernels.cpu's CPU forms against MLX's own ops, same process, interleaved.

    python benchmarks/cpu_ops.py [--rounds 15] [--json out.json]

Each row runs the new form and MLX's op on the same input in alternating calls (new, old,
new, ...) and reports their median times and the ratio new/old (below 1 = faster). Shapes
are the ones the models run on (yolov8n at 640, TinyViT at 1024, LaMa at 256, SAM's
decoder). Import order matters on Linux: zoo before mlx, so MLX's GEMMs use OpenBLAS.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import zoo  # noqa: F401  (first: OpenBLAS for MLX)
from zoo import blas
from zoo.kernels import cpu, winograd
from zoo.kernels.core import ENV_VAR

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402


def cases():
    mx.random.seed(0)

    def rand(*shape):
        return mx.random.normal(shape)

    yield ("SiLU, yolov8n layer 0 output (1,320,320,16)", rand(1, 320, 320, 16), None, cpu.silu, nn.silu)
    yield ("sigmoid (1,320,320,16)", rand(1, 320, 320, 16), None, cpu.sigmoid, mx.sigmoid)
    yield ("exact GELU, TinyViT MBConv (1,256,256,256)", rand(1, 256, 256, 256), None, cpu.gelu, nn.gelu)
    dw = rand(256, 3, 3, 1)
    yield ("depthwise 3x3 s1, TinyViT MBConv (1,256,256,256)", rand(1, 256, 256, 256), dw,
           lambda x, w: cpu.depthwise_conv2d(x, w, 1, 1), lambda x, w: mx.conv2d(x, w, padding=1, groups=256))
    dw2 = rand(128, 3, 3, 1)
    yield ("depthwise 3x3 s2, TinyViT merge (1,256,256,128)", rand(1, 256, 256, 128), dw2,
           lambda x, w: cpu.depthwise_conv2d(x, w, 2, 1), lambda x, w: mx.conv2d(x, w, stride=2, padding=1, groups=128))
    for cin, size in ((512, 32), (256, 64), (128, 128)):
        wt = rand(cin // 2, 3, 3, cin)
        yield (f"ConvTranspose2d k3 s2 {cin}->{cin // 2}, LaMa at 256 (1,{size},{size},{cin})", rand(1, size, size, cin), wt,
               lambda x, w: cpu.conv_transpose2d(x, w, 2, 1, 1),
               lambda x, w: mx.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1))
    yield ("ConvTranspose2d k2 s2 256->64, SAM decoder (1,64,64,256)", rand(1, 64, 64, 256), rand(64, 2, 2, 256),
           lambda x, w: cpu.conv_transpose2d(x, w, 2), lambda x, w: mx.conv_transpose2d(x, w, stride=2))
    yield ("Conv2d 7x7 64->3, LaMa's last (1,262,262,64)", rand(1, 262, 262, 64), rand(3, 7, 7, 64),
           cpu.conv2d_few_outputs, mx.conv2d)
    for cin, cout in ((128, 128), (128, 384), (384, 128)):
        yield (f"Conv2d 3x3 reflect {cin}->{cout}, LaMa FFC at 256 (1,32,32,{cin})", rand(1, 32, 32, cin),
               rand(cout, 3, 3, cin), lambda x, w: cpu.conv2d(x, w, None, 1, 1, reflect=True),
               lambda x, w: mx.conv2d(mx.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect"), w))
    for cin, cout, size, reflect, where in ((128, 384, 32, True, "LaMa FFC at 256"), (384, 128, 32, True, "LaMa FFC at 256"),
                                             (64, 64, 80, False, "yolov8n at 640"),
                                             (256, 256, 64, False, "TinyViT neck")):
        w = rand(cout, 3, 3, cin)
        pad = (lambda x: mx.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")) if reflect else (lambda x: x)
        yield (f"Conv2d 3x3 {cin}->{cout} as Winograd, {where} (1,{size},{size},{cin})", rand(1, size, size, cin),
               (w, winograd.transform_weight(w)),
               lambda x, p, r=reflect: cpu.winograd_conv3x3(x, p[1], None, 1, r),
               lambda x, p, pad=pad, r=reflect: mx.conv2d(pad(x), p[0], padding=0 if r else 1))
    yield ("Conv2d 3x3 s2 64->128, LaMa downsampling (1,256,256,64)", rand(1, 256, 256, 64), rand(128, 3, 3, 64),
           lambda x, w: cpu.conv2d(x, w, None, 2, 1, reflect=True),
           lambda x, w: mx.conv2d(mx.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect"), w, stride=2))
    yield ("Conv2d 3x3 s2 32->64, TinyViT patch embed (1,512,512,32)", rand(1, 512, 512, 32), rand(64, 3, 3, 32),
           lambda x, w: cpu.conv2d(x, w, None, 2, 1), lambda x, w: mx.conv2d(x, w, stride=2, padding=1))
    yield ("rfft2 + irfft2 as interleaved parts, LaMa FourierUnit (1,32,32,192)", rand(1, 32, 32, 192), None,
           _fft_round_trip, _mlx_only(_fft_round_trip))
    ln = (rand(128), rand(128))
    yield ("LayerNorm 128, TinyViT stage 1 tokens (1,16384,128)", rand(1, 16384, 128), ln,
           lambda x, p: cpu.layer_norm(x, *p, 1e-5), lambda x, p: mx.fast.layer_norm(x, *p, 1e-5))
    yield ("softmax(scale * s + bias), TinyViT stage 2 scores (25,5,196,196)", rand(25, 5, 196, 196),
           rand(5, 196, 196), lambda x, b: cpu.softmax(x, 0.17, b),
           lambda x, b: mx.softmax(x * 0.17 + b, axis=-1, precise=True))


def _fft_round_trip(x):
    return cpu.irfft2_parts(cpu.rfft2_parts(x), x.shape[1:3])


def _mlx_only(fn):
    """fn with zoo.kernels.cpu giving way to MLX's own ops (ZOO_KERNELS=fallback), evaluated."""
    def call(*args):
        previous = os.environ.get(ENV_VAR, "")
        os.environ[ENV_VAR] = "fallback"
        try:
            out = fn(*args)
            mx.eval(out)
        finally:
            os.environ[ENV_VAR] = previous
        return out
    return call


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    mx.set_default_device(mx.cpu)
    print(f"MLX {mx.__version__} | {platform.machine()} | BLAS {blas.info()} | native: {cpu.native_available()}")
    rows = []
    for name, x, w, new, old in cases():
        inputs = (x,) if w is None else (x, w)
        mx.eval(inputs)
        calls = {"new": lambda: mx.eval(new(*inputs)), "old": lambda: mx.eval(old(*inputs))}
        for f in calls.values():
            f()
        times = {"new": [], "old": []}
        for _ in range(args.rounds):
            for key, f in calls.items():
                start = time.perf_counter()
                f()
                times[key].append(time.perf_counter() - start)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        row = {"op": name, "new_ms": round(med["new"], 3), "mlx_ms": round(med["old"], 3),
               "ratio": round(med["new"] / med["old"], 4), "elements": x.size}
        rows.append(row)
        print(f"{name:62s} new {med['new']:9.2f} ms | mlx {med['old']:9.2f} ms | new/mlx {row['ratio']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mlx": mx.__version__, "blas": blas.info(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
