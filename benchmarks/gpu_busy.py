"""Is a user path bound by the host or by the GPU? Its wall time against the time its GPU kernels ran.

    MLX_ENABLE_TF32=0 python benchmarks/gpu_busy.py --upstream ../shared/bench/upstream/python \\
        --cases yolov8s:1:float16,mobilesam-encoder:1:float16 --op-costs --json busy.json

For each case (zoo.bench's model:batch:dtype, synthetic weights, its inputs) the user path runs
10 times under torch.profiler, whose CUPTI trace holds every CUDA kernel of the process, MLX's
too: ``gpu_busy_ms`` is the union of the kernels' intervals per forward, ``wall_ms`` the median
synchronised call (the profiler adds host time to it). A wall time well above the busy time is
time the GPU waited for the host to encode and launch: ``gpu_idle_ms`` sums the GPU's idle
stretches per call (between two calls too: the host's time to the first launch),
``top_idle_after_before`` names the kernels around those that added up to most. Also the
kernels and the CUDA API calls that took most. ``--peer``: the PyTorch peer's forward traced the
same way (its kernels beside MLX's). ``--op-costs``: MLX's host time per op on the GPU, eager chains of 300 ops of one
kind (the time to build and schedule them, ``mx.async_eval``, over 300) and per op in all.
Needs torch with CUDA (its profiler; torch is imported first, so that its cuDNN loads first).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from layer_timing import write_json  # same folder

OP_CHAIN = 300
TOP = 12  # kernels listed per case


def traced(run) -> dict:
    """Wall time, GPU busy time and the top kernels and API calls of ``run`` (a synchronised call:
    zoo.bench.measure's runners; 10 calls under the profiler, after 20 untimed ones), per call."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(20):  # traces, cuDNN plans, clocks up
        run()
    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            start = time.perf_counter()
            run()
            walls.append((time.perf_counter() - start) * 1e3)
    path = f"/tmp/zoo_gpu_busy_{os.getpid()}.json"
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.remove(path)
    kernels = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("cat") == "kernel")
    busy, end, by_name = 0.0, float("-inf"), {}
    gaps, previous = [], None  # the GPU's idle stretches: (us, kernel before, kernel after)
    for s, e, name in kernels:
        short = name.split("<")[0].split("(")[0][:48]
        if previous is not None and s - end > 0:
            gaps.append((s - end, previous, short))
        if e > end:
            busy += e - max(s, end)
            end = e
            previous = short
        by_name[short] = by_name.get(short, 0.0) + (e - s)
    by_pair = {}
    for us, before, after in gaps:
        count, total = by_pair.get((before, after), (0, 0.0))
        by_pair[(before, after)] = (count + 1, total + us)
    calls = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            count, total = calls.get(e["name"], (0, 0.0))
            calls[e["name"]] = (count + 1, total + e["dur"])
    return {"wall_ms": round(statistics.median(walls), 3), "kernels_per_forward": len(kernels) / 10,
            "gpu_busy_ms": round(busy / 1e4, 3),
            "top_kernels_ms": {k: round(v / 1e4, 3) for k, v in sorted(by_name.items(), key=lambda t: -t[1])[:TOP]},
            "top_api_calls_per_forward": {k: {"calls": c / 10, "us": round(t / 10, 1)}
                                          for k, (c, t) in sorted(calls.items(), key=lambda t: -t[1][1])[:8]},
            "gpu_idle_ms": round(sum(g[0] for g in gaps) / 1e4, 3),
            "top_idle_after_before": [{"after": b, "before": a, "per_forward": c / 10, "us": round(t / 10, 1)}
                                      for (b, a), (c, t) in sorted(by_pair.items(), key=lambda t: -t[1][1])[:TOP]]}


def busy_row(spec: str, tdev, peer: bool) -> dict:
    from zoo.bench import cases as C
    from zoo.bench import measure as M
    from zoo.bench import run as R

    model, batch, dtype = spec.split(":")
    case = C.Case(model, int(batch), dtype, 512 if model == "lama" else C.IMAGE_SIZE.get(model, 1024))
    inputs = C.case_inputs(case)
    side = C.MlxSide(model, dtype, 0)
    torch_side = C.TorchSide(model, dtype, tdev, 0, False) if peer or model == "mobilesam-decoder" else None
    embedding = R.encoder_embedding(side, torch_side) if model == "mobilesam-decoder" else None
    fn, xs, _ = side.call(case, inputs, embedding)

    row = {"case": spec, **traced(M.mlx_runner(fn, xs, eager=False))}
    if peer:
        tfn, txs, _ = torch_side.call(case, inputs, embedding)
        row["torch"] = traced(M.torch_runner(tfn, txs, tdev))
    return row


def op_costs() -> dict:
    """MLX's host time per op of each kind, float16 NHWC maps of (1, 20, 20, 64)."""
    import mlx.core as mx
    import mlx.nn as nn

    f16 = mx.float16
    x = mx.random.normal((1, 20, 20, 64)).astype(f16)
    rows = mx.random.normal((400, 64)).astype(f16)
    w1 = (mx.random.normal((64, 1, 1, 64)) * 0.1).astype(f16)
    w3 = (mx.random.normal((64, 3, 3, 64)) * 0.03).astype(f16)
    wm = (mx.random.normal((64, 64)) * 0.1).astype(f16)
    silu = mx.compile(lambda a: nn.silu(a * 0.5 + 0.1))
    add_one = mx.fast.cuda_kernel(name="zoo_add_one", input_names=["a"], output_names=["b"],
                                  source="unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; b[i] = a[i] + T(1);")
    chains = {
        "add": (x, lambda a: a + 1),
        "two reshapes + add": (x, lambda a: a.reshape(1, 400, 64).reshape(1, 20, 20, 64) + 1),
        "compiled silu": (x, silu),
        "conv 1x1 (cuDNN)": (x, lambda a: mx.conv2d(a, w1)),
        "conv 3x3 (cuDNN)": (x, lambda a: mx.conv2d(a, w3, padding=1)),
        "matmul (cuBLASLt)": (rows, lambda a: a @ wm),
        "addmm (cuBLASLt)": (rows, lambda a: mx.addmm(a, a, wm)),
        "custom kernel": (x, lambda a: add_one(inputs=[a], template=[("T", f16)], grid=(a.size, 1, 1),
                                               threadgroup=(256, 1, 1), output_shapes=[a.shape],
                                               output_dtypes=[f16])[0]),
        "concatenate + slice": (x, lambda a: mx.concatenate([a, a], axis=-1)[..., :64]),
    }
    mx.eval(x, rows, w1, w3, wm)
    out = {}
    for name, (x0, step) in chains.items():
        host, total = [], []
        for repeat in range(18):
            mx.synchronize()
            start = time.perf_counter()
            a = x0
            for _ in range(OP_CHAIN):
                a = step(a)
            mx.async_eval(a)
            scheduled = time.perf_counter()
            mx.synchronize()
            if repeat >= 3:
                host.append((scheduled - start) * 1e6 / OP_CHAIN)
                total.append((time.perf_counter() - start) * 1e6 / OP_CHAIN)
        out[name] = {"host_us": round(statistics.median(host), 2), "total_us": round(statistics.median(total), 2)}
        print(json.dumps({"op": name, **out[name]}), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="yolov8s:1:float16,mobilesam-encoder:1:float16,mobilesam-decoder:1:float16")
    ap.add_argument("--upstream", action="append", default=[], metavar="DIR",
                    help="folder holding the peers' code (the decoder case builds MobileSAM's for its embedding)")
    ap.add_argument("--upstream-fallback", action="append", default=[], metavar="DIR")
    ap.add_argument("--op-costs", action="store_true", help="also MLX's host time per op of each kind")
    ap.add_argument("--peer", action="store_true", help="also the PyTorch peer's forward, traced the same way")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.tf32, args.torch_threads, args.device = False, 0, "gpu"
    from zoo.bench import __main__ as bench_main

    bench_main.prepare_environment(args)
    torch, tdev = bench_main.import_torch(args, {})
    if torch is None or tdev.type != "cuda":
        sys.exit("error: this needs torch with CUDA (its profiler sees MLX's kernels); install torch for your CUDA")
    from zoo import devices

    devices.use("gpu")
    # the op costs first: measured after the profiler had run in the process, the chains took the
    # host 1.3-2.3x their time in a process without it, in another lease (H100, 2026-11-27 15:42 and
    # 16:18 UTC; not separated from the host's own variation between leases)
    rows = [{"op_costs": op_costs()}] if args.op_costs else []
    for spec in args.cases.split(","):
        rows.append(busy_row(spec, tdev, args.peer))
        print(json.dumps(rows[-1]), flush=True)
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
