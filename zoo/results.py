"""Detections of one image: boxes, scores, classes; annotated image, COCO-style JSON, a summary line."""
from __future__ import annotations

import colorsys
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from zoo.files import image_format, write_atomic

# 20 hues a golden-ratio step apart: neighbouring class ids get clearly different colours.
PALETTE = [
    tuple(round(255 * c) for c in colorsys.hsv_to_rgb((i * 0.618034) % 1.0, 0.85, 0.95)) for i in range(20)
]


def class_colour(class_id: int) -> tuple[int, int, int]:
    return PALETTE[class_id % len(PALETTE)]


def text_colour(background: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black on light colours, white on dark ones (ITU-R BT.601 luma)."""
    r, g, b = background
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


@dataclass
class Detections:
    boxes: np.ndarray  # (M, 4) float32 x1, y1, x2, y2 in original image pixels
    scores: np.ndarray  # (M,) float32, descending
    class_ids: np.ndarray  # (M,) int64
    names: list[str]  # every class name of the model, indexed by class id
    image: np.ndarray  # the original (H, W, 3) uint8 RGB image
    path: str | None = None
    speed: dict = field(default_factory=dict)  # milliseconds: preprocess, inference, postprocess

    def __len__(self) -> int:
        return len(self.scores)

    @property
    def labels(self) -> list[str]:
        return [self.names[int(c)] for c in self.class_ids]

    def summary(self) -> str:
        """'4 person, 1 bus' (classes in id order), or 'no detections'."""
        counts = Counter(int(c) for c in self.class_ids)
        if not counts:
            return "no detections"
        return ", ".join(f"{counts[c]} {self.names[c]}" for c in sorted(counts))

    def to_dicts(self) -> list[dict]:
        """COCO-style results: bbox [x, y, width, height] in pixels, category_id = the model's class id."""
        return [
            {
                "bbox": [round(float(x1), 3), round(float(y1), 3), round(float(x2 - x1), 3), round(float(y2 - y1), 3)],
                "category_id": int(c),
                "category_name": self.names[int(c)],
                "score": round(float(s), 5),
            }
            for (x1, y1, x2, y2), s, c in zip(self.boxes, self.scores, self.class_ids)
        ]

    def to_json(self) -> str:
        """The detections as a JSON list, one detection per line."""
        rows = [json.dumps(d) for d in self.to_dicts()]
        return "[\n" + ",\n".join(f"  {row}" for row in rows) + "\n]\n" if rows else "[]\n"


    def plot(self) -> Image.Image:
        """The image with each box, its class name and score drawn in the class's colour."""
        img = Image.fromarray(self.image)
        draw = ImageDraw.Draw(img)
        h, w = self.image.shape[:2]
        line = max(2, round((h + w) / 2 * 0.003))
        font = ImageFont.load_default(size=max(12, round((h + w) / 2 * 0.025)))
        # boxes first, then labels, so no line crosses a label; lowest score first, so the most confident end on top
        order = np.argsort(self.scores, kind="stable")
        corners = {}
        for i in order:
            # corners in order: a box from untrained (e.g. synthetic) weights may have x2 < x1
            (x1, x2), (y1, y2) = sorted(self.boxes[i, [0, 2]].tolist()), sorted(self.boxes[i, [1, 3]].tolist())
            corners[i] = (x1, y1)
            draw.rectangle((x1, y1, x2, y2), outline=class_colour(int(self.class_ids[i])), width=line)
        for i in order:
            x1, y1 = corners[i]
            colour = class_colour(int(self.class_ids[i]))
            label = f"{self.names[int(self.class_ids[i])]} {self.scores[i]:.2f}"
            left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
            tw, th = right - left + 2 * line, bottom - top + 2 * line
            # above the box when there is room, else just inside its top edge
            ty = y1 - th if y1 - th >= 0 else y1
            tx = min(x1, max(0.0, w - tw))
            draw.rectangle((tx, ty, tx + tw, ty + th), fill=colour)
            draw.text((tx + line - left, ty + line - top), label, fill=text_colour(colour), font=font)
        return img

    def save(self, path: str | Path) -> Path:
        """Write the annotated image; the format follows the file's suffix (.jpg, .png, ...)."""
        fmt = image_format(path)  # before drawing: a bad suffix fails at once, in one line
        return write_atomic(path, lambda tmp: self.plot().save(tmp, format=fmt))
