"""MobileSAM parity: the numpy reference and the MLX model against the upstream case, and each other.

The upstream case (tests/fixtures/mobilesam, thinned from shared/reference/mobilesam) is
MobileSAM run in float64 on a 640x480 image with two points. On this CPU one MLX
encoder pass at 1024x1024 takes ~40 s (MLX's reference BLAS), so it runs once:

- the numpy reference runs the whole case once (module fixture) and meets the upstream
  traces, embeddings, prompt/decoder outputs and masks;
- the MLX model runs the upstream case from the image embedding on (prompt encoder, mask
  decoder, post-processing at 1024, fed the reference's embedding) and its pre-processing
  (Pillow-exact), and the whole model layer by layer against the reference at 128x128
  (same code, every window padding path) through the validator's engine;
- and the full MLX pass at 1024 against upstream, once.
"""
import dataclasses
import hashlib
import types

import numpy as np
import pytest
from PIL import Image

from conftest import load_case, parity_run
from zoo import registry
from zoo.models.mobilesam.predictor import apply_coords, resize_longest_side
from zoo.validate import engine
from zoo.validate.capture import recording
from zoo.validate.reference import mobilesam as reference
from zoo.validate.reference.trace import Trace

# Relative error (max abs error / max |upstream|). The reference runs in float64 like the
# upstream case, which is stored in float32: only that rounding (6e-8) should remain.
REFERENCE_TOL = 1e-6
MLX_TOL = engine.TOLERANCES["float32"]["end-to-end"]  # float32 against float64
STAGES = ["image_encoder.patch_embed", "image_encoder.layers.0", "image_encoder.layers.1",
          "image_encoder.layers.2", "image_encoder.layers.3", "image_encoder.neck"]


def sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def thin(a: np.ndarray, sample: dict) -> np.ndarray:
    """Apply the fixture's sampling (recorded in its .json) to a full-size array."""
    a = np.asarray(a)
    if sample["layout"] == "full":
        return a
    step, cstep = sample["spatial_step"], sample["channel_step"]
    if sample["layout"] == "tokens":
        return a.reshape(a.shape[0], *sample["grid"], a.shape[2])[:, ::step, ::step, ::cstep]
    if sample["layout"] == "nchw":
        return a[:, ::cstep, ::step, ::step]
    return a[::cstep, ::step, ::step]  # chw


def rel_err(got, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


class KeepTrace(Trace):
    """A Trace that keeps only some outputs: a whole 1024 pass would hold gigabytes."""

    def __init__(self, keep):
        super().__init__()
        self.keep = set(keep)

    def __call__(self, name, fn, *inputs):
        out = super().__call__(name, fn, *inputs)
        if name not in self.keep:
            del self.outputs[name]
        return out


@pytest.fixture(scope="module")
def case():
    arrays, sidecar = load_case("mobilesam", "mobilesam_seed0")
    image = np.random.default_rng(1234).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    assert sha256(image) == sidecar["image"]["sha256_uint8"]
    prompts = sidecar["prompts"]
    return types.SimpleNamespace(image=image, arrays=dict(arrays), sidecar=sidecar,
                                 coords=np.array(prompts["point_coords"]), labels=np.array(prompts["point_labels"]))


@pytest.fixture(scope="module")
def weights():
    return registry.read_weights(registry.get_spec("mobilesam"), "synthetic:0")


@pytest.fixture(scope="module")
def reference_run(case, weights):
    trace = KeepTrace(STAGES + ["prompt_encoder", "mask_decoder.transformer", "mask_decoder"])
    masks, iou, low_res = reference.predict(weights.state_dict, case.image, case.coords, case.labels, trace=trace)
    return types.SimpleNamespace(masks=masks, iou=iou, low_res=low_res, outputs=trace.outputs)


def check(case, key, got, tol):
    expected = case.arrays[key]
    got = thin(got, case.sidecar["samples"][key])
    assert got.shape == expected.shape, key
    err = rel_err(got, expected)
    assert err <= tol, f"{key}: rel err {err:.2e} > {tol:g}"
    return err


def check_binary_masks(case, masks_bool):
    meta = case.sidecar["masks_binary"]
    upstream = np.unpackbits(case.arrays["masks_binary_packed"])[: np.prod(meta["shape"])].astype(bool)
    differ = np.flatnonzero(masks_bool.ravel() != upstream)
    # a flip is only allowed where upstream's own logit is within 1e-4 of the threshold
    assert np.isin(differ, case.arrays["masks_near_zero_index"]).all(), differ[:10]
    return differ.size


# ---------------------------------------------------------------- pre-processing


def test_resize_and_encoder_input_are_pillow_exact_on_both_sides(case, weights):
    hashes = case.sidecar["hashes"]
    resized = resize_longest_side(case.image, 1024)  # the MLX predictor's (Pillow)
    assert resized.shape == (768, 1024, 3)
    assert sha256(resized) == hashes["input_image_resized_sha256_uint8"]
    assert sha256(reference.resize_uint8_bilinear(case.image, (768, 1024))) == hashes["input_image_resized_sha256_uint8"]

    sam = registry.build(registry.get_spec("mobilesam"), weights)
    mlx_input = np.array(sam.preprocess(resized)).transpose(0, 3, 1, 2)
    assert sha256(mlx_input.astype(np.float32)) == hashes["encoder_input_sha256_float32"]
    ref_input, input_size = reference.preprocess(case.image)
    assert input_size == (768, 1024)
    assert sha256(ref_input.astype(np.float32)) == hashes["encoder_input_sha256_float32"]


@pytest.mark.parametrize("size, out", [
    ((480, 640), (768, 1024)),   # upscale: horizontal pass first
    ((300, 200), (100, 180)),    # height shrinks, width barely: Pillow 13 goes vertical first
    ((200, 300), (100, 120)),    # both shrink, width more: horizontal first
    ((97, 131), (97, 257)),      # one pass only
    ((64, 64), (64, 64)),        # identity
])
def test_reference_resize_is_pillows_bit_for_bit(size, out):
    img = np.random.default_rng(sum(size)).integers(0, 256, (*size, 3), dtype=np.uint8)
    expected = np.asarray(Image.fromarray(img).resize(out[::-1], Image.BILINEAR))
    np.testing.assert_array_equal(reference.resize_uint8_bilinear(img, out), expected)


def test_prompt_coordinates_transform_like_upstream(case):
    expected = case.arrays["point_coords_transformed"][0]
    np.testing.assert_array_equal(apply_coords(case.coords, (480, 640), 1024), expected)
    np.testing.assert_array_equal(reference.apply_coords(case.coords, (480, 640), 1024), expected)


# ---------------------------------------------------------------- the numpy reference against upstream


def test_reference_encoder_matches_upstream_traces(case, reference_run):
    for name in STAGES:
        check(case, f"trace/{name}", reference_run.outputs[name], REFERENCE_TOL)


def test_reference_prompt_encoder_and_decoder_match_upstream(case, reference_run, weights):
    sparse, dense = reference_run.outputs["prompt_encoder"]
    check(case, "sparse_embeddings", sparse, REFERENCE_TOL)
    check(case, "dense_embeddings", dense, REFERENCE_TOL)
    check(case, "trace/prompt_encoder.get_dense_pe", reference.get_dense_pe(weights.state_dict, (64, 64)), REFERENCE_TOL)
    check(case, "trace/mask_decoder.transformer.hs", reference_run.outputs["mask_decoder.transformer"][0], REFERENCE_TOL)
    check(case, "low_res_masks", reference_run.low_res[None], REFERENCE_TOL)
    check(case, "iou_predictions", reference_run.iou[None], REFERENCE_TOL)


def test_reference_masks_match_upstream(case, reference_run):
    # the logits at the original size are interpolated in float32 (the kernels' reference)
    check(case, "masks", reference_run.masks, 2e-5)
    check_binary_masks(case, reference_run.masks > 0)


# ---------------------------------------------------------------- MLX against upstream


def test_mlx_prompt_encoder_decoder_and_masks_match_upstream(case, reference_run, weights):
    sam = registry.build(registry.get_spec("mobilesam"), weights)
    predictor = sam.predictor()
    # the upstream image embedding (as the reference computes it, within 1e-7), NCHW as upstream's features
    predictor.features = reference_run.outputs["image_encoder.neck"]
    predictor.original_size, predictor.input_size = (480, 640), (768, 1024)
    predictor.is_image_set = True
    with recording(sam) as records:
        masks, iou, low_res = predictor.predict(case.coords, case.labels, return_logits=True)
    sparse, dense = (np.array(a) for a in records["prompt_encoder"].output)
    check(case, "sparse_embeddings", sparse, MLX_TOL)
    check(case, "dense_embeddings", dense.transpose(0, 3, 1, 2), MLX_TOL)
    check(case, "trace/prompt_encoder.get_dense_pe", np.array(sam.prompt_encoder.get_dense_pe()).transpose(0, 3, 1, 2), MLX_TOL)
    check(case, "trace/mask_decoder.transformer.hs", np.array(records["mask_decoder.transformer"].output[0]), MLX_TOL)
    check(case, "low_res_masks", low_res[None], MLX_TOL)
    check(case, "iou_predictions", iou[None], MLX_TOL)
    check(case, "masks", masks, MLX_TOL)
    check_binary_masks(case, masks > 0)
    # all four mask tokens before the multimask selection (token 0: the single-mask answer)
    all_masks, all_iou = sam.mask_decoder.predict_masks(*records["mask_decoder"].inputs[:4])
    check(case, "low_res_masks_all", np.array(all_masks).transpose(0, 3, 1, 2), MLX_TOL)
    check(case, "iou_predictions_all", np.array(all_iou), MLX_TOL)


# ---------------------------------------------------------------- MLX against the reference, layer by layer


@pytest.fixture(scope="module")
def small_run(weights):
    spec = dataclasses.replace(registry.get_spec("mobilesam"), preprocess={"image_size": 128})
    model = registry.build(spec, weights)
    return parity_run(spec, model, weights.state_dict, image=None, point=[], box=None, single_mask=False)


@pytest.mark.parametrize("mode", engine.MODES)
def test_mlx_matches_reference_layer_by_layer_at_128(small_run, mode):
    report = small_run.compare_mode(mode)
    assert not [r.name for r in report.layers if r.status == "n/a"]
    assert report.passed, report.first_failure
    names = {r.name for r in report.layers}
    assert {"image_encoder.layers.1.blocks.0.attn.norm", "image_encoder.layers.2.downsample",
            "prompt_encoder/0", "mask_decoder.transformer/1", "mask_decoder.output_upscaling.0", "output/0"} <= names
    assert len(report.layers) == 244


# ---------------------------------------------------------------- the whole MLX model at 1024 (~40 s on 2 cores)


def test_mlx_full_case_matches_upstream(case, weights):
    sam = registry.build(registry.get_spec("mobilesam"), weights)
    predictor = sam.predictor()
    with recording(sam) as records:
        predictor.set_image(case.image)
    for name in STAGES:
        out = np.array(records[name].output)
        check(case, f"trace/{name}", out.transpose(0, 3, 1, 2) if out.ndim == 4 else out, MLX_TOL)
    masks, iou, low_res = predictor.predict(case.coords, case.labels, return_logits=True)
    check(case, "low_res_masks", low_res[None], MLX_TOL)
    check(case, "iou_predictions", iou[None], MLX_TOL)
    check(case, "masks", masks, MLX_TOL)
    check_binary_masks(case, masks > 0)
