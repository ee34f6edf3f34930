"""One table of model names -> builder, default weights, preprocessing, task, licence.

Users pick "resnet50", not classes. A family is a module ``zoo.models.<family>``
that provides ``build(spec) -> nn.Module`` (float32, weights not loaded) and, optionally,
``sanitize(state_dict, meta) -> state_dict`` (other checkpoint namings -> the
upstream one) and ``apply_metadata(model, meta)`` (e.g. class names stored in
the checkpoint).
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import mlx.nn as nn
import numpy as np

from . import devices
from .errors import ZooError

@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # module under zoo.models
    variant: str
    task: str  # classify | detect | segment | inpaint
    hub_repo: str
    hub_file: str
    licence: str
    preprocess: dict = field(default_factory=dict)


def _resnet(depth: int) -> ModelSpec:
    return ModelSpec(
        f"resnet{depth}", "resnet", f"resnet{depth}", "classify",
        f"timm/resnet{depth}.tv_in1k", "model.safetensors", "BSD-3-Clause (torchvision weights)",
        # torchvision IMAGENET1K_V1
        {"resize": 256, "crop": 224, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
    )


def _yolov8(size: str) -> ModelSpec:
    return ModelSpec(
        f"yolov8{size}", "yolov8", f"yolov8{size}", "detect",
        "Ultralytics/YOLOv8", f"yolov8{size}.pt", "AGPL-3.0 (Ultralytics)", {"imgsz": 640},
    )


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        *(_resnet(d) for d in (18, 34, 50, 101, 152)),
        *(_yolov8(s) for s in "nsmlx"),
        ModelSpec("mobilesam", "mobilesam", "mobilesam", "segment",
                  "lmz/candle-sam", "mobile_sam-tiny-vitt.safetensors", "Apache-2.0", {"image_size": 1024}),
        ModelSpec("lama", "lama", "lama", "inpaint",
                  "anyisalin/big-lama", "big-lama.safetensors", "Apache-2.0", {"pad_multiple": 8}),
    ]
}
ALIASES = {"yolov8": "yolov8n", "big-lama": "lama", "mobile_sam": "mobilesam"}


def list_models(task: str | None = None) -> list[str]:
    return [name for name, spec in REGISTRY.items() if task is None or spec.task == task]


def get_spec(name: str) -> ModelSpec:
    spec = REGISTRY.get(ALIASES.get(name, name))
    if spec is None:
        raise ZooError(f"unknown model {name!r}: known models are {', '.join(list_models())}")
    return spec


def family(spec: ModelSpec):
    return importlib.import_module(f"zoo.models.{spec.family}")


@dataclass
class Weights:
    state_dict: dict[str, np.ndarray]  # upstream naming and layout
    source: str
    meta: dict
    synthetic: bool = False


def read_weights(spec: ModelSpec, weights: str | Path | None = None, offline_fallback: bool = False) -> Weights:
    """Read a model's checkpoint in its upstream naming and layout.

    ``weights``: None (the default Hub file), a path, or ``synthetic[:SEED]``.
    ``offline_fallback``: when no weights are given and the Hub file is not
    cached, use synthetic:0 instead of the network (the validator's default).
    """
    from zoo.weights import hub, synthetic
    from zoo.weights.checkpoint import read_checkpoint_with_meta

    if weights is None and offline_fallback and hub.cached_file(spec.hub_repo, spec.hub_file) is None:
        print(f"note: {spec.hub_repo}/{spec.hub_file} is not cached; using synthetic:0 weights "
              "(parity does not depend on trained weights)", file=sys.stderr)
        weights = "synthetic:0"
    seed = None if weights is None else synthetic.parse_synthetic(str(weights))
    if weights is None:
        path = hub.download(spec.hub_repo, spec.hub_file, licence=spec.licence)
        sd, meta = read_checkpoint_with_meta(path)
        source = f"{spec.hub_repo}/{spec.hub_file}"
    elif seed is not None:
        synthetic.warn_synthetic(seed)
        manifests = Path(importlib.import_module("zoo.models").__file__).parent / "manifests"
        sd, meta = synthetic.synthetic_state_dict(synthetic.read_manifest(manifests / f"{spec.variant}.json"), seed), {}
        source = f"synthetic:{seed}"
    else:
        sd, meta = read_checkpoint_with_meta(weights)
        source = str(weights)
    # every route, synthetic included (the manifest lists unused keys too), goes through sanitize
    sanitize = getattr(family(spec), "sanitize", None)
    return Weights(sanitize(sd, meta) if sanitize else sd, source, meta, synthetic=seed is not None)


def build(spec: ModelSpec, weights: Weights, dtype: str = "float32") -> nn.Module:
    """Build the model, load ``weights`` strictly and put it in eval mode."""
    from zoo.weights.convert import load_state_dict

    fam = family(spec)
    model = fam.build(spec)
    load_state_dict(model, weights.state_dict, weights.source, devices.parse_dtype(dtype), spec.name)
    if hasattr(fam, "apply_metadata"):
        fam.apply_metadata(model, weights.meta)
    model.eval()
    return model


def load(name: str, weights: str | Path | None = None, dtype: str = "float32", device: str | None = None) -> nn.Module:
    """Build a registered model with its weights, on the process's device, in eval mode.

    ``weights``: None (default Hub weights), a .safetensors/.pt/.pth/.ckpt path,
    or ``"synthetic[:SEED]"`` (random weights in the checkpoint's layout).
    """
    devices.use(device)
    devices.parse_dtype(dtype)  # fail on a bad dtype before any download
    spec = get_spec(name)
    return build(spec, read_weights(spec, weights), dtype)
