"""Timing and memory of the variants of one case, in interleaved rounds.

First call of each variant alone (compile tracing, cuDNN autotuning); then interleaved
warm-up for ``warmup_seconds`` (GPUs idle at low clocks); one untimed call per variant
with its framework's peak counter reset (MLX: ``mx.get_peak_memory``; torch on CUDA:
``max_memory_allocated``; both taken above what was in use before the call); then rounds
eager, user, torch, eager, ... each call synchronised and timed alone with GC off, until
``seconds`` have passed (``min_rounds`` .. ``max_rounds``).
"""
from __future__ import annotations

import gc
import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

MIB = 2**20


def percentile(values: list[float], q: float) -> float:
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@dataclass
class Variant:
    name: str  # eager | user | torch
    run: Callable[[], object]  # one synchronised call -> output
    framework: str  # mlx | torch
    times_ms: list = field(default_factory=list)
    out: object = None
    error: str | None = None
    record: dict = field(default_factory=dict)


def mlx_runner(fn, args, eager: bool) -> Callable[[], object]:
    import mlx.core as mx

    from zoo.compiled import eager as eager_mode

    def run():
        if eager:
            with eager_mode():
                out = fn(*args)
        else:
            out = fn(*args)
        mx.eval(out)
        mx.synchronize()
        return out

    return run


def torch_runner(fn, args, device) -> Callable[[], object]:
    import torch

    def run():
        with torch.inference_mode():
            out = fn(*args)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out

    return run


def peak_memory(v: Variant, device) -> None:
    """One call with the framework's peak counter reset: peak above the memory in use before it."""
    if v.framework == "mlx":
        import mlx.core as mx

        mx.synchronize()
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        v.out = v.run()
        v.record["peak_extra_mib"] = round((mx.get_peak_memory() - before) / MIB, 1)
    elif device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        v.out = v.run()
        v.record["peak_extra_mib"] = round((torch.cuda.max_memory_allocated(device) - before) / MIB, 1)
    else:
        v.out = v.run()  # torch's CPU allocator keeps no peak


def run_rounds(variants: list[Variant], device, seconds: float, warmup_seconds: float, min_rounds: int,
               max_rounds: int, rotate: bool = False) -> int:
    """Fill each variant's times; a variant that raises is recorded and left out. Returns the rounds run.
    ``rotate``: each round starts with the next variant (the call after another framework's ran
    slower on an H100: docs/speed-gpu.md, "YOLOv8 in stages")."""
    for v in variants:
        start = time.perf_counter()
        try:
            v.out = v.run()
        except Exception as e:  # noqa: BLE001  one variant failing must not stop the others
            v.error = f"{type(e).__name__}: {e}"[:1000]
            traceback.print_exc()
            continue
        v.record["first_call_ms"] = round((time.perf_counter() - start) * 1e3, 2)
    live = [v for v in variants if v.error is None]
    end = time.perf_counter() + warmup_seconds
    while live and time.perf_counter() < end:
        for v in live:
            v.run()
    for v in live:
        peak_memory(v, device)
    gc.collect()
    gc.disable()
    rounds = 0
    try:
        start = time.perf_counter()
        while live and rounds < max_rounds and (rounds < min_rounds or time.perf_counter() - start < seconds):
            first = rounds % len(live) if rotate else 0
            for v in live[first:] + live[:first]:
                t = time.perf_counter()
                v.run()
                v.times_ms.append((time.perf_counter() - t) * 1e3)
            rounds += 1
    finally:
        gc.enable()
    return rounds


def summary(v: Variant, batch: int, flops: int | None) -> dict:
    out = dict(v.record)
    if v.error:
        out["error"] = v.error
    if v.times_ms:
        p50 = percentile(v.times_ms, 50)
        out.update(p50_ms=round(p50, 3), p90_ms=round(percentile(v.times_ms, 90), 3),
                   min_ms=round(min(v.times_ms), 3), n=len(v.times_ms), img_per_s=round(batch / p50 * 1e3, 1))
        if flops:
            out["tflops"] = round(flops / (p50 * 1e-3) / 1e12, 2)
    return out


def relative_error(got: list, ref: list) -> float | None:
    """max |got - ref| / max |ref| over the outputs (float64), where both are finite; inf where one
    side is NaN/Inf and the other is not (a NaN must not read as agreement); None when shapes differ.
    Values that are not finite on both sides are counted by ``nonfinite``."""
    import numpy as np

    worst = 0.0
    for a, b in zip(got, ref):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return None
        finite_a, finite_b = np.isfinite(a), np.isfinite(b)
        if (finite_a != finite_b).any():
            return float("inf")
        if finite_a.any():
            worst = max(worst, float(np.abs(a - b)[finite_a].max() / max(np.abs(b[finite_b]).max(), 1e-30)))
    return worst


def nonfinite(outputs: list) -> int:
    """How many NaN/Inf values the outputs hold."""
    import numpy as np

    return int(sum(np.size(o) - np.count_nonzero(np.isfinite(np.asarray(o, np.float64))) for o in outputs))
