"""SAM's prompt encoder in MLX: points, boxes and a low-resolution mask -> embeddings.

Sparse embeddings (B, N, 256): one token per point (plus a padding point when
no box is given), two per box. Dense embeddings (B, 64, 64, 256), NHWC: the
downscaled mask, or the learned "no mask" vector everywhere.
"""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.compiled import folded, kept
from zoo.devices import as_model_input
from zoo.errors import ZooError
from zoo.models.layers import GELU, Sequential


def prompt_array(a, dtype: mx.Dtype, what: str) -> mx.array:
    """A prompt's coordinates, labels or boxes: an mx.array as given (the encoder casts it), numpy arrays and
    lists made one in ``dtype``."""
    if isinstance(a, mx.array):
        return a
    array = np.asarray(a) if isinstance(a, (np.ndarray, list, tuple)) else None
    if array is None or array.dtype.kind not in "fiub":
        raise ZooError(f"{what} must be a numeric mx.array or numpy array, got "
                       f"{type(a).__name__ if array is None else array.dtype}")
    return mx.array(array, dtype)


class PositionEmbeddingRandom(nn.Module):
    """Random Fourier features of (x, y) in [0, 1]: [sin(2 pi (2c - 1) G), cos(...)].

    Computed in float32 whatever the model's dtype: in float16 a coordinate such as
    1000.5 is not representable and 2 pi (2c - 1) G loses several bits.
    """

    def __init__(self, num_pos_feats: int):
        super().__init__()
        self.positional_encoding_gaussian_matrix = mx.zeros((2, num_pos_feats))

    def encode(self, coords: mx.array) -> mx.array:
        """coords (..., 2) normalised to [0, 1] -> (..., 2 * num_pos_feats), float32."""
        coords = 2 * coords.astype(mx.float32) - 1
        coords = 2 * math.pi * (coords @ self.positional_encoding_gaussian_matrix.astype(mx.float32))
        return mx.concatenate([mx.sin(coords), mx.cos(coords)], axis=-1)

    def grid(self, height: int, width: int) -> mx.array:
        """Encoding of the pixel centres of a height x width grid: (height, width, C)."""
        y = (mx.arange(height, dtype=mx.float32) + 0.5) / height
        x = (mx.arange(width, dtype=mx.float32) + 0.5) / width
        xy = mx.stack(mx.broadcast_arrays(x[None, :], y[:, None]), axis=-1)
        return self.encode(xy)

    def points(self, coords: mx.array, image_size: tuple[int, int]) -> mx.array:
        """coords (B, N, 2) as (x, y) in input-image pixels -> (B, N, C)."""
        # a division, not a multiplication by the reciprocal: it rounds like upstream
        return self.encode(coords.astype(mx.float32) / mx.array([image_size[1], image_size[0]], mx.float32))


class PromptEncoder(nn.Module):
    def __init__(self, embed_dim: int = 256, image_embedding_size: tuple[int, int] = (64, 64),
                 input_image_size: tuple[int, int] = (1024, 1024), mask_in_chans: int = 16):
        super().__init__()
        self.embed_dim = embed_dim
        self.input_image_size = input_image_size
        self.image_embedding_size = image_embedding_size
        self.mask_input_size = (4 * image_embedding_size[0], 4 * image_embedding_size[1])
        self.pe_layer = PositionEmbeddingRandom(embed_dim // 2)
        # 0: background point, 1: foreground point, 2 and 3: box corners
        self.point_embeddings = [nn.Embedding(1, embed_dim) for _ in range(4)]
        self.not_a_point_embed = nn.Embedding(1, embed_dim)
        self.mask_downscaling = Sequential(
            nn.Conv2d(1, mask_in_chans // 4, 2, stride=2),
            nn.LayerNorm(mask_in_chans // 4, eps=1e-6),  # LayerNorm2d over channels (last axis in NHWC)
            GELU(),
            nn.Conv2d(mask_in_chans // 4, mask_in_chans, 2, stride=2),
            nn.LayerNorm(mask_in_chans, eps=1e-6),
            GELU(),
            nn.Conv2d(mask_in_chans, embed_dim, 1),
        )
        self.no_mask_embed = nn.Embedding(1, embed_dim)

    @property
    def dtype(self) -> mx.Dtype:
        return self.no_mask_embed.weight.dtype

    def get_dense_pe(self) -> mx.array:
        """Positional encoding of the image embedding grid: (1, 64, 64, C), NHWC; made once per weights
        (``dense_pe``: a compiled forward's derived array, else kept here). Its sines and cosines took
        13 ms of MLX's CPU, a fifth of decoding a prompt, when they were made on every call."""
        derived = folded(self.pe_layer)
        if derived is not None:
            return derived["dense_pe"]
        return kept(self, "_dense_pe", (self.pe_layer, self.no_mask_embed),
                    lambda: self.dense_pe(self.pe_layer, self.no_mask_embed))["dense_pe"]

    def dense_pe(self, pe_layer: PositionEmbeddingRandom, no_mask_embed: nn.Embedding) -> dict[str, mx.array]:
        """get_dense_pe's array, as a compiled forward derives it once (zoo.compiled.FoldedConvs:
        ``(pe_layer, no_mask_embed, prompt_encoder.dense_pe)``; the embedding gives the dtype)."""
        grid = pe_layer.grid(*self.image_embedding_size)[None]
        return {"dense_pe": grid.astype(no_mask_embed.weight.dtype)}

    def _embed_points(self, coords: mx.array, labels: mx.array, pad: bool) -> mx.array:
        coords = coords.astype(mx.float32) + 0.5  # pixel centres
        labels = labels.astype(mx.int32)
        if pad:
            # A "not a point" token stands in for the missing box; its (0, 0) is not shifted.
            coords = mx.concatenate([coords, mx.zeros((coords.shape[0], 1, 2), mx.float32)], axis=1)
            labels = mx.concatenate([labels, mx.full((labels.shape[0], 1), -1, mx.int32)], axis=1)
        pe = self.pe_layer.points(coords, self.input_image_size).astype(self.dtype)
        labels = labels[..., None]
        pe = mx.where(labels == -1, self.not_a_point_embed.weight, pe)
        pe = mx.where(labels == 0, pe + self.point_embeddings[0].weight, pe)
        return mx.where(labels == 1, pe + self.point_embeddings[1].weight, pe)

    def _embed_boxes(self, boxes: mx.array) -> mx.array:
        corners = (boxes.astype(mx.float32) + 0.5).reshape(-1, 2, 2)
        pe = self.pe_layer.points(corners, self.input_image_size).astype(self.dtype)
        corner_embeddings = mx.concatenate([self.point_embeddings[2].weight, self.point_embeddings[3].weight])
        return pe + corner_embeddings

    def __call__(self, points, boxes, masks) -> tuple[mx.array, mx.array]:
        """points: (coords (B, N, 2), labels (B, N)) or None; boxes (B, 4) or None;
        masks (B, 256, 256, 1) or None -> (sparse (B, N', C), dense (B, 64, 64, C))."""
        if points is not None:
            batch = points[0].shape[0]
        elif boxes is not None:
            batch = boxes.shape[0]
        elif masks is not None:
            batch = masks.shape[0]
        else:
            batch = 1
        sparse = [mx.zeros((batch, 0, self.embed_dim), self.dtype)]
        if points is not None:
            sparse.append(self._embed_points(points[0], points[1], pad=boxes is None))
        if boxes is not None:
            sparse.append(self._embed_boxes(boxes))
        if masks is not None:
            dense = self.mask_downscaling(as_model_input(masks, self.dtype, "mask_input"))
        else:
            dense = mx.broadcast_to(self.no_mask_embed.weight.reshape(1, 1, 1, -1),
                                    (batch, *self.image_embedding_size, self.embed_dim))
        return mx.concatenate(sparse, axis=1), dense
