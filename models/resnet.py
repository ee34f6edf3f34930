"""ResNet 18/34/50/101/152 (torchvision layout) in MLX, NHWC.

Attribute names mirror torchvision's state dict (conv1, bn1, layer1.0.conv1,
layer2.0.downsample.0, fc, ...) so checkpoints load by name; the blocks are
torchvision's v1.5 (the stride sits on the 3x3 conv of a Bottleneck).
"""
from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.compiled import CompiledForward
from zoo.concurrency import serialized
from zoo.devices import as_model_input
from zoo.errors import UsageError, ZooError
from zoo.images import center_crop, load_image, resize_shorter_side
from zoo.kernels import cpu as cpu_ops
from zoo.models.layers import BatchNorm, Conv2d, GlobalAvgPool, MLXConv2d, Sequential, conv_bn

DEPTHS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
CLASS_NAMES = Path(__file__).parent / "data" / "imagenet_classes.txt"


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    # MLX's own convolution, not layers.Conv2d's CPU form: on the CPU ResNet-50 took 101 ms with it
    # against 107-115 ms with the C patch-row form (sbs.py, alternating runs, 2026-11-25)
    return MLXConv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


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

    def __call__(self, x: mx.array) -> mx.array:
        out = conv_bn(self.conv1, self.bn1, x, activation="relu")
        out = conv_bn(self.conv2, self.bn2, out)
        return nn.relu(out + self.shortcut(x))


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

    def __call__(self, x: mx.array) -> mx.array:
        out = conv_bn(self.conv1, self.bn1, x, activation="relu")
        out = conv_bn(self.conv2, self.bn2, out, activation="relu")
        out = conv_bn(self.conv3, self.bn3, out)
        return nn.relu(out + self.shortcut(x))


class FeatureInfo(list):
    """timm's ``feature_info``: one dict per feature map (num_chs, reduction, module), stem first."""

    def channels(self) -> list[int]:
        return [info["num_chs"] for info in self]

    def reduction(self) -> list[int]:
        return [info["reduction"] for info in self]

    def module_name(self) -> list[str]:
        return [info["module"] for info in self]


class ResNet(nn.Module):
    """torchvision's ResNet with timm's interface.

    ``num_classes``: size of the ``fc`` head (0: no head, the model returns pooled features).
    ``features_only``: the model returns the feature maps ``out_indices`` picks
    (0: the stem after its ReLU, stride 2; 1-4: layer1..layer4, strides 4-32), NHWC,
    and has no head; the stages after the last one picked are not built.
    """

    def __init__(self, block: type, layers: tuple[int, ...], preprocess: dict, num_classes: int = 1000,
                 features_only: bool = False, out_indices: tuple[int, ...] = (0, 1, 2, 3, 4)):
        super().__init__()
        out_indices = tuple(out_indices)
        if not out_indices or any(i not in range(5) for i in out_indices) or len(set(out_indices)) != len(out_indices):
            raise ZooError(f"out_indices {out_indices}: pick distinct feature maps from 0 (stem) to 4 (layer4)")
        if num_classes < 0:
            raise ZooError(f"num_classes {num_classes}: use 0 (no head) or a positive number of classes")
        self.conv1 = MLXConv2d(3, 64, 7, stride=2, padding=3, bias=False)  # MLX's, as conv3x3
        self.bn1 = BatchNorm(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        info = [{"num_chs": 64, "reduction": 2, "module": "relu"}]
        stages = max(out_indices) if features_only else 4
        cin = 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers[:stages])):
            stride = 1 if i == 0 else 2
            stage = []
            for j in range(blocks):
                stage.append(block(cin, planes, stride if j == 0 else 1))
                cin = planes * block.expansion
            setattr(self, f"layer{i + 1}", Sequential(*stage))
            info.append({"num_chs": cin, "reduction": 4 * 2**i, "module": f"layer{i + 1}"})
        self.num_features = cin  # timm's name: channels of the last feature map
        self.features_only = features_only
        self.out_indices = out_indices
        self.feature_info = FeatureInfo(info[i] for i in out_indices) if features_only else FeatureInfo(info)
        self.avgpool = GlobalAvgPool()
        self.num_classes = 0
        if not features_only:
            self.reset_classifier(num_classes)
        self.preprocess = preprocess  # the registry's: resize, crop, mean, std
        blocks = [m for m in self.modules() if isinstance(m, (BasicBlock, Bottleneck))]
        self.compiled = CompiledForward(self.forward, self, folds=[(self.conv1, self.bn1)] + [
            pair for block in blocks for pair in block.conv_bn_pairs()])

    @property
    def dtype(self) -> mx.Dtype:
        return self.conv1.weight.dtype

    def reset_classifier(self, num_classes: int) -> None:
        """A new zero-initialised ``fc`` head of ``num_classes`` outputs (0: no head), in the model's dtype."""
        if self.features_only:
            raise ZooError("a features_only model has no classifier: load it without features_only")
        if num_classes < 0:
            raise ZooError(f"num_classes {num_classes}: use 0 (no head) or a positive number of classes")
        if "fc" in self:
            del self["fc"]
        if num_classes:
            self.fc = nn.Linear(self.num_features, num_classes)
            self.fc.update({"weight": mx.zeros_like(self.fc.weight, dtype=self.dtype),
                            "bias": mx.zeros_like(self.fc.bias, dtype=self.dtype)})
        self.num_classes = num_classes

    def stem(self, x: mx.array) -> mx.array:
        return self.relu(conv_bn(self.conv1, self.bn1, as_model_input(x, self.dtype)))

    def stage_maps(self, x: mx.array) -> list[mx.array]:
        """The stem's map and the map of each stage built: [stem, layer1, ...], NHWC."""
        maps = [self.stem(x)]
        x = self.maxpool(maps[0])
        for i in range(1, 5):
            if f"layer{i}" not in self:
                break
            x = self[f"layer{i}"](x)
            maps.append(x)
        return maps

    def forward_features(self, x: mx.array) -> mx.array:
        """x: (N, H, W, 3) normalised image -> (N, H/32, W/32, num_features) layer4 map."""
        if self.features_only:
            raise ZooError("forward_features needs every stage: call a features_only model itself for its maps")
        x = self.maxpool(self.stem(x))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward_head(self, x: mx.array, pre_logits: bool = False) -> mx.array:
        """(N, h, w, C) feature map -> (N, C) pooled features (``pre_logits`` or no head) or (N, num_classes) logits."""
        x = self.avgpool(x).reshape(x.shape[0], -1)
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

        Compiled per input shape (zoo.compiled); ``forward`` is the same network, eager."""
        return self.compiled(as_model_input(x, self.dtype))

    def forward(self, x: mx.array):
        if self.features_only:
            maps = self.stage_maps(x)
            return [maps[i] for i in self.out_indices]
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


def build(spec, num_classes: int = 1000, features_only: bool = False,
          out_indices: tuple[int, ...] = (0, 1, 2, 3, 4)) -> ResNet:
    kind, layers = DEPTHS[spec.variant]
    return ResNet(BasicBlock if kind == "basic" else Bottleneck, layers, spec.preprocess, num_classes,
                  features_only, out_indices)


def fit_checkpoint(model: ResNet, state_dict: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], set[str]]:
    """timm's rule for a checkpoint whose head does not fit the model: drop it, keep the model's zero head.

    Returns the weights to load and the model's parameter names that keep their
    own values. A features_only model drops the head and the stages it did not
    build; a head of another size is dropped with a note.
    """
    unbuilt = {"fc", *(f"layer{i}" for i in range(1, 5))} - set(model.keys())
    weights = {k: v for k, v in state_dict.items() if k.split(".")[0] not in unbuilt}
    head = state_dict.get("fc.weight")
    keep = set()
    if head is not None and not model.features_only and head.shape != (model.num_classes, model.num_features):
        weights = {k: v for k, v in weights.items() if not k.startswith("fc.")}
        keep = {"fc.weight", "fc.bias"} if model.num_classes else set()
        print(f"note: the checkpoint's {head.shape[0]}-class head (fc) is not loaded: the model has "
              f"{f'a new zero-initialised {model.num_classes}-class head' if model.num_classes else 'no head'}",
              file=sys.stderr)
    return weights, keep
