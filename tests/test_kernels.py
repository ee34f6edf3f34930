"""zoo.kernels against the numpy references in zoo.validate.reference.kernels.

Every comparison runs the fallback (plain MLX ops); where MLX has a GPU backend
(Metal or CUDA) it runs the native kernel too. Bad input must raise ZooError.
"""

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from zoo.errors import ZooError
from zoo.kernels import box_decode, core, depthwise, nms, resize, sppf_maxpool
from zoo.kernels.nms import float32_threshold
from zoo.validate.reference import kernels as ref

CASE = Path(__file__).parent / "fixtures" / "yolov8" / "postprocess_case"


# The native kernels run where MLX has a GPU backend (a Mac, the CUDA machine); here on
# the CPU only the fallback can run, and `python -m zoo.kernels.selftest` covers the GPU.
VARIANTS = ["fallback"] + (["native"] if core.gpu_backend() and mx.default_device().type == mx.gpu else [])


@pytest.fixture(params=VARIANTS)
def variant(request, monkeypatch):
    if request.param == "fallback":
        monkeypatch.setenv(core.ENV_VAR, "fallback")
    else:
        monkeypatch.delenv(core.ENV_VAR, raising=False)
    return request.param


def random_boxes(rng, n, extent=640.0, min_size=4.0, max_size=200.0):
    centers = rng.uniform(0, extent, (n, 2))
    sizes = rng.uniform(min_size, max_size, (n, 2))
    return np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1).astype(np.float32)


def run_nms(boxes, scores, iou, classes=None, max_det=300):
    kept = nms(
        mx.array(boxes), mx.array(scores), iou, None if classes is None else mx.array(classes), max_det=max_det
    )
    assert kept.dtype == mx.int32
    return np.array(kept)


def check_nms(boxes, scores, iou, classes=None, max_det=300):
    kept = run_nms(boxes, scores, iou, classes, max_det)
    expected = ref.nms(boxes, scores, iou, classes, max_det)
    np.testing.assert_array_equal(kept, expected)
    return kept


# ---------------------------------------------------------------- NMS


def test_nms_zero_boxes(variant):
    kept = nms(mx.zeros((0, 4)), mx.zeros((0,)), 0.7)
    assert kept.shape == (0,) and kept.dtype == mx.int32


def test_nms_one_box(variant):
    assert check_nms(np.array([[1, 2, 30, 40]], np.float32), np.array([0.3], np.float32), 0.7).tolist() == [0]


def test_nms_identical_boxes_keep_the_best(variant):
    boxes = np.tile(np.array([[10, 10, 50, 90]], np.float32), (5, 1))
    scores = np.array([0.3, 0.9, 0.5, 0.9, 0.1], np.float32)
    # Equal best scores 0.9 at 1 and 3: the lower index wins.
    assert check_nms(boxes, scores, 0.7).tolist() == [1]
    # Other classes are never suppressed by it.
    assert check_nms(boxes, scores, 0.7, np.array([0, 0, 1, 0, 2])).tolist() == [1, 2, 4]


def test_nms_ties_in_score_keep_input_order(variant):
    boxes = random_boxes(np.random.default_rng(1), 40, extent=2000.0, max_size=20.0)
    scores = np.repeat(np.array([0.5, 0.9, 0.7, 0.9], np.float32), 10)
    kept = check_nms(boxes, scores, 0.5)
    assert kept.tolist() == sorted(kept.tolist(), key=lambda i: (-scores[i], i))
    # -0.0 and 0.0 are the same score.
    zeros = np.array([0.0, -0.0, 0.0, -0.0], np.float32)
    assert check_nms(boxes[:4], zeros, 0.5).tolist() == [0, 1, 2, 3]


def test_nms_all_boxes_one_class(variant):
    rng = np.random.default_rng(2)
    # Integer coordinates stay exact after the class shift (7 * 7680 + 640 < 2**16), so
    # one class must give exactly the class-agnostic result.
    boxes = np.round(random_boxes(rng, 300))
    scores = rng.uniform(0.25, 1, 300).astype(np.float32)
    agnostic = check_nms(boxes, scores, 0.5)
    assert 0 < len(agnostic) < 300
    np.testing.assert_array_equal(check_nms(boxes, scores, 0.5, np.full(300, 7, np.int32)), agnostic)


def test_nms_max_det_cut(variant):
    boxes = np.array([[i * 100, 0, i * 100 + 50, 50] for i in range(10)], np.float32)
    scores = np.linspace(0.1, 1.0, 10).astype(np.float32)
    assert check_nms(boxes, scores, 0.5, max_det=3).tolist() == [9, 8, 7]
    assert check_nms(boxes, scores, 0.5, max_det=100).tolist() == list(range(9, -1, -1))


def test_nms_degenerate_boxes_are_never_suppressed(variant):
    # Zero area: IoU = 0 / 0 (NaN) for identical lines and points, 0 otherwise; NaN > t is
    # false in torchvision too, so all are kept.
    boxes = np.array([[5, 5, 5, 50], [5, 5, 5, 50], [3, 3, 3, 3], [3, 3, 3, 3], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5], np.float32)
    assert check_nms(boxes, scores, 0.1).tolist() == [0, 1, 2, 3, 4]


def test_nms_iou_equal_to_threshold_is_kept(variant):
    boxes = np.array([[0, 0, 2, 1], [0, 0, 1, 1]], np.float32)  # IoU exactly 0.5
    scores = np.array([0.9, 0.8], np.float32)
    assert check_nms(boxes, scores, 0.5).tolist() == [0, 1]
    assert check_nms(boxes, scores, 0.49).tolist() == [0]


def test_nms_suppression_chain(variant):
    # Box k+1 overlaps box k with IoU 0.82, box k+2 with 0.67: greedy keeps every other box
    # (a chain as long as the input: the fallback's worst case).
    boxes = np.array([[10 * k, 0, 10 * k + 100, 100] for k in range(60)], np.float32)
    scores = np.linspace(1.0, 0.5, 60).astype(np.float32)
    assert check_nms(boxes, scores, 0.7).tolist() == list(range(0, 60, 2))


@pytest.mark.parametrize("iou", [0.45, 0.6, 0.7])
def test_nms_random_detections(variant, iou):
    rng = np.random.default_rng(3)
    boxes = random_boxes(rng, 2500)
    scores = rng.uniform(0.25, 1, 2500).astype(np.float32)
    classes = rng.integers(0, 80, 2500).astype(np.int32)
    assert len(check_nms(boxes, scores, iou, classes)) == 300
    check_nms(boxes, scores, iou, classes, max_det=3000)
    check_nms(boxes, scores, iou, max_det=3000)


def test_nms_accepts_float16_and_numpy(variant):
    rng = np.random.default_rng(4)
    boxes = random_boxes(rng, 200).astype(np.float16)
    scores = rng.uniform(0, 1, 200).astype(np.float16)
    expected = ref.nms(boxes.astype(np.float32), scores, 0.6)
    np.testing.assert_array_equal(np.array(nms(boxes, scores, 0.6)), expected)


def test_float32_threshold_compares_like_a_double():
    for t in [0.6, 0.7, 0.45, 0.5, 1 / 3, 0.0, 1.0]:
        t32 = np.float32(float32_threshold(t))
        candidates = [np.nextafter(np.float32(t), np.float32(d)) for d in (-1, 2)] + [np.float32(t)]
        for x in candidates:
            assert (float(x) > t) == (x > t32), (t, x)


def postprocess_case():
    data = np.load(f"{CASE}.npz")
    meta = json.loads(Path(f"{CASE}.json").read_text())
    pred = data["pred"][0].T  # (anchors, 4 + classes)
    conf = meta["predict_defaults"]["conf"]
    class_scores = pred[:, 4:]
    candidates = np.nonzero(class_scores.max(1) > conf)[0]
    xywh = pred[candidates, :4]
    half_wh = xywh[:, 2:] / 2  # ultralytics xywh2xyxy, float32
    boxes = np.concatenate([xywh[:, :2] - half_wh, xywh[:, :2] + half_wh], axis=1)
    scores = class_scores[candidates].max(1)
    classes = class_scores[candidates].argmax(1).astype(np.int32)
    return data, meta, candidates, boxes, scores, classes


@pytest.mark.parametrize(
    "det, agnostic, max_det", [("det", False, 300), ("det_agnostic", True, 300), ("det_maxdet3", False, 3)]
)
def test_nms_matches_ultralytics_postprocess_case(variant, det, agnostic, max_det):
    data, meta, candidates, boxes, scores, classes = postprocess_case()
    iou = meta["predict_defaults"]["iou"]
    kept = check_nms(boxes, scores, iou, None if agnostic else classes, max_det)
    np.testing.assert_array_equal(candidates[kept], data[f"{det}_index"].astype(np.int64))
    rows = np.concatenate([boxes[kept], scores[kept, None], classes[kept, None]], axis=1)
    np.testing.assert_array_equal(rows, data[det])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(boxes=np.zeros((4,), np.float32)), "shape"),
        (dict(boxes=np.zeros((4, 3), np.float32)), "shape"),
        (dict(boxes=np.zeros((4, 4), np.int32)), "floating"),
        (dict(boxes=[[0, 0, 1, 1]] * 4), "mx.array"),
        (dict(scores=np.zeros((5,), np.float32)), "scores"),
        (dict(scores=np.zeros((4,), np.int32)), "floating"),
        (dict(classes=np.zeros((4,), np.float32)), "integer"),
        (dict(classes=np.zeros((3,), np.int32)), "classes"),
        (dict(iou_threshold=float("nan")), "iou_threshold"),
        (dict(iou_threshold="0.5"), "iou_threshold"),
        (dict(max_det=0), "max_det"),
        (dict(max_det=2.0), "max_det"),
        (dict(boxes=np.zeros((30001, 4), np.float32), scores=np.zeros((30001,), np.float32)), "30000"),
    ],
)
def test_nms_bad_input(kwargs, message):
    args = dict(boxes=np.zeros((4, 4), np.float32), scores=np.zeros((4,), np.float32), iou_threshold=0.5)
    args.update(kwargs)
    with pytest.raises(ZooError, match=message):
        nms(**args)


def test_bad_kernel_switch_value(monkeypatch):
    monkeypatch.setenv(core.ENV_VAR, "metal")
    with pytest.raises(ZooError, match=core.ENV_VAR):
        resize(mx.zeros((1, 2, 2, 1)), (3, 3))


# ---------------------------------------------------------------- resize

SIZES = [
    ((1, 1), "to 1x1"),
    ((13, 17), "same size"),
    ((40, 61), "up, non-integer"),
    ((5, 7), "down, non-integer"),
    ((26, 34), "up x2"),
    ((13, 3), "down in width only"),
    ((1, 29), "one row"),
]
MODES = [("bilinear", False), ("bilinear", True), ("nearest", False)]


@pytest.mark.parametrize("mode, align_corners", MODES)
@pytest.mark.parametrize("size", [s for s, _ in SIZES], ids=[name for _, name in SIZES])
def test_resize_float32(variant, size, mode, align_corners):
    x = np.random.default_rng(5).standard_normal((2, 13, 17, 3)).astype(np.float32)
    out = resize(mx.array(x), size, mode, align_corners)
    assert out.shape == (2, *size, 3) and out.dtype == mx.float32
    np.testing.assert_allclose(np.array(out), ref.resize(x, size, mode, align_corners), rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode, align_corners", MODES)
def test_resize_same_size_is_identity(variant, mode, align_corners):
    x = np.random.default_rng(6).standard_normal((1, 9, 11, 2)).astype(np.float32)
    np.testing.assert_array_equal(np.array(resize(mx.array(x), (9, 11), mode, align_corners)), x)


def test_resize_one_pixel_input(variant):
    x = np.full((1, 1, 1, 4), 2.5, np.float32)
    for mode, align_corners in MODES:
        out = resize(mx.array(x), (3, 5), mode, align_corners)
        np.testing.assert_array_equal(np.array(out), np.full((1, 3, 5, 4), 2.5))


def test_resize_rounds_the_source_coordinate_once_like_pytorch(variant):
    # 3 -> 19 columns: column 9 samples 3/19 * 9.5 - 0.5, which is 1.0 if the product is
    # rounded before the subtraction and 0.99999994 if the expression is rounded once (a
    # fused multiply-add, as in PyTorch's compiled kernels). torch 2.11 on the GPU machine,
    # CPU and CUDA alike, gives 0.0625 = 2**20 * (1 - 0.99999994) there, not 0.
    x = np.array([2.0**20, 0, 0], np.float32).reshape(1, 1, 3, 1)
    assert ref.resize(x, (1, 19))[0, 0, 9, 0] == 0.0625
    assert resize(mx.array(x), (1, 19))[0, 0, 9, 0].item() == 0.0625


@pytest.mark.parametrize("mode, align_corners", MODES)
@pytest.mark.parametrize("size", [(61, 40), (5, 7), (130, 3), (1, 29)], ids=["up", "down", "mixed", "one row"])
def test_resize_windows_are_the_whole_resize_cut_to_them(variant, size, mode, align_corners):
    """band= and columns= give each pixel bit for bit as the whole resize does (SAM's masks are made in
    windows of the full-size resize, and their polygons must not move)."""
    x = mx.array(np.random.default_rng(9).standard_normal((2, 13, 17, 3)).astype(np.float32))
    whole = np.array(resize(x, size, mode, align_corners))
    for band, columns in [((0, size[0]), (0, size[1])), ((size[0] // 3, size[0]), (1, size[1] - 1)),
                          ((size[0] - 1, size[0]), (size[1] // 2, size[1] // 2 + 1)), (None, (2, size[1]))]:
        part = np.array(resize(x, size, mode, align_corners, band=band, columns=columns))
        rows = slice(*band) if band else slice(None)
        np.testing.assert_array_equal(part.view(np.uint32), whole[:, rows, slice(*columns)].view(np.uint32))


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_resize_cpu_form_is_mlx_ops_bit_for_bit(dtype, monkeypatch):
    """The CPU's numpy form of the bilinear resize (chunks of images over threads) gives MLX's own ops'
    bits: enlarging and shrinking, windows, more images than a chunk, several channels."""
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.cpu))  # zoo.kernels.cpu.on_cpu: the form runs
    rng = np.random.default_rng(11)
    cases = [((9, 13, 17, 1), (61, 40), None, None), ((9, 40, 33, 2), (7, 30), (1, 6), (3, 29)),
             ((1, 16, 16, 3), (64, 64), (10, 50), None), ((2, 5, 5, 1), (5, 5), None, None)]
    for shape, size, band, columns in cases:
        x = mx.array(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
        monkeypatch.delenv(core.ENV_VAR, raising=False)
        got = resize(x, size, band=band, columns=columns)
        monkeypatch.setenv(core.ENV_VAR, "fallback")
        want = resize(x, size, band=band, columns=columns)
        assert got.dtype == dtype and got.shape == want.shape
        assert np.array_equal(np.array(got.astype(mx.float32)).view(np.uint32),
                              np.array(want.astype(mx.float32)).view(np.uint32)), (shape, size)


@pytest.mark.parametrize("mode, align_corners", MODES)
def test_resize_float16(variant, mode, align_corners):
    x = np.random.default_rng(7).standard_normal((1, 15, 9, 2)).astype(np.float16)
    out = resize(mx.array(x), (32, 7), mode, align_corners)
    assert out.dtype == mx.float16
    expected = ref.resize(x, (32, 7), mode, align_corners)
    np.testing.assert_allclose(np.array(out).astype(np.float32), expected.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_resize_bfloat16_rounds_the_float32_result(variant):
    x = mx.random.normal((1, 15, 9, 2), key=mx.random.key(8)).astype(mx.bfloat16)
    out = resize(x, (32, 7))
    assert out.dtype == mx.bfloat16
    expected = ref.resize(np.array(x.astype(mx.float32)), (32, 7))
    rounded = mx.array(expected).astype(mx.bfloat16).astype(mx.float32)
    np.testing.assert_array_equal(np.array(out.astype(mx.float32)), np.array(rounded))


@pytest.mark.parametrize(
    "x, kwargs, message",
    [
        (np.zeros((4, 4, 3), np.float32), {}, "NHWC"),
        (np.zeros((1, 4, 4, 3), np.int32), {}, "float32"),
        (np.zeros((0, 4, 4, 3), np.float32), {}, "empty"),
        (np.zeros((1, 4, 4, 0), np.float32), {}, "empty"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(size=(0, 5)), "size"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(size=(-2, 5)), "size"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(size=(5,)), "size"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(size=5), "size"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(size=(2.5, 3)), "size"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(mode="bicubic"), "mode"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(mode="nearest", align_corners=True), "align_corners"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(align_corners=1), "align_corners"),
        (np.zeros((1, 4, 4, 3), np.float32), dict(size=(50000, 50000)), "32 bits"),
    ],
)
def test_resize_bad_input(x, kwargs, message):
    args = dict(size=(5, 5))
    args.update(kwargs)
    with pytest.raises(ZooError, match=message):
        resize(mx.array(x), **args)


def test_float64_is_refused():
    # MLX has no float64 on the GPU (so the array is made on the CPU stream).
    x = mx.zeros((1, 4, 4, 3), dtype=mx.float64, stream=mx.cpu)
    with pytest.raises(ZooError, match="float32"):
        resize(x, (5, 5))
    with pytest.raises(ZooError, match="float32"):
        sppf_maxpool(x)


# ---------------------------------------------------------------- SPPF max-pool


@pytest.mark.parametrize("shape, k", [((1, 20, 20, 8), 5), ((2, 7, 9, 3), 3), ((1, 2, 3, 4), 5), ((1, 6, 5, 2), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_sppf_maxpool(variant, shape, k, dtype):
    x = np.random.default_rng(9).standard_normal(shape).astype(dtype)
    outs = sppf_maxpool(mx.array(x), k)
    for out, expected in zip(outs, ref.sppf_maxpool(x, k), strict=True):
        assert out.dtype == mx.array(x).dtype
        np.testing.assert_array_equal(np.array(out), expected)


def test_sppf_maxpool_propagates_nan(variant):
    x = np.zeros((1, 9, 9, 1), np.float32)
    x[0, 4, 4, 0] = np.nan
    x[0, 0, 0, 0] = 5.0
    for out, expected in zip(sppf_maxpool(mx.array(x)), ref.sppf_maxpool(x), strict=True):
        np.testing.assert_array_equal(np.array(out), expected)
    assert np.isnan(ref.sppf_maxpool(x)[2]).all()


@pytest.mark.parametrize(
    "x, k, message",
    [
        (np.zeros((4, 4, 3), np.float32), 5, "NHWC"),
        (np.zeros((1, 4, 4, 3), np.int32), 5, "float32"),
        (np.zeros((1, 0, 4, 3), np.float32), 5, "empty"),
        (np.zeros((1, 4, 4, 3), np.float32), 4, "odd"),
        (np.zeros((1, 4, 4, 3), np.float32), 0, "odd"),
        (np.zeros((1, 4, 4, 3), np.float32), 5.0, "odd"),
    ],
)
def test_sppf_maxpool_bad_input(x, k, message):
    with pytest.raises(ZooError, match=message):
        sppf_maxpool(mx.array(x), k)


# ---------------------------------------------------------------- box decode


def decode_maps(rng, n=2, nc=5, sizes=((4, 6), (2, 3), (1, 2)), dtype=np.float32):
    boxes = [(rng.standard_normal((n, h, w, 64)) * 3).astype(dtype) for h, w in sizes]
    classes = [(rng.standard_normal((n, h, w, nc)) * 4).astype(dtype) for h, w in sizes]
    return boxes, classes, np.arange(16, dtype=np.float32)


@pytest.mark.parametrize("dtype, tolerance", [(np.float32, 2e-6), (np.float16, 2e-3)])
def test_box_decode(variant, dtype, tolerance):
    boxes, classes, bins = decode_maps(np.random.default_rng(3), dtype=dtype)
    bins = bins[::-1].copy()  # a file's own bin values are used, not arange assumed
    y = box_decode.decode([mx.array(b) for b in boxes], [mx.array(c) for c in classes], mx.array(bins), (8, 16, 32))
    expected = ref.box_decode(boxes, classes, bins, (8, 16, 32))
    assert y.dtype == mx.array(boxes[0]).dtype and y.shape == expected.shape
    assert decode_error(np.array(y.astype(mx.float32)), expected) <= tolerance


def decode_error(y: np.ndarray, expected: np.ndarray) -> float:
    """Largest difference, the boxes' relative to their largest coordinate (a centre is the
    difference of two such numbers), the scores' absolute."""
    scale = np.ones(expected.shape[-1])
    scale[:4] = max(1.0, float(np.abs(expected[..., :4]).max()))
    return float((np.abs(y - expected) / scale).max())


def dfl_logits(anchors: int, dtype):
    """Box logits (2, anchors, 4 x 16), one side's at 80 (exp overflows without the largest logit subtracted),
    and a file's own bin values (not arange assumed)."""
    rng = np.random.default_rng(6)
    box = (rng.standard_normal((2, anchors, 64)) * 3).astype(dtype)
    box[0, 0, :16] = 80.0
    return box, rng.uniform(0, 16, 16).astype(np.float32)


def dfl_within_bound(y: np.ndarray, box: np.ndarray, bins: np.ndarray) -> bool:
    """Distances (up to 16 bins) within the rounding of their dtype's sums of the float64 reference."""
    tolerance = 1e-6 if box.dtype == np.float32 else 2e-3
    return np.abs(y.astype(np.float64) - ref.dfl_distances(box, bins)).max() <= tolerance * 16


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dfl_distances(variant, dtype):
    box, bins = dfl_logits(37, dtype)
    y = box_decode.distances(mx.array(box), mx.array(bins))
    assert y.dtype == mx.array(box).dtype and y.shape == (2, 37, 4)
    assert dfl_within_bound(np.array(y.astype(mx.float32)), box, bins)


@pytest.mark.parametrize("box, bins, message", [
    (np.zeros((2, 5, 60), np.float32), np.arange(16), "4 x 16"),
    (np.zeros((2, 5, 64), np.int32), np.arange(16), "float"),
    (np.zeros((10, 64), np.float32), np.arange(16), r"\(N, A, 4 x 16\)"),
])
def test_dfl_distances_bad_input(box, bins, message):
    with pytest.raises(ZooError, match=message):
        box_decode.distances(mx.array(box), mx.array(bins.astype(np.float32)))


@pytest.mark.parametrize("change, message", [
    (lambda b, c, s: (b[:2], c, s), "3 levels"),
    (lambda b, c, s: ([b[0][..., :60], *b[1:]], c, s), "4 x 16"),
    (lambda b, c, s: (b, [c[0][:, :3], *c[1:]], s), "same cells"),
    (lambda b, c, s: (b, [c[0].astype(np.float16), *c[1:]], s), "one dtype"),
    (lambda b, c, s: (b, c, (8, 16, 0)), "positive integers"),
])
def test_box_decode_bad_input(change, message):
    boxes, classes, bins = decode_maps(np.random.default_rng(4))
    boxes, classes, strides = change(boxes, classes, (8, 16, 32))
    with pytest.raises(ZooError, match=message):
        box_decode.decode([mx.array(b) for b in boxes], [mx.array(c) for c in classes], mx.array(bins), strides)


# ---------------------------------------------------------------- depthwise convolution


@pytest.mark.parametrize("shape, kernel, stride, padding", [((2, 9, 7, 8), 3, 1, 1), ((1, 10, 11, 4), 3, 2, 1),
                                                            ((1, 5, 6, 3), (3, 5), (2, 1), (0, 2))])
@pytest.mark.parametrize("dtype, tolerance", [(np.float32, 1e-6), (np.float16, 2e-3)])
def test_depthwise_conv2d(variant, shape, kernel, stride, padding, dtype, tolerance):
    rng = np.random.default_rng(6)
    kh, kw = core.pair(kernel)
    x = rng.standard_normal(shape).astype(dtype)
    weight = rng.standard_normal((shape[3], kh, kw, 1)).astype(dtype)
    y = depthwise.conv2d(mx.array(x), mx.array(weight), stride, padding)
    expected = ref.depthwise_conv2d(x, weight, stride, padding)
    assert y.dtype == mx.array(x).dtype and y.shape == expected.shape
    np.testing.assert_allclose(np.array(y.astype(mx.float32)), expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("weight_shape, dtype, padding, message", [
    ((4, 3, 3, 2), np.float32, 1, "weight must be"), ((4, 3, 3, 1), np.float16, 1, "weight must be"),
    ((4, 9, 9, 1), np.float32, 0, "leaves no output")])
def test_depthwise_conv2d_bad_input(weight_shape, dtype, padding, message):
    with pytest.raises(ZooError, match=message):
        depthwise.conv2d(mx.zeros((1, 5, 5, 4)), mx.zeros(weight_shape, dtype=mx.array(np.zeros(1, dtype)).dtype),
                         1, padding)
