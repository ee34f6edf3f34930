"""Soak: stream many small images through each task and watch the process's memory.

    nice python benchmarks/soak.py [-n 10000] [--tasks resnet18,yolov8n,mobilesam,lama] [--size 64x48]
                                   [--imgsz N] [--weights synthetic:0] [--device cpu] [--json out.json]

Writes ``n`` distinct small JPEGs (and one mask), then feeds them one by one, by path, to each
task through the public Python API (zoo.load: resnet18 ``predict``, yolov8n ``predict(stream=True)``,
MobileSAM ``set_image`` + ``predict`` with a centre point, LaMa ``inpaint`` with the mask), so it
measures what a user's loop gets, whatever the internals. Each task runs in a fresh process of
its own (this script again, on the same images). RSS (VmRSS) is sampled 20 times;
the first 5 % of the images are warm-up (MLX's compiled graphs and buffer cache fill). Reported
per task: images, seconds, images/s, RSS after warm-up and at the end, the slope of RSS over the
second half of the samples (MiB per 1,000 images, least squares: ~0 means no leak; the first half
still holds caches filling) and the peak RSS. ``--imgsz``
is YOLOv8's inference size (default: the checkpoint's, 640, to which a small image is scaled up).
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

import zoo

SAMPLES = 20
WARM_UP = 0.05


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def write_images(folder: Path, n: int, width: int, height: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        path = folder / f"{i:05d}.jpg"
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(path, quality=90)
        paths.append(path)
    return paths


def runner(task: str, args, mask: Path):
    """A function that processes a list of image paths with ``task``'s public API, one by one."""
    model = zoo.load(task, weights=args.weights, device=args.device)
    width, height = args.width, args.height
    if task.startswith("resnet"):
        return lambda paths: [model.predict(str(p), top_k=5) for p in paths]
    if task.startswith("yolov8"):
        options = {"imgsz": args.imgsz} if args.imgsz else {}
        return lambda paths: list(model.predict([str(p) for p in paths], stream=True, **options))
    if task == "mobilesam":
        predictor = model.predictor()

        def segment(paths):
            for p in paths:
                predictor.set_image(str(p))
                predictor.predict(point_coords=[[width // 2, height // 2]], point_labels=[1])
        return segment
    if task == "lama":
        return lambda paths: [model.inpaint(str(p), str(mask)) for p in paths]
    raise SystemExit(f"unknown task {task}")


def soak(task: str, paths: list[Path], args, mask: Path) -> dict:
    process = runner(task, args, mask)
    warm = max(1, int(len(paths) * WARM_UP))
    process(paths[:warm])
    rest = paths[warm:]
    step = max(1, len(rest) // SAMPLES)
    done, samples = 0, [(0, rss_mib())]
    start = time.perf_counter()
    while done < len(rest):
        process(rest[done:done + step])
        done = min(done + step, len(rest))
        samples.append((done, rss_mib()))
    seconds = time.perf_counter() - start
    counts, rss = np.array(samples[len(samples) // 2:]).T
    slope = np.polyfit(counts, rss, 1)[0] * 1000 if len(counts) > 2 else float("nan")
    return {"task": task, "images": len(paths), "timed_images": len(rest), "seconds": round(seconds, 1),
            "images_per_s": round(len(rest) / seconds, 1), "rss_start_mib": round(samples[0][1]),
            "rss_end_mib": round(samples[-1][1]), "slope_mib_per_1000": round(float(slope), 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "rss_samples": [(int(n), round(r, 1)) for n, r in samples]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10000, help="images per task")
    parser.add_argument("--tasks", default="resnet18,yolov8n,mobilesam,lama")
    parser.add_argument("--size", default="64x48", help="WIDTHxHEIGHT of each image")
    parser.add_argument("--imgsz", type=int, help="YOLOv8's inference size (default: the checkpoint's)")
    parser.add_argument("--weights", default="synthetic:0")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--folder", help=argparse.SUPPRESS)  # a task's own process: the images are there
    args = parser.parse_args()
    args.width, args.height = map(int, args.size.split("x"))
    if args.folder:
        folder = Path(args.folder)
        paths = sorted(folder.glob("*.jpg"))[:args.n]
        print(json.dumps(soak(args.tasks, paths, args, folder / "mask.png")))
        return
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        write_images(folder, args.n, args.width, args.height)
        hole = np.zeros((args.height, args.width), np.uint8)
        hole[args.height // 4:args.height // 2, args.width // 4:args.width // 2] = 255
        Image.fromarray(hole).save(folder / "mask.png")
        for task in args.tasks.split(","):
            done = subprocess.run([sys.executable, __file__, "--tasks", task, "--folder", str(folder), "-n", str(args.n),
                                   "--size", args.size, "--weights", args.weights, "--device", args.device,
                                   *(["--imgsz", str(args.imgsz)] if args.imgsz else [])],
                                  stdout=subprocess.PIPE, text=True, check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{task:<10} {row['timed_images']:>6} images  {row['images_per_s']:>7.1f} img/s  "
                  f"RSS {row['rss_start_mib']} -> {row['rss_end_mib']} MiB  slope {row['slope_mib_per_1000']:+.2f} "
                  f"MiB/1000 images  peak {row['peak_rss_mib']} MiB", flush=True)
    import mlx.core as mx

    report = {"n": args.n, "size": args.size, "imgsz": args.imgsz, "weights": args.weights, "device": args.device,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
              "mlx": mx.__version__, "zoo": zoo.__version__, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
