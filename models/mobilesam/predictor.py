"""SamPredictor: encode an image once, then predict masks for many prompts.

Same interface and semantics as upstream ``SamPredictor`` (``set_image``,
``predict``), on NHWC MLX arrays inside and numpy at the boundary:

- the image is resized so its long side is 1024 with Pillow's bilinear filter
  on the uint8 image (what upstream's ResizeLongestSide does through
  torchvision on a PIL image), normalised, zero-padded to 1024 x 1024;
- prompt coordinates are scaled by new/old size in float64, then cast to float32;
- mask logits go back to the original size by two bilinear resizes
  (``Sam.postprocess_masks``) and are thresholded at > 0.
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np
from PIL import Image

from zoo.errors import ZooError
from zoo.images import load_image


def preprocess_shape(h: int, w: int, long_side: int) -> tuple[int, int]:
    """(new_h, new_w) with the long side ``long_side``, each rounded half up (upstream's rule)."""
    scale = long_side * 1.0 / max(h, w)
    return int(h * scale + 0.5), int(w * scale + 0.5)


def resize_longest_side(image: np.ndarray, long_side: int) -> np.ndarray:
    """uint8 (H, W, 3) -> uint8 (h, w, 3) with Pillow's bilinear filter, antialiased when shrinking.

    Pillow itself, not a float interpolation: a float bilinear resize rounds a
    fifth of the pixels differently (+-1) from the images upstream's model saw.
    """
    h, w = preprocess_shape(image.shape[0], image.shape[1], long_side)
    return np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))


def apply_coords(coords: np.ndarray, original_size: tuple[int, int], long_side: int) -> np.ndarray:
    """(..., 2) (x, y) pixels of the original image -> the resized image's pixels, float32."""
    old_h, old_w = original_size
    new_h, new_w = preprocess_shape(old_h, old_w, long_side)
    coords = np.array(coords, dtype=np.float64)
    coords[..., 0] = coords[..., 0] * (new_w / old_w)
    coords[..., 1] = coords[..., 1] * (new_h / old_h)
    return coords.astype(np.float32)


def _float_array(name: str, value) -> np.ndarray:
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ZooError(f"{name} must be numbers (pixel coordinates), got {type(value).__name__}") from None
    if not np.isfinite(a).all():
        raise ZooError(f"{name} contains NaN or infinity: pass finite pixel coordinates")
    return a


def check_prompts(image_size: tuple[int, int], point_coords=None, point_labels=None, box=None, mask_input=None,
                  mask_input_size: tuple[int, int] = (256, 256)):
    """Validate one prompt for an image of ``image_size`` = (H, W); return it as numpy arrays.

    -> (coords (N, 2) float64 or None, labels (N,) int32 or None, box (4,) float64 or None,
    mask_input (1, h, w) float32 or None). Any problem is a one-line ZooError.
    """
    height, width = image_size
    if point_coords is None and point_labels is None and box is None and mask_input is None:
        raise ZooError("empty prompt: give points (point_coords + point_labels), a box, or a mask_input")
    if (point_coords is None) != (point_labels is None):
        raise ZooError("point_coords and point_labels go together: give both (labels 1 = foreground, 0 = background)")
    coords = labels = None
    if point_coords is not None:
        coords = _float_array("point_coords", point_coords)
        labels = np.asarray(point_labels)
        if coords.ndim != 2 or coords.shape[1] != 2 or coords.shape[0] == 0:
            raise ZooError(f"point_coords has shape {coords.shape}: expected (N, 2) (x, y) pixels with N >= 1")
        if labels.shape != (coords.shape[0],):
            raise ZooError(f"point_labels has shape {labels.shape}: expected ({coords.shape[0]},), one label per point")
        bad = [v for v in labels.ravel().tolist() if isinstance(v, str) or v not in (0, 1)]
        if bad:
            shown = f"{bad[0]:g}" if isinstance(bad[0], (int, float)) else repr(bad[0])
            raise ZooError(f"point label {shown} is not allowed: use 1 (foreground) or 0 (background)")
        labels = labels.astype(np.int32)
        for x, y in coords:
            if not (0 <= x < width and 0 <= y < height):
                raise ZooError(f"point ({x:g}, {y:g}) is outside the {width}x{height} image: "
                               f"x must be in [0, {width}) and y in [0, {height})")
    if box is not None:
        box = _float_array("box", box)
        if box.shape not in ((4,), (1, 4)):
            raise ZooError(f"box has shape {box.shape}: expected (4,) as x1, y1, x2, y2 pixels")
        box = box.reshape(4)
        x1, y1, x2, y2 = box
        if x2 < x1 or y2 < y1:
            raise ZooError(f"box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) has x2 < x1 or y2 < y1: "
                           "give the top-left corner first (x1, y1, x2, y2)")
        if x1 < 0 or y1 < 0 or x2 > width or y2 > height:
            raise ZooError(f"box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) reaches outside the {width}x{height} image: "
                           f"keep 0 <= x <= {width} and 0 <= y <= {height}")
    if mask_input is not None:
        mask_input = np.asarray(mask_input)
        expected = (1, *mask_input_size)
        if mask_input.shape != expected or mask_input.dtype.kind not in "fiub":
            raise ZooError(f"mask_input has shape {mask_input.shape} ({mask_input.dtype}): expected {expected} "
                           "low-res logits, e.g. low_res[i:i+1] from a previous predict")
        mask_input = mask_input.astype(np.float32)
        if not np.isfinite(mask_input).all():
            raise ZooError("mask_input contains NaN or infinity: pass finite low-res logits")
    return coords, labels, box, mask_input


# Command-line prompts (zoo.run mobilesam, zoo.validate mobilesam) as text.
PROMPT_EXAMPLES = {"--point": "--point 320,240 or --point 100,400,0", "--box": "--box 50,60,400,300"}


def _numbers(text: str, what: str, counts: tuple[int, ...], form: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) not in counts or not np.isfinite(values).all():
        raise ZooError(f"{what} {text!r} is not {form}: give numbers separated by commas, e.g. {PROMPT_EXAMPLES[what]}")
    return values


def parse_point(text: str) -> tuple[float, float, float]:
    """'X,Y' or 'X,Y,LABEL' -> (x, y, label); the label defaults to 1 (foreground).

    The label is checked (0 or 1) with the rest of the prompt, by check_prompts."""
    values = _numbers(text, "--point", (2, 3), "X,Y or X,Y,LABEL")
    return values[0], values[1], values[2] if len(values) == 3 else 1.0


def parse_box(text: str) -> tuple[float, float, float, float]:
    """'X1,Y1,X2,Y2' -> the box (its corners are checked with the rest of the prompt)."""
    x1, y1, x2, y2 = _numbers(text, "--box", (4,), "X1,Y1,X2,Y2")
    return x1, y1, x2, y2


class SamPredictor:
    def __init__(self, sam_model):
        self.model = sam_model
        self.reset_image()

    def reset_image(self) -> None:
        self.features = None
        self.original_size = None
        self.input_size = None

    @property
    def is_image_set(self) -> bool:
        return self.features is not None

    def set_image(self, image, image_format: str = "RGB") -> None:
        """Run the image encoder once: ``image`` is a path, a PIL image or an (H, W, 3) uint8 array.

        ``image_format`` is the channel order of an array (upstream takes only arrays);
        paths and PIL images are always decoded as RGB."""
        if image_format not in ("RGB", "BGR"):
            raise ZooError(f"image_format {image_format!r} is not supported: use 'RGB' or 'BGR'")
        rgb = load_image(image)
        if image_format == "BGR" and isinstance(image, np.ndarray):
            rgb = np.ascontiguousarray(rgb[..., ::-1])
        self.reset_image()
        resized = resize_longest_side(rgb, self.model.img_size)
        features = self.model.encode_image(self.model.preprocess(resized))
        mx.eval(features)
        self.original_size = rgb.shape[:2]
        self.input_size = resized.shape[:2]
        self.features = features

    def get_image_embedding(self) -> mx.array:
        """The image embedding of the current image: (1, 64, 64, 256), NHWC."""
        if not self.is_image_set:
            raise ZooError("no image set: call set_image(image) first")
        return self.features

    def predict(self, point_coords=None, point_labels=None, box=None, mask_input=None,
                multimask_output: bool = True, return_logits: bool = False):
        """Masks for one prompt on the current image.

        point_coords (N, 2) (x, y) pixels of the original image, point_labels (N,)
        1 foreground / 0 background, box (4,) x1, y1, x2, y2, mask_input (1, 256, 256)
        low-res logits of a previous prediction.
        -> (masks (C, H, W) bool, or float32 logits if return_logits; scores (C,);
        low-res logits (C, 256, 256)), C = 3 if multimask_output else 1.
        """
        if not self.is_image_set:
            raise ZooError("no image set: call set_image(image) before predict")
        coords, labels, box, mask_input = check_prompts(
            self.original_size, point_coords, point_labels, box, mask_input,
            self.model.prompt_encoder.mask_input_size)
        long_side = self.model.img_size
        points = boxes = masks = None
        if coords is not None:
            points = (mx.array(apply_coords(coords, self.original_size, long_side)[None]), mx.array(labels[None]))
        if box is not None:
            boxes = mx.array(apply_coords(box.reshape(2, 2), self.original_size, long_side).reshape(1, 4))
        if mask_input is not None:
            masks = mx.array(mask_input[..., None]).astype(self.model.dtype)  # (1, 256, 256, 1) NHWC
        low_res, iou = self.model.decode_prompt(self.features, points, boxes, masks, bool(multimask_output))
        masks = self.model.postprocess_masks(low_res, self.input_size, self.original_size)
        if not return_logits:
            masks = masks > self.model.mask_threshold
        masks, iou, low_res = (np.array(a) for a in (masks[0], iou[0].astype(mx.float32),
                                                        low_res[0].astype(mx.float32)))
        return np.ascontiguousarray(masks.transpose(2, 0, 1)), iou, np.ascontiguousarray(low_res.transpose(2, 0, 1))
