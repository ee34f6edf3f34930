"""Detect, then segment: detector boxes -> SAM masks -> YOLO-segmentation labels (ultralytics' ``auto_annotate``).

    import zoo
    zoo.auto_annotate("photos/", det_model="yolov8n", sam_model="mobilesam", output_dir="labels/")

    python -m zoo.run annotate photos/ --det yolov8s --sam mobilesam --out labels/ --save-masks --save-overlay

Per image: the detector's boxes (any checkpoint the YOLO loader takes: a name, a ``.pt``
path such as a trained ``best.pt``, or a loaded model), then batched SAM decoder calls of up to
16 boxes each (one mask per box, ``multimask_output=False`` as ultralytics; each mask made only
over the rectangle where it can be true, and kept only when it is written),
then one label file ``<out>/<name>.txt``, one line per detection, ultralytics' format::

    class x1 y1 x2 y2 ... xn yn        (n >= 3 points, x / width and y / height, all in [0, 1])

The polygon is the largest outer contour of the mask (OpenCV ``findContours``, external
contours, ``CHAIN_APPROX_SIMPLE``; largest by area). Documented fallbacks keep one line per
detection: a mask whose largest contour has fewer than 3 points (a line or a single pixel)
gives the rectangle around its pixels; an empty mask gives the detector's box. An image
without detections gets an empty label file (a YOLO label file for an image without
objects) and a note. Optional: ``masks/<name>_<i>.png`` (line i's mask, white = inside)
and ``overlays/<name>.png`` (masks, boxes and class names drawn on the image).

Outputs are checked before the models load: none may be an input, none may exist unless
``overwrite``; every file is written to a temporary name and renamed (never half a file).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from .errors import UsageError, ZooError, option, options_named
from .extras import require
from .files import (Inputs, check_new_file, check_output_folder, make_output_folder, refuse_empty, refuse_inputs,
                    save_mask, save_png, write_text)
from .instances import SAM_RUN_BYTES, check_full_size_masks, outer_contours
from .sources import Item, open_source, planned_names

# Boxes decoded at once: fewer on a big photo (16 up to 8 Mpixels, 3 at 6000x6000), as when a chunk's
# full-size masks were held together. Kept although masks are now made one at a time because the
# decoder's float rounding depends on its batch: the same chunks give the same labels.
DECODE_CHUNK_PIXELS = 128 << 20


@dataclass
class Annotation:
    """One image's labels. ``classes`` (N,), ``boxes`` (N, 4) x1 y1 x2 y2 pixels and ``scores`` (N,) from the
    detector; ``mask_scores`` (N,) SAM's predicted IoU; ``polygons``: N (K, 2) arrays of x, y in [0, 1];
    ``from_box``: the detections whose polygon is their box (SAM's mask was empty); ``masks`` (N, H, W) bool
    (``annotate_image`` only: auto_annotate drops them once written); ``files``: what was written."""

    path: str
    name: str
    shape: tuple[int, int]
    classes: np.ndarray
    boxes: np.ndarray
    scores: np.ndarray
    mask_scores: np.ndarray
    polygons: list[np.ndarray]
    from_box: list[int] = field(default_factory=list)
    masks: np.ndarray | None = None
    files: list[Path] = field(default_factory=list)

    def label_lines(self) -> list[str]:
        """The YOLO-segmentation label file's lines: ``class x1 y1 x2 y2 ...``, one per detection."""
        return [" ".join([str(int(c)), *(f"{v:g}" for v in polygon.reshape(-1))])
                for c, polygon in zip(self.classes, self.polygons)]

    @property
    def notes(self) -> list[str]:
        notes = [] if len(self.classes) else ["no detections: empty label file"]
        if self.from_box:
            which = ", ".join(map(str, self.from_box))
            notes.append(f"empty SAM mask for detection(s) {which}: their box is the polygon")
        return notes


def mask_polygon(mask: np.ndarray, shape: tuple[int, int] | None = None,
                 origin: tuple[int, int] = (0, 0)) -> np.ndarray | None:
    """(H, W) bool -> its largest outer contour as (K, 2) x, y in [0, 1] (x / W, y / H), K >= 3; the rectangle
    around its pixels when that contour is a line or a point; None for an empty mask. ``mask`` may be the
    part at column, row ``origin`` of a mask of ``shape`` (H, W) that is false elsewhere: the same polygon
    (OpenCV pads the image with zeros, so its contours do not depend on the zeros around them)."""
    height, width = mask.shape if shape is None else shape
    contours = outer_contours(mask, origin)
    if not contours:
        return None
    largest = max(contours, key=lambda c: (polygon_area(c), len(c))).astype(np.float64)
    if len(largest) < 3:  # a line or a pixel: its pixels' edges, so the polygon has an inside
        x0, y0 = largest.min(0)
        x1, y1 = largest.max(0) + 1
        largest = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
    return largest / np.array([width, height])


def polygon_area(points: np.ndarray) -> float:
    """The area a closed (K, 2) polygon encloses (the shoelace formula, as OpenCV's contourArea)."""
    x, y = points[:, 0].astype(np.float64), points[:, 1].astype(np.float64)
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2


def box_polygon(box: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """x1 y1 x2 y2 pixels -> its four corners as (4, 2) in [0, 1]."""
    height, width = shape
    x1, y1, x2, y2 = box
    corners = np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]], np.float64) / np.array([width, height])
    return np.clip(corners, 0, 1)




def check_kept_masks(count: int, shape: tuple[int, int]) -> None:
    """Refuses, before allocating, ``count`` full-size masks that would take the run past 2 GiB (a
    ZooError naming max_det, or the labels without masks and overlays)."""
    check_full_size_masks(count, shape, SAM_RUN_BYTES, f"write the labels alone "
                          f"({option('save_masks', False)}, {option('save_overlay', False)})")


def annotate_image(detector, sam, rgb: np.ndarray, item: Item | None = None, conf: float = 0.25, iou: float = 0.45,
                   imgsz=640, max_det: int = 300, classes=None, keep_masks: bool = True) -> Annotation:
    """One (H, W, 3) uint8 RGB image -> its Annotation, masks included unless ``keep_masks`` is False
    (nothing is written). The boxes are decoded a chunk at a time and each mask is made only over
    the rectangle where it can be true (SamPredictor.mask_crop), its polygon found there: without
    the masks, memory does not grow with the number of boxes (300 full-size masks of a 6000x6000
    photo are 10 GB) and a small object costs its own size, not the photo's."""
    from zoo.models.mobilesam.predictor import PROMPTS_PER_DECODE
    from zoo.models.yolov8.predict import predict_batch, prediction_options

    options = prediction_options(detector, conf, iou, classes, False, max_det, imgsz)
    result = predict_batch(detector, [rgb], [item], **options)[0]
    shape = rgb.shape[:2]
    height, width = shape
    data = result.boxes.data
    # corners in order and inside the image: SAM refuses anything else (untrained weights may give x2 < x1)
    boxes = np.concatenate([np.minimum(data[:, 0:2], data[:, 2:4]), np.maximum(data[:, 0:2], data[:, 2:4])], axis=1)
    boxes = np.clip(boxes, 0, [width, height, width, height]).astype(np.float64)
    predictor = sam.predictor()
    predictor.set_image(rgb)
    if keep_masks:
        check_kept_masks(len(boxes), shape)
    masks = np.zeros((len(boxes), height, width), bool) if keep_masks else None
    mask_scores, polygons, from_box = [], [], []
    chunk = max(1, min(PROMPTS_PER_DECODE, DECODE_CHUNK_PIXELS // (height * width)))
    for start in range(0, len(boxes), chunk):
        scores, low_res = predictor.predict_low_res(boxes=boxes[start:start + chunk], multimask_output=False)
        mask_scores.append(scores[:, 0])
        for i, logits in enumerate(low_res[:, 0], start):
            top, left, crop = predictor.mask_crop(logits)
            polygon = mask_polygon(crop, shape, (left, top))
            if polygon is None:
                polygon = box_polygon(boxes[i], shape)
                from_box.append(i)
            polygons.append(polygon)
            if keep_masks:
                masks[i, top:top + crop.shape[0], left:left + crop.shape[1]] = crop
    mask_scores = np.concatenate(mask_scores) if mask_scores else np.zeros(0, np.float32)
    name = item.name if item is not None else "image0"
    path = item.path if item is not None else "image0"
    return Annotation(path, name, shape, data[:, 5].astype(np.int64), boxes, data[:, 4].copy(), mask_scores,
                      polygons, from_box, masks)


# ---- outputs ---------------------------------------------------------------------------------------

@dataclass
class Outputs:
    """Where an image's files go: ``<folder>/<name>.txt``, ``masks/<name>_<i>.png``, ``overlays/<name>.png``."""

    folder: Path
    save_masks: bool = False
    save_overlay: bool = False
    overwrite: bool = False

    @property
    def masks(self) -> Path:
        return self.folder / "masks"

    @property
    def overlays(self) -> Path:
        return self.folder / "overlays"

    def label(self, name: str) -> Path:
        return self.folder / f"{name}.txt"

    def overlay(self, name: str) -> Path:
        return self.overlays / f"{name}.png"

    def mask(self, name: str, i: int) -> Path:
        return self.masks / f"{name}_{i}.png"

    def existing_masks(self, name: str) -> list[Path]:
        """Mask PNGs of ``name`` in the masks folder (a regular expression: cat_2's masks are not cat's)."""
        if not self.masks.is_dir():
            return []
        pattern = re.compile(rf"{re.escape(name)}_\d+\.png")
        return [p for p in self.masks.iterdir() if pattern.fullmatch(p.name)]

    def masks_of_earlier_run(self, name: str) -> set[Path]:
        """The masks an earlier run wrote for ``name``: one per line of its label file (a mask file that
        no label line accounts for is not ours, and is never deleted)."""
        try:
            lines = self.label(name).read_bytes().count(b"\n")
        except OSError:
            return set()
        return {self.mask(name, i) for i in range(lines)} & set(self.existing_masks(name))

    def check(self, names: list[str] | None, inputs: Inputs) -> None:
        """Fail before any work: a folder that is an input or a file; an output that is an input; an
        existing output without ``overwrite``. ``names`` None (video frames): the folders only."""
        folders = [self.folder] + [self.masks] * self.save_masks + [self.overlays] * self.save_overlay
        for folder in folders:
            check_output_folder(folder, "output folder", inputs)
        for name in names or ():
            paths = [self.label(name)] + [self.overlay(name)] * self.save_overlay
            paths += self.existing_masks(name) if self.save_masks else []
            for path in paths:
                check_new_file(refuse_inputs(path, inputs, "output"), "output", self.overwrite)

    def make(self) -> None:
        for folder in [self.folder] + [self.masks] * self.save_masks + [self.overlays] * self.save_overlay:
            make_output_folder(folder, "output folder")

    def write(self, annotation: Annotation, rgb: np.ndarray, names: dict[int, str]) -> list[Path]:
        """The image's masks and overlay, then its label file (last: a label file means the image is done)."""
        name = annotation.name
        planned = [self.label(name)] + [self.overlay(name)] * self.save_overlay
        if self.save_masks:
            planned += [self.mask(name, i) for i in range(len(annotation.classes))] + self.existing_masks(name)
        for path in planned:  # checked again: video frames are named only as they are decoded
            check_new_file(path, "output", self.overwrite)
        written = []
        if self.save_masks:
            earlier = self.masks_of_earlier_run(name)
            for i, mask in enumerate(annotation.masks):
                written.append(save_mask(mask, self.mask(name, i)))
            for stale in earlier - set(written):  # an earlier run's extra masks
                stale.unlink(missing_ok=True)
        if self.save_overlay:
            written.append(save_png(overlay(rgb, annotation, names), self.overlay(name)))
        text = "".join(line + "\n" for line in annotation.label_lines())
        written.append(write_text(self.label(name), text))
        return written


def overlay(rgb: np.ndarray, annotation: Annotation, names: dict[int, str]) -> Image.Image:
    """Each mask in its class's colour over the image, then the detector's boxes and labels."""
    from .results import Results, blend_masks, class_colour

    blended = blend_masks(rgb, annotation.masks, [class_colour(int(cls)) for cls in annotation.classes])
    det = np.concatenate([annotation.boxes, annotation.scores[:, None], annotation.classes[:, None]], axis=1)
    result = Results(blended[..., ::-1], annotation.path, names, det.astype(np.float32))
    return result.plot(pil=True)


# ---- the whole run ---------------------------------------------------------------------------------

def default_output_dir(data) -> Path:
    """ultralytics' default: ``<data>_auto_annotate_labels`` beside a single input path."""
    if not isinstance(data, (str, Path)):
        raise UsageError("no output folder: with other inputs than one path, pass output_dir='labels/' "
                         "(--out labels/)")
    data = Path(data)
    return data.parent / f"{data.stem}_auto_annotate_labels"


def load_model(given, weights, dtype: str, role: str, family: str, label: str, model_class, names: str, files: str,
               weights_option: str):
    """The model for ``role`` (detector, segmenter): ``given`` is a loaded ``model_class``, a registered
    name of ``family`` or a checkpoint path (read as ``family``, refused when the family's ``holds``
    says it is none of its). ``label`` names the family, ``names`` and ``files`` say what to pass
    instead, in the one-line errors; ``weights_option`` is the option of ``weights`` (det_weights)."""
    from zoo import registry

    if isinstance(given, model_class):
        return given
    if not isinstance(given, (str, Path)):
        raise UsageError(f"{role} is a {type(given).__name__}: pass {names}, {files} or a loaded model (zoo.load)")
    if weights is None and registry.is_weights_file(given):
        given, weights = family, given
    spec = registry.get_spec(str(given))
    if spec.family != family:
        raise UsageError(f"{role} {given} is a {spec.task} model: pass {names} or its checkpoint")
    holds = getattr(registry.family(spec), "holds", None)  # other tasks' YOLOv8 heads are refused when built
    if holds is not None and registry.is_weights_file(weights) and not holds(*registry.named_header(spec, weights)):
        raise UsageError(f"{role} {weights} holds no {label} model: pass {files}")  # told before a tensor is read
    with options_named(weights=weights_option):  # the Hub's 'pass --weights PATH': annotate has --det-weights
        read = registry.read_weights(spec, weights)
    fitted = registry.fitted_spec(spec, read)
    if fitted.task != spec.task:  # e.g. a YOLO segmentation or pose checkpoint where a detector goes
        raise ZooError(f"{role} {weights or given} holds a YOLO {fitted.task} model ({fitted.variant}): pass {files}")
    return registry.build(spec, read, dtype)


def load_detector(det_model, weights=None, dtype: str = "float32"):
    """A YOLO detector (YOLOv8, YOLO11) from a registered name, a checkpoint path (a trained best.pt) or a
    loaded model."""
    from zoo import registry
    from zoo.models.yolov8 import DetectionModel

    return load_model(det_model, weights, dtype, "detector", "yolov8", "YOLO", DetectionModel,
                      f"a YOLO detector ({', '.join(registry.list_models(task='detect'))})",
                      "a YOLO detection checkpoint (yolo11n.pt, yolov8n.pt, a trained best.pt)", "det_weights")


def load_sam(sam_model, weights=None, dtype: str = "float32"):
    """MobileSAM from its name, a checkpoint path or a loaded model."""
    from zoo.models.mobilesam import Sam

    return load_model(sam_model, weights, dtype, "segmenter", "mobilesam", "MobileSAM", Sam, "mobilesam",
                      "a MobileSAM checkpoint", "sam_weights")


def auto_annotate(data, det_model="yolov8n", sam_model="mobilesam", device: str | None = None, conf: float = 0.25,
                  iou: float = 0.45, imgsz=640, max_det: int = 300, classes=None, output_dir=None,
                  save_masks: bool = False, save_overlay: bool = False, overwrite: bool = False,
                  det_weights=None, sam_weights=None, dtype: str = "float32", recursive: bool = False,
                  verbose: bool = True, progress: bool = False) -> list[Annotation]:
    """Label ``data`` (anything zoo.sources opens: a path, folder, glob, list file, video, numpy arrays
    (BGR, as ultralytics) or PIL images, or a list of them) with YOLO-segmentation polygons.

    Parameters and defaults as ultralytics' ``auto_annotate`` (``output_dir`` defaults to
    ``<data>_auto_annotate_labels`` beside a single input path); ``classes``: ids and/or names;
    ``det_weights``/``sam_weights``: checkpoints (or ``synthetic:SEED``) for models given by name;
    ``imgsz`` None: the detector's training size. -> one Annotation per image written (masks
    dropped). An image that cannot be read is one ``error:`` line and is skipped (a single
    input's problem is raised); ``verbose``: a line per image and the notes on stderr.
    """
    return AnnotationRun(data, det_model, sam_model, device, conf, iou, imgsz, max_det, classes, output_dir,
                         save_masks, save_overlay, overwrite, det_weights, sam_weights, dtype, recursive,
                         verbose, progress).run()


class AnnotationRun:
    """auto_annotate in two steps, for the CLI: checks and models now, ``run()`` later; ``pipeline``
    (zoo.pipeline) then holds the counts and the exit code."""

    def __init__(self, data, det_model, sam_model, device, conf, iou, imgsz, max_det, classes, output_dir,
                 save_masks, save_overlay, overwrite, det_weights, sam_weights, dtype, recursive, verbose, progress):
        from zoo import devices
        from zoo.models.yolov8 import check_imgsz, check_thresholds

        require("cv2", "annotate (its label polygons are OpenCV's contours)")  # before any work
        check_thresholds(conf, iou, max_det)
        imgsz = None if imgsz is None else check_imgsz(imgsz)
        refuse_empty(output_dir, "output_dir", "pass a folder, or output_dir=None for <data>_auto_annotate_labels")
        self.outputs = Outputs(Path(output_dir) if output_dir is not None else default_output_dir(data), save_masks,
                               save_overlay, overwrite)
        self.source = open_source(data, recursive=recursive, bgr=True, outputs=[self.outputs.folder])
        names = planned_names(self.source)
        files = [item.path for item in self.source] if names is not None and self.source.kind != "arrays" else []
        models = [m for m in (det_model, sam_model, det_weights, sam_weights) if isinstance(m, (str, Path))]
        self.outputs.check(names, Inputs([*(data if isinstance(data, (list, tuple)) else [data]), *files, *models],
                                          outputs=[self.outputs.folder]))
        devices.use(device)
        self.detector = load_detector(det_model, det_weights, dtype)
        self.detector.class_ids(classes)  # unknown class names fail now, not per image
        self.sam = load_sam(sam_model, sam_weights, dtype)
        self.options = {"conf": conf, "iou": iou, "imgsz": imgsz, "max_det": max_det, "classes": classes}
        self.verbose, self.progress = verbose, progress
        self.pipeline = None

    def run(self) -> list[Annotation]:
        from .pipeline import Pipeline

        self.outputs.make()
        annotations = []
        names = self.detector.names

        def process(batch):
            for ready in batch:
                item = ready.item
                annotation = annotate_image(self.detector, self.sam, ready.data, item, **self.options,
                                            keep_masks=self.outputs.save_masks or self.outputs.save_overlay)
                annotation.files = self.outputs.write(annotation, ready.data, names)
                annotation.masks = None  # written: a run over many images keeps polygons, not pixels
                annotations.append(annotation)
                if self.verbose:
                    classes, counts = np.unique(annotation.classes, return_counts=True)
                    found = ", ".join(f"{n} {names[int(c)]}" for c, n in zip(classes, counts)) or "no detections"
                    tqdm.write(f"{item.path}: {found} -> {annotation.files[-1]}", file=sys.stderr)
                    for note in annotation.notes:
                        tqdm.write(f"note: {item.path}: {note}", file=sys.stderr)

        self.pipeline = Pipeline(self.source, desc="annotate", progress=self.progress).run(process)
        return annotations
