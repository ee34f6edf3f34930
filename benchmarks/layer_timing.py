"""What the per-layer profilers (lama_profile.py, yolo_profile.py) share: their common options, the
upstream code put on sys.path, and synchronised median timings of MLX and PyTorch calls."""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def median_ms(fn, sync, repeats: int) -> float:
    for _ in range(3):
        sync(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sync(fn())
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def parser(doc: str, upstream: str, size: int, dtypes: str) -> argparse.ArgumentParser:
    """The options both profilers take; ``upstream`` names what the --upstream folder holds."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--upstream", help=f"folder holding {upstream}, searched first")
    p.add_argument("--upstream-fallback", help="folder of stand-ins for upstream's unused imports, searched last")
    p.add_argument("--size", type=int, default=size)
    p.add_argument("--dtypes", default=dtypes)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json")
    p.add_argument("--torch-device", default="cuda")
    return p


def parse(p: argparse.ArgumentParser):
    """The options, with the upstream folders on sys.path."""
    args = p.parse_args()
    if args.upstream:
        sys.path.insert(0, args.upstream)
    if args.upstream_fallback:
        sys.path.append(args.upstream_fallback)
    return args


def mx_sync(out) -> None:
    import mlx.core as mx

    mx.eval(out)
    mx.synchronize()


def torch_sync(device: str):
    import torch

    return (lambda _: torch.cuda.synchronize()) if device == "cuda" else (lambda _: None)


def write_json(path: str | None, rows: list) -> None:
    """The rows as JSON at ``path`` (--json), if one was given."""
    if path:
        import json

        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
