"""numpy references for zoo.kernels (numpy only: no mlx, no models).

Each function restates the upstream algorithm directly, not zoo's implementation:

- `nms`: torchvision's CPU ``nms`` kernel (the one ultralytics' ``non_max_suppression``
  calls), with ultralytics' class offset for class-aware NMS;
- `resize`: PyTorch ``F.interpolate`` (``bilinear`` with ``align_corners`` False / True,
  legacy ``nearest``) on NHWC arrays;
- `max_pool2d`, `sppf_maxpool`: PyTorch ``max_pool2d`` (padding with -inf) and SPPF's
  three chained pools;
- `conv2d_activated`: PyTorch ``conv2d`` then ReLU or SiLU on NHWC arrays (the Winograd
  convolution's reference: ``ops.conv2d``, a direct convolution);
- `depthwise_conv2d`: PyTorch ``conv2d`` with ``groups`` = channels on NHWC arrays;
- `box_decode`: ultralytics' ``Detect`` in inference (DFL, ``make_anchors``, ``dist2bbox``,
  sigmoid) on the levels' NHWC box and class maps.
"""

from __future__ import annotations

import numpy as np

from . import ops

# ultralytics' non_max_suppression: boxes + class * max_wh keeps classes apart.
MAX_WH = 7680


def nms(boxes, scores, iou_threshold: float, classes=None, max_det: int = 300) -> np.ndarray:
    """Kept input indices (int32), in descending score order; equal scores: lower index first."""
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores)
    if classes is not None:
        boxes = boxes + np.asarray(classes).astype(np.float32)[:, None] * np.float32(MAX_WH)
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    areas = (x2 - x1) * (y2 - y1)
    order = np.argsort(-scores, kind="stable")
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for position, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        if len(keep) == max_det:
            break
        # torchvision's inner loop over the boxes after i, vectorised: same float32 operations.
        later = order[position + 1 :]
        w = np.maximum(np.float32(0), np.minimum(x2[i], x2[later]) - np.maximum(x1[i], x1[later]))
        h = np.maximum(np.float32(0), np.minimum(y2[i], y2[later]) - np.maximum(y1[i], y1[later]))
        inter = w * h
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = inter / (areas[i] + areas[later] - inter)
        # torchvision: `ovr > iou_threshold` with the threshold a double.
        suppressed[later[iou.astype(np.float64) > float(iou_threshold)]] = True
    return np.asarray(keep, dtype=np.int32)


def _bilinear_source(in_size: int, out_size: int, align_corners: bool):
    """PyTorch area_pixel_compute_source_index + guard_index_and_lambda: float32 scale and coordinate."""
    dst = np.arange(out_size).astype(np.float32)
    if align_corners:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
        src = scale * dst
    else:
        scale = np.float32(in_size) / np.float32(out_size)
        # PyTorch's compiled kernels fuse `scale * (dst + 0.5) - 0.5` into one multiply-add
        # (one rounding); float64 holds the product exactly, so rounding it once matches.
        src = (np.float64(scale) * (dst.astype(np.float64) + 0.5) - 0.5).astype(np.float32)
        src = np.where(src < 0, np.float32(0), src)
    index0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lambda1 = np.minimum(np.maximum(src - index0.astype(np.float32), np.float32(0)), np.float32(1))
    index1 = np.where(index0 < in_size - 1, index0 + 1, index0)
    return index0, index1, np.float32(1) - lambda1, lambda1


def resize(x, size, mode: str = "bilinear", align_corners: bool = False) -> np.ndarray:
    """NHWC (N, H, W, C) -> (N, size[0], size[1], C), same dtype; float16 is computed in float32."""
    x = np.asarray(x)
    out_h, out_w = size
    _, in_h, in_w, _ = x.shape
    if mode == "nearest":
        # PyTorch nearest_idx: floor(dst * (float)in / out), clamped.
        rows = np.minimum(
            np.floor(np.arange(out_h).astype(np.float32) * (np.float32(in_h) / np.float32(out_h))).astype(np.int64),
            in_h - 1,
        )
        cols = np.minimum(
            np.floor(np.arange(out_w).astype(np.float32) * (np.float32(in_w) / np.float32(out_w))).astype(np.int64),
            in_w - 1,
        )
        return x[:, rows][:, :, cols]
    if mode != "bilinear":
        raise ValueError(f"unknown mode {mode!r}; expected bilinear or nearest")
    h0, h1, h0_weight, h1_weight = _bilinear_source(in_h, out_h, align_corners)
    w0, w1, w0_weight, w1_weight = _bilinear_source(in_w, out_w, align_corners)
    xf = x.astype(np.float32)
    wl = w0_weight[None, None, :, None]
    wr = w1_weight[None, None, :, None]
    upper = wl * xf[:, h0][:, :, w0] + wr * xf[:, h0][:, :, w1]
    lower = wl * xf[:, h1][:, :, w0] + wr * xf[:, h1][:, :, w1]
    out = h0_weight[None, :, None, None] * upper + h1_weight[None, :, None, None] * lower
    return out.astype(x.dtype)


def max_pool2d(x, k: int, stride: int = 1, padding: int = 0) -> np.ndarray:
    """PyTorch max_pool2d on NHWC: padding with -inf, NaN wins."""
    x = np.asarray(x)
    padded = np.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    return windows.max(axis=(-2, -1))


def sppf_maxpool(x, k: int = 5):
    """SPPF's three chained k x k max-pools (stride 1, padding k // 2)."""
    y1 = max_pool2d(x, k, 1, k // 2)
    y2 = max_pool2d(y1, k, 1, k // 2)
    return y1, y2, max_pool2d(y2, k, 1, k // 2)


ACTIVATIONS = {None: lambda y: y, "relu": ops.relu, "silu": ops.silu}  # the kernels' activation codes 0-2


def conv2d_activated(x, weight, bias=None, padding=0, activation: str | None = None, stride=1) -> np.ndarray:
    """activation(F.conv2d(x, weight, bias, stride, padding)) in float64 for an NHWC x and an
    (O, KH, KW, I) weight (MLX's layouts); activation None, "relu" or "silu"."""
    nchw = ops.conv2d(np.asarray(x, np.float64).transpose(0, 3, 1, 2),
                      np.asarray(weight, np.float64).transpose(0, 3, 1, 2),
                      None if bias is None else np.asarray(bias, np.float64), stride=stride, padding=padding)
    return ACTIVATIONS[activation](nchw).transpose(0, 2, 3, 1)


def conv_transpose2d_activated(x, weight, bias=None, stride=1, padding=0, output_padding=0,
                               activation: str | None = None) -> np.ndarray:
    """activation(F.conv_transpose2d(x, weight, bias, stride, padding, output_padding)) in float64
    for an NHWC x and an (O, KH, KW, I) weight (MLX's layouts; torch's is (I, O, KH, KW))."""
    nchw = ops.conv_transpose2d(np.asarray(x, np.float64).transpose(0, 3, 1, 2),
                                np.asarray(weight, np.float64).transpose(3, 0, 1, 2),
                                None if bias is None else np.asarray(bias, np.float64), stride, padding,
                                output_padding)
    return ACTIVATIONS[activation](nchw).transpose(0, 2, 3, 1)


def conv2d_padded(x, weight, bias=None, padding=0, reflect: bool = False) -> np.ndarray:
    """F.conv2d(F.pad(x), weight, bias) in float64 for an NHWC x and an (O, KH, KW, I) weight,
    stride 1; the pad ``padding`` zeros or reflected pixels (torch's ``padding_mode="reflect"``)."""
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    padded = np.pad(np.asarray(x, np.float64), ((0, 0), (ph, ph), (pw, pw), (0, 0)),
                    mode="reflect" if reflect else "constant")
    return conv2d_activated(padded, weight, bias)


def depthwise_conv2d(x, weight, stride=1, padding=0) -> np.ndarray:
    """F.conv2d(x, weight, stride=stride, padding=padding, groups=C) in float64 for an NHWC x and a
    (C, KH, KW, 1) weight (MLX's layouts)."""
    c = x.shape[3]
    nchw = ops.conv2d(np.asarray(x, np.float64).transpose(0, 3, 1, 2),
                      np.asarray(weight, np.float64).transpose(0, 3, 1, 2), stride=stride, padding=padding, groups=c)
    return nchw.transpose(0, 2, 3, 1)


def dfl_distances(box, bins) -> np.ndarray:
    """ultralytics' DFL integral in float64: (N, A, 4 * R) box logits, each side's R bins together ->
    (N, A, 4) distances, the softmax over each side's bins weighted by ``bins``."""
    bins = np.asarray(bins, np.float64).ravel()
    n, a, _ = box.shape
    return ops.softmax(np.asarray(box, np.float64).reshape(n, a, 4, bins.size), axis=-1) @ bins


def box_decode(boxes, classes, bins, strides) -> np.ndarray:
    """ultralytics' Detect decode in float64: the levels' NHWC box maps (N, H, W, 4 * R) and class
    maps (N, H, W, nc) -> (N, A, 4 + nc), boxes as centre x, centre y, width, height in pixels."""
    bins = np.asarray(bins, np.float64).ravel()
    n = boxes[0].shape[0]
    dist = dfl_distances(np.concatenate([np.asarray(b).reshape(n, -1, 4 * bins.size) for b in boxes], axis=1),
                         bins)  # (N, A, 4): left, top, right, bottom
    points, steps = [], []
    for b, stride in zip(boxes, strides):
        h, w = b.shape[1:3]
        gy, gx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        points.append(np.stack([gx, gy], axis=-1).reshape(-1, 2))
        steps.append(np.full((h * w, 1), float(stride)))
    anchors = np.concatenate(points)
    x1y1, x2y2 = anchors - dist[..., :2], anchors + dist[..., 2:]
    xywh = np.concatenate([(x1y1 + x2y2) / 2, x2y2 - x1y1], axis=-1) * np.concatenate(steps)
    scores = ops.sigmoid(np.concatenate([np.asarray(c, np.float64).reshape(n, -1, c.shape[3]) for c in classes], axis=1))
    return np.concatenate([xywh, scores], axis=-1)
