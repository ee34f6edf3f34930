"""Where a model's GPU time and memory go, convolution by convolution.

    python benchmarks/conv_probe.py --models resnet50:32,yolov8s:16,lama:1 --dtypes float32,float16 --json probe.json

Runs the model once eagerly with mx.conv2d and mx.conv_transpose2d wrapped to record every
convolution's input, weight and settings; then times each distinct convolution alone (median
of --repeats synchronised calls) and measures its peak memory above its input, weight and
output (the backend's workspace), beside GEMM forms of the same convolution: ``matmul`` (a 1x1
stride-1 convolution as one matrix product), ``im2col`` (the k x k patches gathered by
slicing, then one matrix product), ``taps`` (stride 1: one matrix product of every pixel with
all taps, then the shifted tap planes summed, compiled), ``winograd`` (3x3 stride 1:
zoo.kernels.winograd's F(2x2, 3x3), the weight transformed beforehand), ``implicit_gemm`` (float32:
zoo.kernels.implicit_gemm, with the tiles it chooses, or each of ``--tiles``) and, for transposed
convolutions, ``gemm_scatter`` (one matrix product and a sub-pixel scatter, compiled). Each form's
``err`` is its largest difference from cuDNN's output over cuDNN's largest magnitude. With
``--calls-per-sync K`` each timed sample is K calls evaluated together (launch gaps hidden as in a
model's forward), divided by K. Prints one table per model and dtype, largest workspace first, and
the totals weighted by how often each ran.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter

import mlx.core as mx
import numpy as np

from layer_timing import median_ms, mx_sync  # same folder

import zoo
from zoo.kernels import cpu as cpu_ops
from zoo.kernels import implicit_gemm, winograd

MIB = 2**20
FORMS = ("cudnn", "matmul", "im2col", "taps", "winograd", "gemm_scatter", "implicit_gemm")


def record_convs(model, inputs) -> Counter:
    """Every convolution (and transposed convolution) of one eager forward, by settings."""
    seen: Counter = Counter()
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
    original, original_t = mx.conv2d, mx.conv_transpose2d

    def recording(inp, weight, stride=1, padding=0, dilation=1, groups=1, **kw):
        seen[(tuple(inp.shape), tuple(weight.shape), pair(stride), pair(padding), pair(dilation), groups, None)] += 1
        return original(inp, weight, stride, padding, dilation, groups, **kw)

    def recording_t(inp, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1, **kw):
        seen[(tuple(inp.shape), tuple(weight.shape), pair(stride), pair(padding), pair(dilation), groups,
              pair(output_padding))] += 1
        return original_t(inp, weight, stride, padding, dilation, output_padding, groups, **kw)

    mx.conv2d, mx.conv_transpose2d = recording, recording_t
    try:
        from zoo.compiled import eager
        with eager():
            mx.eval(model(*inputs))
    finally:
        mx.conv2d, mx.conv_transpose2d = original, original_t
    return seen


def im2col_conv(x, w, stride, padding):
    o, kh, kw, c = w.shape
    n, h, wd, _ = x.shape
    sh, sw = stride
    ph, pw = padding
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    xp = mx.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    cols = [xp[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :] for i in range(kh) for j in range(kw)]
    patches = mx.concatenate(cols, axis=-1).reshape(n * oh * ow, kh * kw * c)
    return (patches @ w.reshape(o, -1).T).reshape(n, oh, ow, o)


def matmul_conv(x, w):
    n, h, wd, c = x.shape
    return (x.reshape(-1, c) @ w.reshape(w.shape[0], c).T).reshape(n, h, wd, w.shape[0])


def measure(fn, repeats: int, calls_per_sync: int = 1, reference: mx.array | None = None) -> dict:
    """fn's median time per call (layer_timing.median_ms over samples of ``calls_per_sync`` calls), its
    peak memory above its inputs and output, and with a ``reference`` output the largest difference
    from it over the reference's largest magnitude."""
    mx.eval(fn())
    mx.synchronize()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    y = fn()
    mx.eval(y)
    mx.synchronize()
    extra = mx.get_peak_memory() - before - y.nbytes
    result = {"ms": round(median_ms(lambda: [fn() for _ in range(calls_per_sync)], mx_sync, repeats) / calls_per_sync,
                          4),
              "workspace_mib": round(extra / MIB, 1)}
    if reference is not None:
        ref = reference.astype(mx.float32)
        result["err"] = float(mx.abs(y.astype(mx.float32) - ref).max() / mx.maximum(mx.abs(ref).max(), 1e-30))
    del y
    return result


def parse_tiles(text: str | None) -> dict:
    """--tiles BMxBNxTMxTN,... as forms: {"implicit_gemm BMxBNxTMxTN": Tiles}; none: the kernel's own choice."""
    if not text:
        return {"implicit_gemm": None}
    forms = {}
    for spec in text.split(","):
        forms[f"implicit_gemm {spec}"] = implicit_gemm.Tiles(*(int(v) for v in spec.split("x")))
    return forms


def probe(name: str, batch: int, dtype: str, repeats: int, device: str, size: int | None = None,
          calls_per_sync: int = 1, tiles: dict | None = None, forms: set | None = None) -> dict:
    wanted = lambda form: forms is None or form in forms  # noqa: E731  (cuDNN always: the reference)
    model = zoo.load(name, weights="synthetic:0", device=device, dtype=dtype)
    side = size or (224 if name.startswith("resnet") else 512 if name == "lama" else 640)
    x = mx.array(np.random.default_rng(0).uniform(0, 1, (batch, side, side, 3)).astype(np.float32)).astype(model.dtype)
    convs = record_convs(model, (x, (x[..., :1] > 0.5).astype(model.dtype)) if name == "lama" else (x,))
    rng = np.random.default_rng(1)
    rows = []
    for (xs, ws, stride, padding, dilation, groups, output_padding), count in convs.items():
        xin = mx.array(rng.standard_normal(xs).astype(np.float32)).astype(model.dtype)
        w = mx.array(rng.standard_normal(ws).astype(np.float32) * 0.05).astype(model.dtype)
        mx.eval(xin, w)
        row = {"x": xs, "w": ws, "stride": stride, "padding": padding, "groups": groups, "count": count,
               "gflop": round(2 * np.prod(ws) * np.prod(xs[:3]) / (stride[0] * stride[1]) / 1e9, 3)}
        if output_padding is not None:
            row["transposed"], row["output_padding"] = True, output_padding
            row["cudnn"] = measure(lambda: mx.conv_transpose2d(xin, w, stride, padding, dilation, output_padding),
                                   repeats)
            gemm_scatter = mx.compile(lambda a, b: cpu_ops.gemm_conv_transpose2d(a, b, stride, padding, output_padding))
            if wanted("gemm_scatter"):
                row["gemm_scatter"] = measure(lambda: gemm_scatter(xin, w), repeats)
            rows.append(row)
            continue
        cudnn_out = mx.conv2d(xin, w, stride, padding, dilation, groups)
        row["cudnn"] = measure(lambda: mx.conv2d(xin, w, stride, padding, dilation, groups), repeats, calls_per_sync)
        if wanted("implicit_gemm") and model.dtype == mx.float32 and implicit_gemm.fits(ws, stride, padding, groups,
                                                                                     dilation):
            for form, tile in (tiles or {"implicit_gemm": None}).items():
                try:
                    row[form] = measure(lambda: implicit_gemm.conv2d(xin, w, None, stride, padding, tiles=tile),
                                        repeats, calls_per_sync, cudnn_out)
                except RuntimeError as e:  # a tile the GPU cannot launch (registers): reported, not timed
                    print(f"{form} {xs} {ws}: {e}")
        if wanted("taps") and groups == 1 and dilation == (1, 1) and stride == (1, 1) and ws[1:3] != (1, 1):
            pad = ((0, 0), (padding[0],) * 2, (padding[1],) * 2, (0, 0))
            taps = mx.compile(lambda a, b: cpu_ops.gemm_taps_conv2d(mx.pad(a, pad), b))
            row["taps"] = measure(lambda: taps(xin, w), repeats, calls_per_sync)
        if wanted("winograd") and winograd.fits(ws, stride, padding, groups, dilation):
            u = winograd.transform_weight(w)
            mx.eval(u)
            row["winograd"] = measure(lambda: winograd.conv3x3(xin, u, None, padding[0]), repeats, calls_per_sync)
        if groups == 1 and dilation == (1, 1):
            if ws[1:3] == (1, 1) and stride == (1, 1) and padding == (0, 0):
                if wanted("matmul"):
                    row["matmul"] = measure(lambda: matmul_conv(xin, w), repeats, calls_per_sync)
            elif wanted("im2col"):
                row["im2col"] = measure(lambda: im2col_conv(xin, w, stride, padding), repeats)
        rows.append(row)
    rows.sort(key=lambda r: -r["cudnn"]["workspace_mib"])
    total = lambda key: round(sum(r["count"] * r[key]["ms"] for r in rows if key in r), 3)  # noqa: E731
    # every convolution the form computes as it, the others cuDNN
    with_form = lambda key: round(sum(r["count"] * r[key if key in r else "cudnn"]["ms"] for r in rows), 3)  # noqa: E731
    is_form = lambda k: k in FORMS or k.startswith("implicit_gemm")  # noqa: E731
    best = round(sum(r["count"] * min(v["ms"] for k, v in r.items() if is_form(k)) for r in rows), 3)
    forms = sorted({k for r in rows for k in r if is_form(k) and k != "cudnn"})
    summary = {"model": name, "batch": batch, "dtype": dtype, "convs": sum(convs.values()),
               "cudnn_ms": total("cudnn"), "best_of_forms_ms": best, "totals_ms": {k: with_form(k) for k in forms},
               "max_workspace_mib": max(r["cudnn"]["workspace_mib"] for r in rows), "rows": rows}
    print(f"\n## {name} b{batch} {dtype}: {summary['convs']} convs, cuDNN {summary['cudnn_ms']} ms, "
          f"best form each {best} ms, largest cuDNN workspace {summary['max_workspace_mib']} MiB; "
          f"each form where it runs, cuDNN elsewhere: {summary['totals_ms']}")
    print("| x | w | s | p | n | GFLOP | cudnn ms / MiB | other forms ms / MiB |")
    for r in rows:
        alt_text = ", ".join(f"{k} {r[k]['ms']} / {r[k]['workspace_mib']}" + (f" (err {r[k]['err']:.1e})" if "err" in r[k] else "")
                             for k in forms if k in r) or "-"
        print(f"| {r['x']} | {r['w']} | {r['stride'][0]} | {r['padding'][0]} | {r['count']} | {r['gflop']} | "
              f"{r['cudnn']['ms']} / {r['cudnn']['workspace_mib']} | {alt_text} |")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50:32,yolov8s:16", help="comma list of NAME:BATCH")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--size", type=int, help="input side (default: 224 resnet, 512 lama, 640 yolov8)")
    ap.add_argument("--calls-per-sync", type=int, default=1, help="calls per timed sample (default 1)")
    ap.add_argument("--tiles", help="implicit_gemm tiles to try, BMxBNxTMxTN,... (default: its own choice)")
    ap.add_argument("--forms", help=f"comma list of forms beside cuDNN (default: all of {', '.join(FORMS[1:])})")
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []
    for spec in args.models.split(","):
        name, batch = spec.split(":")
        for dtype in args.dtypes.split(","):
            results.append(probe(name, int(batch), dtype, args.repeats, args.device, args.size, args.calls_per_sync,
                                 parse_tiles(args.tiles), set(args.forms.split(",")) if args.forms else None))
            mx.clear_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mlx": mx.__version__, "device": str(mx.default_device()), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
