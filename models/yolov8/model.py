"""YOLOv8 n/s/m/l/x detection (ultralytics layout) in MLX, NHWC, with ultralytics' pre/post-processing.

Attribute names mirror ultralytics' DetectionModel state dict (model.0.conv.weight,
model.2.m.0.cv1.bn.running_var, model.22.cv2.0.2.weight, model.22.dfl.conv.weight, ...)
so checkpoints load by name. The network is built from the table of
ultralytics/cfg/models/v8/yolov8.yaml and the variant's scale, as ultralytics' parse_model does.

``det(source, **options)`` is ``det.predict`` (ultralytics' ``model("bus.jpg")``).
Raw call: ``det(x)`` with x an mx.array (N, H, W, 3) RGB in [0, 1], H and W multiples of 32
-> (N, A, 4 + 80): box centre x, y, width, height in input pixels, then the 80
class scores; anchors ordered P3 (stride 8), P4 (16), P5 (32), each row-major.
Upstream returns the transpose, (N, 84, A).

``det.predict(source)``: letterbox, the network, confidence filter, class-aware
NMS on the GPU, boxes mapped back to the original image (predict.py, ops.py).
"""
from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import mlx.core as mx
import mlx.nn as nn

from zoo.compiled import CompiledForward, Stage, fold_in_conv_dtype, folded, folding
from zoo.devices import as_model_input
from zoo.errors import ZooError
from zoo.kernels import box_decode, sppf_maxpool
from zoo.models.layers import BatchNorm, Conv2d, Sequential, conv_bn, sigmoid, silu

from .ops import STRIDE, resolve_classes
from .predict import PREDICT_OPTIONS, predict

# yolov8.yaml scales: depth multiple, width multiple, max channels.
SCALES = {
    "n": (0.33, 0.25, 1024),
    "s": (0.33, 0.50, 1024),
    "m": (0.67, 0.75, 768),
    "l": (1.00, 1.00, 512),
    "x": (1.00, 1.25, 512),
}

# yolov8.yaml, one row per layer: inputs (-1 = previous layer), repeats, module, args
# (output channels before width scaling first).
ARCH = (
    (-1, 1, "Conv", (64, 3, 2)),  # 0 P1/2
    (-1, 1, "Conv", (128, 3, 2)),  # 1 P2/4
    (-1, 3, "C2f", (128, True)),  # 2
    (-1, 1, "Conv", (256, 3, 2)),  # 3 P3/8
    (-1, 6, "C2f", (256, True)),  # 4
    (-1, 1, "Conv", (512, 3, 2)),  # 5 P4/16
    (-1, 6, "C2f", (512, True)),  # 6
    (-1, 1, "Conv", (1024, 3, 2)),  # 7 P5/32
    (-1, 3, "C2f", (1024, True)),  # 8
    (-1, 1, "SPPF", (1024, 5)),  # 9
    (-1, 1, "Upsample", ()),  # 10
    ((-1, 6), 1, "Concat", ()),  # 11: with backbone P4
    (-1, 3, "C2f", (512, False)),  # 12
    (-1, 1, "Upsample", ()),  # 13
    ((-1, 4), 1, "Concat", ()),  # 14: with backbone P3
    (-1, 3, "C2f", (256, False)),  # 15: P3 output
    (-1, 1, "Conv", (256, 3, 2)),  # 16
    ((-1, 12), 1, "Concat", ()),  # 17: with head P4
    (-1, 3, "C2f", (512, False)),  # 18: P4 output
    (-1, 1, "Conv", (512, 3, 2)),  # 19
    ((-1, 9), 1, "Concat", ()),  # 20: with head P5
    (-1, 3, "C2f", (1024, False)),  # 21: P5 output
    ((15, 18, 21), 1, "Detect", ()),  # 22
)
STRIDES = (8, 16, 32)
# layer -> the earlier layers whose outputs it reads besides its predecessor's
READS = tuple(frozenset() if inputs == -1 else frozenset(j for j in inputs if j != -1) for inputs, *_ in ARCH)
READ_LATER = frozenset().union(*READS)
# The compiled forward's stages begin at these layers (zoo.compiled.Stage): the GPU runs one while
# the host builds the next. Each begins after a layer whose output is a map (not Upscaled or Parts).
STAGE_STARTS = (3, 7, 13, 19)
# Stages pay where the GPU's work outlasts the host's building of the next stage's graph: on an
# H100 from about 60 GFLOP a call in float32 (YOLOv8s b4, YOLOv8n b8 at 640) and 300 in float16
# (YOLOv8s b16); below that each stage's ~0.1 ms of host time is lost (docs/speed-gpu.md).
STAGED_FROM_GFLOP = {True: 60.0, False: 300.0}  # keyed by "float32"
REG_MAX = 16  # DFL bins per box side


class Conv(nn.Module):
    """Conv2d (no bias, 'same' padding) + BatchNorm (eps 1e-3) + SiLU."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1):
        super().__init__()
        self.conv = Conv2d(c1, c2, k, stride=s, padding=k // 2, bias=False)
        self.bn = BatchNorm(c2, eps=1e-3, momentum=0.03)

    def __call__(self, x: mx.array) -> mx.array:
        return conv_bn(self.conv, self.bn, x, activation="silu")

    def of_parts(self, parts: Parts) -> mx.array:
        """This 1x1 Conv of the channel concatenation of ``parts``, in a compiled forward: one matmul
        per part with its rows of the folded weight (``split_by_input``), the products added up; a
        half-size part's product is added to each pixel of its 2x2 block (nearest upsampling)."""
        fold = folded(self.conv)
        full, half = None, []
        for part, weight in zip(parts, fold["parts"]):
            x = part.half if isinstance(part, Upscaled) else part
            y = (x.reshape(-1, weight.shape[0]) @ weight).reshape(*x.shape[:-1], weight.shape[1])
            if isinstance(part, Upscaled):
                half.append(y)
            else:
                full = y if full is None else full + y
        n, h, w, c = full.shape
        for y in half:
            full = (full.reshape(n, h // 2, 2, w // 2, 2, c) + y[:, :, None, :, None, :]).reshape(n, h, w, c)
        return silu(full + fold["bias"])


def conv_flop_per_pixel(layers: list[nn.Module]) -> float:
    """The convolutions' FLOPs (two per multiply-add) per input pixel: each layer's at its output's
    stride, the Detect head's branches at their levels'."""
    strides, total = [], 0.0
    for (inputs, _, kind, args), layer in zip(ARCH, layers):
        before = strides[inputs if inputs == -1 else inputs[0]] if strides else 1
        stride = before * args[2] if kind == "Conv" else before // 2 if kind == "Upsample" else before
        strides.append(stride)
        parts = [(b[str(i)], s) for i, s in enumerate(STRIDES) for b in (layer.cv2, layer.cv3)] \
            if kind == "Detect" else [(layer, stride)]
        total += sum(2 * c.weight.size / s**2 for part, s in parts for c in part.modules() if isinstance(c, nn.Conv2d))
    return total


def split_by_input(sizes: tuple[int, ...]):
    """A FoldedConvs derivation for a 1x1 Conv after a Concat of parts of ``sizes`` channels: the
    default fold's bias, and its weight as one (in, out) matrix per part (Conv.of_parts), which
    replaces the whole weight (the compiled forward never reads it)."""
    def make(conv, bn) -> dict[str, mx.array]:
        arrays = fold_in_conv_dtype(conv, bn)
        weight = arrays.pop("weight")
        matrix = weight.reshape(weight.shape[0], -1).T
        starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        # contiguous once here: a row slice of the transposed weight is a strided view
        arrays["parts"] = [mx.contiguous(matrix[a:b]) for a, b in zip(starts, starts[1:])]
        return arrays
    return make


def dfl_bins(conv, _) -> dict[str, mx.array]:
    """A FoldedConvs derivation: the DFL's bin values as zoo.kernels.box_decode reads them, flat and
    float32, made once per weight change instead of reshaped and cast in every compiled forward."""
    return {"bins": conv.weight.reshape(-1).astype(mx.float32)}


class Upscaled(NamedTuple):
    """Upsample's output in a compiled forward: the map at half size, to be upsampled by the Conv
    that reads it (Conv.of_parts)."""

    half: mx.array


class Parts(tuple):
    """Concat's output in a compiled forward: the maps, to be read apart by the 1x1 Conv after it."""


class Upsample(nn.Upsample):
    """nn.Upsample(scale_factor=2, mode="nearest"). In a compiled forward it hands on its input
    (Upscaled) for C2f's 1x1 cv1 after the Concat to apply first, at a quarter of the pixels (a 1x1
    convolution commutes with nearest upsampling): neither the upsampled nor the concatenated map
    is made."""

    def __init__(self):
        super().__init__(scale_factor=2.0, mode="nearest")

    def __call__(self, x: mx.array) -> mx.array | Upscaled:
        return Upscaled(x) if folding() else super().__call__(x)


class Bottleneck(nn.Module):
    """Two 3x3 Convs, with the input added back when ``shortcut`` and the widths match."""

    def __init__(self, c1: int, c2: int, shortcut: bool):
        super().__init__()
        self.cv1 = Conv(c1, c2, 3)
        self.cv2 = Conv(c2, c2, 3)
        self.add = shortcut and c1 == c2

    def shortcut(self, x: mx.array) -> mx.array:
        return x

    def __call__(self, x: mx.array) -> mx.array:
        y = self.cv2(self.cv1(x))
        return y + self.shortcut(x) if self.add else y


class C2f(nn.Module):
    """cv1 splits into two halves; each bottleneck extends the list from the last one; cv2 fuses all."""

    def __init__(self, c1: int, c2: int, n: int, shortcut: bool):
        super().__init__()
        c = c2 // 2
        self.cv1 = Conv(c1, 2 * c, 1)
        self.cv2 = Conv((2 + n) * c, c2, 1)
        self.m = Sequential(*(Bottleneck(c, c, shortcut) for _ in range(n)))

    def __call__(self, x: mx.array | Parts) -> mx.array:
        ys = mx.split(self.cv1.of_parts(x) if isinstance(x, Parts) else self.cv1(x), 2, axis=-1)
        for bottleneck in self.m.children_in_order():
            ys.append(bottleneck(ys[-1]))
        return self.cv2(mx.concatenate(ys, axis=-1))


class SPPF(nn.Module):
    """cv1, three chained k x k max-pools (one kernel), all four concatenated, cv2."""

    def __init__(self, c1: int, c2: int, k: int):
        super().__init__()
        c = c1 // 2
        self.cv1 = Conv(c1, c, 1)
        self.cv2 = Conv(4 * c, c2, 1)
        self.k = k

    def __call__(self, x: mx.array) -> mx.array:
        x = self.cv1(x)
        return self.cv2(mx.concatenate([x, *sppf_maxpool(x, self.k)], axis=-1))


class Concat(nn.Module):
    """Channel concatenation; in a compiled forward the parts, for the C2f after it (Conv.of_parts)."""

    def __call__(self, *xs: mx.array | Upscaled) -> mx.array | Parts:
        return Parts(xs) if folding() else mx.concatenate(xs, axis=-1)


class DFL(nn.Module):
    """Distribution focal loss integral: each box side is the softmax-weighted sum of 16 bins.

    The bin values are the checkpoint's conv weight (arange(16) in trained models).
    Input and output keep upstream's layout, (N, 4 * 16, A) -> (N, 4, A).
    """

    def __init__(self, bins: int = REG_MAX):
        super().__init__()
        self.conv = nn.Conv2d(bins, 1, 1, bias=False)
        self.bins = bins

    def __call__(self, x: mx.array) -> mx.array:
        n, _, a = x.shape
        # (N, 4 sides, A, bins): NHWC for the 1x1 conv, bins as channels
        p = mx.softmax(x.reshape(n, 4, self.bins, a).swapaxes(2, 3), axis=-1)
        return self.conv(p).reshape(n, 4, a)


def head_branch(c1: int, c: int, c_out: int) -> Sequential:
    return Sequential(Conv(c1, c, 3), Conv(c, c, 3), Conv2d(c, c_out, 1))


class Detect(nn.Module):
    """Per level: box branch (cv2: 4 x 16 DFL logits) and class branch (cv3: nc logits); then decode."""

    def __init__(self, nc: int, ch: tuple[int, ...]):
        super().__init__()
        self.nc = nc
        c2 = max(16, ch[0] // 4, REG_MAX * 4)
        c3 = max(ch[0], min(nc, 100))
        self.cv2 = Sequential(*(head_branch(c, c2, 4 * REG_MAX) for c in ch))
        self.cv3 = Sequential(*(head_branch(c, c3, nc) for c in ch))
        self.dfl = DFL(REG_MAX)

    def __call__(self, *levels: mx.array) -> mx.array:
        boxes, classes = [], []
        for i, x in enumerate(levels):  # upstream's order: a level's box branch, then its class branch
            boxes.append(self.cv2[str(i)](x))
            classes.append(self.cv3[str(i)](x))
        if folding() and x.dtype == mx.float16:
            # a compiled float16 forward (bound by the host's encoding): one kernel reads the maps
            # where they lie, for some 40 ops. Not in float32: there the kernel's graph raised the
            # b16 peak (YOLOv8s 731-825 -> 1188-1273 MiB, H100, 2026-11-27), MLX ordering the six
            # branches feeding it side by side; bfloat16 was not measured
            return box_decode.decode(boxes, classes, folded(self.dfl.conv)["bins"], STRIDES)
        n = levels[0].shape[0]
        box = mx.concatenate([b.reshape(n, -1, 4 * REG_MAX) for b in boxes], axis=1)
        dist = self.dfl(box.swapaxes(1, 2)).swapaxes(1, 2)  # (N, A, 4): l, t, r, b
        xywh = box_decode.boxes_from_distances(dist, [x.shape[1:3] for x in levels], STRIDES)
        return mx.concatenate([xywh, sigmoid(mx.concatenate([c.reshape(n, -1, self.nc) for c in classes], axis=1))],
                              axis=-1)


class DetectionModel(nn.Module):
    """ultralytics' DetectionModel: ``model.0`` ... ``model.22`` wired as in ARCH, Detect last."""

    def __init__(self, scale: str, nc: int = 80, imgsz: int | tuple[int, int] = 640, names: dict | None = None):
        super().__init__()
        depth, width, max_channels = SCALES[scale]
        channels: list[int] = []  # output channels of each layer
        concatenated = {}  # index of a C2f after a Concat -> the channels of the Concat's parts
        layers = []
        for i, (inputs, repeats, kind, args) in enumerate(ARCH):
            sources = [i - 1 if j == -1 else j for j in ((inputs,) if isinstance(inputs, int) else inputs)]
            c1 = channels[sources[0]] if i else 3
            # channel counts scale with the width multiple, capped, rounded up to a multiple of 8
            c2 = math.ceil(min(args[0], max_channels) * width / 8) * 8 if args else c1
            n = max(round(repeats * depth), 1) if repeats > 1 else repeats
            if kind == "Conv":
                layer = Conv(c1, c2, *args[1:])
            elif kind == "C2f":
                layer = C2f(c1, c2, n, args[1])
            elif kind == "SPPF":
                layer = SPPF(c1, c2, args[1])
            elif kind == "Upsample":
                layer = Upsample()
            elif kind == "Concat":
                layer, c2 = Concat(), sum(channels[j] for j in sources)
                concatenated[i + 1] = tuple(channels[j] for j in sources)
            else:
                layer, c2 = Detect(nc, tuple(channels[j] for j in sources)), 4 + nc
            layers.append(layer)
            channels.append(c2)
        self.model = Sequential(*layers)
        self.names = dict(names) if names is not None else {i: f"class{i}" for i in range(nc)}  # {id: name}
        self.imgsz = imgsz  # default predict size: the size the checkpoint was trained at
        after_concat = {id(self.model[str(i)].cv1): split_by_input(sizes) for i, sizes in concatenated.items()}
        convs = [(m.conv, m.bn, after_concat.get(id(m), fold_in_conv_dtype)) for m in self.modules() if isinstance(m, Conv)]
        bounds = (0, *STAGE_STARTS, len(ARCH))
        stages = [Stage(partial(self.layers, start, stop), layers[start:stop]) for start, stop in zip(bounds, bounds[1:])]
        self.flop_per_pixel = conv_flop_per_pixel(layers)
        self.compiled = CompiledForward(self.forward, self, folds=[*convs, (layers[-1].dfl.conv, None, dfl_bins)],
                                        stages=stages, staged=self.staged)

    @property
    def nc(self) -> int:
        return self.model[str(len(ARCH) - 1)].nc

    @property
    def dtype(self) -> mx.Dtype:
        return self.model["0"].conv.weight.dtype

    def __call__(self, source=None, **options):
        """``source`` an mx.array (N, H, W, 3) RGB in [0, 1], H and W multiples of 32 -> (N, A, 4 + nc): the
        network, compiled per input shape, BatchNorms folded into their convolutions (zoo.compiled);
        ``forward`` is the same network, eager. Anything else (paths, numpy or PIL images, lists,
        videos ...) is ``predict(source, **options)``, as ultralytics' ``model(source)``."""
        if not isinstance(source, mx.array):
            return self.predict(source, **options)
        if options:
            raise ZooError(f"the network called on an mx.array takes no options ({', '.join(options)}): "
                           "pass an image, a path or a list of them to predict")
        x = source
        x = as_model_input(x, self.dtype)
        if x.ndim != 4 or x.shape[-1] != 3:
            raise ZooError(f"input has shape {tuple(x.shape)}: expected (N, H, W, 3) RGB")
        if x.shape[1] % STRIDE or x.shape[2] % STRIDE or x.shape[1] == 0 or x.shape[2] == 0:
            raise ZooError(f"input is {x.shape[1]}x{x.shape[2]}: height and width must be positive multiples of "
                           f"{STRIDE}; letterbox the image (det.predict does)")
        return self.compiled(x)

    def staged(self, x: mx.array) -> bool:
        """Whether the compiled forward runs ``x`` in stages (STAGED_FROM_GFLOP)."""
        n, h, w, _ = x.shape
        return self.flop_per_pixel * n * h * w / 1e9 >= STAGED_FROM_GFLOP[x.dtype == mx.float32]

    def forward(self, x: mx.array) -> mx.array:
        return self.layers(0, len(ARCH), x)

    def layers(self, start: int, stop: int, x: mx.array, saved: dict[int, mx.array] | None = None):
        """Layers start..stop-1 on ``x`` (the output of layer start-1), ``saved`` the earlier
        outputs they read -> the output of the last layer, and until the network's end also the
        outputs later layers read (a compiled stage's outputs, the next stage's arguments)."""
        saved = dict(saved or {})
        for i in range(start, stop):
            inputs, layer = ARCH[i][0], self.model[str(i)]
            x = layer(x) if inputs == -1 else layer(*(x if j == -1 else saved[j] for j in inputs))
            if i in READ_LATER:
                saved[i] = x
        if stop == len(ARCH):
            return x
        return x, {j: a for j, a in saved.items() if any(j in read for read in READS[stop:])}

    def class_ids(self, classes) -> list[int] | None:
        """Class filter from names and/or ids (a list, or one comma-separated string) -> ids."""
        return resolve_classes(classes, self.names)

    def predict(self, source, stream: bool = False, **options):
        """ultralytics' model.predict: one Results per image or frame (predict.py has the options)."""
        unknown = [key for key in options if key not in PREDICT_OPTIONS]
        if unknown:
            raise ZooError(f"predict() got an unknown keyword argument {unknown[0]}=: it takes "
                           f"{', '.join(PREDICT_OPTIONS)}")
        return predict(self, source, stream=stream, **options)
