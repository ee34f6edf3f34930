"""Detect, then segment: YOLO-segmentation label files for a folder of images (ultralytics' auto_annotate).

    python -m zoo.run annotate photos/ --det yolov8s --sam mobilesam --out labels/
    python -m zoo.run annotate photos/ --det runs/train/weights/best.pt --classes cat,dog --save-masks --save-overlay

Per image: the detector's boxes, one batched SAM decoder call with every box as a prompt, and
``<out>/<name>.txt`` with one ``class x1 y1 x2 y2 ...`` line (normalised polygon) per
detection; an image without detections gets an empty label file and a note. zoo/annotate.py
has the details; docs/annotate.md the workflow.
"""
from __future__ import annotations

from zoo.cli import ArgumentParser
from zoo.devices import DTYPES
from zoo.errors import UsageError

PROG = "python -m zoo.run annotate"


def parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=["annotate"], help="this workflow (it runs two models: --det and --sam)")
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="images, folders, globs, .txt/.csv lists of paths or videos (zoo.sources)")
    p.add_argument("--det", default="yolov8n",
                   help="detector: yolov8n ... yolov8x, yolo11n ... yolo11x or a YOLO detection checkpoint (.pt), default yolov8n")
    p.add_argument("--det-weights", help="weights for a --det given by name (a checkpoint or synthetic[:SEED])")
    p.add_argument("--sam", default="mobilesam",
                   help="segmenter: mobilesam or a MobileSAM checkpoint, default mobilesam")
    p.add_argument("--sam-weights", help="weights for a --sam given by name (a checkpoint or synthetic[:SEED])")
    p.add_argument("--out", metavar="DIR",
                   help="folder for the label files (default: <SOURCE>_auto_annotate_labels beside one SOURCE, "
                        "as ultralytics)")
    p.add_argument("--conf", type=float, default=0.25, help="detector: keep boxes scoring above this (default 0.25)")
    p.add_argument("--iou", type=float, default=0.45, help="detector: NMS IoU threshold (default 0.45, as ultralytics' "
                                                           "auto_annotate)")
    p.add_argument("--imgsz", type=int, nargs="+", default=[640], metavar="SIZE",
                   help="detector input size: one value or height width (default 640)")
    p.add_argument("--max-det", type=int, default=300, help="at most this many detections per image (default 300)")
    p.add_argument("--classes", help="only these classes: comma-separated names or ids, e.g. person,car")
    p.add_argument("--save-masks", action="store_true",
                   help="also write <out>/masks/<name>_<line>.png (white = inside)")
    p.add_argument("--save-overlay", action="store_true",
                   help="also write <out>/overlays/<name>.png: masks, boxes and classes on the image")
    p.add_argument("--overwrite", "--exist-ok", dest="overwrite", action="store_true",
                   help="replace label files, masks and overlays that exist (inputs are never replaced)")
    p.add_argument("--recursive", action="store_true", help="look for images in sub-folders of a folder too")
    p.add_argument("--device", choices=("gpu", "cpu"), help="default: the GPU when MLX has one")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    p.add_argument("--quiet", action="store_true", help="no line per image (errors and notes still show)")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    return p


def main(argv: list[str]) -> int:
    """Called by python -m zoo.run (zoo.cli.guarded prints the errors)."""
    from zoo.annotate import AnnotationRun, default_output_dir
    from zoo.files import lock_output_folder

    args = parser().parse_args(argv)
    if len(args.imgsz) > 2:
        raise UsageError(f"--imgsz takes one or two values (height width), got {len(args.imgsz)}")
    imgsz = args.imgsz[0] if len(args.imgsz) == 1 else tuple(args.imgsz)
    data = args.sources[0] if len(args.sources) == 1 else args.sources
    # locked before its files are checked: a second run into the folder stops here (AnnotationRun checks the rest)
    lock_output_folder(args.out or default_output_dir(data), "--out", args.sources)
    run = AnnotationRun(data, args.det, args.sam, args.device, args.conf, args.iou, imgsz, args.max_det,
                        args.classes, args.out, args.save_masks, args.save_overlay, args.overwrite,
                        args.det_weights, args.sam_weights, args.dtype, args.recursive,
                        verbose=not args.quiet, progress=True)
    annotations = run.run()
    empty = sum(not len(a.classes) for a in annotations)
    print(f"{run.pipeline.summary('annotated')}; {sum(len(a.classes) for a in annotations)} labels, "
          f"{empty} empty label file{'s' * (empty != 1)}; labels in {run.outputs.folder}")
    return run.pipeline.exit_code
