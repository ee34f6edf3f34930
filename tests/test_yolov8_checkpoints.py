"""Custom-trained YOLOv8 checkpoints load as themselves: scale, classes, names and training size from the
file (ultralytics' best.pt and last.pt, safetensors, Candle naming); other tasks and inconsistent files
are refused in one line. custom_best.pt is made by tests/fixtures/yolov8/make_custom_best.py (upstream
ultralytics); the others are written here without torch (torch_writer)."""
from __future__ import annotations

import re

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from safetensors.numpy import save_file

import zoo
from conftest import FIXTURES
from torch_writer import Glob, Reduced, module, module_tree, script_tree, tensor, write_torch_zip
from zoo.errors import ZooError
from zoo.models import yolov8

BEST = FIXTURES / "yolov8" / "custom_best.pt"
BEST_NAMES = {0: "cat", 1: "dog", 2: "traffic cone"}
TRAINING_ARGS = Reduced(Glob("ultralytics.utils", "IterableSimpleNamespace"), {"task": "detect", "imgsz": 256})


@pytest.fixture(scope="module")
def best():
    return zoo.load(str(BEST), device="cpu")


def test_custom_best_pt_loads_as_itself(best):
    assert best.nc == 3 and best.names == BEST_NAMES and best.imgsz == 320 and best.dtype == mx.float32
    same = zoo.load("yolov8", weights=BEST, device="cpu")
    assert same.names == BEST_NAMES and same.imgsz == 320
    assert zoo.load("yolov8n", weights=BEST, device="cpu").nc == 3  # the right scale named explicitly


def test_custom_best_pt_raw_head_matches_upstream(best):
    """make_custom_best.py's upstream output: the fp16 file's model in float32 on a fixed input."""
    case = np.load(FIXTURES / "yolov8" / "custom_best_head.npz")
    got = np.array(best(mx.array(case["x"].transpose(0, 2, 3, 1)))).transpose(0, 2, 1)  # -> upstream (N, 4+nc, A)
    ref = case["y"]
    assert got.shape == ref.shape == (1, 4 + 3, 20 * 16 + 10 * 8 + 5 * 4)
    boxes = np.abs(got[:, :4] - ref[:, :4]).max() / np.abs(ref[:, :4]).max()
    scores = np.abs(got[:, 4:] - ref[:, 4:]).max() / np.abs(ref[:, 4:]).max()
    assert boxes < 1e-4 and scores < 1e-4, (boxes, scores)  # measured 1.9e-07, 1.8e-07


def test_custom_predictions_carry_the_file_names(best):
    image = np.random.default_rng(0).integers(0, 256, (120, 160, 3), np.uint8)
    result = best.predict([image], conf=0.01)[0]
    assert result.names == BEST_NAMES and len(result) > 0
    assert {c for c in result.boxes.cls.astype(int)} == {0, 1, 2} and "traffic cone" in result.verbose()
    only = best.predict([image], conf=0.01, classes="traffic cone")[0]
    assert len(only) and (only.boxes.cls == 2).all() and only.summary()[0]["name"] == "traffic cone"


def test_contradicting_variant_is_one_line():
    with pytest.raises(ZooError, match=r"custom_best.pt holds a yolov8n with 3 classes \(cat, dog, traffic cone\), "
                                       r"not a yolov8s: load it as 'yolov8' \(the scale from the file\) or 'yolov8n'"):
        zoo.load("yolov8s", weights=BEST, device="cpu")


# --- checkpoints written here (torch layout, float32) ----------------------------------------


def torch_state_dict(nc: int, scale: str = "n", seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights of a YOLOv8 with ``nc`` classes in ultralytics' naming and layout; DFL = arange(16)."""
    rng = np.random.default_rng(seed)
    sd = {}
    for name, value in tree_flatten(yolov8.DetectionModel(scale, nc).parameters()):
        shape = tuple(value.shape)
        if name.endswith("running_var") or name.endswith("bn.weight"):
            array = rng.uniform(0.6, 1.4, shape)
        elif len(shape) == 4:
            array = np.moveaxis(rng.normal(0, (1.5 / np.prod(shape[1:])) ** 0.5, shape), -1, 1)  # (O, I, kh, kw)
        else:
            array = rng.normal(0, 0.1, shape)
        sd[name] = np.ascontiguousarray(array, np.float32)
    sd["model.22.dfl.conv.weight"] = np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)
    return sd


@pytest.fixture(scope="module")
def two_class():
    """A 2-class yolov8n's weights and the MLX model that holds them (loaded by name, no metadata)."""
    sd = torch_state_dict(2)
    return sd, yolov8.DetectionModel("n", 2)


def same_outputs(model, sd) -> bool:
    reference = zoo.registry.build(zoo.get_spec("yolov8"), zoo.registry.Weights(sd, "reference", {}))
    x = mx.array(np.random.default_rng(1).uniform(0, 1, (1, 64, 96, 3)).astype(np.float32))
    return np.array_equal(np.array(model(x)), np.array(reference(x)))


def test_fp32_last_pt_with_ema_and_a_namespace_of_arguments(tmp_path, two_class):
    """ultralytics' last.pt: model None, the weights under 'ema', model.args an IterableSimpleNamespace."""
    sd, _ = two_class
    ema = module_tree(sd, "ultralytics.nn.tasks.DetectionModel", names={0: "hard hat", 1: "vest"},
                      args=TRAINING_ARGS, yaml={"nc": 2, "scale": "n", "yaml_file": "yolov8n.yaml"}, nc=2)
    path = write_torch_zip(tmp_path / "last.pt", {"epoch": 4, "model": None, "ema": ema, "updates": 120,
                                                  "train_args": {"task": "detect", "imgsz": 640}})
    model = zoo.load(str(path), device="cpu")
    assert model.names == {0: "hard hat", 1: "vest"} and model.imgsz == 256  # the model's own args first
    assert same_outputs(model, sd)


def test_a_data_parallel_wrapped_model_keeps_its_names(tmp_path, two_class):
    """A model pickled inside DistributedDataParallel (its weights module.model.*): the names, task and training size
    are the wrapped model's. Before: the wrapper's (none), so a custom 2-class model's classes read class0, class1."""
    sd, _ = two_class
    model = module_tree(sd, "ultralytics.nn.tasks.DetectionModel", names={0: "hard hat", 1: "vest"},
                        args=TRAINING_ARGS, yaml={"nc": 2, "scale": "n"})
    ddp = module("torch.nn.parallel.distributed.DistributedDataParallel", children={"module": model}, device_ids=[0])
    loaded = zoo.load(str(write_torch_zip(tmp_path / "ddp.pt", {"model": ddp, "ema": None})), device="cpu")
    assert loaded.names == {0: "hard hat", 1: "vest"} and loaded.imgsz == 256 and same_outputs(loaded, sd)


def test_safetensors_with_text_metadata_and_candle_naming(tmp_path, two_class):
    sd, _ = two_class
    meta = {"names": repr(["helmet", "vest"]), "imgsz": "416"}
    save_file(sd, str(tmp_path / "custom.safetensors"), metadata=meta)
    model = zoo.load(str(tmp_path / "custom.safetensors"), device="cpu")
    assert model.names == {0: "helmet", 1: "vest"} and model.imgsz == 416 and same_outputs(model, sd)
    candle = {yolov8_to_candle(k): v for k, v in sd.items()}
    save_file(candle, str(tmp_path / "candle.safetensors"))
    model = zoo.load("yolov8", weights=tmp_path / "candle.safetensors", device="cpu")
    assert model.names == {0: "class0", 1: "class1"} and model.imgsz == 640 and same_outputs(model, sd)


def yolov8_to_candle(key: str) -> str:
    index, rest = key.split(".", 2)[1:]
    layer = next(c for c, u in yolov8.CANDLE_PREFIXES.items() if u == f"model.{index}.")
    return layer + (rest.replace("m.", "bottleneck.", 1) if rest.startswith("m.") else rest)


@pytest.mark.parametrize("scale", ["s", "m"])
def test_scale_from_tensor_shapes_alone(tmp_path, scale):
    sd = torch_state_dict(5, scale)
    save_file(sd, str(tmp_path / "w.safetensors"))
    model = zoo.load("yolov8", weights=tmp_path / "w.safetensors", device="cpu")
    assert model.model["0"].conv.weight.shape[0] == yolov8.checkpoint.first_width(yolov8.YOLOV8, scale) and model.nc == 5


@pytest.mark.parametrize("model_class, task, args_task", [
    ("ClassificationModel", "classify", "classify"), ("OBBModel", "obb", "obb"),
    ("YOLOESegModel", "yoloe-seg", "segment")])  # yoloe-11s-seg.pt's args say segment: it was built as a YOLO11-seg
def test_other_tasks_are_refused_by_name(tmp_path, model_class, task, args_task):
    path = write_torch_zip(tmp_path / "best.pt", {"model": module(f"ultralytics.nn.tasks.{model_class}",
                                                                  {"w": tensor([1])}, args={"task": args_task})})
    with pytest.raises(ZooError, match=rf"best.pt holds a YOLO {task} model \(ultralytics.nn.tasks.{model_class}\): "
                                       "the YOLO tasks that load are detect, segment, pose; pass such a checkpoint"):
        zoo.load(str(path), device="cpu")


@pytest.mark.parametrize("extra, task", [
    ({"model.22.cv4.0.2.weight": np.zeros((1, 1, 1, 1), np.float32)}, "obb"),
    ({"model.9.linear.weight": np.zeros((3, 1), np.float32)}, "classify")])
def test_other_heads_are_refused_from_their_tensors(tmp_path, extra, task):
    save_file({"model.0.conv.weight": np.zeros((16, 3, 3, 3), np.float32), **extra}, str(tmp_path / "w.safetensors"))
    with pytest.raises(ZooError, match=f"holds a YOLO {task} model"):
        zoo.load("yolov8", weights=tmp_path / "w.safetensors", device="cpu")


def yolo26(sd: dict) -> dict:
    """YOLO26's head (ultralytics 8.4, cfg/models/26/yolo26.yaml: Detect(reg_max=1, end2end=True) at 23) on YOLO11's
    layers: no DFL, 4 box values a cell, and one2one_cv2 / one2one_cv3 copies of the box and class branches."""
    sd = {k: v for k, v in sd.items() if k != "model.23.dfl.conv.weight"}
    sd.update({k: v[:4] for k, v in sd.items() if re.fullmatch(r"model\.23\.cv2\.\d\.2\.(weight|bias)", k)})
    return {**sd, **{k.replace(".cv", ".one2one_cv", 1): v for k, v in sd.items() if k.startswith(("model.23.cv2.",
                                                                                                  "model.23.cv3."))}}


def yolov10(sd: dict) -> dict:
    """YOLOv10's layout where it meets YOLO11's: the head at 23 with DFL and one2one branches (v10Detect), PSA at 10."""
    sd = {k.replace("model.10.m.0.attn.", "model.10.attn."): v for k, v in sd.items()}
    return {**sd, **{k.replace(".cv", ".one2one_cv", 1): v for k, v in sd.items() if k.startswith("model.23.cv")}}


def yolov9(sd: dict) -> dict:
    """YOLOv9's layout where it meets YOLOv8's: the head at 22, layer 2 an ELAN (cv1 ... cv4, no bottlenecks m)."""
    sd = {k: v for k, v in sd.items() if not k.startswith("model.2.m.")}
    return {**sd, "model.2.cv3.conv.weight": np.zeros((16, 16, 3, 3), np.float32)}


@pytest.mark.parametrize("layout, name, message", [
    (yolo26, "yolo26n", r"yolo26n.pt holds a detection model \(built from yolo26n.yaml\) whose head model.23 has 4 box "
             r"values a cell \(reg_max 1, YOLO26's end-to-end head\): only YOLOv8 and YOLO11 checkpoints load"),
    (yolov10, "yolov10n", r"yolov10n.pt holds a detection model \(built from yolov10n.yaml\) whose head model.23 "
                          r"has an NMS-free one2one branch \(YOLOv10's and YOLO26's end-to-end head\)"),
], ids=["yolo26", "yolov10"])
def test_end_to_end_heads_are_refused_by_what_they_are(tmp_path, layout, name, message):
    """Before: 'do not match yolov8: missing 183 ...', as if a YOLOv8 file were damaged."""
    sd = layout(zoo.registry.synthetic_checkpoint(zoo.get_spec("yolo11n"), 0))
    tree = module_tree(sd, "ultralytics.nn.tasks.DetectionModel", yaml={"nc": 80, "yaml_file": f"{name}.yaml"})
    path = write_torch_zip(tmp_path / f"{name}.pt", {"model": None, "ema": tree, "train_args": TRAINING_ARGS})
    for name in (str(path), "yolov8", "yolo11n"):
        with pytest.raises(ZooError, match=message):
            zoo.load(name, weights=None if name == str(path) else path, device="cpu")


def test_yolov9_layers_are_refused_by_name(tmp_path, two_class):
    save_file(yolov9(two_class[0]), str(tmp_path / "yolov9t.safetensors"))
    with pytest.raises(ZooError, match=r"head is model.22, but not YOLOv8's layers \(no model.2.m.0.cv1.conv.weight\)"):
        zoo.load("yolov8", weights=tmp_path / "yolov9t.safetensors", device="cpu")


def test_fused_exports_are_refused_by_what_they_are(tmp_path, two_class):
    """`yolo export format=torchscript` traces the fused model (each BatchNorm folded into its Conv's bias) and saves
    it with torch.jit.save as yolov8n.torchscript. Before: 'unknown weights format .torchscript', and renamed .pt,
    'do not match yolov8: missing 228 (model.0.bn.bias, ...)'."""
    sd = {k: v for k, v in two_class[0].items() if ".bn." not in k}
    sd.update({k.replace(".conv.weight", ".conv.bias"): np.zeros(len(v), np.float32) for k, v in sd.items()
               if k.endswith(".conv.weight") and k.replace(".conv.weight", ".bn.weight") in two_class[0]})
    path = write_torch_zip(tmp_path / "yolov8n.torchscript", script_tree(sd, "ultralytics.nn.tasks.DetectionModel"),
                           records={"extra/config.txt": b'{"task": "detect"}'})
    for name in (str(path), "yolov8"):
        with pytest.raises(ZooError, match=r"yolov8n.torchscript holds a fused YOLO model \(each BatchNorm folded "
                                           r"into its Conv, as model.fuse\(\) and `yolo export` leave it\): pass"):
            zoo.load(name, weights=None if name == str(path) else path, device="cpu")


def test_inconsistent_files_are_one_line(tmp_path, two_class):
    sd, _ = two_class
    cases = [
        ({"names": repr(["a", "b", "c"])}, sd, "names 3 classes but its detection head has 2"),
        ({"scale": "s"}, sd, "its metadata says scale 's' but its tensors are yolov8n's"),
        ({}, {**sd, "model.0.conv.weight": np.zeros((24, 3, 3, 3), np.float32)},
         "its first conv has 24 channels, none of YOLOv8's scales"),
        ({}, {k.replace("model.22.dfl", "model.24.dfl"): v for k, v in sd.items()},
         "holds a detection model whose head is model.24, not YOLOv8's model.22 or YOLO11's model.23: "
         "only YOLOv8 and YOLO11 checkpoints load"),
        ({}, {**sd, "model.23.dfl.conv.weight": sd["model.22.dfl.conv.weight"]},
         "holds a detection model whose head is model.22, model.23, not YOLOv8's model.22 or YOLO11's model.23"),
    ]
    for i, (meta, weights, message) in enumerate(cases):
        path = tmp_path / f"bad{i}.safetensors"
        save_file(weights, str(path), metadata=meta)
        with pytest.raises(ZooError, match=message):
            zoo.load("yolov8", weights=path, device="cpu")
    ema = module_tree(sd, "ultralytics.nn.tasks.DetectionModel", yaml={"nc": 80, "scale": "n"})
    path = write_torch_zip(tmp_path / "best.pt", {"model": ema})
    with pytest.raises(ZooError, match="its yaml nc is 80 but its detection head has 2 classes"):
        zoo.load(str(path), device="cpu")


def test_a_file_of_no_known_family_asks_for_a_model_name(tmp_path):
    save_file({"fc.weight": np.zeros((2, 2), np.float32)}, str(tmp_path / "net.safetensors"))
    with pytest.raises(ZooError, match=r"cannot tell which model it holds; name the model \(e\.g\. resnet50\) and give the "
                       r"file as weights='.*net\.safetensors'"):
        zoo.load(str(tmp_path / "net.safetensors"), device="cpu")
