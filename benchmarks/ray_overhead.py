"""Where a zoo.ray run's CPU goes: per process of the Ray tree, over the middle of the run.

    python benchmarks/ray_overhead.py --n 1000 [--no-metrics]

Starts a local cluster (``ray.init(num_cpus=2)``, workers at niceness 0), runs
``zoo.ray.run("resnet18", paths, weights="synthetic:0")`` over N 64x64 PNGs (the ones
benchmarks/ray_bench.py makes) and reads /proc for every process of the tree when 30% and
80% of the rows have come back. Prints JSON: images/s in that window and CPU ms per image,
per process (the two model actors, the driver, Ray Data's own actors, raylet, GCS, agents).
``--no-metrics``: Ray's metrics collection off (``_system_config``). Linux only.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from ray_bench import cpu_s, make_images, tree


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:60].strip()
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--no-metrics", action="store_true")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "zoo_ray_bench")
    args = parser.parse_args()
    os.environ["RAY_worker_niceness"] = "0"
    import ray

    import zoo.ray

    paths = make_images(args.work / f"n{args.n}" / "images", args.n, 64)
    ray.init(num_cpus=2, **({"_system_config": {"enable_metrics_collection": False}} if args.no_metrics else {}))
    dataset = zoo.ray.run("resnet18", [str(p) for p in paths], weights="synthetic:0")
    marks, rows, start = {}, 0, time.perf_counter()
    for batch in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
        rows += batch.num_rows
        for mark in (0.3, 0.8):
            if rows >= mark * args.n and mark not in marks:
                marks[mark] = (time.perf_counter(), rows, {pid: cpu_s(pid) for pid in tree(os.getpid())})
    (t0, r0, c0), (t1, r1, c1) = marks[0.3], marks[0.8]
    per_process = sorted(((round(1000 * (c1[pid] - c0.get(pid, 0.0)) / (r1 - r0), 2), command(pid)) for pid in c1),
                         reverse=True)
    print(json.dumps({"n": args.n, "no_metrics": args.no_metrics, "wall_s": round(time.perf_counter() - start, 1),
                      "window_images_per_s": round((r1 - r0) / (t1 - t0), 2),
                      "window_cpu_ms_per_image": round(sum(ms for ms, _ in per_process), 1),
                      "per_process_cpu_ms_per_image": [p for p in per_process if p[0] >= 0.05]}, indent=1))
    ray.shutdown()


if __name__ == "__main__":
    main()
