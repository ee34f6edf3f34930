"""ResNet: strict loading of torchvision-named weights, parity with the upstream case."""
import numpy as np
import pytest

import zoo
from conftest import load_case, rebuild_input, synthetic_checkpoint
from zoo.errors import ZooError
from zoo.validate.capture import recording
from zoo.validate.reference import resnet as reference
from zoo.weights.checkpoint import read_checkpoint

import mlx.core as mx


@pytest.fixture(scope="module")
def case():
    arrays, sidecar = load_case("resnet", "resnet18_seed0_224")
    x = rebuild_input(sidecar, lambda: np.random.default_rng(1234).standard_normal((1, 3, 224, 224)).astype(np.float32))
    return x, arrays, sidecar


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory):
    return synthetic_checkpoint("resnet18", tmp_path_factory.mktemp("w") / "resnet18.safetensors")


def rel_err(got, ref):
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


def traced(case_arrays, sidecar, name):
    return case_arrays[f"trace/{name}"], sidecar["channels"][f"trace/{name}"]


def test_mlx_resnet18_matches_upstream_case(case, resnet18_file):
    x, arrays, sidecar = case
    model = zoo.load("resnet18", weights=resnet18_file, device="cpu")
    with recording(model) as records:
        logits = model(mx.array(x.transpose(0, 2, 3, 1)))
        mx.eval(logits)
    assert rel_err(logits, arrays["output"]) < 1e-4
    names = [k[len("trace/"):] for k in arrays.files if k.startswith("trace/")]
    assert len(names) == 18  # every traced module: stem, stages, blocks, avgpool, fc
    # on the CPU the stem's convolution, BatchNorm and ReLU run as one C call (ResNet.stem): none of
    # them records a value of its own, and the value they make reaches maxpool on
    assert {"conv1", "bn1", "relu"}.isdisjoint(records)
    for name in [name for name in names if name not in ("conv1", "bn1", "relu")]:
        ref, channels = traced(arrays, sidecar, name)
        got = np.array(records[name].output)
        got = got.transpose(0, 3, 1, 2)[:, channels] if got.ndim == 4 else got
        assert rel_err(got, ref) < 1e-4, name


def test_numpy_reference_matches_upstream_case(case, resnet18_file):
    x, arrays, sidecar = case
    from zoo.validate.reference.trace import Trace

    trace = Trace()
    logits = reference.forward(read_checkpoint(resnet18_file), x.astype(np.float64), trace)
    assert rel_err(logits, arrays["output"]) < 1e-6
    for key in arrays.files:
        if key.startswith("trace/"):
            ref, channels = traced(arrays, sidecar, key[len("trace/"):])
            got = trace.outputs[key[len("trace/"):]]
            assert rel_err(got[:, channels] if got.ndim == 4 else got, ref) < 1e-6, key


@pytest.mark.parametrize("variant", ["resnet34", "resnet50", "resnet101", "resnet152"])
def test_every_depth_loads_strictly_and_runs(variant):
    model = zoo.load(variant, weights="synthetic:1", device="cpu")
    logits = model(mx.zeros((1, 32, 32, 3)))
    assert logits.shape == (1, 1000) and bool(mx.all(mx.isfinite(logits)))


def test_torchvision_pth_loads_like_safetensors(resnet18_file, tmp_path):
    """A torch.save'd {"state_dict": ...} .pth in torchvision naming, read by our own unpickler."""
    from torch_writer import tensor, write_torch_zip

    state = read_checkpoint(resnet18_file)
    pth = write_torch_zip(tmp_path / "resnet18.pth", {"state_dict": {k: tensor(v) for k, v in state.items()}})
    x = mx.array(np.random.default_rng(0).standard_normal((1, 32, 32, 3)).astype(np.float32))
    a = zoo.load("resnet18", weights=pth, device="cpu")(x)
    b = zoo.load("resnet18", weights=resnet18_file, device="cpu")(x)
    assert mx.array_equal(a, b)


def test_wrong_variant_weights_are_refused_naming_the_variant(resnet18_file):
    """Before: 'do not match resnet34: missing 80 (layer1.2.bn1.bias, ...)', as if the file were damaged."""
    for name in ("resnet34", "resnet50"):
        with pytest.raises(ZooError) as e:
            zoo.load(name, weights=resnet18_file, device="cpu")
        assert str(e.value).endswith(f"resnet18.safetensors holds a resnet18 (basic blocks (2, 2, 2, 2) a stage), "
                                     f"not a {name}: load it as 'resnet18'")


def test_unexpected_key_is_refused(tmp_path):
    from safetensors.numpy import save_file

    sd = read_checkpoint(synthetic_checkpoint("resnet18", tmp_path / "a.safetensors"))
    sd["extra.head.weight"] = np.zeros((2, 2), np.float32)
    save_file(sd, str(tmp_path / "b.safetensors"))
    with pytest.raises(ZooError, match=r"unexpected 1 \(extra.head.weight\)"):
        zoo.load("resnet18", weights=tmp_path / "b.safetensors", device="cpu")


def test_predict_gives_top_k_labels(resnet18_file, tmp_path):
    from PIL import Image

    img = (np.random.default_rng(0).uniform(0, 255, (300, 400, 3))).astype(np.uint8)
    model = zoo.load("resnet18", weights=resnet18_file, device="cpu")
    top = model.predict(Image.fromarray(img), top_k=3)
    assert len(top) == 3 and all(isinstance(label, str) for _, label, _ in top)
    probs = [p for _, _, p in top]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
    batch = model.predict([img, img], top_k=2)
    assert len(batch) == 2
    # the same image twice: the same classes, probabilities equal to float32 rounding
    assert [(i, label) for i, label, _ in batch[0]] == [(i, label) for i, label, _ in batch[1]]
    assert [p for *_, p in batch[0]] == pytest.approx([p for *_, p in batch[1]], rel=1e-6)


def test_preprocessing_is_torchvision_imagenet():
    model = zoo.load("resnet18", weights="synthetic", device="cpu")
    img = np.zeros((300, 500, 3), np.uint8)
    img[:, :, 0] = 255
    x = model.preprocess_image(img)
    assert x.shape == (224, 224, 3)
    np.testing.assert_allclose(x[0, 0], [(1 - 0.485) / 0.229, -0.456 / 0.224, -0.406 / 0.225], rtol=1e-6)
