"""Promptable segmentation (MobileSAM): masks for points and boxes, or for everything, per image.

    python -m zoo.run mobilesam photo.jpg --point 320,240 --point 100,400,0 --box 50,60,400,300 --out masks/
    python -m zoo.run mobilesam photo.jpg --everything --points-per-side 32 --out masks/
    python -m zoo.run mobilesam photos/ --box 10,10,200,200 --out masks/      # a folder: the same prompts per image

The prompts form one object: all points, plus a box. Several --box flags make one
object per box (the points can then not be given: they would belong to which
box?). The image is encoded once, whatever the number of objects. Writes per
image and object the mask PNG(s) (white = inside), one overlay of the best mask of every
object on the image, and a JSON with scores, bounding boxes and areas.

--everything runs the automatic mask generator (upstream's SamAutomaticMaskGenerator, its
parameters as options) instead: per image ``<name>_everything<i>.png`` per mask, a JSON whose
records have upstream's keys with the segmentation as COCO RLE, and an overlay of all masks;
a progress bar runs over point batches and crops.

Several images (files, folders, globs, lists: zoo.sources) get the same prompts; each
image's outputs start with its own name, made unique (cat, cat_2) when two share a stem.
"""
from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from zoo.cli import usage_errors
from zoo.errors import UsageError, ZooError
from zoo.files import (Inputs, check_new_file, increment_path, json_text, lock_output_folder,
                       make_output_folder, refuse_inputs, save_mask, save_png, write_text)
from zoo.images import IMAGE_SUFFIXES, image_size, load_image
from zoo.instances import SAM_RUN_BYTES, check_full_size_masks
from zoo.models.mobilesam.automatic_mask_generator import SamAutomaticMaskGenerator, check_crop_layers
from zoo.models.mobilesam.predictor import check_prompts, parse_box, parse_point
from zoo.results import blend_masks, class_colour
from zoo.sources import Files, open_source, planned_names

# overlay colours per object (RGB), then points: foreground green, background red
COLOURS = ((30, 144, 255), (255, 140, 0), (50, 205, 50), (220, 20, 60), (148, 0, 211), (0, 206, 209))
POINT_COLOURS = {1: (0, 255, 0), 0: (255, 0, 0)}


# --everything's options: the generator's parameters (upstream's names and defaults; None = its default)
GENERATOR_OPTIONS = {
    "points_per_side": (int, "points per side of the prompt grid (default 32)"),
    "points_per_batch": (int, "points through the decoder at once (default 64; at most 16 are decoded together: memory)"),
    "pred_iou_thresh": (float, "keep masks whose predicted IoU is above this, 0-1 (default 0.88)"),
    "stability_score_thresh": (float, "keep masks at least this stable, 0-1 (default 0.95)"),
    "stability_score_offset": (float, "logit offset of the stability score (default 1.0)"),
    "box_nms_thresh": (float, "box IoU above which duplicates are dropped, 0-1 (default 0.7)"),
    "crop_n_layers": (int, "also segment crops of the image, this many layers of them (default 0)"),
    "crop_nms_thresh": (float, "box IoU for duplicates between crops, 0-1 (default 0.7)"),
    "crop_overlap_ratio": (float, "overlap of neighbouring crops, 0-1 (default 512/1500)"),
    "crop_n_points_downscale_factor": (int, "points per side divided by this per crop layer (default 1)"),
    "min_mask_region_area": (int, "remove holes and islands under this many pixels (default 0: off)"),
}


def add_arguments(parser):
    parser.add_argument("images", nargs="+", metavar="IMAGE",
                        help="image files, folders, globs or .txt/.csv lists of paths (zoo.sources)")
    parser.add_argument("--point", action="append", default=[], metavar="X,Y[,LABEL]",
                        help="prompt point in image pixels; LABEL 1 = object (default), 0 = background; repeatable")
    parser.add_argument("--box", action="append", default=[], metavar="X1,Y1,X2,Y2",
                        help="box around the object in image pixels; repeat for several objects")
    parser.add_argument("--multimask", action="store_true",
                        help="three candidate masks per object instead of one (best for a single ambiguous point)")
    parser.add_argument("--everything", action="store_true",
                        help="segment everything (automatic mask generator) instead of prompts")
    for name, (kind, text) in GENERATOR_OPTIONS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, metavar="N" if kind is int else "X",
                            help=f"--everything: {text}")
    parser.add_argument("--recursive", action="store_true", help="look for images in sub-folders of a folder too")
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
    args.params = {name: getattr(args, name) for name in GENERATOR_OPTIONS if getattr(args, name) is not None}
    if args.everything:
        if args.point or args.box or args.multimask:
            raise UsageError("--everything takes no prompts: drop --point/--box/--multimask, or drop --everything")
        with usage_errors():  # the generator's own checks, before the model loads (it is attached in run)
            SamAutomaticMaskGenerator(None, **args.params, output_mode="coco_rle")
        args.prompts = None
    else:
        if args.params:
            flags = ", ".join("--" + name.replace("_", "-") for name in args.params)
            raise UsageError(f"{flags} go with --everything: add --everything, or drop them")
        args.prompts = prompts_of(args.point, args.box)
    if args.out is None:
        args.out = increment_path("runs/segment/predict", exist_ok=args.overwrite)
    args.rgb = None
    if len(args.images) == 1 and Path(args.images[0]).suffix.lower() in IMAGE_SUFFIXES \
            and not Path(args.images[0]).is_dir():
        args.rgb = load_image(args.images[0])  # one image: read now, so a bad one fails before the model loads
        args.source = Files([Path(args.images[0])])
    else:
        args.source = open_source(args.images, recursive=args.recursive, outputs=[args.out])  # its images: no inputs
    names = planned_names(args.source)
    items = list(args.source) if names is not None else []
    if args.prompts is not None or args.params.get("crop_n_layers"):
        for item in items:  # prompts, or the crop layers, against each image's size, from its header
            try:
                size = args.rgb.shape[:2] if args.rgb is not None else image_size(item.path)
            except ZooError:
                continue  # an unreadable image is reported when its turn comes
            try:
                with usage_errors():
                    if args.prompts is None:
                        check_crop_layers(args.params["crop_n_layers"], size)
                    else:
                        checked_prompts(size, args.prompts)
            except UsageError as e:
                raise UsageError(f"{item.path}: {e}" if len(items) > 1 else str(e)) from None
    inputs = Inputs([*args.images, *(item.path for item in items), args.weights], outputs=[args.out])
    out = lock_output_folder(args.out, "--out", inputs)
    for name in names or ():
        check_outputs_of(out, name, inputs, args.overwrite)
    args.inputs, args.planned = inputs, names is not None
    make_output_folder(out, "--out")


def check_outputs_of(out: Path, name: str, inputs: Inputs, overwrite: bool) -> None:
    """UsageError when an output of image ``name`` is an input, or exists without ``overwrite``."""
    fixed = (f"{name}_overlay.png", f"{name}_masks.json")
    # this image's outputs, including masks of an earlier run with more objects (replaced or removed)
    earlier = [p for p in out.iterdir() if p.name in fixed or is_mask_of(p.name, name)] if out.is_dir() else []
    for path in {*earlier, *(out / f for f in fixed)}:
        check_new_file(refuse_inputs(path, inputs, "output"), "output", overwrite)


def checked_prompts(size: tuple[int, int], prompts: list[dict]) -> list[dict]:
    out = []
    for prompt in prompts:
        coords, labels, box, _ = check_prompts(size, **prompt)
        out.append({"point_coords": coords, "point_labels": labels, "box": box})
    return out


def listed_masks(json_path: Path) -> set[str]:
    """The mask files an earlier run's JSON of this image lists: the only files of that run a new one
    removes when it does not write them again. An unreadable or foreign JSON lists none."""
    try:
        summary = json.loads(json_path.read_text(encoding="utf-8"))
        entries = summary["masks"] if "masks" in summary else [m for o in summary["objects"] for m in o["masks"]]
        return {entry["file"] for entry in entries if isinstance(entry["file"], str)}
    except (OSError, ValueError, LookupError, TypeError):
        return set()


def remove_stale_masks(out: Path, stem: str, earlier: set[str], keep: set[str]) -> None:
    """Delete the mask PNGs of ``stem`` that the previous run's JSON listed (``earlier``) and the new
    one does not (only with --overwrite: without it, check_arguments refused an --out holding
    them). A file no run of ours listed is never deleted, whatever its name."""
    for name in earlier - keep:
        if is_mask_of(name, stem):  # a plain name of this image's masks: nothing outside --out
            (out / name).unlink(missing_ok=True)


def is_mask_of(name: str, stem: str) -> bool:
    """A mask PNG of image ``stem``, from prompts (``_object<k>_mask<j>``) or --everything (``_everything<i>``).
    A regular expression, not a glob: photo_object*_mask*.png would also match the
    masks of an image named photo_object1."""
    return re.fullmatch(rf"{re.escape(stem)}_(object\d+_mask\d+|everything\d+)\.png", name) is not None


def mask_bbox(mask: np.ndarray) -> list[int] | None:
    """[x1, y1, x2, y2] of the mask's pixels (inclusive), or None for an empty mask."""
    ys, xs = np.nonzero(mask)
    if xs.size == 0:
        return None
    return [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())]


def overlay(rgb: np.ndarray, objects: list[dict]) -> Image.Image:
    """The best mask of each object blended over the image, with its points and box drawn."""
    image = Image.fromarray(blend_masks(rgb, [obj["best_mask"] for obj in objects],
                                        [COLOURS[k % len(COLOURS)] for k in range(len(objects))]))
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


def segment_prompts(model, rgb: np.ndarray, item, prompts: list[dict], multimask: bool, out: Path) -> None:
    """The prompts' masks, overlay and JSON of one image."""
    stem = item.name
    earlier = listed_masks(out / f"{stem}_masks.json")
    prompts = checked_prompts(rgb.shape[:2], prompts)
    predictor = model.predictor()
    predictor.set_image(rgb)  # the encoder runs once for every object below
    objects, records = [], []
    for k, prompt in enumerate(prompts):
        masks, scores, _ = predictor.predict(**prompt, multimask_output=multimask)
        best = int(np.argmax(scores))
        entries = []
        for j, (mask, score) in enumerate(zip(masks, scores)):
            path = out / f"{stem}_object{k}_mask{j}.png"
            save_mask(mask, path)
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
    save_png(overlay(rgb, objects), overlay_path)
    height, width = rgb.shape[:2]
    summary = {"image": str(item.path), "width": width, "height": height, "overlay": overlay_path.name,
               "objects": records}
    json_path = out / f"{stem}_masks.json"
    write_text(json_path, json_text(summary, json_path, indent=2))
    # after the JSON, not before the run: until the new JSON is in place, the old one's files all exist
    remove_stale_masks(out, stem, earlier, {entry["file"] for record in records for entry in record["masks"]})

    lines = [f"{item.path}: {width}x{height}, {len(records)} object(s)"]
    for k, record in enumerate(records):
        for j, entry in enumerate(record["masks"]):
            mark = "*" if j == record["best"] else " "
            bbox = "empty" if entry["bbox_xyxy"] is None else "bbox " + ",".join(map(str, entry["bbox_xyxy"]))
            lines.append(f" {mark} object {k} mask {j}: score {entry['score']:.3f}  area {entry['area']} px  {bbox}  "
                         f"-> {out / entry['file']}")
    lines.append(f"overlay: {overlay_path}\njson: {json_path}")
    tqdm.write("\n".join(lines))


def segment_everything(generator, rgb: np.ndarray, item, params: dict, out: Path) -> None:
    """Every mask of one image: a PNG per mask, the COCO-RLE records as JSON, an overlay of all masks."""
    from zoo.models.mobilesam import amg

    earlier = listed_masks(out / f"{item.name}_masks.json")
    with tqdm(desc=f"{item.name}: everything", unit="batch", file=sys.stderr, leave=False) as bar:
        def progress(done, total, crop, crops):
            bar.total = total
            if crops > 1:
                bar.set_postfix_str(f"crop {crop}/{crops}", refresh=False)
            bar.update(done - bar.n)

        data = generator.generate_data(rgb, progress)
    records = generator.records(data)  # output_mode coco_rle
    # every mask at the image's size at once (the PNGs, the overlay): refused where they would pass 2 GiB
    check_full_size_masks(len(data["rles"]), rgb.shape[:2], SAM_RUN_BYTES, "keep fewer masks (a higher "
                          "--pred-iou-thresh or --stability-score-thresh) or segment a smaller copy of the photo",
                          max_det=False)
    masks = [amg.rle_to_mask(rle) for rle in data["rles"]]
    entries = []
    for i, (mask, record) in enumerate(zip(masks, records)):
        path = out / f"{item.name}_everything{i}.png"
        save_mask(mask, path)
        entries.append({"file": path.name, **record})
    by_area = sorted(range(len(masks)), key=lambda i: -records[i]["area"])  # small masks drawn last, on top
    overlay_path = out / f"{item.name}_overlay.png"
    save_png(Image.fromarray(blend_masks(rgb, [masks[i] for i in by_area], [class_colour(i) for i in by_area])),
             overlay_path)
    height, width = rgb.shape[:2]
    summary = {"image": str(item.path), "width": width, "height": height, "overlay": overlay_path.name,
               "mode": "everything", "parameters": params, "masks": entries}
    json_path = out / f"{item.name}_masks.json"
    write_text(json_path, json_text(summary, json_path, indent=2))
    remove_stale_masks(out, item.name, earlier, {entry["file"] for entry in entries})
    # no masks: the thresholds that dropped them, not a file pattern that matches nothing
    found = (f"{len(entries)} masks -> {out / (item.name + '_everything*.png')}" if entries else
             f"0 masks: none kept at --pred-iou-thresh {params['pred_iou_thresh']} and --stability-score-thresh "
             f"{params['stability_score_thresh']} (lower them to keep more)")
    tqdm.write(f"{item.path}: {width}x{height}, {found}\noverlay: {overlay_path}\njson: {json_path}")


def run(args, model) -> int:
    from zoo.pipeline import Pipeline

    out = Path(args.out)
    generator = model.mask_generator(**args.params, output_mode="coco_rle") if args.everything else None
    defaults = inspect.signature(SamAutomaticMaskGenerator).parameters
    params = {**{name: defaults[name].default for name in GENERATOR_OPTIONS}, **args.params}

    def prepare(item):
        return args.rgb if args.rgb is not None else item.load()

    def process(batch):
        for ready in batch:
            if not args.planned:  # video frames: named only as they are decoded
                check_outputs_of(out, ready.item.name, args.inputs, args.overwrite)
            if generator is not None:
                segment_everything(generator, ready.data, ready.item, params, out)
            else:
                segment_prompts(model, ready.data, ready.item, args.prompts, args.multimask, out)

    pipeline = Pipeline(args.source, prepare, desc="segment").run(process)
    if pipeline.total != 1:
        print(pipeline.summary("segmented"), file=sys.stderr)
    return pipeline.exit_code
