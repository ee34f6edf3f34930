"""YOLOv8 prediction as ultralytics' predictor does it: sources in, one Results per image or frame out.

``predict(model, source)``: ``source`` is anything zoo.sources opens (a path, folder, glob,
.txt/.csv list, video, camera index, numpy array, PIL image or a list of them); numpy arrays
are BGR as in ultralytics. ``stream=True`` returns a generator that holds one batch at a
time (memory stays flat over any number of video frames); otherwise a list.
``predict_batch`` is the step both use, and the CLI's pipeline calls it directly.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable, Iterator

import mlx.core as mx
import numpy as np

from zoo.concurrency import serialized
from zoo.errors import ZooError
from zoo.results import Results
from zoo.sources import Chain, Item, Source, open_source

from .ops import check_imgsz, check_thresholds, letterbox_batch, non_max_suppression, scale_boxes


def predict(model, source, stream: bool = False, conf: float = 0.25, iou: float = 0.7, classes=None,
            agnostic_nms: bool = False, max_det: int = 300, imgsz=None, batch: int | None = None,
            vid_stride: int = 1):
    """Detect objects in ``source``; a list of Results, or a generator of them with ``stream=True``.

    As ultralytics' predict: scores strictly above ``conf``; class-aware NMS at ``iou``
    (class-agnostic with ``agnostic_nms``); ``classes`` filters by names and/or ids;
    ``imgsz`` defaults to the size the checkpoint was trained at. Images of one batch
    are letterboxed to the smallest multiple of 32 around ``imgsz`` when they share one
    size, to ``imgsz`` x ``imgsz`` when sizes differ. ``batch``: images per forward
    pass (default: a list given in memory is one batch, other sources go one at a time);
    ``vid_stride``: keep every n-th video frame.
    """
    options = prediction_options(model, conf, iou, classes, agnostic_nms, max_det, imgsz)
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ZooError(f"batch {batch!r} must be a positive integer: use e.g. 8")
    opened = open_inputs(source, vid_stride)
    size = batch or (opened.total if isinstance(source, (list, tuple)) else 1)
    results = (r for items in batched(opened, size)
               for r in predict_batch(model, [item.load() for item in items], items, **options))
    return results if stream else list(results)


def open_inputs(source, vid_stride: int) -> Source:
    """zoo.sources' Source, numpy arrays as BGR; a list may mix paths with in-memory images (as ultralytics')."""
    if isinstance(source, (list, tuple)) and len({isinstance(s, (str, Path)) for s in source}) > 1:
        return Chain([open_source(s, vid_stride=vid_stride, bgr=True) for s in source])
    return open_source(source, vid_stride=vid_stride, bgr=True)


def prediction_options(model, conf, iou, classes, agnostic_nms, max_det, imgsz) -> dict:
    """predict_batch's keyword arguments, checked once (thresholds, classes by name, imgsz)."""
    check_thresholds(conf, iou, max_det)
    return {"conf": conf, "iou": iou, "classes": model.class_ids(classes), "agnostic_nms": agnostic_nms,
            "max_det": max_det, "shape": check_imgsz(model.imgsz if imgsz is None else imgsz)}


def batched(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@serialized()
def predict_batch(model, images: list[np.ndarray], items: list[Item | None], conf: float, iou: float,
                  classes: list[int] | None, agnostic_nms: bool, max_det: int, shape: tuple[int, int]) -> list[Results]:
    """One forward pass over ``images`` ((H, W, 3) uint8 RGB) -> one Results per image; ``items``
    give each result its path and frame number (None for a bare array)."""
    start = time.perf_counter()
    batch = letterbox_batch(images, shape)
    x = mx.array(batch.astype(np.float32) / np.float32(255)).astype(model.dtype)
    prepared = time.perf_counter()
    pred = model(x)
    mx.eval(pred)
    inferred = time.perf_counter()
    results = []
    for image, item, p in zip(images, items, pred):
        det = non_max_suppression(p, conf, iou, classes, agnostic_nms, max_det)
        det[:, :4] = scale_boxes(batch.shape[1:3], det[:, :4], image.shape[:2])
        path, frame = (item.path, item.frame) if item is not None else (None, None)
        results.append(Results(image[..., ::-1], path, model.names, det, frame=frame))  # orig_img BGR: a view
    done = time.perf_counter()
    per_image = 1000.0 / len(results)
    speed = {"preprocess": (prepared - start) * per_image, "inference": (inferred - prepared) * per_image,
             "postprocess": (done - inferred) * per_image}
    for r in results:
        r.speed = dict(speed)
    return results
