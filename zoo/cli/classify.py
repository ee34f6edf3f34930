"""Classification: top-k ImageNet classes per image."""
from __future__ import annotations

import csv
import json
import sys

from zoo.errors import UsageError, ZooError
from zoo.files import check_output_file, write_atomic
from zoo.images import image_files


def add_arguments(parser):
    parser.add_argument("images", nargs="+", help="image files or directories")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--csv", metavar="PATH", help="also write the results as CSV, one row per image "
                        "(timm's columns: filename, index_0.., label_0.., prob_0..)")
    parser.add_argument("--overwrite", "--exist-ok", dest="overwrite", action="store_true",
                        help="replace --json/--csv files that exist (inputs are never replaced)")


def check_arguments(args):
    if args.top_k < 1 or args.top_k > 1000:
        raise UsageError(f"--top-k {args.top_k} is out of range: use 1 to 1000")
    args.files = [f for source in args.images for f in image_files(source)]
    for option in ("json", "csv"):
        if getattr(args, option):
            check_output_file(getattr(args, option), f"--{option}", [*args.images, *args.files, args.weights],
                              args.overwrite)


def run(args, model) -> int:
    results = {}
    for path in args.files:
        try:
            top = model.predict(str(path), top_k=args.top_k)
        except ZooError as e:
            if len(args.files) == 1:
                raise
            print(f"warning: skipped {path}: {e}", file=sys.stderr)
            continue
        results[str(path)] = [{"index": i, "label": label, "probability": p} for i, label, p in top]
        print(f"{path}:")
        for i, label, p in top:
            print(f"  {p:7.2%}  {label} ({i})")
    if not results:
        raise ZooError(f"none of the {len(args.files)} images could be read: pass image files Pillow can open")
    if args.json:
        write_atomic(args.json, lambda tmp: tmp.write_text(json.dumps(results, indent=2)))
    if args.csv:
        write_atomic(args.csv, lambda tmp: write_csv(tmp, results))
    return 0


def write_csv(path, results: dict[str, list[dict]]) -> None:
    """timm inference.py's separate-column layout: filename, index_i, label_i, prob_i for rank i."""
    k = max(len(top) for top in results.values())
    columns = ["filename", *(f"{field}_{i}" for field in ("index", "label", "prob") for i in range(k))]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for filename, top in results.items():
            writer.writerow([filename, *(t["index"] for t in top), *(t["label"] for t in top),
                             *(f"{t['probability']:.6g}" for t in top)])
