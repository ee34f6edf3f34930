"""What a YOLO checkpoint says about itself: other namings mapped to ultralytics' (Candle/tinygrad);
its task, generation (YOLOv8, YOLO11), scale, classes, names and training size, from its metadata
and tensor shapes."""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from zoo.errors import ZooError

from .model import ARCHITECTURES, REG_MAX, STRIDES, Architecture, scaled_channels

CLASS_NAMES = Path(__file__).parent.parent / "data" / "coco_classes.txt"


def class_names() -> list[str]:
    return CLASS_NAMES.read_text().splitlines()


# COCO's category ids (1-90, with gaps: 91 ids were defined, 80 annotated) of the 80 classes, in class order
COCO91_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32,
              33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
              60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90)


def coco_category_ids(names: dict[int, str]) -> list[int]:
    """The category_id of each class in COCO JSON, as ultralytics' save_json: COCO's own ids for a model
    whose classes are COCO's 80, else class + 1."""
    if [names[i] for i in sorted(names)] == class_names():
        return list(COCO91_IDS)
    return [i + 1 for i in range(len(names))]


# lmz/candle-yolo-v8 (tinygrad's naming) -> ultralytics: docs/weights.md has the table.
CANDLE_PREFIXES = {
    "net.b1.0.": "model.0.", "net.b1.1.": "model.1.", "net.b2.0.": "model.2.", "net.b2.1.": "model.3.",
    "net.b2.2.": "model.4.", "net.b3.0.": "model.5.", "net.b3.1.": "model.6.", "net.b4.0.": "model.7.",
    "net.b4.1.": "model.8.", "net.b5.0.": "model.9.",
    "fpn.n1.": "model.12.", "fpn.n2.": "model.15.", "fpn.n3.": "model.16.", "fpn.n4.": "model.18.",
    "fpn.n5.": "model.19.", "fpn.n6.": "model.21.",
    "head.": "model.22.",
}


def sanitize(state_dict: dict, meta: dict) -> dict:
    """ultralytics naming as is; Candle/tinygrad naming (net.*, fpn.*, head.*) mapped to it."""
    if not any(k.startswith(("net.", "fpn.", "head.")) for k in state_dict):
        return state_dict
    out = {}
    for key, value in state_dict.items():
        prefix = next((p for p in CANDLE_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            key = CANDLE_PREFIXES[prefix] + re.sub(r"(^|\.)bottleneck\.", r"\1m.", key[len(prefix):])
        out[key] = value
    return out


# ultralytics' model classes by task
MODEL_TASKS = {"DetectionModel": "detect", "SegmentationModel": "segment", "PoseModel": "pose",
               "ClassificationModel": "classify", "OBBModel": "obb", "WorldModel": "world",
               "YOLOEModel": "yoloe", "YOLOESegModel": "yoloe-seg", "RTDETRDetectionModel": "rtdetr"}
TASKS = ("detect", "segment", "pose", "classify", "obb")
SUPPORTED_TASKS = ("detect", "segment", "pose")  # the tasks whose checkpoints load
# a variant's name per task, as ultralytics names its files: yolov8n, yolov8n-seg, yolo11s-pose
TASK_SUFFIXES = {"detect": "", "segment": "-seg", "pose": "-pose"}
# the registry's task names (zoo.registry.ModelSpec.task): "segment" there is MobileSAM's promptable kind
REGISTRY_TASKS = {"detect": "detect", "segment": "instance-segment", "pose": "pose"}
COCO_KPT_SHAPE = (17, 3)  # a pose head of 51 values in a file that does not say its keypoint shape
FIRST_CONV = "model.0.conv.weight"  # (64 x width, 3, 3, 3): its output channels give the scale
DFL_CONV = re.compile(r"model\.(\d+)\.dfl\.conv\.weight")  # in every detection head: its index names the generation
THIRD_BRANCH = re.compile(r"model\.\d+\.cv4\.0\.2\.weight")  # Pose's keypoints, OBB's angle
# A key only the generation's own layout has, where another generation's head sits at the same index:
# YOLOv8's C2f bottlenecks at layer 2 (YOLOv9's ELAN has none; its head is at 22 too), YOLO11's C2PSA
# attention (YOLOv10's PSA is model.10.attn; its head is at 23 too).
MARKERS = {"yolov8": "model.2.m.0.cv1.conv.weight", "yolo11": "model.10.m.0.attn.qkv.conv.weight"}
# A head's box branch (4 x reg_max, 1, 1) and the NMS-free one2one copy of it that YOLOv10 and YOLO26 add
BOX_CONV = re.compile(r"model\.(\d+)\.cv2\.0\.2\.weight")
ONE_TO_ONE = re.compile(r"model\.(\d+)\.one2one_cv2\.")


@dataclass(frozen=True)
class CheckpointInfo:
    """What a detection checkpoint holds: the generation, scale, classes and the size it was trained at."""

    arch: Architecture
    scale: str  # n s m l x
    nc: int
    names: dict[int, str]
    imgsz: int | tuple[int, int] | None  # training size, the default predict size (as ultralytics)
    task: str = "detect"  # detect, segment, pose
    kpt_shape: tuple[int, int] | None = None  # pose: keypoints, values per keypoint (2: x y, 3: x y visibility)

    @property
    def variant(self) -> str:
        return self.arch.name + self.scale + TASK_SUFFIXES[self.task]


def split_variant(variant: str) -> tuple[Architecture, str, str]:
    """"yolo11s" -> (YOLO11, "s", "detect"); "yolov8n-seg" -> (YOLOV8, "n", "segment")."""
    base, dash, suffix = variant.partition("-")
    task = next(t for t, s in TASK_SUFFIXES.items() if s == dash + suffix)
    return ARCHITECTURES[base[:-1]], base[-1], task


def describe(state_dict: dict, meta: dict, source: str, default: str = "yolov8n") -> CheckpointInfo:
    """Read the generation from the head's index, the scale from the first conv's width (and, where two
    scales share it, layer 2's block count), checked against the file's yaml; nc from the class branch,
    names and imgsz from the metadata; refuse other tasks and other YOLO layouts by name. ``default``:
    the variant a state dict without those tensors is taken as.

    ``state_dict`` in ultralytics' naming (after ``sanitize``); ``meta`` as zoo.weights reads it: a
    pickle's top-level plain values, ``module_class`` and ``module_attributes`` (yaml, args, names,
    nc), or a safetensors file's text metadata (names, imgsz, task, scale).
    """
    attributes = meta.get("module_attributes") or {}
    yaml = attributes.get("yaml") if isinstance(attributes.get("yaml"), dict) else {}
    task = checkpoint_task(state_dict, meta, attributes)
    if task not in SUPPORTED_TASKS:
        raise ZooError(f"{source} holds a YOLO {task} model ({meta.get('module_class', 'its head')}): the YOLO "
                       f"tasks that load are {', '.join(SUPPORTED_TASKS)}; pass such a checkpoint")
    if FIRST_CONV.replace("conv.weight", "conv.bias") in state_dict and "model.0.bn.weight" not in state_dict:
        raise ZooError(f"{source} holds a fused YOLO model (each BatchNorm folded into its Conv, as model.fuse() and "
                       "`yolo export` leave it): pass the training checkpoint it was made from (yolov8n.pt, best.pt)")
    default_arch, default_scale, _ = split_variant(default)
    arch = generation(state_dict, yaml, source, default_arch)
    scale = checkpoint_scale(state_dict, arch, source, default_scale)
    said = yaml.get("scale") or meta.get("scale")
    if said in arch.scales and said != scale:
        raise ZooError(f"{source}: its metadata says scale '{said}' but its tensors are {arch.name}{scale}'s: "
                       "the file is inconsistent; re-export it")
    class_conv = f"model.{arch.head}.cv3.0.2.weight"  # (nc, c3, 1, 1): the class branch's last conv
    nc = int(state_dict[class_conv].shape[0]) if class_conv in state_dict else 80
    for what, value in (("yaml nc", yaml.get("nc")), ("model nc", attributes.get("nc"))):
        if isinstance(value, int) and value != nc:
            raise ZooError(f"{source}: its {what} is {value} but its detection head has {nc} classes: "
                           "the file is inconsistent; re-export it")
    kpt_shape = keypoint_shape(state_dict, meta, attributes, yaml, arch, source) if task == "pose" else None
    return CheckpointInfo(arch, scale, nc, parse_names(meta.get("names"), nc, source),
                          training_imgsz(meta, attributes), task, kpt_shape)


def keypoint_shape(state_dict: dict, meta: dict, attributes: dict, yaml: dict, arch: Architecture,
                   source: str) -> tuple[int, int]:
    """A pose checkpoint's (keypoints, values per keypoint): what its yaml, model or metadata says,
    checked against the keypoint branch's output channels; 51 values unsaid are COCO's 17 x 3."""
    branch = state_dict.get(f"model.{arch.head}.cv4.0.2.weight")
    values = int(branch.shape[0]) if branch is not None else None
    said = next((v for v in (yaml.get("kpt_shape"), attributes.get("kpt_shape"), meta.get("kpt_shape"))
                 if v is not None), None)
    if said is None:
        if values in (None, COCO_KPT_SHAPE[0] * COCO_KPT_SHAPE[1]):
            return COCO_KPT_SHAPE
        raise ZooError(f"{source}: its pose head has {values} keypoint values but the file does not say its "
                       "kpt_shape: save kpt_shape (e.g. [17, 3]) in the checkpoint's metadata")
    try:
        shape = tuple(int(v) for v in (ast.literal_eval(said) if isinstance(said, str) else said))
    except (ValueError, SyntaxError, TypeError):
        shape = ()
    if len(shape) != 2 or shape[0] < 1 or shape[1] not in (2, 3):
        raise ZooError(f"{source}: its kpt_shape {said!r} is not [keypoints, 2 or 3]: fix it in the checkpoint")
    if values is not None and shape[0] * shape[1] != values:
        raise ZooError(f"{source}: its kpt_shape {list(shape)} means {shape[0] * shape[1]} keypoint values but its "
                       f"pose head has {values}: the file is inconsistent; re-export it")
    return shape


def synthetic_init(state_dict: dict) -> dict:
    """Synthetic weights (zoo.weights.synthetic) with the head ultralytics gives an untrained detector,
    so that ``--weights synthetic`` finds some boxes the right way round instead of 300 inside-out
    ones: the DFL conv arange(16) (every real file's: random bins made sides negative), each level's
    box bias 1 and class biases its object prior, as Detect.bias_init (conf ~1e-5: no box). Random
    weights' features no longer depend on the input some 20 layers down, so each class scores about
    the same everywhere: the first class of the coarsest level (stride 32) gets bias 1 (conf ~0.7, above
    the default 0.25 and a --conf 0.5), and NMS leaves a few dozen large boxes of it per image (yolov8n,
    yolov8s, yolo11n, yolo11n-pose, seeds 0 and 1: 61-67 at 640x480)."""
    for head in head_indexes(state_dict):
        state_dict[f"model.{head}.dfl.conv.weight"] = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
        for level, stride in enumerate(STRIDES):
            state_dict[f"model.{head}.cv2.{level}.2.bias"][:] = 1.0
            classes = state_dict[f"model.{head}.cv3.{level}.2.bias"]
            classes[:] = math.log(5 / len(classes) / (640 / stride) ** 2)
        state_dict[f"model.{head}.cv3.{len(STRIDES) - 1}.2.bias"][0] = 1.0
    return state_dict


def head_indexes(state_dict: dict) -> list[int]:
    return sorted(int(m.group(1)) for m in map(DFL_CONV.fullmatch, state_dict) if m)


def generation(state_dict: dict, yaml: dict, source: str, default: Architecture) -> Architecture:
    """The YOLO generation whose head sits where the file's does (``default`` where it has no head tensors)."""
    heads = head_indexes(state_dict)
    made_from = f" (built from {yaml['yaml_file']})" if yaml.get("yaml_file") else ""
    titles = " and ".join(a.title for a in ARCHITECTURES.values())
    unlike_ours = _unlike_our_heads(state_dict)
    if unlike_ours:
        raise ZooError(f"{source} holds a detection model{made_from} whose head {unlike_ours}: only {titles} "
                       "checkpoints load (their heads have DFL bins and NMS)")
    if not heads:
        return default
    arch = next((a for a in ARCHITECTURES.values() if [a.head] == heads), None)
    marker = MARKERS.get(arch.name) if arch else None
    if arch is None or (marker and marker not in state_dict):
        unlike = (f"but not {arch.title}'s layers (no {marker})" if arch else
                  "not " + " or ".join(f"{a.title}'s model.{a.head}" for a in ARCHITECTURES.values()))
        raise ZooError(f"{source} holds a detection model whose head is {', '.join(f'model.{h}' for h in heads)}"
                       f"{made_from}, {unlike}: only {titles} checkpoints load")
    return arch


def _unlike_our_heads(state_dict: dict) -> str:
    """How a detection head differs from YOLOv8's and YOLO11's ('' where it does not): without DFL
    (reg_max 1: 4 box values, YOLO26's) or with an NMS-free one2one branch (YOLOv10's and YOLO26's)."""
    box = next(((m.group(1), state_dict[m.string]) for m in map(BOX_CONV.fullmatch, state_dict) if m), None)
    one_to_one = next((m.group(1) for m in map(ONE_TO_ONE.match, state_dict) if m), None)
    if box is not None and box[1].shape[0] != 4 * REG_MAX:
        reg_max = box[1].shape[0] / 4
        return (f"model.{box[0]} has {box[1].shape[0]} box values a cell (reg_max {reg_max:g}"
                + (", YOLO26's end-to-end head" if reg_max == 1 and one_to_one else "") + ")")
    if one_to_one is not None:
        return f"model.{one_to_one} has an NMS-free one2one branch (YOLOv10's and YOLO26's end-to-end head)"
    return ""


def checkpoint_scale(state_dict: dict, arch: Architecture, source: str, default: str) -> str:
    """The scale whose first conv width (and layer 2 block count, where widths coincide) the file has."""
    if FIRST_CONV not in state_dict:
        return default
    channels = int(state_dict[FIRST_CONV].shape[0])
    scales = [s for s in arch.scales if first_width(arch, s) == channels]
    if len(scales) > 1:  # YOLO11 m and l: the same widths, l twice the blocks
        blocks = len({k.split(".")[3] for k in state_dict if k.startswith("model.2.m.")})
        scales = [s for s in scales if layer_blocks(arch, s, 2) == blocks]
    if len(scales) != 1:
        shown = ", ".join(f"{s} {first_width(arch, s)}" for s in arch.scales)
        raise ZooError(f"{source}: its first conv has {channels} channels, none of {arch.title}'s scales "
                       f"({shown}): pass a {arch.title} n/s/m/l/x checkpoint")
    return scales[0]


def first_width(arch: Architecture, scale: str) -> int:
    """Output channels of layer 0 at a scale: 64 x width, capped, rounded up to a multiple of 8."""
    _, width, max_channels = arch.scales[scale]
    return scaled_channels(arch.layers[0][3][0], width, max_channels)


def layer_blocks(arch: Architecture, scale: str, layer: int) -> int:
    """The blocks of a repeated layer at a scale (parse_model's depth gain)."""
    repeats = arch.layers[layer][1]
    return max(round(repeats * arch.scales[scale][0]), 1) if repeats > 1 else repeats


def checkpoint_task(state_dict: dict, meta: dict, attributes: dict) -> str:
    """The task of an ultralytics checkpoint: its pickled model class, else its training arguments,
    else its tensors (Segment has proto, Classify linear, Pose and OBB a third branch cv4)."""
    model_class = str(meta.get("module_class", "")).rpartition(".")[2]
    if model_class in MODEL_TASKS:
        return MODEL_TASKS[model_class]
    for args in (attributes.get("args"), meta.get("train_args"), meta):
        if isinstance(args, dict) and args.get("task") in TASKS:
            return args["task"]
    if any(".proto." in k for k in state_dict):
        return "segment"
    if any(k.endswith(".linear.weight") for k in state_dict):
        return "classify"
    extra = next((v for k, v in state_dict.items() if THIRD_BRANCH.fullmatch(k)), None)
    if extra is not None:
        return "obb" if extra.shape[0] == 1 else "pose"
    return "detect"


def parse_names(names, nc: int, source: str) -> dict[int, str]:
    """{id: name} from ultralytics' dict, a list, or a safetensors file's text (a dict or list literal);
    none stored: COCO's for 80 classes, else class0, class1 ... as ultralytics names them."""
    if names is None:
        return dict(enumerate(class_names())) if nc == 80 else {i: f"class{i}" for i in range(nc)}
    try:
        if isinstance(names, str):
            names = ast.literal_eval(names)
        if isinstance(names, (list, tuple)):
            names = dict(enumerate(names))
        names = {int(k): str(v) for k, v in names.items()}
    except (ValueError, SyntaxError, TypeError, AttributeError):
        raise ZooError(f"{source}: its 'names' metadata is not a list or an {{id: name}} dict: "
                       "fix or remove it from the checkpoint") from None
    if sorted(names) != list(range(nc)):
        raise ZooError(f"{source} names {len(names)} classes but its detection head has {nc}: "
                       "pass a checkpoint whose names match its head")
    return dict(sorted(names.items()))


def training_imgsz(meta: dict, attributes: dict) -> int | tuple[int, int] | None:
    """The size the model was trained at (ultralytics predicts at it by default), if the file says."""
    for args in (attributes.get("args"), meta.get("train_args"), meta):
        value = args.get("imgsz") if isinstance(args, dict) else None
        if isinstance(value, str):
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
            return tuple(value)
    return None


def holds(state_dict: dict, meta: dict) -> bool:
    """An ultralytics model (any task: others are refused by name when built) or a state dict in its naming."""
    return str(meta.get("module_class", "")).startswith("ultralytics.") or FIRST_CONV in state_dict


def checkpoint_spec(spec, weights):
    """The registry's spec fitted to the file: generation, scale, nc, names and training imgsz as the
    file holds them.

    ``yolov8`` (the family's name) takes any generation and scale, ``yolo11`` any YOLO11 scale;
    ``yolov8s``, ``yolo11m`` and the like must match the file.
    """
    info = describe(weights.state_dict, weights.meta, weights.source, spec.variant)
    named_arch = split_variant(spec.variant)[0].name
    fits = (spec.name == spec.family or (info.arch.name == named_arch and spec.name != spec.variant)
            or info.variant == spec.variant)
    if not fits:
        shown = ", ".join(list(info.names.values())[:5]) + (", ..." if info.nc > 5 else "")
        asked = spec.variant if spec.name == spec.variant else spec.name
        raise ZooError(f"{weights.source} holds a {info.variant} with {info.nc} classes ({shown}), not a {asked}: "
                       f"load it as '{info.arch.name}' (the scale from the file) or '{info.variant}'")
    preprocess = {**spec.preprocess, **({"imgsz": info.imgsz} if info.imgsz else {})}
    return replace(spec, variant=info.variant, task=REGISTRY_TASKS[info.task], preprocess=preprocess,
                   config={"nc": info.nc, "names": info.names, "kpt_shape": info.kpt_shape})
