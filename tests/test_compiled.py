"""zoo.compiled: the user paths run their network through mx.compile, one bounded trace per input
signature, with the module's current weights, and give the eager network's outputs."""
import mlx.core as mx
import mlx.nn as mx_nn
import numpy as np
import pytest

import zoo
from zoo import compiled
from zoo.compiled import CompiledForward, Stage, eager, enabled
from zoo.errors import ZooError
from zoo.models.layers import conv_bn
from zoo.models.resnet import BasicBlock


@pytest.fixture
def compile_on(monkeypatch):
    monkeypatch.setenv("ZOO_COMPILE", "on")  # the CPU default (auto) does not compile
    # Eager CPU calls would take zoo.kernels.cpu's C forms, a trace MLX's ops (rounding apart, and
    # LaMa's 18 blocks amplify rounding): compare the wrapper on the same ops. The C forms have
    # their own tests (test_cpu_ops.py) and the validator.
    monkeypatch.setenv("ZOO_KERNELS", "fallback")


@pytest.fixture(scope="module")
def resnet():
    return zoo.load("resnet18", weights="synthetic", device="cpu")


def images(n, side, seed=0):
    return mx.array(np.random.default_rng(seed).standard_normal((n, side, side, 3)).astype(np.float32))


def test_modes(monkeypatch):
    monkeypatch.delenv("ZOO_COMPILE", raising=False)
    assert not enabled()  # auto: the GPU only, and these tests run on the CPU
    monkeypatch.setenv("ZOO_COMPILE", "on")
    assert enabled()
    monkeypatch.setenv("ZOO_COMPILE", "sometimes")
    with pytest.raises(ZooError, match="ZOO_COMPILE"):
        enabled()


def test_resnet_call_is_compiled_and_equals_eager(resnet, compile_on):
    resnet.compiled.clear()
    x = images(2, 64)
    got = resnet(x)
    assert len(resnet.compiled.traces) == 1
    with eager():
        want = resnet(x)
    assert len(resnet.compiled.traces) == 1  # the eager call added no trace
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
    resnet(images(2, 64, seed=1))
    assert len(resnet.compiled.traces) == 1  # same signature, same trace


def test_traces_are_bounded_least_recently_used_first(compile_on):
    calls = []

    def double(x):
        calls.append(x.shape)
        return x * 2

    forward = CompiledForward(double, [], max_traces=2)
    for n in (1, 2, 1, 3):
        forward(mx.ones((n,)))
    assert [signature[1][1] for _, signature in forward.traces] == [(1,), (3,)]  # (2,) was the least recently used
    assert calls == [(1,), (2,), (3,)]  # each signature traced once


def test_weights_changed_after_tracing_are_used(compile_on):
    model = zoo.load("resnet18", weights="synthetic", device="cpu")
    x = images(1, 32)
    before = np.array(model(x))
    model.fc.bias = model.fc.bias + 1.0  # a new array after the trace: a frozen constant would miss it
    after = np.array(model(x))
    np.testing.assert_allclose(after, before + 1.0, rtol=1e-5, atol=1e-4)


def staged_pair(with_folds: bool = True):
    """Two Linear stages and a Conv+BatchNorm stage (folded) as a staged CompiledForward, and the
    second stage's Linear."""
    first, second = mx_nn.Linear(3, 3), mx_nn.Linear(3, 3)
    conv, bn = mx_nn.Conv2d(3, 3, 1), mx_nn.BatchNorm(3)
    third = mx_nn.Sequential(conv, bn)
    for m in (first, second, third):
        m.eval()

    def fn(x):
        return three(*two(*one(x)))

    def one(x):
        return first(x), x  # a tuple: the next stage's two arguments

    def two(y, skip):
        return second(y) + skip, skip

    def three(y, skip):
        return conv_bn(conv, bn, (y - skip).reshape(-1, 1, 1, 3))

    stages = [Stage(one, [first]), Stage(two, [second]), Stage(three, [third])]
    return CompiledForward(fn, [first, second, third], folds=[(conv, bn)] if with_folds else (), stages=stages), second


def test_stages_run_apart_and_equal_the_whole(compile_on, monkeypatch):
    from zoo import compiled

    forward, second = staged_pair()
    x = mx.array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    with eager():
        want = np.array(forward(x))
    scheduled = []
    real = compiled._schedule
    monkeypatch.setattr(compiled, "_schedule", lambda arrays: scheduled.append(arrays) or real(arrays))
    np.testing.assert_allclose(np.array(forward(x)), want, rtol=1e-5, atol=1e-6)
    (traced, _), = forward.traces.values()
    assert len(traced) == 3 and scheduled == []  # no CUDA backend: the stages stay lazy
    monkeypatch.setattr(compiled, "cuda_backend", lambda: True)
    monkeypatch.setenv(compiled.MEMORY_FACTOR_VAR, "off")
    np.testing.assert_allclose(np.array(forward(x)), want, rtol=1e-5, atol=1e-6)
    assert [type(s).__name__ for s in scheduled] == ["tuple", "tuple"]  # the first two stages' outputs, early
    second.weight = second.weight * 2  # a stage's inputs are its own modules' current arrays
    with eager():
        want = np.array(forward(x))
    np.testing.assert_allclose(np.array(forward(x)), want, rtol=1e-5, atol=1e-6)
    assert len(forward.traces) == 1
    monkeypatch.delenv(compiled.MEMORY_FACTOR_VAR)  # capped: one limit over all stages, as for one forward
    forward.clear()
    limit = mx.get_memory_limit()
    for first in (True, False):
        scheduled.clear()
        np.testing.assert_allclose(np.array(forward(x)), want, rtol=1e-5, atol=1e-6)
        # the first call traces lazily, then is measured as one graph; later calls schedule each stage
        assert [type(s).__name__ for s in scheduled] == (["list", "array"] if first else ["tuple", "tuple", "array"])
    (_, least), = forward.traces.values()
    assert least is not None and mx.get_memory_limit() == limit


def test_a_fold_outside_every_stage_is_refused():
    conv, bn = mx_nn.Conv2d(3, 3, 1), mx_nn.BatchNorm(3)
    other = mx_nn.Linear(3, 3)
    with pytest.raises(ValueError, match="in no stage"):
        CompiledForward(lambda x: x, [other], folds=[(conv, bn)], stages=[Stage(lambda x: x, [other])])


def test_yolov8_compiled_forward_runs_in_stages_for_big_inputs(compile_on, monkeypatch):
    model = zoo.load("yolov8n", weights="synthetic", device="cpu")
    # the convolutions' GFLOPs at 640 px: ultralytics' model summary says 8.7 for YOLOv8n
    assert model.flop_per_pixel * 640 * 640 / 1e9 == pytest.approx(8.7, abs=0.05)
    assert [model.staged(mx.zeros((n, 640, 640, 3))) for n in (4, 8)] == [False, True]  # float32 from 60 GFLOP
    assert not model.staged(mx.zeros((16, 640, 640, 3), mx.float16))  # 140 GFLOP: float16 from 300
    x = mx.array(np.random.default_rng(5).uniform(0, 1, (1, 64, 64, 3)).astype(np.float32))
    got = {}
    for threshold in (1e9, 0):
        monkeypatch.setattr(compiled, "STAGED_FROM_GFLOP", {True: threshold, False: threshold})
        model.compiled.clear()
        got[threshold] = np.array(model(x))
        (traced, _), = model.compiled.traces.values()
        assert len(traced) == (1 if threshold else len(model.arch.stage_starts) + 1)
    assert sum(map(len, (arrays for _, arrays in model.compiled.stages))) == len(model.compiled.folds.pairs)
    with eager():
        want = np.array(model(x))
    for out in got.values():
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_resnet_compiled_forward_runs_in_stages_for_big_inputs(compile_on, monkeypatch):
    model = zoo.load("resnet50", weights="synthetic", device="cpu")
    # the convolutions' GFLOPs at 224 px: torchvision's ResNet-50 is 4.09 GMACs
    assert model.flop_per_pixel * 224 * 224 / 1e9 == pytest.approx(8.17, abs=0.01)
    assert [model.staged(mx.zeros((n, 224, 224, 3))) for n in (4, 8)] == [False, True]  # float32 from 60 GFLOP
    assert not model.staged(mx.zeros((32, 224, 224, 3), mx.float16))  # 262 GFLOP: float16 from 300
    model = zoo.load("resnet18", weights="synthetic", device="cpu")
    x = images(2, 64)
    with eager():
        want = np.array(model(x))
    monkeypatch.setattr(compiled, "STAGED_FROM_GFLOP", {True: 0, False: 0})
    np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)
    (traced, _), = model.compiled.traces.values()
    assert len(traced) == 4  # the stem and layer1, layer2, layer3, layer4 and the head
    # a new head set in place of fc (torchvision's way) is the one the stages run
    head = mx_nn.Linear(512, 3)
    model.fc = head
    with eager():
        want = np.array(model(x))
    assert want.shape == (2, 3)
    np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)
    del model["fc"]  # no head: the pooled features
    assert model(x).shape == (2, 512)
    features = zoo.load("resnet18", weights="synthetic", device="cpu", features_only=True, out_indices=(2, 4))
    assert [m.shape for m in features(x)] == [(2, 8, 8, 128), (2, 2, 2, 512)]  # no stages: maps, not logits


def test_resnet_compiled_forward_follows_the_modules_a_user_sets(compile_on, monkeypatch):
    monkeypatch.setattr(compiled, "STAGED_FROM_GFLOP", {True: 0, False: 0})  # the stages, whose modules are fixed
    x = images(2, 64)
    model = zoo.load("resnet18", weights="synthetic", device="cpu")
    model(x)  # a trace before each change
    # a layer of another kind (MLX's modules, not zoo's Sequential) and a head to match
    for layer4, width in ((mx_nn.Identity(), 256), (mx_nn.Sequential(BasicBlock(256, 512, 2)), 512)):
        model.layer4, model.fc = layer4, mx_nn.Linear(width, 5)
        model.eval()
        with eager():
            want = np.array(model(x))
        np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)
    # training mode runs eagerly: traced, the BatchNorms' running statistics were left as tracers
    model = zoo.load("resnet18", weights="synthetic", device="cpu")
    model(x)
    model.train()
    model(x)
    model.bn1 = mx_nn.BatchNorm(64)  # a new module, in training mode
    model(x)
    model.eval()
    np.array(model.bn1.running_mean), np.array(model.layer1[0].bn1.running_var)  # evaluable arrays
    with eager():
        want = np.array(model(x))
    np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)


def test_a_module_replaced_inside_the_network_makes_the_forward_run_eagerly(compile_on, capsys):
    """A BatchNorm set inside a layer after loading (its fold, and a trace, hold the one replaced), in a model
    that gives no parts to build again (YOLO): the forward runs uncompiled from then on, said in one line, and
    its results are the network's."""
    x = mx.array(np.random.default_rng(4).uniform(0, 1, (1, 64, 96, 3)).astype(np.float32))
    for change in ("a BatchNorm in a layer", "a convolution in a layer"):
        model = zoo.load("yolov8n", weights="synthetic", device="cpu")
        model(x)
        capsys.readouterr()
        if change == "a BatchNorm in a layer":
            bn = mx_nn.BatchNorm(model.model["1"].bn.weight.shape[0], eps=1e-3)
            bn.eval()
            model.model["1"].bn = bn
        else:
            model.model["1"].conv = mx_nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        with eager():
            want = np.array(model(x))
        for _ in range(2):
            np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)
        note = capsys.readouterr().err
        assert note.count("its forward runs uncompiled from now on") == 1, (change, note)
        assert ("DetectionModel.model.1.bn was set" in note) == (change == "a BatchNorm in a layer"), note
        assert model.compiled.structure is None and not model.compiled.traces


def test_a_module_replaced_inside_a_resnet_builds_its_compiled_forward_again(compile_on, capsys):
    """ResNet gives its parts (compiled_parts): a BatchNorm set inside a block, a block appended to a stage or a
    new head makes the folds and stages again, and the forward stays compiled, with the network's results."""
    x = images(2, 64)
    model = zoo.load("resnet18", weights="synthetic", device="cpu")
    model(x)
    bn = mx_nn.BatchNorm(64)
    bn.eval()
    changes = [lambda: model.layer1[0].update_modules({"bn1": bn}), lambda: model.layer4.__setitem__(
        "2", BasicBlock(512, 512)), lambda: setattr(model, "fc", mx_nn.Linear(512, 3))]
    for change in changes:
        change()
        model.eval()
        with eager():
            want = np.array(model(x))
        np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)
        assert model.compiled.structure is not None and len(model.compiled.traces) == 1
    assert "uncompiled" not in capsys.readouterr().err


def test_sam_decoder_compiled_equals_eager(compile_on):
    sam = zoo.load("mobilesam", weights="synthetic", device="cpu")
    features = mx.array(np.random.default_rng(0).standard_normal((1, 64, 64, 256)).astype(np.float32))
    points = (mx.array([[[100.0, 200.0], [700.0, 50.0]]]), mx.array([[1, 0]], dtype=mx.int32))
    got = sam.decode_prompt(features, points, None, None, True)
    with eager():
        want = sam.decode_prompt(features, points, None, None, True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-4, atol=1e-4)
    sam.decode_prompt(features, points, None, None, False)  # a constant argument is part of the signature
    assert len(sam.decode_prompt.traces) == 2
    # several prompt sets on one image: the image side (its merged projections) is shared until the
    # first image-to-token attention, then one per set
    boxes = mx.array([[10.0, 20.0, 300.0, 400.0], [500.0, 100.0, 900.0, 800.0], [0.0, 0.0, 1023.0, 1023.0]])
    got = sam.decode_prompt(features, None, boxes, None, True)
    with eager():
        want = sam.decode_prompt(features, None, boxes, None, True)
    assert got[0].shape == (3, 256, 256, 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-4, atol=1e-4)


def test_sam_decoder_rederives_its_merged_arrays_when_weights_change(compile_on):
    # the compiled decoder's derived arrays (Sam.decoder_folds) follow every weight they come from:
    # the positional encoding's matrix (in the dense PE and the image projections' addends), a
    # projection merged with others, a hypernetwork layer stacked with the others
    sam = zoo.load("mobilesam", weights="synthetic", device="cpu")
    rng = np.random.default_rng(1)
    features = mx.array(rng.standard_normal((1, 64, 64, 256)).astype(np.float32))
    points = (mx.array([[[100.0, 200.0], [700.0, 50.0]]]), mx.array([[1, 0]], dtype=mx.int32))
    sam.decode_prompt(features, points, None, None, True)
    decoder = sam.mask_decoder
    pe_layer = sam.prompt_encoder.pe_layer
    for module, name in ((pe_layer, "positional_encoding_gaussian_matrix"),
                         (decoder.transformer.layers[1].cross_attn_image_to_token.q_proj, "weight"),
                         (decoder.transformer.final_attn_token_to_image.v_proj, "bias"),
                         (decoder.transformer.layers[0].self_attn.k_proj, "weight"),
                         (decoder.output_hypernetworks_mlps[2].layers[1], "weight")):
        module[name] = mx.array(rng.standard_normal(module[name].shape).astype(np.float32))
        got = sam.decode_prompt(features, points, None, None, True)
        with eager():
            want = sam.decode_prompt(features, points, None, None, True)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-4, atol=1e-4, err_msg=name)


def test_lama_compiled_equals_eager(compile_on, monkeypatch, two_blas_threads):
    import zoo.models.lama as lama_module

    monkeypatch.setattr(lama_module, "DFT_MAX_SIDE", 0)  # the Fourier units' FFTs, as eager (next tests)
    lama = zoo.load("lama", weights="synthetic", device="cpu")
    rng = np.random.default_rng(0)
    image = mx.array(rng.uniform(0, 1, (1, 32, 32, 3)).astype(np.float32))
    mask = mx.array((rng.uniform(0, 1, (1, 32, 32, 1)) > 0.7).astype(np.float32))
    got = lama(image, mask)
    with eager():
        want = lama(image, mask)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
    assert len(lama.compiled.traces) == 1


def test_lama_upsamplings_as_subpixel_phases_equal_their_layers_compiled(compile_on, monkeypatch):
    # the compiled CUDA float32 forms, on the CPU in MLX's ops: each upsampling (transposed
    # convolution, BatchNorm, ReLU) as SUBPIXEL's four output phases with the BatchNorm folded in
    import zoo.models.lama as lama_module
    from zoo.kernels import few_outputs, implicit_gemm

    monkeypatch.setattr(lama_module, "DFT_MAX_SIDE", 0)
    monkeypatch.setattr(few_outputs, "preferred", lambda *args: True)
    monkeypatch.setattr(implicit_gemm, "subpixel_preferred", lambda *args: True)
    calls = []
    subpixel = implicit_gemm.conv_transpose2d_subpixel
    monkeypatch.setattr(implicit_gemm, "conv_transpose2d_subpixel", lambda *args: calls.append(args) or subpixel(*args))
    rng = np.random.default_rng(1)
    image = mx.array(rng.uniform(0, 1, (1, 32, 48, 3)).astype(np.float32))
    mask = mx.array((rng.uniform(0, 1, (1, 32, 48, 1)) > 0.7).astype(np.float32))
    lama = zoo.load("lama", weights="synthetic", device="cpu")
    perturbed_batch_norms(lama, seed=5)
    got = np.array(lama(image, mask))
    assert [a[0].shape[1:3] for a in calls] == [(4, 6), (8, 12), (16, 24)] and all(a[3] == "relu" for a in calls)
    # against the same compiled forward with the upsamplings' own layers (transposed convolution,
    # BatchNorm, ReLU): compiled and eager forwards differ by more, through 18 blocks of synthetic weights
    monkeypatch.setattr(implicit_gemm, "subpixel_preferred", lambda *args: False)
    plain = zoo.load("lama", weights="synthetic", device="cpu")
    perturbed_batch_norms(plain, seed=5)
    want = np.array(plain(image, mask))
    assert len(calls) == 3
    # rounding of the fold, grown through the last 7x7 convolution of large synthetic activations
    # (a dropped bias or a misplaced phase moves outputs by 0.1 and more); each upsampling alone: below
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_subpixel_fold_equals_an_upsamplings_layers(monkeypatch):
    from zoo.kernels import implicit_gemm
    from zoo.models.lama import subpixel_fold

    monkeypatch.setattr(implicit_gemm, "subpixel_preferred", lambda *args: True)
    lama = zoo.load("lama", weights="synthetic", device="cpu")
    perturbed_batch_norms(lama, seed=6)
    steps = lama.generator.model.children_in_order()
    first = next(i for i, m in enumerate(steps) if isinstance(m, mx_nn.ConvTranspose2d))
    conv, bn, relu = steps[first:first + 3]
    x = mx.array(np.random.default_rng(7).standard_normal((2, 5, 7, conv.weight.shape[-1])).astype(np.float32))
    with eager():
        want = np.array(relu(bn(conv(x))))
    arrays = subpixel_fold(conv, bn)
    got = np.array(implicit_gemm.conv_transpose2d_subpixel(x, arrays["phases"], arrays["bias"], "relu"))
    assert got.shape == want.shape == (2, 10, 14, conv.weight.shape[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("h, w", [(8, 8), (6, 9), (64, 64)])
def test_spectrum_as_matrix_products_equals_numpy_fft(h, w):
    from zoo.models.lama import irfft2_planar, rfft2_planar

    rng = np.random.default_rng(h * w)
    x = rng.standard_normal((2, h, w, 3))
    got = np.array(rfft2_planar(mx.array(x.astype(np.float32)))).reshape(2, h, w // 2 + 1, 2, 3)
    want = np.fft.rfft2(x, axes=(1, 2), norm="ortho")
    np.testing.assert_allclose(got[..., 0, :] + 1j * got[..., 1, :], want, rtol=0, atol=1e-5)
    # any half spectrum, as irfft2 takes it (the imaginary parts of the DC and Nyquist terms ignored)
    spectrum = rng.standard_normal((2, h, w // 2 + 1, 3)) + 1j * rng.standard_normal((2, h, w // 2 + 1, 3))
    planar = np.concatenate([spectrum.real, spectrum.imag], axis=-1).astype(np.float32)
    got = np.array(irfft2_planar(mx.array(planar), (h, w)))
    np.testing.assert_allclose(got, np.fft.irfft2(spectrum, s=(h, w), axes=(1, 2), norm="ortho"), rtol=0, atol=1e-5)


def test_fourier_unit_folded_on_matrix_products_equals_eager(compile_on):
    from zoo.models.lama import FourierUnit

    unit = FourierUnit(6)
    perturbed_batch_norms(unit)
    unit.eval()
    compiled = CompiledForward(unit, unit, folds=[(unit.conv_layer, unit.bn, FourierUnit.planar_fold)])
    x = mx.array(np.random.default_rng(5).standard_normal((2, 12, 10, 6)).astype(np.float32))
    got = compiled(x)
    assert len(compiled.folds.arrays) == 1
    with eager():
        want = unit(x)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)


def test_fourier_unit_eager_uses_its_kept_planar_fold_until_a_weight_is_replaced():
    from zoo.models.lama import FourierUnit

    unit = FourierUnit(4)
    perturbed_batch_norms(unit)
    unit.eval()
    x = mx.array(np.random.default_rng(6).standard_normal((1, 8, 6, 4)).astype(np.float32))
    got = unit(x)  # not compiled (ZOO_COMPILE auto on the CPU): the matrix products, fold kept
    first = unit.planar()
    assert unit.planar() is first
    with eager():
        assert unit.planar() is None  # the validator's path: the upstream layers
        want = unit(x)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
    perturbed_batch_norms(unit, seed=1)
    assert unit.planar() is not first
    with eager():
        want = unit(x)
    np.testing.assert_allclose(np.array(unit(x)), np.array(want), rtol=1e-5, atol=1e-5)


def perturbed_batch_norms(model, seed=0):
    """Running statistics and affine parameters away from the synthetic defaults, so a fold that
    dropped any of them would show."""
    rng = np.random.default_rng(seed)
    for _, m in model.named_modules():
        if isinstance(m, mx_nn.BatchNorm):
            c = m.weight.shape[0]
            m.update({"weight": mx.array(rng.uniform(0.5, 1.5, c).astype(np.float32)),
                      "bias": mx.array(rng.uniform(-0.5, 0.5, c).astype(np.float32)),
                      "running_mean": mx.array(rng.uniform(-0.5, 0.5, c).astype(np.float32)),
                      "running_var": mx.array(rng.uniform(0.5, 2.0, c).astype(np.float32))})


@pytest.mark.parametrize("name, side", [("resnet18", 64), ("yolov8n", 64)])
def test_batch_norms_folded_in_the_compiled_forward_equal_eager(name, side, compile_on):
    model = zoo.load(name, weights="synthetic", device="cpu")
    perturbed_batch_norms(model)
    x = mx.array(np.random.default_rng(1).uniform(0, 1, (2, side, side, 3)).astype(np.float32))
    got = np.array(model(x))
    (key, trace), = model.compiled.traces.items()
    assert key[0]  # folded
    assert len(model.compiled.folds.arrays) == len(model.compiled.folds.pairs) > 0
    with eager():
        want = np.array(model(x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_sam_encoder_folds_every_batch_norm_runs_in_stages_and_equals_eager(compile_on):
    from zoo.models.mobilesam.sam import Sam
    sam = Sam(img_size=256)  # the 1024 encoder's layers at a quarter of its side
    sam.eval()
    perturbed_batch_norms(sam)
    x = images(1, 256)
    got = np.array(sam.encode_image(x))
    folds = sam.encode_image.folds
    assert {id(bn) for _, bn in folds.pairs.values()} == {id(m) for _, m in sam.image_encoder.named_modules()
                                                           if isinstance(m, mx_nn.BatchNorm)}
    assert all(set(arrays) >= {"weight", "bias"} for arrays in folds.arrays.values())
    (traced, _), = sam.encode_image.traces.values()
    assert len(traced) == 4  # the patch embedding with the convolutional stage, two transformer stages, the last
    with eager():
        want = np.array(sam.encode_image(x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    sam.set_dtype(mx.float16)  # whole in float16, where the stages did not pay
    sam.encode_image(x.astype(mx.float16))
    assert sorted(len(traced) for traced, _ in sam.encode_image.traces.values()) == [1, 4]


def test_sam_encoder_compiled_takes_a_numpy_image_as_its_eager_network_does(compile_on):
    """encode_image(numpy) was a TypeError ('unhashable type') wherever it compiled (the GPU), the eager encoder
    taking it: the image is brought to the model at the compiled forward's boundary (prepare)."""
    from zoo.models.mobilesam.sam import Sam
    sam = Sam(img_size=256)
    sam.eval()
    image = np.random.default_rng(0).standard_normal((1, 256, 256, 3))  # float64: made the model's dtype
    got = np.array(sam.encode_image(image))
    assert len(sam.encode_image.traces) == 1
    with eager():
        want = np.array(sam.encode_image(image))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ZooError, match=r"TinyViT expects \(B, 256, 256, 3\), got \(1, 128, 128, 3\)"):
        sam.encode_image(image[:, :128, :128])
    # uint8 pixels are not the normalised image it takes: refused, not read as values of 0-255 (as before)
    with pytest.raises(ZooError, match=r"image has dtype uint8: pass floats, scaled as the network takes them"):
        sam.encode_image(np.zeros((1, 256, 256, 3), np.uint8))


@pytest.mark.parametrize("compiled", [True, False])
def test_sam_decode_prompt_takes_numpy_prompts_and_embedding(compiled, monkeypatch):
    """decode_prompt(numpy embedding or points) was a TypeError ('Cannot interpret mlx.core.float32 as a data
    type') compiled and eager: its arguments are brought to the network at its boundary (Sam.prompt_inputs)."""
    from zoo.models.mobilesam.sam import Sam
    monkeypatch.setenv("ZOO_COMPILE", "on" if compiled else "off")
    monkeypatch.setenv("ZOO_KERNELS", "fallback")
    sam = Sam(img_size=256)
    sam.eval()
    rng = np.random.default_rng(0)
    features = rng.standard_normal((1, 16, 16, 256)).astype(np.float32)
    coords, labels, box = np.array([[[100.0, 80.0], [20.0, 40.0]]]), np.array([[1, 0]]), np.array([[8, 8, 200, 180]])
    want = sam.decode_prompt(mx.array(features), (mx.array(coords, mx.float32), mx.array(labels, mx.int32)),
                             mx.array(box, mx.float32), None, True)
    for args in [(features, (coords, labels), box), (features, (coords.tolist(), labels.tolist()), box.tolist())]:
        got = sam.decode_prompt(*args, None, True)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.array(g), np.array(w))
    with pytest.raises(ZooError, match=r"image embedding has shape \(1, 16, 16, 128\), expected \(B, 16, 16, 256\)"):
        sam.decode_prompt(features[..., :128], (coords, labels), None, None, True)
    with pytest.raises(ZooError, match="point labels must be a numeric"):
        sam.decode_prompt(features, (coords, np.array([["a", "b"]])), None, None, True)
    with pytest.raises(ZooError, match=r"points are \(coords \(B, N, 2\), labels \(B, N\)\)"):
        sam.decode_prompt(features, coords, None, None, True)
    # upstream's modules take keywords; the prompts default to none, multimask_output to True
    got = sam.decode_prompt(features, boxes=box, points=(coords, labels))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.array(g), np.array(w))
    assert sam.decode_prompt(features, (coords, labels))[0].shape == (1, 64, 64, 3)
    # each prompt's shape, and the prompt sets' counts, as one line (MLX's concatenate / conv errors before)
    bad = {r"mask input has shape \(1, 1, 64, 64\).*NCHW": dict(masks=np.zeros((1, 1, 64, 64), np.float32)),
           r"mask input has shape \(1, 32, 32, 1\), expected \(B, 64, 64, 1\)": dict(masks=np.zeros((1, 32, 32, 1))),
           r"boxes has shape \(1, 5\), expected \(B, 4\)": dict(boxes=np.zeros((1, 5))),
           r"points: coords \(2, 2\) and labels \(1, 2\), expected \(B, N, 2\) and \(B, N\)":
               dict(points=(coords[0], labels)),
           r"points: coords \(1, 2, 2\) and labels \(1, 3\)": dict(points=(coords, np.ones((1, 3)))),
           r"prompt counts differ \(points: 1, boxes: 2\)": dict(points=(coords, labels), boxes=np.zeros((2, 4))),
           r"no prompt sets \(B = 0\)": dict(points=(np.zeros((0, 1, 2)), np.zeros((0, 1)))),
           r"the image embedding's batch is 2 for 3 prompt set\(s\)": dict(boxes=np.zeros((3, 4)), features=2)}
    for message, prompts in bad.items():
        batch = prompts.pop("features", 1)
        with pytest.raises(ZooError, match=message):
            sam.decode_prompt(np.repeat(features, batch, axis=0), **prompts)
    with pytest.raises(ZooError, match=r"mask input is mlx.core.bool, not floats: convert with "
                                       r"x.astype\(mx.float32\)$"):
        sam.decode_prompt(features, masks=mx.zeros((1, 64, 64, 1), mx.bool_))


def test_a_call_that_fails_in_its_trace_leaves_the_model_working(compile_on):
    """mx.compile leaves its inputs' arrays as tracers when the traced function raises: after one failed call
    (YOLO at batch 0, an error inside SPPF) every later call of the model failed, its eager forward too ('eval
    an array without a primitive'). The arrays are put back."""
    model = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    x = mx.array(np.random.default_rng(0).uniform(0, 1, (1, 64, 64, 3)).astype(np.float32))
    want = np.array(model(x))
    with pytest.raises(ZooError, match="is empty"):
        mx.eval(model(x[:0]))
    np.testing.assert_array_equal(np.array(model(x)), want)
    with eager():
        np.testing.assert_allclose(np.array(model(x)), want, rtol=1e-4, atol=1e-4)


def test_yolov8_compiled_head_reads_each_concatenation_apart(compile_on, monkeypatch):
    """The four C2f after a Concat take its parts apart (Conv.of_parts), the two after an Upsample at
    half size: their results are test_batch_norms_folded_in_the_compiled_forward_equal_eager's."""
    from zoo.models.yolov8.model import C2f, Parts, Upscaled

    model = zoo.load("yolov8n", weights="synthetic", device="cpu")
    seen = {}  # id(C2f) -> its input
    calls = C2f.__call__

    def recording(self, x):
        seen[id(self)] = x
        return calls(self, x)

    monkeypatch.setattr(C2f, "__call__", recording)
    model(mx.zeros((1, 64, 64, 3)))
    kinds = {i: [type(p).__name__ for p in seen[id(model.model[str(i)])]] for i in (12, 15, 18, 21)}
    assert all(isinstance(seen[id(model.model[str(i)])], Parts) for i in kinds)
    assert kinds == {12: ["Upscaled", "array"], 15: ["Upscaled", "array"], 18: ["array", "array"], 21: ["array", "array"]}
    assert isinstance(seen[id(model.model["12"])][0], Upscaled)
    parts = model.compiled.folds.arrays[id(model.model["12"].cv1.conv)]["parts"]
    assert [p.shape for p in parts] == [(256, 128), (128, 128)]  # yolov8n: SPPF's 256 upsampled + P4's 128 -> 128
    with eager():
        assert model.model["10"](mx.ones((1, 2, 2, 1))).shape == (1, 4, 4, 1)  # the eager Upsample


@pytest.mark.parametrize("dtype, decoded", [("float16", "box decode"), ("float32", "dfl distances")])
def test_yolov8_compiled_half_precision_head_decodes_in_one_call(compile_on, dtype, decoded):
    """zoo.kernels.box_decode (here its fallback) decodes the compiled float16 head; float32 keeps
    the eager head's ops but for the DFL, one call of box_decode.distances. Both equal the eager network."""
    from zoo.kernels import coverage

    model = zoo.load("yolov8n", weights="synthetic", dtype=dtype, device="cpu")
    x = mx.array(np.random.default_rng(2).uniform(0, 1, (2, 64, 96, 3)).astype(np.float32)).astype(model.dtype)
    notes = []
    with coverage.listening(lambda op, impl: notes.append(op)):
        got = np.array(model(x).astype(mx.float32))
    assert [n for n in notes if n in ("box decode", "dfl distances")] == [decoded]
    bins = model.compiled.folds.arrays[id(model.model["22"].dfl.conv)]["bins"]  # made once, not per call
    assert bins.shape == (16,) and bins.dtype == mx.float32
    with eager():
        want = np.array(model(x).astype(mx.float32))
    scale = np.maximum(1.0, np.abs(want).max(axis=(0, 1)))  # boxes against their largest coordinate
    assert float((np.abs(got - want) / scale).max()) <= (2e-2 if dtype == "float16" else 1e-4)


def test_folds_follow_weights_replaced_after_tracing(compile_on):
    model = zoo.load("yolov8n", weights="synthetic", device="cpu")
    x = mx.array(np.random.default_rng(2).uniform(0, 1, (1, 64, 64, 3)).astype(np.float32))
    model(x)
    perturbed_batch_norms(model, seed=3)  # new arrays after the first fold and trace
    got = np.array(model(x))
    assert len(model.compiled.traces) == 1  # refolded, not retraced
    with eager():
        want = np.array(model(x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_folds_follow_an_array_added_after_tracing(compile_on):
    # the per-call check compares the arrays it knows and the modules' sizes: a bias added to a
    # bias-less convolution, then replaced, is folded in each time
    model = zoo.load("resnet50", weights="synthetic", device="cpu")
    x = images(1, 32)
    before = np.array(model(x))
    conv = model.conv1
    assert "bias" not in conv
    for value in (0.5, -0.5):
        conv["bias"] = mx.full((conv.weight.shape[0],), value)
        got = np.array(model(x))
        with eager():
            want = np.array(model(x))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.abs(got - before).max() > 0.1


def test_training_mode_runs_eagerly(resnet, compile_on):
    resnet.compiled.clear()
    resnet.train()
    try:
        resnet(images(2, 32))  # the BatchNorms update their running statistics: no trace, no fold
    finally:
        resnet.eval()
    assert not resnet.compiled.traces
    np.array(resnet.bn1.running_mean)  # an array, not a trace's tracer


def test_yolov8_call_is_compiled_and_validator_path_is_eager(compile_on):
    model = zoo.load("yolov8n", weights="synthetic", device="cpu")
    x = mx.array(np.random.default_rng(4).uniform(0, 1, (1, 64, 96, 3)).astype(np.float32))
    model(x)
    assert len(model.compiled.traces) == 1
    with eager():
        model(x)
    assert len(model.compiled.traces) == 1  # the eager call added no trace


def test_only_replaced_weights_are_folded_again(compile_on, monkeypatch):
    import zoo.compiled as compiled

    folds = []
    fold = compiled.fold_batch_norm
    monkeypatch.setattr(compiled, "fold_batch_norm", lambda conv, bn: folds.append(conv) or fold(conv, bn))
    model = zoo.load("yolov8n", weights="synthetic", device="cpu")
    pairs = sum(bn is not None for _, bn in model.compiled.folds.pairs.values())  # not the DFL's bins
    for shape in ((1, 64, 64, 3), (1, 64, 64, 3), (1, 96, 64, 3), (1, 64, 64, 3)):
        mx.eval(model(mx.zeros(shape)))
    assert len(folds) == pairs  # once each, whatever the traces
    first = model.model["0"]
    first.bn.running_var = first.bn.running_var + 1.0
    mx.eval(model(mx.zeros((1, 64, 64, 3))))
    assert folds[pairs:] == [first.conv]


def chain(x):
    """40 matrix products on a (32768, 32) float32 array (4 MiB): MLX schedules them ahead of their runs."""
    for _ in range(40):
        x = mx.sin(x) @ mx.ones((32, 32)) * 1e-3 + x
    return x


def peak_above_active(call) -> float:
    mx.synchronize()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    mx.eval(call())
    return (mx.get_peak_memory() - before) / 2**20


def test_memory_cap_bounds_the_forwards_peak_and_restores_the_limit(compile_on, monkeypatch):
    from zoo import compiled

    x = mx.random.normal((32768, 32))
    mx.eval(x)
    forward = CompiledForward(chain, [])
    want = np.array(forward(x))
    limit = mx.get_memory_limit()
    uncapped = peak_above_active(lambda: forward(x))
    monkeypatch.setattr(compiled, "capping", lambda: True)  # on the CPU there is none
    monkeypatch.setattr(compiled, "CAP_FLOOR", 0)  # the cap at this small forward's least memory itself
    forward.clear()
    first = peak_above_active(lambda: forward(x))  # the trace's first call: one commit at a time
    (_, least), = forward.traces.values()
    assert least / 2**20 == pytest.approx(first, abs=0.5)
    capped = [peak_above_active(lambda: forward(x)) for _ in range(2)]
    # the floor: no cap tighter than CAP_FLOOR above the memory in use (here twice this forward's least memory)
    monkeypatch.setattr(compiled, "CAP_FLOOR", 2 * least)
    floored = peak_above_active(lambda: forward(x))
    assert uncapped > 40 and least < 24 * 2**20 and max(capped) < 30 < floored < 2 * least / 2**20 + 8, \
        (uncapped, least, capped, floored)
    without_floor = CompiledForward(chain, [], cap_floor=False)  # MobileSAM's decoder: capped at its least memory
    without_floor(x)
    assert peak_above_active(lambda: without_floor(x)) < 30
    monkeypatch.setenv(compiled.MEMORY_FACTOR_VAR, "4")  # room for more work in flight
    assert 40 < peak_above_active(lambda: forward(x)) < 4 * least / 2**20 + 8
    assert mx.get_memory_limit() == limit
    np.testing.assert_array_equal(np.array(forward(x)), want)


def test_least_memory_leaves_out_the_folded_weights_made_on_the_first_call(compile_on, monkeypatch):
    from zoo import compiled

    monkeypatch.setattr(compiled, "capping", lambda: True)
    conv, bn = mx_nn.Conv2d(256, 256, 3, padding=1), mx_nn.BatchNorm(256)
    net = mx_nn.Sequential(conv, bn)
    net.eval()
    mx.eval(net.parameters())
    forward = CompiledForward(lambda x: conv_bn(conv, bn, x), net, folds=[(conv, bn)])
    x = mx.ones((1, 8, 8, 256))
    mx.eval(forward(x))
    (_, least), = forward.traces.values()
    assert 0 < least < conv.weight.nbytes / 2  # the 2.25 MiB folded weight is an input, not the forward's


def test_least_memory_leaves_out_the_arrays_a_trace_makes(compile_on, monkeypatch):
    from zoo import compiled

    monkeypatch.setattr(compiled, "capping", lambda: True)

    def scaled(x):
        table = mx.array(np.full((1024, 1024), 2, np.float32))  # 4 MiB, made while tracing, held by the trace
        return x * table[:1]

    forward = CompiledForward(scaled, [])
    mx.eval(forward(mx.ones((1, 1024))))
    (_, least), = forward.traces.values()
    assert 0 < least < 2**20


def test_memory_cap_keeps_a_lower_limit_and_passes_over_tracers(monkeypatch):
    from zoo import compiled

    x = mx.ones((64, 32))
    limit = mx.get_memory_limit()
    mx.set_memory_limit(2**20)
    try:
        limits = []
        real = mx.async_eval
        monkeypatch.setattr(mx, "async_eval", lambda *a: limits.append(mx.get_memory_limit()) or real(*a))
        compiled.schedule_capped(lambda schedule: chain(x), 2**30)
        assert limits == [2**20] and mx.get_memory_limit() == 2**20  # never above the user's limit
        # inside a caller's transform the outputs are tracers, which MLX does not schedule
        g = mx.grad(lambda a: compiled.schedule_capped(lambda schedule: a * 2, 2**30).sum())(x)
        np.testing.assert_array_equal(np.array(g), 2 * np.ones((64, 32)))
        seen = []

        def loss(a):
            y = a * 2
            seen.append(compiled.least_memory(a, y))
            return y.sum()

        np.testing.assert_array_equal(np.array(mx.grad(loss)(x)), 2 * np.ones((64, 32)))
        assert seen == [None] and mx.get_memory_limit() == 2**20
    finally:
        mx.set_memory_limit(limit)


def test_memory_factor_setting(monkeypatch):
    from zoo import compiled

    monkeypatch.delenv(compiled.MEMORY_FACTOR_VAR, raising=False)
    assert compiled.memory_factor() == compiled.DEFAULT_MEMORY_FACTOR == 1.0
    monkeypatch.setenv(compiled.MEMORY_FACTOR_VAR, "off")
    assert compiled.memory_factor() == 0.0
    monkeypatch.setenv(compiled.MEMORY_FACTOR_VAR, "2.5")
    assert compiled.memory_factor() == 2.5
    assert not compiled.capping()  # the CPU: no cap
    for bad in ("-1", "0", "0.5", "lots"):
        monkeypatch.setenv(compiled.MEMORY_FACTOR_VAR, bad)
        with pytest.raises(ZooError, match=compiled.MEMORY_FACTOR_VAR):
            compiled.memory_factor()


def test_pose_keypoint_branch_is_padded_to_four_channels_compiled_and_equals_eager(compile_on):
    """Pose's 51-wide keypoint branch (17 x 3) runs compiled on 52 channels, the extra one zero, so
    that its float32 3x3 convolutions fit zoo.kernels.implicit_gemm (4-channel reads) on CUDA rather
    than cuDNN's engines and their workspaces; the detector's branches, multiples of 4, stay as they were."""
    from zoo.kernels import implicit_gemm

    model = zoo.load("yolo11n-pose", weights="synthetic", device="cpu")
    perturbed_batch_norms(model)
    x = mx.array(np.random.default_rng(3).uniform(0, 1, (2, 64, 64, 3)).astype(np.float32))
    got = np.array(model(x))
    head, arrays = model.head, model.compiled.folds.arrays
    branch = head.cv4["0"]
    assert arrays[id(branch["0"].conv)]["weight"].shape == (52, 3, 3, 64)
    assert arrays[id(branch["1"].conv)]["weight"].shape == (52, 3, 3, 52)
    assert arrays[id(branch["2"])]["weight"].shape == (51, 1, 1, 52)
    assert all(implicit_gemm.fits(arrays[id(branch[k].conv)]["weight"].shape, 1, 1, 1, 1) for k in "01")
    assert arrays[id(head.cv2["0"]["1"].conv)]["weight"].shape == head.cv2["0"]["1"].conv.weight.shape
    assert id(head.cv2["0"]["2"]) not in arrays
    with eager():
        want = np.array(model(x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_segment_prototypes_run_in_parts_after_the_detections_where_winograd_takes_them(compile_on, monkeypatch):
    """Where the Proto's 3x3 cv2 at twice the P3 level's size takes Winograd's form (float32 on CUDA;
    forced here, its fallback on the CPU), whose transforms hold 4x its input and output, the layers
    after cv1 run over a quarter of the batch at a time, one part after another; equal to eager."""
    from zoo.kernels import winograd

    monkeypatch.setattr(winograd, "preferred", winograd.suits)
    monkeypatch.setattr(winograd, "MIN_GFLOP", 0.0)
    model = zoo.load("yolov8n-seg", weights="synthetic", device="cpu")
    perturbed_batch_norms(model)
    x = mx.array(np.random.default_rng(4).uniform(0, 1, (5, 32, 32, 3)).astype(np.float32))
    sizes = []
    conv3x3 = winograd.conv3x3
    monkeypatch.setattr(winograd, "conv3x3", lambda x, *args: sizes.append(x.shape) or conv3x3(x, *args))
    got = model(x)
    assert [s for s in sizes if s[1:] == (8, 8, 64)] == [(2, 8, 8, 64)] * 2 + [(1, 8, 8, 64)]
    monkeypatch.setattr(winograd, "conv3x3", conv3x3)
    with eager():
        want = model(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-4)
