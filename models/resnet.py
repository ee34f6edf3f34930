"""ResNet 18/34/50/101/152 (torchvision layout) in MLX, NHWC.

Attribute names mirror torchvision's state dict (conv1, bn1, layer1.0.conv1,
layer2.0.downsample.0, fc, ...) so checkpoints load by name; the blocks are
torchvision's v1.5 (the stride sits on the 3x3 conv of a Bottleneck).
"""
from __future__ import annotations

import json
import math
import numbers
import sys
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from zoo.compiled import CompiledForward, Stage, stages_pay
from zoo.concurrency import serialized
from zoo.devices import as_model_input
from zoo.errors import UsageError, ZooError, in_command_line, option
from zoo.images import center_crop, load_image, resize_shorter_side
from zoo.kernels import cpu as cpu_ops
from zoo.models.layers import BatchNorm, Conv2d, GlobalAvgPool, Linear, MaxPool2d, Sequential, conv_bn, fuses_on_cpu

DEPTHS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
CLASS_NAMES = Path(__file__).parent / "data" / "imagenet_classes.txt"


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv3x3(cin, planes, stride)
        self.bn1 = BatchNorm(planes)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = BatchNorm(planes)
        if stride != 1 or cin != planes:
            self.downsample = Sequential(conv1x1(cin, planes, stride), BatchNorm(planes))

    def shortcut(self, x: mx.array) -> mx.array:
        if "downsample" not in self:
            return x
        return conv_bn(self.downsample["0"], self.downsample["1"], x, eager=self.downsample)

    def conv_bn_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        convs = [(self[f"conv{i}"], self[f"bn{i}"]) for i in range(1, 4) if f"conv{i}" in self]
        return convs + ([(self.downsample["0"], self.downsample["1"])] if "downsample" in self else [])

    def flops_at(self, stride: int) -> tuple[float, int]:
        """The convolutions' FLOPs (two per multiply-add) per pixel of the network's input, the block's input at
        ``stride``, and its output's stride: conv1, conv2 (, conv3) one after the other, the downsample beside."""
        total, at = 0.0, stride
        for i in range(1, 4):
            if f"conv{i}" in self:
                conv = self[f"conv{i}"]
                at *= conv.stride[0]
                total += 2 * conv.weight.size / at**2
        if "downsample" in self:
            total += 2 * self.downsample["0"].weight.size / at**2
        return total, at

    def __call__(self, x: mx.array) -> mx.array:
        out = conv_bn(self.conv1, self.bn1, x, activation="relu")
        return conv_bn(self.conv2, self.bn2, out, activation="relu", residual=self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv1x1(cin, planes)
        self.bn1 = BatchNorm(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = BatchNorm(planes)
        self.conv3 = conv1x1(planes, planes * 4)
        self.bn3 = BatchNorm(planes * 4)
        if stride != 1 or cin != planes * 4:
            self.downsample = Sequential(conv1x1(cin, planes * 4, stride), BatchNorm(planes * 4))

    shortcut = BasicBlock.shortcut
    conv_bn_pairs = BasicBlock.conv_bn_pairs
    flops_at = BasicBlock.flops_at

    def __call__(self, x: mx.array) -> mx.array:
        out = conv_bn(self.conv1, self.bn1, x, activation="relu")
        out = conv_bn(self.conv2, self.bn2, out, activation="relu")
        return conv_bn(self.conv3, self.bn3, out, activation="relu", residual=self.shortcut(x))


STAGES = 5  # feature maps: the stem, layer1..layer4
IMAGENET_CLASSES = 1000
# Memory of a batch's forward per pixel of the crop, float32 on the CPU: peak RSS (VmHWM) growth per image over a
# batch of one at 224x224, 123 bytes for ResNet-18, 136 for ResNet-152, 174 for ResNet-50, 2026-11-30 (the
# smallest: --batch's memory check, zoo.pipeline.check_batch_memory, refuses only what cannot fit)
BATCH_BYTES_PER_PIXEL = 120


def take_indices(indices, option: str = "out_indices") -> list[int]:
    """timm's ``feature_take_indices`` over the 5 maps: None all, an int n the last n, a sequence as
    given, negative from the end (-1: layer4)."""
    if indices is None:
        indices = STAGES
    if isinstance(indices, numbers.Integral) and not isinstance(indices, bool):
        if not 0 < indices <= STAGES:
            raise UsageError(f"{option}={indices}: an int takes the last n feature maps, from 1 to {STAGES}")
        return list(range(STAGES - int(indices), STAGES))
    # a string, a float or True was a TypeError from the comparison below, or True taken as map 1
    if not isinstance(indices, (tuple, list, range)) or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in indices):
        raise UsageError(f"{option}={indices!r}: pass an int n (the last n feature maps) or a tuple of ints from 0 "
                         "(stem) to 4 (layer4), negative from the end (-1: layer4)")
    taken = [int(i) + STAGES if i < 0 else int(i) for i in indices]
    if not taken or any(i not in range(STAGES) for i in taken) or len(set(taken)) != len(taken):
        raise UsageError(f"{option} {tuple(indices)}: pick distinct feature maps from 0 (stem) to 4 (layer4), "
                         "negative from the end (-1: layer4), or an int n for the last n")
    return taken


class FeatureInfo(list):
    """timm's ``feature_info``: one dict per feature map (num_chs, reduction, module), stem first;
    ``channels()``, ``reduction()``, ``module_name()`` give the maps of ``out_indices`` (kept in the
    form given, as timm's: ``3`` is ``(-3, -2, -1)``) or of ``idx``."""

    def __init__(self, info: list[dict], out_indices):
        super().__init__(info)
        self.out_indices = tuple(range(-out_indices, 0)) if isinstance(out_indices, int) else tuple(out_indices)

    def get(self, key: str, idx=None):
        picked = self.out_indices if idx is None else idx
        return [self[i][key] for i in picked] if isinstance(picked, (tuple, list)) else self[picked][key]

    def channels(self, idx=None):
        return self.get("num_chs", idx)

    def reduction(self, idx=None):
        return self.get("reduction", idx)

    def module_name(self, idx=None):
        return self.get("module", idx)


class GlobalPool(GlobalAvgPool):
    """timm's ``SelectAdaptivePool2d`` on NHWC maps: (N, H, W, C) -> (N, 1, 1, C) (``catavgmax``: the
    average's C channels, then the maximum's), or the map itself for ``''`` (no pooling)."""

    TYPES = ("avg", "max", "avgmax", "catavgmax", "")

    def __init__(self, pool_type: str = "avg"):
        super().__init__()
        if pool_type not in self.TYPES:
            raise UsageError(f"global_pool={pool_type!r}: use one of {', '.join(map(repr, self.TYPES))} "
                             "('' for no pooling)")
        self.pool_type = pool_type

    def feat_mult(self) -> int:
        return 2 if self.pool_type == "catavgmax" else 1

    def __call__(self, x: mx.array) -> mx.array:
        if not self.pool_type:
            return x
        average = super().__call__(x)
        if self.pool_type == "avg":
            return average
        peak = mx.max(x, axis=(1, 2), keepdims=True)
        if self.pool_type == "max":
            return peak
        return 0.5 * (average + peak) if self.pool_type == "avgmax" else mx.concatenate([average, peak], axis=-1)


class ResNet(nn.Module):
    """torchvision's ResNet with timm's interface.

    ``num_classes``: size of the ``fc`` head (0: no head, the model returns pooled features; None:
    the checkpoint's head must be ImageNet's 1000 classes, fit_checkpoint).
    ``global_pool``: timm's pooling before the head ('avg', 'max', 'avgmax', 'catavgmax'; '' none,
    with num_classes=0: the model returns the layer4 map).
    ``features_only``: the model returns the feature maps ``out_indices`` picks, in the network's order (timm's:
    0: the stem after its ReLU, stride 2; 1-4: layer1..layer4, strides 4-32; negative from the end;
    an int n the last n), NHWC, and has no head; the stages after the last one picked are not built.
    """

    def __init__(self, block: type, layers: tuple[int, ...], preprocess: dict, num_classes: int | None = None,
                 features_only: bool = False, out_indices=(0, 1, 2, 3, 4), global_pool: str = "avg"):
        super().__init__()
        picked = take_indices(out_indices)
        self.conv1 = Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = BatchNorm(64)
        self.relu = nn.ReLU()
        self.maxpool = MaxPool2d(3, stride=2, padding=1)
        # module names are torchvision's (timm calls the stem's ReLU act1)
        info = [{"num_chs": 64, "reduction": 2, "module": "relu"}]
        stages = max(picked) if features_only else 4
        cin = 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
            if i < stages:
                stage = []
                for j in range(blocks):
                    stage.append(block(cin, planes, (1 if i == 0 else 2) if j == 0 else 1))
                    cin = planes * block.expansion
                setattr(self, f"layer{i + 1}", Sequential(*stage))
            info.append({"num_chs": planes * block.expansion, "reduction": 4 * 2**i, "module": f"layer{i + 1}"})
        self.num_features = cin  # timm's name: channels of the last feature map
        self.features_only = features_only
        self.out_indices = tuple(picked)
        self.feature_info = FeatureInfo(info, out_indices if features_only else range(STAGES))
        # torchvision's name (the validator compares it as such); timm's is global_pool (the property)
        self.avgpool = GlobalPool(global_pool)
        # a checkpoint's head must fit the model unless num_classes was given (fit_checkpoint)
        self.num_classes_given = num_classes is not None
        self.num_classes = 0
        if not features_only:
            self.reset_classifier(IMAGENET_CLASSES if num_classes is None else num_classes)
        self.preprocess = preprocess  # the registry's: resize, crop, mean, std
        self.compiled = self.compiled_forward()

    def compiled_forward(self) -> CompiledForward:
        """``forward`` compiled (zoo.compiled), its parts (``compiled_parts``) made again whenever a module of
        the model is set in place of another (a new head, a layer pruned, a BatchNorm replaced)."""
        return CompiledForward(self.forward, self, parts=self.compiled_parts, staged=self.staged)

    def compiled_parts(self) -> tuple[list, list]:
        """The compiled forward's folds, the BatchNorms of the model's blocks folded into their convolutions,
        and a classifier's four stages for big inputs (the stem and layer1, layer2, layer3, layer4 and the
        head: ``staged``), each stage's graph built while the GPU runs the one before."""
        self.flop_per_pixel = self.conv_flop_per_pixel()
        blocks = [m for m in self.modules() if isinstance(m, (BasicBlock, Bottleneck))]
        pairs = [(self.conv1, self.bn1)] + [pair for block in blocks for pair in block.conv_bn_pairs()]
        stages = [] if self.features_only else [
            Stage(lambda x: self.layer1(self.maxpool(self.stem(x))), [self.conv1, self.bn1, self.layer1]),
            Stage(lambda x: self.layer2(x), [self.layer2]),
            Stage(lambda x: self.layer3(x), [self.layer3]),
            Stage(lambda x: self.forward_head(self.layer4(x)),
                  [self.layer4, self.avgpool] + ([self.fc] if "fc" in self else []))]
        # a BatchNorm the user replaced by another module (nn.Identity) runs as it is, unfolded
        return [(conv, bn) for conv, bn in pairs if isinstance(bn, nn.BatchNorm)], stages

    def conv_flop_per_pixel(self) -> float:
        """The convolutions' FLOPs (two per multiply-add) per input pixel, each at its output's stride."""
        stride = self.conv1.stride[0]
        total = 2 * self.conv1.weight.size / stride**2
        stride *= 2  # the max pooling
        for i in range(1, STAGES):
            layer = self.get(f"layer{i}")
            # a layer set by the user may be another module: ResNet blocks in a Sequential (zoo's or MLX's)
            # or alone are counted, anything else not
            blocks = layer.children_in_order() if isinstance(layer, Sequential) else \
                layer.layers if isinstance(layer, nn.Sequential) else [layer]
            for block in blocks:
                if isinstance(block, (BasicBlock, Bottleneck)):
                    flops, stride = block.flops_at(stride)
                    total += flops
        return total

    def staged(self, x: mx.array) -> bool:
        """Whether the compiled forward runs ``x`` in stages (zoo.compiled.stages_pay)."""
        n, h, w, _ = x.shape
        return stages_pay(self.flop_per_pixel * n * h * w / 1e9, x.dtype)

    @property
    def dtype(self) -> mx.Dtype:
        return self.conv1.weight.dtype

    @property
    def global_pool(self) -> GlobalPool:
        return self.avgpool

    @property
    def head_hidden_size(self) -> int:
        """timm's name: the width of the pooled features the head takes (2 x num_features for catavgmax)."""
        return self.num_features * self.avgpool.feat_mult()

    @property
    def default_cfg(self) -> dict:
        """timm's older name of ``pretrained_cfg``."""
        return self.pretrained_cfg

    def get_classifier(self, name_only: bool = False):
        """The head: ``fc`` (an Identity when there is none, as timm's), or its name."""
        if name_only:
            return "fc"
        return self.fc if "fc" in self else nn.Identity()

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new zero-initialised ``fc`` head of ``num_classes`` outputs (0: no head), in the model's dtype;
        ``global_pool`` (timm's): the pooling before it, None keeps the current one."""
        if self.features_only:
            raise UsageError("a features_only model has no classifier: load it without features_only")
        if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 0:
            raise UsageError(f"num_classes={num_classes!r}: use 0 (no head) or a positive number of classes")
        pool = self.avgpool if global_pool is None else GlobalPool(global_pool)
        if num_classes and not pool.pool_type:
            raise UsageError(f"global_pool='' keeps the (N, h, w, {self.num_features}) map, which no {num_classes}-class "
                             "head takes: use it with num_classes=0, as timm's")
        self.avgpool = pool
        if "fc" in self:
            del self["fc"]
        if num_classes:
            self.fc = Linear(self.head_hidden_size, num_classes)
            self.fc.update({"weight": mx.zeros_like(self.fc.weight, dtype=self.dtype),
                            "bias": mx.zeros_like(self.fc.bias, dtype=self.dtype)})
        self.num_classes = num_classes  # the compiled forward sees the new head and pooling (compiled_parts)

    def prune_intermediate_layers(self, indices=1, prune_norm: bool = False, prune_head: bool = True) -> list[int]:
        """timm's: the stages after the last feature map ``indices`` picks become empty (the maps of their
        indices are then the last kept one's, as timm's), with the head and pooling (``prune_head``, or when a
        stage went: the head no longer fits); returns the indices picked, absolute. ``prune_norm`` does nothing:
        a ResNet has no final norm."""
        if self.features_only:
            raise UsageError("a features_only model keeps only the stages of its out_indices: load it with the "
                             "out_indices you need")
        taken = take_indices(indices, "indices")
        last = max(taken)
        for i in range(last + 1, STAGES):
            self[f"layer{i}"] = Sequential()  # empty: its input passes, as timm's empty nn.Sequential
        if last == 0:
            self.maxpool = nn.Identity()  # the stem's map is the last kept one
        if last < STAGES - 1:
            self.num_features = self.feature_info[last]["num_chs"]
        if prune_head or last < STAGES - 1:
            self.reset_classifier(0, "")
        return taken  # the compiled forward is made again without the blocks removed (compiled_parts)

    def stem(self, x: mx.array) -> mx.array:
        x = as_model_input(x, self.dtype, channels=self.conv1.weight.shape[-1])
        if fuses_on_cpu(self.conv1, self.bn1):  # one C call; elsewhere the ReLU stays a layer the validator records
            return conv_bn(self.conv1, self.bn1, x, activation="relu")
        return self.relu(conv_bn(self.conv1, self.bn1, x))

    def stage_maps(self, x: mx.array, last: int = 4) -> tuple[list[mx.array], mx.array]:
        """The stem's map and each stage's up to index ``last`` (0: stem, 4: layer4), NHWC, and the map
        the next stage would take (the max-pooled stem when ``last`` is 0)."""
        if last and f"layer{last}" not in self:
            raise UsageError(f"feature map {last} is not built: this features_only model stops at index "
                             f"{max(self.out_indices)}; load it with the out_indices you need")
        maps = [self.stem(x)]
        x = self.maxpool(maps[0])
        for i in range(1, last + 1):
            x = self[f"layer{i}"](x)
            maps.append(x)
        return maps, x

    def forward_intermediates(self, x: mx.array, indices=None, norm: bool = False, stop_early: bool = False,
                              output_fmt: str = "NHWC", intermediates_only: bool = False):
        """timm's: the feature maps ``indices`` picks (None all 5, an int n the last n, a sequence with
        negative from the end), in the network's order, and the layer4 map: ``(final, [maps])``, or
        ``[maps]`` with ``intermediates_only``. x and the maps are NHWC (``output_fmt="NCHW"``
        transposes the maps, not ``final``); ``stop_early`` stops at the last map picked (``final``
        is then that stage's output); ``norm`` does nothing: a ResNet has no final norm, as timm's."""
        if output_fmt not in ("NHWC", "NCHW"):
            raise UsageError(f"output_fmt={output_fmt!r}: use 'NHWC' (the model's layout) or 'NCHW'")
        taken = sorted(take_indices(indices, "indices"))
        last = taken[-1] if stop_early else max(taken[-1], max(self.out_indices) if self.features_only else 4)
        maps, final = self.stage_maps(x, last)
        picked = [maps[i] if output_fmt == "NHWC" else maps[i].transpose(0, 3, 1, 2) for i in taken]
        return picked if intermediates_only else (final, picked)

    def forward_features(self, x: mx.array) -> mx.array:
        """x: (N, H, W, 3) normalised image -> (N, H/32, W/32, num_features) layer4 map."""
        if self.features_only:
            raise ZooError("forward_features needs every stage: call a features_only model itself for its maps")
        x = self.maxpool(self.stem(x))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward_head(self, x: mx.array, pre_logits: bool = False) -> mx.array:
        """(N, h, w, C) feature map -> (N, head_hidden_size) pooled features (``pre_logits`` or no head; the
        map itself for global_pool='') or (N, num_classes) logits."""
        # a timm user's NCHW map gave (N, 7) pooled features or a reshape error; the width the head takes (a
        # layer4 or fc set by the user may change it)
        head = self["fc"] if "fc" in self else None
        width = head.weight.shape[-1] // self.avgpool.feat_mult() if head is not None else self.num_features
        x = as_model_input(x, self.dtype, "feature map", channels=width)
        x = self.avgpool(x)
        if self.avgpool.pool_type:
            x = x.reshape(x.shape[0], math.prod(x.shape[1:]))  # -1 cannot be inferred for an empty batch
        if pre_logits or "fc" not in self:
            return x
        if x.shape[0] > 1 and cpu_ops.on_cpu():
            # one image at a time on the CPU: OpenBLAS rounds a row of a product differently with other
            # rows around it (its kernels for a few rows), and a batch must give each image its
            # batch-of-one logits; the head is a vector-matrix product per image, small beside the
            # convolutions. On the GPU the batch stays one matmul.
            return mx.concatenate([self.fc(row) for row in mx.split(x, x.shape[0])])
        return self.fc(x)

    def __call__(self, x: mx.array):
        """x: (N, H, W, 3) normalised image -> (N, num_classes) logits; features_only: the picked NHWC maps.

        Compiled per input shape (zoo.compiled); ``forward`` is the same network, eager. Anything else (a path,
        a PIL image, one (H, W, 3) image) is one error naming ``predict``, which pre-processes images."""
        if not isinstance(x, (mx.array, np.ndarray)) or x.ndim == 3:  # other shapes: as_model_input's error
            got = f"shape {tuple(x.shape)}" if isinstance(x, (mx.array, np.ndarray)) else f"a {type(x).__name__}"
            raise ZooError(f"the network takes an (N, H, W, 3) normalised batch, got {got}: for image files, PIL "
                           "images or (H, W, 3) uint8 arrays use model.predict(images), which resizes and normalises")
        return self.compiled(as_model_input(x, self.dtype, channels=self.conv1.weight.shape[-1]))

    def forward(self, x: mx.array):
        if self.features_only:  # in the network's order whatever the order of out_indices, as timm's
            maps, _ = self.stage_maps(x, max(self.out_indices))
            return [maps[i] for i in sorted(self.out_indices)]
        return self.forward_head(self.forward_features(x))

    def preprocess_image(self, image) -> np.ndarray:
        """torchvision IMAGENET1K_V1: shorter side to 256 (bilinear), centre crop 224, normalise -> HWC float32."""
        p = self.preprocess
        img = center_crop(resize_shorter_side(load_image(image), p["resize"]), p["crop"])
        return (img.astype(np.float32) / 255.0 - np.float32(p["mean"])) / np.float32(p["std"])

    @serialized()
    def predict(self, images, top_k: int = 5):
        """Top-k classes: [(index, label, probability), ...] per image.

        A single image (path, PIL image or array) gives one list; a list of images a list of lists.
        Labels are ImageNet's for a 1000-class head, the class index as text for any other head.
        """
        single = not isinstance(images, (list, tuple))
        if not single and not images:
            raise UsageError("no images given: pass an image (path, PIL image or array) or a non-empty list of them")
        results = self.top_classes(np.stack([self.preprocess_image(im) for im in ([images] if single else images)]),
                                   top_k)
        return results[0] if single else results

    @serialized()
    def top_classes(self, batch: np.ndarray, top_k: int = 5) -> list[list[tuple[int, str, float]]]:
        """``predict`` on images already through ``preprocess_image`` ((N, H, W, 3) float32): what a
        pipeline calls, its decoding and pre-processing done on other threads."""
        if not self.num_classes:
            raise ZooError("this model has no classifier head: load it with num_classes > 0 to predict classes")
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:  # [:-1]: 999 classes
            raise UsageError(f"top_k={top_k!r}: use a whole number >= 1 (more than the {self.num_classes} classes "
                             "gives them all)")
        probs = np.array(mx.softmax(self(batch).astype(mx.float32), axis=-1))
        labels = class_names()
        if len(labels) != self.num_classes:
            labels = [str(i) for i in range(self.num_classes)]
        results = []
        for row in probs:
            top = np.argsort(-row, kind="stable")[:top_k]
            results.append([(int(i), labels[i], float(row[i])) for i in top])
        return results


def class_names() -> list[str]:
    return CLASS_NAMES.read_text().splitlines()


# where torchvision publishes the IMAGENET1K_V1 weights that timm's tv_in1k tags hold (timm 1.0.31's urls)
TORCHVISION_URLS = {"resnet18": "resnet18-f37072fd.pth", "resnet34": "resnet34-b627a593.pth",
                    "resnet50": "resnet50-0676ba61.pth", "resnet101": "resnet101-63fe2227.pth",
                    "resnet152": "resnet152-394f9c45.pth"}


def pretrained_cfg(spec) -> dict:
    """timm's ``pretrained_cfg`` of the weights behind the name (timm 1.0.31's keys and values for
    resnetN.tv_in1k, in its order): the pre-processing they were trained with, as ``preprocess_image`` applies it."""
    p = spec.preprocess
    return {"url": f"https://download.pytorch.org/models/{TORCHVISION_URLS[spec.variant]}", "hf_hub_id": spec.hub_repo,
            "architecture": spec.variant, "tag": spec.tag, "custom_load": False,
            "input_size": (3, p["crop"], p["crop"]), "fixed_input_size": False,
            "interpolation": "bilinear",  # resize_shorter_side's
            "crop_pct": p["crop"] / p["resize"], "crop_mode": "center", "mean": p["mean"], "std": p["std"],
            "num_classes": IMAGENET_CLASSES, "pool_size": (p["crop"] // 32, p["crop"] // 32),
            "first_conv": "conv1", "classifier": "fc", "license": spec.licence.split()[0].lower(),
            "origin_url": "https://github.com/pytorch/vision"}


# Beside a timm model.safetensors: the Hub snapshot's config.json (timm's save_for_hf writes the same), else the name
# of the Hub cache folder it sits in (models--timm--resnet50.a1_in1k/snapshots/REV/model.safetensors)
TIMM_CONFIG = "config.json"
HUB_CACHE_PREFIX = "models--timm--"
TIMM_CONFIG_BYTES = 1 << 20  # a timm config.json is ~1 kB


def timm_config(source: str) -> tuple[dict, str]:
    """What timm says about a weights file, and where: its config.json's architecture and pretrained_cfg, else
    the architecture and tag of the Hub cache folder it sits in; ({}, "") for neither (or a source not a file)."""
    path = Path(source)
    if not path.is_file():
        return {}, ""
    config = path.parent / TIMM_CONFIG
    try:
        data = json.loads(config.read_bytes()) if config.is_file() and config.stat().st_size < TIMM_CONFIG_BYTES else {}
    except (OSError, ValueError):
        data = {}
    if isinstance(data, dict) and isinstance(data.get("architecture"), str):  # a transformers config has none
        return data, TIMM_CONFIG
    repo = next((p.removeprefix(HUB_CACHE_PREFIX) for p in path.parts if p.startswith(HUB_CACHE_PREFIX)), None)
    if repo is None:
        return {}, ""
    architecture, _, tag = repo.partition(".")
    return {"architecture": architecture, "pretrained_cfg": {"tag": tag} if tag else {}}, "its Hub folder"


# torchvision's IMAGENET1K_V2 files (their names are torchvision's urls): resized to 232, not V1's 256 (timm's tv2_in1k
# tag says crop_pct 0.965)
TORCHVISION_V2_FILES = {"resnet50-11ad3fa6.pth": "resnet50", "resnet101-cd907fc2.pth": "resnet101",
                        "resnet152-f82ba261.pth": "resnet152"}


def checkpoint_spec(spec, weights):
    """The spec fitted to what timm says of the file (timm_config, or the --model of the training run that saved
    it): another architecture is refused, since
    several of timm's have ResNet's very tensors (resnetblur50, resnetaa50: blur or average pooling before each
    strided conv); the file's pre-processing (crop_pct, input size, mean, std) replaces the name's."""
    other = other_resnet(weights.state_dict)
    kind, layers, held = block_counts(weights.state_dict)
    if not other and all(layers) and (kind, layers) != DEPTHS[spec.variant]:  # a backbone without layer4: the loader's
        if held:
            raise ZooError(f"{weights.source} holds a {held} ({kind} blocks {layers} a stage), not a {spec.variant}: "
                           f"load it as '{held}'")
        other = f"a ResNet of {kind} blocks {layers} a stage (timm's resnet26, resnet14t ... kind)"
    if other:
        raise ZooError(f"{weights.source} holds {other}, not {spec.variant}: mlx-zoo builds torchvision's ResNets "
                       f"({', '.join(DEPTHS)}); pass a checkpoint of one of them")
    config, told = timm_config(weights.source)
    trained = weights.meta.get("args")
    if not config and isinstance(trained, dict) and isinstance(trained.get("model"), str):
        # timm's train.py (and torchvision's references) save their arguments: --model names the network
        config, told = {"architecture": trained["model"].removeprefix("hf-hub:").rpartition("/")[2]}, "its args.model"
    v2 = Path(weights.source).name
    if not config and v2 in TORCHVISION_V2_FILES and Path(weights.source).is_file():
        config, told = {"architecture": TORCHVISION_V2_FILES[v2], "pretrained_cfg": {
            "tag": "tv2_in1k", "crop_pct": 0.965, "url": f"https://download.pytorch.org/models/{v2}"}}, "its file name"
    if not config:
        return spec
    architecture = config["architecture"].partition(".")[0]
    if architecture != spec.variant:
        raise ZooError(f"{weights.source} holds timm's {architecture} ({told} says so), not {spec.variant}: another "
                       f"network, whose tensors may have {spec.variant}'s names and shapes; mlx-zoo builds "
                       f"{', '.join(DEPTHS)}: pass a checkpoint of one of them")
    cfg = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    p = dict(spec.preprocess)
    size, crop_pct = cfg.get("input_size"), cfg.get("crop_pct")
    if isinstance(size, list) and len(size) == 3 and isinstance(size[-1], int) and size[-1] > 0:
        p["crop"] = size[-1]
    if isinstance(crop_pct, (int, float)) and 0 < crop_pct <= 1:
        p["resize"] = math.floor(p["crop"] / crop_pct)  # timm's transforms_factory: scale_size
    for key in ("mean", "std"):
        if isinstance(cfg.get(key), list) and len(cfg[key]) == 3 and all(isinstance(v, (int, float)) for v in cfg[key]):
            p[key] = tuple(cfg[key])
    return replace(spec, preprocess=p, config={"pretrained_cfg": cfg, "architecture": config["architecture"],
                                               "told": told})


def build(spec, num_classes: int | None = None, features_only: bool = False, out_indices=(0, 1, 2, 3, 4),
          global_pool: str = "avg") -> ResNet:
    kind, layers = DEPTHS[spec.variant]
    model = ResNet(BasicBlock if kind == "basic" else Bottleneck, layers, spec.preprocess, num_classes,
                   features_only, out_indices, global_pool)
    model.pretrained_cfg = {**pretrained_cfg(spec), **spec.config.get("pretrained_cfg", {})}
    tag = model.pretrained_cfg["tag"]
    if spec.config.get("told") == "its Hub folder" and tag != spec.tag:  # the weights' own cfg is in their config.json
        print(f"note: {spec.variant}.{tag} weights (their Hub folder's name) without their {TIMM_CONFIG}: "
              f"pre-processed as {spec.tag} (resize {spec.preprocess['resize']}, crop {spec.preprocess['crop']}); "
              f"put the {TIMM_CONFIG} of timm/{spec.variant}.{tag} beside them for theirs", file=sys.stderr)
    interpolation = model.pretrained_cfg["interpolation"]
    if interpolation != "bilinear":  # the file's config says how it was trained; predict resizes bilinear
        print(f"note: {spec.config['architecture']} was trained on images resized {interpolation} (its "
              f"{TIMM_CONFIG}); predict() resizes bilinear: results differ slightly from timm's", file=sys.stderr)
    return model


def holds(state_dict: dict, meta: dict) -> bool:
    """A ResNet in torchvision's naming (timm's is the same): its stem (a deep one too: checkpoint_spec names
    that variant) and its first block."""
    return ("conv1.weight" in state_dict or "conv1.0.weight" in state_dict) and "layer1.0.conv1.weight" in state_dict


def other_resnet(state_dict: dict) -> str:
    """Which ResNet variant mlx-zoo does not build a checkpoint holds, as its tensors (torch layout) tell; ''
    for torchvision's own."""
    if "conv1.0.weight" in state_dict:
        return "a ResNet with a deep stem (conv1.0, conv1.3 ...: timm's resnet50d, resnet50c, resnet50s, resnet50t)"
    if any(".se." in k for k in state_dict):
        return "a ResNet with attention in its blocks (.se.: timm's seresnet50, ecaresnet50 ...)"
    conv2 = state_dict.get("layer1.0.conv2.weight")
    if "layer1.0.conv3.weight" not in state_dict or conv2 is None or len(conv2.shape) != 4:
        return ""
    width, per_group = int(conv2.shape[0]), int(conv2.shape[1])
    if per_group != width:
        groups = width // max(per_group, 1)
        return f"a ResNeXt ({groups} groups of {per_group} channels in its 3x3 convs: resnext50_32x4d's kind)"
    if width != 64:
        return (f"a wide ResNet ({width} channels in layer1's 3x3 convs where torchvision's has 64: "
                "wide_resnet50_2's kind)")
    return ""


def block_counts(state_dict: dict) -> tuple[str, tuple[int, ...], str]:
    """A ResNet checkpoint's blocks: basic or bottleneck, how many in each stage, and the registered ResNet
    that has those ('' for none)."""
    kind = "bottleneck" if "layer1.0.conv3.weight" in state_dict else "basic"
    layers = tuple(len({key.split(".")[1] for key in state_dict if key.startswith(f"layer{stage}.")})
                   for stage in range(1, 5))
    return kind, layers, next((name for name, depth in DEPTHS.items() if depth == (kind, layers)), "")


def variant_of(state_dict: dict) -> str:
    """The registered ResNet a checkpoint holds, by its blocks: basic or bottleneck, and how many in each stage."""
    kind, layers, name = block_counts(state_dict)
    if not name:
        raise ZooError(f"it holds a ResNet of {kind} blocks {layers} a stage, which is none of "
                       f"{', '.join(DEPTHS)}: mlx-zoo builds only these")
    return name


def describe_head(shape) -> str:
    return "no head" if shape is None else f"a {shape[0]}-class head on {shape[1]} features"


def fit_checkpoint(model: ResNet, state_dict: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], set[str]]:
    """A checkpoint's head (fc) against the model's: timm's rule, without its silent zero head.

    Returns the weights to load and the model's parameter names that keep their own values. A
    features_only model drops the head and the stages it did not build. A head that does not fit is
    dropped with a note when ``num_classes`` asked for another head, and is an error otherwise (a
    fine-tuned checkpoint loaded without its num_classes would otherwise predict from zeros).
    """
    unbuilt = {"fc", *(f"layer{i}" for i in range(1, 5))} - set(model.keys())
    weights = {k: v for k, v in state_dict.items() if k.split(".")[0] not in unbuilt}
    if model.features_only:
        return weights, set()
    head = state_dict.get("fc.weight")
    found = None if head is None else tuple(head.shape)
    wanted = (model.num_classes, model.head_hidden_size) if model.num_classes else None
    body = {name for name, _ in tree_flatten(model.parameters()) if not name.startswith("fc.")}
    if found == wanted or not body <= state_dict.keys():
        return weights, set()  # fits, or the checkpoint of another model: the strict load names every mismatch
    if not model.num_classes_given:
        pool = model.global_pool.pool_type
        where = f"the model has {describe_head(wanted)}" + ("" if pool == "avg" else f" (global_pool={pool!r})")
        fixes = [f"{option('num_classes', found[0])} to use it"] \
            if found is not None and found[1] == model.head_hidden_size else []
        if not (fixes and in_command_line()):  # a new head of zeros: a Python caller's start for fine-tuning
            fixes.append(f"{option('num_classes', 'N')} for a new zero-initialised N-class head"
                         + ("" if in_command_line() else " (0: none)"))  # the command line takes no headless model
        raise ZooError(f"the checkpoint has {describe_head(found)} (fc) where {where}: pass {', or '.join(fixes)}")
    weights = {k: v for k, v in weights.items() if not k.startswith("fc.")}
    ours = f"a new zero-initialised {model.num_classes}-class head" if model.num_classes else "no head"
    theirs = " has no head (fc)" if found is None else f"'s {found[0]}-class head (fc) is not loaded"
    print(f"note: the checkpoint{theirs}: the model has {ours}", file=sys.stderr)
    return weights, ({"fc.weight", "fc.bias"} if model.num_classes else set())
