"""Promptable segmentation (MobileSAM): masks for points and boxes on one image.

    python -m zoo.run mobilesam photo.jpg --point 320,240 --point 100,400,0 --box 50,60,400,300 --out masks/

The prompts form one object: all points, plus a box. Several --box flags make one
object per box (the points can then not be given: they would belong to which
box?). The image is encoded once, whatever the number of objects. Writes per
object the mask PNG(s) (white = inside), one overlay of the best mask of every
object on the image, and a JSON with scores, bounding boxes and areas.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from zoo.errors import UsageError
from zoo.files import (Inputs, check_new_file, check_output_folder, increment_path, make_output_folder,
                       refuse_inputs, write_atomic)
from zoo.images import load_image
from zoo.models.mobilesam.predictor import check_prompts, parse_box, parse_point

# overlay colours per object (RGB), then points: foreground green, background red
COLOURS = ((30, 144, 255), (255, 140, 0), (50, 205, 50), (220, 20, 60), (148, 0, 211), (0, 206, 209))
POINT_COLOURS = {1: (0, 255, 0), 0: (255, 0, 0)}
OVERLAY_ALPHA = 0.5


def add_arguments(parser):
    parser.add_argument("image", help="image file")
    parser.add_argument("--point", action="append", default=[], metavar="X,Y[,LABEL]",
                        help="prompt point in image pixels; LABEL 1 = object (default), 0 = background; repeatable")
    parser.add_argument("--box", action="append", default=[], metavar="X1,Y1,X2,Y2",
                        help="box around the object in image pixels; repeat for several objects")
    parser.add_argument("--multimask", action="store_true",
                        help="three candidate masks per object instead of one (best for a single ambiguous point)")
    parser.add_argument("--out", metavar="DIR",
                        help="output folder (default: a new runs/segment/predict, predict2, ... as ultralytics)")
    parser.add_argument("--overwrite", "--exist-ok", dest="overwrite", action="store_true",
                        help="replace this image's masks, overlay and JSON that exist in --out (inputs are never replaced)")


def prompts_of(points: list[str], boxes: list[str]) -> list[dict]:
    """The objects to segment, as given: [{"point_coords", "point_labels", "box"}, ...]."""
    if not points and not boxes:
        raise UsageError("no prompt: give at least one --point X,Y[,LABEL] or --box X1,Y1,X2,Y2")
    if points and len(boxes) > 1:
        raise UsageError("--point with several --box is ambiguous: give the points with one box, "
                       "or several boxes without points (one object per box)")
    parsed = [parse_point(p) for p in points]
    coords = np.array([p[:2] for p in parsed]) if parsed else None
    labels = np.array([p[2] for p in parsed]) if parsed else None
    return [{"point_coords": coords, "point_labels": labels, "box": None if box is None else parse_box(box)}
            for box in (boxes or [None])]


def check_arguments(args):
    prompts = prompts_of(args.point, args.box)
    args.rgb = load_image(args.image)
    args.prompts = []
    for prompt in prompts:
        coords, labels, box, _ = check_prompts(args.rgb.shape[:2], **prompt)
        args.prompts.append({"point_coords": coords, "point_labels": labels, "box": box})
    inputs = Inputs([args.image, args.weights])
    if args.out is None:
        args.out = increment_path("runs/segment/predict", exist_ok=args.overwrite)
    out = check_output_folder(args.out, "--out", inputs)
    stem = Path(args.image).stem
    fixed = (f"{stem}_overlay.png", f"{stem}_masks.json")
    # this image's outputs, including masks of an earlier run with more objects (replaced or removed)
    earlier = [p for p in out.iterdir() if p.name in fixed or is_mask_of(p.name, stem)] if out.is_dir() else []
    for path in {*earlier, *(out / name for name in fixed)}:
        check_new_file(refuse_inputs(path, inputs, "output"), "output", args.overwrite)
    make_output_folder(out, "--out")


def _save_png(image: Image.Image, path: Path) -> None:
    write_atomic(path, lambda tmp: image.save(tmp, format="PNG"))


def remove_stale_masks(out: Path, stem: str, keep: set[str]) -> None:
    """Delete the mask PNGs of ``stem`` that a previous run wrote and the new JSON does not list
    (only with --overwrite: without it, check_arguments refused an --out holding them)."""
    for path in out.iterdir():
        if is_mask_of(path.name, stem) and path.name not in keep:
            path.unlink(missing_ok=True)


def is_mask_of(name: str, stem: str) -> bool:
    """A regular expression, not a glob: photo_object*_mask*.png would also match the
    masks of an image named photo_object1."""
    return re.fullmatch(rf"{re.escape(stem)}_object\d+_mask\d+\.png", name) is not None


def mask_bbox(mask: np.ndarray) -> list[int] | None:
    """[x1, y1, x2, y2] of the mask's pixels (inclusive), or None for an empty mask."""
    ys, xs = np.nonzero(mask)
    if xs.size == 0:
        return None
    return [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())]


def overlay(rgb: np.ndarray, objects: list[dict]) -> Image.Image:
    """The best mask of each object blended over the image, with its points and box drawn."""
    out = rgb.astype(np.float32)
    for k, obj in enumerate(objects):
        colour = np.array(COLOURS[k % len(COLOURS)], np.float32)
        mask = obj["best_mask"]
        out[mask] = (1 - OVERLAY_ALPHA) * out[mask] + OVERLAY_ALPHA * colour
    image = Image.fromarray(np.clip(np.rint(out), 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    radius = max(3, round(max(rgb.shape[:2]) / 200))
    for k, obj in enumerate(objects):
        prompt = obj["prompt"]
        if prompt["box"] is not None:
            draw.rectangle([float(v) for v in prompt["box"]], outline=COLOURS[k % len(COLOURS)], width=max(2, radius // 2))
        if prompt["point_coords"] is not None:
            for (x, y), label in zip(prompt["point_coords"], prompt["point_labels"]):
                draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=POINT_COLOURS[int(label)],
                             outline=(255, 255, 255))
    return image


def run(args, model) -> int:
    out = Path(args.out)
    stem = Path(args.image).stem
    predictor = model.predictor()
    predictor.set_image(args.rgb)  # the encoder runs once for every object below
    objects, records = [], []
    for k, prompt in enumerate(args.prompts):
        masks, scores, _ = predictor.predict(**prompt, multimask_output=args.multimask)
        best = int(np.argmax(scores))
        entries = []
        for j, (mask, score) in enumerate(zip(masks, scores)):
            path = out / f"{stem}_object{k}_mask{j}.png"
            _save_png(Image.fromarray(mask.astype(np.uint8) * 255), path)
            entries.append({"file": path.name, "score": float(score), "bbox_xyxy": mask_bbox(mask),
                            "area": int(mask.sum())})
        objects.append({"prompt": prompt, "best_mask": masks[best]})
        records.append({
            "points": None if prompt["point_coords"] is None else [
                {"x": float(x), "y": float(y), "label": int(label)}
                for (x, y), label in zip(prompt["point_coords"], prompt["point_labels"])],
            "box_xyxy": None if prompt["box"] is None else [float(v) for v in prompt["box"]],
            "best": best,
            "masks": entries,
        })
    overlay_path = out / f"{stem}_overlay.png"
    _save_png(overlay(args.rgb, objects), overlay_path)
    height, width = args.rgb.shape[:2]
    summary = {"image": str(args.image), "width": width, "height": height, "overlay": overlay_path.name,
               "objects": records}
    json_path = out / f"{stem}_masks.json"
    write_atomic(json_path, lambda tmp: tmp.write_text(json.dumps(summary, indent=2)))
    # after the JSON, not before the run: until the new JSON is in place, the old one's files all exist
    remove_stale_masks(out, stem, {entry["file"] for record in records for entry in record["masks"]})

    print(f"{args.image}: {width}x{height}, {len(records)} object(s)")
    for k, record in enumerate(records):
        for j, entry in enumerate(record["masks"]):
            mark = "*" if j == record["best"] else " "
            bbox = "empty" if entry["bbox_xyxy"] is None else "bbox " + ",".join(map(str, entry["bbox_xyxy"]))
            print(f" {mark} object {k} mask {j}: score {entry['score']:.3f}  area {entry['area']} px  {bbox}  "
                  f"-> {out / entry['file']}")
    print(f"overlay: {overlay_path}\njson: {json_path}")
    return 0
