"""ResNet's timm-style interface: forward_features / forward_head, features_only stage maps,
a new head (num_classes, reset_classifier), list_models wildcards; every tensor against the
numpy reference's module outputs (stem relu, layer1..layer4, avgpool, fc)."""
import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

import zoo
from zoo import registry
from zoo.errors import ZooError
from zoo.validate.engine import TOLERANCES
from zoo.validate.reference import resnet as reference
from zoo.validate.reference.trace import Trace

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


def test_num_classes_via_zoo_load(capsys):
    model = zoo.load("resnet50", weights="synthetic:0", device="cpu", num_classes=10)
    assert model(mx.zeros((2, 32, 32, 3))).shape == (2, 10)
    assert "new zero-initialised 10-class head" in capsys.readouterr().err
    headless = zoo.load("resnet18", weights="synthetic:0", device="cpu", num_classes=0)
    assert headless(mx.zeros((1, 32, 32, 3))).shape == (1, 512)
    assert "the model has no head" in capsys.readouterr().err
    same = zoo.load("resnet18", weights="synthetic:0", device="cpu", num_classes=1000)
    assert "is not loaded" not in capsys.readouterr().err and mx.any(same.fc.weight).item()


def test_list_models_wildcards():
    assert zoo.list_models("resnet*") == ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
    assert zoo.list_models(["resnet1?", "yolov8[nx]"]) == ["resnet18", "yolov8n", "yolov8x"]
    assert zoo.list_models("*", task="inpaint") == ["lama"] == zoo.list_models(task="inpaint")
    assert zoo.list_models("vit*") == []
    assert len(zoo.list_models()) == len(registry.REGISTRY)


def test_bad_options_fail_before_the_weights(tmp_path):
    missing = tmp_path / "missing.safetensors"  # never reached: the options fail first
    with pytest.raises(ZooError, match="yolov8n takes no option num_classes: it has no options"):
        zoo.load("yolov8n", weights=missing, num_classes=3)
    with pytest.raises(ZooError, match="resnet18 takes no option outindices: its options are num_classes, "
                                       "features_only, out_indices"):
        zoo.load("resnet18", weights=missing, outindices=(1,))
    with pytest.raises(ZooError, match=r"out_indices \(1, 5\): pick distinct feature maps from 0 \(stem\) to 4"):
        zoo.load("resnet18", weights="synthetic", features_only=True, out_indices=(1, 5))
    with pytest.raises(ZooError, match="num_classes -1: use 0"):
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
