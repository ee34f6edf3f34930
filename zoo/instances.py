"""Instance masks and keypoints after NMS, as ultralytics' ``utils/ops.py`` computes them, in numpy.

    process_mask(protos, coefficients, boxes, frame)     masks at the letterboxed input's size (predict's default)
    process_mask_native(protos, coefficients, boxes, image_shape)   masks at the image's size (retina_masks)
    scale_masks(masks, image_shape)                       input-size maps -> the image's size (padding cut off)
    scale_coords(frame, points, image_shape)              input pixels -> image pixels, clipped
    masks2segments(masks)                                 each mask's outer contours as one polygon (OpenCV)
    coco_rle(mask)                                        a mask as COCO's compressed RLE {size, counts: str}

Same crops, interpolation and thresholds as upstream: a mask is the prototypes weighted by the
detection's 32 coefficients, zeroed outside its box (box edges rounded, as upstream's CPU path for
fewer than 50 masks; compared as floats otherwise, as its GPU path), upsampled bilinearly (half-pixel
centres, no antialiasing: torch's F.interpolate) and kept where positive. Masks are made one at a
time (image-size ones a band of rows at a time), so a batch of masks costs one float map at the output
size (a band of one) besides the boolean results.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ZooError, option
from .extras import require

FLOAT_CROP_FROM = 50  # upstream crops this many masks or more by comparing coordinates as floats

# retina_masks keeps one (H, W) bool mask per detection (ultralytics' masks.data: 300 at 8000x8000 are 17.9 GiB),
# annotate --save-masks / --save-overlay one per box, segment everything one per kept mask. They may take what a
# 2 GiB process has left after the rest of the run: *_RUN_BYTES (interpreter, MLX, the models; SAM's for MobileSAM,
# with annotate's detector) and RETINA_BYTES_PER_PIXEL of the image's pixels (the decoded image and its copies, the
# annotated output, one mask's float32 resize temporaries, and the freed blocks zoo.blas keeps for reuse). Measured in
# docs/hardening.md (yolo11n-seg at 8000x8000: 1,318 MiB beside its masks; annotate at 6000x6000: 911 MiB without
# masks; segment everything at 8000x8000: 1,323 MiB without masks).
PROCESS_BOUND = 2 << 30
RETINA_RUN_BYTES = 256 << 20
SAM_RUN_BYTES = 384 << 20
RETINA_BYTES_PER_PIXEL = 18
RESIZE_BAND_PIXELS = 1 << 22  # a retina mask is resized this many pixels at a time (16 MiB of float32 per map)


def check_full_size_masks(count: int, image_shape: tuple[int, int], run_bytes: int, without: str,
                          max_det: bool = True) -> None:
    """Refuses, before allocating, ``count`` bool masks at the image's size that would take the process past
    PROCESS_BOUND beside ``run_bytes`` and the image (a ZooError naming max_det where it applies, and
    ``without``: how to do without them)."""
    h, w = image_shape[:2]
    left = PROCESS_BOUND - run_bytes - RETINA_BYTES_PER_PIXEL * h * w
    if count * h * w <= left:
        return
    most = max(left // (h * w), 0)
    fix = f"keep at most {most} detections ({option('max_det', most)}) or " if most and max_det else ""
    raise ZooError(f"{count} masks at the image's size {w}x{h} take {count * h * w / 2**30:.1f} GiB, more than the "
                   f"{max(left, 0) / 2**20:,.0f} MiB that fit beside the image within 2 GiB: {fix}{without}")


def check_retina_masks(count: int, image_shape: tuple[int, int]) -> None:
    """check_full_size_masks for retina_masks (the fix without them: masks at the model's input size)."""
    check_full_size_masks(count, image_shape, RETINA_RUN_BYTES,
                          f"make them at the model's input size ({option('retina_masks', False)})")


def bilinear_resize(maps: np.ndarray, size: tuple[int, int], rows: slice = slice(None),
                    columns: slice = slice(None)) -> np.ndarray:
    """(N, h, w) float32 -> (N, H, W): torch's F.interpolate(mode="bilinear", align_corners=False); ``rows``,
    ``columns``: only those of the output (the same values as the full output's)."""
    out = maps
    for axis, (before, after) in enumerate(zip(maps.shape[1:], size), start=1):
        window = rows if axis == 1 else columns
        wanted = np.arange(after, dtype=np.float32)[window]
        if before == after:
            out = out[:, window] if axis == 1 else out[:, :, window]
            continue
        scale = np.float32(before / after)
        source = np.maximum((wanted + np.float32(0.5)) * scale - np.float32(0.5), 0)
        low = np.minimum(source.astype(np.int64), before - 1)
        high = np.minimum(low + 1, before - 1)
        weight = (source - low).astype(np.float32)
        shape = [1, 1, 1]
        shape[axis] = len(wanted)
        weight = weight.reshape(shape)
        out = np.take(out, low, axis=axis) * (1 - weight) + np.take(out, high, axis=axis) * weight
    return out.astype(np.float32, copy=False)


def crop_mask(masks: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Zero each (N, H, W) mask outside its x1 y1 x2 y2 box (pixels of the mask), in place, as upstream:
    fewer than 50 masks by slicing at the rounded edges (a negative edge slices from the far side, as
    upstream's does), more by comparing each pixel's index with the edges."""
    if len(masks) < FLOAT_CROP_FROM:
        for mask, (x1, y1, x2, y2) in zip(masks, np.round(boxes).astype(np.int64)):
            mask[:y1] = 0
            mask[y2:] = 0
            mask[:, :x1] = 0
            mask[:, x2:] = 0
        return masks
    h, w = masks.shape[1:]
    x1, y1, x2, y2 = (boxes[:, i, None, None] for i in range(4))
    columns, rows = np.arange(w, dtype=np.float32)[None, None], np.arange(h, dtype=np.float32)[None, :, None]
    masks *= (columns >= x1) & (columns < x2) & (rows >= y1) & (rows < y2)
    return masks


def mask_logits(protos: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """protos (h, w, nm) NHWC and (N, nm) coefficients -> (N, h, w) float32: their weighted sums."""
    h, w, nm = protos.shape
    flat = protos.astype(np.float32).reshape(-1, nm)
    return (coefficients.astype(np.float32) @ flat.T).reshape(-1, h, w)


def process_mask(protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray, frame: tuple[int, int]) -> np.ndarray:
    """(N, H, W) bool masks at the input's size ``frame``: ultralytics' process_mask(upsample=True), the boxes
    in input pixels (scaled to the prototypes' grid for the crop)."""
    logits = mask_logits(protos, coefficients)
    h, w = logits.shape[1:]
    ratios = np.array([w / frame[1], h / frame[0], w / frame[1], h / frame[0]], np.float32)
    logits = crop_mask(logits, boxes.astype(np.float32) * ratios)
    return np.stack([bilinear_resize(m[None], frame)[0] > 0 for m in logits]) if len(logits) else \
        np.zeros((0, *frame), bool)


def process_mask_native(protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray,
                        image_shape: tuple[int, int]) -> np.ndarray:
    """(N, H, W) bool masks at the image's size (ultralytics' process_mask_native, predict's
    ``retina_masks``): the prototypes' maps scaled to the image first, then cropped by the boxes in image pixels.
    More masks than fit within 2 GiB with the image are refused before allocating (check_retina_masks)."""
    check_retina_masks(len(coefficients), image_shape)
    out = np.zeros((len(coefficients), *image_shape[:2]), bool)
    band = max(1, RESIZE_BAND_PIXELS // image_shape[1])
    for i, (logits, box) in enumerate(zip(mask_logits(protos, coefficients), boxes)):
        for top in range(0, image_shape[0], band):  # a band of rows at a time: its float32 temporaries bounded
            out[i, top:top + band] = scale_masks(logits[None], image_shape, slice(top, top + band))[0] > 0
        crop_mask(out[i:i + 1], box[None].astype(np.float32))  # zeroing after the sign test: the same masks
    return out


def letterbox_padding(frame: tuple[int, int], image_shape: tuple[int, int]) -> tuple[float, float, float]:
    """(gain, pad_x, pad_y) of an image letterboxed into ``frame`` (centred), as upstream computes them."""
    gain = min(frame[0] / image_shape[0], frame[1] / image_shape[1])
    return gain, (frame[1] - image_shape[1] * gain) / 2, (frame[0] - image_shape[0] * gain) / 2


def content(frame: tuple[int, int], image_shape: tuple[int, int]) -> tuple[slice, slice]:
    """The rows and columns of a letterboxed ``frame`` the image fills: the padding cut off as ultralytics'
    scale_masks cuts it (rounded as LetterBox pads; at least one row and column)."""
    h, w = frame
    _, pad_x, pad_y = letterbox_padding((h, w), image_shape)
    top, left = round(pad_y - 0.1), round(pad_x - 0.1)
    # a strip (1x60000) is under a pixel wide on the maps: its one row / column there (upstream fails)
    return slice(top, max(top + 1, h - round(pad_y + 0.1))), slice(left, max(left + 1, w - round(pad_x + 0.1)))


def scale_masks(maps: np.ndarray, image_shape: tuple[int, int], rows: slice = slice(None),
                columns: slice = slice(None)) -> np.ndarray:
    """(N, h, w) maps of the letterboxed input -> (N, H, W) float32 of the image: the padding cut off
    (content), the rest resized bilinearly; ``rows``, ``columns``: only those of the image."""
    if maps.shape[1:] == tuple(image_shape[:2]):
        return maps[:, rows, columns].astype(np.float32, copy=False)
    kept_rows, kept_columns = content(maps.shape[1:], image_shape)
    return bilinear_resize(maps[:, kept_rows, kept_columns].astype(np.float32), tuple(image_shape[:2]), rows, columns)


def scaled_extent(mask: np.ndarray, image_shape: tuple[int, int]) -> tuple[slice, slice]:
    """The rows and columns of the image outside which ``scale_masks`` of the (h, w) 0/1 ``mask`` is 0 (empty
    slices for an empty mask): its nonzero rows and columns mapped through the resize, 2 pixels wider each
    side than the bilinear kernel reaches."""
    kept = mask if mask.shape == tuple(image_shape[:2]) else mask[content(mask.shape, image_shape)]
    extent = []
    for axis, size in enumerate(image_shape[:2]):
        nonzero = np.flatnonzero(kept.any(axis=1 - axis))
        if not len(nonzero):
            return slice(0, 0), slice(0, 0)
        scale = kept.shape[axis] / size  # source pixels per output pixel
        # output i samples source (i + 0.5) * scale - 0.5 and the pixel after it
        start = math.floor((nonzero[0] - 0.5) / scale - 0.5) - 2
        stop = math.ceil((nonzero[-1] + 1.5) / scale - 0.5) + 2
        extent.append(slice(max(0, start), min(size, stop)))
    return extent[0], extent[1]


def scale_coords(frame: tuple[int, int], points: np.ndarray, image_shape: tuple[int, int],
                 normalize: bool = False) -> np.ndarray:
    """(..., 2 or more) points in the letterboxed input's pixels -> the image's (x, y; the other values kept),
    clipped to the image as ultralytics' scale_coords; ``normalize``: x / width, y / height."""
    gain, pad_x, pad_y = letterbox_padding(frame, image_shape)
    out = np.array(points, dtype=np.float32)
    out[..., 0] = ((out[..., 0] - pad_x) / gain).clip(0, image_shape[1])
    out[..., 1] = ((out[..., 1] - pad_y) / gain).clip(0, image_shape[0])
    if normalize:
        out[..., 0] /= image_shape[1]
        out[..., 1] /= image_shape[0]
    return out


def outer_contours(mask: np.ndarray, offset: tuple[int, int] = (0, 0)) -> list[np.ndarray]:
    """An (H, W) mask's outer contours, each (K, 2) int x, y (plus ``offset``, x and y): OpenCV's
    findContours (external contours, CHAIN_APPROX_SIMPLE), as ultralytics finds them."""
    cv2 = require("cv2", "mask polygons (masks.xy, YOLO-seg labels)")
    contours = cv2.findContours(np.ascontiguousarray(mask, dtype=np.uint8), cv2.RETR_EXTERNAL,
                                cv2.CHAIN_APPROX_SIMPLE, offset=tuple(map(int, offset)))[0]
    return [c.reshape(-1, 2) for c in contours]


def closest_points(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """Indexes of the closest pair of points between two polygons."""
    distances = ((a[:, None, :].astype(np.float64) - b[None, :, :]) ** 2).sum(-1)
    i, j = np.unravel_index(np.argmin(distances), distances.shape)
    return int(i), int(j)


def join_polygons(polygons: list[np.ndarray]) -> np.ndarray:
    """Several polygons as one, each linked to the next at their closest points by a thin two-way
    seam, as ultralytics' merge_multi_segment: forward through the first, each middle polygon's path
    from its entry to its exit point and the last, then back through the middle ones' remainders."""
    n = len(polygons)
    links: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        a, b = closest_points(polygons[i - 1], polygons[i])
        links[i - 1].append(a)
        links[i].append(b)
    parts, rolled = [], []
    for i, (polygon, link) in enumerate(zip(polygons, links)):
        if len(link) == 2 and link[0] > link[1]:  # enter and leave a middle polygon in index order
            link = link[::-1]
            polygon = polygon[::-1]
        polygon = np.roll(polygon, -link[0], axis=0)
        polygon = np.concatenate([polygon, polygon[:1]])
        rolled.append(polygon)
        parts.append(polygon if i in (0, n - 1) else polygon[: link[1] - link[0] + 1])
    for i in range(n - 2, 0, -1):  # the way back: what the forward pass skipped of each middle polygon
        parts.append(rolled[i][abs(links[i][1] - links[i][0]):])
    return np.concatenate(parts)


def masks2segments(masks: np.ndarray) -> list[np.ndarray]:
    """Each (H, W) mask's polygon, (K, 2) float32 x, y in mask pixels: its outer contour, or all of
    them joined (join_polygons); (0, 2) for an empty mask. ultralytics' masks2segments(strategy="all")."""
    segments = []
    for mask in masks:
        contours = outer_contours(mask)
        polygon = (join_polygons(contours) if len(contours) > 1 else contours[0]) if contours else np.zeros((0, 2))
        segments.append(polygon.astype(np.float32))
    return segments


def mask_to_rle(masks: np.ndarray) -> list[dict]:
    """(N, H, W) bool -> uncompressed RLEs {"size": [H, W], "counts": [...]} (column-major, zeros first)."""
    n, h, w = masks.shape
    flat = masks.transpose(0, 2, 1).reshape(n, h * w)
    out = []
    for row in flat:
        changes = np.flatnonzero(row[1:] != row[:-1]) + 1
        bounds = np.concatenate([[0], changes, [h * w]])
        counts = np.diff(bounds).tolist()
        if row.size and row[0]:
            counts.insert(0, 0)
        out.append({"size": [h, w], "counts": counts})
    return out


def rle_string(counts: list[int]) -> str:
    """Uncompressed RLE counts -> COCO's compressed string (pycocotools' rleToString, ultralytics'
    save_json ``to_string``): each count after the second as its difference from the one two before,
    in 5-bit groups with a continuation bit, offset into printable ASCII."""
    out = []
    for i, count in enumerate(counts):
        x = int(count) - (int(counts[i - 2]) if i > 2 else 0)
        while True:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr(c + (0x20 if more else 0) + 48))
            if not more:
                break
    return "".join(out)


def coco_rle(mask: np.ndarray) -> dict:
    """An (H, W) mask -> COCO's compressed RLE ``{"size": [H, W], "counts": str}``, as pycocotools'
    ``mask.encode`` and ultralytics' save_json write it (pycocotools decodes it; needs no pycocotools)."""
    rle = mask_to_rle(np.asarray(mask, bool)[None])[0]
    return {"size": rle["size"], "counts": rle_string(rle["counts"])}
