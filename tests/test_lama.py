"""LaMa (big-lama): parity with the upstream case, the validator, weights (safetensors and Lightning .ckpt).

The upstream case (tests/fixtures/lama, thinned from shared/reference/lama) is
256x256. The numpy reference and the whole MLX model (one pass, ~70 s on this
CPU backend) each run it once and meet every trace; MLX is also checked against
the reference layer by layer at a small size through the validator's engine.
"""
import hashlib
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from PIL import Image

import zoo
from conftest import load_case, parity_run, rebuild_input
from torch_writer import Glob, New, script_tree, tensor, write_torch_zip
from zoo import registry
from zoo.compiled import eager
from zoo.errors import ZooError
from zoo.models import lama
from zoo.validate import engine
from zoo.validate.capture import recording
from zoo.validate.cases import lama as case_module
from zoo.validate.reference import lama as reference
from zoo.validate.reference.trace import Trace

PARTS = {"local": 0, "global": 1}  # the fixture's names of an FFC layer's tuple output


@pytest.fixture(scope="module")
def case():
    arrays, sidecar = load_case("lama", "biglama_seed0_256")
    image = rebuild_input(sidecar, lambda: np.random.default_rng(1234).uniform(0, 1, (1, 3, 256, 256)).astype(np.float32))
    mask = np.zeros((1, 1, 256, 256), np.float32)
    mask[0, 0, 64:160, 96:208] = 1  # the recipe: rows 64..159, cols 96..207
    return image, mask, arrays, sidecar


@pytest.fixture(scope="module")
def weights():
    return registry.read_weights(registry.get_spec("lama"), "synthetic:0")


@pytest.fixture(scope="module")
def model(weights):
    zoo.devices.use("cpu")
    return registry.build(registry.get_spec("lama"), weights)


@pytest.fixture(scope="module")
def reference_run(case, weights):
    image, mask, _, _ = case
    trace = Trace()
    predicted = reference.forward(weights.state_dict, image.astype(np.float64), mask.astype(np.float64), trace)
    return predicted, trace


def sampled(value, sidecar, key):
    """The fixture's sub-grid of a full NCHW trace value."""
    s = sidecar["trace_sampling"][key]
    return np.asarray(value)[np.ix_([0], s["channels"], s["rows"], s["cols"])]


def trace_value(outputs: dict, key: str):
    """Fixture key 'trace/model.K[/local|/global]' -> the value named generator.model.K (/0, /1)."""
    name, _, part = key[len("trace/"):].partition("/")
    value = outputs[f"generator.{name}"]
    return value[PARTS[part]] if part else value


def rel_err(got, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


def sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, np.float32).tobytes()).hexdigest()


def test_generator_input_equals_upstream(case, model):
    image, mask, _, sidecar = case
    expected = sidecar["generator_input_sha256_float32_bytes"]
    assert sha256(reference.generator_input(image, mask)) == expected
    got = model.generator_input(mx.array(image.transpose(0, 2, 3, 1)), mx.array(mask.transpose(0, 2, 3, 1)))
    assert sha256(np.array(got).transpose(0, 3, 1, 2)) == expected


def test_numpy_reference_matches_upstream_case(case, reference_run):
    image, mask, arrays, sidecar = case
    predicted, trace = reference_run
    keys = [k for k in arrays.files if k.startswith("trace/")]
    assert len(keys) == 55  # every top-level layer; FFC layers as local (and global) parts
    for key in keys:
        assert rel_err(sampled(trace_value(trace.outputs, key), sidecar, key), arrays[key]) < 1e-6, key
    assert np.abs(predicted - arrays["predicted"]).max() < 1e-6
    inpainted = reference.inpainted(image, mask, predicted)
    assert np.abs(inpainted[:, :, 64:160, 96:208] - arrays["inpainted_hole"]).max() < 1e-6
    hole = mask[0, 0] > 0
    assert np.array_equal(inpainted[:, :, ~hole], image[:, :, ~hole])


def test_mlx_model_matches_upstream_case_at_256(case, model):
    """The whole MLX model on the upstream case (~70 s on 2 cores: MLX's CPU backend uses a reference BLAS)."""
    image, mask, arrays, sidecar = case
    with recording(model) as records:
        predicted = model(mx.array(image.transpose(0, 2, 3, 1)), mx.array(mask.transpose(0, 2, 3, 1)))
        mx.eval(predicted)
    outputs = {name: nchw(record.output) for name, record in records.items()}
    keys = [key for key in arrays.files if key.startswith("trace/") and key != "trace/model.35"]
    assert len(keys) == 54
    # on the CPU each upsampling (model.24-26, 27-29, 30-32) is one call of its transposed convolution
    # with the BatchNorm folded in and the ReLU applied (FFCResNetGenerator.banded): no layer of it
    # records a value of its own, and the values it makes reach model.33 on
    upsampled = {f"generator.model.{i}" for i in range(24, 33)}
    assert upsampled.isdisjoint(outputs)
    for key in keys:  # measured: at most 3.3e-6
        if f"generator.{key[len('trace/'):].partition('/')[0]}" in upsampled:
            continue
        assert rel_err(sampled(trace_value(outputs, key), sidecar, key), arrays[key]) < 1e-5, key
    # model.35 = predicted. The sigmoid turns the logits' float32 roundoff (their scale is ~9e3)
    # into absolute error of the output: measured 1.46e-3 at most, below one uint8 level
    predicted = nchw(predicted)
    assert np.abs(sampled(predicted, sidecar, "trace/model.35") - arrays["trace/model.35"]).max() < 1 / 255
    assert np.abs(predicted - arrays["predicted"]).max() < 1 / 255
    inpainted = reference.inpainted(image, mask, predicted)
    assert np.abs(inpainted[:, :, 64:160, 96:208] - arrays["inpainted_hole"]).max() < 1 / 255


def nchw(value):
    if isinstance(value, tuple):
        return tuple(nchw(v) for v in value)
    return np.array(value).transpose(0, 3, 1, 2) if isinstance(value, mx.array) else value


@pytest.fixture(scope="module")
def small_run(model, weights):
    # 24 px: the residual blocks work on 3x3 maps, an odd width for rfft2/irfft2
    return parity_run(registry.get_spec("lama"), model, weights.state_dict, size=24)


@pytest.mark.parametrize("mode", engine.MODES)
def test_mlx_matches_reference_end_to_end_and_per_layer(small_run, mode):
    report = small_run.compare_mode(mode)
    assert report.passed, report.first_failure
    compared = {r.name: r for r in report.layers if r.status != "n/a"}
    assert not [r for r in report.layers if r.status == "n/a"]
    # 36 layers; 18 blocks x (2 FFC_BN_ACT with 4 paths, a spectral transform and a Fourier unit)
    assert len(compared) == 840
    for name in ("generator.model.5.conv1.ffc.convg2g.fu", "generator.model.22/1", "generator.model.24",
                 "generator.model.34", "output"):
        assert name in compared
    if mode == "end-to-end":
        # float32 roundoff of logits ~1e3 shows through the sigmoid: held to one uint8 level instead
        assert compared["output"].flags == ["case tolerance 0.0039"]
        assert compared["generator.model.34"].rel < 1e-4 and not compared["generator.model.34"].flags


@pytest.mark.parametrize("fault", ["generator.model.7.conv1.ffc.convg2g.fu=zero", "generator.model.9=drop-residual"])
def test_injected_fault_is_caught_at_its_layer(small_run, fault):
    name, _, kind = fault.partition("=")
    report = small_run.compare_mode("isolated", (name, kind))
    assert report.first_failure.split("/")[0] == name


def test_dropped_spectral_residual_is_caught_end_to_end(small_run):
    """The spectral transform adds its residual before its conv2: isolated mode feeds conv2
    the faulty sum and cannot see it; end to end, conv2 is the first layer off."""
    name = "generator.model.12.conv2.ffc.convg2g"
    report = small_run.compare_mode("end-to-end", (name, "drop-residual"))
    assert report.first_failure == f"{name}.conv2"


def test_validate_cli_rejects_bad_size(capsys):
    from zoo.cli.validate import main

    assert main(["lama", "--weights", "synthetic:0", "--device", "cpu", "--size", "20"]) == 2
    assert "--size 20: use a multiple of 8 of at least 16" in capsys.readouterr().err


def test_float16_keeps_the_fourier_units_in_float32(weights):
    spec = registry.get_spec("lama")
    model16 = registry.build(spec, weights, "float16")
    run = parity_run(spec, model16, weights.state_dict, "float16", size=24)
    out, records = run.mlx_pass()
    fu = "generator.model.5.conv1.ffc.convg2g.fu"
    assert records[f"{fu}.conv_layer"].output.dtype == mx.float32
    assert records[f"{fu}.bn"].output.dtype == mx.float32
    assert records[fu].output.dtype == mx.float16 and out.dtype == mx.float16
    e2e = run.compare_mode("end-to-end")
    rows = {r.name: r for r in e2e.layers}
    assert not any(r.flags for r in e2e.layers)  # no NaN, Inf or all-zero layer
    # end to end, every layer up to the logits is within float16's bound; after the sigmoid the
    # synthetic weights' logits (~1e3 here) turn float16's relative error into visible error
    assert rows["generator.model.34"].status == "pass"
    assert e2e.first_failure in (None, *case_module.SIGMOID_OUTPUTS)


@pytest.mark.parametrize("index", [1, 2, 4, 5])  # the first convolution, a downsampling, the split, a block
def test_fused_layers_on_the_cpu_equal_the_upstream_layers(model, index):
    """On the CPU each FFC_BN_ACT runs with its BatchNorms folded into its convolutions and each sum
    of paths made by one C call (FFC_BN_ACT.fused); inside zoo.compiled.eager() (the validator's
    recording) its upstream layers run apart. Both give the same values, and the folded weights
    follow a replaced BatchNorm."""
    layers = model.generator.model.children_in_order()
    x = mx.array(np.random.default_rng(index).standard_normal((1, 24, 24, 4)).astype(np.float32))
    with eager():
        for layer in layers[:index]:
            x = layer(x)
    layer = layers[index]
    ffc = layer.conv1 if isinstance(layer, lama.FFCResnetBlock) else layer
    assert ffc.fuses_on_cpu()
    with eager():
        assert not ffc.fuses_on_cpu()
        want = layer(x)
    got = layer(x)
    for a, b in zip(want, got):
        if isinstance(a, mx.array):
            assert rel_err(np.array(b), np.array(a)) < 1e-5
    before = ffc.bn_l.weight
    try:
        ffc.bn_l.weight = before * 2
        with eager():
            want = ffc(x)
        assert rel_err(np.array(ffc(x)[0]), np.array(want[0])) < 1e-5
    finally:
        ffc.bn_l.weight = before


def test_raw_call_checks_shapes_and_dtype(model):
    with pytest.raises(ZooError, match="multiples of 8 and at least 16"):
        model(np.zeros((1, 12, 16, 3)), np.zeros((1, 12, 16, 1)))
    with pytest.raises(ZooError, match="multiples of 8 and at least 16"):
        model(np.zeros((1, 8, 8, 3)), np.zeros((1, 8, 8, 1)))
    with pytest.raises(ZooError, match="mask has shape"):
        model(np.zeros((1, 16, 16, 3)), np.zeros((1, 16, 24, 1)))
    with pytest.raises(ZooError, match=r"image has shape \(1, 3, 16, 16\).*NCHW: pass x.transpose\(0, 2, 3, 1\)"):
        model(np.zeros((1, 3, 16, 16)), np.zeros((1, 16, 16, 1)))  # torch's layout, as lama's own predict.py
    with pytest.raises(ZooError, match=r"mask has shape \(1, 1, 16, 16\).*NCHW"):
        model(np.zeros((1, 16, 16, 3)), np.zeros((1, 1, 16, 16)))
    with pytest.raises(ZooError, match="model runs in float32"):
        model(mx.zeros((1, 16, 16, 3), mx.float16), mx.zeros((1, 16, 16, 1), mx.float16))
    # uint8 pixels went in as 0-255 (the same pixels as an mx.array were refused)
    with pytest.raises(ZooError, match="image has dtype uint8: pass floats"):
        model(np.zeros((1, 16, 16, 3), np.uint8), np.zeros((1, 16, 16, 1), np.float32))


def test_inpaint_array_takes_only_what_it_says(model):
    """A 0/1 uint8 hole was read as row indices (rows 0 and 1 overwritten, the hole left), a float image came back
    with its hole in 0-255, a hole smaller than the image ran: each is one error naming inpaint."""
    image = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    hole = np.zeros((37, 53), bool)
    hole[10:20, 5:30] = True
    out = model.inpaint_array(image, hole)
    assert np.array_equal(out[~hole], image[~hole]) and not np.array_equal(out[hole], image[hole])
    bad_holes = (hole.astype(np.uint8), hole.astype(np.uint8) * 255, hole[:30], np.zeros_like(hole), hole[..., None])
    for bad_hole in bad_holes:
        with pytest.raises(ZooError, match=r"inpaint_array takes an \(37, 53\) bool hole marking some pixel, got .*: "
                                           r"pass any other mask \(0/255, a path, PIL\) to inpaint"):
            model.inpaint_array(image, bad_hole)
    for bad_image in (image / 255.0, image[..., 0], np.dstack([image, image[..., :1]]), Image.fromarray(image)):
        with pytest.raises(ZooError, match=r"inpaint_array takes an \(H, W, 3\) uint8 image, got .*: pass any other "
                                           r"image \(a path, PIL, float, grey, RGBA\) to inpaint"):
            model.inpaint_array(bad_image, hole)
    np.testing.assert_array_equal(model.inpaint(image, hole.astype(np.uint8) * 255), out)  # inpaint takes them


def test_sanitize_keeps_only_the_generator():
    from zoo.models.lama import sanitize

    sd = {"generator.model.1.bn_l.weight": np.ones(2), "discriminator.model0.0.weight": np.ones(2),
          "loss_resnet_pl.impl.conv1.weight": np.ones(2), "val_evaluator.scores.ssim.x": np.ones(2)}
    assert list(sanitize(sd, {})) == ["generator.model.1.bn_l.weight"]
    with pytest.raises(ZooError, match="no generator"):
        sanitize({"model.1.weight": np.ones(2)}, {})


def test_lightning_like_checkpoint_goes_through_the_stubbing_reader():
    """The shared Lightning fixture: stubbed classes, generator.model.* keys, but not big-lama's."""
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "torchfiles" / "lightning_like.ckpt"
    from zoo.weights.checkpoint import read_checkpoint_with_meta

    state_dict, meta = read_checkpoint_with_meta(path)
    assert state_dict and all(k.startswith("generator.model.") for k in state_dict)
    assert meta["epoch"] == 39
    # sharing no name with big-lama, it is refused from its header, before a tensor is read
    with pytest.raises(ZooError, match="missing .*generator.model.1.ffc.convl2l.weight"):
        registry.read_weights(registry.get_spec("lama"), path)
    assert not {"torch", "omegaconf", "pytorch_lightning"} & set(sys.modules)


def test_best_ckpt_loads_the_generator_and_drops_the_rest(weights, tmp_path):
    """A best.ckpt as big-lama's Lightning module saves it: the generator, the discriminator and
    the perceptual loss's network under state_dict, an omegaconf config, a callback keyed by class."""
    state = {k: tensor(v) for k, v in weights.state_dict.items() if v.dtype == np.float32}
    state["discriminator.model0.0.weight"] = tensor(np.ones((4, 3, 3, 3)))
    state["loss_resnet_pl.impl.conv1.weight"] = tensor(np.ones((2, 3, 1, 1)))
    config = New(Glob("omegaconf.dictconfig", "DictConfig"), {"_content": {"generator": {"kind": "ffc_resnet"}}})
    callback = Glob("pytorch_lightning.callbacks.model_checkpoint", "ModelCheckpoint")
    ckpt = write_torch_zip(tmp_path / "best.ckpt", {
        "epoch": 39, "state_dict": state, "hyper_parameters": config, "callbacks": {callback: {"best_model_score": 1.0}}})
    got = dict(tree_flatten(zoo.load("lama", weights=ckpt, device="cpu").parameters()))
    want = dict(tree_flatten(registry.build(registry.get_spec("lama"), weights).parameters()))
    assert got.keys() == want.keys()
    assert all(mx.array_equal(got[name], want[name]) for name in want)
    assert not {"torch", "omegaconf", "pytorch_lightning"} & set(sys.modules)


def test_traced_big_lama_pt_loads_its_generator(weights, tmp_path):
    """IOPaint's big-lama.pt: the LaMa repo's bin/to_jit.py traces JITWrapper(training module) with torch.jit, so
    the generator is model.generator.* among attributes of __torch__ objects (no _parameters), beside code/ and
    constants.pkl. Before: 'no weights found'."""
    generator = {f"model.{k}": v for k, v in weights.state_dict.items()}
    path = write_torch_zip(tmp_path / "big-lama.pt", script_tree(generator, "JITWrapper"), records={
        "code/__torch__.py": b"class JITWrapper(Module):\n  pass\n", "constants.pkl": b"\x80\x02).", "version": b"3\n"})
    got = dict(tree_flatten(zoo.load("lama", weights=path, device="cpu").parameters()))
    want = dict(tree_flatten(registry.build(registry.get_spec("lama"), weights).parameters()))
    assert got.keys() == want.keys()
    assert all(mx.array_equal(got[name], want[name]) for name in want)
