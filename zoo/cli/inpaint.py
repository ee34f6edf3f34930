"""Inpainting (LaMa): fill the holes masks mark, in one image or in folders as IOPaint's batch mode does.

    python -m zoo.run lama IMAGES... --mask MASKS --out DIR
    python -m zoo.run lama --image DIR --mask DIR --output DIR     # IOPaint's `iopaint run` flags

IMAGES are files or folders; MASKS is one mask for every image, or a folder of
masks matched to the images by file stem (IOPaint's rule, ``a.jpg`` <- ``a.png``)
or by lama's naming (``a.jpg`` <- ``a_mask.png``, ``a_mask001.png``; then
images and masks may share one folder). Mask levels at or above 127 are hole
(IOPaint's). Outputs in a folder are named like the inputs, lossy ones
(JPEG, WebP, GIF) as PNG. As IOPaint, an image without a mask and a mask
without an image are one note line each and skipped; a file that cannot be
read or written is one error line, the rest is processed and the exit code is
1. A run where no image has a mask exits 1.
"""
from __future__ import annotations

import functools
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import ExifTags, Image
from tqdm import tqdm

from zoo import pipeline, registry
from zoo.cli import usage_errors
from zoo.errors import UsageError, ZooError
from zoo.files import (Inputs, image_format, lock_output_folder, make_output_folder, refuse_inputs,
                       write_atomic)
from zoo.images import image_files, image_size, open_image, reading_errors
from zoo.sources import RUN_SETTINGS, Item, apply_settings, check_settings, is_video, other_file, records_header

# PNG and the other lossless formats keep the pixels outside the hole exact; GIF quantises to 256 colours.
LOSSY_SUFFIXES = (".jpg", ".jpeg", ".webp", ".gif")
QUALITY_FORMATS = ("JPEG", "WEBP")
MASK_MARK = "_mask"  # lama's naming: photo.png <- photo_mask.png, photo_mask001.png
# IOPaint's batch mode: levels >= 127 are hole. Also what keeps a mask saved as JPEG from making
# holes of its compression noise (levels of a few units around the black).
MASK_THRESHOLD = 127
# A TIFF's EXIF is its own tag directory: its layout tags describe that file's pixels, not the output's.
TIFF_LAYOUT_TAGS = {256, 257, 258, 259, 262, 273, 277, 278, 279, 284, 317, 322, 323, 324, 325, 338, 339, 34675}


@dataclass
class Job:
    image: Path
    mask: Path
    out: Path
    format: str


def add_arguments(parser):
    from zoo.models.lama import CROP_MARGIN, CROP_TRIGGER_SIZE, HD_STRATEGIES, RESIZE_LIMIT

    parser.add_argument("images", nargs="*", metavar="IMAGES", help="image files or folders of images")
    parser.add_argument("--image", action="append", default=[], metavar="PATH", dest="image_flags",
                        help="an image file or folder, as IOPaint's --image (may be repeated; adds to IMAGES)")
    parser.add_argument("--mask", required=True, metavar="MASKS",
                        help="one mask for every image, or a folder of masks matched by file stem (a.jpg <- a.png "
                             "or a_mask.png); a mask of another size is resized to its image (nearest)")
    parser.add_argument("--out", "--output", metavar="DIR", dest="out",
                        help="output folder (created; outputs named like the inputs, JPEG/WebP/GIF ones as .png); "
                             "for one image also a file path (default for one image: <image>_inpainted.png beside it)")
    parser.add_argument("--ext", metavar="SUFFIX",
                        help="write the outputs in a folder with this suffix, e.g. jpg; default: the input's, "
                             "png for lossy inputs (the pixels outside the hole stay exact)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace outputs that exist (default: skip them; inputs are never replaced)")
    parser.add_argument("--quality", type=int, default=95, metavar="Q",
                        help="JPEG and WebP quality, 1-100 (default 95); PNG and TIFF are lossless")
    parser.add_argument("--mask-threshold", type=int, default=MASK_THRESHOLD, metavar="LEVEL",
                        help=f"grey levels at or above LEVEL are hole (default {MASK_THRESHOLD}, IOPaint's batch "
                             "mode; 1: any nonzero level, as lama's predict.py)")
    parser.add_argument("--dilate", type=int, default=0, metavar="PIXELS",
                        help="grow every hole by this many pixels (square, as cv2.dilate; default 0)")
    parser.add_argument("--config", metavar="JSON",
                        help="IOPaint's --config file (its InpaintRequest): hd_strategy (Original, Resize, Crop), "
                             "hd_strategy_resize_limit, hd_strategy_crop_margin, hd_strategy_crop_trigger_size; "
                             "its keys for other models are ignored, as IOPaint's LaMa ignores them")
    parser.add_argument("--hd-strategy", choices=HD_STRATEGIES,
                        help="large images: original = one pass over the whole image; resize = one pass with the "
                             "longer side scaled to --resize-limit, only the hole pasted back; crop = one pass per "
                             "region around the holes (default, as IOPaint)")
    parser.add_argument("--resize-limit", type=int, metavar="PIXELS",
                        help=f"resize: longer side of the pass when the image is larger (default {RESIZE_LIMIT})")
    parser.add_argument("--crop-margin", type=int, metavar="PIXELS",
                        help=f"crop: context around each hole (default {CROP_MARGIN})")
    parser.add_argument("--crop-trigger-size", type=int, metavar="PIXELS",
                        help=f"crop: only crop when the longer side exceeds this (default {CROP_TRIGGER_SIZE})")
    parser.add_argument("--concat", action="store_true",
                        help="IOPaint's --concat: each output is the image, its hole (white) and the result side by "
                             "side")
    parser.add_argument("--max-megapixels", type=float, metavar="MP",
                        help="refuse a pass larger than this (default: what keeps the command under 2 GB on the CPU, "
                             "80%% of the device's memory on a GPU)")


def check_arguments(args) -> int | None:
    """Pair images and masks, name the outputs, skip those that exist in a folder of the same settings (a single
    output file that exists is refused without --overwrite): all before the weights are read.

    Returns an exit code when nothing is left to inpaint (the model is then never loaded).
    """
    check_options(args)
    args.images = [*args.images, *args.image_flags]
    if not args.images:
        raise UsageError("no images given: pass image files or folders (IMAGES... or --image PATH)")
    mask_arg = Path(args.mask)
    if not mask_arg.exists():
        raise ZooError(f"mask not found: {mask_arg}")
    folders = [Path(a) for a in args.images if Path(a).is_dir()]
    shared = mask_arg.is_dir() and any(f.resolve() == mask_arg.resolve() for f in folders)
    masks = mask_files(mask_arg, shared)
    mask_set = {m.resolve() for m in masks}
    images = [p for a in args.images for p in image_files(a) if p.resolve() not in mask_set]
    if not images:
        if mask_arg.is_file() and len(args.images) == 1 and Path(args.images[0]).resolve() == mask_arg.resolve():
            raise UsageError(f"{mask_arg} is given as the image and as its mask: pass the mask of the image "
                             "(white = the hole) with --mask")
        raise ZooError(f"no images to inpaint in {', '.join(args.images)}: the files there are all masks")
    video = next((p for p in images if is_video(p)), None)
    if video is not None:  # found here, not as 'output ...: cannot write .mp4' after the pairing
        raise UsageError(f"{video} is a video: LaMa inpaints images; extract its frames (e.g. ffmpeg -i {video} "
                         "frames/%05d.png) and pass that folder with a folder of masks")
    args.single = len(images) == 1 and not folders  # one image named: its problem is the run's error
    args.failed = args.unmasked = 0

    def fail(message: str) -> None:
        if args.single:
            raise ZooError(message)
        print(f"error: {message}", file=sys.stderr)
        args.failed += 1

    def unmatched(message: str, fix: str, image: bool) -> None:
        """An image without a mask, or a mask without an image: a note, and skipped (IOPaint logs and goes on)."""
        if args.single:
            raise ZooError(f"{message}: {fix}")
        print(f"note: {message}: skipped ({fix})", file=sys.stderr)
        args.unmasked += image

    pairs = pair_masks(images, masks, mask_arg, fail, unmatched, report_unused=bool(folders))
    if args.unmasked == len(images):
        raise ZooError(f"no image of {', '.join(args.images)} has a mask in {mask_arg}: name each mask after its "
                       f"image (a.jpg <- a.png or a{MASK_MARK}.png), or pass one mask file for every image")
    outputs = output_paths(args, [image for image, _ in pairs])
    inputs = Inputs([*args.images, mask_arg, *images, *masks, args.weights])
    if args.single:  # its output the input ('--out .'): that error, not the folder's 'outputs exist ... --overwrite'
        refuse_inputs(outputs[0], inputs, f"{pairs[0][0]}: its output")
    check_folder_settings(args, outputs, inputs)
    args.jobs, skipped, writers = [], [], {}
    for (image, mask), out in zip(pairs, outputs):
        key = out.resolve()
        try:
            fmt = image_format(out, f"{image}: output {out.name}")
            refuse_inputs(out, inputs, f"{image}: its output")
            if key in writers:
                raise ZooError(f"{image}: its output {out} is also {writers[key]}'s: rename one of them")
            writers[key] = image
            if out.is_dir():
                raise ZooError(f"{image}: its output {out} is a folder: remove it or pass another --out")
            if out.exists() and not args.overwrite:
                if args.settings is None:  # an output file of its own: no settings file vouches for it
                    raise UsageError(f"{out} exists and may be of other options than these (a single output "
                                     "keeps no record of them): pass --overwrite to replace it, or another --out PATH")
                skipped.append(out)
                continue
            check_files(image, mask, args)
            args.jobs.append(Job(image, mask, out, fmt))
        except ZooError as e:
            if args.single:
                raise  # as it is: a usage error keeps its exit code
            fail(str(e))
    args.skipped = len(skipped)
    lossy = sorted({job.out.suffix for job in args.jobs if job.out.suffix.lower() in LOSSY_SUFFIXES})
    if lossy:
        print(f"note: {', '.join(lossy)} is lossy: pixels outside the hole change; write .png "
              f"({'--ext png' if args.out and not args.single else '--out NAME.png'}) to keep them", file=sys.stderr)
    if skipped:
        where = skipped[0] if len(skipped) == 1 else f"{len(skipped)} outputs in {skipped[0].parent}"
        print(f"note: skipping {where}: already written (--overwrite replaces them)", file=sys.stderr)
    if not args.jobs:
        print(summary(0, args, 0.0, args.out or outputs[0]), file=sys.stderr)
        return 1 if args.failed else 0
    for folder in dict.fromkeys(job.out.parent for job in args.jobs):
        make_output_folder(folder, "--out" if args.out else "output folder")
    return None


def check_folder_settings(args, outputs: list[Path], inputs: Inputs) -> None:
    """A run into an --out folder keeps its settings there (RUN_SETTINGS, as detect's --out): the outputs it
    skips as already written must be of the same options (a re-run with another --mask-threshold kept the
    older outputs beside the new ones without a word). Sets ``args.settings`` (the file, None for a run
    that names its output file), ``args.header`` and ``args.save_settings`` (sources.check_settings)."""
    folder = Path(args.out) if args.out and outputs and outputs[0] != Path(args.out) else None
    args.settings = args.save_settings = None
    if folder is None:
        return
    args.settings = refuse_inputs(folder / RUN_SETTINGS, inputs, "output")
    # the options that change the outputs' pixels, those of another --hd-strategy left out (they do not apply);
    # --quality always, though PNG outputs ignore it: a folder may hold outputs of both, one setting vouches for all
    args.header = records_header(args.spec.task, args.spec.name, {
        "--weights": registry.weights_identity(args.weights), "--dtype": args.dtype,
        "--mask-threshold": args.mask_threshold, "--dilate": args.dilate, "--hd-strategy": args.hd_strategy,
        "--resize-limit": args.resize_limit if args.hd_strategy == "resize" else None,
        "--crop-margin": args.crop_margin if args.hd_strategy == "crop" else None,
        "--crop-trigger-size": args.crop_trigger_size if args.hd_strategy == "crop" else None,
        "--quality": args.quality, **({"--concat": True} if args.concat else {})})  # earlier folders: not given
    own = {out.resolve() for out in (*outputs, args.settings)}
    # without --overwrite the outputs there are skipped: taken as done, as detect's --resume takes them
    args.save_settings = check_settings(
        args.settings, args.header, lambda: other_file(folder, lambda file: file.resolve() in own), args.overwrite,
        not args.overwrite, 0 if args.overwrite else sum(out.is_file() for out in outputs),
        "pass another --out DIR, or --overwrite to replace its outputs", "outputs exist, but ")


# IOPaint's InpaintRequest keys that LaMa reads (iopaint/schema.py) -> this command's options
CONFIG_KEYS = {"hd_strategy": "hd_strategy", "hd_strategy_resize_limit": "resize_limit",
               "hd_strategy_crop_margin": "crop_margin", "hd_strategy_crop_trigger_size": "crop_trigger_size"}


def apply_config(args) -> None:
    """The HD-strategy options from IOPaint's --config JSON where no flag gives them, then the defaults.

    A flag and the file that disagree are one error; the file's keys for IOPaint's other models
    (sd_*, ldm_*, cv2_*, ...) are named in one note and ignored, as IOPaint's LaMa ignores them."""
    from zoo.models.lama import CROP_MARGIN, CROP_TRIGGER_SIZE, HD_STRATEGIES, RESIZE_LIMIT

    config = {}
    args.config_keys = {}  # option -> the config file's key that set it: its errors name the key
    if args.config:
        import json

        try:
            config = json.loads(Path(args.config).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise UsageError(f"--config {args.config}: cannot read it as JSON ({e}): pass IOPaint's config file, "
                             'e.g. {"hd_strategy": "Resize", "hd_strategy_resize_limit": 1024}') from None
        if not isinstance(config, dict):
            raise UsageError(f"--config {args.config}: holds a {type(config).__name__}, not IOPaint's object of "
                             'settings, e.g. {"hd_strategy": "Resize"}')
        other = sorted(set(config) - set(CONFIG_KEYS))
        if other:
            print(f"note: --config {args.config}: {', '.join(other[:4])}{' ...' if len(other) > 4 else ''} "
                  "do not apply to LaMa (IOPaint's other models read them): ignored", file=sys.stderr)
    defaults = {"hd_strategy": "crop", "resize_limit": RESIZE_LIMIT, "crop_margin": CROP_MARGIN,
                "crop_trigger_size": CROP_TRIGGER_SIZE}
    for key, option in CONFIG_KEYS.items():
        flag = f"--{option.replace('_', '-')}"
        value = config.get(key)
        if value is not None:
            if option == "hd_strategy":
                value = value.lower() if isinstance(value, str) else value
                if value not in HD_STRATEGIES:
                    raise UsageError(f"--config {args.config}: hd_strategy {config[key]!r}: "
                                     "use Original, Resize or Crop")
            elif isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"--config {args.config}: {key} {value!r}: use a whole number of pixels")
            given = getattr(args, option)
            if given is not None and given != value:
                raise UsageError(f"{flag} {given} and --config's {key} {config[key]!r} disagree: give one of them")
            setattr(args, option, value)
            args.config_keys[option] = key
        elif getattr(args, option) is None:
            setattr(args, option, defaults[option])


def check_options(args) -> None:
    from zoo.models.lama import check_max_megapixels, check_pass_options

    apply_config(args)
    for option, low, high in (("quality", 1, 100), ("mask_threshold", 1, 255), ("dilate", 0, 10_000)):
        value = getattr(args, option)
        if not low <= value <= high:
            raise UsageError(f"--{option.replace('_', '-')} {value}: use {low} to {high}")

    def named(option: str) -> str:
        """The words of the user who set ``option``: the config file's key, or the flag."""
        key = args.config_keys.get(option)
        return f"--config {args.config}: {key}" if key else f"--{option.replace('_', '-')}"

    with usage_errors():  # the model's own checks of the strategy's sizes: a command line that cannot work
        check_pass_options(args.resize_limit, args.crop_margin, args.crop_trigger_size, named)
        check_max_megapixels(args.max_megapixels)


def output_paths(args, images: list[Path]) -> list[Path]:
    """Outputs named like the inputs in the --out folder (suffix --ext if given, else the input's, .png
    for a lossy one); one image may also name its output file, or write <image>_inpainted.png beside itself."""
    out = Path(args.out) if args.out else None
    if out is not None and args.single and out.suffix and not out.is_dir():
        if args.ext:
            raise UsageError(f"--ext {args.ext} names the outputs in a folder: give --out a folder")
        return [out]
    if out is None:
        if not args.single:
            raise UsageError("several images need an output folder: pass --out DIR")
        return [images[0].with_name(f"{images[0].stem}_inpainted.png")]
    lock_output_folder(out, "--out", [*args.images, args.mask])  # never into an input or mask folder
    if args.ext:
        return [out / f"{image.stem}.{args.ext.lstrip('.')}" for image in images]
    lossy = sorted({image.suffix for image in images if image.suffix.lower() in LOSSY_SUFFIXES})
    if lossy:
        # IOPaint writes every output as PNG: a JPEG written again changes pixels outside the hole too
        print(f"note: {', '.join(lossy)} inputs are written as .png, which keeps the pixels outside the hole "
              f"exact (--ext {lossy[0].lstrip('.')} keeps their format, lossy)", file=sys.stderr)
    return [out / f"{image.stem}{'.png' if image.suffix.lower() in LOSSY_SUFFIXES else image.suffix}"
            for image in images]


def check_files(image: Path, mask: Path, args) -> None:
    """What the file headers tell before the weights are read: both are images Pillow reads, and
    every pass over the whole image (or its resized copy) fits the memory bound."""
    from zoo.devices import parse_dtype
    from zoo.models.lama import check_memory, pass_sizes, plan_passes

    size = image_size(image)
    image_size(mask)
    # without the hole the crops are unknown (planned empty); whole-image passes depend on the size alone
    plan = plan_passes(np.broadcast_to(False, size), args.hd_strategy, args.resize_limit, args.crop_margin,
                       args.crop_trigger_size)
    for pass_size in pass_sizes(size, *plan):
        check_memory(pass_size, args.max_megapixels, parse_dtype(args.dtype), size[0] * size[1])


def mask_files(mask: Path, shared: bool) -> list[Path]:
    """The masks an argument names; in a folder images share (lama's layout), only the *_mask* files."""
    if not mask.is_dir():
        return [mask]
    masks = [p for p in image_files(mask) if not shared or MASK_MARK in p.stem]
    if not masks:
        raise ZooError(f"no masks in {mask}: images and masks share it, so masks must be named <image>_mask.png")
    return masks


def pair_masks(images: list[Path], masks: list[Path], mask_arg: Path, fail, unmatched,
               report_unused: bool) -> list[tuple[Path, Path]]:
    """Each image's mask: the one mask, or the mask of the same stem, else lama's <stem>_mask*.

    An image with several candidates is reported through ``fail``; an image without a
    mask and (when images came from folders) a mask no image uses through ``unmatched``.
    """
    if not mask_arg.is_dir():
        return [(image, mask_arg) for image in images]
    by_stem, by_mark = defaultdict(list), defaultdict(list)
    for m in masks:
        by_stem[m.stem].append(m)
        if MASK_MARK in m.stem:
            by_mark[m.stem.rsplit(MASK_MARK, 1)[0]].append(m)
    pairs, used = [], set()
    for image in images:
        found = by_stem.get(image.stem) or by_mark.get(image.stem) or []
        if not found:
            unmatched(f"{image}: no mask in {mask_arg} (looked for {image.stem}.* and {image.stem}{MASK_MARK}*.*)",
                      "add one to inpaint it, or pass one mask file for every image", image=True)
        elif len(found) > 1:
            fail(f"{image}: {len(found)} masks match it ({', '.join(m.name for m in found)}): keep one")
        else:
            pairs.append((image, found[0]))
        used.update(found)
    if report_unused:
        for m in masks:
            if m not in used:
                unmatched(f"{m}: mask of no image (no image named {m.stem.rsplit(MASK_MARK, 1)[0]}.*)",
                          "add the image, or remove or rename the mask", image=False)
    return pairs


def run(args, model) -> int:
    """Each job on zoo.pipeline: image and mask decoded ahead on other threads while LaMa runs; Ctrl-C
    finishes the image in hand (its file written whole) and keeps every one done."""
    single = len(args.jobs) == 1
    items = [Item(str(job.image), i, job.out.stem, job.out.stem) for i, job in enumerate(args.jobs)]
    jobs = {id(item): job for item, job in zip(items, args.jobs)}
    args.resize_noted = set()
    run = pipeline.Pipeline(items, lambda item: read_job(jobs[id(item)], args), single=args.single,
                            desc="inpainting", progress=not single,
                            resume="the same command without --overwrite continues: it skips the outputs that exist")

    def process(batch):
        if args.settings is not None:
            apply_settings(args.settings, args.header, args.save_settings, replace=args.overwrite)
            args.save_settings = None
        for ready in batch:
            inpaint_job(jobs[id(ready.item)], ready.data, args, model, verbose=single)

    run.run(process)
    args.failed += run.failed
    print(summary(run.done, args, run.seconds, args.out or args.jobs[0].out), file=sys.stderr)
    return run.exit_code if run.interrupted else 1 if args.failed else 0


def summary(done: int, args, seconds: float, out) -> str:
    parts = [f"{done} inpainted"]
    if args.skipped:
        parts.append(f"{args.skipped} skipped (already written)")
    if args.unmasked:
        parts.append(f"{args.unmasked} skipped (no mask)")
    if args.failed:
        parts.append(f"{args.failed} failed (see the error lines)")
    return f"lama: {', '.join(parts)} in {seconds:.1f} s -> {out}"


@dataclass
class Read:
    """A job's inputs, decoded ahead of the model: the image, its hole, and what the notes need."""

    image: Image.Image
    hole: np.ndarray
    mask_size: tuple[int, int]  # (height, width) of the mask file, before any resize
    options: dict  # save options carrying the image's metadata
    deep: bool  # the file has more than 8 bits a channel, which the 8-bit output does not keep


@functools.lru_cache(maxsize=2)
def cached_levels(mask: Path, modified: int) -> np.ndarray:
    """A mask file's grey levels (``modified``: its mtime, so a changed file is read again): one mask
    for every image of a folder is read once."""
    from zoo.models.lama import mask_levels

    return mask_levels(mask)


def read_job(job: Job, args) -> Read:
    """Decode one job's image and mask (EXIF orientation applied) and make its hole; runs on a pipeline thread."""
    from zoo.models.lama import load_mask

    image = open_image(job.image)
    levels = cached_levels(job.mask, job.mask.stat().st_mtime_ns)
    mask_size = levels.shape
    if levels.shape != (image.height, image.width):
        levels = resize_nearest(levels, (image.height, image.width))
    hole = load_mask(levels, levels.shape, args.mask_threshold, args.dilate)
    options = metadata(job.image)
    if job.format in QUALITY_FORMATS:
        options["quality"] = args.quality
    return Read(image, hole, mask_size, options, deep_pixels(job.image))


def inpaint_job(job: Job, read: Read, args, model, verbose: bool) -> None:
    """Inpaint one decoded job and write its output whole; its metadata (EXIF without orientation, ICC, dpi) carried over."""
    image, hole = read.image, read.hole
    say = lambda line: tqdm.write(line, file=sys.stderr)  # noqa: E731
    if read.mask_size != (image.height, image.width) and (job.mask, image.size) not in args.resize_noted:
        args.resize_noted.add((job.mask, image.size))  # one mask for a folder of one size: one note
        say(f"note: resized mask {job.mask.name} from {read.mask_size[1]}x{read.mask_size[0]} to "
            f"{image.width}x{image.height} (nearest) for {job.image.name}")
    if read.deep:
        say(f"note: {job.image.name} has more than 8 bits a channel; LaMa reads and writes 8, so {job.out.name} is "
            "8-bit RGB, outside the hole too (the input keeps its depth)")
    start = time.perf_counter()
    if not hole.any():
        say(f"note: {job.mask.name} marks no pixel as hole: {job.out} is {job.image.name} unchanged")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the empty hole: said above
        result = Image.fromarray(model.inpaint(image, hole, args.hd_strategy, args.resize_limit, args.crop_margin,
                                               args.crop_trigger_size, args.max_megapixels, progress=verbose))
    if verbose and hole.any():
        from zoo.models.lama import plan_passes

        scale, boxes = plan_passes(hole, args.hd_strategy, args.resize_limit, args.crop_margin, args.crop_trigger_size)
        how = f"1 pass at scale {scale:.3g}" if scale != 1 else f"{len(boxes)} pass{'es' * (len(boxes) != 1)}"
        # a strategy that did not apply at this size is said so: '1 pass (crop)' read as a crop made
        above = {"crop": args.crop_trigger_size, "resize": args.resize_limit}.get(args.hd_strategy)
        strategy = (args.hd_strategy if above is None or max(image.size) > above else
                    f"the whole image: {args.hd_strategy} only above {above} px")
        say(f"{job.image.name}: {image.width}x{image.height}, hole {hole.mean():.1%} of the image, {how} "
            f"({strategy}), {time.perf_counter() - start:.1f} s")
    if args.concat:
        result = side_by_side(image, hole, result)
    if result.mode == "RGBA" and job.format == "JPEG":
        raise ZooError(f"{job.image} has transparency, which {job.out.suffix} cannot store: pass --ext png")
    write_atomic(job.out, lambda file: result.save(file, format=job.format, **read.options),
                 replace=args.overwrite)


def side_by_side(image: Image.Image, hole: np.ndarray, result: Image.Image) -> Image.Image:
    """IOPaint's --concat strip: the image, its hole (255: the pixels inpainted), the result, in the result's mode."""
    strip = Image.new(result.mode, (3 * image.width, image.height))
    mask = Image.fromarray(hole.astype(np.uint8) * 255)
    for i, part in enumerate((image, mask, result)):
        strip.paste(part.convert(result.mode), (i * image.width, 0))
    return strip


def deep_pixels(path: Path) -> bool:
    """More than 8 bits a channel in the file: 16-bit grey (Pillow's I;16 modes), 32-bit integer or float
    pixels, or 16-bit colour, which Pillow decodes to 8-bit RGB itself (its raw mode says RGB;16B)."""
    with reading_errors(path), Image.open(path) as src:  # a tile's args: its 4th field (plain tuples before Pillow 11)
        return src.mode in ("I", "F") or src.mode.startswith("I;16") or any(";16" in str(t[3:]) for t in src.tile)


def metadata(path: Path) -> dict:
    """Save options that carry a file's EXIF (minus the orientation: it is applied), ICC profile and dpi."""
    with reading_errors(path), Image.open(path) as src:
        exif, info = src.getexif(), src.info
        for tag in {ExifTags.Base.Orientation} | (TIFF_LAYOUT_TAGS if src.format == "TIFF" else set()):
            exif.pop(tag, None)
        options = {"exif": exif.tobytes()} if len(exif) else {}
        options.update({k: info[k] for k in ("icc_profile", "dpi") if info.get(k)})
    return options


def resize_nearest(levels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of a 2-D array to (height, width): each output pixel takes the input pixel under its centre."""
    h, w = size
    rows = ((np.arange(h) + 0.5) * levels.shape[0] / h).astype(np.int64)
    cols = ((np.arange(w) + 0.5) * levels.shape[1] / w).astype(np.int64)
    return levels[rows[:, None], cols[None, :]]
