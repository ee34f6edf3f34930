"""Peak memory of every task on one large photo (default 8000x8000), through the command line.

    nice python benchmarks/big_photo.py [--size 8000] [--tasks classify,detect,segment,inpaint-crop,inpaint-resize]
                                        [--resize-limit N] [--weights synthetic:0] [--device cpu] [--json out.json]

Writes a synthetic photo (smooth colour fields and texture, JPEG q90) and a mask with one
500x400 hole, then runs each task's `python -m zoo.run` one at a time, in a child process of
its own, and reports its exit code, wall time and peak RSS (the child's ru_maxrss, from wait4).
The decoded photo alone is size*size*3 bytes (183 MiB at 8000): the figure to compare with.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

TASKS = {  # name -> zoo.run arguments after the image (the photo is IMAGE, the mask MASK)
    "classify": ["resnet18", "IMAGE"],
    "detect": ["yolov8n", "IMAGE", "--out", "OUT"],
    "segment": ["mobilesam", "IMAGE", "--point", "CENTRE", "--out", "OUT"],
    "inpaint-crop": ["lama", "IMAGE", "--mask", "MASK", "--hd-strategy", "crop", "--out", "OUT"],
    "inpaint-resize": ["lama", "IMAGE", "--mask", "MASK", "--hd-strategy", "resize", "--out", "OUT"],
}


def synthetic_photo(size: int, path: Path) -> None:
    """Smooth fields (upsampled noise) with fine texture: compresses and decodes like a photo."""
    rng = np.random.default_rng(0)
    coarse = Image.fromarray(rng.integers(0, 256, (size // 200 + 2, size // 200 + 2, 3), dtype=np.uint8))
    photo = np.asarray(coarse.resize((size, size), Image.BICUBIC)).copy()
    for start in range(0, size, 1000):  # texture in bands: never a second full-size int array
        band = photo[start:start + 1000]
        band += rng.integers(0, 16, band.shape, dtype=np.uint8)
    Image.fromarray(photo).save(path, quality=90)


def hole_mask(size: int, path: Path) -> None:
    mask = np.zeros((size, size), np.uint8)
    mask[size // 2 - 200:size // 2 + 200, size // 2 - 250:size // 2 + 250] = 255
    Image.fromarray(mask).save(path)


def run_task(argv: list[str]) -> dict:
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "zoo.run", *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    return {"exit": os.waitstatus_to_exitcode(status), "seconds": round(time.perf_counter() - start, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024), "stderr_tail": stderr.strip().splitlines()[-1:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=8000)
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--resize-limit", type=int, help="inpaint-resize: LaMa's --resize-limit (default: its own)")
    parser.add_argument("--weights", default="synthetic:0")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        photo, mask = folder / "photo.jpg", folder / "photo_mask.png"
        synthetic_photo(args.size, photo)
        hole_mask(args.size, mask)
        print(f"photo {args.size}x{args.size}: {photo.stat().st_size / 1e6:.1f} MB JPEG; "
              f"decoded {args.size * args.size * 3 / 2**20:.0f} MiB", flush=True)
        for task in args.tasks.split(","):
            out = folder / f"out-{task}"
            names = {"IMAGE": str(photo), "MASK": str(mask), "OUT": str(out), "CENTRE": f"{args.size // 2},{args.size // 2}"}
            options = ["--resize-limit", str(args.resize_limit)] if args.resize_limit and task == "inpaint-resize" else []
            argv = [names.get(a, a) for a in TASKS[task]] + options + ["--weights", args.weights, "--device", args.device]
            row = {"task": task, "command": "python -m zoo.run " + " ".join(TASKS[task] + options), **run_task(argv)}
            rows.append(row)
            print(f"{task:<15} exit {row['exit']}  {row['seconds']:>7.1f} s  peak RSS {row['peak_rss_mib']:>6} MiB"
                  + (f"  {row['stderr_tail'][0]}" if row["exit"] else ""), flush=True)
    report = {"size": args.size, "weights": args.weights, "device": args.device, "python": platform.python_version(),
              "machine": platform.machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
