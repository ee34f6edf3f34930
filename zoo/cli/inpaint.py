"""Inpainting: fill the hole a mask marks in an image (LaMa), with IOPaint's HD strategies."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from PIL import Image

from zoo.devices import parse_dtype
from zoo.errors import ZooError
from zoo.files import check_output_file, image_format, write_atomic
from zoo.images import load_image

# PNG and the other lossless formats keep the pixels outside the hole exact; GIF quantises to 256 colours.
LOSSY_SUFFIXES = (".jpg", ".jpeg", ".webp", ".gif")


def add_arguments(parser):
    from zoo.models.lama import CROP_MARGIN, CROP_TRIGGER_SIZE, HD_STRATEGIES, RESIZE_LIMIT

    parser.add_argument("image", help="image file")
    parser.add_argument("--mask", required=True,
                        help="mask image of the image's size: every pixel whose grey level is above 0 is hole")
    parser.add_argument("--out", help="result image (default: <image>_inpainted.png beside the image)")
    parser.add_argument("--hd-strategy", choices=HD_STRATEGIES, default="crop",
                        help="large images: original = one pass over the whole image; resize = one pass with the "
                             "longer side scaled to --resize-limit, only the hole pasted back; crop = one pass per "
                             "region around the holes (default, as IOPaint)")
    parser.add_argument("--resize-limit", type=int, default=RESIZE_LIMIT, metavar="PIXELS",
                        help=f"resize: longer side of the pass when the image is larger (default {RESIZE_LIMIT})")
    parser.add_argument("--crop-margin", type=int, default=CROP_MARGIN, metavar="PIXELS",
                        help=f"crop: context around each hole (default {CROP_MARGIN})")
    parser.add_argument("--crop-trigger-size", type=int, default=CROP_TRIGGER_SIZE, metavar="PIXELS",
                        help=f"crop: only crop when the longer side exceeds this (default {CROP_TRIGGER_SIZE})")
    parser.add_argument("--max-megapixels", type=float, metavar="MP",
                        help="refuse a pass larger than this (default: what fits in the device's memory)")


def check_arguments(args):
    from zoo.models.lama import check_memory, load_mask, pass_sizes, plan_passes

    args.image_array = load_image(args.image)
    args.hole = load_mask(args.mask, args.image_array.shape[:2])
    if args.crop_trigger_size < 1:
        raise ZooError(f"--crop-trigger-size {args.crop_trigger_size}: use a positive number of pixels")
    if args.max_megapixels is not None and args.max_megapixels <= 0:
        raise ZooError(f"--max-megapixels {args.max_megapixels:g}: use a positive number")
    args.out = Path(args.out) if args.out else Path(args.image).with_name(f"{Path(args.image).stem}_inpainted.png")
    check_output_file(args.out, "--out")
    args.format = image_format(args.out, f"--out {args.out}")
    if args.out.resolve() == Path(args.image).resolve():
        raise ZooError(f"--out {args.out} is the input image: pass another path")
    args.plan = plan_passes(args.hole, args.hd_strategy, args.resize_limit, args.crop_margin, args.crop_trigger_size)
    if args.hole.any():
        # a pass that cannot fit fails now, before the weights are read
        for size in pass_sizes(args.hole.shape, *args.plan):
            check_memory(size, args.max_megapixels, parse_dtype(args.dtype))


def run(args, model) -> int:
    h, w = args.image_array.shape[:2]
    if not args.hole.any():
        print(f"note: {args.mask} marks no pixel as hole: {args.out} is the image unchanged", file=sys.stderr)
        result = args.image_array
    else:
        start = time.perf_counter()
        result = model.inpaint(args.image_array, args.hole, args.hd_strategy, args.resize_limit, args.crop_margin,
                               args.crop_trigger_size, args.max_megapixels, progress=True)
        scale, boxes = args.plan
        how = f"1 pass at scale {scale:.3g}" if scale != 1 else f"{len(boxes)} pass{'es' * (len(boxes) != 1)}"
        print(f"{Path(args.image).name}: {w}x{h}, hole {args.hole.mean():.1%} of the image, {how} "
              f"({args.hd_strategy}), {time.perf_counter() - start:.1f} s", file=sys.stderr)
    if args.out.suffix.lower() in LOSSY_SUFFIXES:
        print(f"note: {args.out.suffix} is lossy: pixels outside the hole change; use .png to keep them",
              file=sys.stderr)
    write_atomic(args.out, lambda tmp: Image.fromarray(result).save(tmp, format=args.format))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0
