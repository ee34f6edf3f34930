"""YOLOv8 prediction as ultralytics' predictor does it: sources in, one Results per image or frame out.

``predict(model, source)``: ``source`` is anything zoo.sources opens (a path, folder, glob,
.txt/.csv list, video, camera index, numpy array, PIL image or a list of them); numpy arrays
are BGR as in ultralytics. ``stream=True`` returns a generator that holds one batch at a
time (memory stays flat over any number of video frames); otherwise a list.
``predict_batch`` is the step both use, and the CLI's pipeline calls it directly.

The keywords are ultralytics' predict arguments with their meaning (PREDICT_OPTIONS); others are an
error naming the ones accepted. Outputs (``save``, ``save_txt``, ``save_conf``, ``save_crop``) go to
the model's run folder, written as results come: as ultralytics' predictor, one folder for all calls of a model
(default runs/<task>/predict, or predict2, ... when taken: runs/detect, runs/segment, runs/pose), a new one when a
call passes ``project``/``name`` or another ``device`` (run_folder).
"""
from __future__ import annotations

import inspect
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator

import mlx.core as mx
import numpy as np
from PIL import Image

from zoo import devices
from zoo.concurrency import serialized
from zoo.errors import ZooError
from zoo.files import Inputs, WrittenFiles, increment_path, refuse_empty
from zoo.images import IMAGE_SUFFIXES, image_size
from zoo.instances import process_mask, process_mask_native, scale_coords
from zoo.results import ResultFiles, Results, kept_frame
from zoo.sources import Chain, Item, Source, input_paths, open_source

from .ops import check_imgsz, check_thresholds, letterbox_batch, non_max_suppression, scale_boxes


def predict(model, source, stream: bool = False, conf: float = 0.25, iou: float = 0.7, classes=None,
            agnostic_nms: bool = False, max_det: int = 300, imgsz=None, batch: int | None = None,
            vid_stride: int = 1, stream_buffer: bool = False, verbose: bool = False, save: bool = False,
            save_txt: bool = False, save_conf: bool = False, save_crop: bool = False, project=None, name=None,
            exist_ok: bool = False, device=None, half: bool = False, retina_masks: bool = False,
            line_width: float | None = None, show_labels: bool = True, show_conf: bool = True, show_boxes: bool = True):
    """Detect objects in ``source``; a list of Results, or a generator of them with ``stream=True``.

    As ultralytics' predict: scores strictly above ``conf``; class-aware NMS at ``iou``
    (class-agnostic with ``agnostic_nms``); ``classes`` filters by names and/or ids;
    ``imgsz`` defaults to the size the checkpoint was trained at. Images of one batch
    are letterboxed to the smallest multiple of 32 around ``imgsz`` when they share one
    size, to ``imgsz`` x ``imgsz`` when sizes differ. ``batch``: images per forward
    pass (default: a list given in memory is one batch, other sources go one at a time);
    ``vid_stride``: keep every n-th video frame. ``stream_buffer``: a camera or stream keeps every frame (default:
    the newest each time, as ultralytics). ``verbose``: one line per image on stderr
    (ultralytics prints by default; here it is asked for). ``save``/``save_txt``/``save_conf``/
    ``save_crop``: write as ``yolo predict`` does into the model's run folder, ``project/name`` (run_folder: the
    one of the model's earlier calls unless ``project``/``name`` are passed, whose outputs a call writes over, as
    ultralytics'; ResultFiles; ``exist_ok`` reuses a taken folder and replaces what is there); each Results'
    ``save_dir`` says where, as an absolute path, as ultralytics' (also when nothing is saved: the folder a save
    would use, not created).
    ``device``: the process's device (zoo.devices: one per process; 'cuda', 'cuda:0', 0, 'mps' mean
    its GPU). ``half``: the model's dtype decides (zoo.load(..., dtype='float16')); half=True on a
    float32 model says so in one line and computes in float32, as ultralytics does on a CPU.
    ``retina_masks`` (segmentation models): masks at the image's size instead of the letterboxed input's.
    ``line_width``, ``show_labels``, ``show_conf``, ``show_boxes``: how ``save`` draws (plot's ``line_width``,
    ``labels``, ``conf``, ``boxes``).
    """
    options = prediction_options(model, conf, iou, classes, agnostic_nms, max_det, imgsz, retina_masks)
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ZooError(f"batch={batch!r} must be a positive integer, e.g. batch=8")
    check_device(device)
    if half and model.dtype == mx.float32:
        print("note: half=True: this model computes in float32; load it with zoo.load(..., dtype='float16') "
              "for half precision", file=sys.stderr)
    opened = open_inputs(source, vid_stride, stream_buffer)
    listed = isinstance(source, (list, tuple))
    size = batch or (opened.total if listed else 1)
    if listed and size < opened.total:  # ultralytics' one batch of the whole list, letterboxed as one
        options["same_size"] = list_shares_one_size(source)
    for what, value, default in (("project", project, f"runs/{model.task}"), ("name", name, "predict")):
        if save or save_txt or save_crop:
            refuse_empty(value, what, f"pass a folder, or {what}=None for {default}")
    run = model.predictor = run_folder(model, project, name, exist_ok, device)
    run.skipped = []
    out = run.save_dir
    files = None
    if save or save_txt or save_crop:
        files = ResultFiles(out, save=save, save_txt=save_txt, save_conf=save_conf, save_crop=save_crop,
                            overwrite=exist_ok, vid_stride=vid_stride, written=run.written, image_suffix=".jpg",
                            plot_options={"line_width": line_width, "labels": show_labels, "conf": show_conf,
                                          "boxes": show_boxes},
                            # the run folder's own files are no inputs (every file read is listed): a folder
                            # source holding runs/ (predict('.') twice) writes over its earlier outputs there
                            inputs=Inputs([*(source if isinstance(source, (list, tuple)) else [source]),
                                           *input_paths(opened)], outputs=[out]))
    # a list's paths as given, by the path its items carry (Path("./a.jpg") and "a.jpg" are both a.jpg)
    as_given = {str(Path(s)): os.fspath(s) for s in source if isinstance(s, (str, Path))} if listed else {}
    results = predictions(model, opened, size, options, files, verbose, vid_stride, str(out.resolve()), as_given,
                          run.skipped)
    return results if stream else list(results)


# predict's keyword arguments besides source, ultralytics' names; those that are True or False
PREDICT_OPTIONS = tuple(inspect.signature(predict).parameters)[2:]
BOOL_PREDICT_OPTIONS = tuple(key for key, p in inspect.signature(predict).parameters.items()
                             if isinstance(p.default, bool))


class Predictor:
    """What of ultralytics' ``model.predictor`` predict keeps from call to call: its run folder ``save_dir`` and
    ``device``, and the outputs the calls wrote there (``written``), which later calls may write over as
    ultralytics' do (and nothing else there); ``skipped``: the inputs the latest call could not read (readable)."""

    def __init__(self, save_dir: Path, device):
        self.save_dir, self.device = save_dir, device
        self.written = WrittenFiles()
        self.skipped: list[str] = []


def run_folder(model, project, name, exist_ok: bool, device) -> Predictor:
    """The model's predictor, as ultralytics' model.predict keeps it: made by the first call, again by a call with
    another ``device``, and given a new run folder by one that passes ``project`` or ``name``; every other call
    saves into the same folder (runs/detect/predict for the first, predict2 ... when taken). The folder is named
    whether or not anything is saved (ultralytics' Results carry it either way), made only when written to."""
    predictor = model.predictor
    if predictor is not None and (device is None or device == predictor.device) and project is None and name is None:
        return predictor
    folder = Path(project or f"runs/{model.task}") / (name or "predict")
    if not folder.name and folder.exists() and not exist_ok:  # '.' or '/': no name to number as predict2
        raise ZooError(f"project={project!r}, name={name!r} is the folder {folder.absolute()}, which exists and has "
                       "no name to number for a new run folder: pass exist_ok=True to save into it, or name=NEW")
    save_dir = increment_path(folder, exist_ok=exist_ok)
    # absolute, as ultralytics' (its runs_dir is): a later call after os.chdir saves into this folder, not into a
    # runs/detect/predict of the new current folder (another session's, whose outputs it mixed with its own)
    return Predictor(save_dir.absolute(), predictor.device if device is None and predictor is not None else device)


def predictions(model, opened: Source, size: int, options: dict, files: ResultFiles | None, verbose: bool,
                vid_stride: int, save_dir: str, as_given: dict[str, str] | None = None, skipped: list | None = None):
    """The Results of ``opened``'s items, ``size`` a forward pass, each with the run folder ``save_dir``, written
    and logged (``verbose``; video frames numbered by ``vid_stride``) as they come. An image file a list named
    (``as_given``) keeps that path, as ultralytics opens a list's files with PIL, whose ``filename`` it takes.
    ``skipped``: where the items that could not be read are noted (readable)."""
    complete = False
    try:
        for pairs in batched(readable(opened, skipped), size):
            items = [item for item, _ in pairs]
            for item, r in zip(items, predict_batch(model, [rgb for _, rgb in pairs], items, **options)):
                r.save_dir = save_dir
                if item.frame is None and as_given and item.path in as_given:
                    r.path = as_given[item.path]
                if files is not None:
                    files.write(r, item)
                if verbose:
                    print(log_line(item, r, vid_stride), file=sys.stderr)
                yield r
        complete = True
    finally:
        if files is not None:
            files.close(complete)


def readable(source: Source, skipped: list | None = None) -> Iterator[tuple[Item, np.ndarray]]:
    """Each item with its pixels. A bad one (a file that is no image, a video that breaks off) is one
    ``warning:`` line on stderr and skipped (and noted in ``skipped``), as ultralytics skips an image it cannot
    read, so a loop over a folder goes on; the only item of a source raises its error (the call has nothing else
    to do)."""
    for item in source:
        try:
            yield item, item.load()
        except ZooError as e:
            if source.total == 1:
                raise
            frame = "" if item.frame is None else f" frame {item.frame}"
            where = "" if item.path in str(e) else f"{item.path}{frame}: "
            print(f"warning: skipped: {where}{e}", file=sys.stderr)
            if skipped is not None:
                skipped.append(f"{where}{e}")


def log_line(item: Item, result: Results, vid_stride: int) -> str:
    """One result as ``yolo predict`` logs it: where it came from, what was found, how long it took. A video
    frame is ``frame k/F`` as ultralytics numbers it: k counts the kept frames from 1, F of frames // vid_stride."""
    where = Path(item.path).name if item.frame is None else (
        f"{Path(item.path).name} frame {kept_frame(item.frame, vid_stride)}"
        + (f"/{item.frames // vid_stride}" if item.frames else ""))
    return f"{where}: {result.verbose()[:-2]} ({sum(result.speed.values()):.1f} ms)"


# ultralytics' device names for the one GPU MLX uses ("0": the first CUDA device)
GPU_NAMES = ("gpu", "cuda", "cuda:0", "0", "mps", "mps:0")


def check_device(device) -> None:
    """``device`` as ultralytics names them, which must be the process's one device (zoo.devices.use)."""
    if device is None:
        return
    name = str(device).strip().lower()
    if name not in ("cpu", *GPU_NAMES):
        raise ZooError(f"device={device!r}: MLX runs on one device, device='cpu' or device='gpu' "
                       "('cuda', 'cuda:0', 0 and 'mps' name the GPU)")
    devices.use("cpu" if name == "cpu" else "gpu")


def open_inputs(source, vid_stride: int, stream_buffer: bool = False) -> Source:
    """zoo.sources' Source, numpy arrays as BGR; a list may mix paths with in-memory images (as ultralytics').
    predict takes no ``recursive`` (ultralytics' has none): a folder of sub-folders alone says to pass a glob."""
    if isinstance(source, (list, tuple)) and len({isinstance(s, (str, Path)) for s in source}) > 1:
        return Chain([open_source(s, recursive=None, vid_stride=vid_stride, bgr=True, stream_buffer=stream_buffer)
                      for s in source])
    return open_source(source, recursive=None, vid_stride=vid_stride, bgr=True, stream_buffer=stream_buffer)


def prediction_options(model, conf, iou, classes, agnostic_nms, max_det, imgsz, retina_masks: bool = False) -> dict:
    """predict_batch's keyword arguments, checked once (thresholds, classes by name, imgsz)."""
    check_thresholds(conf, iou, max_det)
    return {"conf": conf, "iou": iou, "classes": model.class_ids(classes), "agnostic_nms": agnostic_nms,
            "max_det": max_det, "shape": check_imgsz(model.imgsz if imgsz is None else imgsz),
            "retina_masks": bool(retina_masks)}


def list_shares_one_size(source: list | tuple) -> bool | None:
    """Whether the images of a list share one (height, width), as ultralytics' one batch of a list decides its
    letterbox (images of one size: the minimal rectangle; else imgsz square), from the arrays' shapes and the
    files' headers; None (each forward pass decides) when the list holds more than images (folders, videos,
    lists: ultralytics takes none in a list) or a file whose header cannot be read (it is skipped, with a warning)."""
    sizes = set()
    for s in source:
        if isinstance(s, np.ndarray):
            sizes.add(s.shape[:2])
        elif isinstance(s, Image.Image):
            sizes.add((s.height, s.width))
        elif Path(s).suffix.lower() in IMAGE_SUFFIXES and Path(s).is_file():
            try:
                sizes.add(image_size(s))
            except ZooError:
                return None
        else:
            return None
    return len(sizes) == 1


def batched(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def detected_objects(model, det: np.ndarray, frame: tuple[int, int], image_shape: tuple[int, int],
                     protos: np.ndarray | None, retina_masks: bool) -> dict:
    """Results' boxes (and masks or keypoints) of one image from its NMS rows (x1 y1 x2 y2 conf cls, then
    mask coefficients or keypoints) in the letterboxed ``frame``, as ultralytics' predictors make them:
    masks from the input-size boxes (or, ``retina_masks``, the image's), detections whose mask is empty
    dropped; keypoints mapped to the image by scale_coords."""
    boxes = scale_boxes(frame, det[:, :4], image_shape)
    objects = {"boxes": np.concatenate([boxes, det[:, 4:6]], axis=1)}
    if model.task == "segment" and len(det):
        masks = (process_mask_native(protos, det[:, 6:], boxes, image_shape) if retina_masks
                 else process_mask(protos, det[:, 6:], det[:, :4], frame))
        keep = np.flatnonzero(masks.any(axis=(1, 2)))
        for i, k in enumerate(keep):  # the kept masks moved to the front in place: no second (N, H, W) array
            if i != k:
                masks[i] = masks[k]
        objects = {"boxes": objects["boxes"][keep], "masks": masks[:len(keep)]}
    elif model.task == "pose":
        objects["keypoints"] = scale_coords(frame, det[:, 6:].reshape(len(det), *model.head.kpt_shape), image_shape)
    return objects


@serialized()
def predict_batch(model, images: list[np.ndarray], items: list[Item | None], conf: float, iou: float,
                  classes: list[int] | None, agnostic_nms: bool, max_det: int, shape: tuple[int, int],
                  retina_masks: bool = False, same_size: bool | None = None) -> list[Results]:
    """One forward pass over ``images`` ((H, W, 3) uint8 RGB) -> one Results per image; ``items``
    give each result its path and frame number (None for a bare array). Segmentation and pose models'
    Results carry masks / keypoints, post-processed as ultralytics' predictors do (zoo.instances).
    ``same_size``: letterbox_batch's ``same``, for a part of a list ultralytics letterboxes as one batch."""
    start = time.perf_counter()
    batch = letterbox_batch(images, shape, same_size)
    x = mx.array(batch.astype(np.float32) / np.float32(255)).astype(model.dtype)
    prepared = time.perf_counter()
    out = model(x)
    mx.eval(out)
    pred, protos = out if isinstance(out, tuple) else (out, None)
    inferred = time.perf_counter()
    results = []
    for i, (image, item) in enumerate(zip(images, items)):
        det = non_max_suppression(pred[i], conf, iou, classes, agnostic_nms, max_det, nc=model.nc)
        path, frame = (item.result_path, item.frame) if item is not None else (None, None)
        objects = detected_objects(model, det, batch.shape[1:3], image.shape[:2],
                                   None if protos is None else np.array(protos[i]), retina_masks)
        # orig_img BGR, its own contiguous writable copy as ultralytics': cv2 and supervision draw on it in place
        results.append(Results(np.ascontiguousarray(image[..., ::-1]), path, model.names, frame=frame, **objects))
    done = time.perf_counter()
    per_image = 1000.0 / len(results)
    speed = {"preprocess": (prepared - start) * per_image, "inference": (inferred - prepared) * per_image,
             "postprocess": (done - inferred) * per_image}
    for r in results:
        r.speed = dict(speed)
    return results
