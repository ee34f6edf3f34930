"""Check every kernel's native variant against numpy and against its fallback; time both.

    python -m zoo.kernels.selftest              # on a GPU (Metal or CUDA); exits 2 without one
    python -m zoo.kernels.selftest --allow-cpu  # no GPU: the fallback against numpy only
    python -m zoo.kernels.selftest --torch      # also the numpy references against PyTorch
    python -m zoo.kernels.selftest --kernels winograd,few_outputs   # those kernels' cases only

Prints one row per case: PASS/FAIL for native = numpy, native = fallback and
fallback = numpy (and numpy = torch), the largest difference, and the median time
of the native and fallback variants (after warm-up, each call ended by
``mx.eval``) with their ratio; exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from zoo.devices import gpu_backend
from zoo.kernels import box_decode, core, depthwise, few_outputs, implicit_gemm, nms, resize, sppf_maxpool, winograd
from zoo.validate.reference import kernels as ref


@dataclass
class Case:
    kernel: str
    name: str
    run: Callable[[], object]  # the public zoo.kernels call
    reference: Callable[[], object]  # numpy
    tolerance: float  # 0: exact
    timed: bool = False  # a realistic size, worth timing
    torch: Callable[[], object] | None = None  # PyTorch's result, for --torch


def to_numpy(result) -> list[np.ndarray]:
    results = result if isinstance(result, (tuple, list)) else [result]
    return [np.array(r.astype(mx.float32)) if r.dtype == mx.bfloat16 else np.array(r) for r in results]


def difference(actual, expected, tolerance: float) -> tuple[bool, float]:
    """(within tolerance, largest relative-or-absolute difference); NaNs must match."""
    worst = 0.0
    ok = True
    for a, e in zip(actual, expected, strict=True):
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape or a.dtype != e.dtype:
            return False, float("inf")
        if tolerance == 0:
            ok &= np.array_equal(a, e, equal_nan=a.dtype.kind == "f")
            worst = max(worst, 0.0 if ok else float("inf"))
            continue
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        if not np.array_equal(np.isnan(a64), np.isnan(e64)):
            return False, float("inf")
        finite = ~np.isnan(a64)
        error = np.abs(a64 - e64)[finite] / np.maximum(1.0, np.abs(e64[finite]))
        worst = max(worst, float(error.max(initial=0.0)))
    return ok and worst <= tolerance, worst


@contextlib.contextmanager
def variant(name: str):
    previous = os.environ.get(core.ENV_VAR)
    os.environ[core.ENV_VAR] = "fallback" if name == "fallback" else "auto"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[core.ENV_VAR]
        else:
            os.environ[core.ENV_VAR] = previous


def median_ms(function, repeats: int) -> float:
    # Warm-up: compile, fill caches, and keep the GPU busy long enough (0.2 s) for its
    # clock to leave idle speed (seen at 345 of 1980 MHz on the H200 between runs).
    start = time.perf_counter()
    for calls in itertools.count(1):
        mx.eval(function())
        if calls >= 3 and time.perf_counter() - start > 0.2:
            break
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mx.eval(function())
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


# ---------------------------------------------------------------- cases


def detections(rng, n, extent=640.0, max_size=200.0, classes=80):
    centers = rng.uniform(0, extent, (n, 2))
    sizes = rng.uniform(4, max_size, (n, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1).astype(np.float32)
    scores = rng.uniform(0.25, 1, n).astype(np.float32)
    return boxes, scores, rng.integers(0, classes, n).astype(np.int32)


def torch_nms(boxes, scores, iou, classes, max_det):
    import torch
    import torchvision

    b = torch.from_numpy(boxes)
    if classes is not None:
        b = b + torch.from_numpy(classes).float()[:, None] * ref.MAX_WH  # ultralytics' class offset
    return [torchvision.ops.nms(b, torch.from_numpy(scores), iou)[:max_det].numpy().astype(np.int32)]


def nms_case(name, boxes, scores, iou, classes=None, max_det=300, timed=False, ties=False):
    # Upstream leaves equal scores in no defined order: no PyTorch comparison for ties.
    # Inputs become MLX arrays once, outside the timed call.
    args = (mx.array(boxes), mx.array(scores), iou, None if classes is None else mx.array(classes), max_det)
    return Case(
        "nms",
        name,
        lambda: nms(*args),
        lambda: [ref.nms(boxes, scores, iou, classes, max_det)],
        0,
        timed,
        None if ties else lambda: torch_nms(boxes, scores, iou, classes, max_det),
    )


def nms_cases(rng) -> list[Case]:
    b3k, s3k, c3k = detections(rng, 3000)
    b8k, s8k, c8k = detections(rng, 8400)
    dense_boxes, dense_scores, _ = detections(rng, 2000, extent=100.0, max_size=60.0)
    chain = np.array([[10 * k, 0, 10 * k + 100, 100] for k in range(500)], np.float32)
    ties = np.repeat(np.array([0.5, 0.9, 0.7], np.float32), 100)
    degenerate = np.array([[5, 5, 5, 50], [5, 5, 5, 50], [3, 3, 3, 3], [0, 0, 10, 10]], np.float32)
    return [
        nms_case("3000 boxes, 80 classes, iou 0.7", b3k, s3k, 0.7, c3k, timed=True),
        nms_case("3000 boxes, agnostic, iou 0.7", b3k, s3k, 0.7, timed=True),
        nms_case("8400 boxes, 80 classes, iou 0.7", b8k, s8k, 0.7, c8k, timed=True),
        nms_case("8400 boxes, 80 classes, max_det 8400", b8k, s8k, 0.45, c8k, max_det=8400, timed=True),
        nms_case("2000 boxes crowded in 100 px, one class", dense_boxes, dense_scores, 0.5, timed=True),
        nms_case("chain of 500, each suppresses the next", chain, np.linspace(1, 0.5, 500).astype(np.float32), 0.7),
        nms_case("300 boxes, 3 distinct scores (ties)", b3k[:300], ties, 0.5, ties=True),
        nms_case("identical boxes, max_det 1", np.tile(b3k[:1], (50, 1)), s3k[:50], 0.7, max_det=1),
        nms_case("degenerate (zero-area) boxes", degenerate, np.array([0.9, 0.8, 0.7, 0.6], np.float32), 0.1),
        nms_case("one box", b3k[:1], s3k[:1], 0.7),
        nms_case("zero boxes", np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), 0.7),
    ]


def torch_resize(x, size, mode, align_corners):
    import torch
    import torch.nn.functional as F

    nchw = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    kwargs = {} if mode == "nearest" else {"align_corners": align_corners}
    return [F.interpolate(nchw, size=size, mode=mode, **kwargs).numpy().transpose(0, 2, 3, 1)]


def resize_case(rng, shape, size, dtype=mx.float32, mode="bilinear", align_corners=False, timed=False, x32=None):
    x32 = rng.standard_normal(shape).astype(np.float32) if x32 is None else x32
    x = mx.array(x32).astype(dtype)
    # numpy has no bfloat16: interpolate its float32 values, then round like MLX does.
    x_np = np.array(x) if dtype != mx.bfloat16 else np.array(x.astype(mx.float32))

    def reference():
        out = ref.resize(x_np, size, mode, align_corners)
        return to_numpy(mx.array(out).astype(dtype)) if dtype == mx.bfloat16 else [out]

    tolerance = {mx.float32: 1e-6, mx.float16: 1e-3, mx.bfloat16: 1e-2}[dtype]
    name = f"{shape} -> {size} {mode}{' align_corners' if align_corners else ''} {str(dtype).split('.')[-1]}"
    return Case(
        "resize",
        name,
        lambda: resize(x, size, mode, align_corners),
        reference,
        tolerance,
        timed,
        (lambda: torch_resize(x_np, size, mode, align_corners)) if dtype == mx.float32 else None,
    )


def resize_cases(rng) -> list[Case]:
    cases = []
    for channels in (1, 4):
        cases.append(resize_case(rng, (1, 256, 256, channels), (1024, 1024), timed=True))
        cases.append(resize_case(rng, (1, 1024, 1024, channels), (480, 640), timed=True))
    cases += [
        resize_case(rng, (1, 256, 256, 3), (1024, 1024), mx.float16, timed=True),
        resize_case(rng, (1, 1024, 1024, 3), (480, 640), mx.float16, timed=True),
        resize_case(rng, (1, 480, 640, 3), (768, 1024), timed=True),
        resize_case(rng, (1, 1080, 1920, 3), (576, 1024), timed=True),
        resize_case(rng, (1, 256, 256, 4), (1024, 1024), mode="bilinear", align_corners=True, timed=True),
        resize_case(rng, (1, 256, 256, 4), (1024, 1024), mode="nearest", timed=True),
        resize_case(rng, (1, 64, 64, 4), (100, 37), mx.bfloat16),
        resize_case(rng, (2, 13, 17, 3), (40, 61)),
        resize_case(rng, (2, 13, 17, 3), (5, 7), align_corners=True),
        resize_case(rng, (2, 13, 17, 3), (40, 61), mode="nearest"),
        resize_case(rng, (2, 13, 17, 3), (1, 1)),
        resize_case(rng, (2, 13, 17, 3), (13, 17)),
        # 3 -> 19 columns: output column 9 samples source 1.0 if scale * 9.5 - 0.5 is rounded
        # twice, 0.99999994 if once (a fused multiply-add); 2**20 in column 0 shows which.
        resize_case(rng, (1, 1, 3, 1), (1, 19), x32=np.array([2.0**20, 0, 0], np.float32).reshape(1, 1, 3, 1)),
    ]
    return cases


def torch_sppf(x, k):
    import torch
    import torch.nn.functional as F

    y = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    outs = []
    for _ in range(3):
        y = F.max_pool2d(y, k, 1, k // 2)
        outs.append(y.numpy().transpose(0, 2, 3, 1))
    return outs


def sppf_case(rng, shape, dtype=np.float32, k=5, timed=False, with_nan=False):
    x = rng.standard_normal(shape).astype(dtype)
    if with_nan:
        x.flat[x.size // 2] = np.nan
    name = f"{shape} k={k} {np.dtype(dtype).name}{' with a NaN' if with_nan else ''}"
    x_mx = mx.array(x)
    return Case(
        "sppf",
        name,
        lambda: sppf_maxpool(x_mx, k),
        lambda: list(ref.sppf_maxpool(x, k)),
        0,
        timed,
        (lambda: torch_sppf(x, k)) if dtype == np.float32 else None,
    )


def sppf_cases(rng) -> list[Case]:
    return [
        sppf_case(rng, (1, 20, 20, 256), timed=True),
        sppf_case(rng, (1, 20, 20, 256), np.float16, timed=True),
        sppf_case(rng, (1, 40, 40, 512), timed=True),
        sppf_case(rng, (1, 40, 40, 512), np.float16, timed=True),
        sppf_case(rng, (1, 2, 3, 4)),
        sppf_case(rng, (1, 9, 9, 2), with_nan=True),
    ]


def box_decode_case(rng, n, nc, sizes, dtype=np.float32, timed=False):
    boxes = [(rng.standard_normal((n, h, w, 64)) * 3).astype(dtype) for h, w in sizes]
    classes = [(rng.standard_normal((n, h, w, nc)) * 4).astype(dtype) for h, w in sizes]
    bins = np.arange(16, dtype=np.float32)
    args = ([mx.array(b) for b in boxes], [mx.array(c) for c in classes], mx.array(bins), (8, 16, 32))
    # float32: a box centre of a few pixels is the difference of coordinates up to ~500 (ulp 3e-5)
    return Case("box_decode", f"N={n} classes={nc} levels {sizes} {np.dtype(dtype).name}",
                lambda: box_decode.decode(*args),
                lambda: [ref.box_decode(boxes, classes, bins, (8, 16, 32)).astype(dtype)],
                1e-4 if dtype == np.float32 else 1e-3, timed)  # float16: one ulp (2**-10) of the rounded result


def dfl_case(rng, n, anchors, timed=False):
    box = (rng.standard_normal((n, anchors, 64)) * 3).astype(np.float32)
    bins = np.arange(16, dtype=np.float32)
    args = (mx.array(box), mx.array(bins))
    # distances up to 15: float32 sums of 16 exponentials, divided
    return Case("box_decode", f"DFL distances N={n} anchors={anchors} float32", lambda: box_decode.distances(*args),
                lambda: [ref.dfl_distances(box, bins).astype(np.float32)], 1e-5, timed)


def box_decode_cases(rng) -> list[Case]:
    yolo_640 = ((80, 80), (40, 40), (20, 20))
    return [box_decode_case(rng, 2, 5, ((4, 6), (2, 3), (1, 2))),
            box_decode_case(rng, 2, 5, ((4, 6), (2, 3), (1, 2)), np.float16),
            box_decode_case(rng, 16, 80, yolo_640, timed=True),
            box_decode_case(rng, 16, 80, yolo_640, np.float16, timed=True),
            dfl_case(rng, 2, 37),
            dfl_case(rng, 16, 8400, timed=True)]


def depthwise_case(rng, shape, kernel=3, stride=1, dtype=np.float32, timed=False):
    x = rng.standard_normal(shape).astype(dtype)
    weight = (rng.standard_normal((shape[3], kernel, kernel, 1)) / kernel).astype(dtype)
    args = (mx.array(x), mx.array(weight), stride, kernel // 2)
    return Case("depthwise", f"{shape} {kernel}x{kernel} stride {stride} {np.dtype(dtype).name}",
                lambda: depthwise.conv2d(*args),
                lambda: [ref.depthwise_conv2d(x, weight, stride, kernel // 2).astype(dtype)],
                1e-5 if dtype == np.float32 else 2e-3, timed)


def depthwise_cases(rng) -> list[Case]:
    # TinyViT-5M at 1024: the first stage's MBConv (256 channels at 256 x 256), a later block's
    # local convolution, a stride-2 patch merging
    return [depthwise_case(rng, (1, 256, 256, 256), timed=True),
            depthwise_case(rng, (1, 256, 256, 256), dtype=np.float16, timed=True),
            depthwise_case(rng, (1, 64, 64, 160), timed=True),
            depthwise_case(rng, (1, 128, 128, 128), stride=2, timed=True),
            depthwise_case(rng, (2, 5, 7, 3), kernel=5, stride=2)]


def torch_conv3x3(x, weight, bias, padding):
    import torch
    import torch.nn.functional as F

    out = F.conv2d(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))),
                   torch.from_numpy(np.ascontiguousarray(weight.transpose(0, 3, 1, 2))), torch.from_numpy(bias),
                   padding=padding)
    return [out.numpy().transpose(0, 2, 3, 1)]


def winograd_case(rng, shape, out_channels, padding=1, timed=False, form=winograd.F2):
    x = rng.standard_normal(shape).astype(np.float32)
    # He-scaled weights: outputs of order 1, as in a network
    weight = (rng.standard_normal((out_channels, 3, 3, shape[-1])) / np.sqrt(9 * shape[-1])).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    x_mx, u, b = mx.array(x), winograd.transform_weight(mx.array(weight), form), mx.array(bias)

    return Case(
        "winograd",
        f"F{form.tile} {shape} -> {out_channels}, padding {padding}",
        lambda: winograd.conv3x3(x_mx, u, b, padding),
        lambda: [ref.conv2d_activated(x, weight, bias, padding).astype(np.float32)],
        # float32 sums of 9 * C products, in another order than the reference's; F4's larger transform
        # entries round them more coarsely (3-7e-5 on an H200): the validator's float32 bound
        1e-5 if form is winograd.F2 else 1e-4,
        timed,
        lambda: torch_conv3x3(x, weight, bias, padding),
    )


def winograd_cases(rng) -> list[Case]:
    return [case for form in (winograd.F2, winograd.F4) for case in (
        winograd_case(rng, (4, 80, 80, 64), 64, timed=True, form=form),
        winograd_case(rng, (4, 40, 40, 128), 128, timed=True, form=form),
        winograd_case(rng, (1, 20, 20, 256), 256, timed=True, form=form),
        winograd_case(rng, (32, 7, 7, 512), 512, timed=True, form=form),
        winograd_case(rng, (2, 7, 9, 5), 6, form=form),
        winograd_case(rng, (1, 8, 6, 3), 4, padding=0, form=form),
        winograd_case(rng, (1, 1, 1, 2), 3, form=form),
    )]


def implicit_gemm_case(rng, shape, out_channels, kernel=3, stride=1, padding=1, activation=None, timed=False):
    x = rng.standard_normal(shape).astype(np.float32)
    weight = (rng.standard_normal((out_channels, kernel, kernel, shape[-1])) / np.sqrt(kernel * kernel * shape[-1])
              ).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    x_mx, w_mx, b = mx.array(x), mx.array(weight), mx.array(bias)
    return Case(
        "implicit_gemm",
        f"{shape} -> {out_channels}, {kernel}x{kernel}, stride {stride}, padding {padding}, {activation}",
        lambda: implicit_gemm.conv2d(x_mx, w_mx, b, stride, padding, activation),
        lambda: [ref.conv2d_activated(x, weight, bias, padding, activation, stride).astype(np.float32)],
        # float32 sums of K = KH * KW * C products in one running sum per output, in another order
        # than the reference's: rounding grows as sqrt(K); 1e-5 at K = 576 (the Winograd cases' 64
        # channels). The 384-channel case (K = 3456) measured 1.1e-5 on an H200, 2026-11-27.
        1e-5 * max(1.0, (kernel * kernel * shape[-1] / 576) ** 0.5),
        timed,
    )


def implicit_gemm_cases(rng) -> list[Case]:
    return [
        implicit_gemm_case(rng, (16, 320, 320, 16), 32, stride=2, activation="silu", timed=True),  # YOLOv8n model.1
        implicit_gemm_case(rng, (16, 160, 160, 16), 16, activation="silu", timed=True),
        implicit_gemm_case(rng, (16, 80, 80, 64), 128, stride=2, timed=True),  # the wide tiles
        implicit_gemm_case(rng, (32, 56, 56, 256), 512, kernel=1, stride=2, padding=0, timed=True),  # ResNet-50
        implicit_gemm_case(rng, (1, 66, 66, 384), 128, padding=0, activation="relu", timed=True),  # the small tiles
        # batch 1, ResNet-50: grids of 8 and 49 tiles, their K steps split in 33 and 5 runs
        implicit_gemm_case(rng, (1, 7, 7, 512), 512, activation="relu", timed=True),
        implicit_gemm_case(rng, (1, 56, 56, 64), 64, activation="relu", timed=True),
        implicit_gemm_case(rng, (2, 7, 9, 12), 20, stride=2),  # rows, outputs, channels past their tiles
        implicit_gemm_case(rng, (1, 11, 10, 4), 8, kernel=7, padding=3),
        subpixel_case(rng, (1, 256, 256, 128), 64, timed=True),  # LaMa 512's last upsampling
        subpixel_case(rng, (2, 5, 7, 12), 20, activation=None),
    ]


def subpixel_case(rng, shape, out_channels, activation="relu", timed=False):
    x = rng.standard_normal(shape).astype(np.float32)
    weight = (rng.standard_normal((out_channels, 3, 3, shape[-1])) / np.sqrt(9 * shape[-1])).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    phases, b = implicit_gemm.subpixel_weights(mx.array(weight)), mx.array(bias)
    x_mx = mx.array(x)
    return Case(
        "implicit_gemm",
        f"{shape} -> {out_channels}, transposed 3x3, stride 2 (4 phases), {activation}",
        lambda: implicit_gemm.conv_transpose2d_subpixel(x_mx, phases, b, activation),
        lambda: [ref.conv_transpose2d_activated(x, weight, bias, 2, 1, 1, activation).astype(np.float32)],
        1e-5 * max(1.0, (4 * shape[-1] / 576) ** 0.5),  # K = 2 x 2 taps x C, as the convolution cases
        timed,
    )


def few_outputs_case(rng, shape, out_channels, kernel, padding, reflect, dtype=np.float32, timed=False):
    x = rng.standard_normal(shape).astype(dtype)
    weight = (rng.standard_normal((out_channels, kernel, kernel, shape[-1])) / np.sqrt(kernel * kernel * shape[-1])
              ).astype(dtype)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    x_mx, w_mx, b = mx.array(x), mx.array(weight), mx.array(bias)
    return Case(
        "few_outputs",
        f"{shape} -> {out_channels}, {kernel}x{kernel}, padding {padding} {'reflected' if reflect else 'zeros'}, "
        f"{np.dtype(dtype).name}",
        lambda: few_outputs.conv2d(x_mx, w_mx, b, padding, reflect),
        lambda: [ref.conv2d_padded(x, weight, bias, padding, reflect).astype(dtype)],
        # float32: one running sum of K = KH * KW * C products, as implicit_gemm's cases; float16:
        # one rounding of a float32 sum of size ~1-4
        1e-5 * max(1.0, (kernel * kernel * shape[-1] / 576) ** 0.5) if dtype == np.float32 else 4e-3,
        timed,
    )


def few_outputs_cases(rng) -> list[Case]:
    return [
        few_outputs_case(rng, (1, 512, 512, 64), 3, 7, 3, True, timed=True),  # LaMa 512's last convolution
        few_outputs_case(rng, (1, 512, 512, 64), 3, 7, 3, True, np.float16, timed=True),
        few_outputs_case(rng, (2, 9, 11, 5), 4, 3, 1, False),
        few_outputs_case(rng, (1, 8, 8, 4), 1, 7, 3, True),  # every tap of a border pixel reflected
    ]


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.kernels.selftest", description=__doc__.splitlines()[0])
    parser.add_argument("--allow-cpu", action="store_true", help="without a GPU, check the fallback against numpy")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per variant (median is shown)")
    parser.add_argument("--torch", action="store_true", help="also compare the numpy references with PyTorch")
    parser.add_argument("--kernels", help="comma list of kernels whose cases run (default: all)")
    args = parser.parse_args(argv)

    backend = gpu_backend() if mx.default_device().type == mx.gpu else None
    info = mx.device_info()
    print(f"zoo.kernels selftest  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    print(
        f"device: {info.get('device_name', '?')} ({info.get('architecture', '?')}), "
        f"MLX {mx.__version__}, default device {mx.default_device()}, Python {platform.python_version()}"
    )
    if backend is None:
        print("no GPU backend (Metal or CUDA) available to MLX here: the native kernels cannot run")
        if not args.allow_cpu:
            print("run on a GPU machine, or pass --allow-cpu to check the fallback against numpy only")
            return 2
        print("--allow-cpu: checking the fallback against numpy only")
    else:
        print(f"native variant: {backend} (mx.fast.{backend}_kernel); fallback: plain MLX ops, {core.ENV_VAR}=fallback")
    variants = ["native", "fallback"] if backend else ["fallback"]

    rng = np.random.default_rng(0)
    cases = (nms_cases(rng) + resize_cases(rng) + sppf_cases(rng) + winograd_cases(rng)
             + implicit_gemm_cases(rng) + few_outputs_cases(rng) + box_decode_cases(rng)
             + depthwise_cases(rng))
    if args.kernels:
        chosen = set(args.kernels.split(","))
        unknown = chosen - {case.kernel for case in cases}
        if unknown:
            parser.error(f"--kernels: unknown {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted({case.kernel for case in cases}))}")
        cases = [case for case in cases if case.kernel in chosen]
    header = ["kernel", "case", "native=numpy", "native=fallback", "fallback=numpy"]
    if args.torch:
        header += ["numpy=torch", "torch diff"]
    header += ["max diff", "native ms", "fallback ms", "native/fallback"]
    rows = []
    errors = []
    failed = 0
    for case in cases:
        expected = case.reference()
        results = {}
        for name in variants:
            try:
                with variant(name):
                    results[name] = to_numpy(case.run())
            except Exception as error:  # reported in the table and below it; the other cases still run
                errors.append(f"{case.kernel} / {case.name} / {name}: {type(error).__name__}: {error}")
        checks = []
        worst = 0.0
        for pair in (("native", expected), ("native", "fallback"), ("fallback", expected)):
            left, right = pair
            if left not in variants or (isinstance(right, str) and right not in variants):
                checks.append("-")
                continue
            if left not in results or (isinstance(right, str) and right not in results):
                checks.append("ERROR")
                continue
            ok, diff = difference(results[left], results[right] if isinstance(right, str) else right, case.tolerance)
            checks.append("PASS" if ok else "FAIL")
            worst = max(worst, diff)
        if args.torch:
            if case.torch is None:
                checks += ["-", "-"]
            else:
                # PyTorch's own float32 arithmetic may round differently from the reference's.
                ok, diff = difference(case.torch(), expected, max(case.tolerance, 1e-6))
                checks += ["PASS" if ok else "FAIL", f"{diff:.1e}"]
        failed += checks.count("FAIL") + checks.count("ERROR")
        timings = ["-", "-", "-"]
        if case.timed and len(results) == len(variants):
            ms = {}
            for name in variants:
                with variant(name):
                    ms[name] = median_ms(case.run, args.repeats)
            timings = [f"{ms['native']:.3f}" if "native" in ms else "-", f"{ms['fallback']:.3f}", "-"]
            if "native" in ms:
                timings[2] = f"{ms['native'] / ms['fallback']:.2f}"
        rows.append([case.kernel, case.name, *checks, f"{worst:.1e}", *timings])

    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
    print(
        f"{len(rows)} cases, {failed} failed checks; "
        f"times: median of {args.repeats} runs after >= 0.2 s of warm-up runs"
    )
    for error in errors:
        print("error:", error)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
