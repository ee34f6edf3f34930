"""The YOLO family in MLX (ultralytics layout): YOLOv8 and YOLO11 n/s/m/l/x detection, segmentation and pose.

    det = zoo.load("yolo11n")                    # or zoo.load("best.pt"): the generation and scale from the file
    results = det.predict(["bus.jpg"])

model.py holds the network (ultralytics' DetectionModel, built from a generation's layer
table), ops.py the pre- and post-processing, checkpoint.py what a checkpoint says about itself
(namings, task, generation, scale, classes, names, training size).
"""
from __future__ import annotations

from .checkpoint import (CANDLE_PREFIXES, CLASS_NAMES, COCO91_IDS, REGISTRY_TASKS, TASK_SUFFIXES, CheckpointInfo,
                         checkpoint_spec, class_names, coco_category_ids, describe, holds, parse_names, sanitize,
                         split_variant, synthetic_init)
from .heads import Pose, Proto, Segment, task_architecture
from .model import ARCHITECTURES, REG_MAX, STRIDES, YOLO11, YOLOV8, Architecture, DetectionModel
from .ops import (BATCH_BYTES_PER_PIXEL, MAX_IMGSZ, MAX_NMS, PAD_VALUE, STRIDE, check_imgsz, check_thresholds,
                  letterbox, letterbox_batch, non_max_suppression, resize_linear, resolve_classes, scale_boxes)


def default_imgsz(spec) -> int | tuple[int, int]:
    """The size a model built for ``spec`` predicts at unless told: the training size checkpoint_spec read from
    the file, else 640 (the official checkpoints')."""
    return spec.preprocess.get("imgsz", 640)


def build(spec) -> DetectionModel:
    """The network for ``spec`` as checkpoint_spec fitted it to a file (its nc and names), else COCO's 80."""
    nc = spec.config.get("nc", 80)
    names = spec.config.get("names") or parse_names(None, nc, spec.name)
    arch, scale, task = split_variant(spec.variant)
    arch = task_architecture(arch, scale, task, spec.config.get("kpt_shape"))
    return DetectionModel(scale, nc, default_imgsz(spec), names, arch)
