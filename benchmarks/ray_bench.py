"""Ray Data against as many independent CLI processes: images/s and peak memory (issue 14, point 3's Ray column).

    python benchmarks/ray_bench.py --n 100 1000 --json benchmarks/results/ray_bench.json

For each N (small random PNGs, made once under --work):

* ``processes``: P plain ``python -m zoo.run MODEL half.txt --jsonl ...`` started together, each on
  1/P of the list with OPENBLAS_NUM_THREADS=1 (one core each);
* ``ray``: one ``python -m zoo.run MODEL all.txt --ray --format jsonl`` (a local Ray cluster of the
  machine's CPUs, zoo.ray's defaults: one actor per CPU).

Measured from outside, every 0.5 s: the process trees' summed RSS and PSS (PSS shares Ray's
object store and libraries fairly between processes; Linux /proc) and the JSONL lines written so
far (the writers flush as results come). Reported: wall time and images/s end to end (start-up
included), steady images/s (results between 10% and 90% of N over their time), CPU seconds of
the process trees (user + system, the last reading of each process: what the work cost, whatever
else loads the machine), peak summed RSS and PSS, the process count, the load average, and
whether both runs gave the same top-1 for every image. Linux only (/proc).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from zoo.sources import read_jsonl

POLL_S = 0.5


def make_images(folder: Path, n: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(n)
    paths = [folder / f"{i:05d}.png" for i in range(n)]
    for path in paths:
        if not path.exists():
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
    return paths


def tree(root: int) -> list[int]:
    """``root`` and its descendants (Ray's GCS, raylet and workers descend from the driver)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) one process has used so far; 0 when it has gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in kB; zeros when it has gone."""
    try:
        rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
        pss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                   if line.startswith("Pss:"))
        return rss, pss
    except (OSError, StopIteration):
        return 0, 0


def lines_in(paths: list[Path]) -> int:
    """Records written so far: the temporary .part file while running, the file once renamed."""
    total = 0
    for path in paths:
        for candidate in (*path.parent.glob(f".{path.name}.*.part"), path):
            try:
                total += candidate.read_bytes().count(b"\n")
                break
            except OSError:
                continue
    return total


def measure(commands: list[list[str]], outputs: list[Path], env: dict, n: int, log: Path) -> dict:
    """Run ``commands`` together; poll memory and progress until all exit."""
    start = time.perf_counter()
    with open(log, "w") as log_file:
        procs = [subprocess.Popen(c, env=env, stdout=log_file, stderr=subprocess.STDOUT) for c in commands]
        peak_rss = peak_pss = peak_procs = 0
        progress, cpu = [], {}
        while any(p.poll() is None for p in procs):
            pids = [pid for p in procs for pid in tree(p.pid)]
            for pid in pids:  # the last reading of each process (the poll before it ends)
                cpu[pid] = max(cpu.get(pid, 0.0), cpu_s(pid))
            rss, pss = map(sum, zip(*(memory_kb(pid) for pid in pids))) if pids else (0, 0)
            peak_rss, peak_pss, peak_procs = max(peak_rss, rss), max(peak_pss, pss), max(peak_procs, len(pids))
            progress.append((time.perf_counter() - start, lines_in(outputs)))
            time.sleep(POLL_S)
    wall = time.perf_counter() - start
    codes = [p.returncode for p in procs]
    if any(codes):
        raise SystemExit(f"a run failed ({codes}); see {log}")
    progress.append((wall, lines_in(outputs)))
    return {"wall_s": round(wall, 2), "images_per_s": round(n / wall, 3), "steady_images_per_s": steady(progress, n),
            "cpu_s": round(sum(cpu.values()), 1), "cpu_ms_per_image": round(1000 * sum(cpu.values()) / n, 1),
            "peak_rss_mb": round(peak_rss / 1024), "peak_pss_mb": round(peak_pss / 1024), "processes": peak_procs,
            "loadavg_after": os.getloadavg(), "progress": [(round(t, 1), c) for t, c in progress[::4]]}


def steady(progress: list[tuple[float, int]], n: int) -> float | None:
    """Images/s between the first poll past 10% of N and the last before 90%: start-up left out."""
    inside = [(t, c) for t, c in progress if 0.1 * n <= c <= 0.9 * n]
    if len(inside) < 2 or inside[-1][1] == inside[0][1]:
        return None
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    return round((c1 - c0) / (t1 - t0), 3)


def top1(paths: list[Path]) -> dict[str, tuple]:
    out = {}
    for path in paths:
        for r in read_jsonl(path):  # the CLI's header left out
            if "error" in r:
                out[r["path"]] = r["error"]
            elif "top" in r:  # the plain CLI's records: the top-k, best first
                out[r["path"]] = (r["top"][0]["index"], r["top"][0]["probability"])
            else:
                out[r["path"]] = (r["label"], r["prob"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--weights", default="synthetic:0")
    parser.add_argument("--size", type=int, default=64, help="image side in pixels (the model resizes to 224)")
    parser.add_argument("--processes", type=int, default=os.cpu_count(), help="independent CLI processes")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "zoo_ray_bench")
    parser.add_argument("--ray-worker-niceness", type=int, default=0,
                        help="Ray starts its workers at niceness +15 by default; 0 (here) gives them the CLI "
                             "processes' priority, which matters on a machine shared with other work")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": args.model,
              "ray_worker_niceness": args.ray_worker_niceness,
              "weights": args.weights, "image_size": args.size, "cpus": os.cpu_count(),
              "loadavg_before": os.getloadavg(), "runs": []}
    python = [sys.executable, "-m", "zoo.run", args.model, "--weights", args.weights]
    for n in args.n:
        work = args.work / f"n{n}"
        paths = make_images(work / "images", n, args.size)
        for old in [*work.glob("*.jsonl"), *work.glob("ray/*.jsonl")]:  # progress counts the new files' lines
            old.unlink()
        parts = [paths[k::args.processes] for k in range(args.processes)]
        lists = []
        for k, part in enumerate(parts):
            lists.append(work / f"part{k}.txt")
            lists[-1].write_text("\n".join(map(str, part)))
        (work / "all.txt").write_text("\n".join(map(str, paths)))
        outputs = [work / f"part{k}.jsonl" for k in range(args.processes)]
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        print(f"N={n}: {args.processes} processes ...", file=sys.stderr)
        processes = measure([[*python, str(lst), "--jsonl", str(out)] for lst, out in zip(lists, outputs)],
                            outputs, env, n, work / "processes.log")
        ray_out = work / "ray"
        print(f"N={n}: ray ...", file=sys.stderr)
        ray = measure([[*python, str(work / "all.txt"), "--ray", "--format", "jsonl", "--out", str(ray_out),
                        "--overwrite"]], [ray_out / "predictions.jsonl"],
                      {**os.environ, "RAY_worker_niceness": str(args.ray_worker_niceness)}, n, work / "ray.log")
        same = top1(outputs) == top1([ray_out / "predictions.jsonl"])
        row = {"n": n, "processes": processes, "ray": ray, "same_top1_for_every_image": same,
               "ray_over_processes": {k: round(ray[k] / processes[k], 3)
                                      for k in ("images_per_s", "steady_images_per_s", "cpu_ms_per_image")
                                      if ray[k] and processes[k]}}
        report["runs"].append(row)
        print(json.dumps(row), flush=True)
    runs = report["runs"]
    if len({run["n"] for run in runs}) > 1:  # start-up left out: the cost of each image beyond the smallest N
        first, last = runs[0], runs[-1]
        report["marginal_cpu_ms_per_image"] = {
            kind: round(1000 * (last[kind]["cpu_s"] - first[kind]["cpu_s"]) / (last["n"] - first["n"]), 1)
            for kind in ("processes", "ray")}
        print(json.dumps({"marginal_cpu_ms_per_image": report["marginal_cpu_ms_per_image"]}))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
