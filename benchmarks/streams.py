"""Plain loop vs zoo.pipeline over N images: images/s, peak RSS, and whether the outputs are the same.

    python benchmarks/streams.py --task classify --n 100 1000            # ResNet-18, 64x64 images
    python benchmarks/streams.py --task classify --n 100 --size 224 --batch 4
    python benchmarks/streams.py --task detect --n 100 1000 --imgsz 64   # YOLOv8n
    python benchmarks/streams.py --task inpaint --n 100 1000             # LaMa, one mask for all
    python benchmarks/streams.py --task segment --n 100 1000             # MobileSAM, one point per image
    python benchmarks/streams.py --task classify --n 10000               # the long soak (hours on 2 CPU cores)

Each (loop, N) runs in a fresh process (peak RSS is that process's ru_maxrss), over the first N
of one set of random JPEGs (``--size`` px square, made once in ``--work``). The loops:

* ``plain``: what the CLIs did before zoo.pipeline: one image at a time, decoded in the loop,
  written as it comes (``model.predict(path)``; ``predict(model, path)``; ``model.inpaint``;
  ``set_image`` + ``predict`` at the image's centre point, its three masks as PNGs).
* ``pipelined``: the CLI itself (``python -m zoo.run ... --jsonl``): decoding on threads ahead of
  the model, ``--batch``.

``same outputs``: the pipelined run's JSONL records (classify, detect), files (inpaint) or mask
PNGs and scores (segment) equal the plain loop's, bit for bit. Weights are ``synthetic:0`` (speed
and memory do not depend on them).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from zoo.sources import read_jsonl

MODELS = {"classify": "resnet18", "detect": "yolov8n", "inpaint": "lama", "segment": "mobilesam"}


def centre(size: int) -> tuple[int, int]:
    """segment's one prompt: a foreground point (x, y) at the image's centre."""
    return size // 2, size // 2


def make_images(work: Path, n: int, size: int) -> Path:
    """``n`` random JPEGs (made once, kept in ``work``) and a mask; a .txt list per N picks the first N."""
    folder = work / f"images{size}"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    have = len(list(folder.glob("*.jpg")))
    for i in range(have, n):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(folder / f"{i:05d}.jpg", quality=90)
    mask = np.zeros((size, size), np.uint8)
    mask[size // 4: size // 2, size // 4: size // 2] = 255
    Image.fromarray(mask).save(work / f"mask{size}.png")
    listing = work / f"list{size}_{n}.txt"
    listing.write_text("".join(f"{folder / f'{i:05d}.jpg'}\n" for i in range(n)))
    return listing


def plain(task: str, listing: Path, out: Path, args) -> int:
    """One image at a time, decoded in the loop: the CLIs' loop before zoo.pipeline."""
    import zoo
    from zoo.sources import JsonlWriter

    model = zoo.load(MODELS[task], weights="synthetic:0")
    paths = listing.read_text().split()
    if task == "inpaint":
        from zoo.images import open_image
        from zoo.models.lama import load_mask, mask_levels

        out.mkdir()
        for path in paths:
            image = open_image(path)
            hole = load_mask(mask_levels(listing.parent / f"mask{args.size}.png"), (image.height, image.width))
            Image.fromarray(model.inpaint(image, hole)).save(out / Path(path).name, quality=95)
        return len(paths)
    if task == "segment":
        from zoo.files import save_mask
        from zoo.images import load_image

        out.mkdir()
        predictor = model.predictor()
        point = np.array([centre(args.size)], np.float64)
        with JsonlWriter(out / "scores.jsonl") as records:
            for path in paths:
                predictor.set_image(load_image(path))
                masks, scores, _ = predictor.predict(point_coords=point, point_labels=np.array([1]),
                                                     multimask_output=True)
                for j, mask in enumerate(masks):
                    save_mask(mask, out / f"{Path(path).stem}_object0_mask{j}.png")
                records.write({"path": path, "scores": [float(s) for s in scores]})
        return len(paths)
    with JsonlWriter(out) as records:
        for path in paths:
            if task == "classify":
                top = model.predict(path, top_k=5)
                records.write({"path": path, "top": [{"index": i, "label": label, "probability": p}
                                                     for i, label, p in top]})
            else:
                result = model.predict(path, imgsz=args.imgsz)[0]
                records.write({"path": path, "detections": result.summary()})
    return len(paths)


def pipelined(task: str, listing: Path, out: Path, args) -> int:
    from zoo.run import main

    argv = [MODELS[task], str(listing), "--weights", "synthetic:0"]
    if task == "inpaint":
        paths = listing.read_text().split()
        # lama takes files and folders, not lists: its images are named on the command line
        argv = [MODELS[task], *paths, "--mask", str(listing.parent / f"mask{args.size}.png"), "--out", str(out),
                "--weights", "synthetic:0"]
    elif task == "segment":
        argv += ["--point", ",".join(map(str, centre(args.size))), "--multimask", "--out", str(out)]
    elif task == "classify":
        argv += ["--jsonl", str(out), "--batch", str(args.batch)]
    else:
        argv += ["--jsonl", str(out), "--batch", str(args.batch), "--imgsz", str(args.imgsz),
                 "--out", str(out.with_suffix(".d"))]
    code = main(argv)
    if code:
        raise SystemExit(f"zoo.run exited {code}")
    return len(listing.read_text().split())


def worker(args) -> None:
    """One measurement in this process: the loop over the list, then peak RSS."""
    import io
    from contextlib import redirect_stdout

    from zoo import registry

    loading = []  # the model's load time: not part of the loop
    load = registry.load

    def timed_load(*a, **k):
        start = time.perf_counter()
        model = load(*a, **k)
        loading.append(time.perf_counter() - start)
        return model

    registry.load = timed_load
    import zoo  # noqa: F401  (zoo.load resolves registry.load when called)

    start = time.perf_counter()
    with redirect_stdout(io.StringIO()):  # the per-image lines: not part of what is measured
        n = (plain if args.worker == "plain" else pipelined)(args.task, Path(args.list), Path(args.out), args)
    seconds = time.perf_counter() - start - sum(loading)
    print(json.dumps({"images": n, "seconds": seconds,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def same_outputs(task: str, a: Path, b: Path) -> bool:
    """``a``: the plain loop's outputs, ``b``: the pipelined run's."""
    if task == "segment":
        masks = sorted(p.name for p in a.glob("*_mask*.png"))
        scores = {Path(r["path"]).stem: r["scores"] for r in read_jsonl(a / "scores.jsonl")}
        return masks == sorted(p.name for p in b.glob("*_mask*.png")) and all(
            (a / name).read_bytes() == (b / name).read_bytes() for name in masks) and all(
            [m["score"] for m in json.loads((b / f"{stem}_masks.json").read_text())["objects"][0]["masks"]] == s
            for stem, s in scores.items())
    if task == "inpaint":
        return sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir()) and all(
            (a / p.name).read_bytes() == (b / p.name).read_bytes() for p in a.iterdir())
    def results(path):  # timings differ from run to run
        return [{k: v for k, v in r.items() if k != "speed"} for r in read_jsonl(path)]

    return results(a) == results(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=tuple(MODELS), default="classify")
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--size", type=int, default=64, help="image side in pixels (default 64)")
    parser.add_argument("--batch", type=int, default=4, help="the pipelined run's --batch (default 4)")
    parser.add_argument("--imgsz", type=int, default=64, help="detect: inference size (default 64)")
    parser.add_argument("--loops", nargs="+", choices=("plain", "pipelined"), default=["plain", "pipelined"],
                        help="which loops, in this order (default both)")
    parser.add_argument("--work", type=Path, help="folder for the images and outputs (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--worker", choices=("plain", "pipelined"), help=argparse.SUPPRESS)
    parser.add_argument("--list", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    work = args.work or Path(tempfile.mkdtemp(prefix="zoo-streams-"))
    rows = []
    print(f"{args.task} ({MODELS[args.task]}), {args.size}x{args.size} JPEGs, batch {args.batch}, work {work}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for n in args.n:
        listing = make_images(work, n, args.size)
        outs, by_loop = {}, {}
        for loop in args.loops:
            out = work / (f"{args.task}-{loop}-{n}" + ("" if args.task in ("inpaint", "segment") else ".jsonl"))
            done = subprocess.run([sys.executable, __file__, "--worker", loop, "--task", args.task, "--list",
                                   str(listing), "--out", str(out), "--size", str(args.size), "--batch",
                                   str(args.batch), "--imgsz", str(args.imgsz)],
                                  capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{loop} N={n} failed:\n{done.stderr[-2000:]}")
            row = {"task": args.task, "loop": loop, "n": n, **json.loads(done.stdout.strip().splitlines()[-1]),
                   "load_average": round(os.getloadavg()[0], 2)}
            row["images_per_s"] = row["images"] / row["seconds"]
            rows.append(row)
            outs[loop] = out
            by_loop[loop] = row
            print(f"  {loop:9s} N={n:6d}: {row['images_per_s']:7.2f} images/s, peak RSS {row['peak_rss_mb']:7.1f} MB "
                  f"({row['seconds']:.1f} s, load {row['load_average']})", flush=True)
        if len(outs) == 2:
            same = same_outputs(args.task, outs["plain"], outs["pipelined"])
            speedup = by_loop["pipelined"]["images_per_s"] / by_loop["plain"]["images_per_s"]
            print(f"  N={n}: pipelined/plain {speedup:.2f}x, same outputs: {same}", flush=True)
            by_loop["pipelined"].update(speedup=speedup, same_outputs=same)
    for loop in args.loops:
        peaks = {r["n"]: r["peak_rss_mb"] for r in rows if r["loop"] == loop}
        if len(peaks) > 1:
            low, high = min(peaks), max(peaks)
            print(f"{loop}: peak RSS at N={high} is {peaks[high] / peaks[low]:.3f}x N={low}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
