"""MobileSAM: checkpoints, the attention-bias table, SamPredictor semantics and its errors.

The predictor tests run a 128x128 MobileSAM (the same code and weights, 1/64 of the
1024 encoder's work) against the numpy reference at the same size.
"""
import dataclasses
import importlib
import re

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from PIL import Image
from safetensors.numpy import save_file

import zoo
from conftest import MANIFESTS
from torch_writer import tensor, write_torch_zip
from zoo import registry
from zoo.errors import ZooError
from zoo.models.mobilesam import SamPredictor, sanitize
from zoo.models.mobilesam.tiny_vit import Attention, TinyViT
from zoo.validate.reference import mobilesam as reference
from zoo.validate.reference.trace import Trace
from zoo.weights.synthetic import read_manifest, synthetic_state_dict

SIZE = 128  # model input size of the small predictor
LOW_RES = 4 * SIZE // 16
TOL = 1e-4  # float32 against the float64 reference, relative to the largest value


def rel_err(got, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def checkpoint():
    """The official checkpoint's keys (classifier head included) with the synthetic:0 values."""
    return synthetic_state_dict(read_manifest(MANIFESTS / "mobilesam.json"), 0)


@pytest.fixture(scope="module")
def small_spec():
    return dataclasses.replace(registry.get_spec("mobilesam"), preprocess={"image_size": SIZE})


@pytest.fixture(scope="module")
def small_sam(small_spec):
    return registry.build(small_spec, registry.read_weights(small_spec, "synthetic:0"))


@pytest.fixture(scope="module")
def image():
    return np.random.default_rng(7).integers(0, 256, (90, 120, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def predictor(small_sam, image):
    p = SamPredictor(small_sam)
    p.set_image(image)
    return p


# ---------------------------------------------------------------- checkpoints


def test_sanitize_drops_the_classifier_head_and_recomputed_buffers(checkpoint):
    extra = {"image_encoder.layers.1.blocks.0.attn.attention_bias_idxs": np.zeros((49, 49), np.int64),
             "image_encoder.layers.1.blocks.0.attn.ab": np.zeros((4, 49, 49), np.float32),
             "pixel_mean": np.zeros((3, 1, 1), np.float32)}
    out = sanitize({**checkpoint, **extra}, {})
    assert set(checkpoint) - set(out) == {"image_encoder.norm_head.weight", "image_encoder.norm_head.bias",
                                          "image_encoder.head.weight", "image_encoder.head.bias"}
    assert not set(extra) & set(out)


def test_official_pt_and_candle_safetensors_load_the_same(checkpoint, tmp_path):
    """mobile_sam.pt is a plain state dict (torch-free reader); candle's file has the same names."""
    pt = write_torch_zip(tmp_path / "mobile_sam.pt", {k: tensor(v) for k, v in checkpoint.items()})
    st = tmp_path / "mobile_sam-tiny-vitt.safetensors"
    save_file(checkpoint, str(st))
    a = dict(tree_flatten(zoo.load("mobilesam", weights=pt, device="cpu").parameters()))
    b = dict(tree_flatten(zoo.load("mobilesam", weights=st, device="cpu").parameters()))
    assert a.keys() == b.keys() and len(a) == 408
    name = "image_encoder.layers.2.blocks.3.attn.attention_biases"
    assert mx.array_equal(a[name], mx.array(checkpoint[name]))
    # ConvTranspose2d (in, out, kH, kW) -> MLX (out, kH, kW, in)
    up = "mask_decoder.output_upscaling.0.weight"
    assert mx.array_equal(a[up], mx.array(checkpoint[up].transpose(1, 2, 3, 0)))
    assert all(mx.array_equal(a[k], b[k]) for k in a)


def sam_vit_b(checkpoint: dict) -> dict:
    """segment-anything's sam_vit_b_01ec64.pth (a plain state dict): MobileSAM's prompt encoder and mask decoder, and a
    ViT-B image encoder (width 768, 16 x 16 patches, 64 x 64 positions; its first block and neck shown)."""
    vit = {"image_encoder.pos_embed": np.zeros((1, 64, 64, 768), np.float16),
           "image_encoder.patch_embed.proj.weight": np.zeros((768, 3, 16, 16), np.float16),
           "image_encoder.patch_embed.proj.bias": np.zeros(768, np.float16),
           "image_encoder.blocks.0.attn.qkv.weight": np.zeros((2304, 768), np.float16),
           "image_encoder.blocks.0.attn.rel_pos_h": np.zeros((27, 64), np.float16),
           "image_encoder.neck.0.weight": np.zeros((256, 768, 1, 1), np.float16)}
    return {**{k: v for k, v in checkpoint.items() if not k.startswith("image_encoder.")}, **vit}


def sam2_hiera(checkpoint: dict) -> dict:
    """SAM 2's sam2_hiera_tiny.pt: {"model": ...} with a Hiera trunk, memory attention, sam_* heads (a few shown)."""
    return {"image_encoder.trunk.patch_embed.proj.weight": np.zeros((96, 3, 7, 7), np.float32),
            "image_encoder.trunk.blocks.0.attn.qkv.weight": np.zeros((288, 96), np.float32),
            "memory_attention.layers.0.self_attn.q_proj.weight": np.zeros((256, 256), np.float32),
            "sam_mask_decoder.iou_token.weight": np.zeros((1, 256), np.float32)}


@pytest.mark.parametrize("layout, file, held", [
    (sam_vit_b, "sam_vit_b_01ec64.pth", r"segment-anything's SAM ViT-B \(sam_vit_b_01ec64.pth\)"),
    (sam2_hiera, "sam2_hiera_tiny.pt", r"SAM 2's model \(a Hiera image encoder and memory attention\)")],
    ids=["sam-vit-b", "sam2"])
def test_other_sams_are_refused_by_name(checkpoint, tmp_path, layout, file, held):
    """Before: 'its header claims 374,942,912 bytes of tensors, more than 4x ...' (ViT-B), a list of missing keys
    (SAM 2)."""
    state = {k: tensor(v, v.dtype) for k, v in layout(checkpoint).items()}
    path = write_torch_zip(tmp_path / file, {"model": state} if file.startswith("sam2") else state)
    with pytest.raises(ZooError, match=rf"{file}: the checkpoint holds {held}, not MobileSAM's TinyViT image encoder: "
                                       "mlx-zoo has MobileSAM only; pass mobile_sam.pt or mobile_sam-tiny-vitt"):
        zoo.load("mobilesam", weights=path, device="cpu")


def test_a_missing_key_is_refused(checkpoint, tmp_path):
    partial = {k: v for k, v in checkpoint.items() if k != "mask_decoder.iou_token.weight"}
    save_file(partial, str(tmp_path / "partial.safetensors"))
    with pytest.raises(ZooError, match=r"missing 1 \(mask_decoder.iou_token.weight\)"):
        zoo.load("mobilesam", weights=tmp_path / "partial.safetensors", device="cpu")


def test_attention_bias_table_is_read_at_call_time():
    """Upstream caches attention_biases[:, idxs] at eval(): a cache that goes stale when weights
    load afterwards. Here the table is gathered on every call, so loading a new table counts."""
    attn = Attention(64, 2, 7)
    x = np.random.default_rng(0).standard_normal((3, 49, 64)).astype(np.float32)
    rng = np.random.default_rng(1)
    for _ in range(2):
        attn.update({"attention_biases": mx.array(rng.standard_normal((2, 49)).astype(np.float32))})
        sd = {f"attn.{k}": np.array(v, np.float64) for k, v in tree_flatten(attn.parameters())}
        expected = reference._window_attention(Trace(), sd, "attn", x.astype(np.float64), 2, 7)
        assert rel_err(np.array(attn(mx.array(x))), expected) < TOL


def test_encoder_refuses_a_wrong_input_size():
    with pytest.raises(ZooError, match=r"TinyViT expects \(B, 128, 128, 3\)"):
        TinyViT(128)(mx.zeros((1, 64, 64, 3)))


# ---------------------------------------------------------------- SamPredictor against the reference


@pytest.mark.parametrize("prompt", [
    {"point_coords": [[60.0, 45.0]], "point_labels": [1], "multimask_output": True},
    {"box": [10.0, 12.0, 90.0, 70.0], "multimask_output": False},
    {"point_coords": [[30.0, 40.0], [100.0, 80.0]], "point_labels": [1, 0], "box": [5.0, 5.0, 110.0, 85.0],
     "multimask_output": False},
    # a detector's unclipped box of an object at the border (GroundingDINO's, in Grounded-SAM's script):
    # upstream takes it as given, so does predict
    {"box": [-3.5, 12.0, 124.25, 90.5], "multimask_output": False},
], ids=["point", "box", "points+box", "box-past-the-edges"])
def test_predict_matches_reference(predictor, small_sam, image, checkpoint, prompt):
    masks, scores, low_res = predictor.predict(**prompt, return_logits=True)
    expected = reference.predict(sanitize(checkpoint, {}), image, prompt.get("point_coords"), prompt.get("point_labels"),
                                 prompt.get("box"), multimask_output=prompt["multimask_output"], img_size=SIZE)
    channels = 3 if prompt["multimask_output"] else 1
    assert masks.shape == (channels, 90, 120) and scores.shape == (channels,)
    assert low_res.shape == (channels, LOW_RES, LOW_RES)
    for got, ref in zip((masks, scores, low_res), expected):
        assert rel_err(got, ref) < TOL
    binary, _, _ = predictor.predict(**prompt)
    assert binary.dtype == bool and np.array_equal(binary, masks > 0)


def test_padding_points_and_points_outside_the_image_are_upstreams(predictor, image, checkpoint):
    """segment-anything's prompt encoder takes label -1, a padding point (its embedding is not_a_point_embed,
    whatever its position: prompts of different point counts batched together), and points outside the
    image, encoded as given; predict refused both. Checked against the numpy reference's encoder."""
    sd = sanitize(checkpoint, {})
    for coords, labels in (([[60.0, 45.0], [500.0, -7.0]], [1, -1]),  # a padding point, far outside
                           ([[-20.0, 45.0], [130.0, 100.0]], [1, 0])):  # left of the image; past its width
        got = predictor.predict(point_coords=coords, point_labels=labels, return_logits=True)
        expected = reference.predict(sd, image, coords, labels, img_size=SIZE)
        for g, ref in zip(got, expected):
            assert rel_err(g, ref) < TOL
    # a padding point's position is ignored: the same result wherever it is
    padded = predictor.predict(point_coords=[[60.0, 45.0], [0.0, 0.0]], point_labels=[1, -1], return_logits=True)
    moved = predictor.predict(point_coords=[[60.0, 45.0], [500.0, -7.0]], point_labels=[1, -1], return_logits=True)
    assert all(np.array_equal(a, b) for a, b in zip(padded, moved))
    # batched prompts of 2 and 1 points, the second padded: each is its own prompt's result
    batch = predictor.predict(point_coords=[[[60.0, 45.0], [30.0, 20.0]], [[10.0, 80.0], [0.0, 0.0]]],
                              point_labels=[[1, 0], [1, -1]], return_logits=True)
    alone = predictor.predict(point_coords=[[10.0, 80.0], [7.0, 7.0]], point_labels=[1, -1], return_logits=True)
    for b, a in zip(batch, alone):
        np.testing.assert_allclose(b[1], a, rtol=0, atol=1e-5 * np.abs(a).max())


def test_mask_input_from_a_previous_prediction_matches_reference(predictor, image, checkpoint):
    prompt = {"point_coords": [[60.0, 45.0]], "point_labels": [1]}
    _, scores, low_res = predictor.predict(**prompt)
    mask_input = low_res[np.argmax(scores)][None]
    got = predictor.predict(**prompt, mask_input=mask_input, multimask_output=False, return_logits=True)
    expected = reference.predict(sanitize(checkpoint, {}), image, prompt["point_coords"], prompt["point_labels"],
                                 mask_input=mask_input, multimask_output=False, img_size=SIZE)
    for g, ref in zip(got, expected):
        assert rel_err(g, ref) < TOL


def test_cpu_decoder_forms_equal_the_upstream_layers(small_sam, predictor):
    """On the CPU the decoder puts several prompt sets' queries against the one image as the rows of one
    attention per head, and makes only the masks it returns: the values of upstream's layers as the
    validator runs them (zoo.compiled.eager), and of all four masks sliced (bit for bit)."""
    from zoo.compiled import eager

    rng = np.random.default_rng(3)
    coords = rng.uniform(0, 80, (5, 2, 2)).astype(np.float32)
    labels = np.array([[1, 0], [1, 1], [0, 1], [1, 0], [1, 1]], np.int32)
    for multimask in (True, False):
        got = [np.array(a) for a in predictor.decode(coords, labels, multimask_output=multimask)]
        with eager():
            want = [np.array(a) for a in predictor.decode(coords, labels, multimask_output=multimask)]
        assert got[0].shape == (5, 32, 32, 3 if multimask else 1)  # 4x the 8 x 8 grid of the small model
        np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5 * np.abs(want[0]).max())
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-5)
    sparse, dense = small_sam.prompt_encoder((mx.array(coords), mx.array(labels)), None, None)
    inputs = (predictor.features_nhwc, small_sam.prompt_encoder.get_dense_pe(), sparse, dense[:1])
    all_masks, all_iou = small_sam.mask_decoder.predict_masks(*inputs)
    masks, iou = small_sam.mask_decoder.predict_masks(*inputs, slice(1, None))
    assert np.array_equal(np.array(masks), np.array(all_masks[..., 1:]))
    assert np.array_equal(np.array(iou), np.array(all_iou))


def test_set_image_encodes_once_for_many_predictions(small_sam, image, monkeypatch):
    calls = []
    original = TinyViT.__call__
    monkeypatch.setattr(TinyViT, "__call__", lambda self, x: calls.append(1) or original(self, x))
    p = small_sam.predictor()
    p.set_image(Image.fromarray(image))
    for x in (10, 50, 100):
        p.predict(point_coords=[[x, 30]], point_labels=[1])
    p.predict(box=[0, 0, 60, 60])
    assert len(calls) == 1


def test_bgr_input_is_flipped_to_rgb(small_sam, image, predictor):
    p = small_sam.predictor()
    p.set_image(np.ascontiguousarray(image[..., ::-1]), image_format="BGR")
    assert np.array_equal(p.features, predictor.features)


def test_get_image_embedding_is_upstreams_nchw_tensor(predictor, image, checkpoint):
    """segment-anything's ONNX notebook: ``predictor.get_image_embedding().cpu().numpy()``, saved and fed to SAM's
    ONNX decoder as (1, 256, 64, 64) NCHW; it was an MLX NHWC array (no ``.cpu()``, channels last)."""
    embedding = predictor.get_image_embedding()
    saved = embedding.cpu().numpy()
    assert type(saved) is np.ndarray and saved.shape == (1, 256, SIZE // 16, SIZE // 16) and saved.dtype == np.float32
    assert saved.flags.c_contiguous  # its bytes in NCHW order, as a tensor's .numpy() gives
    sd = {k: v.astype(np.float64) for k, v in sanitize(checkpoint, {}).items()}
    expected = reference.image_encoder(sd, reference.preprocess(image, SIZE)[0])  # upstream's NCHW layout
    assert rel_err(saved, expected) < TOL


class _CudaTensor:
    """What a torch tensor on a GPU offers an app's cache: .cpu().numpy() and no __array__."""

    def __init__(self, values: np.ndarray):
        self._values = values

    def cpu(self):
        return _CudaTensor(self._values)

    def numpy(self) -> np.ndarray:
        return self._values


class _BFloat16Tensor:
    def cpu(self):
        return self

    def numpy(self):
        raise TypeError("Got unsupported ScalarType BFloat16")  # torch's


class _GradTensor(_CudaTensor):
    """A tensor that requires grad, as torch's: .numpy() refuses until .detach(); no __array__."""

    def cpu(self):
        return self

    def detach(self):
        return _CudaTensor(self._values)

    def numpy(self):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")


class _BFloat16Values(_CudaTensor):
    """A bfloat16 tensor of these values: .numpy() refuses (numpy has no bfloat16) until .float()."""

    dtype = type("dtype", (), {"__str__": lambda self: "torch.bfloat16"})()

    def float(self):
        return _CudaTensor(self._values.astype(np.float32))

    def numpy(self):
        raise TypeError("Got unsupported ScalarType BFloat16")  # torch's


def test_prompts_as_tensors_that_require_grad_or_are_bfloat16_predict_as_numpys(small_sam, predictor):
    """Upstream's predictor takes tensors that require grad (a detector's boxes in a training loop) and bfloat16
    ones: each prompt argument was torch's RuntimeError / TypeError, the features setter alone detaching first."""
    coords, labels = np.array([[40.0, 30.0], [80.0, 60.0]]), np.array([1, 0])
    low_res = predictor.predict(point_coords=coords, point_labels=labels)[2][:1]
    want = predictor.predict(point_coords=coords, point_labels=labels, box=np.array([10, 5, 100, 80]),
                             mask_input=low_res)
    for kind in (_GradTensor, _BFloat16Values):
        got = predictor.predict(point_coords=kind(coords), point_labels=kind(labels),
                                box=kind(np.array([10, 5, 100, 80])), mask_input=kind(low_res))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    boxes = predictor.transform.apply_boxes_torch(_GradTensor(np.array([[10.0, 5, 100, 80]])), predictor.original_size)
    assert predictor.predict_torch(None, None, boxes=_GradTensor(boxes))[0].shape == (1, 3, 90, 120)
    row, column, crop = predictor.mask_crop(_GradTensor(want[2][0]))
    assert crop.dtype == bool
    image = SamPredictor(small_sam)
    image.set_torch_image(_GradTensor(predictor.transform.apply_image(np.zeros((90, 120, 3), np.uint8))
                                      .transpose(2, 0, 1)[None]), (90, 120))
    assert image.is_image_set


def test_box_beside_n_prompts_is_one_error_naming_boxes(predictor):
    with pytest.raises(ZooError, match=r"^give box \(one prompt\) or boxes \(N prompts\), not both$"):
        predictor.predict(box=[0, 0, 10, 10], boxes=[[0, 0, 10, 10]])
    # 3-D points are N prompts: the message named boxes, which were not given
    with pytest.raises(ZooError, match=r"^point_coords of shape \(2, 1, 2\) are N prompts \(N, P, 2\): give their "
                                       r"boxes as boxes=\(N, 4\), or one prompt's points \(P, 2\) with box$"):
        predictor.predict(point_coords=np.zeros((2, 1, 2)), point_labels=np.ones((2, 1)), box=[0, 0, 10, 10])


def test_a_cached_embedding_restored_as_upstreams_predicts_the_same_masks(small_sam, predictor, image):
    """SAM web demos and annotation tools cache each image's embedding after set_image and restore it later
    without the encoder, as upstream's attributes allow: ``reset_image(); features = cached; original_size = ...;
    input_size = ...; is_image_set = True``. features was the model's NHWC MLX array and is_image_set read-only."""
    cache = {"features": predictor.features.cpu().numpy(),  # what the app np.save()s, upstream's NCHW
             "original_size": predictor.original_size, "input_size": predictor.input_size}
    assert cache["features"].shape == (1, 256, SIZE // 16, SIZE // 16) and cache["features"].dtype == np.float32
    assert np.array_equal(cache["features"], np.array(predictor.features_nhwc).transpose(0, 3, 1, 2))
    prompts = [{"point_coords": np.array([[40, 30], [80, 60]]), "point_labels": np.array([1, 0])},
               {"box": np.array([10, 5, 100, 80]), "multimask_output": False},
               {"boxes": np.array([[0, 0, 60, 60], [30, 20, 119, 89]])}]
    expected = [predictor.predict(**prompt) for prompt in prompts]

    fresh = SamPredictor(small_sam)
    fresh.set_image(np.zeros((40, 128, 3), np.uint8))  # another image first: the restored one replaces it
    fresh.reset_image()
    assert not fresh.is_image_set and fresh.features is None
    for features, sizes in ((cache["features"], tuple), (_CudaTensor(cache["features"]), list),
                            (predictor.get_image_embedding(), np.array)):  # sizes as a JSON cache gives them back
        fresh.reset_image()
        fresh.features = features
        fresh.original_size = sizes(cache["original_size"])
        fresh.input_size = sizes(cache["input_size"])
        fresh.is_image_set = True
        assert fresh.original_size == (90, 120) and fresh.input_size == (96, 128)
        assert mx.array_equal(fresh.features_nhwc, predictor.features_nhwc)
        for prompt, want in zip(prompts, expected):
            for got, wanted in zip(fresh.predict(**prompt), want):
                assert np.array_equal(got, wanted)


def test_a_wrong_restored_embedding_or_size_is_one_error(small_sam, predictor):
    """An embedding of another layout, model or type, or sizes of another image, would decode wrong masks
    silently: each is one error, at the assignment or at predict."""
    cached = predictor.features.cpu().numpy()
    p = SamPredictor(small_sam)
    grid = SIZE // 16
    with pytest.raises(ZooError, match=rf"features has shape \(1, {grid}, {grid}, 256\) \(float32\): expected "
                                       rf"\(1, 256, {grid}, {grid}\) floats, NCHW, .*channels-last"):
        p.features = cached.transpose(0, 2, 3, 1)
    wanted = rf"features has shape \(1, 256, 64, 64\) .* expected \(1, 256, {grid}, {grid}\)"
    with pytest.raises(ZooError, match=wanted):
        p.features = np.zeros((1, 256, 64, 64), np.float32)  # the 1024 model's embedding on this 128 model
    with pytest.raises(ZooError, match=r"features has shape .* \(int64\)"):
        p.features = cached.astype(np.int64)
    with pytest.raises(ZooError, match="features contains NaN or infinity"):
        p.features = np.where(cached > 0, np.nan, cached)
    with pytest.raises(ZooError, match=r"features: a _BFloat16Tensor is not readable as an array \(Got unsupported"):
        p.features = _BFloat16Tensor()
    assert p.features is None  # nothing half-assigned
    with pytest.raises(ZooError, match=r"original_size \(90.5, 120\) is not an image's \(height, width\)"):
        p.original_size = (90.5, 120)
    p.features, p.original_size, p.input_size = cached, (90, 120), (96, 128)
    with pytest.raises(ZooError, match="no image set: .* then is_image_set = True"):
        p.predict(box=[0, 0, 50, 50])  # upstream's too: the flag is the app's to set
    p.is_image_set = True
    p.original_size = (120, 90)  # PIL's image.size is (width, height)
    with pytest.raises(ZooError, match=r"input_size \(96, 128\) is not original_size \(120, 90\) resized to long "
                                       rf"side {SIZE} \(\(128, 96\)\)"):
        p.predict(box=[0, 0, 50, 50])
    p.original_size, p.features = (90, 120), None
    with pytest.raises(ZooError, match="is_image_set is True but features is None"):
        p.predict(box=[0, 0, 50, 50])


def test_float16_model_stays_close_to_float32(small_spec, image, predictor):
    sam16 = registry.build(small_spec, registry.read_weights(small_spec, "synthetic:0"), "float16")
    p = sam16.predictor()
    p.set_image(image)
    prompt = {"point_coords": [[60.0, 45.0]], "point_labels": [1], "return_logits": True}
    masks16, scores16, _ = p.predict(**prompt)
    masks32, scores32, _ = predictor.predict(**prompt)
    assert masks16.dtype == np.float32 and np.isfinite(masks16).all()
    assert rel_err(masks16, masks32) < 5e-2 and np.abs(scores16 - scores32).max() < 5e-2
    # its cached embedding reads as float32 (upstream's dtype) and comes back as the same float16 values
    restored = sam16.predictor()
    restored.features, restored.original_size, restored.input_size = p.features, p.original_size, p.input_size
    restored.is_image_set = True
    assert p.features.dtype == np.float32 and restored.features_nhwc.dtype == mx.float16
    assert mx.array_equal(restored.features_nhwc, p.features_nhwc)
    assert np.array_equal(restored.predict(**prompt)[0], masks16)


# ---------------------------------------------------------------- bad input: one-line errors


@pytest.mark.parametrize("kwargs, message", [
    ({}, "empty prompt"),
    # upstream's predictor adds no embedding to its box corners' labels 2 and 3 given as points
    ({"point_coords": [[10.0, 10.0]], "point_labels": [2]},
     r"point label 2 is not allowed: use 1 \(foreground\), 0 \(background\) or -1 \(padding.*given as a box"),
    ({"point_coords": [[10.0, 10.0], [5.0, 5.0]], "point_labels": [1, 3]}, "point label 3 is not allowed"),
    ({"point_coords": [[10.0, 10.0]], "point_labels": [0.5]}, "point label 0.5 is not allowed"),
    ({"point_coords": [[1e39, 10.0]], "point_labels": [1]}, "a point or box lies too far outside the image"),
    ({"point_coords": [[10.0, 10.0]]}, "point_coords and point_labels go together"),
    ({"point_coords": [10.0, 10.0], "point_labels": [1]}, r"point_coords has shape \(2,\)"),
    ({"point_coords": [[10.0, 10.0]], "point_labels": [1, 0]}, r"point_labels has shape \(2,\)"),
    ({"point_coords": [[np.nan, 10.0]], "point_labels": [1]}, "NaN or infinity"),
    ({"point_coords": [["left", "top"]], "point_labels": [1]}, "point_coords must be an array of real numbers"),
    # complex coordinates lost their imaginary parts to a ComplexWarning: another point, silently
    ({"point_coords": np.array([[10 + 5j, 10]]), "point_labels": [1]},
     r"point_coords must be an array of real numbers \(pixel coordinates, as many in each row\), got ndarray of "
     "complex128"),
    ({"box": np.array([1, 2, 30, 40], complex)}, "box must be an array of real numbers"),
    # ragged rows were numpy's ValueError tracebacks ('inhomogeneous shape')
    ({"point_coords": [[10.0, 10.0], [5.0]], "point_labels": [1, 1]}, "point_coords must be an array of real numbers"),
    ({"point_coords": [[[10.0, 10.0]], [[5.0, 5.0], [6.0, 6.0]]], "point_labels": [[1], [1, 1]]},
     "point_coords must be an array of real numbers"),
    ({"point_coords": [[[10.0, 10.0]], [[5.0, 5.0]]], "point_labels": [[1], [1, 1]]},
     "point_labels must be an array of labels, one per point, as many in each row, got list"),
    ({"point_coords": [[10.0, 10.0], [5.0, 5.0]], "point_labels": [[1], [1, 1]]}, "point_labels must be an array"),
    ({"box": [50.0, 10.0, 20.0, 40.0]}, "has x2 < x1"),
    ({"box": [121.0, 10.0, 130.0, 40.0]}, r"box \(121, 10, 130, 40\) lies outside the 120x90 image"),
    ({"box": [10.0, -40.0, 50.0, -1.0]}, "lies outside the 120x90 image"),
    ({"box": [10.0, 10.0, 40.0]}, r"box has shape \(3,\)"),
    ({"point_coords": [[10.0, 10.0]], "point_labels": [1], "mask_input": np.zeros((1, 256, 256))},
     r"mask_input has shape \(1, 256, 256\) \(float64\): expected \(1, 32, 32\)"),
    ({"mask_input": np.zeros((32, 32))}, r"expected \(1, 32, 32\)"),
])
def test_bad_prompts_raise_one_line_errors(predictor, kwargs, message):
    with pytest.raises(ZooError, match=message) as e:
        predictor.predict(**kwargs)
    assert "\n" not in str(e.value)


def test_resize_longest_side_takes_what_set_image_takes(predictor, image):
    """upstream's transform.apply_image of a float image in [0, 1] (its to_pil_image scales it) was Pillow's 'Cannot
    handle this data type' traceback; apply_coords / apply_boxes of a wrong shape, numpy's reshape traceback."""
    transform = predictor.transform
    assert np.array_equal(transform.apply_image(image / 255.0), transform.apply_image(image))
    with pytest.raises(ZooError, match=r"image is a float array outside \[0, 1\]"):
        transform.apply_image(image.astype(np.float32))
    with pytest.raises(ZooError, match=r"^boxes has shape \(1, 3\): expected \(B, 4\)"):
        transform.apply_boxes_torch([[1, 2, 3]], predictor.original_size)
    with pytest.raises(ZooError, match=r"^coords must be an array of real numbers"):
        transform.apply_coords([[1, 2], [3]], predictor.original_size)
    with pytest.raises(ZooError, match=r"^coords has shape \(3,\): expected \(..., 2\)"):
        transform.apply_coords([1, 2, 3], predictor.original_size)


def test_mask_crop_takes_one_masks_low_res_logits(predictor):
    """mask_crop(low_res[:1]), (1, S, S), was the resize's internal 'x must be NHWC (N, H, W, C)'; text was numpy's
    cast error. One error naming what it takes; predict's mask as before."""
    scores, low_res = predictor.predict_low_res(point_coords=[[30, 40]], point_labels=[1])
    top, left, crop = predictor.mask_crop(low_res[0])
    mask = np.zeros(predictor.original_size, bool)
    mask[top : top + crop.shape[0], left : left + crop.shape[1]] = crop
    assert np.array_equal(mask, predictor.predict(point_coords=[[30, 40]], point_labels=[1])[0][0])
    for wrong in (low_res[:1], np.full((LOW_RES, LOW_RES), "1")):
        expected = f"mask_crop takes one mask's low-res logits, 2-D, got {wrong.shape} ({wrong.dtype}): pass low_res[i]"
        with pytest.raises(ZooError, match=f"^{re.escape(expected)}"):
            predictor.mask_crop(wrong)


def test_mobilesam_readmes_loading_lines_run_as_written(checkpoint, tmp_path):
    """MobileSAM's README: sam_model_registry["vit_t"](checkpoint=...), .to(device=device), .eval() (an
    ImportError before); no checkpoint gives random weights as upstream's; another model type is one error."""
    from zoo.models.mobilesam import sam_model_registry

    seed5 = synthetic_state_dict(read_manifest(MANIFESTS / "mobilesam.json"), 5)
    save_file(seed5, str(tmp_path / "mobile_sam.safetensors"))
    sam = sam_model_registry["vit_t"](checkpoint=str(tmp_path / "mobile_sam.safetensors"))
    assert sam.to(device="cuda") is sam and sam.eval() is sam
    # upstream Sam's attributes that scripts read: torch.as_tensor(points, device=sam.device), sam.image_format
    assert sam.device == "cpu" and sam.image_format == "RGB" and sam.predictor().device == sam.device
    loaded = dict(tree_flatten(sam.parameters()))
    assert np.array_equal(np.array(loaded["mask_decoder.iou_token.weight"]), seed5["mask_decoder.iou_token.weight"])
    random = dict(tree_flatten(sam_model_registry["vit_t"]().parameters()))  # synthetic:0, the fixture's values
    assert np.array_equal(np.array(random["mask_decoder.iou_token.weight"]), checkpoint["mask_decoder.iou_token.weight"])
    with pytest.raises(ZooError, match="MobileSAM only, 'vit_t'"):
        sam_model_registry["default"]
    with pytest.raises(ZooError, match="not a device"):
        sam.to(device="tpu")


def test_upstreams_batched_prompt_idiom_runs_as_written(predictor, image):
    """segment-anything's notebook for many boxes: predictor.transform.apply_boxes_torch(boxes, image.shape[:2])
    .to(predictor.device), then predict_torch, then each mask's .cpu().numpy(); it raised AttributeError."""
    boxes = np.array([[10, 20, 110, 80], [0, 0, 120, 90]])  # the second: the whole 120x90 image
    transformed = predictor.transform.apply_boxes_torch(boxes, image.shape[:2]).to(predictor.device)
    # upstream's ResizeLongestSide: each side scaled by new/old, new = int(old * 128 / 120 + 0.5): 128 x 96
    assert np.allclose(transformed, boxes * np.array([128 / 120, 96 / 90] * 2), rtol=1e-6)
    masks, scores, low_res = predictor.predict_torch(point_coords=None, point_labels=None, boxes=transformed,
                                                     multimask_output=False)
    assert masks.shape == (2, 1, 90, 120) and masks.dtype == bool and scores.shape == (2, 1)
    assert low_res.shape == (2, 1, LOW_RES, LOW_RES) and type(masks[0].cpu().numpy()) is np.ndarray
    same = predictor.predict(boxes=boxes, multimask_output=False)  # the same prompts in the image's pixels
    assert all(np.array_equal(a, b) for a, b in zip((masks, scores, low_res), same))
    points = predictor.transform.apply_coords(np.array([[[30, 40]], [[100, 10]]]), image.shape[:2])
    logits, scores, _ = predictor.predict_torch(points, np.ones((2, 1)), return_logits=True)
    assert logits.shape == (2, 3, 90, 120) and logits.dtype == np.float32
    assert np.array_equal(scores, predictor.predict(point_coords=[[[30, 40]], [[100, 10]]], point_labels=[[1], [1]])[1])
    with pytest.raises(ZooError, match="outside the 128x96 image"):  # the resized frame's bounds
        predictor.predict_torch(None, None, boxes=boxes + 130)
    overhanging = predictor.predict_torch(None, None, boxes=transformed * 1.01, multimask_output=False)
    assert all(np.array_equal(a, b) for a, b in zip(
        overhanging, predictor.predict(boxes=boxes * 1.01, multimask_output=False)))


def test_resize_longest_side_dtypes_as_upstream():
    """segment-anything's ResizeLongestSide: the numpy forms return float64 whatever the input (astype(float)), the
    torch forms float32 (torch.float); both the same values, the input left as it was."""
    from zoo.models.mobilesam.predictor import ResizeLongestSide

    transform = ResizeLongestSide(1024)
    points = np.array([[[30, 40]], [[100, 10]]], np.float32)
    boxes = np.array([[10, 20, 110, 80]], np.int64)
    coords, box_rows = transform.apply_coords(points, (480, 640)), transform.apply_boxes(boxes, (480, 640))
    assert coords.dtype == np.float64 and box_rows.dtype == np.float64 and points.dtype == np.float32
    assert np.array_equal(coords, points.astype(np.float64) * 1.6) and np.array_equal(box_rows, boxes * 1.6)
    assert transform.apply_coords(points.astype(np.float16), (480, 640)).dtype == np.float64
    torch_coords = transform.apply_coords_torch(points, (480, 640))
    torch_boxes = transform.apply_boxes_torch(boxes, (480, 640))
    assert torch_coords.dtype == np.float32 and torch_boxes.dtype == np.float32
    assert np.array_equal(torch_coords, coords.astype(np.float32))
    assert np.array_equal(torch_boxes, box_rows.astype(np.float32))


def test_upstreams_end_to_end_batched_inference_runs_as_written(small_sam, predictor, image):
    """segment-anything's notebook, "end-to-end batched inference": ResizeLongestSide(sam.image_encoder.img_size),
    each image's apply_image(image) channels first, its boxes through apply_boxes_torch, then
    sam(batched_input, multimask_output=False); Sam was not callable. (torch.as_tensor(...).permute(2, 0, 1)
    there; numpy's transpose here.) Each image's outputs are what set_image + predict give."""
    from zoo.models.mobilesam.predictor import ResizeLongestSide

    resize_transform = ResizeLongestSide(small_sam.image_encoder.img_size)
    other = np.ascontiguousarray(image[::-1, :100])  # a second image of another size
    boxes = [np.array([[10, 20, 110, 80], [0, 0, 120, 90]]), np.array([[5, 5, 60, 40]])]
    prepared = resize_transform.apply_image(image)
    assert prepared.flags.writeable  # as upstream's: torch.as_tensor of a read-only array warns
    batched_input = [{"image": resize_transform.apply_image(im).transpose(2, 0, 1),
                      "boxes": resize_transform.apply_boxes_torch(b, im.shape[:2]), "original_size": im.shape[:2]}
                     for im, b in zip((image, other), boxes)]
    batched_input[1]["point_coords"] = resize_transform.apply_coords_torch([[[30, 20]]], other.shape[:2])
    batched_input[1]["point_labels"] = np.array([[0]])
    batched_output = small_sam(batched_input, multimask_output=False)
    assert [sorted(out) for out in batched_output] == [["iou_predictions", "low_res_logits", "masks"]] * 2
    p = small_sam.predictor()
    for im, b, out, prompt in zip((image, other), boxes, batched_output, ({}, {"point_coords": [[[30, 20]]],
                                                                          "point_labels": [[0]]})):
        p.set_image(im)
        masks, iou, low_res = p.predict(boxes=b, multimask_output=False, **prompt)
        assert out["masks"].shape == (len(b), 1, *im.shape[:2]) and out["masks"].dtype == bool
        for got, expected in zip((out["masks"], out["iou_predictions"], out["low_res_logits"]), (masks, iou, low_res)):
            assert np.array_equal(got.cpu().numpy(), expected)
    # set_torch_image, upstream's, is what sam(...) encodes with
    p.set_torch_image(prepared.transpose(2, 0, 1)[None], image.shape[:2])
    assert np.array_equal(p.features, predictor.features) and p.original_size == (90, 120) and p.input_size == (96, 128)
    with pytest.raises(ZooError, match=r"set_torch_image takes \(1, 3, H, W\) .* got \(3, 96, 128\)"):
        p.set_torch_image(prepared.transpose(2, 0, 1), image.shape[:2])
    with pytest.raises(ZooError, match="original_image_size 90 is not the image's"):
        p.set_torch_image(prepared.transpose(2, 0, 1)[None], 90)
    with pytest.raises(ZooError, match="each input is a dict with 'image'"):
        small_sam([{"image": batched_input[0]["image"]}], multimask_output=False)


def test_predict_before_set_image_and_bad_images(small_sam, tmp_path):
    p = small_sam.predictor()
    with pytest.raises(ZooError, match="no image set"):
        p.predict(point_coords=[[1, 1]], point_labels=[1])
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(ZooError, match="not an image file"):
        p.set_image(tmp_path / "broken.png")
    with pytest.raises(ZooError, match="image_format 'RGBA'"):
        p.set_image(np.zeros((8, 8, 3), np.uint8), image_format="RGBA")


def test_the_dense_positional_encoding_is_made_once_per_weights():
    """get_dense_pe's sines and cosines (13 ms of MLX's CPU) are kept until the Gaussian matrix is replaced."""
    from zoo.models.mobilesam.prompt_encoder import PromptEncoder

    encoder = PromptEncoder(embed_dim=16, image_embedding_size=(8, 8), input_image_size=(128, 128), mask_in_chans=4)
    encoder.pe_layer.positional_encoding_gaussian_matrix = mx.random.normal((2, 8), key=mx.random.key(1))
    first = encoder.get_dense_pe()
    assert encoder.get_dense_pe() is first and first.shape == (1, 8, 8, 16)
    np.testing.assert_array_equal(np.array(first), np.array(encoder.pe_layer.grid(8, 8)[None]))
    encoder.pe_layer.positional_encoding_gaussian_matrix = mx.random.normal((2, 8), key=mx.random.key(2))
    again = encoder.get_dense_pe()
    assert again is not first
    np.testing.assert_array_equal(np.array(again), np.array(encoder.pe_layer.grid(8, 8)[None]))


def test_a_prompt_of_a_masks_pixels_is_refused_before_decoding(predictor, monkeypatch):
    """point_coords=np.argwhere(mask)[:, ::-1], every pixel of a region as a point: the decoder's token attention is
    quadratic in them (12,000 points took 1.4 GB and 47 s; 50,000, ~20 GB). Refused before the decoder runs, as
    one line naming the fix; the masks of a few points are unaffected."""
    module = importlib.import_module(SamPredictor.__module__)
    monkeypatch.setattr(module, "host_memory", lambda: 64 << 20)  # 32 MiB for the scores: ~2,000 tokens
    decode = predictor.decode
    monkeypatch.setattr(predictor, "decode", lambda *a, **k: pytest.fail("decoded before the check"))
    points = np.random.default_rng(0).uniform(0, 60, (3000, 2))
    with pytest.raises(ZooError, match=r"^3,000 points per prompt: the mask decoder's attention between them takes "
                                       r"at least 0.0673 GiB \(1 prompt\(s\) at once\), more than 50% of this "
                                       r"machine's 0.0625 GiB: give a few points per object"):
        predictor.predict(point_coords=points, point_labels=np.ones(3000), multimask_output=False)
    with pytest.raises(ZooError, match=r"^2,000 points per prompt: .* \(3 prompt\(s\) at once\)"):
        predictor.predict(point_coords=np.zeros((3, 2000, 2)), point_labels=np.ones((3, 2000)))
    monkeypatch.setattr(predictor, "decode", decode)
    assert predictor.predict(point_coords=points[:10], point_labels=np.ones(10))[0].shape[0] == 3


def test_masks_beyond_the_machines_memory_are_refused_before_decoding(small_sam, predictor, monkeypatch):
    """10,000 boxes on a 12 MP photo are 112 GiB of masks: numpy's MemoryError (or, under the overcommit limit,
    an allocation filling up as the masks came); now one ZooError naming the fix, before the decoder runs"""
    module = importlib.import_module(SamPredictor.__module__)

    low_res = 32 * 32 * 4  # one mask's low-res logits, float32, on this 128 px model
    monkeypatch.setattr(module, "host_memory", lambda: 4 * (90 * 120 + low_res))  # the 4 masks: twice half of it
    monkeypatch.setattr(predictor, "decode", lambda *a, **k: pytest.fail("decoded before the check"))
    boxes = [[10, 10, 50, 50]] * 4
    with pytest.raises(ZooError, match=r"4 prompt\(s\) x 1 mask\(s\) of 120x90 take .* GiB with their low-res logits, "
                                       r"more than 50% of this machine's .* GiB: pass fewer prompts per call, or "
                                       r"predict_low_res"):
        predictor.predict(boxes=boxes, multimask_output=False)
    # on a 4x4 image the masks are 48 bytes a prompt and their logits 12 KiB here (768 KiB at 1024 px): 2,000 boxes took
    # 3.4 GB and 89 s, unchecked, where the masks' check passed them
    tiny = SamPredictor(small_sam)
    tiny.set_image(np.zeros((4, 4, 3), np.uint8))
    monkeypatch.setattr(tiny, "decode", lambda *a, **k: pytest.fail("decoded before the check"))
    monkeypatch.setattr(module, "host_memory", lambda: 4 * 3 * low_res)
    with pytest.raises(ZooError, match=r"^4 prompt\(s\) x 3 mask\(s\) take .* GiB of low-res logits \(32x32 float32\), "
                                       r"more than 50% of this machine's .* GiB: pass fewer prompts per call$"):
        tiny.predict_low_res(boxes=[[0, 0, 4, 4]] * 4)
