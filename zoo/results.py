"""Detection results shaped like ultralytics' (``engine/results.py``): ``Results`` per image, its ``Boxes``.

    r = det.predict("bus.jpg")[0]
    r.boxes.xyxy, r.boxes.xywh, r.boxes.xyxyn, r.boxes.xywhn, r.boxes.conf, r.boxes.cls, r.boxes.data
    r.names                    # {0: 'person', ...}: the checkpoint's own classes
    r.plot()                   # (H, W, 3) BGR uint8, as ultralytics (cv2's order)
    r.save("out.jpg"); r.save_txt("out.txt", save_conf=True); r.save_crop("crops")
    r.summary(), r.to_json()   # [{"name", "class", "confidence", "box": {"x1", "y1", "x2", "y2"}}]

Everything is numpy (no tensors, no devices). ``orig_img`` is BGR as in ultralytics; images given
as paths or PIL images are RGB, numpy arrays BGR (ultralytics' convention). Files are written
whole (temporary name, then renamed) and never replace an existing file unless ``overwrite=True``.
"""
from __future__ import annotations

import colorsys
import json
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from zoo.errors import ZooError
from zoo.files import check_new_file, image_format, refuse_inputs, write_atomic

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
    """(H, W, 3) uint8 with each (H, W) bool mask in its colour over the image, in order (the last on top).

    In float32, rounded once, a band of rows at a time: a float32 copy of a whole 8000x8000 photo
    alone is 768 MB."""
    masks, colours = list(masks), [np.array(colour, np.float32) for colour in colours]
    out = np.empty_like(rgb)
    rows = max(1, BLEND_ROWS_BYTES // (4 * rgb[0].size))
    for start in range(0, rgb.shape[0], rows):
        band = slice(start, start + rows)
        blended = rgb[band].astype(np.float32)
        for mask, colour in zip(masks, colours):
            inside = mask[band]
            blended[inside] = (1 - MASK_ALPHA) * blended[inside] + MASK_ALPHA * colour
        out[band] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return out


def text_colour(background: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black on light colours, white on dark ones (ITU-R BT.601 luma)."""
    r, g, b = background
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


def check_new(path: Path, overwrite: bool, image_path: str | None) -> Path:
    """The file a save writes: never the image the result came from, an existing file only with ``overwrite``."""
    refuse_inputs(path, [image_path], "output")
    return check_new_file(path, "output", overwrite, "overwrite=True (--exist-ok on the command line)")


class Boxes:
    """Detection boxes of one image: ``data`` (N, 6) float32 rows x1, y1, x2, y2, conf, cls in pixels.

    ``len()``, iteration (one Boxes per box) and indexing (int, slice, mask, index array) as ultralytics.
    """

    def __init__(self, data: np.ndarray, orig_shape: tuple[int, int]):
        data = np.asarray(data, dtype=np.float32)
        if data.ndim == 1:
            data = data[None, :]
        if data.ndim != 2 or data.shape[1] != 6:
            raise ZooError(f"boxes have shape {data.shape}: expected (N, 6) rows x1, y1, x2, y2, conf, cls")
        self.data = data
        self.orig_shape = tuple(orig_shape[:2])  # (height, width)

    is_track = False
    id = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.data.shape

    @property
    def xyxy(self) -> np.ndarray:
        return self.data[:, :4]

    @property
    def conf(self) -> np.ndarray:
        return self.data[:, 4]

    @property
    def cls(self) -> np.ndarray:
        """Class ids as float32, as ultralytics keeps them (``int(b.cls)`` or ``.astype(int)`` for indexing)."""
        return self.data[:, 5]

    @property
    def xywh(self) -> np.ndarray:
        """Box centre x, y, width, height in pixels."""
        x1, y1, x2, y2 = self.xyxy.T
        return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=1)

    @property
    def xyxyn(self) -> np.ndarray:
        return self.xyxy / self._scale

    @property
    def xywhn(self) -> np.ndarray:
        return self.xywh / self._scale

    @property
    def _scale(self) -> np.ndarray:
        h, w = self.orig_shape
        return np.array([w, h, w, h], np.float32)

    def numpy(self) -> Boxes:
        return self

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index) -> Boxes:
        return Boxes(self.data[index], self.orig_shape)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Boxes({len(self)} boxes, orig_shape={self.orig_shape})"


class Results:
    """One image's detections, as ultralytics' Results for the detect task.

    ``orig_img``: the image as (H, W, 3) uint8 BGR; ``path``: where it came from (a file, ``video.mp4``,
    ``image0`` for an in-memory image); ``names``: {id: name}; ``boxes``: Boxes;
    ``speed``: milliseconds per image for preprocess, inference and postprocess;
    ``frame``: the frame number for a video frame, else None.
    """

    def __init__(self, orig_img: np.ndarray, path: str | None, names: dict[int, str], boxes=None,
                 speed: dict | None = None, frame: int | None = None):
        self.orig_img = orig_img
        self.orig_shape = tuple(orig_img.shape[:2])
        self.path = path
        self.names = names
        self.boxes = Boxes(np.zeros((0, 6), np.float32) if boxes is None else boxes, self.orig_shape)
        self.speed = dict(speed or {"preprocess": None, "inference": None, "postprocess": None})
        self.frame = frame
        self.save_dir = None

    def __len__(self) -> int:
        return len(self.boxes)

    def __getitem__(self, index) -> Results:
        """The same image with only the boxes ``index`` selects."""
        return Results(self.orig_img, self.path, self.names, self.boxes.data[index], self.speed, self.frame)

    def __repr__(self) -> str:
        return f"Results(path={self.path!r}, {len(self)} boxes, orig_shape={self.orig_shape})"

    def new(self) -> Results:
        return Results(self.orig_img, self.path, self.names, None, self.speed, self.frame)

    def numpy(self) -> Results:
        return self

    # -- text ------------------------------------------------------------------------------------

    def verbose(self) -> str:
        """ultralytics' log string: '2 persons, 1 bus, ' (classes in id order), or '(no detections), '."""
        if not len(self):
            return "(no detections), "
        counts = Counter(int(c) for c in self.boxes.cls)
        return "".join(f"{n} {self.names[c]}{'s' * (n > 1)}, " for c, n in sorted(counts.items()))

    def summary(self, normalize: bool = False, decimals: int = 5) -> list[dict]:
        """One dict per box: name, class, confidence, box {x1, y1, x2, y2} (pixels, or 0-1 with ``normalize``)."""
        h, w = self.orig_shape if normalize else (1, 1)
        rows = []
        for (x1, y1, x2, y2, conf, cls) in self.boxes.data.tolist():
            rows.append({"name": self.names[int(cls)], "class": int(cls), "confidence": round(conf, decimals),
                         "box": {"x1": round(x1 / w, decimals), "y1": round(y1 / h, decimals),
                                 "x2": round(x2 / w, decimals), "y2": round(y2 / h, decimals)}})
        return rows

    def to_json(self, normalize: bool = False, decimals: int = 5) -> str:
        """summary() as a JSON list."""
        return json.dumps(self.summary(normalize, decimals))

    def to_coco(self) -> list[dict]:
        """COCO-style detections: bbox [x, y, width, height] in pixels, category_id = the model's class id."""
        return [
            {"bbox": [round(x1, 3), round(y1, 3), round(x2 - x1, 3), round(y2 - y1, 3)],
             "category_id": int(c), "category_name": self.names[int(c)], "score": round(s, 5)}
            for x1, y1, x2, y2, s, c in self.boxes.data.tolist()
        ]

    def label_lines(self, save_conf: bool = False) -> list[str]:
        """YOLO label format, one box a line: class x_centre y_centre width height (0-1) [confidence]."""
        lines = []
        for (xc, yc, bw, bh), conf, cls in zip(self.boxes.xywhn.tolist(), self.boxes.conf.tolist(),
                                               self.boxes.cls.tolist()):
            values = (int(cls), xc, yc, bw, bh) + ((conf,) if save_conf else ())
            lines.append(" ".join(f"{v:g}" for v in values))
        return lines

    # -- drawing ---------------------------------------------------------------------------------

    def plot(self, conf: bool = True, line_width: float | None = None, font_size: float | None = None,
             labels: bool = True, boxes: bool = True, pil: bool = False, img: np.ndarray | None = None):
        """The image with each box, its class name and score drawn in the class's colour.

        Returns (H, W, 3) BGR uint8 as ultralytics does (a PIL image, RGB, with ``pil=True``). ``img``: a BGR
        image to draw on instead of ``orig_img``; ``line_width``/``font_size``: pixels (default: from the
        image size); ``conf``/``labels``/``boxes``: draw scores / labels / boxes.
        """
        base = self.orig_img if img is None else img
        canvas = Image.fromarray(np.ascontiguousarray(base[..., 2::-1]))  # BGR -> RGB for Pillow
        draw = ImageDraw.Draw(canvas)
        h, w = base.shape[:2]
        line = max(1, round(line_width)) if line_width else max(2, round((h + w) / 2 * 0.003))
        font = ImageFont.load_default(size=max(1, round(font_size)) if font_size else max(12, round((h + w) / 2 * 0.025)))
        # boxes first, then labels, so no line crosses a label; lowest score first, so the most confident end on top
        order = np.argsort(self.boxes.conf, kind="stable")
        corners = {}
        for i in order:
            # corners in order: a box from untrained (e.g. synthetic) weights may have x2 < x1
            (x1, x2), (y1, y2) = sorted(self.boxes.xyxy[i, [0, 2]].tolist()), sorted(self.boxes.xyxy[i, [1, 3]].tolist())
            corners[i] = (x1, y1)
            if boxes:
                draw.rectangle((x1, y1, x2, y2), outline=class_colour(int(self.boxes.cls[i])), width=line)
        for i in order if labels else ():
            x1, y1 = corners[i]
            cls = int(self.boxes.cls[i])
            label = f"{self.names[cls]} {self.boxes.conf[i]:.2f}" if conf else self.names[cls]
            left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
            tw, th = right - left + 2 * line, bottom - top + 2 * line
            # above the box when there is room, else just inside its top edge
            ty = y1 - th if y1 - th >= 0 else y1
            tx = min(x1, max(0.0, w - tw))
            draw.rectangle((tx, ty, tx + tw, ty + th), fill=class_colour(cls))
            draw.text((tx + line - left, ty + line - top), label, fill=text_colour(class_colour(cls)), font=font)
        return canvas if pil else np.asarray(canvas)[..., ::-1].copy()

    def save(self, filename: str | Path | None = None, overwrite: bool = False, **plot_options) -> str:
        """Write plot() to ``filename`` (default ``results_<image name>``); the format follows its suffix."""
        path = Path(filename or f"results_{Path(self.path or 'image.jpg').name}")
        fmt = image_format(path)  # before drawing: a bad suffix fails at once, in one line
        check_new(path, overwrite, self.path)
        annotated = self.plot(pil=True, **plot_options)
        write_atomic(path, lambda tmp: annotated.save(tmp, format=fmt))
        return str(path)

    def save_txt(self, txt_file: str | Path, save_conf: bool = False, overwrite: bool = False) -> str:
        """Write the boxes in the YOLO label format (label_lines); no file when there are no boxes, as ultralytics."""
        path = Path(txt_file)
        lines = self.label_lines(save_conf)
        if lines:
            check_new(path, overwrite, self.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, lambda tmp: tmp.write_text("".join(f"{s}\n" for s in lines)))
        return str(path)

    def crops(self) -> list[np.ndarray]:
        """Each box's crop of orig_img (BGR), as ultralytics' save_one_box: the box 2% larger plus 10 px, clipped."""
        h, w = self.orig_shape
        out = []
        for xc, yc, bw, bh in self.boxes.xywh.tolist():
            bw, bh = bw * CROP_GAIN + CROP_PAD, bh * CROP_GAIN + CROP_PAD
            x1, x2 = (int(np.clip(v, 0, w)) for v in (xc - bw / 2, xc + bw / 2))
            y1, y2 = (int(np.clip(v, 0, h)) for v in (yc - bh / 2, yc + bh / 2))
            out.append(self.orig_img[y1:y2, x1:x2])
        return out

    def save_crop(self, save_dir: str | Path, file_name: str | Path = "im.jpg") -> list[str]:
        """Each box's crop as ``save_dir/<class name>/<file_name stem>.jpg``; a name already taken gets
        2, 3 ... appended (ultralytics' increment_path), so nothing is replaced."""
        written = []
        for crop, cls in zip(self.crops(), self.boxes.cls.tolist()):
            if crop.size == 0:
                continue
            folder = Path(save_dir) / self.names[int(cls)]
            folder.mkdir(parents=True, exist_ok=True)
            stem, n = Path(file_name).stem, 1
            path = folder / f"{stem}.jpg"
            while path.exists():
                n += 1
                path = folder / f"{stem}{n}.jpg"
            image = Image.fromarray(np.ascontiguousarray(crop[..., 2::-1]))
            write_atomic(path, lambda tmp: image.save(tmp, format="JPEG", quality=95, subsampling=0))
            written.append(str(path))
        return written
