"""One table of model names -> builder, default weights, preprocessing, task, licence.

Users pick "resnet50", not classes. A family is a module ``zoo.models.<family>``
that provides ``build(spec) -> nn.Module`` (float32, weights not loaded) and, optionally,
``sanitize(state_dict, meta) -> state_dict`` (other checkpoint namings -> the
upstream one), ``fit_checkpoint(model, state_dict) -> (state_dict, kept)`` (drop
what a model built with options does not take, e.g. a head of another size, and
name the parameters that keep the model's own values) and
``apply_metadata(model, meta)`` (e.g. class names stored in the checkpoint) and
``checkpoint_spec(spec, weights) -> spec`` (the spec fitted to what the file holds, e.g. YOLOv8's
scale, classes and training size in ``config``; the family's own name, ``yolov8``, takes any variant) and
``synthetic_init(state_dict) -> state_dict`` (synthetic weights given the values an untrained model
has where random ones would make its outputs useless, e.g. YOLO's DFL bins and class priors).
Options of ``load`` (``num_classes=10``, ``features_only=True``) go to ``build``.
"""
from __future__ import annotations

import fnmatch
import functools
import importlib
import inspect
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import mlx.nn as nn
import numpy as np

from . import devices
from .concurrency import release_mlx_at_thread_exit
from .errors import UsageError, ZooError, option

@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # module under zoo.models
    variant: str
    task: str  # classify | detect | instance-segment | pose | segment (promptable) | inpaint
    hub_repo: str
    hub_file: str
    licence: str
    preprocess: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)  # architecture read from the weights (checkpoint_spec)

    @property
    def tag(self) -> str:
        """timm's pretrained tag of the default weights ('tv_in1k' of timm/resnet50.tv_in1k), '' if none."""
        arch, dot, tag = self.hub_repo.rpartition("/")[2].partition(".")
        return tag if dot and arch == self.variant else ""


def _resnet(depth: int) -> ModelSpec:
    return ModelSpec(
        f"resnet{depth}", "resnet", f"resnet{depth}", "classify",
        f"timm/resnet{depth}.tv_in1k", "model.safetensors", "BSD-3-Clause (torchvision weights)",
        # torchvision IMAGENET1K_V1
        {"resize": 256, "crop": 224, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
    )


def _yolo(generation: str, hub_repo: str, size: str, suffix: str = "", task: str = "detect") -> ModelSpec:
    """A YOLO model of models/yolov8 (the family folder of YOLOv8 and YOLO11): a detector, or with
    ``suffix`` -seg / -pose its instance-segmentation / pose model; Ultralytics' Hub file."""
    name = f"{generation}{size}{suffix}"
    return ModelSpec(name, "yolov8", name, task, hub_repo, f"{name}.pt", "AGPL-3.0 (Ultralytics)", {"imgsz": 640})


# YOLO tasks besides detection: the variant's suffix (ultralytics' file names) and the registry's task
YOLO_TASKS = (("-seg", "instance-segment"), ("-pose", "pose"))


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        *(_resnet(d) for d in (18, 34, 50, 101, 152)),
        *(_yolo("yolov8", "Ultralytics/YOLOv8", s) for s in "nsmlx"),
        *(_yolo("yolo11", "Ultralytics/YOLO11", s) for s in "nsmlx"),
        *(_yolo(generation, repo, s, suffix, task) for suffix, task in YOLO_TASKS
          for generation, repo in (("yolov8", "Ultralytics/YOLOv8"), ("yolo11", "Ultralytics/YOLO11")) for s in "nsmlx"),
        ModelSpec("mobilesam", "mobilesam", "mobilesam", "segment",
                  "lmz/candle-sam", "mobile_sam-tiny-vitt.safetensors", "Apache-2.0", {"image_size": 1024}),
        ModelSpec("lama", "lama", "lama", "inpaint",
                  "anyisalin/big-lama", "big-lama.safetensors", "Apache-2.0", {"pad_multiple": 8}),
    ]
}
ALIASES = {"yolov8": "yolov8n", "yolo11": "yolo11n", "big-lama": "lama", "mobile_sam": "mobilesam"}
# names that stand for every scale of a model: the scale comes from the weights (checkpoint_spec)
SCALE_FROM_WEIGHTS = frozenset({"yolov8", "yolo11"})


def list_models(filter: str | list[str] = "", task: str | None = None, pretrained: bool = False,
                exclude_filters: str | list[str] = "") -> list[str]:
    """Registered names, as timm's: ``filter`` is a wildcard pattern or a list of them ("resnet*");
    ``pretrained``: the names with the tag of their default weights ("resnet50.tv_in1k") where they
    have one, a pattern without a tag matching any tag; ``exclude_filters``: patterns of names left out."""
    patterns, excluded = ([p for p in ([f] if isinstance(f, str) else f) if p] for f in (filter, exclude_filters))
    if pretrained:
        patterns += [f"{p}.*" for p in patterns if "." not in p]
    names = [(f"{name}.{spec.tag}" if pretrained and spec.tag else name, spec) for name, spec in REGISTRY.items()]
    return [name for name, spec in names
            if (task is None or spec.task == task)
            and (not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns))
            and not any(fnmatch.fnmatchcase(name, p) for p in excluded)]


def is_model(name: str) -> bool:
    """timm's: whether ``name`` is a registered model (or alias), its pretrained tag ignored."""
    base = name.partition(".")[0]
    return base in REGISTRY or base in ALIASES


def without_tag(name: str) -> str:
    """timm's tagged name of a registered model (``resnet50.tv_in1k``) -> the model's name; a tag other
    than its default weights' is an error (they are not the weights it would load)."""
    base, dot, tag = name.partition(".")
    spec = REGISTRY.get(ALIASES.get(base, base))
    if not dot or spec is None:
        return name
    if tag != spec.tag:
        have, use = (f"the {spec.tag} weights of {base} only", f"{base}.{spec.tag} (or {base})") if spec.tag \
            else (f"no tagged weights of {base}", base)
        raise UsageError(f"{name}: mlx-zoo has {have}: use {use}, or pass {option('weights', 'PATH')} with the "
                         "checkpoint you want")
    return base


def release_file_model(name: str | Path) -> str | None:
    """ultralytics' ``YOLO("yolov8n.pt")``: a bare file name that is not on disk and is a registered model's
    Hub file (``yolov8n.pt``, ``yolo11s-seg.pt``) names that model, whose default weights are that file."""
    name = str(name)
    if Path(name).name != name or Path(name).exists():
        return None
    spec = REGISTRY.get(Path(name).stem)
    return spec.name if spec is not None and spec.hub_file == name else None


def refuse_exported(name: str) -> None:
    """One error for an ultralytics export given as a model (YOLO('best.onnx') runs it there): 'unknown model
    best.onnx' listed the registered names, and yolov8n.onnx was read as yolov8n with a weights tag 'onnx'."""
    from zoo.weights.checkpoint import export_format

    fmt = export_format(name)
    if fmt is not None:
        raise UsageError(f"{name} is an exported model ({fmt}, from yolo export): mlx-zoo runs the PyTorch "
                         "checkpoint it was exported from (a .pt such as best.pt) or a .safetensors of its "
                         "weights: pass that")


def get_spec(name: str) -> ModelSpec:
    refuse_exported(name)
    name = release_file_model(name) or without_tag(name)
    spec = REGISTRY.get(ALIASES.get(name, name))
    if spec is None:
        raise UsageError(f"unknown model {name!r}: known models are {', '.join(list_models())}")
    # such a name stays the spec's name: the variant then comes from the weights (checkpoint_spec)
    return replace(spec, name=name) if name in SCALE_FROM_WEIGHTS else spec


def family(spec: ModelSpec):
    return importlib.import_module(f"zoo.models.{spec.family}")


@dataclass
class Weights:
    state_dict: dict[str, np.ndarray]  # upstream naming and layout
    source: str
    meta: dict
    synthetic: bool = False


# ZOO_WEIGHTS=synthetic[:SEED]: every model given no weights gets synthetic ones in place of its Hub
# file (no network: trying the commands out, CI running the docs' examples); said in one line when used
WEIGHTS_VARIABLE = "ZOO_WEIGHTS"


def default_weights(spec: ModelSpec) -> str | None:
    """The weights a model given none gets: None (its Hub file) unless ZOO_WEIGHTS names synthetic ones."""
    from zoo.weights import synthetic

    chosen = os.environ.get(WEIGHTS_VARIABLE, "")
    if not chosen:
        return None
    if synthetic.parse_synthetic(chosen) is None:
        raise UsageError(f"{WEIGHTS_VARIABLE}={chosen!r}: use synthetic or synthetic:SEED, or unset it for "
                         "the Hub weights")
    print(f"WARNING: {WEIGHTS_VARIABLE}={chosen}: {spec.name} runs on {chosen} weights (random values: outputs "
          f"are meaningless) in place of {spec.hub_repo}/{spec.hub_file}", file=sys.stderr)
    return chosen


def weights_identity(weights: str | Path | None) -> str:
    """Which weights ``weights`` names, said without reading them: ``hub``, ``synthetic:SEED`` (ZOO_WEIGHTS
    included) or the file's resolved path; --resume compares it with the records' own."""
    from zoo.weights import synthetic

    if weights is None:
        weights = os.environ.get(WEIGHTS_VARIABLE) or None
        if weights is None:
            return "hub"
    seed = synthetic.parse_synthetic(str(weights))
    return f"synthetic:{seed}" if seed is not None else str(Path(weights).resolve())


def read_weights(spec: ModelSpec, weights: str | Path | None = None, offline_fallback: bool = False) -> Weights:
    """Read a model's checkpoint in its upstream naming and layout.

    ``weights``: None (the default Hub file, or synthetic ones under ZOO_WEIGHTS), a path, or
    ``synthetic[:SEED]``. ``offline_fallback``: when no weights are given and the Hub file is not
    cached, use synthetic:0 instead of the network (the validator's default).
    """
    from zoo.weights import hub, synthetic
    from zoo.weights.checkpoint import read_checkpoint_with_meta

    if weights is not None and (weights == "" or not isinstance(weights, (str, os.PathLike))):
        # '' was read as the current folder ('. is a folder'), 123 or b'best.pt' raised TypeErrors from inside
        problem = "is empty (an unset variable?)" if weights == "" else "is not a path"
        raise UsageError(f"{option('weights', weights)} {problem}: pass a checkpoint's path, 'synthetic[:SEED]', or "
                         "None for the model's default weights")
    from_variable = weights is None and bool(os.environ.get(WEIGHTS_VARIABLE))
    if weights is None:
        weights = default_weights(spec)
    if weights is None and offline_fallback and hub.cached_file(spec.hub_repo, spec.hub_file) is None:
        print(f"note: {spec.hub_repo}/{spec.hub_file} is not cached; using synthetic:0 weights "
              "(parity does not depend on trained weights)", file=sys.stderr)
        weights = "synthetic:0"
    seed = None if weights is None else synthetic.parse_synthetic(str(weights))
    if weights is None:
        path = hub.download(spec.hub_repo, spec.hub_file, licence=spec.licence)
        check_header(spec, path)
        sd, meta = read_checkpoint_with_meta(path)
        source = f"{spec.hub_repo}/{spec.hub_file}"
    elif seed is not None:
        if not from_variable:  # default_weights said so
            synthetic.warn_synthetic(seed)
        sd, meta = synthetic_checkpoint(spec, seed), {}
        source = f"synthetic:{seed}"
    else:
        check_header(spec, weights)
        sd, meta = read_checkpoint_with_meta(weights)
        source = str(weights)
    # every route, synthetic included (the manifest lists unused keys too), goes through sanitize
    return Weights(sanitized(spec, sd, meta), source, meta, synthetic=seed is not None)


def synthetic_checkpoint(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """``synthetic:SEED`` in the checkpoint's own naming: the manifest's random tensors, with the values
    the family gives an untrained model (its ``synthetic_init``, e.g. YOLO's detection head)."""
    from zoo.weights import synthetic

    sd = synthetic.synthetic_state_dict(manifest(spec.variant), seed)
    init = getattr(family(spec), "synthetic_init", None)
    return init(sd) if init else sd


@functools.lru_cache(maxsize=None)
def manifest(variant: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every checkpoint name of ``variant`` -> (shape, dtype), upstream naming (models/manifests)."""
    from zoo.weights import synthetic

    folder = Path(importlib.import_module("zoo.models").__file__).parent / "manifests"
    return synthetic.read_manifest(folder / f"{variant}.json")


# A checkpoint may hold more than the model (ultralytics' EMA and optimiser, a Lightning
# discriminator), all of which is read: up to this many times the weights of the largest model it
# may hold, plus a little.
CHECKPOINT_FACTOR = 4
CHECKPOINT_SLACK = 16 << 20


def sanitized(spec: ModelSpec, state_dict: dict, meta: dict) -> dict:
    """``state_dict`` (arrays or TensorHeaders) named as the family reads it (its ``sanitize``)."""
    sanitize = getattr(family(spec), "sanitize", None)
    return sanitize(state_dict, meta) if sanitize else state_dict


def named_header(spec: ModelSpec, path) -> tuple[dict, dict]:
    """The checkpoint's TensorHeaders named as ``spec``'s family reads them, and its metadata: what
    ``read_weights`` would give, without reading a tensor."""
    from zoo.weights.checkpoint import read_checkpoint_header

    header, meta = read_checkpoint_header(path)
    return sanitized(spec, header, meta), meta


def check_header(spec: ModelSpec | None, path) -> None:
    """Refuse ``path`` from its header, before any tensor is read, when it cannot be ``spec``'s
    checkpoint: its names (as the family reads them) lack the model's and hold others, or its
    tensors claim more bytes than the model can justify. ``spec`` None: the file names its model
    (``zoo.load("best.pt")``), so only the size is bounded, by the largest registered model."""
    from zoo.weights.checkpoint import read_checkpoint_header
    from zoo.weights.convert import TORCH_ONLY_SUFFIXES, mismatch

    header, meta = read_checkpoint_header(path)
    if spec is not None:
        try:  # before the size bound: a family's sanitize names the other models it knows (SAM's ViT-H for MobileSAM)
            names = {n for n in sanitized(spec, header, meta) if not n.endswith(TORCH_ONLY_SUFFIXES)}
        except ZooError as error:
            raise ZooError(f"{path}: {error}") from None
    # the family's own name (yolov8) takes any of its variants
    variants = ({s.variant for s in REGISTRY.values()} if spec is None else
                {s.variant for s in REGISTRY.values() if s.family == spec.family} if spec.name == spec.family else
                {spec.variant})
    most = max(sum(4 * int(np.prod(shape)) for shape, _ in manifest(v).values()) for v in variants)
    claimed = sum(tensor.nbytes for tensor in header.values())
    if claimed > CHECKPOINT_FACTOR * most + CHECKPOINT_SLACK:
        model = "any registered model" if spec is None else spec.name
        raise ZooError(f"{path}: its header claims {claimed:,} bytes of tensors, more than {CHECKPOINT_FACTOR}x the "
                       f"{most:,} bytes of {model}'s weights; nothing was read: pass the checkpoint of this model")
    if spec is None:
        return
    needed = {n for n in sanitized(spec, manifest(spec.variant), {}) if not n.endswith(TORCH_ONLY_SUFFIXES)}
    missing, unexpected = sorted(needed - names), sorted(names - needed)
    # a file that shares no name with the model is another model's; a partial one (a features-only
    # backbone, another head) is the loader's and the family's to judge, its size bounded above
    if missing and not names & needed:
        raise ZooError(mismatch(str(path), spec.name, missing, unexpected, []))


def check_options(spec: ModelSpec, options: dict) -> None:
    """Options ``build`` passes to the family's builder: unknown names fail before any weights are read."""
    known = list(inspect.signature(family(spec).build).parameters)[1:]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(f"{spec.name} takes no option {', '.join(unknown)}: "
                       f"{'its options are ' + ', '.join(known) if known else 'it has no options'}")


def build(spec: ModelSpec, weights: Weights, dtype: str = "float32", **options) -> nn.Module:
    """Build the model (with the family's ``options``), load ``weights`` strictly and put it in eval mode."""
    from zoo.weights.convert import load_state_dict

    release_mlx_at_thread_exit()  # building uses MLX (random init) on this thread
    fam = family(spec)
    check_options(spec, options)
    spec = fitted_spec(spec, weights)
    model = fam.build(spec, **options)
    state_dict, kept = weights.state_dict, set()
    if hasattr(fam, "fit_checkpoint"):
        state_dict, kept = fam.fit_checkpoint(model, state_dict)
    load_state_dict(model, state_dict, weights.source, devices.parse_dtype(dtype), spec.name, kept)
    if hasattr(fam, "apply_metadata"):
        fam.apply_metadata(model, weights.meta)
    model.eval()
    return model


def fitted_spec(spec: ModelSpec, weights: Weights) -> ModelSpec:
    """``spec`` as the family's ``checkpoint_spec`` fits it to what ``weights`` hold (e.g. a YOLO file's
    scale, task and classes); the spec itself for families without one."""
    fam = family(spec)
    return fam.checkpoint_spec(spec, weights) if hasattr(fam, "checkpoint_spec") else spec


def fitted_to_file(spec: ModelSpec, path: str | Path) -> ModelSpec:
    """``spec`` fitted to a checkpoint file from its header, before any tensor is read: what a name
    given a file will be (``yolov8`` with a segmentation model's best.pt: its task, for the run's folder)."""
    if not hasattr(family(spec), "checkpoint_spec"):
        return spec
    check_header(spec, path)
    header, meta = named_header(spec, path)
    return fitted_spec(spec, Weights(header, str(path), meta))


def spec_for(name: str, weights: str | Path | None = None) -> ModelSpec:
    """The spec ``load(name, weights)`` builds: the name's, fitted to a weights file when one is given.
    A file that is not there or not this model's is the name's spec here: ``load`` reads the same file
    and names its problem, after the command line's own checks (bad inputs first, then the weights)."""
    from zoo.weights.synthetic import parse_synthetic

    spec = get_spec(name)
    if weights is None or parse_synthetic(str(weights)) is not None or not Path(weights).is_file():
        return spec
    try:
        return fitted_to_file(spec, weights)
    except ZooError:
        return spec


def load(name: str, weights: str | Path | None = None, dtype: str = "float32", device: str | None = None,
         pretrained: bool = True, **options) -> nn.Module:
    """Build a registered model with its weights, on the process's device, in eval mode.

    ``weights``: None (default Hub weights), a .safetensors/.pt/.pth/.ckpt path,
    or ``"synthetic[:SEED]"`` (random weights in the checkpoint's layout).
    ``pretrained`` (timm's create_model): False without ``weights`` gives random weights
    (synthetic:0) instead of the Hub's; ``weights`` given are always the ones loaded.
    ``options``: the family's build options, e.g. ResNet's ``num_classes``, ``global_pool``,
    ``features_only`` and ``out_indices`` (timm's). ``name`` may carry the default weights' tag
    (``resnet50.tv_in1k``).
    """
    if not isinstance(name, (str, os.PathLike)):  # None or 123 raised AttributeErrors from inside
        raise UsageError(f"model {name!r}: pass a model's name (zoo.list_models(): resnet50, yolov8n ...) or a "
                         "checkpoint's path")
    name = os.fspath(name)  # Path('best.pt') as 'best.pt'
    devices.use(device)
    devices.parse_dtype(dtype)  # fail on a bad dtype before any download
    if is_weights_file(name):
        refuse_second_checkpoint(name, weights)
        spec, read = identify(name)
        check_options(spec, options)
        return build(spec, read, dtype, **options)
    spec = get_spec(name)
    check_options(spec, options)
    if weights is None and not pretrained:
        weights = "synthetic:0"
    return build(spec, read_weights(spec, weights), dtype, **options)


YOLO_TASKS = ("detect", "segment", "pose")  # ultralytics' task names that these YOLO heads make


def YOLO(model: str | Path = "yolo11n.pt", task: str | None = None, verbose: bool = False,  # noqa: N802
         **options) -> nn.Module:
    """ultralytics' ``YOLO(model, task=None, verbose=False)``, so ``from zoo import YOLO`` stands in for
    ``from ultralytics import YOLO``: ``model`` a YOLO name (``yolov8n``), a release file name
    (``yolo11n-seg.pt``: that model's Hub weights) or a checkpoint path (a ``yolo train`` file);
    ``task`` must be the one the model makes (ultralytics would quietly take the checkpoint's); ``verbose``
    is accepted (nothing is printed); ``options``: load's (``weights``, ``dtype``, ``device``)."""
    if task is not None and task not in YOLO_TASKS:
        raise UsageError(f"YOLO(task={task!r}): the YOLO models here make {', '.join(YOLO_TASKS)}")
    refuse_unbuilt_yolo(model)
    if not is_weights_file(model) and get_spec(str(model)).family != "yolov8":
        raise UsageError(f"YOLO({str(model)!r}) is not a YOLO model: use zoo.load({str(model)!r})")
    from zoo.models.yolov8 import DetectionModel

    net = load(str(model), **options)  # a checkpoint file: the model it holds (identify)
    if not isinstance(net, DetectionModel):  # e.g. a ResNet's file
        raise UsageError(f"YOLO({str(model)!r}) is not a YOLO model (the file holds a {type(net).__name__}): use "
                         f"zoo.load({str(model)!r})")
    if task is not None and net.task != task:
        raise UsageError(f"YOLO({str(model)!r}, task={task!r}): the model makes {net.task!r}; "
                         f"pass task={net.task!r} or a {task} model")
    return net


# ultralytics' release file names (yolov8n-cls.pt, yolo11s-obb.pt, yolo26n.pt, yolov5nu.pt ...) and model yamls,
# as its docs pass them to YOLO(): the task suffix, if any, is the last "-" part
ULTRALYTICS_RELEASE = re.compile(r"(yolo[v]?\d+[a-z]*\d*)(?:-(\w+))?\.(pt|ya?ml)")
UNBUILT_YOLO_TASKS = {"cls": "ultralytics' classification YOLO models are not available in mlx-zoo: classify images "
                             "with zoo.load('resnet50') (docs/resnet.md)",
                      "obb": "ultralytics' oriented-box (OBB) YOLO models are not available in mlx-zoo"}


def refuse_unbuilt_yolo(model: str | Path) -> None:
    """One error for an ultralytics model file name that is not on disk and names a model mlx-zoo does not build
    (a classification or OBB model, another YOLO generation, a yaml to build an untrained model from), naming the
    YOLO models it has; a file on disk is read as it is."""
    name = str(model)
    release = ULTRALYTICS_RELEASE.fullmatch(name)
    if release is None or Path(name).exists() or release_file_model(name):
        return
    have = ("the YOLO models here are yolov8 and yolo11, scales n s m l x, detect (yolo11n.pt), segment "
            "(yolo11n-seg.pt) and pose (yolo11n-pose.pt)")
    if release.group(3) != "pt":
        raise UsageError(f"YOLO({name!r}) builds an untrained model from ultralytics' yaml, for training, which "
                         f"mlx-zoo does not do: load trained weights, YOLO('yolo11n.pt') or a best.pt "
                         f"(weights='synthetic' for random ones); {have}")
    reason = UNBUILT_YOLO_TASKS.get(release.group(2), "no file of that name here, nor one of ultralytics' models "
                                                      "mlx-zoo builds")
    raise UsageError(f"YOLO({name!r}): {reason}; {have}")


def SAM(model: str | Path = "mobile_sam.pt", *args, **options):  # noqa: N802
    """ultralytics' ``SAM`` class (its MobileSAM page's ``SAM("mobile_sam.pt")(image, bboxes=..., points=...)``) is
    not built: ultralytics letterboxes and scales masks its own way, so its masks are not segment-anything's,
    which mlx-zoo's MobileSAM gives. One error naming segment-anything's interface."""
    raise UsageError(f"SAM({str(model)!r}), ultralytics' SAM class, is not available in mlx-zoo: MobileSAM runs "
                     "segment-anything's interface, p = zoo.load('mobilesam').predictor(); p.set_image(image); "
                     "masks, scores, logits = p.predict(point_coords=[[x, y]], point_labels=[1], "
                     "box=[x1, y1, x2, y2], multimask_output=False); everything: "
                     "zoo.load('mobilesam').mask_generator().generate(image) (docs/mobilesam.md)")


def create_model(model_name: str, pretrained: bool = False, checkpoint_path: str | Path | None = None,
                 **kwargs) -> nn.Module:
    """timm's ``create_model``: as timm, ``pretrained=False`` (its default) gives random weights and
    ``checkpoint_path`` a checkpoint to load, as does ``pretrained_cfg_overlay=dict(file=PATH)`` with
    ``pretrained=True`` (timm's way to load a local copy of the pretrained file); the other keywords are
    load's (``num_classes``, ``global_pool``, ``features_only``, ``out_indices``, ``dtype``, ``device``, ...)."""
    overlay = kwargs.pop("pretrained_cfg_overlay", None) or {}
    if not isinstance(overlay, dict) or set(overlay) - {"file"}:
        other = sorted(set(overlay) - {"file"}) if isinstance(overlay, dict) else [type(overlay).__name__]
        raise UsageError(f"pretrained_cfg_overlay: mlx-zoo takes only file= (the weights to load), not "
                         f"{', '.join(map(str, other))}: the pre-processing comes from the file's config.json")
    if checkpoint_path:
        kwargs["weights"] = checkpoint_path
    elif overlay.get("file") and pretrained:
        kwargs["weights"] = overlay["file"]
    return load(model_name, pretrained=pretrained, **kwargs)


def refuse_second_checkpoint(model: str, weights: str | Path | None) -> None:
    """A checkpoint file given as the model (``python -m zoo.run best.pt``, ``zoo.load("best.pt")``) is its weights:
    no weights too (``zoo.load("best.pt", weights=...)`` said 'unknown model best.pt')."""
    if weights is not None:
        raise UsageError(f"{model} is already the checkpoint: drop {option('weights', os.fspath(weights))}")


def is_weights_file(name: str | Path) -> bool:
    """A checkpoint path given where a model name goes (``zoo.load("best.pt")``), not a release name that is
    not on disk (``yolov8n.pt``: release_file_model)."""
    from zoo.weights.checkpoint import SUFFIXES, weights_suffix

    name = str(name)
    return (name not in REGISTRY and name not in ALIASES and weights_suffix(name) in SUFFIXES
            and release_file_model(name) is None)


def identify(path: str | Path) -> tuple[ModelSpec, Weights]:
    """The family a checkpoint file holds, as each family's ``holds(state_dict, meta)`` tells, and its weights."""
    from zoo.weights.checkpoint import read_checkpoint_with_meta

    check_header(None, path)
    sd, meta = read_checkpoint_with_meta(path)
    for name in sorted({spec.family for spec in REGISTRY.values()}):
        fam = importlib.import_module(f"zoo.models.{name}")
        if not hasattr(fam, "holds"):
            continue
        sanitized = fam.sanitize(sd, meta) if hasattr(fam, "sanitize") else sd
        if fam.holds(sanitized, meta):  # a family of several registered models may tell which (ResNet's depth)
            try:
                held = fam.variant_of(sanitized) if hasattr(fam, "variant_of") else name
            except ZooError as e:
                raise ZooError(f"{path}: {e}") from None
            return get_spec(held), Weights(sanitized, str(path), meta)
    raise ZooError(f"{path}: cannot tell which model it holds; name the model (e.g. resnet50) and give the file "
                   f"as {option('weights', str(path))}")
