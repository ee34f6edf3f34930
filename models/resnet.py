"""ResNet 18/34/50/101/152 (torchvision layout) in MLX, NHWC.

Attribute names mirror torchvision's state dict (conv1, bn1, layer1.0.conv1,
layer2.0.downsample.0, fc, ...) so checkpoints load by name; the blocks are
torchvision's v1.5 (the stride sits on the 3x3 conv of a Bottleneck).
"""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.devices import as_model_input
from zoo.images import center_crop, load_image, resize_shorter_side
from zoo.models.layers import GlobalAvgPool, Sequential

DEPTHS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}
CLASS_NAMES = Path(__file__).parent / "data" / "imagenet_classes.txt"


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv3x3(cin, planes, stride)
        self.bn1 = nn.BatchNorm(planes)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm(planes)
        if stride != 1 or cin != planes:
            self.downsample = Sequential(conv1x1(cin, planes, stride), nn.BatchNorm(planes))

    def shortcut(self, x: mx.array) -> mx.array:
        return self.downsample(x) if "downsample" in self else x

    def __call__(self, x: mx.array) -> mx.array:
        out = nn.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return nn.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm(planes)
        self.conv3 = conv1x1(planes, planes * 4)
        self.bn3 = nn.BatchNorm(planes * 4)
        if stride != 1 or cin != planes * 4:
            self.downsample = Sequential(conv1x1(cin, planes * 4, stride), nn.BatchNorm(planes * 4))

    shortcut = BasicBlock.shortcut

    def __call__(self, x: mx.array) -> mx.array:
        out = nn.relu(self.bn1(self.conv1(x)))
        out = nn.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return nn.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, block: type, layers: tuple[int, ...], preprocess: dict, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
            stride = 1 if i == 0 else 2
            stage = []
            for j in range(blocks):
                stage.append(block(cin, planes, stride if j == 0 else 1))
                cin = planes * block.expansion
            setattr(self, f"layer{i + 1}", Sequential(*stage))
        self.avgpool = GlobalAvgPool()
        self.fc = nn.Linear(cin, num_classes)
        self.preprocess = preprocess  # the registry's: resize, crop, mean, std

    @property
    def dtype(self) -> mx.Dtype:
        return self.fc.weight.dtype

    def __call__(self, x: mx.array) -> mx.array:
        """x: (N, H, W, 3) normalised image -> (N, num_classes) logits."""
        x = as_model_input(x, self.dtype)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).reshape(x.shape[0], -1))

    def preprocess_image(self, image) -> np.ndarray:
        """torchvision IMAGENET1K_V1: shorter side to 256 (bilinear), centre crop 224, normalise -> HWC float32."""
        p = self.preprocess
        img = center_crop(resize_shorter_side(load_image(image), p["resize"]), p["crop"])
        return (img.astype(np.float32) / 255.0 - np.float32(p["mean"])) / np.float32(p["std"])

    def predict(self, images, top_k: int = 5):
        """Top-k ImageNet classes: [(index, label, probability), ...] per image.

        A single image (path, PIL image or array) gives one list; a list of images a list of lists.
        """
        single = not isinstance(images, (list, tuple))
        batch = np.stack([self.preprocess_image(im) for im in ([images] if single else images)])
        probs = mx.softmax(self(batch).astype(mx.float32), axis=-1)
        probs = np.array(probs)
        labels = class_names()
        results = []
        for row in probs:
            top = np.argsort(-row, kind="stable")[:top_k]
            results.append([(int(i), labels[i], float(row[i])) for i in top])
        return results[0] if single else results


def class_names() -> list[str]:
    return CLASS_NAMES.read_text().splitlines()


def build(spec) -> ResNet:
    kind, layers = DEPTHS[spec.variant]
    return ResNet(BasicBlock if kind == "basic" else Bottleneck, layers, spec.preprocess)
