"""Segment everything: SAM's automatic mask generator (segment-anything's ``SamAutomaticMaskGenerator``).

    masks = zoo.load("mobilesam").mask_generator(points_per_side=32).generate("photo.jpg")

Same parameters, defaults and records as upstream. A grid of single foreground points
is prompted over the image (and over crops of it, ``crop_n_layers``); each point gives
three masks; masks are kept when the predicted IoU is above ``pred_iou_thresh``, the
stability score at least ``stability_score_thresh`` and the box does not touch an inner
crop edge; duplicates go by box NMS, per crop (by predicted IoU) and across crops
(smaller crops first); optionally small holes and islands are removed.

How it runs: the image (each crop) is encoded once; the points go through the prompt
encoder and mask decoder ``points_per_batch`` (at most DECODE_PROMPTS_AT_ONCE) at a time in one call; the predicted-IoU
filter comes before the masks are upsampled (it needs no pixels), so only candidates are
resized; stability, boxes and the crop-edge test run in MLX on the batch; NMS is
``zoo.kernels.nms`` (the native kernel on the GPU). The batches are pipelined: the next
batch decodes while the host reads this one's IoUs, and a batch's statistics compute while
the host filters the previous one's, so the GPU does not wait for the host. The low-res
logits of the candidates are kept (not their full-size masks) and the kept ones are
upsampled again after NMS: memory stays at 256 KB per candidate whatever the image size (the
upsampling itself goes UPSAMPLE_BYTES at a time);
the device transposes them for the column-major RLE, and the host encodes only the columns
from a mask's first to its last pixel.
"""
from __future__ import annotations

import math
import numbers
from typing import Callable

import mlx.core as mx
import numpy as np

from zoo.errors import ZooError, keyword, option
from zoo.images import load_image
from zoo.kernels.nms import nms

from . import amg
from .predictor import SamPredictor, apply_coords, past_memory_share

OUTPUT_MODES = ("binary_mask", "uncompressed_rle", "coco_rle")
# Candidate masks are upsampled to the crop's size for their statistics and RLEs at most this many bytes at a
# time, counted at UPSAMPLED_BYTES_PER_PIXEL (the float32 logits, the resize's temporaries, thresholded copies):
# 192 candidates of an 8000x8000 photo at once took 4.2 GB before (48 at 1000x1500: 1.3 GB, 19 bytes a pixel a
# mask); a mask the size of the crop is one pass.
UPSAMPLE_BYTES = 512 << 20
UPSAMPLED_BYTES_PER_PIXEL = 20
# The mask decoder takes ~52 MB a prompt whatever the image (64 prompts at once: 3.3 GB): a batch of points is
# decoded this many at a time (each prompt's outputs are its own: the same values, checked in the tests).
DECODE_PROMPTS_AT_ONCE = 16
Progress = Callable[[int, int, int, int], None]  # (batches done, batches in all, crop, crops)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ZooError(f"{keyword(name)} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_fraction(name: str, value, upper_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not (0 <= value < 1 if upper_open else 0 <= value <= 1):
        raise ZooError(f"{keyword(name)} must be a number in [0, 1{')' if upper_open else ']'}, got {value!r}")
    return float(value)


# A grid finer than SAM's input pixels prompts the same pixels again; it is allocated whole (n * n * 48 bytes:
# points_per_side 100000 asked for 74.5 GiB at once)
MAX_POINTS_PER_SIDE = 1024


def check_crop_layers(crop_n_layers: int, size: tuple[int, int]) -> None:
    """ZooError where ``crop_n_layers`` cuts an image of ``size`` (height, width) into more crops than it has
    pixels: checked before the boxes are listed (20 layers are 4**20 boxes), and by the command line from the
    image's header before the model loads."""
    pixels = size[0] * size[1]
    if 4 ** crop_n_layers > pixels:
        most = max(layer for layer in range(crop_n_layers) if 4 ** layer <= pixels)
        raise ZooError(f"{keyword('crop_n_layers')} {crop_n_layers} cuts the {size[1]}x{size[0]} image into "
                       f"{4 ** crop_n_layers:,} crops, more than its {pixels:,} pixels: give at most {most}")


class SamAutomaticMaskGenerator:
    def __init__(self, model, points_per_side: int | None = 32, points_per_batch: int = 64,
                 pred_iou_thresh: float = 0.88, stability_score_thresh: float = 0.95,
                 stability_score_offset: float = 1.0, box_nms_thresh: float = 0.7, crop_n_layers: int = 0,
                 crop_nms_thresh: float = 0.7, crop_overlap_ratio: float = 512 / 1500,
                 crop_n_points_downscale_factor: int = 1, point_grids: list[np.ndarray] | None = None,
                 min_mask_region_area: int = 0, output_mode: str = "binary_mask"):
        """Parameters as upstream's (its docstring explains each); every one is checked here, one-line ZooError.

        ``points_per_side`` x ``points_per_side`` points (layer i of the crops:
        ``int(points_per_side / crop_n_points_downscale_factor**i)`` per side), or explicit
        ``point_grids`` (one (K, 2) array in [0, 1] per crop layer) instead.
        """
        self.points_per_batch = _check_int("points_per_batch", points_per_batch, 1)
        self.crop_n_layers = _check_int("crop_n_layers", crop_n_layers, 0)
        self.crop_n_points_downscale_factor = _check_int(
            "crop_n_points_downscale_factor", crop_n_points_downscale_factor, 1)
        if (points_per_side is None) == (point_grids is None):
            raise ZooError("give exactly one of points_per_side (a number) or point_grids (a list of (K, 2) arrays)")
        if points_per_side is not None:
            _check_int("points_per_side", points_per_side, 1)
            if points_per_side > MAX_POINTS_PER_SIDE:
                raise ZooError(f"{keyword('points_per_side')} {points_per_side} makes {points_per_side ** 2:,} "
                               f"prompts: give at most {MAX_POINTS_PER_SIDE}, a point for each pixel of SAM's "
                               f"{MAX_POINTS_PER_SIDE}x{MAX_POINTS_PER_SIDE} input (upstream's default is 32)")
            for layer in range(self.crop_n_layers + 1):
                if int(points_per_side / self.crop_n_points_downscale_factor ** layer) < 1:
                    raise ZooError(f"crop layer {layer} gets no points: {keyword('points_per_side')} "
                                   f"{points_per_side} / {keyword('crop_n_points_downscale_factor')}**{layer} < 1; "
                                   f"raise {keyword('points_per_side')} or lower {keyword('crop_n_layers')} / the "
                                   "factor")
            self.point_grids = amg.build_all_layer_point_grids(
                points_per_side, self.crop_n_layers, self.crop_n_points_downscale_factor)
        else:
            self.point_grids = [self._checked_grid(i, g) for i, g in enumerate(point_grids)]
            if len(self.point_grids) != self.crop_n_layers + 1:
                raise ZooError(f"point_grids has {len(self.point_grids)} grids: one per crop layer is needed "
                               f"({self.crop_n_layers + 1} with crop_n_layers={self.crop_n_layers})")
        self.pred_iou_thresh = _check_fraction("pred_iou_thresh", pred_iou_thresh)
        self.stability_score_thresh = _check_fraction("stability_score_thresh", stability_score_thresh)
        self.box_nms_thresh = _check_fraction("box_nms_thresh", box_nms_thresh)
        self.crop_nms_thresh = _check_fraction("crop_nms_thresh", crop_nms_thresh)
        self.crop_overlap_ratio = _check_fraction("crop_overlap_ratio", crop_overlap_ratio, upper_open=True)
        if isinstance(stability_score_offset, bool) or not isinstance(stability_score_offset, numbers.Real) \
                or not math.isfinite(stability_score_offset) or stability_score_offset < 0:
            raise ZooError(f"{keyword('stability_score_offset')} must be a number >= 0 (logit units), got "
                           f"{stability_score_offset!r}")
        self.stability_score_offset = float(stability_score_offset)
        self.min_mask_region_area = _check_int("min_mask_region_area", min_mask_region_area, 0)
        if output_mode not in OUTPUT_MODES:
            raise ZooError(f"output_mode {output_mode!r} is not one of {', '.join(OUTPUT_MODES)}")
        self.output_mode = output_mode
        if self.min_mask_region_area > 0:
            amg.import_cv2()
        self.predictor = SamPredictor(model)

    @staticmethod
    def _checked_grid(layer: int, grid) -> np.ndarray:
        grid = np.asarray(grid, dtype=np.float64)
        if grid.ndim != 2 or grid.shape[1] != 2 or len(grid) == 0 or not np.isfinite(grid).all() \
                or grid.min() < 0 or grid.max() > 1:
            raise ZooError(f"point_grids[{layer}] must be a non-empty (K, 2) array of (x, y) in [0, 1]")
        return grid

    def generate(self, image, progress: Progress | None = None) -> list[dict]:
        """Masks of everything in ``image`` (path, PIL image or (H, W, 3) uint8 RGB array).

        -> one record per mask, upstream's keys: ``segmentation`` ((H, W) bool, or an RLE dict
        by ``output_mode``), ``area`` (pixels), ``bbox`` [x, y, w, h] (inclusive pixel bounds:
        w = x1 - x0), ``predicted_iou``, ``point_coords`` [[x, y]], ``stability_score``,
        ``crop_box`` [x, y, w, h]. An image where nothing passes the filters gives [].
        ``progress(done, total, crop, crops)``: called after each point batch (``done`` of ``total``
        batches over all crops; ``crop`` of ``crops``, 1-based): e.g. a tqdm bar's update.
        """
        return self.records(self.generate_data(image, progress))

    def generate_data(self, image, progress: Progress | None = None) -> dict:
        """The kept masks as columns (upstream's MaskData): "rles" (uncompressed, whole image), "boxes"
        (N, 4) XYXY inclusive, "iou_preds", "stability_score", "points" (N, 2), "crop_boxes" (N, 4)."""
        image = load_image(image)
        orig_size = image.shape[:2]
        check_crop_layers(self.crop_n_layers, orig_size)
        crop_boxes, layers = amg.generate_crop_boxes(orig_size, self.crop_n_layers, self.crop_overlap_ratio)
        # an image thinner than a layer's number of crops across (1 px tall) gets empty crops there, which upstream
        # fails on: there is nothing in them to segment
        crop_boxes, layers = zip(*[(box, layer) for box, layer in zip(crop_boxes, layers)
                                   if box[2] > box[0] and box[3] > box[1]])
        total = sum(-(-len(self.point_grids[layer]) // self._points_at_once()) for layer in layers)
        counter = iter(range(1, total + 1))
        data = []
        for k, (crop_box, layer) in enumerate(zip(crop_boxes, layers)):
            batch_done = ((lambda k=k: progress(next(counter), total, k + 1, len(crop_boxes))) if progress
                          else (lambda: None))
            data.append(self._process_crop(image, crop_box, layer, batch_done))
        data = {key: np.concatenate([d[key] for d in data]) if key != "rles" else sum((d[key] for d in data), [])
                for key in data[0]}
        if len(crop_boxes) > 1 and len(data["rles"]):
            # duplicates between crops: the mask of the smaller crop wins
            crops = data["crop_boxes"].astype(np.int64)
            areas = (crops[:, 2] - crops[:, 0]) * (crops[:, 3] - crops[:, 1])
            scores = np.float32(1) / areas.astype(np.float32)
            data = _filtered(data, _nms(data["boxes"], scores, self.crop_nms_thresh))
        if self.min_mask_region_area > 0:
            data = self.postprocess_small_regions(data, self.min_mask_region_area,
                                                  max(self.box_nms_thresh, self.crop_nms_thresh))
        return data

    def records(self, data: dict) -> list[dict]:
        """generate_data's columns -> upstream's records, the masks in ``output_mode``."""
        if self.output_mode == "binary_mask" and data["rles"]:  # the masks were RLEs: all of them, full size, now
            height, width = data["rles"][0]["size"]
            need = len(data["rles"]) * height * width
            if past := past_memory_share(need):
                raise ZooError(f"{len(data['rles'])} masks of {width}x{height} as binary masks take "
                               f"{need / 2**30:.3g} GiB, {past}: pass {option('output_mode', 'coco_rle')} "
                               "(pycocotools' mask.decode makes one mask at a time)")
        return [self._record(data, i) for i in range(len(data["rles"]))]

    def _record(self, data: dict, i: int) -> dict:
        rle = data["rles"][i]
        if self.output_mode == "coco_rle":
            segmentation = amg.coco_encode_rle(rle)
        elif self.output_mode == "binary_mask":
            segmentation = amg.rle_to_mask(rle)
        else:
            segmentation = rle
        return {
            "segmentation": segmentation,
            "area": amg.area_from_rle(rle),
            "bbox": amg.box_xyxy_to_xywh(data["boxes"][i].tolist()),
            "predicted_iou": float(data["iou_preds"][i]),
            "point_coords": [data["points"][i].tolist()],
            "stability_score": float(data["stability_score"][i]),
            "crop_box": amg.box_xyxy_to_xywh(data["crop_boxes"][i].tolist()),
        }

    def _process_crop(self, image: np.ndarray, crop_box: list[int], layer: int, batch_done: Callable[[], None]) -> dict:
        x0, y0, x1, y1 = crop_box
        crop = image[y0:y1, x0:x1]
        crop_size = crop.shape[:2]
        predictor, model = self.predictor, self.predictor.model
        predictor.set_image(crop)  # the encoder runs once per crop
        points = self.point_grids[layer] * np.array(crop_size)[None, ::-1]
        image_box = [0, 0, image.shape[1], image.shape[0]]
        kept = {"low_res": [], "iou_preds": [], "points": [], "stability_score": [], "boxes": []}
        step = self._points_at_once()
        batches = [points[start : start + step] for start in range(0, len(points), step)]

        def decode(batch):
            coords = apply_coords(batch, crop_size, model.img_size)[:, None, :]
            outputs = predictor.decode(coords, np.ones(coords.shape[:2], np.int32), multimask_output=True)
            mx.async_eval(*outputs)
            return outputs

        def keep_passing(batch, iou, candidates, low_res, stats):
            """The host's part of a batch whose statistics are computed: the filters, the kept rows."""
            stability, boxes, near_edge = (np.array(a) for a in stats)
            keep = ~near_edge
            if self.stability_score_thresh > 0:
                keep &= stability >= self.stability_score_thresh
            if not keep.any():
                return
            rows = np.flatnonzero(keep)
            kept["low_res"].append(mx.take(low_res, mx.array(rows), axis=0))
            kept["iou_preds"].append(iou[candidates[rows]])
            kept["points"].append(batch[candidates[rows] // (iou.size // len(batch))])  # masks per point
            kept["stability_score"].append(stability[rows])
            kept["boxes"].append(boxes[rows].astype(np.int64))

        # A pipeline, so that the GPU never waits for the host: batch k+1 is decoding while the
        # host reads batch k's IoUs, and batch k's statistics are computing while the host
        # filters batch k-1's.
        decoded = decode(batches[0]) if batches else None
        pending = None
        for k, batch in enumerate(batches):
            low_res, iou = decoded
            if k + 1 < len(batches):
                decoded = decode(batches[k + 1])
            n, h, w, c = low_res.shape
            iou = np.array(iou.astype(mx.float32)).reshape(-1)  # (point, mask) order, as upstream flattens
            candidates = np.flatnonzero(iou > self.pred_iou_thresh) if self.pred_iou_thresh > 0 else np.arange(iou.size)
            if candidates.size:
                low_res = mx.take(low_res.transpose(0, 3, 1, 2).reshape(n * c, h, w), mx.array(candidates), axis=0)
                stats = self._statistics(low_res, crop_box, image_box)
            if pending is not None:
                keep_passing(*pending)
            pending = (batch, iou, candidates, low_res, stats) if candidates.size else None
            batch_done()
        if pending is not None:
            keep_passing(*pending)
        data = {key: np.concatenate(v) if v and key != "low_res" else v for key, v in kept.items()}
        if not kept["boxes"]:
            predictor.reset_image()
            return {"rles": [], "iou_preds": np.zeros(0, np.float32), "points": np.zeros((0, 2)),
                    "stability_score": np.zeros(0, np.float32), "boxes": np.zeros((0, 4), np.int64),
                    "crop_boxes": np.zeros((0, 4), np.int64)}
        low_res = mx.concatenate(data.pop("low_res"))
        order = _nms(data["boxes"], data["iou_preds"], self.box_nms_thresh)  # duplicates within the crop
        data = _filtered(data, order)
        data["rles"] = self._rles(mx.take(low_res, mx.array(order), axis=0), crop_box, image.shape[:2])
        predictor.reset_image()
        offset = np.array([x0, y0])
        data["boxes"] = data["boxes"] + np.tile(offset, 2)  # back to the image's frame
        data["points"] = data["points"] + offset
        data["crop_boxes"] = np.tile(np.array(crop_box, np.int64), (len(order), 1))
        return data

    def _points_at_once(self) -> int:
        return min(self.points_per_batch, DECODE_PROMPTS_AT_ONCE)

    def _masks_at_once(self) -> int:
        """How many masks at the current crop's size fit in UPSAMPLE_BYTES (at least one)."""
        h, w = self.predictor.original_size
        return max(1, UPSAMPLE_BYTES // (h * w * UPSAMPLED_BYTES_PER_PIXEL))

    def _statistics(self, low_res: mx.array, crop_box: list[int], image_box: list[int]) -> tuple:
        """(K, 256, 256) low-res logits -> their stability scores, boxes (crop pixels) and crop-edge flags,
        being evaluated: upsampled _masks_at_once() at a time, each part evaluated before the next is
        made when there are several (each mask's statistics are its own: the same values in any grouping)."""
        threshold, step = self.predictor.model.mask_threshold, self._masks_at_once()
        parts = []
        for start in range(0, low_res.shape[0], step):
            logits = self._upsample(low_res[start : start + step], self.predictor)
            boxes = amg.batched_mask_to_box(logits > threshold)
            part = (amg.stability_score(logits, threshold, self.stability_score_offset), boxes,
                    amg.is_box_near_crop_edge(boxes, crop_box, image_box))
            if step < low_res.shape[0]:
                mx.eval(*part)
            parts.append(part)
        stats = tuple(mx.concatenate(columns) for columns in zip(*parts)) if len(parts) > 1 else parts[0]
        mx.async_eval(*stats)
        return stats

    def _upsample(self, low_res: mx.array, predictor: SamPredictor) -> mx.array:
        """(K, 256, 256) low-res logits -> (K, h, w) float32 logits at the crop's size."""
        logits = predictor.model.postprocess_masks(low_res[..., None], predictor.input_size, predictor.original_size)
        return logits[..., 0]

    def _rles(self, low_res: mx.array, crop_box: list[int], image_size: tuple[int, int]) -> list[dict]:
        """The kept masks, upsampled again and placed in the whole image -> uncompressed RLEs.

        The device transposes the masks (RLE runs down the columns) and finds the columns
        that hold any pixel; the host encodes only those columns."""
        rles = []
        step = min(self.points_per_batch * 3, self._masks_at_once())
        for start in range(0, low_res.shape[0], step):
            masks = self._upsample(low_res[start : start + step], self.predictor) > self.predictor.model.mask_threshold
            columns = masks.transpose(0, 2, 1)
            occupied = mx.any(masks, axis=1)
            mx.eval(columns, occupied)
            rles += amg.mask_columns_to_rle(np.array(columns), np.array(occupied), crop_box, image_size)
        return rles

    @staticmethod
    def postprocess_small_regions(data: dict, min_area: int, nms_thresh: float) -> dict:
        """Fill holes and drop islands under ``min_area`` pixels, then NMS again (unchanged masks first).

        One full-size mask at a time, a changed one kept as its RLE: all of them at once (and stacked twice more
        for their boxes) were 3 x N masks of the image, 5 GB for 150 masks of a 12-megapixel photo."""
        if not data["rles"]:
            return data
        rles, boxes, mask_boxes, unchanged = list(data["rles"]), data["boxes"].copy(), [], []
        for i, rle in enumerate(data["rles"]):
            mask, filled = amg.remove_small_regions(amg.rle_to_mask(rle), min_area, "holes")
            mask, trimmed = amg.remove_small_regions(mask, min_area, "islands")
            mask_boxes.append(np.array(amg.batched_mask_to_box(mx.array(mask))).astype(np.int64))
            unchanged.append(not (filled or trimmed))
            if filled or trimmed:
                rles[i], boxes[i] = amg.mask_to_rle(mask[None])[0], mask_boxes[-1]
        order = _nms(np.stack(mask_boxes), np.array(unchanged, np.float32), nms_thresh)
        return _filtered(dict(data, rles=rles, boxes=boxes), order)


def _nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """Class-agnostic greedy NMS (torchvision's, as upstream's batched_nms with one category) -> kept indices,
    by descending score, ties by index."""
    kept = nms(mx.array(boxes.astype(np.float32)), mx.array(scores.astype(np.float32)), threshold,
               max_det=max(1, len(boxes)))
    return np.array(kept).astype(np.int64)


def _filtered(data: dict, index: np.ndarray) -> dict:
    return {key: [value[i] for i in index] if isinstance(value, list) else value[index]
            for key, value in data.items()}
