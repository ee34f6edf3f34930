"""ResNet's timm-style interface: forward_features / forward_head, features_only stage maps,
a new head (num_classes, reset_classifier), list_models wildcards; every tensor against the
numpy reference's module outputs (stem relu, layer1..layer4, avgpool, fc)."""
import json
import re
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from PIL import Image
from safetensors.numpy import save_file

import zoo
from zoo import registry
from zoo.errors import UsageError, ZooError
from zoo.models import resnet
from zoo.validate.engine import TOLERANCES
from zoo.validate.reference import resnet as reference
from zoo.validate.reference.trace import Trace
from conftest import cli_error, synthetic_checkpoint
from torch_writer import Glob, New, tensor, write_torch_zip

TOL = TOLERANCES["float32"]["end-to-end"]  # the validator's float32 parity bound: 1e-4 relative


def rel_err(got, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


def nchw(a: mx.array) -> np.ndarray:
    return np.array(a).transpose(0, 3, 1, 2)


@pytest.fixture(scope="module", params=["resnet18", "resnet50"])
def case(request):
    """Synthetic weights, a (2, 64, 48) input and the reference's module outputs on it."""
    spec = registry.get_spec(request.param)
    weights = registry.read_weights(spec, "synthetic:0")
    x = np.random.default_rng(7).standard_normal((2, 3, 64, 48)).astype(np.float32)
    trace = Trace()
    reference.forward(weights.state_dict, x.astype(np.float64), trace)
    return spec, weights, mx.array(x.transpose(0, 2, 3, 1)), trace.outputs


def test_forward_features_and_head_equal_the_reference(case):
    spec, weights, x, ref = case
    model = registry.build(spec, weights)
    features = model.forward_features(x)
    assert features.shape == (2, 2, 2, model.num_features)
    assert rel_err(nchw(features), ref["layer4"]) < TOL
    pooled = model.forward_head(features, pre_logits=True)
    assert pooled.shape == (2, model.num_features)
    assert rel_err(pooled, ref["avgpool"].reshape(2, -1)) < TOL
    logits = model.forward_head(features)
    assert logits.shape == (2, 1000) and rel_err(logits, ref["fc"]) < TOL
    assert mx.array_equal(model(x), logits)
    assert model(x[:0]).shape == (0, 1000)  # as timm's; ResNet-50's head was an MLX conv error on the CPU
    # timm's NCHW map gave (2, 2) pooled features with pre_logits, a reshape error without
    with pytest.raises(ZooError, match=rf"feature map has shape \(2, {model.num_features}, 2, 2\).*NCHW: pass"):
        model.forward_head(features.transpose(0, 3, 1, 2), pre_logits=True)


def test_features_only_returns_the_stage_maps(case):
    spec, weights, x, ref = case
    model = registry.build(spec, weights, features_only=True, out_indices=(1, 2, 3, 4))
    maps = model(x)
    assert len(maps) == 4 and "fc" not in model
    for i, stage_map in enumerate(maps, start=1):
        assert rel_err(nchw(stage_map), ref[f"layer{i}"]) < TOL, f"layer{i}"
    assert model.feature_info.channels() == [m.shape[-1] for m in maps]
    assert model.feature_info.reduction() == [4, 8, 16, 32]
    assert model.feature_info.module_name() == ["layer1", "layer2", "layer3", "layer4"]
    # the stem (index 0, stride 2) and a model cut after layer2: the later stages are not built
    cut = registry.build(spec, weights, features_only=True, out_indices=(0, 2))
    stem, layer2 = cut(x)
    assert "layer3" not in cut and "layer4" not in cut
    assert rel_err(nchw(stem), ref["relu"]) < TOL and rel_err(nchw(layer2), ref["layer2"]) < TOL
    assert cut.feature_info.reduction() == [2, 8]


def test_new_head_loads_every_other_weight(case, capsys):
    spec, weights, x, ref = case
    model = registry.build(spec, weights, num_classes=10)
    assert "the checkpoint's 1000-class head (fc) is not loaded: the model has a new zero-initialised " \
           "10-class head" in capsys.readouterr().err
    logits = model(x)
    assert logits.shape == (2, 10) and not mx.any(logits).item()  # zero head: zero logits
    assert not mx.any(model.fc.weight).item() and not mx.any(model.fc.bias).item()
    full = dict(tree_flatten(registry.build(spec, weights).parameters()))
    params = dict(tree_flatten(model.parameters()))
    assert set(params) - set(full) == set() and set(full) - set(params) == set()
    for name, value in params.items():
        if not name.startswith("fc."):
            assert mx.array_equal(value, full[name]), name
    assert rel_err(model.forward_head(model.forward_features(x), pre_logits=True), ref["avgpool"].reshape(2, -1)) < TOL


def test_reset_classifier():
    model = zoo.load("resnet18", weights="synthetic:0", device="cpu", dtype="float16")
    x = mx.zeros((3, 32, 32, 3), dtype=mx.float16)
    model.reset_classifier(7)
    assert model(x).shape == (3, 7) and model.fc.weight.dtype == mx.float16 and model.num_classes == 7
    assert [label for _, label, _ in model.predict(np.zeros((40, 40, 3), np.uint8), top_k=3)] == ["0", "1", "2"]
    model.reset_classifier(0)  # timm's: no head, the model returns pooled features
    assert "fc" not in model and model(x).shape == (3, 512)
    with pytest.raises(ZooError, match="no classifier head: load it with num_classes > 0"):
        model.predict(np.zeros((40, 40, 3), np.uint8))


def test_mlx_save_and_load_weights_round_trip(tmp_path):
    """MLX's own Module.save_weights / load_weights (mlx-examples' way): the digit-named children of the
    torch-named Sequentials load from the lists MLX's tree_unflatten makes of them, and index as torch's."""
    model = zoo.load("resnet18", weights="synthetic:1", device="cpu")
    path = str(tmp_path / "resnet18.safetensors")
    model.save_weights(path)
    other = zoo.load("resnet18", weights="synthetic:2", device="cpu")
    other.load_weights(path)
    x = mx.array(np.random.default_rng(0).standard_normal((1, 64, 64, 3)).astype(np.float32))
    np.testing.assert_array_equal(np.array(other(x)), np.array(model(x)))
    assert model.layer1[0] is model.layer1["0"] and model.layer1[-1] is model.layer1["1"]


def test_num_classes_via_zoo_load(capsys):
    model = zoo.load("resnet50", weights="synthetic:0", device="cpu", num_classes=10)
    assert model(mx.zeros((2, 32, 32, 3))).shape == (2, 10)
    assert "new zero-initialised 10-class head" in capsys.readouterr().err
    headless = zoo.load("resnet18", weights="synthetic:0", device="cpu", num_classes=0)
    assert headless(mx.zeros((1, 32, 32, 3))).shape == (1, 512)
    assert "the model has no head" in capsys.readouterr().err
    same = zoo.load("resnet18", weights="synthetic:0", device="cpu", num_classes=1000)
    assert "is not loaded" not in capsys.readouterr().err and mx.any(same.fc.weight).item()


@pytest.mark.parametrize("top_k", [-1, 0, 2.5, "5", True])
def test_a_top_k_that_is_no_count_is_refused(top_k):
    """top_k=-1 gave 999 of the 1000 classes (a slice [:-1]), 0 none, 2.5 and '5' a TypeError: one UsageError."""
    model = zoo.load("resnet18", weights="synthetic:0", device="cpu")
    with pytest.raises(UsageError, match=rf"^top_k={re.escape(repr(top_k))}: use a whole number >= 1"):
        model.predict(np.zeros((40, 40, 3), np.uint8), top_k=top_k)
    assert len(model.predict(np.zeros((40, 40, 3), np.uint8), top_k=np.int64(2))) == 2


@pytest.mark.parametrize("num_classes", ["10", 10.5, True])
def test_a_num_classes_that_is_no_count_is_refused(num_classes):
    """num_classes='10' and 10.5 raised TypeErrors from inside, True made a '1-class' head named 'True-class'."""
    with pytest.raises(UsageError, match=rf"^num_classes={re.escape(repr(num_classes))}: use 0 \(no head\)"):
        zoo.load("resnet18", weights="synthetic:0", device="cpu", num_classes=num_classes)


@pytest.mark.parametrize("weights, problem", [("", "is empty (an unset variable?)"), (123, "is not a path"),
                                              (b"best.pt", "is not a path")])
def test_weights_that_name_no_file_are_refused(weights, problem):
    """weights='' (an unset variable) was the current folder ('. is a folder'), 123 and b'best.pt' TypeErrors."""
    with pytest.raises(UsageError, match=rf"^weights={re.escape(repr(weights))} {re.escape(problem)}: pass a "
                                         r"checkpoint's path, 'synthetic\[:SEED\]', or None"):
        zoo.load("resnet18", weights=weights, device="cpu")


def test_a_model_is_named_by_text_or_a_path(tmp_path):
    """zoo.load(None) and zoo.load(123) raised AttributeErrors from inside; Path('resnet18') one too."""
    for name in (None, 123):
        with pytest.raises(UsageError, match=rf"^model {name!r}: pass a model's name \(zoo.list_models\(\)"):
            zoo.load(name, weights="synthetic:0")
    assert zoo.load(Path("resnet18"), weights="synthetic:0", device="cpu").num_classes == 1000


def test_calling_the_network_on_an_image_names_predict(tmp_path):
    model = zoo.load("resnet18", weights="synthetic:0", device="cpu")
    image = tmp_path / "cat.png"
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(image)
    # as ultralytics' model("cat.png"): one error naming predict, not a dtype complaint or a bare unpacking error
    for given, got in ((str(image), "got a str"), (Image.open(image), "got a PngImageFile"),
                       (np.zeros((40, 40, 3), np.uint8), r"got shape \(40, 40, 3\)")):
        with pytest.raises(ZooError, match=f"{got}: for image files, PIL images .* use model.predict"):
            model(given)
    assert len(model.predict(str(image))) == 5



def test_supervision_classifications_of_the_logits_as_predict():
    """docs/features.md's stand-in for sv.Classifications.from_timm (torch's softmax(dim=-1).cpu() on the logits):
    the softmax of the network's output on preprocess_image, and its top 5 are predict's."""
    import supervision as sv

    model = zoo.load("resnet18", weights="synthetic:0", device="cpu")
    image = np.random.default_rng(3).integers(0, 256, (50, 70, 3), np.uint8)
    x = mx.array(model.preprocess_image(image))[None]
    probabilities = np.array(mx.softmax(model(x), axis=-1))[0]
    top_ids, top_confidences = sv.Classifications(class_id=np.arange(len(probabilities)),
                                                  confidence=probabilities).get_top_k(5)
    predicted = model.predict(image)
    assert top_ids.tolist() == [index for index, _, _ in predicted]
    assert top_confidences == pytest.approx([p for _, _, p in predicted], rel=1e-5)

def test_list_models_wildcards():
    assert zoo.list_models("resnet*") == ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
    assert zoo.list_models(["resnet1?", "yolov8[nx]"]) == ["resnet18", "yolov8n", "yolov8x"]
    assert zoo.list_models("*", task="inpaint") == ["lama"] == zoo.list_models(task="inpaint")
    assert zoo.list_models("vit*") == []
    assert len(zoo.list_models()) == len(registry.REGISTRY)
    # timm's exclude_filters (a TypeError before): patterns, or one, of the names to leave out, tags included
    assert zoo.list_models("resnet*", exclude_filters=["*101", "resnet15?"]) == ["resnet18", "resnet34", "resnet50"]
    assert zoo.list_models("resnet*", pretrained=True, exclude_filters="resnet1*") == [
        "resnet34.tv_in1k", "resnet50.tv_in1k"]


def test_bad_options_fail_before_the_weights(tmp_path):
    missing = tmp_path / "missing.safetensors"  # never reached: the options fail first
    with pytest.raises(ZooError, match="yolov8n takes no option num_classes: it has no options"):
        zoo.load("yolov8n", weights=missing, num_classes=3)
    with pytest.raises(ZooError, match="resnet18 takes no option outindices: its options are num_classes, "
                                       "features_only, out_indices"):
        zoo.load("resnet18", weights=missing, outindices=(1,))
    with pytest.raises(ZooError, match=r"out_indices \(1, 5\): pick distinct feature maps from 0 \(stem\) to 4"):
        zoo.load("resnet18", weights="synthetic", features_only=True, out_indices=(1, 5))
    with pytest.raises(ZooError, match="num_classes=-1: use 0"):
        zoo.load("resnet18", weights="synthetic", num_classes=-1)
    features = zoo.load("resnet18", weights="synthetic", features_only=True)
    with pytest.raises(ZooError, match="forward_features needs every stage"):
        features.forward_features(mx.zeros((1, 32, 32, 3)))
    with pytest.raises(ZooError, match="features_only model has no classifier"):
        features.reset_classifier(3)


def test_top_k_over_a_folder_as_csv_and_json(tmp_path, capsys):
    import csv
    import json

    from PIL import Image

    from zoo.run import main

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for name in ("a.jpg", "b.png", "c.png"):
        Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(folder / name)
    argv = ["resnet18", str(folder), "--weights", "synthetic:0", "--device", "cpu", "--top-k", "3",
            "--csv", str(tmp_path / "top.csv"), "--json", str(tmp_path / "top.json")]
    assert main(argv) == 0
    capsys.readouterr()
    as_json = json.loads((tmp_path / "top.json").read_text())
    with open(tmp_path / "top.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["filename", "index_0", "index_1", "index_2", "label_0", "label_1", "label_2",
                             "prob_0", "prob_1", "prob_2"]
    assert [row["filename"] for row in rows] == [str(folder / n) for n in ("a.jpg", "b.png", "c.png")] == list(as_json)
    model = zoo.load("resnet18", weights="synthetic:0", device="cpu")
    for row in rows:
        expected = model.predict(row["filename"], top_k=3)
        assert [(int(row[f"index_{i}"]), row[f"label_{i}"]) for i in range(3)] == [(i, label) for i, label, _ in expected]
        assert [float(row[f"prob_{i}"]) for i in range(3)] == pytest.approx([p for *_, p in expected], rel=1e-5)
        assert [t["index"] for t in as_json[row["filename"]]] == [i for i, _, _ in expected]


def test_json_refuses_an_input_read_twice_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """classify --json is one object keyed by path: an image given twice, or given and also in a folder given, was
    written as one key twice, and json.load kept one of the two results without a word. Refused in one line before
    the weights are read (they do not exist here); a resumed --jsonl holding two results for one image (a run
    without --json given it twice) is refused too, before the model loads."""
    from PIL import Image

    from zoo.run import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "imgs").mkdir()
    for name in ("a.png", "b.png"):
        Image.fromarray(np.full((40, 56, 3), 90, np.uint8)).save(tmp_path / "imgs" / name)
    missing = ["--weights", "nothere.safetensors", "--device", "cpu"]
    for inputs in (["imgs/a.png", "imgs/a.png"], ["imgs", "./imgs/a.png"]):
        assert main(["resnet18", *inputs, "--json", "out.json", *missing]) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            "error: --json out.json: imgs/a.png is read twice (given twice, or also in a folder or list given), and "
            "its JSON object holds one entry per path: give each input once, or pass --jsonl or --csv instead (a row "
            "per input)")
    synthetic = ["--weights", "synthetic:0", "--device", "cpu"]
    assert main(["resnet18", "imgs/a.png", "imgs/a.png", "--jsonl", "r.jsonl", *synthetic]) == 0
    assert main(["resnet18", "imgs", "--jsonl", "r.jsonl", "--resume", "--json", "out.json", *synthetic]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: --json out.json: r.jsonl holds two results for imgs/a.png (a run given it twice), and the JSON object "
        "holds one entry per path: leave out --json, or run again into a new --jsonl with each input once")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imgs", "r.jsonl"]


def test_top_1_csv_has_timms_unnumbered_columns(tmp_path, capsys):
    """timm's inference.py numbers a rank's columns only when there are several: its top-1 CSV is filename, index,
    label, prob; ours was filename, index_0, label_0, prob_0, so a script reading timm's "prob" column failed."""
    import csv

    from PIL import Image

    from zoo.run import main

    Image.fromarray(np.full((40, 56, 3), 90, np.uint8)).save(tmp_path / "a.png")
    argv = ["resnet18", str(tmp_path / "a.png"), "--weights", "synthetic:0", "--device", "cpu", "--top-k", "1",
            "--csv", str(tmp_path / "top1.csv")]
    assert main(argv) == 0
    capsys.readouterr()
    with open(tmp_path / "top1.csv", newline="") as f:
        row, = csv.DictReader(f)
    (index, label, probability), = zoo.load("resnet18", weights="synthetic:0", device="cpu").predict(
        str(tmp_path / "a.png"), top_k=1)
    assert list(row) == ["filename", "index", "label", "prob"]
    assert (int(row["index"]), row["label"]) == (index, label) and float(row["prob"]) == pytest.approx(probability)


# What timm 1.0.31 gives for the same calls (timm.create_model(NAME, ...) on torch.randn(2, 3, 65, 47), run
# once in /work/venv-torch, 2026-11-28): shapes NCHW as timm returns them, channels and reductions of
# feature_info. Ours are NHWC: the same numbers with the channels last.
TIMM_STAGES = {  # feature map (0: the stem's ReLU, timm's act1; 1-4: layer1..4) -> (C, H, W), reduction
    "resnet18": [((64, 33, 24), 2), ((64, 17, 12), 4), ((128, 9, 6), 8), ((256, 5, 3), 16), ((512, 3, 2), 32)],
    "resnet50": [((64, 33, 24), 2), ((256, 17, 12), 4), ((512, 9, 6), 8), ((1024, 5, 3), 16), ((2048, 3, 2), 32)],
}
TIMM_OUT_INDICES = {  # out_indices -> the maps timm returns, and feature_info.out_indices as timm keeps it
    None: ([0, 1, 2, 3, 4], (0, 1, 2, 3, 4)), (-1,): ([4], (-1,)), 3: ([2, 3, 4], (-3, -2, -1)),
    (1, 2, 3, 4): ([1, 2, 3, 4], (1, 2, 3, 4)), (0, -2): ([0, 3], (0, -2)), 1: ([4], (-1,)),
}
TIMM_INTERMEDIATES = [  # forward_intermediates keywords -> final map, intermediates (maps in the network's order)
    ({"indices": None}, 4, [0, 1, 2, 3, 4]), ({"indices": 2}, 4, [3, 4]), ({"indices": [-1, 0]}, 4, [0, 4]),
    ({"indices": [1], "stop_early": True}, 1, [1]),
]
TIMM_POOLED = {"": None, "avg": 1, "max": 1, "avgmax": 1, "catavgmax": 2}  # num_classes=0: width x num_features; '' the map


def nhwc_shape(name: str, index: int, n: int = 1) -> tuple:
    (c, h, w), _ = TIMM_STAGES[name][index]
    return (n, h, w, c)


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_feature_extraction_as_timm(name):
    spec = registry.get_spec(name)  # shapes do not depend on the weights: the models keep their random init
    x = mx.array(np.random.default_rng(5).standard_normal((1, 65, 47, 3)).astype(np.float32))  # timm's batch: 2
    for out_indices, (maps, kept) in TIMM_OUT_INDICES.items():
        model = resnet.build(spec, features_only=True, **({} if out_indices is None else {"out_indices": out_indices}))
        if out_indices in (None, (0, -2)):  # every map, and a model cut after layer3 (eager: shapes only)
            assert [m.shape for m in model.forward(x)] == [nhwc_shape(name, i) for i in maps], out_indices
        assert model.feature_info.channels() == [TIMM_STAGES[name][i][0][0] for i in maps]
        assert model.feature_info.reduction() == [TIMM_STAGES[name][i][1] for i in maps]
        assert model.feature_info.out_indices == kept and len(model.feature_info) == 5
    cut = resnet.build(spec, features_only=True, out_indices=(0, -2))  # layer4 is not built
    with pytest.raises(UsageError, match="feature map 4 is not built: this features_only model stops at index 3"):
        cut.forward_intermediates(x, indices=[-1])
    full = resnet.build(spec, num_classes=0, global_pool="")
    assert full.feature_info.channels() == [c for (c, _, _), _ in TIMM_STAGES[name]]
    assert full.feature_info.reduction() == [r for _, r in TIMM_STAGES[name]]
    for keywords, final, maps in TIMM_INTERMEDIATES:
        last, picked = full.forward_intermediates(x, **keywords)
        assert last.shape == nhwc_shape(name, final) and [m.shape for m in picked] == [nhwc_shape(name, i) for i in maps]
    only = full.forward_intermediates(x, intermediates_only=True, output_fmt="NCHW")
    assert [m.shape for m in only] == [(1, *chw) for chw, _ in TIMM_STAGES[name]]
    layer4 = only[-1].transpose(0, 2, 3, 1)
    for pool, width in TIMM_POOLED.items():
        if pool:
            full.reset_classifier(0, pool)
        expected = nhwc_shape(name, 4) if width is None else (1, width * full.num_features)
        assert full.forward_head(layer4).shape == expected and full.global_pool.pool_type == pool
        assert full.head_hidden_size == (width or 1) * full.num_features


def test_a_timm_tensor_is_refused_never_read_as_another_image():
    """timm's input is NCHW: (1, 3, 224, 224) read as NHWC was a 3x224 image of 224 channels, and the CPU's
    C convolution gave logits for it (from memory past the input); every entry point now says how to fix it."""
    model = zoo.load("resnet18", weights="synthetic:0", device="cpu")
    nchw = mx.zeros((1, 3, 32, 32))
    for call in (model, model.forward, model.forward_features, model.forward_intermediates):
        with pytest.raises(ZooError, match=r"shape \(1, 3, 32, 32\): expected \(N, H, W, 3\).*x.transpose\(0, 2, 3, 1\)"):
            call(nchw)
    for shape in ((1, 32, 32, 1), (1, 32, 32, 4)):  # grey, RGBA
        with pytest.raises(ZooError, match="expected \\(N, H, W, 3\\)"):
            model(np.zeros(shape, np.float32))
    with pytest.raises(ZooError, match=r"takes an \(N, H, W, 3\) normalised batch, got shape \(32, 32, 3\).*predict"):
        model(np.zeros((32, 32, 3), np.float32))  # no batch axis: one image, which predict() takes
    assert model(nchw.transpose(0, 2, 3, 1)).shape == (1, 1000)
    with pytest.raises(ValueError, match="has 1 channels where the weight"):  # the layer itself, as mx.conv2d
        model.conv1(mx.zeros((1, 32, 32, 1)))


def test_intermediates_and_pools_equal_the_reference(case):
    spec, weights, x, ref = case
    model = registry.build(spec, weights)
    last, maps = model.forward_intermediates(x, indices=[-4, -3, -2, -1])
    assert mx.array_equal(last, maps[-1])
    for i, stage_map in enumerate(maps, start=1):
        assert rel_err(nchw(stage_map), ref[f"layer{i}"]) < TOL, f"layer{i}"
    layer4 = np.asarray(ref["layer4"], np.float64)
    average, peak = layer4.mean(axis=(2, 3)), layer4.max(axis=(2, 3))
    for pool, expected in {"max": peak, "avgmax": (average + peak) / 2,
                           "catavgmax": np.concatenate([average, peak], axis=1)}.items():
        model.reset_classifier(0, pool)
        assert rel_err(model.forward_head(last), expected) < TOL, pool
    model.reset_classifier(0, "")
    assert rel_err(nchw(model(x)), layer4) < TOL  # the user path (compiled), no pooling: the layer4 map
    with pytest.raises(UsageError, match="global_pool='' keeps the .* map, which no 10-class head takes"):
        model.reset_classifier(10)
    with pytest.raises(UsageError, match="global_pool='fast': use one of 'avg', 'max'"):
        model.reset_classifier(0, "fast")
    model.reset_classifier(10, "max")  # timm's: the pooling given replaces the one kept
    assert model(x).shape == (2, 10) and model.get_classifier() is model.fc and model.get_classifier(True) == "fc"


TIMM_URLS = {18: "resnet18-f37072fd", 34: "resnet34-b627a593", 50: "resnet50-0676ba61", 101: "resnet101-63fe2227",
             152: "resnet152-394f9c45"}


def test_pretrained_cfg_as_timm_reports():
    # timm 1.0.31's timm.create_model("resnetN.tv_in1k").pretrained_cfg (/work/venv-torch-cpu-speed, 2026-11-30),
    # key for key in its order: url, custom_load, fixed_input_size and origin_url were missing (a KeyError in code
    # reading pretrained_cfg["url"] or ["fixed_input_size"], as timm's own helpers do)
    for depth in (18, 34, 50, 101, 152):
        cfg = resnet.pretrained_cfg(registry.get_spec(f"resnet{depth}"))
        assert list(cfg.items()) == [
            ("url", f"https://download.pytorch.org/models/{TIMM_URLS[depth]}.pth"),
            ("hf_hub_id", f"timm/resnet{depth}.tv_in1k"), ("architecture", f"resnet{depth}"), ("tag", "tv_in1k"),
            ("custom_load", False), ("input_size", (3, 224, 224)), ("fixed_input_size", False),
            ("interpolation", "bilinear"), ("crop_pct", 0.875), ("crop_mode", "center"),
            ("mean", (0.485, 0.456, 0.406)), ("std", (0.229, 0.224, 0.225)), ("num_classes", 1000),
            ("pool_size", (7, 7)), ("first_conv", "conv1"), ("classifier", "fc"), ("license", "bsd-3-clause"),
            ("origin_url", "https://github.com/pytorch/vision")]


def test_features_in_the_networks_order_and_indices_of_another_type_refused():
    """out_indices=(4, 0) gave layer4's map first (timm's FeatureListNet gives the stem's: the network's order);
    out_indices='1' and indices=1.5 were TypeErrors from inside, out_indices=(True,) a map 'True is not built'."""
    spec = registry.get_spec("resnet18")
    x = mx.array(np.random.default_rng(5).standard_normal((1, 65, 47, 3)).astype(np.float32))
    model = resnet.build(spec, features_only=True, out_indices=(4, 0))
    assert [m.shape for m in model.forward(x)] == [nhwc_shape("resnet18", 0), nhwc_shape("resnet18", 4)]
    assert model.feature_info.channels() == [512, 64]  # timm's: in the order of out_indices
    for bad in ("1", (True,), (1.0,), 1.5):
        with pytest.raises(UsageError, match=r"out_indices=.*: pass an int n \(the last n feature maps\) or a tuple "
                                             r"of ints from 0 \(stem\) to 4"):
            resnet.build(spec, features_only=True, out_indices=bad)
    full = resnet.build(spec, num_classes=0)
    for bad in ("a", 1.5, [True]):
        with pytest.raises(UsageError, match=r"indices=.*: pass an int n"):
            full.forward_intermediates(x, indices=bad)
    assert len(full.forward_intermediates(x, indices=np.int64(2), intermediates_only=True)) == 2


def test_tagged_names_pretrained_and_is_model(capsys):
    model = zoo.load("resnet18.tv_in1k", pretrained=False, device="cpu")  # timm's random init: synthetic:0
    assert model.default_cfg is model.pretrained_cfg and model.pretrained_cfg["tag"] == "tv_in1k"
    same = registry.build(registry.get_spec("resnet18"), registry.read_weights(registry.get_spec("resnet18"), "synthetic:0"))
    assert all(mx.array_equal(a, b) for (_, a), (_, b) in zip(tree_flatten(model.parameters()), tree_flatten(same.parameters())))
    with pytest.raises(UsageError, match="resnet50.a1_in1k: mlx-zoo has the tv_in1k weights of resnet50 only: use "
                                         r"resnet50.tv_in1k \(or resnet50\), or pass weights=PATH with the checkpoint"):
        zoo.load("resnet50.a1_in1k", weights="synthetic")
    from zoo.run import main
    assert main(["resnet50.a1_in1k", "a.jpg"]) == 2  # the command line's words: it has no weights= (it said so)
    assert capsys.readouterr().err.strip().endswith("or pass --weights PATH with the checkpoint you want")
    assert zoo.list_models("resnet*", pretrained=True) == [f"resnet{d}.tv_in1k" for d in (18, 34, 50, 101, 152)]
    assert zoo.list_models("resnet50", pretrained=True) == ["resnet50.tv_in1k"] == zoo.list_models("*.tv_in1k", pretrained=True)[2:3]
    assert zoo.list_models(["yolov8n", "lama"], pretrained=True) == ["yolov8n", "lama"]  # no tag: their plain names
    assert [zoo.is_model(n) for n in ("resnet50", "resnet50.tv_in1k", "resnet50.bogus", "yolov8", "vit_base")] == \
        [True, True, True, True, False]  # timm's is_model ignores the tag


def test_a_head_that_contradicts_the_model_is_an_error(tmp_path, capsys):
    from safetensors.numpy import save_file

    from zoo.run import main

    spec = registry.get_spec("resnet18")
    state = dict(registry.read_weights(spec, "synthetic:0").state_dict)
    rng = np.random.default_rng(1)
    state["fc.weight"] = rng.standard_normal((10, 512)).astype(np.float32)
    state["fc.bias"] = rng.standard_normal(10).astype(np.float32)
    path = tmp_path / "finetuned10.safetensors"
    save_file(state, str(path))
    with pytest.raises(ZooError, match=r"the checkpoint has a 10-class head on 512 features \(fc\) where the model "
                                       r"has a 1000-class head on 512 features: pass num_classes=10 to use it"):
        zoo.load("resnet18", weights=path, device="cpu")
    model = zoo.load("resnet18", weights=path, device="cpu", num_classes=10)
    x = mx.array(rng.standard_normal((1, 40, 40, 3)).astype(np.float32))
    pooled = np.array(model.forward_head(model.forward_features(x), pre_logits=True))
    assert np.allclose(np.array(model(x)), pooled @ state["fc.weight"].T + state["fc.bias"], atol=1e-4)
    assert "note" not in capsys.readouterr().err
    headless = {k: v for k, v in state.items() if not k.startswith("fc.")}
    with pytest.raises(ZooError, match="the checkpoint has no head .* pass num_classes=N for a new"):
        registry.build(spec, registry.Weights(headless, "headless", {}))
    assert registry.build(spec, registry.Weights(headless, "headless", {}), num_classes=0)(x).shape == (1, 512)
    # the command line: one error line naming --num-classes, then the run with it
    image = tmp_path / "a.png"
    from PIL import Image
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(image)
    assert main(["resnet18", str(image), "--weights", str(path), "--device", "cpu"]) == 1
    assert capsys.readouterr().err.splitlines()[-1].endswith(": pass --num-classes 10 to use it")  # no API words
    headless_file = tmp_path / "headless.safetensors"
    save_file(headless, str(headless_file))
    assert main(["resnet18", str(image), "--weights", str(headless_file), "--device", "cpu"]) == 1
    assert capsys.readouterr().err.splitlines()[-1].endswith("has no head (fc) where the model has a 1000-class head "
                                                            "on 512 features: pass --num-classes N for a new "
                                                            "zero-initialised N-class head")
    assert main(["resnet18", str(image), "--weights", str(path), "--device", "cpu", "--num-classes", "10",
                 "--top-k", "2", "--json", str(tmp_path / "top.json")]) == 0
    import json
    expected = model.predict(str(image), top_k=2)
    assert [t["index"] for t in json.loads((tmp_path / "top.json").read_text())[str(image)]] == [i for i, _, _ in expected]


def test_num_classes_on_both_command_lines(capsys):
    from zoo.cli import classify, ray_run

    args = ray_run.parser_for(registry.get_spec("resnet18")).parse_args(
        ["resnet18", "photos/", "--ray", "--num-classes", "10"])
    assert classify.model_options(args) == {"num_classes": 10}
    assert "--num-classes 0: give the number of classes of the checkpoint's head, 1 or more" in cli_error(
        ["resnet18", "photos/", "--num-classes", "0", "--weights", "synthetic"], capsys)


def test_create_model_as_timm(tmp_path):
    from conftest import synthetic_checkpoint

    # timm.create_model's defaults: pretrained=False is random weights (no Hub read), checkpoint_path loads one
    model = zoo.create_model("resnet18", num_classes=10, device="cpu")
    assert model.get_classifier().weight.shape == (10, 512)
    path = synthetic_checkpoint("resnet18", tmp_path / "r18.safetensors", seed=3)
    loaded = zoo.create_model("resnet18", checkpoint_path=path, device="cpu")
    expected = zoo.load("resnet18", weights=path, device="cpu")
    assert all(np.array_equal(np.array(a), np.array(b)) for (_, a), (_, b)
               in zip(tree_flatten(loaded.parameters()), tree_flatten(expected.parameters())))
    features = zoo.create_model("resnet18", features_only=True, out_indices=(-1,), device="cpu")
    assert features.feature_info.channels() == [512]


def test_an_empty_batch_gives_empty_logits_as_timm():
    """model(x) of a batch of 0 images was MLX's 'Cannot infer the shape of an empty array' (the head's flatten);
    timm 1.0.31 returns (0, 1000)."""
    model = resnet.build(registry.get_spec("resnet18"))
    assert model(mx.zeros((0, 32, 32, 3))).shape == (0, 1000)
    model.reset_classifier(0, "catavgmax")
    assert model(mx.zeros((0, 32, 32, 3))).shape == (0, 1024)


def timm_hub_config(architecture: str, tag: str) -> dict:
    """config.json as timm's save_for_hf writes it beside model.safetensors (timm 1.0.31, resnet18.a1_in1k's values)."""
    return {"architecture": architecture, "num_classes": 1000, "num_features": 512, "global_pool": "avg",
            "model_args": {"in_chans": 3, "num_classes": 1000, "global_pool": "avg"},
            "pretrained_cfg": {"tag": tag, "custom_load": False, "input_size": [3, 224, 224],
                               "test_input_size": [3, 288, 288], "fixed_input_size": False, "interpolation": "bicubic",
                               "crop_pct": 0.95, "test_crop_pct": 1.0, "crop_mode": "center",
                               "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "num_classes": 1000,
                               "pool_size": [7, 7], "first_conv": "conv1", "classifier": "fc", "license": "apache-2.0"}}


def test_a_timm_config_beside_the_weights_is_followed(tmp_path, capsys):
    """resnet18.a1_in1k's model.safetensors with its Hub config.json: crop_pct 0.95 (resize 235) and bicubic, where
    the name's tv_in1k is 256 bilinear. Before: the name's pre-processing and pretrained_cfg, without a word."""
    weights = synthetic_checkpoint("resnet18", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(timm_hub_config("resnet18", "a1_in1k")))
    for model in (zoo.load("resnet18", weights=weights, device="cpu"), zoo.load(str(weights), device="cpu")):
        assert model.preprocess["resize"] == 235 and model.preprocess["crop"] == 224
        assert model.pretrained_cfg["tag"] == "a1_in1k" and model.pretrained_cfg["interpolation"] == "bicubic"
    assert "note: resnet18 was trained on images resized bicubic (its config.json)" in capsys.readouterr().err


def timm_train_checkpoint(path: Path, model: str) -> Path:
    """timm's train.py checkpoint (CheckpointSaver): arch is the class's name, args the argparse.Namespace of the
    run (--model), the EMA beside the weights."""
    weights = registry.read_weights(registry.get_spec("resnet18"), "synthetic:0").state_dict
    state = {k: tensor(v) for k, v in weights.items()}
    args = New(Glob("argparse", "Namespace"), {"model": model, "pretrained": False, "crop_pct": None, "epochs": 300})
    return write_torch_zip(path, {"epoch": 3, "arch": "resnet", "state_dict": state, "version": 2, "args": args,
                                  "state_dict_ema": state, "metric": 12.5})


def test_a_hub_folder_without_its_config_says_which_cfg_is_used(tmp_path, capsys):
    """resnet18.a1_in1k's model.safetensors in its Hub cache folder, without config.json (hf_hub_download fetches only
    the file asked for): its own crop_pct and interpolation are unknown; the name's tv_in1k ones are said in a note."""
    folder = tmp_path / "models--timm--resnet18.a1_in1k" / "snapshots" / "0a1b"
    folder.mkdir(parents=True)
    model = zoo.load("resnet18", weights=synthetic_checkpoint("resnet18", folder / "model.safetensors"), device="cpu")
    assert model.pretrained_cfg["tag"] == "a1_in1k" and model.preprocess["resize"] == 256
    assert ("note: resnet18.a1_in1k weights (their Hub folder's name) without their config.json: pre-processed as "
            "tv_in1k (resize 256, crop 224); put the config.json of timm/resnet18.a1_in1k beside them for theirs"
            ) in capsys.readouterr().err


def test_torchvision_v2_files_are_resized_as_torchvision(tmp_path):
    """torchvision's ResNet50_Weights.IMAGENET1K_V2 (resnet50-11ad3fa6.pth, a plain state dict) was trained for a resize
    to 232, not V1's 256 (timm's tv2_in1k: crop_pct 0.965). Before: 256, without a word."""
    sd = registry.read_weights(registry.get_spec("resnet50"), "synthetic:0").state_dict
    path = write_torch_zip(tmp_path / "resnet50-11ad3fa6.pth", {k: tensor(v, np.float16) for k, v in sd.items()})
    model = zoo.load("resnet50", weights=path, device="cpu")
    assert model.preprocess["resize"] == 232 and model.preprocess["crop"] == 224
    assert model.pretrained_cfg["tag"] == "tv2_in1k" and model.pretrained_cfg["url"].endswith("resnet50-11ad3fa6.pth")


def test_pretrained_cfg_overlay_file_loads_as_timm(tmp_path):
    """timm.create_model("resnet18.a1_in1k", pretrained=True, pretrained_cfg_overlay=dict(file=PATH)): timm's way to
    load a local pretrained file. Before: 'resnet18 takes no option pretrained_cfg_overlay'."""
    weights = synthetic_checkpoint("resnet18", tmp_path / "model.safetensors", seed=3)
    (tmp_path / "config.json").write_text(json.dumps(timm_hub_config("resnet18", "a1_in1k")))
    model = zoo.create_model("resnet18", pretrained=True, pretrained_cfg_overlay=dict(file=str(weights)))
    same = zoo.load("resnet18", weights=weights, device="cpu")
    assert mx.array_equal(model.conv1.weight, same.conv1.weight) and model.preprocess["resize"] == 235
    with pytest.raises(UsageError, match="pretrained_cfg_overlay: mlx-zoo takes only file= .*, not crop_pct"):
        zoo.create_model("resnet18", pretrained=True, pretrained_cfg_overlay=dict(file=str(weights), crop_pct=0.9))


@pytest.mark.parametrize("where", ["config.json", "hub folder", "args.model"])
def test_timm_networks_with_resnet_tensors_are_refused(tmp_path, where):
    """timm's resnetblur18 / resnetaa50 have exactly ResNet's tensor names and shapes (their blur and average pools
    hold none), so their weights loaded into a ResNet without a word. What timm says of the file is checked."""
    hub = tmp_path / "models--timm--resnetblur18.bh_in1k" / "snapshots" / "0a1b"
    folder = hub if where == "hub folder" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    if where == "args.model":
        weights = timm_train_checkpoint(folder / "last.pth.tar", "resnetblur18")
        assert zoo.load(str(timm_train_checkpoint(tmp_path / "ours.pth.tar", "resnet18")), device="cpu")
    else:
        weights = synthetic_checkpoint("resnet18", folder / "model.safetensors")
    if where == "config.json":
        (folder / "config.json").write_text(json.dumps(timm_hub_config("resnetblur18", "bh_in1k")))
    told = {"config.json": "config.json says so", "hub folder": "its Hub folder says so",
            "args.model": "its args.model says so"}[where]
    for args in (("resnet18",), ()):
        with pytest.raises(ZooError, match=rf"holds timm's resnetblur18 \({told}\), not resnet18: another network"):
            zoo.load(*args, weights=weights, device="cpu") if args else zoo.load(str(weights), device="cpu")


@pytest.mark.parametrize("change, held", [
    (lambda sd: {**{k: v for k, v in sd.items() if k != "conv1.weight"}, "conv1.0.weight": np.zeros((32, 3, 3, 3))},
     r"a ResNet with a deep stem \(conv1.0, conv1.3 ...: timm's resnet50d"),
    (lambda sd: {**sd, "layer1.0.se.fc1.weight": np.zeros((8, 256, 1, 1))}, r"a ResNet with attention in its blocks"),
    (lambda sd: {**sd, "layer1.0.conv2.weight": np.zeros((128, 4, 3, 3))},
     r"a ResNeXt \(32 groups of 4 channels in its 3x3 convs: resnext50_32x4d's kind\)"),
    (lambda sd: {**sd, "layer1.0.conv2.weight": np.zeros((128, 128, 3, 3))},
     r"a wide ResNet \(128 channels in layer1's 3x3 convs where torchvision's has 64: wide_resnet50_2's kind\)"),
    (lambda sd: {k: v for k, v in sd.items() if not k.startswith(("layer1.2.", "layer2.2.", "layer2.3.", "layer3.2.",
                                                                   "layer3.3.", "layer3.4.", "layer3.5.",
                                                                   "layer4.2."))},
     r"a ResNet of bottleneck blocks \(2, 2, 2, 2\) a stage \(timm's resnet26"),
], ids=["resnet50d", "seresnet50", "resnext50_32x4d", "wide_resnet50_2", "resnet26"])
def test_timm_resnet_variants_are_refused_by_name(tmp_path, change, held):
    """timm's ResNet variants with torchvision's names (shapes and a few keys apart). Before: 'do not match resnet50:
    mis-shaped 176 ...: pass the checkpoint of this model variant', or 'cannot tell which model it holds'."""
    sd = change(dict(registry.read_weights(registry.get_spec("resnet50"), "synthetic:0").state_dict))
    save_file({k: np.asarray(v, np.float32) for k, v in sd.items()}, str(tmp_path / "timm.safetensors"))
    for args in (("resnet50",), ()) if "resnet26" not in held else (("resnet50",),):  # identified: E86's message
        with pytest.raises(ZooError, match=rf"timm.safetensors holds {held}.*, not resnet50: mlx-zoo builds "
                                           r"torchvision's ResNets \(resnet18, .*\); pass a checkpoint of one of them"):
            zoo.load(*args, weights=tmp_path / "timm.safetensors", device="cpu") if args else \
                zoo.load(str(tmp_path / "timm.safetensors"), device="cpu")
