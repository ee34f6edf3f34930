"""Results shaped like ultralytics' (``engine/results.py``): ``Results`` per image, its ``Boxes``.

    r = det.predict("bus.jpg")[0]
    r.boxes.xyxy, r.boxes.xywh, r.boxes.xyxyn, r.boxes.xywhn, r.boxes.conf, r.boxes.cls, r.boxes.data
    r.boxes.xyxy.cpu().numpy(), r.boxes.cls.int().tolist(), [(int(b.cls), float(b.conf)) for b in r.boxes]
    r.names                    # {0: 'person', ...}: the checkpoint's own classes
    r.plot()                   # (H, W, 3) BGR uint8, as ultralytics (cv2's order)
    r.save("out.jpg"); r.save_txt("out.txt", save_conf=True); r.save_crop("crops")
    r.summary(), r.to_json(), r.to_csv(), r.to_df()   # rows {"name", "class", "confidence", "box": {x1 y1 x2 y2}}

Values are TensorArrays: numpy arrays that answer torch Tensor's methods, so scripts written for
ultralytics run without torch. ``orig_img`` is BGR as in ultralytics; images given as paths or PIL
images are RGB, numpy arrays BGR (ultralytics' convention). Files are written whole (temporary name,
then renamed). As ultralytics: ``save(filename)`` and ``plot(save=True, filename=...)`` replace the file
they name, ``save_txt`` appends to it; but never the image the result came from, and the default
``results_<name>`` replaces nothing unless ``overwrite=True``.
"""
from __future__ import annotations

import colorsys
import csv
import io
import math
import os
import re
from collections import Counter
from functools import cached_property
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from zoo.errors import ZooError
from zoo.extras import require
from zoo.files import (Inputs, WrittenFiles, check_new_file, image_format, json_text, make_output_folder,
                       refuse_empty, refuse_inputs, remove_created_folders, writable_format, write_atomic, write_text)
from zoo.instances import coco_rle, masks2segments, scale_coords, scale_masks, scaled_extent

# 20 hues a golden-ratio step apart: neighbouring class ids get clearly different colours.
PALETTE = [
    tuple(round(255 * c) for c in colorsys.hsv_to_rgb((i * 0.618034) % 1.0, 0.85, 0.95)) for i in range(20)
]
CROP_GAIN, CROP_PAD = 1.02, 10  # ultralytics' save_one_box: each crop a little larger than its box


def class_colour(class_id: int) -> tuple[int, int, int]:
    return PALETTE[class_id % len(PALETTE)]


MASK_ALPHA = 0.5  # how much of its colour covers a masked pixel


BLEND_ROWS_BYTES = 32 << 20  # float32 image rows blended at a time


def blend_masks(rgb: np.ndarray, masks, colours) -> np.ndarray:
    """(H, W, 3) uint8 with each (H, W) bool mask (or MaskBands) in its colour over the image, in order (the last
    on top).

    In float32, rounded once, a band of rows at a time: a float32 copy of a whole 8000x8000 photo
    alone is 768 MB."""
    masks, colours = list(masks), [np.array(colour, np.float32) for colour in colours]
    out = np.empty(rgb.shape, np.uint8)
    rows = max(1, BLEND_ROWS_BYTES // (4 * rgb[0].size))
    for start in range(0, rgb.shape[0], rows):
        band = slice(start, start + rows)
        blended = rgb[band].astype(np.float32)
        for mask, colour in zip(masks, colours):
            inside = np.asarray(mask[band], bool)
            blended[inside] = (1 - MASK_ALPHA) * blended[inside] + MASK_ALPHA * colour
        out[band] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return out


# COCO's person keypoints: 0-4 head (nose, eyes, ears), 5-10 arms (shoulders, elbows, wrists), 11-16 legs
# (hips, knees, ankles); the skeleton's limbs as pairs of keypoint indexes, coloured by body part
COCO_KEYPOINTS = 17
SKELETON = ((15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8), (7, 9),
            (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))
PART_COLOURS = {"head": (0, 200, 0), "arms": (255, 140, 0), "legs": (50, 140, 255), "torso": (230, 60, 230)}
KEYPOINT_PARTS = ("head",) * 5 + ("arms",) * 6 + ("legs",) * 6
KEYPOINT_CONF = 0.25  # ultralytics draws the keypoints scoring at least this


def limb_colour(a: int, b: int) -> tuple[int, int, int]:
    part = KEYPOINT_PARTS[a] if KEYPOINT_PARTS[a] == KEYPOINT_PARTS[b] else "torso"
    return PART_COLOURS[part]


def draw_keypoints(draw: ImageDraw.ImageDraw, points: np.ndarray, shape: tuple[int, int], radius: int,
                   limb_width: int, colour: tuple[int, int, int] | None = None) -> None:
    """One detection's (K, 2 or 3) keypoints: the skeleton's limbs (17 keypoints, ``limb_width`` > 0), then a
    dot per keypoint; as ultralytics, a keypoint scoring under 0.25 or lying on the image's left or top edge
    (where scale_coords clips what falls outside) is left out."""
    h, w = shape
    shown = [(p[2] >= KEYPOINT_CONF if len(p) == 3 else True) and 0 < p[0] < w and 0 < p[1] < h
             for p in points.tolist()]
    if limb_width and len(points) == COCO_KEYPOINTS:
        for a, b in SKELETON:
            if shown[a] and shown[b]:
                draw.line([tuple(points[a, :2].tolist()), tuple(points[b, :2].tolist())],
                          fill=colour or limb_colour(a, b), width=limb_width)
    for i, (x, y) in enumerate(points[:, :2].tolist()):
        if shown[i]:
            dot = colour or (PART_COLOURS[KEYPOINT_PARTS[i]] if len(points) == COCO_KEYPOINTS else class_colour(i))
            draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=dot)


def text_colour(background: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black on light colours, white on dark ones (ITU-R BT.601 luma)."""
    r, g, b = background
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


def check_new(path: Path, overwrite: bool, image_path: str | None) -> Path:
    """The file a save writes, its folder made: never the image the result came from, an existing file
    only with ``overwrite``."""
    refuse_inputs(path, [image_path], "output")
    check_new_file(path, "output", overwrite)  # --overwrite in a command line, overwrite=True from Python
    make_output_folder(path.parent, f"output {path}: its folder")
    return path


# torch's Tensor.to() devices: the values stay in host memory whichever is named (MLX computes on
# memory the host reads), so a script written for a GPU runs unchanged
DEVICE_NAMES = ("cpu", "cuda", "mps", "gpu")

# in JSON text: a string (kept as it is), or a number Python writes with a negative exponent (1.5e-05; repr's
# exponent form starts below 1e-4): sign, first digit, the digits after the point, the exponent
STRING_OR_SMALL_NUMBER = re.compile(r'("(?:[^"\\]|\\.)*")|(-?)(\d)(?:\.(\d+))?e-(\d+)')


def polars_number(found: re.Match) -> str:
    """A number of Python's JSON text as polars' write_json writes it (the same digits): from 1e-5 to 1e-4 as
    decimals (0.000015 for 1.5e-05), smaller ones with an exponent not padded (1e-6 for 1e-06); a string as it is."""
    if found.group(1):
        return found.group(1)
    sign, first, rest, exponent = found.group(2), found.group(3), found.group(4) or "", int(found.group(5))
    if exponent == 5:
        return f"{sign}0.0000{first}{rest}"
    return f"{sign}{first}{'.' * bool(rest)}{rest}e-{exponent}"


class TorchSize(int):
    """numpy's ``size``, the number of elements (an int), that torch code may also call as torch's
    ``Tensor.size``: ``x.size()`` is the shape, ``x.size(0)`` one dimension's length."""

    def __new__(cls, count: int, shape: tuple[int, ...]):
        size = super().__new__(cls, count)
        size.shape = shape
        return size

    def __call__(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]


class TensorArray(np.ndarray):
    """A numpy array that also answers torch Tensor's methods, so code written for ultralytics' Results
    runs without torch: ``.cpu() .numpy() .int() .long() .float() .half() .double() .bool() .byte() .to() .cuda()
    .clone() .detach() .numel() .dim() .unique() .size(dim)`` (``.size`` is numpy's int, callable: TorchSize), and
    ``int()``/``float()`` of any one-element value (a box's ``cls`` has shape (1,), as upstream). One element
    indexed or iterated is a numpy scalar (hashable, so ``names[c]`` works; torch gives a 0-d tensor): ``.item()``,
    ``int()``, ``float()`` as torch's. ``.numpy()`` returns a plain ndarray (a view). Everything else is numpy's
    (``.view``).
    """

    def __int__(self) -> int:
        return int(self.item())  # numpy >= 2.4 refuses int() of a (1,) array; torch accepts any one-element tensor

    def __float__(self) -> float:
        return float(self.item())

    def __format__(self, spec: str) -> str:
        """f"{box.conf:.2f}" formats the one value (numpy refuses a format for a (1,) array)."""
        return format(self.item(), spec) if spec and self.size == 1 else super().__format__(spec)

    def cpu(self) -> TensorArray:
        return self

    def cuda(self, device=None) -> TensorArray:
        """The same values: they stay in host memory (DEVICE_NAMES)."""
        return self

    def detach(self) -> TensorArray:
        return self

    def numpy(self) -> np.ndarray:
        return self.view(np.ndarray)

    def clone(self) -> TensorArray:
        return self.copy()

    def int(self) -> TensorArray:
        return self.astype(np.int32)

    def long(self) -> TensorArray:
        return self.astype(np.int64)

    def float(self) -> TensorArray:
        return self.astype(np.float32)

    def half(self) -> TensorArray:
        return self.astype(np.float16)

    def double(self) -> TensorArray:
        return self.astype(np.float64)

    def bool(self) -> TensorArray:
        return self.astype(np.bool_)

    def byte(self) -> TensorArray:
        return self.astype(np.uint8)

    @property
    def size(self) -> TorchSize:
        return TorchSize(np.ndarray.size.__get__(self), self.shape)

    def numel(self) -> int:
        return int(self.size)

    def dim(self) -> int:
        return self.ndim

    def unique(self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
               dim: int | None = None):
        """torch's ``unique``, as ultralytics' own verbose() counts classes (``for c in boxes.cls.unique()``):
        the distinct values, ascending (torch sorts on the CPU whatever ``sorted`` says), then the inverse
        indices and the counts when asked."""
        values, inverse, counts = (np.asarray(part).view(TensorArray) for part in np.unique(
            self, return_inverse=True, return_counts=True, axis=dim))  # indices and counts int64, as torch's
        if dim is None:
            inverse = inverse.reshape(self.shape)
        extra = [part for part, asked in ((inverse, return_inverse), (counts, return_counts)) if asked]
        return (values, *extra) if extra else values

    def to(self, *args, device=None, dtype=None, non_blocking: bool = False, copy: bool = False) -> TensorArray:
        """torch's ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(other)``: a dtype converts
        (numpy's names, torch's ``torch.float16`` by name); a device is checked and the values stay here."""
        for arg in args:
            if isinstance(arg, np.ndarray):
                dtype = arg.dtype
            elif is_device(arg):
                device = arg
            else:
                dtype = arg
        if device is not None and not is_device(device):
            raise ZooError(f"to(device={device!r}): not a device; use one of {', '.join(DEVICE_NAMES)}")
        out = self if dtype is None else self.astype(numpy_dtype(dtype))
        return out.copy() if copy and out is self else out


def is_device(value) -> bool:
    """A device as torch names it: 'cpu', 'cuda:0', 'mps', an index, a torch.device (by its name)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    name = str(getattr(value, "type", value)) if type(value).__name__ == "device" else value
    return isinstance(name, str) and name.split(":")[0].lower() in DEVICE_NAMES


def numpy_dtype(dtype) -> np.dtype:
    try:
        return np.dtype(str(dtype).removeprefix("torch.") if not isinstance(dtype, (type, np.dtype)) else dtype)
    except TypeError:
        raise ZooError(f"to({dtype!r}): numpy has no such dtype; use float32, float16, float64 or an integer type") from None


def as_tensor(data) -> TensorArray:
    """``data`` (an array, list, mx.array) as a TensorArray; integers become float32 as ultralytics' boxes are."""
    data = np.asarray(data)
    return (data if np.issubdtype(data.dtype, np.floating) else data.astype(np.float32)).view(TensorArray)


def attribute_listing(obj) -> str:
    """ultralytics' ``print(r.boxes)`` (its SimpleClass's ``str``): the object's class and each public value,
    ``name: repr``, in name order; a Boxes, Masks ... inside it by its class name alone."""
    lines = []
    for name in dir(obj):
        value = None if name.startswith("_") else getattr(obj, name)
        if name.startswith("_") or callable(value):
            continue
        shown = f"{type(value).__module__}.{type(value).__name__} object" \
            if isinstance(value, (BaseTensor, Results)) else repr(value)
        lines.append(f"{name}: {shown}")
    return f"{type(obj).__module__}.{type(obj).__name__} object with attributes:\n\n" + "\n".join(lines)


class BaseTensor:
    """ultralytics' BaseTensor: ``data`` (a TensorArray) of one image whose size is ``orig_shape`` (height, width);
    ``len()``, indexing (int, slice, mask, index array: the same class over the rows selected), iteration,
    ``shape``, and ``cpu() numpy() cuda() to()`` returning the same class. Boxes, and the masks and keypoints of
    the other tasks, derive from it."""

    def __init__(self, data, orig_shape: tuple[int, int]):
        self.data = as_tensor(data)
        self.orig_shape = tuple(orig_shape[:2]) if orig_shape is not None else None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index):
        return self.__class__(self.data[index], self.orig_shape)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def cpu(self):
        return self

    def numpy(self):
        return self

    def cuda(self, device=None):
        return self

    def to(self, *args, **kwargs):
        return self.__class__(self.data.to(*args, **kwargs), self.orig_shape)

    def __str__(self) -> str:
        return attribute_listing(self)


class Boxes(BaseTensor):
    """Detection boxes of one image: ``data`` (N, 6) rows x1, y1, x2, y2, conf, cls in pixels, or (N, 7)
    x1, y1, x2, y2, track id, conf, cls for tracked boxes (``is_track``; ``id`` is None otherwise), as ultralytics.

    Every value is a TensorArray: ``r.boxes.xyxy.cpu().numpy()``, ``r.boxes.cls.int().tolist()``,
    ``for b in r.boxes: int(b.cls), float(b.conf)`` as with ultralytics.
    """

    def __init__(self, data, orig_shape: tuple[int, int]):
        super().__init__(data, orig_shape)
        if self.data.ndim == 1:
            self.data = self.data[None, :]
        if self.data.ndim != 2 or self.data.shape[1] not in (6, 7):
            raise ZooError(f"boxes have shape {self.data.shape}: expected (N, 6) rows x1, y1, x2, y2, conf, cls "
                           "or (N, 7) rows x1, y1, x2, y2, track id, conf, cls")

    @property
    def is_track(self) -> bool:
        return self.data.shape[1] == 7

    @property
    def id(self) -> TensorArray | None:
        """Track ids (floats, as ultralytics keeps them) of tracked boxes, else None."""
        return self.data[:, 4] if self.is_track else None

    @property
    def xyxy(self) -> TensorArray:
        return self.data[:, :4]

    @property
    def conf(self) -> TensorArray:
        return self.data[:, -2]

    @property
    def cls(self) -> TensorArray:
        """Class ids as floats, as ultralytics keeps them (``int(b.cls)``, ``.int()`` for indexing)."""
        return self.data[:, -1]

    @property
    def rows(self) -> np.ndarray:
        """(N, 6) x1, y1, x2, y2, conf, cls without the track ids: what the text and drawing methods read."""
        return self.data if not self.is_track else np.delete(self.data, 4, axis=1)

    @property
    def xywh(self) -> TensorArray:
        """Box centre x, y, width, height in pixels."""
        x1, y1, x2, y2 = self.xyxy.T
        return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=1).view(TensorArray)

    @property
    def xyxyn(self) -> TensorArray:
        return self.xyxy / self._scale

    @property
    def xywhn(self) -> TensorArray:
        return self.xywh / self._scale

    @property
    def _scale(self) -> np.ndarray:
        h, w = self.orig_shape
        return np.array([w, h, w, h], self.data.dtype)

    def __repr__(self) -> str:
        return f"Boxes({len(self)} boxes, orig_shape={self.orig_shape})"


class Masks(BaseTensor):
    """Instance masks of one image, as ultralytics': ``data`` (N, H, W) uint8 0/1, at the letterboxed
    input's size (predict's default) or the image's (``retina_masks=True``); ``xy`` / ``xyn``: each mask's
    polygon (K, 2) in the image's pixels / 0-1 (zoo.instances.masks2segments, then scale_coords)."""

    def __init__(self, data, orig_shape: tuple[int, int]):
        data = np.asarray(data)
        data = data[None] if data.ndim == 2 else data
        if data.ndim != 3:
            raise ZooError(f"masks have shape {data.shape}: expected (N, H, W), one 0/1 map per object")
        # uint8 would truncate a probability (0.7 -> 0): a soft mask vanished without a word
        if np.issubdtype(data.dtype, np.floating) and not ((data == 0) | (data == 1)).all():
            raise ZooError("masks hold values other than 0 and 1: masks are binary, as ultralytics' predictor "
                           "makes them; pass masks > 0.5 for probabilities (masks > 0 for logits)")
        # bool masks are read as uint8 in place: a copy doubled retina masks' memory (12 at 8000x8000: 732 MiB)
        self.data = (data.view(np.uint8) if data.dtype == bool else data.astype(np.uint8, copy=False)).view(TensorArray)
        self.orig_shape = tuple(orig_shape[:2])

    @cached_property
    def xy(self) -> list[np.ndarray]:
        return [scale_coords(self.data.shape[1:], p, self.orig_shape) for p in masks2segments(self.data)]

    @cached_property
    def xyn(self) -> list[np.ndarray]:
        return [scale_coords(self.data.shape[1:], p, self.orig_shape, normalize=True)
                for p in masks2segments(self.data)]

    def image_masks(self):
        """Each mask as (H, W) bool at the image's size, one at a time (a mask of a large image is large)."""
        for mask in self.bands():
            yield mask[:]

    def bands(self, shape: tuple[int, int] | None = None) -> list[MaskBands]:
        """Each mask at the image's size (or ``shape``: another image's, the masks' frame letterboxing it, as
        upstream maps them for plot's ``img``) as MaskBands, made a band of rows at a time where drawn."""
        return [MaskBands(mask, tuple(shape or self.orig_shape)) for mask in self.data]

    def coco_rles(self) -> list[dict]:
        """Each mask at the image's size as COCO's compressed RLE {"size": [H, W], "counts": str}."""
        return [coco_rle(mask) for mask in self.image_masks()]

    def __repr__(self) -> str:
        return f"Masks({len(self)} masks of {self.data.shape[1]}x{self.data.shape[2]}, orig_shape={self.orig_shape})"


class MaskBands:
    """One (h, w) 0/1 mask at an image's size ``shape``, made a band of rows at a time (``mask[rows]``: (rows, W)
    bool, as image_masks' rows) and only where it can be nonzero (scaled_extent): drawing 100 masks over a
    12-megapixel photo holds none of them whole (1.2 GB when made whole) and resizes only their boxes."""

    def __init__(self, mask: np.ndarray, shape: tuple[int, int]):
        self.mask, self.shape = mask, shape
        self.rows, self.columns = scaled_extent(mask, shape)

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, _ = rows.indices(self.shape[0])
        out = np.zeros((max(0, stop - start), self.shape[1]), bool)
        top, bottom = max(start, self.rows.start), min(stop, self.rows.stop)
        if top < bottom:
            out[top - start:bottom - start, self.columns] = scale_masks(
                self.mask[None], self.shape, slice(top, bottom), self.columns)[0] > 0.5
        return out


class Keypoints(BaseTensor):
    """Keypoints of one image's detections, as ultralytics': ``data`` (N, K, 2 or 3) x, y in the image's
    pixels [, visibility score]; ``xy``, ``xyn`` (0-1), ``conf`` (N, K) (None without visibility)."""

    def __init__(self, data, orig_shape: tuple[int, int]):
        super().__init__(data, orig_shape)
        if self.data.ndim == 2:
            self.data = self.data[None]
        self.has_visible = self.data.shape[-1] == 3

    @property
    def xy(self) -> TensorArray:
        return self.data[..., :2]

    @property
    def xyn(self) -> TensorArray:
        h, w = self.orig_shape
        return self.xy / np.array([w, h], self.data.dtype)

    @property
    def conf(self) -> TensorArray | None:
        return self.data[..., 2] if self.has_visible else None

    def __repr__(self) -> str:
        return f"Keypoints({len(self)} x {self.data.shape[1]} keypoints, orig_shape={self.orig_shape})"


def refuse_other_tasks(call: str, probs, obb) -> None:
    """ultralytics' ``probs``/``obb`` arguments: no classification or oriented-box model makes Results here."""
    if probs is not None or obb is not None:
        raise ZooError(f"{call}(probs=..., obb=...): no classification or oriented-box results here; "
                       "pass boxes=, masks= or keypoints=")


def refuse_file_name(normalize) -> None:
    """summary()'s text forms return their text and write no file: ``r.to_csv("out.csv")`` (pandas' to_csv takes the
    file first) gave ``normalize="out.csv"``, normalized boxes and no file, without a word."""
    if isinstance(normalize, (str, os.PathLike)):
        name = str(normalize)
        raise ZooError(f"normalize takes True or False, not {name!r}: summary(), to_json(), to_csv() and to_df() "
                       f"return what they make and write no file: Path({name!r}).write_text(r.to_csv()), or "
                       f"r.to_df().to_csv({name!r})")


def coco_id(value, what: str) -> int:
    """``value`` as COCO's integer id, a Python int (json.dump takes no numpy integer); other values are refused:
    pycocotools' loadRes matches no string or float id to its ground truth's ("Results do not correspond")."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ZooError(f"{what} takes integers (COCO's ids), not {value!r}")
    return int(value)


class Results:
    """One image's results, as ultralytics' Results: ``boxes`` for detection; ``masks``, ``probs``,
    ``keypoints``, ``obb`` are None where the task has none, as upstream.

    ``orig_img``: the image as (H, W, 3) uint8 BGR; ``path``: where it came from (a file, ``video.mp4``,
    ``image0.jpg`` for an in-memory image, as ultralytics names them); ``names``: {id: name}; ``boxes``: Boxes
    (None when not given); ``speed``: milliseconds per image for preprocess, inference and postprocess;
    ``frame``: the frame number for a video frame, else None. ``cpu() numpy() cuda() to()`` and indexing
    return a new Results over the same image with each of those attributes converted or indexed.
    """

    # the per-object attributes, in ultralytics' order: len() is the first one present's
    KEYS = ("boxes", "masks", "probs", "keypoints", "obb")

    def __init__(self, orig_img: np.ndarray, path: str | None, names: dict[int, str], boxes=None, masks=None,
                 probs=None, keypoints=None, obb=None, speed: dict | None = None, *, frame: int | None = None):
        refuse_other_tasks("Results", probs, obb)
        self.orig_img = orig_img
        self.orig_shape = tuple(orig_img.shape[:2])
        self.path = path
        self.names = names
        self.boxes = None if boxes is None else Boxes(boxes, self.orig_shape)
        self.masks = None if masks is None else Masks(masks, self.orig_shape)  # segmentation models'
        self.probs = None  # classification's
        self.keypoints = None if keypoints is None else Keypoints(keypoints, self.orig_shape)  # pose models'
        self.obb = None  # no oriented-box model here
        self.speed = dict(speed or {"preprocess": None, "inference": None, "postprocess": None})
        self.frame = frame
        self.save_dir = None

    def __len__(self) -> int:
        present = [getattr(self, key) for key in self.KEYS if getattr(self, key) is not None]
        return len(present[0]) if present else 0

    def __getitem__(self, index) -> Results:
        """The same image with only the objects ``index`` selects."""
        return self._apply("__getitem__", index)

    def __repr__(self) -> str:
        return f"Results(path={self.path!r}, {len(self)} objects, orig_shape={self.orig_shape})"

    def __str__(self) -> str:
        return attribute_listing(self)

    def new(self) -> Results:
        """The same image, path, names, speed and frame, without results."""
        result = Results(self.orig_img, self.path, self.names, speed=self.speed, frame=self.frame)
        return result

    def update(self, boxes=None, masks=None, probs=None, obb=None, keypoints=None) -> None:
        """Replace what is given, as ultralytics' ``update``: boxes (N, 6) or tracked (N, 7) rows, their
        corners clipped to the image; masks (N, H, W); keypoints (N, K, 2 or 3). No classification or
        oriented-box model here: ``probs``/``obb`` are refused."""
        refuse_other_tasks("update", probs, obb)
        if boxes is not None:
            data = as_tensor(boxes).copy()
            h, w = self.orig_shape
            data[..., [0, 2]] = data[..., [0, 2]].clip(0, w)
            data[..., [1, 3]] = data[..., [1, 3]].clip(0, h)
            self.boxes = Boxes(data, self.orig_shape)
        if masks is not None:
            self.masks = Masks(masks, self.orig_shape)
        if keypoints is not None:
            self.keypoints = Keypoints(keypoints, self.orig_shape)

    @property
    def box_rows(self) -> Boxes:
        """boxes, or no boxes when there are none: what the text and drawing methods read."""
        return self.boxes if self.boxes is not None else Boxes(np.zeros((0, 6), np.float32), self.orig_shape)

    def _apply(self, method: str, *args, **kwargs) -> Results:
        result = self.new()
        for key in self.KEYS:
            if (value := getattr(self, key)) is not None:
                setattr(result, key, getattr(value, method)(*args, **kwargs))
        return result

    def cpu(self) -> Results:
        return self._apply("cpu")

    def numpy(self) -> Results:
        return self._apply("numpy")

    def cuda(self, device=None) -> Results:
        return self._apply("cuda", device)

    def to(self, *args, **kwargs) -> Results:
        """Each value converted by TensorArray.to (a dtype converts; a device is checked, values stay in memory)."""
        return self._apply("to", *args, **kwargs)

    # -- text ------------------------------------------------------------------------------------

    def verbose(self) -> str:
        """ultralytics' log string: '2 persons, 1 bus, ' (classes in id order), or '(no detections), '."""
        if not len(self):
            return "(no detections), "
        counts = Counter(int(c) for c in self.box_rows.cls)
        return "".join(f"{n} {self.names[c]}{'s' * (n > 1)}, " for c, n in sorted(counts.items()))

    def summary(self, normalize: bool = False, decimals: int = 5) -> list[dict]:
        """One dict per box: name, class, confidence, box {x1, y1, x2, y2} (pixels, or 0-1 with ``normalize``);
        with masks its polygon's "segments" {x: [...], y: [...]}, with keypoints their "keypoints" {x, y, visible}
        (x, y only for keypoints without visibility, where ultralytics 8.3.253 raises), in their own dtype."""
        refuse_file_name(normalize)
        h, w = self.orig_shape if normalize else (1, 1)
        rows = []
        ids = self.box_rows.id
        for i, (x1, y1, x2, y2, conf, cls) in enumerate(self.box_rows.rows.tolist()):
            row = {"name": self.names[int(cls)], "class": int(cls), "confidence": round(conf, decimals),
                   "box": {"x1": round(x1 / w, decimals), "y1": round(y1 / h, decimals),
                           "x2": round(x2 / w, decimals), "y2": round(y2 / h, decimals)}}
            if ids is not None:
                row["track_id"] = int(ids[i])
            if self.masks is not None:
                polygon = self.masks.xy[i]
                row["segments"] = {"x": (polygon[:, 0] / w).round(decimals).tolist(),
                                   "y": (polygon[:, 1] / h).round(decimals).tolist()}
            if self.keypoints is not None:
                # in the keypoints' own dtype as ultralytics (and the segments above): the float32 values
                # rounded, so to_json's text is upstream's (7.9039998054504395 for 7.904 at decimals=3)
                points = self.keypoints.data[i].view(np.ndarray)
                row["keypoints"] = {"x": (points[:, 0] / w).round(decimals).tolist(),
                                    "y": (points[:, 1] / h).round(decimals).tolist(),
                                    **({"visible": points[:, 2].round(decimals).tolist()}
                                       if self.keypoints.has_visible else {})}
            rows.append(row)
        return rows

    def to_json(self, normalize: bool = False, decimals: int = 5) -> str:
        """summary() as a JSON list, the text ultralytics' (polars' write_json) is: compact, UTF-8 (a class named
        "café" is ``"café"``, not ``"caf\\u00e9"``), small numbers as polars writes them (``0.00001``, not
        ``1e-05``: a keypoint's visibility, a box at the image's edge normalized). Always valid JSON: a NaN or
        infinite value (a hand-built Results, a model of broken weights) is written as null, where ultralytics'
        json.dumps writes ``NaN``, which no JSON reader but Python's takes."""
        text = json_text(self.summary(normalize, decimals), separators=(",", ":"), ensure_ascii=False)
        return STRING_OR_SMALL_NUMBER.sub(polars_number, text)

    def to_df(self, normalize: bool = False, decimals: int = 5):
        """summary() as a pandas DataFrame, one row per box (columns name, class, confidence, box).
        ultralytics (8.3.253 too) returns a polars DataFrame of the same rows: ``polars.from_pandas(r.to_df())``."""
        return require("pandas", "to_df()").DataFrame(self.summary(normalize, decimals))

    def to_csv(self, normalize: bool = False, decimals: int = 5) -> str:
        """summary() as CSV text, as ultralytics writes it: a header, one row per box, the box as its dict's repr."""
        rows = self.summary(normalize, decimals)
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        if rows:
            writer.writerow(rows[0])
        writer.writerows([repr(v) if isinstance(v, dict) else v for v in row.values()] for row in rows)
        return text.getvalue() or "\n"

    def to_coco(self, image_id: int, category_ids: list[int] | None = None) -> list[dict]:
        """The boxes as COCO result records, as ultralytics' save_json writes them: image_id, file_name,
        a video frame's "frame" (its 0-based number in the video, as ``frame`` and --jsonl's), category_id
        (``category_ids[class]``, default class + 1), bbox [x, y, width, height] in pixels, score;
        a segmentation model's adds "segmentation", the mask at the image's size as COCO's compressed RLE
        (upstream's val encodes process_mask_native's masks, at the input's size scaled to the image;
        ``retina_masks=True`` computes them at the image's size), a pose
        model's "keypoints", [x1, y1, v1, x2, ...] in pixels, v the keypoint's score (COCO's layout). A model
        without visibility (kpt_shape (K, 2)) writes v = 1, as COCO's results format recommends: ultralytics
        writes x, y pairs, which pycocotools reads as triples (COCOeval "keypoints" raises on them)."""
        image_id = coco_id(image_id, "image_id")
        if category_ids is not None:
            if len(category_ids) < len(self.names):
                raise ZooError(f"category_ids gives {len(category_ids)} ids for the model's {len(self.names)} classes: "
                               "give one category_id per class, in class order")
            category_ids = [coco_id(c, "category_ids") for c in category_ids]
        # a video's frames share its file_name: "frame" tells them apart
        where = {"file_name": Path(self.path).name if self.path else None,
                 **({"frame": self.frame} if self.frame is not None else {})}
        records = [
            {"image_id": image_id, **where,
             "category_id": category_ids[int(c)] if category_ids is not None else int(c) + 1,
             "bbox": [round(x1, 3), round(y1, 3), round(x2 - x1, 3), round(y2 - y1, 3)], "score": round(s, 5)}
            for x1, y1, x2, y2, s, c in self.box_rows.rows.tolist()
        ]
        if self.masks is not None:
            for record, rle in zip(records, self.masks.coco_rles()):
                record["segmentation"] = rle
        if self.keypoints is not None:
            points = np.asarray(self.keypoints.data, np.float64).round(3)
            if not self.keypoints.has_visible:
                points = np.concatenate([points, np.ones((*points.shape[:2], 1))], axis=2)
            for record, triples in zip(records, points):
                record["keypoints"] = triples.reshape(-1).tolist()
        return records

    def label_lines(self, save_conf: bool = False) -> list[str]:
        """YOLO label format, one object a line, values 0-1, as ultralytics' save_txt: detection
        ``class xc yc w h``, segmentation ``class x1 y1 x2 y2 ...`` (the mask's polygon), pose
        ``class xc yc w h`` then each keypoint's ``x y [visibility]``; ``save_conf`` appends the score, then
        a tracked box's id."""
        lines = []
        boxes = self.box_rows
        ids = boxes.id.tolist() if boxes.is_track else None
        for i, (xywhn, conf, cls) in enumerate(zip(boxes.xywhn.tolist(), boxes.conf.tolist(), boxes.cls.tolist())):
            values = [int(cls), *(self.masks.xyn[i].reshape(-1).tolist() if self.masks is not None else xywhn)]
            if self.keypoints is not None:
                points = self.keypoints.xyn[i]
                if self.keypoints.has_visible:
                    points = np.concatenate([points, self.keypoints.conf[i][:, None]], axis=1)
                values += points.reshape(-1).tolist()
            values += ([conf] if save_conf else []) + ([int(ids[i])] if ids is not None else [])
            lines.append(" ".join(f"{v:g}" for v in values))
        return lines

    # -- drawing ---------------------------------------------------------------------------------

    def plot(self, conf: bool = True, line_width: float | None = None, font_size: float | None = None,
             font: str | None = None, pil: bool = False, img: np.ndarray | None = None, im_gpu=None,
             kpt_radius: int = 5, kpt_line: bool = True, labels: bool = True, boxes: bool = True, masks: bool = True,
             probs: bool = True, show: bool = False, save: bool = False, filename: str | Path | None = None,
             color_mode: str = "class", txt_color=(255, 255, 255)):
        """The image with each box, its class name and score drawn in the class's colour; each mask
        blended in its box's colour; each detection's keypoints (those scoring 0.25 or more) as dots,
        joined by COCO's skeleton for 17 keypoints. ultralytics' arguments, in its order.

        Returns (H, W, 3) BGR uint8 as ultralytics does (a PIL image, RGB, with ``pil=True``). ``img``: a BGR
        image to draw on instead of ``orig_img``; ``line_width``/``font_size``: pixels (default: from the
        image size); ``conf``/``labels``/``boxes``/``masks``: draw scores / labels / boxes / masks;
        ``kpt_radius``: the dots' radius, ``kpt_line``: draw the skeleton; ``color_mode``: 'class' (a colour
        per class) or 'instance' (per track id, else per detection); tracked boxes' labels start ``id:N``;
        ``show``: open it in the system's image viewer (PIL's ``show``); ``save``: also write it to
        ``filename`` (default ``results_<image name>``) as save() does. Accepted for ultralytics' scripts and
        without effect here: ``font`` (Pillow's default font is drawn), ``im_gpu`` (a faster path to the same
        masks upstream), ``probs`` and ``txt_color`` (a classification's top-5 text; these results have none).
        """
        if color_mode not in ("class", "instance"):
            raise ZooError(f"color_mode={color_mode!r}: use color_mode='class' or color_mode='instance'")
        target, replace = self.save_path(filename, None) if save else (None, False)  # checked before drawing
        base = self.orig_img if img is None else img
        rgb = base[..., 2::-1]  # BGR -> RGB for Pillow, copied once (a 64-megapixel photo is 183 MiB)
        rows, ids = self.box_rows.rows.tolist(), self.box_rows.id
        # each detection's colour: its class's, or in 'instance' mode its track id's (else its index's)
        colours = [class_colour(int(row[5]) if color_mode == "class" else int(ids[i]) if ids is not None else i)
                   for i, row in enumerate(rows)]
        if masks and self.masks is not None and len(self.masks):
            # masks without their boxes (r.new() then update(masks=...)): a colour per mask, not none drawn
            same = len(colours) == len(self.masks)
            rgb = blend_masks(rgb, self.masks.bands(base.shape[:2]),
                              colours if same else [class_colour(i) for i in range(len(self.masks))])
        canvas = Image.fromarray(np.ascontiguousarray(rgb))
        draw = ImageDraw.Draw(canvas)
        h, w = base.shape[:2]
        line = max(1, round(line_width)) if line_width else max(2, round((h + w) / 2 * 0.003))
        font = ImageFont.load_default(size=max(1, round(font_size)) if font_size else max(12, round((h + w) / 2 * 0.025)))
        # boxes first, then labels, so no line crosses a label; lowest score first, so the most confident end on top
        order = sorted(range(len(rows)), key=lambda i: rows[i][4])
        corners = {}
        for i in order:
            # corners in order: a box from untrained (e.g. synthetic) weights may have x2 < x1
            (x1, x2), (y1, y2) = sorted(rows[i][0:3:2]), sorted(rows[i][1:4:2])
            corners[i] = (x1, y1)
            if boxes:
                draw.rectangle((x1, y1, x2, y2), outline=colours[i], width=line)
        for i in order if labels and boxes else ():
            x1, y1 = corners[i]
            name = ("" if ids is None else f"id:{int(ids[i])} ") + self.names[int(rows[i][5])]
            label = f"{name} {rows[i][4]:.2f}" if conf else name
            left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
            tw, th = right - left + 2 * line, bottom - top + 2 * line
            # above the box when there is room, else just inside its top edge
            ty = y1 - th if y1 - th >= 0 else y1
            tx = min(x1, max(0.0, w - tw))
            draw.rectangle((tx, ty, tx + tw, ty + th), fill=colours[i])
            draw.text((tx + line - left, ty + line - top), label, fill=text_colour(colours[i]), font=font)
        for i, points in enumerate(self.keypoints.data if self.keypoints is not None else ()):
            draw_keypoints(draw, points, (h, w), kpt_radius, max(1, math.ceil(line / 2)) if kpt_line else 0,
                           colours[i] if color_mode == "instance" and i < len(colours) else None)
        if show:
            canvas.show(title=self.path)
        if target is not None:
            write_atomic(target, lambda file: canvas.save(file, format=image_format(target)), replace=replace)
        return canvas if pil else np.asarray(canvas)[..., ::-1].copy()

    def show(self, *args, **kwargs) -> None:
        """plot() opened in the system's image viewer, as ultralytics' ``show()``."""
        self.plot(*args, show=True, **kwargs)

    def save_path(self, filename: str | Path | None, overwrite: bool | None) -> tuple[Path, bool]:
        """Where save() writes and whether it may replace a file there: ``filename``, else
        ``results_<image name>`` beside the working folder, its folder made. ``overwrite`` None: replace the
        file only when ``filename`` names it (ultralytics replaces any); never the image the result came from."""
        path = Path(filename or f"results_{Path(self.path or 'image0.jpg').name}")
        image_format(path)  # a bad suffix fails at once, in one line
        replace = bool(filename) if overwrite is None else overwrite
        return check_new(path, replace, self.path), replace

    def save(self, filename: str | Path | None = None, *, overwrite: bool | None = None, **plot_options) -> str:
        """Write plot() to ``filename`` (default ``results_<image name>``, e.g. ``results_image0.jpg`` for an
        in-memory image), making its folder; the format follows its suffix. Returns the file's name."""
        path, replace = self.save_path(filename, overwrite)
        annotated = self.plot(pil=True, **plot_options)
        write_atomic(path, lambda file: annotated.save(file, format=image_format(path)), replace=replace)
        return str(path)

    def save_txt(self, txt_file: str | Path, save_conf: bool = False, *, overwrite: bool | None = None) -> str:
        """Write the boxes in the YOLO label format (label_lines), making the folder; no file when there are no
        boxes. As ultralytics, an existing file is appended to (a video's frames into one file);
        ``overwrite=True`` replaces it, ``overwrite=False`` refuses it."""
        refuse_empty(txt_file, "txt_file", "pass a file path")
        path = Path(txt_file)
        lines = self.label_lines(save_conf)
        if lines:
            check_new(path, overwrite is not False, self.path)
            appended = overwrite is None and os.path.lexists(path)  # a dangling link: replaced, nothing to read
            before = path.read_text(encoding="utf-8") if appended and path.exists() else ""
            if before and not before.endswith("\n"):  # a user's last line without its newline: not merged with ours
                before += "\n"
            # the file read is replaced by itself and the new lines; one that appeared since is kept
            write_text(path, before + "".join(f"{s}\n" for s in lines), replace=bool(overwrite) or appended)
        return str(path)

    def crops(self) -> list[np.ndarray]:
        """Each box's crop of orig_img (BGR), as ultralytics' save_one_box: the box 2% larger plus 10 px, clipped."""
        h, w = self.orig_shape
        out = []
        for xc, yc, bw, bh in self.box_rows.xywh.tolist():
            bw, bh = bw * CROP_GAIN + CROP_PAD, bh * CROP_GAIN + CROP_PAD
            x1, x2 = (int(np.clip(v, 0, w)) for v in (xc - bw / 2, xc + bw / 2))
            y1, y2 = (int(np.clip(v, 0, h)) for v in (yc - bh / 2, yc + bh / 2))
            out.append(self.orig_img[y1:y2, x1:x2])
        return out

    def save_crop(self, save_dir: str | Path, file_name: str | Path = "im.jpg") -> list[str]:
        """Each box's crop as ``save_dir/<class name>/<file_name>`` with the suffix .jpg, as ultralytics (a
        ``file_name`` with folders, ``clip/f1``, keeps them: ``crops/person/clip/f1.jpg``); a name already taken
        gets 2, 3 ... appended (ultralytics' increment_path), so nothing is replaced. A class name is one folder
        (class_folder): a checkpoint's names cannot put crops outside ``save_dir``."""
        refuse_empty(save_dir, "save_dir", "pass a folder")
        refuse_empty(file_name, "file_name", "pass a file name")
        written = []
        name = Path(file_name).with_suffix(".jpg")
        for crop, cls in zip(self.crops(), self.box_rows.cls.tolist()):
            if crop.size == 0:
                continue
            path, n = Path(save_dir) / class_folder(self.names[int(cls)], int(cls)) / name, 1
            if not path.parent.is_dir():  # a file in the way, an unwritable folder: one line, not a traceback
                make_output_folder(path.parent, f"crop {path}: its folder")
            while os.path.lexists(path):  # a dangling link's name is taken too
                n += 1
                path = path.with_name(f"{name.stem}{n}.jpg")
            image = Image.fromarray(np.ascontiguousarray(crop[..., 2::-1]))
            write_atomic(path, lambda file: image.save(file, format="JPEG", quality=95, subsampling=0),
                         replace=False)
            written.append(str(path))
        return written


def class_folder(name: str, class_id: int) -> str:
    """A class name as one folder name: slashes become ``_`` (``../../x``, a checkpoint's metadata, wrote crops
    outside the crops folder) and a name that is no folder (empty, ``.``, ``..``) is ultralytics' ``class<id>``."""
    folder = name.replace("/", "_").replace("\\", "_").replace("\0", "_")
    return f"class{class_id}" if folder in ("", ".", "..") else folder


DEFAULT_FPS = 30.0  # a camera or stream that does not say its rate


def output_name(path: str | Path, name: str) -> str:
    """An image's annotated file in a run folder: its unique name with the input's suffix, or .png when
    Pillow cannot write that suffix (or there is none)."""
    return name + (Path(path).suffix if writable_format(path) else ".png")


def kept_frame(frame: int, vid_stride: int) -> int:
    """A kept video frame's number as ultralytics counts it: from 1, over the kept frames (0-based frame kN-1
    with vid_stride N is k): its label file's ``<stem>_<k>``, its log line's ``frame k/F``."""
    return (frame + 1) // vid_stride


class ResultFiles:
    """What ultralytics' predictor writes in a run folder ``out`` for each result, as results come:

        <name>.<suffix>            the annotated image (``save``)   <video stem>.mp4   a video's annotated frames
        labels/<name>.txt          ``save_txt`` (YOLO format; ``save_conf`` adds the score)
        crops/<class>/<name>.jpg   ``save_crop``

    ``<name>`` is the item's unique name (zoo.sources); for a video frame ``<video stem>_<k>``, k counting the
    kept frames from 1, as ultralytics names them; ``<suffix>`` the input's, or ``image_suffix`` (predict's
    ``.jpg``, as ultralytics' predictor saves every image: a script opening ``predict/bus.jpg`` after ``bus.png``
    finds it; item names are unique without their suffix, so ``a.png`` and ``a.jpg`` give ``a.jpg`` and
    ``a_2.jpg``). ``overwrite``:
    replace annotated images and videos that exist; ``labels``: save_txt's ``overwrite`` (None appends, as
    ultralytics); ``plot_options``: plot()'s keywords for the annotated images and videos; ``inputs``: the run's
    input files and folders, which no output may replace (exist_ok=True into an input's folder); ``written``: the
    outputs earlier predict calls wrote into this run folder (WrittenFiles, Python's predict only), which are
    replaced (labels appended to) as ultralytics' predictor writes over them, where any other existing file is
    one error without ``overwrite``; what this one writes is added to it. ``close()`` finishes the video being
    written (an interrupted one is dropped, but a live source's).
    """

    def __init__(self, out: str | Path, save: bool = True, save_txt: bool = False, save_conf: bool = False,
                 save_crop: bool = False, overwrite: bool = False, labels: bool | None = None, vid_stride: int = 1,
                 plot_options: dict | None = None, inputs: Inputs | None = None, written: WrittenFiles | None = None,
                 image_suffix: str | None = None):
        self.out = Path(out)
        self.image_suffix = image_suffix
        self.save, self.save_txt, self.save_conf, self.save_crop = save, save_txt, save_conf, save_crop
        self.overwrite, self.labels, self.vid_stride = overwrite, labels, vid_stride
        self.plot_options = plot_options or {}
        self.inputs = inputs or Inputs(())
        self.written = written
        self.writer = None  # the video being written
        self.item = None  # its last frame: its video's total says whether the video was finished

    def write(self, result: Results, item) -> None:
        if self.writer is not None and (item.frame is None or item.stem != self.item.stem):
            # the next input's first result: the video's items have all come (its end, or its damage), so it is
            # finished now, not at the run's end: a run killed meanwhile left it unfinished behind images done,
            # which --resume --save-json refuses (a video not done gives its frames ids the images' records hold)
            self.close(complete=True)
        image = self.out / (item.name + self.image_suffix if self.image_suffix else output_name(item.path, item.name))
        if self.save and item.frame is None:
            self.check_output(image)  # before the labels: nothing of this item written when refused
        if self.save_txt:
            labels = self.check_output(self.out / "labels" / f"{self.label_name(item)}.txt")
            result.save_txt(labels, self.save_conf, overwrite=self.labels)
            self.record(labels)
        if self.save_crop:
            result.save_crop(self.out / "crops", f"{self.label_name(item)}.jpg")
        # the annotated image last: --resume takes an image whose annotated file exists as done
        if self.save and item.frame is None:
            result.save(image, overwrite=self.replaces(image), **self.plot_options)
            self.record(image)
        elif self.save:
            self.write_frame(item, result.plot(**self.plot_options)[..., ::-1])

    def replaces(self, path: Path) -> bool:
        """Whether an existing output at ``path`` is written over: with ``overwrite``, or one an earlier call wrote."""
        return self.overwrite or (self.written is not None and path in self.written)

    def check_output(self, path: Path) -> Path:
        """``path``, neither an input nor (in a run folder earlier predict calls wrote into) an existing file they
        did not write."""
        self.inputs.refuse(path, "output")
        # lexists: a dangling link is a file there too (not one that 'appeared while this run was writing it')
        if self.written is not None and os.path.lexists(path) and not self.replaces(path):
            raise ZooError(f"output {path} exists and is no output of this model's earlier predict calls: pass "
                           "exist_ok=True to replace it, or project=/name= for another run folder")
        return path

    def record(self, path: Path) -> None:
        if self.written is not None:
            self.written.record(path)

    def label_name(self, item) -> str:
        """The name of an item's label file and crops: an image's name; for a video frame, as ultralytics' predictor
        names it, ``<video stem>_<k>`` with k counting the frames kept from 1 (frame 0 is ``_1``; with vid_stride
        N, frame kN-1 is ``_k``)."""
        return item.name if item.frame is None else f"{item.stem}_{kept_frame(item.frame, self.vid_stride)}"

    def write_frame(self, item, rgb: np.ndarray) -> None:
        from zoo.sources import VideoWriter

        if self.writer is None:
            make_output_folder(self.out, "output folder")
            video = self.check_output(self.out / f"{item.stem}.mp4")
            self.writer = VideoWriter(video, item.fps or DEFAULT_FPS, overwrite=self.replaces(video), fit=True)
        self.item = item  # before the frame: close() reads it, whether the frame was written or not
        self.writer.write(rgb)

    def close(self, complete: bool = True) -> None:
        """Finish the video; an interrupted one (frames left unread) is dropped, not left half-written, but for a
        camera's or live stream's, which has no end to wait for: stopping it (Ctrl-C, a loop left) is how it ends
        (and --resume does not continue it), so its video is kept, as ultralytics keeps it."""
        if self.writer is None:
            return
        expected = self.item.frames // self.vid_stride if self.item.frames else None
        try:
            if self.writer.refused is not None:  # a frame's write failed (said with that frame): its file is gone
                return
            if complete or self.item.live or self.writer.count == expected:
                self.writer.close()
                self.record(self.writer.path)
            else:
                self.writer.abort()
                remove_created_folders(self.out)  # the run folder it made, if the video was all it held
        finally:
            self.writer = None  # closed or failed (its file dropped): the next input's frames start a video of theirs
