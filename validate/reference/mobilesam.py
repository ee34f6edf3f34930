"""MobileSAM (``build_sam_vit_t`` + ``SamPredictor``) in numpy over the official checkpoint naming.

NCHW like upstream, float64, weights in their PyTorch layout. Module names are
upstream's (``image_encoder.layers.1.blocks.0.attn``, ``mask_decoder.transformer``,
...). The whole predictor is here, written from the upstream sources and
Pillow's resampler, not from the MLX code:

- ``resize_uint8_bilinear``: Pillow's ``Image.resize(..., BILINEAR)`` on a uint8
  image, bit for bit (what upstream's ResizeLongestSide runs through torchvision);
- TinyViT with upstream's quirks: the window padding goes in before the
  attention's LayerNorm (padded tokens take part in the softmax), qkv laid out
  per head, the bias table gathered from the loaded ``attention_biases``;
- the prompt encoder's coordinate arithmetic in float32 up to the
  normalisation, as upstream's float32 tensors do it; the rest in float64;
- mask post-processing: bilinear to 1024, crop, bilinear to the original size.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from . import kernels, ops
from .trace import Trace

# upstream's pixel_mean / pixel_std are float32 buffers: their float32 values, widened
PIXEL_MEAN = np.array([123.675, 116.28, 103.53], np.float32).astype(np.float64)
PIXEL_STD = np.array([58.395, 57.12, 57.375], np.float32).astype(np.float64)
EMBED_DIMS = (64, 128, 160, 320)
DEPTHS = (2, 2, 6, 2)
NUM_HEADS = (2, 4, 5, 10)
WINDOW_SIZES = (7, 7, 14, 7)


# ---------------------------------------------------------------- Pillow's bilinear resize

PIL_PRECISION_BITS = 22  # Pillow's 8-bit resampler: 32 - 8 - 2 fractional bits


def _pil_coefficients(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's precompute_coeffs + normalize_coeffs_8bpc for the triangle filter.

    -> (first source index (out,), integer weights (out, k)); taps past the bounds are 0.
    """
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale  # the bilinear filter's support is 1, widened when shrinking
    ksize = math.ceil(support) * 2 + 1
    first = np.zeros(out_size, dtype=np.intp)
    weights = np.zeros((out_size, ksize), dtype=np.int64)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)  # C casts truncate toward zero, as int() does
        xmax = min(int(center + support + 0.5), in_size) - xmin
        w = [max(0.0, 1.0 - abs((x + xmin - center + 0.5) * (1.0 / filterscale))) for x in range(xmax)]
        total = 0.0
        for v in w:
            total += v
        for x, v in enumerate(w):
            v = v / total if total != 0.0 else v
            weights[xx, x] = int(0.5 + v * (1 << PIL_PRECISION_BITS))  # weights are >= 0: round half up
        first[xx] = xmin
    return first, weights


def _pil_pass(img: np.ndarray, out_size: int, axis: int) -> np.ndarray:
    """One separable pass along ``axis`` of a uint8 (H, W, C) image, rounded and clipped to uint8."""
    first, weights = _pil_coefficients(img.shape[axis], out_size)
    taps = np.minimum(first[:, None] + np.arange(weights.shape[1]), img.shape[axis] - 1)
    src = np.take(img.astype(np.int64), taps, axis=axis)  # (..., out, k, ...)
    shape = [1] * src.ndim
    shape[axis], shape[axis + 1] = weights.shape
    acc = (src * weights.reshape(shape)).sum(axis=axis + 1) + (1 << (PIL_PRECISION_BITS - 1))
    return np.clip(acc >> PIL_PRECISION_BITS, 0, 255).astype(np.uint8)


def resize_uint8_bilinear(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Pillow's ``Image.resize((w, h), BILINEAR)`` of a uint8 (H, W, C) image: two separable
    passes, each rounded to uint8; a pass whose size does not change is skipped.

    Pillow 13 runs the horizontal pass first unless the height shrinks by more than twice as
    many pixels as the width does (then the vertical pass first). The order changes the
    result: the first pass is rounded to uint8.
    """
    in_h, in_w = img.shape[:2]
    out_h, out_w = size
    vertical_first = out_h < in_h and in_h - out_h > 2 * (in_w - out_w)
    for axis in ((0, 1) if vertical_first else (1, 0)):
        if img.shape[axis] != size[axis]:
            img = _pil_pass(img, size[axis], axis=axis)
    return img


def preprocess_shape(h: int, w: int, long_side: int) -> tuple[int, int]:
    scale = long_side * 1.0 / max(h, w)
    return int(h * scale + 0.5), int(w * scale + 0.5)


def preprocess(image: np.ndarray, img_size: int = 1024) -> tuple[np.ndarray, tuple[int, int]]:
    """uint8 RGB (H, W, 3) -> ((1, 3, S, S) normalised, zero-padded image; resized (h, w))."""
    resized = resize_uint8_bilinear(image, preprocess_shape(image.shape[0], image.shape[1], img_size))
    x = (resized.transpose(2, 0, 1).astype(np.float64) - PIXEL_MEAN[:, None, None]) / PIXEL_STD[:, None, None]
    h, w = resized.shape[:2]
    return np.pad(x, ((0, 0), (0, img_size - h), (0, img_size - w)))[None], (h, w)


def apply_coords(coords: np.ndarray, original_size: tuple[int, int], long_side: int) -> np.ndarray:
    """Original-image (x, y) -> resized-image pixels: float64 arithmetic, float32 result."""
    new_h, new_w = preprocess_shape(original_size[0], original_size[1], long_side)
    out = np.array(coords, dtype=np.float64)
    out[..., 0] = out[..., 0] * (new_w / original_size[1])
    out[..., 1] = out[..., 1] * (new_h / original_size[0])
    return out.astype(np.float32)


# ---------------------------------------------------------------- TinyViT image encoder


def _conv_bn(t: Trace, sd, name, x, stride=1, padding=0, groups=1):
    def conv_bn(v):
        v = ops.conv2d(v, sd[f"{name}.c.weight"], stride=stride, padding=padding, groups=groups)
        return ops.batch_norm(v, *(sd[f"{name}.bn.{k}"] for k in ("weight", "bias", "running_mean", "running_var")))

    return t(name, conv_bn, x)


def _linear(t: Trace, sd, name, x):
    def linear(v):
        # one (tokens, in) x (in, out) product: a batched matmul over windows would be many small ones
        out = ops.linear(v.reshape(-1, v.shape[-1]), sd[f"{name}.weight"], sd[f"{name}.bias"])
        return out.reshape(*v.shape[:-1], out.shape[-1])

    return t(name, linear, x)


def _layer_norm(t: Trace, sd, name, x, eps=1e-5):
    return t(name, lambda v: ops.layer_norm(v, sd[f"{name}.weight"], sd[f"{name}.bias"], eps), x)


def _mbconv(t: Trace, sd, name, x):
    out = _conv_bn(t, sd, f"{name}.conv1", x)
    out = t(f"{name}.act1", ops.gelu, out)
    out = _conv_bn(t, sd, f"{name}.conv2", out, padding=1, groups=out.shape[1])
    out = t(f"{name}.act2", ops.gelu, out)
    out = _conv_bn(t, sd, f"{name}.conv3", out)
    return t(f"{name}.act3", ops.gelu, out + x)


def _patch_merging(t: Trace, sd, name, x, resolution, out_dim):
    def merge(v):
        if v.ndim == 3:  # tokens (B, H*W, C) -> NCHW
            v = v.reshape(v.shape[0], *resolution, v.shape[2]).transpose(0, 3, 1, 2)
        v = t(f"{name}.act", ops.gelu, _conv_bn(t, sd, f"{name}.conv1", v))
        stride = 1 if out_dim in (320, 448, 576) else 2  # upstream's rule
        v = t(f"{name}.act", ops.gelu, _conv_bn(t, sd, f"{name}.conv2", v, stride, 1, groups=out_dim))
        v = _conv_bn(t, sd, f"{name}.conv3", v)
        return v.reshape(v.shape[0], v.shape[1], -1).transpose(0, 2, 1)

    return t(name, merge, x)


def offset_index(window: int) -> np.ndarray:
    """(N, N) column of each (query, key) pair in the bias table; offsets numbered as first seen."""
    points = list(itertools.product(range(window), range(window)))
    seen: dict[tuple[int, int], int] = {}
    index = [seen.setdefault((abs(a[0] - b[0]), abs(a[1] - b[1])), len(seen)) for a in points for b in points]
    return np.array(index).reshape(len(points), len(points))


def _batched_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(..., n, k) @ (..., k, m) for many small matrices, without BLAS: OpenBLAS threads
    thrash on thousands of tiny products when the machine is busy (100x slower)."""
    return np.einsum("...nk,...km->...nm", a, b)


def _window_attention(t: Trace, sd, name, x, num_heads, window):
    def attention(v):
        b, n, c = v.shape
        key_dim = c // num_heads
        v = _layer_norm(t, sd, f"{name}.norm", v)
        qkv = _linear(t, sd, f"{name}.qkv", v).reshape(b, n, num_heads, 3 * key_dim).transpose(0, 2, 1, 3)
        q, k, val = (qkv[..., i * key_dim : (i + 1) * key_dim] for i in range(3))
        bias = sd[f"{name}.attention_biases"][:, offset_index(window)]  # from the loaded table
        attn = ops.softmax(_batched_matmul(q, k.transpose(0, 1, 3, 2)) * key_dim**-0.5 + bias)
        out = _batched_matmul(attn, val).transpose(0, 2, 1, 3).reshape(b, n, c)
        return _linear(t, sd, f"{name}.proj", out)

    return t(name, attention, x)


def _mlp(t: Trace, sd, name, x):
    def mlp(v):
        v = _linear(t, sd, f"{name}.fc1", _layer_norm(t, sd, f"{name}.norm", v))
        return _linear(t, sd, f"{name}.fc2", t(f"{name}.act", ops.gelu, v))

    return t(name, mlp, x)


def _tinyvit_block(t: Trace, sd, name, x, resolution, num_heads, window):
    h, w = resolution
    b, length, c = x.shape
    pad_b, pad_r = (window - h % window) % window, (window - w % window) % window
    # zero padding before the attention (and its LayerNorm): padded tokens join every softmax
    v = np.pad(x.reshape(b, h, w, c), ((0, 0), (0, pad_b), (0, pad_r), (0, 0)))
    nh, nw = (h + pad_b) // window, (w + pad_r) // window
    v = v.reshape(b, nh, window, nw, window, c).transpose(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)
    v = _window_attention(t, sd, f"{name}.attn", v, num_heads, window)
    v = v.reshape(b, nh, nw, window, window, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h + pad_b, w + pad_r, c)
    x = x + v[:, :h, :w].reshape(b, length, c)
    v = x.transpose(0, 2, 1).reshape(b, c, h, w)
    v = _conv_bn(t, sd, f"{name}.local_conv", v, padding=1, groups=c)
    x = v.reshape(b, c, length).transpose(0, 2, 1)
    return x + _mlp(t, sd, f"{name}.mlp", x)


def image_encoder(sd, x: np.ndarray, trace: Trace | None = None) -> np.ndarray:
    """(B, 3, S, S) normalised image -> (B, 256, S/16, S/16) embeddings (upstream TinyViT.forward)."""
    t = trace or Trace()

    def encode(v):
        def patch_embed(u):
            u = _conv_bn(t, sd, "image_encoder.patch_embed.seq.0", u, 2, 1)
            u = t("image_encoder.patch_embed.seq.1", ops.gelu, u)
            return _conv_bn(t, sd, "image_encoder.patch_embed.seq.2", u, 2, 1)

        v = t("image_encoder.patch_embed", patch_embed, v)
        r = v.shape[2]  # S / 4
        resolutions = ((r, r), (r // 2, r // 2), (r // 4, r // 4), (r // 4, r // 4))

        def conv_layer(u):
            for j in range(DEPTHS[0]):
                u = t(f"image_encoder.layers.0.blocks.{j}", lambda a, j=j: _mbconv(t, sd, f"image_encoder.layers.0.blocks.{j}", a), u)
            return _patch_merging(t, sd, "image_encoder.layers.0.downsample", u, resolutions[0], EMBED_DIMS[1])

        v = t("image_encoder.layers.0", conv_layer, v)
        for i in (1, 2, 3):
            stage = f"image_encoder.layers.{i}"

            def basic_layer(u, i=i, stage=stage):
                for j in range(DEPTHS[i]):
                    u = t(f"{stage}.blocks.{j}", lambda a, j=j: _tinyvit_block(
                        t, sd, f"{stage}.blocks.{j}", a, resolutions[i], NUM_HEADS[i], WINDOW_SIZES[i]), u)
                if i < 3:
                    u = _patch_merging(t, sd, f"{stage}.downsample", u, resolutions[i], EMBED_DIMS[i + 1])
                return u

            v = t(stage, basic_layer, v)
        # upstream: x.view(B, 64, 64, C).permute(0, 3, 1, 2), 64 = S / 16
        v = v.reshape(v.shape[0], *resolutions[3], v.shape[2]).transpose(0, 3, 1, 2)

        def neck(u):
            u = t("image_encoder.neck.0", lambda a: ops.conv2d(a, sd["image_encoder.neck.0.weight"]), u)
            u = t("image_encoder.neck.1", lambda a: ops.layer_norm_2d(a, sd["image_encoder.neck.1.weight"], sd["image_encoder.neck.1.bias"]), u)
            u = t("image_encoder.neck.2", lambda a: ops.conv2d(a, sd["image_encoder.neck.2.weight"], padding=1), u)
            return t("image_encoder.neck.3", lambda a: ops.layer_norm_2d(a, sd["image_encoder.neck.3.weight"], sd["image_encoder.neck.3.bias"]), u)

        return t("image_encoder.neck", neck, v)

    return t("image_encoder", encode, x)


# ---------------------------------------------------------------- prompt encoder


def _pe_encoding(sd, coords: np.ndarray) -> np.ndarray:
    """Random Fourier features of coordinates in [0, 1]: (..., 2) -> (..., 256), sin first."""
    c = (2.0 * coords.astype(np.float64) - 1.0) @ sd["prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"]
    c = 2.0 * np.pi * c
    return np.concatenate([np.sin(c), np.cos(c)], axis=-1)


def get_dense_pe(sd, grid: tuple[int, int]) -> np.ndarray:
    """(1, 256, gh, gw): the encoding of the image-embedding cell centres."""
    gh, gw = grid
    y, x = np.meshgrid((np.arange(gh) + 0.5) / gh, (np.arange(gw) + 0.5) / gw, indexing="ij")
    return _pe_encoding(sd, np.stack([x, y], axis=-1)).transpose(2, 0, 1)[None]


def _encode_coords(sd, coords: np.ndarray, img_size: int) -> np.ndarray:
    """Pixel coordinates (already shifted to pixel centres, float32) -> features; the division
    by the input size is upstream's float32 arithmetic, the features float64."""
    return _pe_encoding(sd, coords.astype(np.float32) / np.float32(img_size))


def prompt_encoder(sd, points, boxes, masks, trace: Trace | None = None, img_size: int = 1024):
    """points: (coords (B, N, 2), labels (B, N)) or None, boxes (B, 4) or None,
    masks (B, 1, 4g, 4g) or None -> (sparse (B, N', 256), dense (B, 256, g, g)), g = S / 16."""
    t = trace or Trace()
    grid = img_size // 16

    def encode(points, boxes, masks):
        batch = points[0].shape[0] if points is not None else boxes.shape[0] if boxes is not None else (
            masks.shape[0] if masks is not None else 1)
        sparse = [np.zeros((batch, 0, 256))]
        if points is not None:
            coords = np.asarray(points[0]).astype(np.float32) + np.float32(0.5)
            labels = np.asarray(points[1])
            if boxes is None:  # pad with a "not a point" at (0, 0), after the shift
                coords = np.concatenate([coords, np.zeros((batch, 1, 2), np.float32)], axis=1)
                labels = np.concatenate([labels, -np.ones((batch, 1), labels.dtype)], axis=1)
            pe = _encode_coords(sd, coords, img_size)
            pe[labels == -1] = sd["prompt_encoder.not_a_point_embed.weight"][0]
            pe[labels == 0] += sd["prompt_encoder.point_embeddings.0.weight"][0]
            pe[labels == 1] += sd["prompt_encoder.point_embeddings.1.weight"][0]
            sparse.append(pe)
        if boxes is not None:
            corners = (np.asarray(boxes).astype(np.float32) + np.float32(0.5)).reshape(-1, 2, 2)
            pe = _encode_coords(sd, corners, img_size)
            pe[:, 0] += sd["prompt_encoder.point_embeddings.2.weight"][0]
            pe[:, 1] += sd["prompt_encoder.point_embeddings.3.weight"][0]
            sparse.append(pe)
        if masks is not None:
            dense = t("prompt_encoder.mask_downscaling", lambda m: _mask_downscaling(t, sd, m), np.asarray(masks, np.float64))
        else:
            dense = np.broadcast_to(sd["prompt_encoder.no_mask_embed.weight"].reshape(1, -1, 1, 1), (batch, 256, grid, grid))
        return np.concatenate(sparse, axis=1), dense

    return t("prompt_encoder", encode, points, boxes, masks)


def _mask_downscaling(t: Trace, sd, m):
    p = "prompt_encoder.mask_downscaling"
    m = t(f"{p}.0", lambda v: ops.conv2d(v, sd[f"{p}.0.weight"], sd[f"{p}.0.bias"], stride=2), m)
    m = t(f"{p}.1", lambda v: ops.layer_norm_2d(v, sd[f"{p}.1.weight"], sd[f"{p}.1.bias"]), m)
    m = t(f"{p}.2", ops.gelu, m)
    m = t(f"{p}.3", lambda v: ops.conv2d(v, sd[f"{p}.3.weight"], sd[f"{p}.3.bias"], stride=2), m)
    m = t(f"{p}.4", lambda v: ops.layer_norm_2d(v, sd[f"{p}.4.weight"], sd[f"{p}.4.bias"]), m)
    m = t(f"{p}.5", ops.gelu, m)
    return t(f"{p}.6", lambda v: ops.conv2d(v, sd[f"{p}.6.weight"], sd[f"{p}.6.bias"]), m)


# ---------------------------------------------------------------- mask decoder


def _attention(t: Trace, sd, name, q, k, v, num_heads=8):
    def attention(q, k, v):
        q, k, v = (_linear(t, sd, f"{name}.{p}_proj", a) for p, a in (("q", q), ("k", k), ("v", v)))
        b, nq, c = q.shape
        heads = [a.reshape(b, a.shape[1], num_heads, c // num_heads).transpose(0, 2, 1, 3) for a in (q, k, v)]
        attn = ops.softmax(_batched_matmul(heads[0], heads[1].transpose(0, 1, 3, 2)) / math.sqrt(c // num_heads))
        out = _batched_matmul(attn, heads[2]).transpose(0, 2, 1, 3).reshape(b, nq, c)
        return _linear(t, sd, f"{name}.out_proj", out)

    return t(name, attention, q, k, v)


def _two_way_block(t: Trace, sd, name, queries, keys, query_pe, key_pe, skip_first_layer_pe):
    if skip_first_layer_pe:
        queries = _attention(t, sd, f"{name}.self_attn", queries, queries, queries)
    else:
        q = queries + query_pe
        queries = queries + _attention(t, sd, f"{name}.self_attn", q, q, queries)
    queries = _layer_norm(t, sd, f"{name}.norm1", queries)

    q, k = queries + query_pe, keys + key_pe
    queries = _layer_norm(t, sd, f"{name}.norm2", queries + _attention(t, sd, f"{name}.cross_attn_token_to_image", q, k, keys))

    def mlp(v):
        v = t(f"{name}.mlp.act", ops.relu, _linear(t, sd, f"{name}.mlp.lin1", v))
        return _linear(t, sd, f"{name}.mlp.lin2", v)

    queries = _layer_norm(t, sd, f"{name}.norm3", queries + t(f"{name}.mlp", mlp, queries))

    q, k = queries + query_pe, keys + key_pe
    keys = _layer_norm(t, sd, f"{name}.norm4", keys + _attention(t, sd, f"{name}.cross_attn_image_to_token", k, q, queries))
    return queries, keys


def _two_way_transformer(t: Trace, sd, image_embedding, image_pe, point_embedding):
    p = "mask_decoder.transformer"

    def transformer(image_embedding, image_pe, point_embedding):
        b, c, h, w = image_embedding.shape
        keys = image_embedding.reshape(b, c, h * w).transpose(0, 2, 1)
        key_pe = image_pe.reshape(image_pe.shape[0], c, h * w).transpose(0, 2, 1)
        queries = point_embedding
        for i in range(2):
            queries, keys = t(f"{p}.layers.{i}", lambda *a, i=i: _two_way_block(t, sd, f"{p}.layers.{i}", *a, i == 0),
                              queries, keys, point_embedding, key_pe)
        q, k = queries + point_embedding, keys + key_pe
        queries = queries + _attention(t, sd, f"{p}.final_attn_token_to_image", q, k, keys)
        return _layer_norm(t, sd, f"{p}.norm_final_attn", queries), keys

    return t(p, transformer, image_embedding, image_pe, point_embedding)


def _mlp_head(t: Trace, sd, name, x, num_layers=3):
    def head(v):
        for j in range(num_layers):
            v = _linear(t, sd, f"{name}.layers.{j}", v)
            if j < num_layers - 1:
                v = ops.relu(v)
        return v

    return t(name, head, x)


def _output_upscaling(t: Trace, sd, x):
    p = "mask_decoder.output_upscaling"

    def upscale(v):
        v = t(f"{p}.0", lambda a: ops.conv_transpose2d(a, sd[f"{p}.0.weight"], sd[f"{p}.0.bias"], stride=2), v)
        v = t(f"{p}.1", lambda a: ops.layer_norm_2d(a, sd[f"{p}.1.weight"], sd[f"{p}.1.bias"]), v)
        v = t(f"{p}.2", ops.gelu, v)
        v = t(f"{p}.3", lambda a: ops.conv_transpose2d(a, sd[f"{p}.3.weight"], sd[f"{p}.3.bias"], stride=2), v)
        return t(f"{p}.4", ops.gelu, v)

    return t(p, upscale, x)


def mask_decoder(sd, image_embeddings, image_pe, sparse, dense, multimask_output, trace: Trace | None = None):
    """-> (low-res mask logits (B, C, 4g, 4g), IoU predictions (B, C)); C = 3 if multimask_output else 1."""
    t = trace or Trace()

    def decode(image_embeddings, image_pe, sparse, dense, multimask_output):
        b = sparse.shape[0]
        output_tokens = np.concatenate([sd["mask_decoder.iou_token.weight"], sd["mask_decoder.mask_tokens.weight"]])
        tokens = np.concatenate([np.broadcast_to(output_tokens, (b, *output_tokens.shape)), sparse], axis=1)
        src = np.repeat(image_embeddings, b, axis=0) + dense
        pos_src = np.repeat(image_pe, b, axis=0)
        _, c, h, w = src.shape
        hs, src = _two_way_transformer(t, sd, src, pos_src, tokens)
        src = src.transpose(0, 2, 1).reshape(b, c, h, w)
        upscaled = _output_upscaling(t, sd, src)
        hyper_in = np.stack([_mlp_head(t, sd, f"mask_decoder.output_hypernetworks_mlps.{i}", hs[:, 1 + i])
                             for i in range(4)], axis=1)
        _, uc, uh, uw = upscaled.shape
        masks = (hyper_in @ upscaled.reshape(b, uc, uh * uw)).reshape(b, -1, uh, uw)
        iou_pred = _mlp_head(t, sd, "mask_decoder.iou_prediction_head", hs[:, 0])
        selected = slice(1, None) if multimask_output else slice(0, 1)
        return masks[:, selected], iou_pred[:, selected]

    return t("mask_decoder", decode, image_embeddings, image_pe, sparse, dense, multimask_output)


def postprocess_masks(masks: np.ndarray, input_size, original_size, img_size: int = 1024) -> np.ndarray:
    """(B, C, h, w) logits -> (B, C, H, W): bilinear to S x S, crop to the resized image, bilinear
    to the original size (align_corners=False; interpolated in float32 by the kernels' reference)."""
    x = masks.transpose(0, 2, 3, 1)
    x = kernels.resize(x.astype(np.float32), (img_size, img_size))[:, : input_size[0], : input_size[1]]
    return kernels.resize(x, tuple(original_size)).transpose(0, 3, 1, 2).astype(np.float64)


def predict(sd, image: np.ndarray, point_coords=None, point_labels=None, box=None, mask_input=None,
            multimask_output: bool = True, trace: Trace | None = None, img_size: int = 1024):
    """Upstream ``SamPredictor.set_image(image)`` + ``predict(..., return_logits=True)``.

    image: uint8 RGB (H, W, 3); point_coords (N, 2), point_labels (N,), box (4,) in original
    pixels; mask_input (1, 4g, 4g). -> (mask logits (C, H, W), IoU predictions (C,),
    low-res logits (C, 4g, 4g)); threshold the logits at > 0 for the masks.
    """
    t = trace or Trace()
    sd = {k: v.astype(np.float64, copy=False) if v.dtype.kind == "f" else v for k, v in sd.items()}
    original_size = image.shape[:2]
    x, input_size = preprocess(image, img_size)
    features = image_encoder(sd, x, t)
    points = boxes = masks = None
    if point_coords is not None:
        coords = apply_coords(np.asarray(point_coords), original_size, img_size)[None]
        points = (coords, np.asarray(point_labels, dtype=np.int32)[None])
    if box is not None:
        boxes = apply_coords(np.asarray(box, np.float64).reshape(2, 2), original_size, img_size).reshape(1, 4)
    if mask_input is not None:
        masks = np.asarray(mask_input, np.float64)[None]
    sparse, dense = prompt_encoder(sd, points, boxes, masks, t, img_size)
    low_res, iou = mask_decoder(sd, features, get_dense_pe(sd, (img_size // 16,) * 2), sparse, dense,
                                multimask_output, t)
    masks = postprocess_masks(low_res, input_size, original_size, img_size)
    return masks[0], iou[0], low_res[0]
