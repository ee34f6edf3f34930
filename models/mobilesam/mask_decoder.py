"""SAM's mask decoder in MLX: a two-way transformer between prompt tokens and the
image embedding, then hypernetwork MLPs that turn mask tokens into mask logits.

Image-shaped tensors are NHWC; image tokens are (B, H*W, C) with index h * W + w.
"""
from __future__ import annotations

import itertools
import math

import mlx.core as mx
import mlx.nn as nn

from zoo.compiled import folded, kept
from zoo.kernels import cpu as cpu_ops
from zoo.models.layers import (GELU, ConvTranspose2d, LayerNorm, Linear, Sequential, attention, fusing_on_cpu,
                               split_heads)


# Token counts from which a tensor is the image side (64 x 64 tokens at 1024; the prompt side has a few)
IMAGE_TOKENS_FROM = 64


class MLP(nn.Module):
    """Linear layers with ReLU between them (none after the last)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int):
        super().__init__()
        dims = [input_dim] + [hidden_dim] * (num_layers - 1) + [output_dim]
        self.layers = [Linear(a, b) for a, b in itertools.pairwise(dims)]

    def __call__(self, x: mx.array) -> mx.array:
        for layer in self.layers[:-1]:
            x = nn.relu(layer(x))
        return self.layers[-1](x)


class MLPBlock(nn.Module):
    def __init__(self, dim: int, mlp_dim: int):
        super().__init__()
        self.lin1 = Linear(dim, mlp_dim)
        self.act = nn.ReLU()
        self.lin2 = Linear(mlp_dim, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.lin2(self.act(self.lin1(x)))


class Attention(nn.Module):
    """Multi-head attention whose projections may shrink the width (downsample_rate)."""

    def __init__(self, dim: int, num_heads: int, downsample_rate: int = 1):
        super().__init__()
        internal = dim // downsample_rate
        self.num_heads = num_heads
        self.q_proj = Linear(dim, internal)
        self.k_proj = Linear(dim, internal)
        self.v_proj = Linear(dim, internal)
        self.out_proj = Linear(internal, dim)

    def _heads(self, x: mx.array) -> mx.array:
        b, n, c = x.shape
        if n >= IMAGE_TOKENS_FROM:  # the image tokens: split_heads' threaded copy on the CPU, views elsewhere
            return split_heads(x, self.num_heads, 1)[0]
        return x.reshape(b, n, self.num_heads, c // self.num_heads).transpose(0, 2, 1, 3)

    def __call__(self, q: mx.array, k: mx.array, v: mx.array) -> mx.array:
        merged = folded(self.q_proj)  # compiled self-attention: q and k of one input as one product
        if merged is not None and q is k:
            q, k = merged_product(q, merged, 2)
            return self.attend(q, k, self.v_proj(v))
        return self.attend(self.q_proj(q), self.k_proj(k), self.v_proj(v))

    def attend(self, q: mx.array, k: mx.array, v: mx.array) -> mx.array:
        """The attention of projected q, k and v (B, N, internal), through out_proj."""
        scale = 1.0 / math.sqrt(q.shape[-1] // self.num_heads)
        # on the CPU the heads read where they lie, one side shared by every prompt set: no copies
        out = cpu_ops.heads_attention(q, k, v, self.num_heads, scale) if fusing_on_cpu() else None
        if out is None:
            q, k, v = self._heads(q), self._heads(k), self._heads(v)
            if q.shape[0] != k.shape[0]:  # the image's queries against each prompt set's tokens: broadcast
                batch = max(q.shape[0], k.shape[0])
                q, k, v = (mx.broadcast_to(a, (batch, *a.shape[1:])) for a in (q, k, v))
            out = attention(q, k, v, scale)
            b, _, n, _ = out.shape
            out = out.transpose(0, 2, 1, 3).reshape(b, n, -1)
        return self.out_proj(out)

    # On the CPU the image side's projections are folded into the prompt tokens' side: there are a few
    # tokens against 4096 image tokens, so (q W_k) x^T costs a head's rows times the width where q (x W_k)^T
    # cost the whole projection of the image, and likewise for the values and the output projection.
    # Each cross-attention then takes half the multiplications and writes no projected image tokens.

    def to_image(self, tokens: mx.array, image_with_pe: mx.array, image: mx.array) -> mx.array:
        """self(tokens, image_with_pe, image) for prompt tokens (B, T, C) and image tokens (1 or B, N, C), the
        latter with their positional encoding added. On the CPU where it takes fewer multiplications (the
        image's k and v projections, 4 N C internal per image, against 4 N C heads T per prompt set: not
        for many prompt sets against one image), the folded form: per head, softmax(scale (q_h W_kh)
        image_with_pe^T) image W_vh^T + b_vh (the key bias adds a constant to each row of scores, which the
        softmax drops; its rows sum to 1, so the value bias is added once), the heads' rows of all tokens
        against the same image (one product per thread's share of the rows)."""
        b, t, _ = tokens.shape
        heads, c = self.num_heads, image.shape[-1]
        d = self.q_proj.weight.shape[0] // heads
        if not fusing_on_cpu() or b * heads * t >= image.shape[0] * heads * d:
            return self(tokens, image_with_pe, image)
        f32 = mx.float32
        q = self.q_proj(tokens).astype(f32).reshape(b, t, heads, d).transpose(0, 2, 1, 3)  # (B, heads, T, d)
        rows = q @ self.k_proj.weight.astype(f32).reshape(heads, d, c)  # (B, heads, T, C)
        mixed = cpu_ops.shared_keys_attention(rows.reshape(b, heads * t, c), image_with_pe, image,
                                              1.0 / math.sqrt(d))  # (B, heads * T, C): each row's mix of the image
        values = mixed.astype(f32).reshape(b, heads, t, c) @ self.v_proj.weight.astype(f32).reshape(heads, d, c) \
            .transpose(0, 2, 1) + self.v_proj.bias.astype(f32).reshape(heads, 1, d)  # (B, heads, T, d)
        return self.out_proj(values.transpose(0, 2, 1, 3).reshape(b, t, heads * d).astype(tokens.dtype))

    def to_tokens(self, image_with_pe: mx.array, tokens_with_pe: mx.array, tokens: mx.array,
                  image: mx.array) -> mx.array:
        """image + self(image_with_pe, tokens_with_pe, tokens) for image tokens (1 or B, N, C) and prompt tokens
        (B, T, C). On the CPU where it takes fewer multiplications (the image's q projection and the output
        projection, 2 N C internal per image and per prompt set, against 4 N C heads T per prompt set), the
        folded form: per prompt set, the scores of every head as one product of the image tokens with
        scale W_qh^T k_h^T (their bias scale b_qh k_h^T), the softmax over each head's T tokens, and the
        output as one product of those weights with v_h W_oh^T, whose initial C is the bias and the image."""
        b, t, _ = tokens.shape
        heads, c = self.num_heads, image.shape[-1]
        d = self.q_proj.weight.shape[0] // heads
        if not fusing_on_cpu() or 2 * b * heads * t >= (image.shape[0] + b) * heads * d:
            return image + self(image_with_pe, tokens_with_pe, tokens)
        f32 = mx.float32
        scale = 1.0 / math.sqrt(d)
        k = self.k_proj(tokens_with_pe).astype(f32).reshape(b, t, heads, d).transpose(0, 2, 1, 3)  # (B, heads, T, d)
        v = self.v_proj(tokens).astype(f32).reshape(b, t, heads, d).transpose(0, 2, 1, 3)
        score_rows = (k @ (self.q_proj.weight.astype(f32).reshape(heads, d, c) * scale)).reshape(b, heads * t, c)
        score_bias = (k @ (self.q_proj.bias.astype(f32).reshape(heads, d, 1) * scale)).reshape(b, heads * t)
        # (B, C, heads * T): head h's columns v_h W_oh^T, transposed as a Linear's weight (out, in)
        output_rows = (v @ self.out_proj.weight.astype(f32).reshape(c, heads, d).transpose(1, 2, 0)) \
            .reshape(b, heads * t, c).transpose(0, 2, 1)
        outputs = []
        for i in range(b):
            one = slice(i, i + 1) if image.shape[0] > 1 else slice(0, 1)
            scores = cpu_ops.linear(image_with_pe[one], score_rows[i], score_bias[i])
            weights = cpu_ops.softmax(scores.reshape(1, -1, heads, t)).reshape(1, -1, heads * t)
            outputs.append(cpu_ops.linear(weights, mx.contiguous(output_rows[i]), self.out_proj.bias,
                                          residual=image[one]))
        return outputs[0] if b == 1 else mx.concatenate(outputs)


class TwoWayAttentionBlock(nn.Module):
    """Token self-attention, tokens -> image, token MLP, image -> tokens; each with a residual and a norm."""

    def __init__(self, dim: int, num_heads: int, mlp_dim: int, skip_first_layer_pe: bool):
        super().__init__()
        self.self_attn = Attention(dim, num_heads)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn_token_to_image = Attention(dim, num_heads, downsample_rate=2)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLPBlock(dim, mlp_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.norm4 = LayerNorm(dim)  # over every image token: the C form on the CPU (nn's on the tokens)
        self.cross_attn_image_to_token = Attention(dim, num_heads, downsample_rate=2)
        self.skip_first_layer_pe = skip_first_layer_pe

    def shortcut(self, x: mx.array) -> mx.array:
        return x

    def image_projections(self) -> tuple[tuple[Linear, ...], tuple[bool, ...]]:
        """The projections of the image tokens (keys) in this block, in the order __call__ splits
        their merged product: the token-to-image attention's k and v, the image-to-token attention's
        q; and which of them add the positional encoding to their input first (k and q)."""
        return ((self.cross_attn_token_to_image.k_proj, self.cross_attn_token_to_image.v_proj,
                 self.cross_attn_image_to_token.q_proj), (True, False, True))

    def __call__(self, queries: mx.array, keys: mx.array, query_pe: mx.array, key_pe: mx.array):
        to_image, to_token = self.cross_attn_token_to_image, self.cross_attn_image_to_token
        if self.skip_first_layer_pe:  # the first layer replaces the queries (no residual, no PE)
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = self.shortcut(queries) + self.self_attn(q, q, queries)
        queries = self.norm1(queries)

        # compiled: the keys' three projections as one product, the positional encoding's share
        # derived once (image_projections_with_pe)
        projected = folded(to_image.k_proj)
        q = queries + query_pe
        if projected is None:
            k = keys + key_pe
            attended = to_image.to_image(q, k, keys)
        else:
            image_k, image_v, image_q = merged_product(keys, projected, 3)
            attended = to_image.attend(to_image.q_proj(q), image_k, image_v)
        queries = self.norm2(self.shortcut(queries) + attended)
        queries = self.norm3(self.shortcut(queries) + self.mlp(queries))

        q = queries + query_pe
        if projected is None:
            keys = to_token.to_tokens(k, q, queries, self.shortcut(keys))
        else:
            keys = self.shortcut(keys) + to_token.attend(image_q, to_token.k_proj(q), to_token.v_proj(queries))
        return queries, self.norm4(keys)


class TwoWayTransformer(nn.Module):
    def __init__(self, depth: int = 2, dim: int = 256, num_heads: int = 8, mlp_dim: int = 2048):
        super().__init__()
        self.layers = [TwoWayAttentionBlock(dim, num_heads, mlp_dim, skip_first_layer_pe=i == 0) for i in range(depth)]
        self.final_attn_token_to_image = Attention(dim, num_heads, downsample_rate=2)
        self.norm_final_attn = nn.LayerNorm(dim)

    def __call__(self, image_embedding: mx.array, image_pe: mx.array, point_embedding: mx.array):
        """image_embedding, image_pe: (B, H, W, C); point_embedding: (B, N, C) -> (queries, image tokens)."""
        b, h, w, c = image_embedding.shape
        keys = image_embedding.reshape(b, h * w, c)
        key_pe = image_pe.reshape(image_pe.shape[0], h * w, c)
        queries = point_embedding
        for layer in self.layers:
            queries, keys = layer(queries, keys, point_embedding, key_pe)
        final = self.final_attn_token_to_image
        q = queries + point_embedding
        projected = folded(final.k_proj)  # compiled: as in the blocks, k and v of the keys as one product
        if projected is None:
            attended = final.to_image(q, keys + key_pe, keys)
        else:
            k, v = merged_product(keys, projected, 2)
            attended = final.attend(final.q_proj(q), k, v)
        queries = self.norm_final_attn(queries + attended)
        return queries, keys

    def image_projections(self) -> list[tuple[tuple[Linear, ...], tuple[bool, ...]]]:
        """Each group of projections of the same image tokens, and which of them add the positional
        encoding to their input first: each block's (TwoWayAttentionBlock.image_projections), then
        the final attention's k (with it) and v."""
        final = self.final_attn_token_to_image
        return [layer.image_projections() for layer in self.layers] + [((final.k_proj, final.v_proj), (True, False))]


class MaskDecoder(nn.Module):
    def __init__(self, dim: int = 256, num_multimask_outputs: int = 3, iou_head_depth: int = 3,
                 iou_head_hidden_dim: int = 256):
        super().__init__()
        self.transformer = TwoWayTransformer(dim=dim)
        self.num_mask_tokens = num_multimask_outputs + 1
        self.iou_token = nn.Embedding(1, dim)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, dim)
        self.output_upscaling = Sequential(
            ConvTranspose2d(dim, dim // 4, 2, stride=2),
            LayerNorm(dim // 4, eps=1e-6),  # LayerNorm2d over channels (last axis in NHWC)
            GELU(),
            ConvTranspose2d(dim // 4, dim // 8, 2, stride=2),
            GELU(),
        )
        self.output_hypernetworks_mlps = [MLP(dim, dim, dim // 8, 3) for _ in range(self.num_mask_tokens)]
        self.iou_prediction_head = MLP(dim, iou_head_hidden_dim, self.num_mask_tokens, iou_head_depth)

    def __call__(self, image_embeddings: mx.array, image_pe: mx.array, sparse_prompt_embeddings: mx.array,
                 dense_prompt_embeddings: mx.array, multimask_output: bool) -> tuple[mx.array, mx.array]:
        """-> (mask logits (B, 256, 256, C) NHWC, IoU predictions (B, C)); C = 3 (multimask) or 1."""
        # tokens 1..3 are the three disambiguated masks, token 0 the single-mask answer
        selected = slice(1, None) if multimask_output else slice(0, 1)
        masks, iou_pred = self.predict_masks(image_embeddings, image_pe, sparse_prompt_embeddings,
                                             dense_prompt_embeddings, selected)
        return masks, iou_pred[:, selected]

    def predict_masks(self, image_embeddings, image_pe, sparse_prompt_embeddings, dense_prompt_embeddings,
                      selected: slice = slice(None)):
        """-> (the mask logits of the mask tokens ``selected`` (B, 256, 256, C), every token's IoU
        prediction (B, 4)). Upstream makes all four masks and slices them: each mask is its own
        token's product, so making only the selected ones gives the same values (bit for bit)."""
        batch = sparse_prompt_embeddings.shape[0]
        output_tokens = mx.concatenate([self.iou_token.weight, self.mask_tokens.weight], axis=0)
        output_tokens = mx.broadcast_to(output_tokens[None], (batch, *output_tokens.shape))
        tokens = mx.concatenate([output_tokens, sparse_prompt_embeddings], axis=1)

        # One image, several prompt sets: the image side is the same for all until the first
        # image-to-token attention mixes each prompt set in. With one dense embedding for all
        # (no mask inputs: Sam.prompt_and_decode passes it once) it stays one image until then,
        # broadcast against the prompt sets (upstream repeats it and computes it per set).
        if dense_prompt_embeddings.shape[0] == 1:
            src = image_embeddings + dense_prompt_embeddings
        else:
            src = mx.repeat(image_embeddings, batch, axis=0) + dense_prompt_embeddings
        _, h, w, c = src.shape
        hs, src = self.transformer(src, image_pe, tokens)
        iou_token_out = hs[:, 0]
        mask_tokens_out = hs[:, 1 : 1 + self.num_mask_tokens]

        upscaled = self.upscale(src.reshape(batch, h, w, c))
        stacked = self.stacked_heads()
        if stacked is None:
            hyper_in = mx.stack([mlp(mask_tokens_out[:, i]) for i, mlp in enumerate(self.output_hypernetworks_mlps)],
                                axis=1)  # (B, tokens, C')
            iou_pred = self.iou_prediction_head(iou_token_out)
        else:
            hyper_in, iou_pred = self.heads_stacked(hs[:, : 1 + self.num_mask_tokens], stacked)
        b, uh, uw, uc = upscaled.shape
        # the hypernetwork outputs as a contiguous (B, C', tokens) operand: MLX's CPU product with the
        # transposed view took 4x the time (2026-11-29)
        hyper_in = mx.contiguous(hyper_in[:, selected].transpose(0, 2, 1))
        # on the CPU, C products tiled over our threads (MLX's let OpenBLAS wait for its sleeping thread)
        masks = cpu_ops.batched_matmul(upscaled.reshape(b, uh * uw, uc), hyper_in).reshape(b, uh, uw, -1)
        return masks, iou_pred

    def upscale(self, x: mx.array) -> mx.array:
        """output_upscaling; on the CPU each GELU applied by the C pass before it (the LayerNorm's, the
        transposed convolution's tap sums): two passes over the upscaled maps fewer."""
        if not fusing_on_cpu():  # (the validator records the layers apart)
            return self.output_upscaling(x)
        up = self.output_upscaling
        return up["3"](up["1"](up["0"](x), activation="gelu"), activation="gelu")

    def stacked_heads(self) -> dict[str, mx.array] | None:
        """stack_heads' arrays: a compiled forward's derived ones; on the CPU kept here (its 15 products of
        one token each were 15 MLX calls); else None (the MLPs apart)."""
        stacked = folded(self.iou_prediction_head.layers[0])
        if stacked is not None or not fusing_on_cpu():
            return stacked
        first, *others = layers = self.head_layers()
        return kept(self, "_stacked_heads", tuple(layers), lambda: stack_heads(first, tuple(others)))

    def head_layers(self) -> list[Linear]:
        """The IoU head's layers, then each hypernetwork MLP's, in order (stack_heads' order)."""
        return [layer for mlp in (self.iou_prediction_head, *self.output_hypernetworks_mlps) for layer in mlp.layers]

    @staticmethod
    def heads_stacked(tokens: mx.array, stacked: dict[str, mx.array]) -> tuple[mx.array, mx.array]:
        """The IoU head and the hypernetwork MLPs at once (compiled; stack_heads): tokens (B, 5, C),
        the IoU token then the mask tokens -> (hypernetwork outputs (B, 4, C'), IoU predictions (B, 4))."""
        x = tokens.transpose(1, 0, 2)  # (5, B, C): one MLP per token
        for i in range(2):
            x = nn.relu(mx.addmm(stacked[f"bias{i}"], x, stacked[f"weight{i}"]))
        hyper_in = mx.addmm(stacked["hyper_bias"], x[1:], stacked["hyper_weight"]).transpose(1, 0, 2)
        # slices, not x[0]: an integer index is a gather
        return hyper_in, mx.addmm(stacked["iou_bias"], x[:1], stacked["iou_weight"]).squeeze(0)


# Arrays the compiled decoder derives from its weights (zoo.compiled.FoldedConvs makers): fewer,
# larger products. Batch 1 is bound by the host's time per kernel (docs/speed-gpu.md).

def merged_product(x: mx.array, merged: dict[str, mx.array], parts: int) -> tuple[mx.array, ...]:
    """The merged projections of ``x`` (merged_projections or image_projections_with_pe), split
    into each projection's output."""
    return tuple(mx.split(mx.addmm(merged["bias"], x, merged["weight"]), parts, axis=-1))


def merged_projections(first: Linear, others: tuple[Linear, ...]) -> dict[str, mx.array]:
    """Linears of one input as one product: {weight (in, sum of outs), bias}."""
    linears = (first, *others)
    weight = mx.concatenate([l.weight for l in linears], axis=0).T
    return {"weight": mx.contiguous(weight), "bias": mx.concatenate([l.bias for l in linears])}


def image_projections_with_pe(first: Linear, partner: tuple, with_pe: tuple[bool, ...], grid: tuple[int, int]):
    """merged_projections of the same image tokens whose bias also holds, for the projections of
    keys + key_pe (with_pe), key_pe's product, derived here once since the positional encoding of
    the image grid is fixed. ``partner``: the other projections, then the prompt encoder's
    PositionEmbeddingRandom -> {weight (in, sum of outs), bias (1, tokens, sum of outs)}."""
    *others, pe_layer = partner
    linears = (first, *others)
    merged = merged_projections(first, tuple(others))
    dtype = first.weight.dtype
    f32 = mx.float32
    # the grid's encoding in the model's dtype, as upstream's get_dense_pe gives it
    key_pe = pe_layer.grid(*grid).astype(dtype).astype(f32)
    key_pe = key_pe.reshape(1, -1, key_pe.shape[-1])
    tokens = key_pe.shape[1]
    pe_share = mx.concatenate([key_pe @ l.weight.astype(f32).T if pe else mx.zeros((1, tokens, l.weight.shape[0]), f32)
                               for l, pe in zip(linears, with_pe)], axis=-1)
    merged["bias"] = (pe_share + merged["bias"].astype(f32)).astype(dtype)
    return merged


def stack_heads(first: Linear, others: tuple[Linear, ...]) -> dict[str, mx.array]:
    """The IoU head and the hypernetwork MLPs (MaskDecoder.head_layers' order) for heads_stacked:
    their first two layers (all 256 -> 256) stacked (5, in, out), the last layers apart (the
    hypernetworks' stacked, the IoU head's alone)."""
    layers = (first, *others)
    mlps = [layers[i: i + 3] for i in range(0, len(layers), 3)]

    def stack(ls):
        return mx.stack([l.weight.T for l in ls]), mx.stack([l.bias[None] for l in ls])

    arrays = {}
    for i in range(2):
        arrays[f"weight{i}"], arrays[f"bias{i}"] = stack([mlp[i] for mlp in mlps])
    arrays["hyper_weight"], arrays["hyper_bias"] = stack([mlp[2] for mlp in mlps[1:]])
    iou_last = mlps[0][2]
    return {**arrays, "iou_weight": mx.contiguous(iou_last.weight.T), "iou_bias": iou_last.bias}
