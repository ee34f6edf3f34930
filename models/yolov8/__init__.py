"""YOLOv8 n/s/m/l/x detection (ultralytics layout) in MLX.

    det = zoo.load("yolov8n")                    # or zoo.load("yolov8", weights="best.pt")
    results = det.predict(["bus.jpg"])

model.py holds the network (ultralytics' DetectionModel), ops.py the pre- and
post-processing, checkpoint.py what a checkpoint says about itself (namings,
class names).
"""
from __future__ import annotations

from .checkpoint import CANDLE_PREFIXES, CLASS_NAMES, apply_metadata, class_names, sanitize
from .model import ARCH, REG_MAX, SCALES, STRIDES, DetectionModel
from .ops import (MAX_IMGSZ, MAX_NMS, PAD_VALUE, STRIDE, check_imgsz, check_thresholds, letterbox, letterbox_batch,
                  non_max_suppression, resize_linear, resolve_classes, scale_boxes)

__all__ = [
    "ARCH", "CANDLE_PREFIXES", "CLASS_NAMES", "MAX_IMGSZ", "MAX_NMS", "PAD_VALUE", "REG_MAX", "SCALES", "STRIDE",
    "STRIDES", "DetectionModel", "apply_metadata", "build", "check_imgsz", "check_thresholds", "class_names",
    "letterbox", "letterbox_batch", "non_max_suppression", "resize_linear", "resolve_classes", "sanitize",
    "scale_boxes",
]


def build(spec) -> DetectionModel:
    return DetectionModel(spec.variant.removeprefix("yolov8"), imgsz=spec.preprocess.get("imgsz", 640))
