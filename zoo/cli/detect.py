"""Detection: boxes, classes and scores per image; annotated images and COCO-style JSON in --out."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tqdm import tqdm

from zoo.errors import UsageError, ZooError
from zoo.files import (Inputs, check_new_file, check_output_folder, increment_path, make_output_folder,
                       refuse_inputs, write_atomic, writable_format)
from zoo.images import image_files, load_image
from zoo.weights.synthetic import parse_synthetic


def add_arguments(parser):
    parser.add_argument("images", nargs="+", help="image files or directories")
    parser.add_argument("--conf", type=float, default=0.25, help="keep boxes scoring above this (default 0.25)")
    parser.add_argument("--iou", type=float, default=0.7, help="NMS IoU threshold (default 0.7)")
    parser.add_argument("--classes", help="only these classes: comma-separated names or ids, e.g. person,car")
    parser.add_argument("--agnostic-nms", action="store_true", help="NMS across classes instead of per class")
    parser.add_argument("--max-det", type=int, default=300, help="at most this many boxes per image (default 300)")
    parser.add_argument("--imgsz", type=int, nargs="+", metavar="SIZE",
                        help="inference size: one value or height width, rounded up to multiples of 32 "
                             "(default: the size the checkpoint was trained at, 640 for the official ones)")
    parser.add_argument("--out", help="folder for annotated images and JSON (default: a new runs/detect/predict, "
                        "predict2, ... as ultralytics)")
    parser.add_argument("--overwrite", "--exist-ok", dest="overwrite", action="store_true",
                        help="replace annotated images and JSON that exist in --out (inputs are never replaced)")
    parser.add_argument("--save-json", action="store_true", help="also write <out>/<image stem>.json, COCO-style")


def check_arguments(args):
    from zoo.models.yolov8 import check_imgsz, check_thresholds, class_names, resolve_classes

    check_thresholds(args.conf, args.iou, args.max_det)
    if args.imgsz is not None:
        if len(args.imgsz) > 2:
            raise UsageError(f"--imgsz takes one or two values (height width), got {len(args.imgsz)}")
        args.imgsz = check_imgsz(args.imgsz[0] if len(args.imgsz) == 1 else tuple(args.imgsz))
    if args.classes is not None and (args.weights is None or parse_synthetic(str(args.weights)) is not None):
        # default and synthetic weights carry the COCO names: check now, before any download
        resolve_classes(args.classes, dict(enumerate(class_names())))
    args.files = [f for source in args.images for f in image_files(source)]
    args.names = output_names(args.files)
    inputs = Inputs([*args.images, *args.files, args.weights])
    if args.out is None:
        args.out = increment_path("runs/detect/predict", exist_ok=args.overwrite)
    out = check_output_folder(args.out, "--out", inputs)
    for name in args.names:
        for path in (out / name, *([out / f"{Path(name).stem}.json"] if args.save_json else [])):
            check_new_file(refuse_inputs(path, inputs, "output"), "output", args.overwrite)
    make_output_folder(out, "--out")


def output_names(files: list[Path]) -> list[str]:
    """Per input, the name of its annotated image in --out; its JSON is <the same stem>.json.

    Stems are made unique (x, x_2, x_3 ...), compared ignoring case as macOS and Windows
    folders do: images of one name from two folders, or cat.jpg beside cat.png (one
    cat.json), would overwrite each other. A suffix Pillow cannot write becomes .png.
    """
    taken: set[str] = set()
    names = []
    for f in files:
        stem, n = f.stem, 1
        while stem.lower() in taken:
            n += 1
            stem = f"{f.stem}_{n}"
        taken.add(stem.lower())
        names.append(stem + (f.suffix if writable_format(f) else ".png"))
    return names


def run(args, model) -> int:
    from zoo.models.yolov8.predict import prediction_options

    options = prediction_options(model, args.conf, args.iou, args.classes, args.agnostic_nms, args.max_det,
                                 args.imgsz)
    out = Path(args.out)
    done = skipped = 0
    files = args.files
    bar = tqdm(list(zip(files, args.names)), unit="image", file=sys.stderr, disable=len(files) < 2)
    for path, name in bar:
        try:
            result = model.predict(path, **options_for_predict(options))[0]
        except ZooError as e:
            tqdm.write(f"warning: skipping {path}: {e}", file=sys.stderr)
            skipped += 1
            continue
        result.save(out / name, overwrite=args.overwrite)
        if args.save_json:
            write_atomic(out / f"{Path(name).stem}.json", lambda tmp: tmp.write_text(coco_json(result)))
        tqdm.write(f"{path.name}: {result.verbose()[:-2]} ({sum(result.speed.values()):.1f} ms)")
        done += 1
    bar.close()
    if done == 0:
        raise ZooError(f"none of the {len(files)} images could be read: pass image files Pillow can open")
    note = f", {skipped} skipped" if skipped else ""
    print(f"{done} image{'s' * (done != 1)} processed{note}; results in {out}", file=sys.stderr)
    return 0


def options_for_predict(options: dict) -> dict:
    return {**{k: v for k, v in options.items() if k != "shape"}, "imgsz": options["shape"]}


def coco_json(result) -> str:
    """The detections as a COCO-style JSON list, one detection per line."""
    rows = [json.dumps(d) for d in result.to_coco()]
    return "[\n" + ",\n".join(f"  {row}" for row in rows) + "\n]\n" if rows else "[]\n"
