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

from zoo.concurrency import serialized
from zoo.devices import host_memory
from zoo.errors import UsageError, ZooError
from zoo.images import load_image
from zoo.results import TensorArray


PROMPTS_PER_DECODE = 16  # prompts decoded at once: memory bounded whatever the number of boxes
# The full-size masks of one predict call may take at most this share of the machine's memory: they are
# what the prompts ask for, but 10,000 boxes on a 12-megapixel photo are 112 GiB of bool (numpy's
# MemoryError then, or, below the kernel's overcommit limit, an allocation that fills as the masks come)
MASKS_MEMORY_SHARE = 0.5


def preprocess_shape(h: int, w: int, long_side: int) -> tuple[int, int]:
    """(new_h, new_w) with the long side ``long_side``, each rounded half up (upstream's rule), and at
    least one pixel: a strip (1x65535) would round its short side to 0 (upstream fails there)."""
    scale = long_side * 1.0 / max(h, w)
    return max(1, int(h * scale + 0.5)), max(1, int(w * scale + 0.5))


def resize_longest_side(image: np.ndarray, long_side: int) -> np.ndarray:
    """uint8 (H, W, 3) -> uint8 (h, w, 3) with Pillow's bilinear filter, antialiased when shrinking.

    Pillow itself, not a float interpolation: a float bilinear resize rounds a
    fifth of the pixels differently (+-1) from the images upstream's model saw.
    """
    h, w = preprocess_shape(image.shape[0], image.shape[1], long_side)
    return np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))


def resized_coords(coords, original_size: tuple[int, int], long_side: int) -> np.ndarray:
    """(..., 2) (x, y) pixels of the original image -> the resized image's pixels, a new float64 array (upstream's
    numpy ResizeLongestSide computes and returns float64 whatever the input's dtype)."""
    old_h, old_w = original_size
    new_h, new_w = preprocess_shape(old_h, old_w, long_side)
    coords = _float_array("coords", coords)  # a new array
    if coords.ndim == 0 or coords.shape[-1] != 2:
        raise ZooError(f"coords has shape {coords.shape}: expected (..., 2) (x, y) pixels")
    coords[..., 0] = coords[..., 0] * (new_w / old_w)
    coords[..., 1] = coords[..., 1] * (new_h / old_h)
    return coords


def apply_coords(coords, original_size: tuple[int, int], long_side: int) -> np.ndarray:
    """resized_coords as the model's prompts take them, float32."""
    return resized_coords(coords, original_size, long_side).astype(np.float32)


def size_pair(size) -> tuple[int, int] | None:
    """(height, width) as two positive ints from a tuple, list, torch.Size or array of them; None if it is not one."""
    pair = tuple(np.ravel(size).tolist())
    return pair if len(pair) == 2 and all(type(v) is int and v > 0 for v in pair) else None


def check_input_size(original_size: tuple[int, int], input_size: tuple[int, int], long_side: int) -> None:
    """The resized image's size is the original's with the long side ``long_side``: otherwise prompts and masks
    are mapped between frames of different shapes (a stretched mask), e.g. original_size saved as PIL's (w, h)."""
    expected = preprocess_shape(*original_size, long_side)
    if tuple(input_size) != expected:
        raise ZooError(f"input_size {tuple(input_size)} is not original_size {tuple(original_size)} resized to long "
                       f"side {long_side} ({expected}): give both as (height, width) of the same image, the values "
                       "predictor.original_size and predictor.input_size had after set_image")


# point labels: what each means (upstream's prompt encoder)
POINT_LABELS = {1: "1 (foreground)", 0: "0 (background)", -1: "-1 (padding: not a point, its position ignored)"}


def readable(value):
    """A torch tensor as numpy reads it: detached (one that requires grad refuses .numpy(), where upstream's
    predictor takes it), on the CPU, bfloat16 as float32 (numpy has no bfloat16); anything else as given."""
    if isinstance(value, np.ndarray) or not callable(getattr(value, "cpu", None)):
        return value
    if callable(getattr(value, "detach", None)):
        value = value.detach()
    value = value.cpu()
    if str(getattr(value, "dtype", "")) == "torch.bfloat16":
        value = value.float()
    return value.numpy() if callable(getattr(value, "numpy", None)) else value


def _float_array(name: str, value) -> np.ndarray:
    try:
        a = np.asarray(readable(value))
        # complex numbers as float64 dropped their imaginary parts (a warning, a point elsewhere); text was parsed
        a = a.astype(np.float64) if a.dtype.kind not in "cSUV" else None
    except (TypeError, ValueError):
        a = None
    if a is None:
        of = f" of {value.dtype}" if isinstance(getattr(value, "dtype", None), np.dtype) else ""
        raise ZooError(f"{name} must be an array of real numbers (pixel coordinates, as many in each row), got "
                       f"{type(value).__name__}{of}")
    if not np.isfinite(a).all():
        raise ZooError(f"{name} contains NaN or infinity: pass finite pixel coordinates")
    return a


def _array(value, ragged: str) -> np.ndarray:
    """``value`` as numpy (a tensor as ``readable`` reads it); rows of different lengths are one ZooError."""
    try:
        return np.asarray(readable(value))
    except ValueError:
        raise ZooError(ragged) from None


def _labels_array(point_labels) -> np.ndarray:
    return _array(point_labels, f"point_labels must be an array of labels, one per point, as many in each row, got "
                                f"{type(point_labels).__name__}")


def _mask_input_array(mask_input, expected: str) -> np.ndarray:
    return _array(mask_input, f"mask_input must be an array of low-res logits, {expected}, got "
                              f"{type(mask_input).__name__} of rows of different lengths: pass low_res[i:i+1] from a "
                              "previous predict")


def prompt_count(sizes: dict[str, int]) -> int | None:
    """The number of prompts each given kind holds (``sizes``: kind -> its count), None where none is given;
    counts that differ are one ZooError."""
    if len(set(sizes.values())) > 1:
        raise ZooError(f"prompt counts differ ({', '.join(f'{k}: {v}' for k, v in sizes.items())}): "
                       "give one of each per object")
    return next(iter(sizes.values()), None)


def check_prompts(image_size: tuple[int, int], point_coords=None, point_labels=None, box=None, mask_input=None,
                  mask_input_size: tuple[int, int] = (256, 256), as_upstream: bool = False):
    """Validate one prompt for an image of ``image_size`` = (H, W); return it as numpy arrays.

    -> (coords (N, 2) float64 or None, labels (N,) int32 or None, box (4,) float64 or None,
    mask_input (1, h, w) float32 or None). Any problem is a one-line ZooError.
    ``as_upstream`` (the Python API): what upstream's predict takes, as it takes it: a box may reach past
    the image's edges (a detector's box of an object at the border, e.g. GroundingDINO's unclipped ones),
    only one that misses the image is refused; a point may lie anywhere (encoded as given); label -1 is a
    padding point, "not a point" (its position is ignored), which batches prompts of different point
    counts. Otherwise (the command line's typed prompts) points and boxes lie within the image and a
    point is 1 or 0: a typed point outside the image or whose position is ignored is a mistake.
    """
    height, width = image_size
    if point_coords is None and point_labels is None and box is None and mask_input is None:
        raise UsageError("empty prompt: give points (point_coords + point_labels), a box, or a mask_input")
    if (point_coords is None) != (point_labels is None):
        raise UsageError("point_coords and point_labels go together: give both (labels 1 = foreground, 0 = background)")
    coords = labels = None
    if point_coords is not None:
        coords = _float_array("point_coords", point_coords)
        labels = _labels_array(point_labels)
        if coords.ndim != 2 or coords.shape[1] != 2 or coords.shape[0] == 0:
            raise UsageError(f"point_coords has shape {coords.shape}: expected (N, 2) (x, y) pixels with N >= 1")
        if labels.shape != (coords.shape[0],):
            raise UsageError(f"point_labels has shape {labels.shape}: expected ({coords.shape[0]},), one label per point")
        allowed = POINT_LABELS if as_upstream else (1, 0)
        bad = [v for v in labels.ravel().tolist() if isinstance(v, str) or v not in allowed]
        if bad:
            shown = f"{bad[0]:g}" if isinstance(bad[0], (int, float)) else repr(bad[0])
            # upstream's predictor adds no label embedding to 2 and 3, its box corners (only its ONNX
            # decoder reads them): a silently meaningless token there
            corners = ("; a box's corners (labels 2 and 3 in SAM's ONNX model) are given as a box"
                       if bad[0] in (2, 3) else "")
            *others, last = (POINT_LABELS[label] for label in allowed)
            raise UsageError(f"point label {shown} is not allowed: use {', '.join(others)} or {last}{corners}")
        labels = labels.astype(np.int32)
        for x, y in coords:
            if not as_upstream and not (0 <= x < width and 0 <= y < height):
                raise UsageError(f"point ({x:g}, {y:g}) is outside the {width}x{height} image: "
                               f"x must be in [0, {width}) and y in [0, {height})")
    if box is not None:
        box = _float_array("box", box)
        if box.shape not in ((4,), (1, 4)):
            raise UsageError(f"box has shape {box.shape}: expected (4,) as x1, y1, x2, y2 pixels")
        box = box.reshape(4)
        x1, y1, x2, y2 = box
        if x2 < x1 or y2 < y1:
            raise UsageError(f"box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) has x2 < x1 or y2 < y1: "
                           "give the top-left corner first (x1, y1, x2, y2)")
        if as_upstream and (x1 > width or y1 > height or x2 < 0 or y2 < 0):
            raise UsageError(f"box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) lies outside the {width}x{height} image: "
                             "give x1, y1, x2, y2 in the image's pixels (a box may reach past its edges, not miss it)")
        if not as_upstream and (x1 < 0 or y1 < 0 or x2 > width or y2 > height):
            raise UsageError(f"box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) reaches outside the {width}x{height} image: "
                           f"keep 0 <= x <= {width} and 0 <= y <= {height}")
    if mask_input is not None:
        expected = (1, *mask_input_size)
        mask_input = _mask_input_array(mask_input, str(expected))
        if mask_input.shape != expected or mask_input.dtype.kind not in "fiub":
            raise UsageError(f"mask_input has shape {mask_input.shape} ({mask_input.dtype}): expected {expected} "
                           "low-res logits, e.g. low_res[i:i+1] from a previous predict")
        mask_input = mask_input.astype(np.float32)
        if not np.isfinite(mask_input).all():
            raise UsageError("mask_input contains NaN or infinity: pass finite low-res logits")
    return coords, labels, box, mask_input


def check_batched_prompts(image_size: tuple[int, int], point_coords=None, point_labels=None, boxes=None,
                          mask_input=None, mask_input_size: tuple[int, int] = (256, 256),
                          as_upstream: bool = False):
    """Validate N prompts (each as check_prompts does); -> coords (N, P, 2), labels (N, P), boxes (N, 4),
    mask_input (N, 1, h, w), each None when not given."""
    if (point_coords is None) != (point_labels is None):
        raise ZooError("point_coords and point_labels go together: give both (labels 1 = foreground, 0 = background)")
    coords = labels = None
    if boxes is not None:
        boxes = _float_array("boxes", boxes)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise ZooError(f"boxes has shape {boxes.shape}: expected (N, 4) as x1, y1, x2, y2 pixels")
    if point_coords is not None:
        coords = _float_array("point_coords", point_coords)
        labels = _labels_array(point_labels)
        if coords.ndim != 3 or coords.shape[2] != 2 or coords.shape[1] == 0:
            raise ZooError(f"point_coords has shape {coords.shape}: expected (N, P, 2) for N prompts of P points")
        if labels.shape != coords.shape[:2]:
            raise ZooError(f"point_labels has shape {labels.shape}: expected {coords.shape[:2]}, one label per point")
    if mask_input is not None:
        mask_input = _mask_input_array(mask_input, f"(N, 1, {mask_input_size[0]}, {mask_input_size[1]})")
        if mask_input.ndim != 4:
            raise ZooError(f"mask_input has shape {mask_input.shape}: expected (N, 1, {mask_input_size[0]}, "
                           f"{mask_input_size[1]}) for N prompts")
    sizes = {name: len(a) for name, a in (("boxes", boxes), ("point_coords", coords), ("mask_input", mask_input))
             if a is not None}
    if prompt_count(sizes) is None:
        raise ZooError("empty prompt: give boxes (N, 4) and/or point_coords (N, P, 2) with point_labels (N, P)")
    checked = [check_prompts(image_size, None if coords is None else coords[i], None if labels is None else labels[i],
                             None if boxes is None else boxes[i], None if mask_input is None else mask_input[i],
                             mask_input_size, as_upstream)
               for i in range(next(iter(sizes.values())))]
    if coords is not None:
        coords = coords.reshape(-1, *coords.shape[1:])
        labels = np.array([c[1] for c in checked], np.int32).reshape(coords.shape[:2])
    if mask_input is not None:
        mask_input = np.array([c[3] for c in checked], np.float32).reshape(-1, 1, *mask_input_size)
    return coords, labels, boxes, mask_input


# Command-line prompts (zoo.run mobilesam, zoo.validate mobilesam) as text.
PROMPT_EXAMPLES = {"--point": "--point 320,240 or --point 100,400,0", "--box": "--box 50,60,400,300"}


def _numbers(text: str, what: str, counts: tuple[int, ...], form: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) not in counts or not np.isfinite(values).all():
        raise UsageError(f"{what} {text!r} is not {form}: give numbers separated by commas, e.g. {PROMPT_EXAMPLES[what]}")
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


def past_memory_share(need: int) -> str | None:
    """Where ``need`` bytes pass MASKS_MEMORY_SHARE of the machine's memory, how much that is, for an error raised
    before anything is allocated ("more than 50% of this machine's 15.6 GiB"); else None."""
    have = host_memory()
    if need > MASKS_MEMORY_SHARE * have:
        return f"more than {MASKS_MEMORY_SHARE:.0%} of this machine's {have / 2**30:.3g} GiB"
    return None


def check_outputs_memory(n: int, channels: int, low_res_size: tuple[int, int], size: tuple[int, int],
                         mask_dtype=None) -> None:
    """Refuse outputs larger than MASKS_MEMORY_SHARE of the machine's memory, before anything runs: the low-res
    logits (N, C, 256, 256) float32 (a 4x4 image's masks are 48 bytes, their logits 768 KiB), and the (N, C, H, W)
    masks of ``mask_dtype`` where asked."""
    low_res = n * channels * low_res_size[0] * low_res_size[1] * np.dtype(np.float32).itemsize
    masks = 0 if mask_dtype is None else n * channels * size[0] * size[1] * np.dtype(mask_dtype).itemsize
    if past := past_memory_share(low_res + masks):
        what = (f"of {size[1]}x{size[0]} take {(low_res + masks) / 2**30:.3g} GiB with their low-res logits" if masks
                else f"take {low_res / 2**30:.3g} GiB of low-res logits ({low_res_size[1]}x{low_res_size[0]} float32)")
        raise ZooError(f"{n} prompt(s) x {channels} mask(s) {what}, {past}: pass fewer prompts per call"
                       + (", or predict_low_res(...) then mask_crop(low_res[i]) one mask at a time" if masks else ""))


# The mask decoder's token self-attention holds a score for each pair of a prompt's tokens (its points, box corners
# and 5 output tokens): this many bytes a pair (the CPU's path measured 7.0-8.4 on 5,000-30,000 points, 2026-12-01;
# at 4 a pair, 55,000 points passed the check and needed ~23 GiB). SAM takes a few points per object; a mask's pixels
# passed as points (np.argwhere) are quadratic: 12,000 took 1.4 GB.
ATTENTION_BYTES_PER_PAIR = 8


def check_prompt_tokens_memory(prompts: int, tokens: int, points: int) -> None:
    """Refuse prompts of ``tokens`` tokens each (``points`` of them points), ``prompts`` decoded at once, whose
    attention scores alone take more than MASKS_MEMORY_SHARE of the machine's memory, before anything runs."""
    need = prompts * tokens ** 2 * ATTENTION_BYTES_PER_PAIR
    if past := past_memory_share(need):
        raise ZooError(f"{points:,} points per prompt: the mask decoder's attention between them takes at least "
                       f"{need / 2**30:.3g} GiB ({prompts} prompt(s) at once), {past}: give a few points per object "
                       "(SAM's prompts), a region as a box or as mask_input, not its pixels")


class ResizeLongestSide:
    """upstream's ``segment_anything.utils.transforms.ResizeLongestSide`` on numpy: original pixels ->
    the resized image's, the frame ``predict_torch`` takes. The ``_torch`` forms take anything numpy
    reads (a list, a CPU tensor) and return TensorArrays, which answer ``.to(device)`` as a tensor."""

    def __init__(self, target_length: int):
        self.target_length = target_length

    def apply_image(self, image: np.ndarray) -> np.ndarray:
        """(H, W, 3) uint8 -> resized, a writable array as upstream's (torch.as_tensor of it warns otherwise); other
        images as set_image takes them (floats in [0, 1] as upstream's to_pil_image, grey), or one error."""
        return np.array(resize_longest_side(load_image(image), self.target_length))

    def apply_coords(self, coords, original_size: tuple[int, int]) -> np.ndarray:
        """(..., 2) (x, y) -> (..., 2) float64, as upstream's numpy form."""
        return resized_coords(coords, tuple(original_size), self.target_length)

    def apply_boxes(self, boxes, original_size: tuple[int, int]) -> np.ndarray:
        """(B, 4) x1, y1, x2, y2 -> (B, 4) float64, as upstream's numpy form."""
        boxes = _float_array("boxes", boxes)
        if boxes.ndim == 0 or boxes.shape[-1] != 4:
            raise ZooError(f"boxes has shape {boxes.shape}: expected (B, 4) as x1, y1, x2, y2 pixels")
        return self.apply_coords(boxes.reshape(-1, 2, 2), original_size).reshape(-1, 4)

    def apply_coords_torch(self, coords, original_size: tuple[int, int]) -> TensorArray:
        """The same values in float32, as upstream's torch form (torch.float)."""
        return self.apply_coords(coords, original_size).astype(np.float32).view(TensorArray)

    def apply_boxes_torch(self, boxes, original_size: tuple[int, int]) -> TensorArray:
        return self.apply_boxes(boxes, original_size).astype(np.float32).view(TensorArray)

    @staticmethod
    def get_preprocess_shape(oldh: int, oldw: int, long_side_length: int) -> tuple[int, int]:
        return preprocess_shape(oldh, oldw, long_side_length)


class ImageSize:
    """A predictor's (height, width) attribute, plain as upstream's and checked when assigned (an app that
    restores a cached state assigns it): two positive ints, or None."""

    def __init__(self, doc: str):
        self.__doc__ = doc

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, predictor, owner=None):
        return self if predictor is None else predictor.__dict__.get(self.name)

    def __set__(self, predictor, size) -> None:
        pair = None if size is None else size_pair(size)
        if size is not None and pair is None:
            raise ZooError(f"{self.name} {size!r} is not an image's (height, width) in pixels: restore the value "
                           f"predictor.{self.name} had after set_image")
        predictor.__dict__[self.name] = pair


class SamPredictor:
    def __init__(self, sam_model):
        self.model = sam_model
        self.reset_image()

    @property
    def transform(self) -> ResizeLongestSide:
        """upstream's ``predictor.transform``: the model's resize of the image and prompts."""
        return ResizeLongestSide(self.model.img_size)

    @property
    def device(self) -> str:
        """Where predict_torch's prompts and results live: the model's (host memory)."""
        return self.model.device

    def reset_image(self) -> None:
        """upstream's: no image set, no embedding (and no sizes: predict refuses stale ones)."""
        self.is_image_set = False
        self.features = None
        self.original_size = None
        self.input_size = None

    # The image's state, upstream's plain attributes: an app that caches embeddings saves features,
    # original_size and input_size after set_image, and restores them later (reset_image(); assign the three;
    # is_image_set = True) without running the encoder.

    @property
    def features(self) -> TensorArray | None:
        """upstream's ``predictor.features``: the image embedding, (1, 256, 64, 64) NCHW float32 as a
        TensorArray (``.cpu().numpy()`` as a tensor's), None without an image. Assigning one (a cached
        embedding: numpy, a tensor, anything with ``.cpu().numpy()`` or ``__array__``) checks it and converts
        it once to the model's NHWC array, ``features_nhwc``, what the decoder reads."""
        if self._features is None:
            return None
        nchw = np.array(self._features.astype(mx.float32)).transpose(0, 3, 1, 2)
        return np.ascontiguousarray(nchw).view(TensorArray)

    @features.setter
    def features(self, embedding) -> None:
        self._features = None if embedding is None else self._model_features(embedding)

    @property
    def features_nhwc(self) -> mx.array | None:
        """The model's own layout of the embedding, (1, 64, 64, 256) MLX in its dtype: what ``decode`` takes."""
        return self._features

    original_size = ImageSize("upstream's: the image's (height, width), the size of predict's masks")
    input_size = ImageSize("upstream's: (height, width) of the image resized to the model's input (long side img_size)")

    def _model_features(self, embedding) -> mx.array:
        """An assigned NCHW embedding -> the model's NHWC MLX array in its dtype, or one error naming the problem."""
        expected = (1, self.model.prompt_encoder.embed_dim, *self.model.prompt_encoder.image_embedding_size)
        try:
            array = np.asarray(readable(embedding))  # a tensor, on any device
        except (TypeError, ValueError, RuntimeError, AttributeError) as e:
            raise ZooError(f"features: a {type(embedding).__name__} is not readable as an array ({e}): assign "
                           f"the {expected} float32 embedding that predictor.features gave") from None
        if array.shape != expected or array.dtype.kind != "f":
            hint = (" (a channels-last array: .transpose(0, 3, 1, 2))"
                    if array.shape == (expected[0], *expected[2:], expected[1]) else "")
            raise ZooError(f"features has shape {array.shape} ({array.dtype}): expected {expected} floats, NCHW, "
                           f"the embedding that predictor.features gave after set_image for this model{hint}")
        features = mx.array(array.astype(np.float32).transpose(0, 2, 3, 1)).astype(self.model.dtype)
        if not mx.isfinite(features).all().item():
            raise ZooError(f"features contains NaN or infinity (in the model's {self.model.dtype}): assign the "
                           "embedding that predictor.features gave after set_image")
        mx.eval(features)
        return features

    def _check_image_set(self) -> None:
        """predict's precondition, each way it can fail as one line: no image, or a restored state missing a part."""
        if not self.is_image_set:
            raise ZooError("no image set: call set_image(image) before predict (restoring a cached embedding: "
                           "assign features, original_size and input_size, then is_image_set = True)")
        missing = [name for name, value in (("features", self._features), ("original_size", self.original_size),
                                            ("input_size", self.input_size)) if value is None]
        if missing:
            raise ZooError(f"is_image_set is True but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                           "None: call set_image(image), or assign the values saved after set_image")
        check_input_size(self.original_size, self.input_size, self.model.img_size)

    @serialized(lambda predictor: predictor.model)
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
        self._encode(resize_longest_side(rgb, self.model.img_size), rgb.shape[:2])

    @serialized(lambda predictor: predictor.model)
    def set_torch_image(self, transformed_image, original_image_size: tuple[int, int]) -> None:
        """upstream's: an image already resized by ``self.transform.apply_image``, channels first,
        (1, 3, H, W) with max(H, W) the model's input size (a CPU tensor, or anything numpy reads), and the
        original image's (height, width), the size predict's masks take."""
        image = np.asarray(readable(transformed_image))
        size = self.model.img_size
        if (image.ndim != 4 or image.shape[:2] != (1, 3) or max(image.shape[2:]) != size
                or image.dtype.kind not in "uif"):
            raise ZooError(f"set_torch_image takes (1, 3, H, W) pixel values with max(H, W) = {size} "
                           f"(transform.apply_image's image, channels first, [None]), got {image.shape} {image.dtype}")
        if not np.isfinite(image).all():
            raise ZooError("set_torch_image: the image contains NaN or infinity: pass pixel values 0-255")
        original = size_pair(original_image_size)
        if original is None:
            raise ZooError(f"original_image_size {original_image_size!r} is not the image's (height, width): "
                           "pass image.shape[:2] of the image before apply_image")
        check_input_size(original, image.shape[2:], size)
        self.reset_image()
        self._encode(image[0].transpose(1, 2, 0), original)

    def _encode(self, resized: np.ndarray, original_size: tuple[int, int]) -> None:
        """The image encoder on the resized (h, w, 3) image; the sizes that predict maps prompts and masks by."""
        features = self.model.encode_image(self.model.preprocess(resized))
        mx.eval(features)
        self.original_size = original_size
        self.input_size = resized.shape[:2]
        self._features = features
        self.is_image_set = True

    def get_image_embedding(self) -> TensorArray:
        """upstream's: the current image's embedding, (1, 256, 64, 64) NCHW float32, as a TensorArray
        (``.cpu().numpy()`` as a tensor's), the layout that SAM's ONNX decoder and other tools read.
        ``self.features`` as upstream's is. The model's own NHWC MLX array is ``self.features_nhwc``."""
        self._check_image_set()
        return self.features

    @serialized(lambda predictor: predictor.model)
    def predict(self, point_coords=None, point_labels=None, box=None, mask_input=None,
                multimask_output: bool = True, return_logits: bool = False, boxes=None):
        """Masks for one prompt, or for N prompts in one decoder call, on the current image.

        One prompt: point_coords (P, 2) (x, y) pixels of the original image (inside it or not, as
        upstream), point_labels (P,) 1 foreground / 0 background / -1 padding (not a point), box (4,)
        x1, y1, x2, y2, mask_input (1, 256, 256) low-res logits of a previous prediction.
        -> (masks (C, H, W) bool, or float32 logits if return_logits; scores (C,);
        low-res logits (C, 256, 256)), C = 3 if multimask_output else 1.

        N prompts (what a detector-to-SAM pipeline sends; upstream's ``predict_torch``):
        ``boxes`` (N, 4) and/or point_coords (N, P, 2) with point_labels (N, P), optionally
        mask_input (N, 1, 256, 256) -> masks (N, C, H, W), scores (N, C), low-res (N, C, 256, 256).
        N = 0 gives empty arrays of those shapes.
        """
        batched, masks, iou, low_res = self._predict(point_coords, point_labels, box, mask_input, multimask_output,
                                                     boxes, np.float32 if return_logits else bool)
        return (masks, iou, low_res) if batched else (masks[0], iou[0], low_res[0])

    @serialized(lambda predictor: predictor.model)
    def predict_torch(self, point_coords, point_labels, boxes=None, mask_input=None, multimask_output: bool = True,
                      return_logits: bool = False) -> tuple[TensorArray, TensorArray, TensorArray]:
        """upstream's: B prompts already in the resized image's pixels (``self.transform.apply_coords`` /
        ``apply_boxes``): point_coords (B, N, 2) with point_labels (B, N), or None; boxes (B, 4); mask_input
        (B, 1, 256, 256) -> masks (B, C, H, W) bool (float32 logits if return_logits), scores (B, C),
        low-res logits (B, C, 256, 256), as TensorArrays (numpy that answers ``.cpu().numpy()``)."""
        _, masks, iou, low_res = self._predict(point_coords, point_labels, None, mask_input, multimask_output, boxes,
                                               np.float32 if return_logits else bool, resized_frame=True)
        return masks.view(TensorArray), iou.view(TensorArray), low_res.view(TensorArray)

    @serialized(lambda predictor: predictor.model)
    def predict_low_res(self, point_coords=None, point_labels=None, box=None, mask_input=None,
                        multimask_output: bool = True, boxes=None):
        """predict's scores and low-res logits (the same prompts, checks and shapes) without the
        full-size masks: make those one at a time with ``mask_crop``."""
        batched, _, iou, low_res = self._predict(point_coords, point_labels, box, mask_input, multimask_output, boxes)
        return (iou, low_res) if batched else (iou[0], low_res[0])

    def _predict(self, point_coords, point_labels, box, mask_input, multimask_output: bool, boxes,
                 mask_dtype=None, resized_frame: bool = False) -> tuple:
        """(batched, masks (N, C, H, W) of ``mask_dtype`` or None without one, scores (N, C), low-res
        (N, C, 256, 256)): the prompts checked, then decoded a chunk at a time, each chunk's masks made
        from the decoder's own logits. ``resized_frame``: N prompts in the resized image's pixels
        (predict_torch's), checked against its size and not scaled again."""
        self._check_image_set()
        try:
            points_ndim = np.ndim(point_coords)
        except ValueError:  # ragged rows: check_prompts names them
            points_ndim = None
        batched = resized_frame or boxes is not None or points_ndim == 3
        frame = self.input_size if resized_frame else self.original_size
        if batched:
            if box is not None:
                raise ZooError("give box (one prompt) or boxes (N prompts), not both" if boxes is not None else
                               f"point_coords of shape {np.shape(point_coords)} are N prompts (N, P, 2): give their "
                               "boxes as boxes=(N, 4), or one prompt's points (P, 2) with box")
            coords, labels, boxes, mask_input = check_batched_prompts(
                frame, point_coords, point_labels, boxes, mask_input, self.model.prompt_encoder.mask_input_size,
                as_upstream=True)
        else:
            coords, labels, box, mask_input = check_prompts(
                frame, point_coords, point_labels, box, mask_input, self.model.prompt_encoder.mask_input_size,
                as_upstream=True)
            coords = None if coords is None else coords[None]
            labels = None if labels is None else labels[None]
            boxes = None if box is None else box[None]
            mask_input = None if mask_input is None else mask_input[None]
        n = next(a.shape[0] for a in (coords, boxes, mask_input) if a is not None)
        channels = 3 if multimask_output else 1
        if coords is not None:  # the decoder's tokens: points (a padding point without a box), corners, outputs
            tokens = coords.shape[1] + (1 if boxes is None else 2) + 1 + self.model.mask_decoder.num_mask_tokens
            check_prompt_tokens_memory(min(n, PROMPTS_PER_DECODE), tokens, coords.shape[1])
        low_res_size = self.model.prompt_encoder.mask_input_size
        check_outputs_memory(n, channels, low_res_size, self.original_size, mask_dtype)
        masks = None if mask_dtype is None else np.empty((n, channels, *self.original_size), mask_dtype)
        iou, low_res = np.empty((n, channels), np.float32), np.empty((n, channels, *low_res_size), np.float32)
        if n == 0:
            return batched, masks, iou, low_res
        transform, original = self.transform, self.original_size
        with np.errstate(over="ignore"):  # a coordinate past float32's range: refused just below
            if coords is not None:
                coords = (coords if resized_frame else transform.apply_coords(coords, original)).astype(np.float32)
            if boxes is not None:
                boxes = (boxes if resized_frame else transform.apply_boxes(boxes, original)).astype(np.float32)
        if any(a is not None and not np.isfinite(a).all() for a in (coords, boxes)):
            # points may lie outside the image, but one this far is no position: upstream's masks are NaN
            raise ZooError("a point or box lies too far outside the image: scaled to the model's input, its "
                           "coordinates pass float32's range (3.4e38); give pixel coordinates near the image")
        for start in range(0, n, PROMPTS_PER_DECODE):  # the decoder takes ~50 MB per prompt
            part = slice(start, start + PROMPTS_PER_DECODE)
            chunk = (None if a is None else a[part] for a in (coords, labels, boxes, mask_input))
            part_low_res, part_iou = self.decode(*chunk, multimask_output)
            if masks is not None:
                self.model.masks_into(part_low_res, self.input_size, masks[part])
            low_res[part] = np.array(part_low_res.astype(mx.float32).transpose(0, 3, 1, 2))
            iou[part] = np.array(part_iou.astype(mx.float32))
        return batched, masks, iou, low_res

    @serialized(lambda predictor: predictor.model)
    def mask_crop(self, low_res: np.ndarray) -> tuple[int, int, np.ndarray]:
        """One mask's low-res logits (256, 256) from predict_low_res -> (top, left, crop): its full-size
        mask (predict's) is the bool ``crop`` at rows top.., columns left.., false elsewhere (Sam.mask_crop)."""
        self._check_image_set()
        wanted = "mask_crop takes one mask's low-res logits, 2-D, got"
        fix = "pass low_res[i] (or low_res[k, i]) from predict_low_res"
        low_res = _array(low_res, f"{wanted} rows of different lengths: {fix}")
        if low_res.ndim != 2 or low_res.dtype.kind not in "fiub":  # (1, 256, 256) failed inside the resize
            raise ZooError(f"{wanted} {low_res.shape} ({low_res.dtype}): {fix}")
        return self.model.mask_crop(mx.array(low_res.astype(np.float32)[None, ..., None]), self.input_size,
                                    self.original_size)

    def decode(self, coords=None, labels=None, boxes=None, mask_input=None, multimask_output: bool = True):
        """The prompt encoder + mask decoder on N prompts already in the resized image's pixels.

        coords (N, P, 2) float32 with labels (N, P), boxes (N, 4), mask_input (N, 1, 256, 256);
        no checks. -> (low-res logits (N, 256, 256, C), IoU predictions (N, C)) as MLX arrays.
        """
        points = None if coords is None else (mx.array(coords, mx.float32), mx.array(labels, mx.int32))
        boxes = None if boxes is None else mx.array(boxes, mx.float32)
        masks = None
        if mask_input is not None:  # (N, 1, 256, 256) -> (N, 256, 256, 1) NHWC
            masks = mx.array(np.asarray(mask_input, np.float32).transpose(0, 2, 3, 1)).astype(self.model.dtype)
        return self.model.decode_prompt(self._features, points, boxes, masks, bool(multimask_output))
