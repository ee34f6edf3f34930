"""Segment everything (SamAutomaticMaskGenerator) and batched prompts, against upstream's outputs.

Fixtures: tests/fixtures/mobilesam/make_amg.py (upstream MobileSAM utils/amg.py and
SamAutomaticMaskGenerator, run once with torch).
"""
import json

import mlx.core as mx
import numpy as np
import pytest
from PIL import Image

import sam_crafted
from conftest import FIXTURES, MANIFESTS
from zoo import registry
from zoo.errors import ZooError
from zoo.models import mobilesam
from zoo.models.mobilesam import amg
from zoo.weights.synthetic import read_manifest, synthetic_state_dict

pytest.importorskip("cv2")  # the 'sam' extra (in 'test')
from pycocotools import mask as mask_utils  # noqa: E402

HERE = FIXTURES / "mobilesam"
# pycocotools 2.0 decodes through numpy's old __array__ protocol
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


@pytest.fixture(scope="module")
def up():
    return np.load(HERE / "amg_functions.npz")


@pytest.fixture(scope="module")
def crafted_model():
    sd = sam_crafted.prompt_responsive(synthetic_state_dict(read_manifest(MANIFESTS / "mobilesam.json"), 0))
    spec = registry.get_spec("mobilesam")
    model = registry.build(spec, registry.Weights(mobilesam.sanitize(sd, {}), "crafted", {}))
    model.encode_image = _memoised(model.encode_image)  # the tests encode the same few crops many times
    return model


def _memoised(encode):
    cache = {}

    def encode_once(x):
        key = (x.shape, np.array(x).tobytes())
        if key not in cache:
            cache[key] = encode(x)
        return cache[key]

    return encode_once


@pytest.fixture(scope="module")
def scene():
    return np.asarray(Image.open(HERE / "amg_scene.png").convert("RGB"))


# ---- utils/amg.py functions -------------------------------------------------------------------

def test_point_grids_and_crop_boxes(up):
    for n in (1, 2, 5, 32):
        np.testing.assert_array_equal(amg.build_point_grid(n), up[f"grid_{n}"])
    for i, g in enumerate(amg.build_all_layer_point_grids(16, 2, 2)):
        np.testing.assert_array_equal(g, up[f"layer_grid_{i}"])
    for i, (h, w, layers, ratio) in enumerate(up["crop_cases"]):
        boxes, layer_idx = amg.generate_crop_boxes((int(h), int(w)), int(layers), float(ratio))
        np.testing.assert_array_equal(np.array(boxes), up[f"crops_{i}"])
        np.testing.assert_array_equal(np.array(layer_idx), up[f"crops_{i}_layers"])


def test_stability_boxes_rle(up):
    logits = mx.array(up["logits"])
    for offset in (1.0, 0.5):  # values exactly at t +- offset are in the fixture
        np.testing.assert_array_equal(np.array(amg.stability_score(logits, 0.0, offset)), up[f"stability_{offset}"])
    masks = np.array(logits > 0)
    np.testing.assert_array_equal(np.array(amg.batched_mask_to_box(mx.array(masks))), up["boxes"])
    rles = amg.mask_to_rle(masks)
    np.testing.assert_array_equal([len(r["counts"]) for r in rles], up["rle_lengths"])
    np.testing.assert_array_equal(np.concatenate([r["counts"] for r in rles]), up["rle_counts"])
    np.testing.assert_array_equal([amg.area_from_rle(r) for r in rles], up["rle_areas"])
    for rle, mask, coco in zip(rles, masks, up["coco_counts"]):
        np.testing.assert_array_equal(amg.rle_to_mask(rle), mask)
        assert amg.coco_encode_rle(rle)["counts"] == coco


def test_rle_from_occupied_columns(up):
    """The generator's RLE (only the columns from a mask's first to last pixel, the crop placed in the
    image) equals mask_to_rle of the whole-image mask: the fixture's masks (upstream's RLEs) and
    random masks in random crops, empty and full ones included."""
    masks = np.array(mx.array(up["logits"]) > 0)
    h, w = masks.shape[1:]
    rles = amg.mask_columns_to_rle(masks.transpose(0, 2, 1).copy(), masks.any(axis=1), [0, 0, w, h], (h, w))
    np.testing.assert_array_equal(np.concatenate([r["counts"] for r in rles]), up["rle_counts"])
    rng = np.random.default_rng(0)
    for _ in range(300):
        image_h, image_w = rng.integers(1, 9, 2)
        crop_h, crop_w = rng.integers(1, image_h + 1), rng.integers(1, image_w + 1)
        y0, x0 = rng.integers(0, image_h - crop_h + 1), rng.integers(0, image_w - crop_w + 1)
        mask = rng.random((crop_h, crop_w)) < rng.choice([0.0, 0.3, 0.9, 1.0])
        whole = np.zeros((image_h, image_w), bool)
        whole[y0 : y0 + crop_h, x0 : x0 + crop_w] = mask
        got = amg.mask_columns_to_rle(mask.T[None].copy(), mask.any(axis=0)[None],
                                      [x0, y0, x0 + crop_w, y0 + crop_h], (image_h, image_w))
        assert got == amg.mask_to_rle(whole[None]), (whole, got)


def test_small_regions(up):
    masks = np.array(mx.array(up["logits"]) > 0)
    for thresh in (4, 9, 25, 26):  # 4, 9, 25: islands of exactly that area (kept: < is the test)
        for mode in ("holes", "islands"):
            for i, mask in enumerate(masks):
                out, changed = amg.remove_small_regions(mask, thresh, mode)
                np.testing.assert_array_equal(out, up[f"small_{mode}_{thresh}"][i], err_msg=f"{mode} {thresh} {i}")
                assert changed == up[f"small_{mode}_{thresh}_changed"][i]


def test_small_regions_of_many_masks_take_one_mask_at_a_time():
    """min_mask_region_area held every mask of the image at once, and stacked them twice more for their boxes (150
    masks of a 12-megapixel photo: 5 GB); now one mask at a time, a changed one kept as its RLE. The result: islands
    dropped, boxes of the changed masks recomputed, the unchanged masks first (upstream's NMS scores)."""
    import tracemalloc

    from zoo.models.mobilesam.automatic_mask_generator import SamAutomaticMaskGenerator

    side, n = 320, 256
    masks, expected = np.zeros((n, side, side), bool), np.zeros((n, side, side), bool)
    for k in range(n):  # a 10x10 square in a cell of its own; every other one with a one-pixel island
        top, left = 20 * (k // 16), 20 * (k % 16)
        square = (slice(top + 2, top + 12), slice(left + 2, left + 12))
        masks[k][square] = expected[k][square] = True
        masks[k, top + 15, left + 15] = k % 2 == 1
    boxes = np.array(amg.batched_mask_to_box(mx.array(masks))).astype(np.int64)
    data = {"rles": amg.mask_to_rle(masks), "boxes": boxes,
            "iou_preds": np.arange(n, dtype=np.float32), "points": np.zeros((n, 2)),
            "stability_score": np.zeros(n, np.float32), "crop_boxes": np.zeros((n, 4), np.int64)}
    del masks
    tracemalloc.start()
    try:
        out = SamAutomaticMaskGenerator.postprocess_small_regions(data, 4, 0.7)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n // 2 * side * side, peak / (side * side)  # before: over 2 n masks
    order = np.concatenate([np.arange(0, n, 2), np.arange(1, n, 2)])  # unchanged first, then by index
    np.testing.assert_array_equal(out["iou_preds"], order)
    np.testing.assert_array_equal(np.stack([amg.rle_to_mask(rle) for rle in out["rles"]]), expected[order])
    np.testing.assert_array_equal(out["boxes"], np.array(amg.batched_mask_to_box(mx.array(expected[order]))))


def test_crop_edge_and_nms(up):
    from zoo.models.mobilesam.automatic_mask_generator import _nms

    for i in range(3):
        near = amg.is_box_near_crop_edge(mx.array(up["edge_boxes"]), up[f"edge_crop_{i}"].tolist(), [0, 0, 320, 240])
        np.testing.assert_array_equal(np.array(near), up[f"edge_near_{i}"])
    for thr in (0.3, 0.7):  # equal scores and duplicate boxes: torchvision's order (ties by index)
        np.testing.assert_array_equal(_nms(up["nms_boxes"], up["nms_scores"], thr), up[f"nms_keep_{thr}"])


# ---- the whole generator against upstream --------------------------------------------------------

def _decode(seg):
    return mask_utils.decode({"size": seg["size"], "counts": seg["counts"].encode()}).astype(bool)


@pytest.mark.parametrize("case", ["grid8", "crops"])
def test_generator_matches_upstream(crafted_model, scene, case):
    expected = json.loads((HERE / "amg_generator.json").read_text())["cases"][case]
    records = crafted_model.mask_generator(output_mode="coco_rle", **expected["config"]).generate(scene)
    want = expected["records"]
    assert len(want) > 5  # the crafted decoder answers the prompt: many masks, not one
    assert len(records) == len(want)
    ours = [_decode(r["segmentation"]) for r in records]
    for w in want:
        mask = _decode(w["segmentation"])
        ious = [(m & mask).sum() / max(1, (m | mask).sum()) for m in ours]
        j = int(np.argmax(ious))
        assert ious[j] >= 0.98, (case, w["point_coords"], ious[j])
        got = records[j]
        assert got["predicted_iou"] == pytest.approx(w["predicted_iou"], abs=1e-3)
        assert got["stability_score"] == pytest.approx(w["stability_score"], abs=1e-3)
        assert got["point_coords"][0] == pytest.approx(w["point_coords"][0])
        assert got["crop_box"] == w["crop_box"]


def test_records_self_consistent(crafted_model, scene):
    gen = crafted_model.mask_generator(points_per_side=4, pred_iou_thresh=0.8, stability_score_thresh=0.85)
    data = gen.generate_data(scene)
    binary = gen.records(data)
    assert len(binary) > 2
    h, w = scene.shape[:2]
    for r in binary:
        mask = r["segmentation"]
        assert mask.shape == (h, w) and mask.dtype == bool
        assert r["area"] == mask.sum()
        x, y, bw, bh = r["bbox"]
        ys, xs = np.nonzero(mask)
        assert (x, y, x + bw, y + bh) == (xs.min(), ys.min(), xs.max(), ys.max())
        assert r["predicted_iou"] > 0.8 and r["stability_score"] >= 0.85
    gen.output_mode = "coco_rle"
    coco = gen.records(data)
    gen.output_mode = "uncompressed_rle"
    raw = gen.records(data)
    for b, c, u in zip(binary, coco, raw):
        np.testing.assert_array_equal(_decode(c["segmentation"]), b["segmentation"])
        np.testing.assert_array_equal(amg.rle_to_mask(u["segmentation"]), b["segmentation"])
        assert c["area"] == u["area"] == b["area"]


def test_binary_masks_beyond_the_machines_memory_are_refused_before_decoding(crafted_model, scene, monkeypatch):
    """records() decoded every RLE into a full-size bool mask at once (upstream's binary_mask): 500 masks of a
    12-megapixel photo are 6 GB. Past half the machine's memory, one error naming output_mode='coco_rle'."""
    import importlib

    gen = crafted_model.mask_generator(points_per_side=4, pred_iou_thresh=0.8, stability_score_thresh=0.85)
    data = gen.generate_data(scene)
    n, (h, w) = len(data["rles"]), scene.shape[:2]
    predictor = importlib.import_module(type(gen.predictor).__module__)  # where the memory checks read the machine's
    monkeypatch.setattr(predictor, "host_memory", lambda: n * h * w)  # the masks: twice half of it
    monkeypatch.setattr(amg, "rle_to_mask", lambda rle: pytest.fail("decoded before the check"))
    with pytest.raises(ZooError, match=rf"^{n} masks of {w}x{h} as binary masks take .* GiB, more than 50% of this "
                                       r"machine's .* GiB: pass output_mode='coco_rle'"):
        gen.records(data)
    gen.output_mode = "coco_rle"
    assert len(gen.records(data)) == n


def test_raising_thresholds_never_adds_masks(crafted_model, scene):
    counts = []
    for iou, stability in ((0.0, 0.0), (0.8, 0.9), (0.88, 0.95), (1.0, 1.0)):
        records = crafted_model.mask_generator(points_per_side=4, pred_iou_thresh=iou,
                                               stability_score_thresh=stability,
                                               output_mode="uncompressed_rle").generate(scene)
        assert all(r["predicted_iou"] > iou and r["stability_score"] >= stability for r in records)
        counts.append(len(records))
    assert counts == sorted(counts, reverse=True), counts
    assert counts[0] > counts[-2] > 0 and counts[-1] == 0, counts  # every filter step removes some


@pytest.mark.parametrize("params, message", [
    ({"points_per_side": 0}, "points_per_side must be an integer >= 1"),
    ({"pred_iou_thresh": 1.5}, "pred_iou_thresh must be a number in [0, 1]"),
    ({"stability_score_thresh": -0.1}, "stability_score_thresh must be a number in [0, 1]"),
    ({"box_nms_thresh": float("nan")}, "box_nms_thresh"),
    ({"points_per_batch": 0}, "points_per_batch"),
    ({"output_mode": "png"}, "output_mode 'png'"),
    ({"crop_n_layers": 2, "points_per_side": 2, "crop_n_points_downscale_factor": 4}, "crop layer 1 gets no points"),
    ({"points_per_side": None}, "exactly one of points_per_side"),
    # refused before its grid is made: 100000 asked for 74.5 GiB at once (MemoryError, or the machine's memory)
    ({"points_per_side": 1025}, "points_per_side 1025 makes 1,050,625 prompts: give at most 1024"),
])
def test_bad_parameters(crafted_model, params, message):
    with pytest.raises(ZooError, match=None) as e:
        crafted_model.mask_generator(**params)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_an_image_thinner_than_its_crops_is_segmented(small_mobilesam):
    """A 1 px tall strip with crop_n_layers=1: the layer's 2x2 crops have two of no rows (upstream's boxes), on which
    the run failed with 'image is empty (shape (0, 20, 3))' after the crops before them; they are left out."""
    import zoo

    strip = np.random.default_rng(0).integers(0, 256, (1, 40, 3), dtype=np.uint8)
    boxes, _ = amg.generate_crop_boxes((1, 40), 1, 512 / 1500)
    assert [box for box in boxes if box[3] <= box[1]] == [[0, 1, 20, 1], [20, 1, 40, 1]]
    crops = []
    generator = zoo.load("mobilesam", weights="synthetic").mask_generator(
        points_per_side=2, crop_n_layers=1, pred_iou_thresh=0, stability_score_thresh=0)
    records = generator.generate(strip, progress=lambda done, total, crop, n: crops.append((crop, n)))
    assert crops == [(1, 3), (2, 3), (3, 3)]  # the whole strip and its two crops with rows
    assert records and all(r["segmentation"].shape == (1, 40) for r in records)


def test_more_crops_than_pixels_are_refused_before_they_are_listed(small_mobilesam):
    """crop_n_layers whose last layer has more crops than the image has pixels: refused before the crop boxes are
    listed (--crop-n-layers 20 was an internal MemoryError: 4**20 boxes; 6 on a 64x48 photo ran 4,181 crops, ten
    hours). The most layers that fit are named."""
    import zoo

    strip = np.zeros((1, 40, 3), np.uint8)
    generator = zoo.load("mobilesam", weights="synthetic").mask_generator(points_per_side=1, crop_n_layers=3)
    with pytest.raises(ZooError, match=r"^crop_n_layers 3 cuts the 40x1 image into 64 crops, more than its 40 pixels: "
                                       r"give at most 2$"):
        generator.generate(strip)


# ---- batched prompts -----------------------------------------------------------------------

def test_batched_boxes_and_points_equal_single_calls(crafted_model, scene):
    p = crafted_model.predictor()
    p.set_image(scene)
    boxes = np.array([[10, 20, 150, 160], [160, 50, 310, 210], [0, 0, 320, 240], [50, 150, 230, 239]], float)
    masks, scores, low = p.predict(boxes=boxes, return_logits=True)
    assert masks.shape == (4, 3, 240, 320) and scores.shape == (4, 3) and low.shape == (4, 3, 256, 256)
    for i, box in enumerate(boxes):
        m1, s1, l1 = p.predict(box=box, return_logits=True)
        # the batch of 4 and the single prompt run GEMMs of other shapes, which OpenBLAS may block
        # differently: float32 rounding of the upscaled logits (up to ~60) of a few ulps, 1e-7 of them
        np.testing.assert_allclose(masks[i], m1, atol=1e-5, rtol=1e-6)
        np.testing.assert_allclose(scores[i], s1, atol=1e-5, rtol=0)
        np.testing.assert_allclose(low[i], l1, atol=1e-5, rtol=0)
    points = np.array([[[80, 90], [300, 20]], [[235, 130], [150, 210]]], float)
    labels = np.array([[1, 0], [1, 1]])
    masks, scores, _ = p.predict(point_coords=points, point_labels=labels, boxes=boxes[:2], multimask_output=False)
    assert masks.shape == (2, 1, 240, 320) and masks.dtype == bool
    for i in range(2):
        m1, s1, _ = p.predict(point_coords=points[i], point_labels=labels[i], box=boxes[i], multimask_output=False)
        np.testing.assert_array_equal(masks[i], m1)
        np.testing.assert_allclose(scores[i], s1, atol=1e-5, rtol=0)
    empty, empty_scores, _ = p.predict(boxes=np.zeros((0, 4)))
    assert empty.shape == (0, 3, 240, 320) and empty_scores.shape == (0, 3)
    with pytest.raises(ZooError, match="prompt counts differ"):
        p.predict(boxes=boxes, point_coords=points, point_labels=labels)
    with pytest.raises(ZooError, match="lies outside the 320x240 image"):  # one reaching past an edge is taken
        p.predict(boxes=[[330, 0, 400, 100]])



def test_upsampling_fewer_masks_at_a_time_gives_the_same_records(crafted_model, scene, monkeypatch):
    """A big photo's candidates are upsampled a few at a time (all 192 of a batch at once took 4.2 GB at
    8000x8000) and a batch's points decoded a few at a time: the masks, scores and boxes are those of the
    whole batch at once."""
    from zoo.models.mobilesam import automatic_mask_generator as generator

    config = {"points_per_side": 4, "pred_iou_thresh": 0.5, "stability_score_thresh": 0.6,
              "output_mode": "uncompressed_rle"}
    monkeypatch.setattr(generator, "UPSAMPLE_BYTES", 1 << 40)
    monkeypatch.setattr(generator, "DECODE_PROMPTS_AT_ONCE", 64)
    whole = crafted_model.mask_generator(**config).generate(scene)
    monkeypatch.setattr(generator, "DECODE_PROMPTS_AT_ONCE", 5)  # the 16 points decoded 5, 5, 5 and 1 at a time
    calls = []
    upsample = generator.SamAutomaticMaskGenerator._upsample
    monkeypatch.setattr(generator.SamAutomaticMaskGenerator, "_upsample",
                        lambda self, low_res, predictor: calls.append(low_res.shape[0]) or upsample(self, low_res, predictor))
    for masks_at_once in (1, 3):
        calls.clear()
        monkeypatch.setattr(generator, "UPSAMPLE_BYTES",
                            masks_at_once * scene.shape[0] * scene.shape[1] * generator.UPSAMPLED_BYTES_PER_PIXEL)
        parts = crafted_model.mask_generator(**config).generate(scene)
        assert max(calls) == masks_at_once and len(calls) > 10
        assert parts == whole
    assert len(whole) > 5
