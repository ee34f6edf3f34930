"""MobileSAM weights whose mask decoder answers the prompt: each point gets its own masks.

Random weights make SAM's decoder ignore the prompt (every point gives about the same
mask, which NMS collapses to one), so an end-to-end check of the automatic mask generator
against upstream would check nothing. These weights start from ``synthetic:SEED`` (random
encoder: image-dependent features) and rewire the decoder as SAM's trained one works:

- positional encoding: 64 of the 128 random Fourier frequencies, scaled up (a sharp
  kernel PE(x) . PE(p), peaked at x = p); the other 64 are zero, which leaves channels
  64..127 free (sin 0) for token identities;
- the image embedding is zero on the positional channels and on channel 96 (the
  "prompt" channel), through the neck's last LayerNorm;
- layer 0's token self-attention is the identity (each token attends to itself through
  its identity channel), except the IoU token, which averages itself with the point;
- layer 1's image-to-token attention: image token x attends to the point token with
  logit ~ PE(x) . PE(p) (per head 8 frequencies), so the point's value lands in
  channel 96 of the image tokens near the point: a bump around the point;
- every other attention output, MLP output and hypernetwork hidden layer is zero
  (residuals and LayerNorms pass the tokens on); the upscaling reads channel 96 (plus a
  small random mix of the image's channels, so the image shapes the mask) and the three
  multimask hypernetworks are constants with different offsets: three nested masks
  around each point, of different stability;
- layer 0 also copies four positional channels into free ones (80..83), which the IoU
  token keeps: the IoU head reads them linearly, predicted IoUs spread around 0.88.

``prompt_responsive(state_dict)`` takes and returns the upstream layout (torch names,
NCHW, ConvTranspose (in, out, kH, kW)), so the same arrays load into upstream and MLX.
"""
from __future__ import annotations

import numpy as np

FREQS = 64  # positional frequencies kept (channels 0..63 sin, 128..191 cos)
PROMPT_CHANNEL = 96
IDENTITY = {"iou": 64, "masks": (65, 66, 67, 68), "fg": 69, "pad": 70, "bg": 71, "corner0": 72, "corner1": 73}
PE_SCALE = 0.6  # std of the kept Fourier frequencies (the kernel's width ~ 1 / (4 pi PE_SCALE) of the image)
SELF_SHARPNESS = 10.0  # layer 0 self-attention: logits 100 / sqrt(32) apart
CROSS_SHARPNESS = 2.0  # layer 1 image-to-token: logit 2 * SHARPNESS**2 at the point per head
# the three multimask tokens: logits GAIN * (u - LEVEL), u the upscaled prompt channel (~2.4 far from
# the point, ~9.5 on it): a wide unstable mask, a middle one and a tight stable one
MASK_GAIN = (2.0, 4.0, 8.0)
MASK_LEVEL = (4.0, 5.5, 7.5)
IMAGE_MIX = 0.15  # how much the image's channels move the mask boundary
PROMPT_GAIN = 8.0  # height of the bump the point leaves in the image tokens
# predicted IoU i = IOU_CENTRE + IOU_SPREAD * (c_i - mean_i) / 1.8, c_i the copied positional channel as the
# IoU token carries it after the transformer's LayerNorms (over a point grid: means below, std ~1.8, range
# [-3.8, 1.6]; it depends on the point only, not the image)
IOU_SPREAD = 0.05
IOU_CHANNEL_MEAN = (-1.02, -0.33, -1.37, -1.07)
IOU_CHANNELS = 80  # layer 0 copies positional channels 0..3 here: the IoU token then carries the point
IOU_CENTRE = 0.88


def _positional_channels() -> np.ndarray:
    return np.concatenate([np.arange(FREQS), 128 + np.arange(FREQS)])


def prompt_responsive(sd: dict, seed: int = 0) -> dict:
    sd = {k: np.array(v, copy=True) for k, v in sd.items()}
    rng = np.random.default_rng([seed, 12])
    dim = 256
    pe_channels = _positional_channels()
    image_off = np.zeros(dim, bool)
    image_off[pe_channels] = True
    image_off[PROMPT_CHANNEL] = True
    image_off[64:84] = True  # token identity and IoU channels stay out of the image

    g = np.zeros((2, 128), np.float32)
    g[:, :FREQS] = rng.normal(0.0, PE_SCALE, (2, FREQS))
    sd["prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"] = g

    def one_hot(channel, value=1.0):
        v = np.zeros((1, dim), np.float32)
        v[0, channel] = value
        return v

    sd["prompt_encoder.point_embeddings.0.weight"] = one_hot(IDENTITY["bg"])
    sd["prompt_encoder.point_embeddings.1.weight"] = one_hot(IDENTITY["fg"])
    sd["prompt_encoder.point_embeddings.2.weight"] = one_hot(IDENTITY["corner0"])
    sd["prompt_encoder.point_embeddings.3.weight"] = one_hot(IDENTITY["corner1"])
    sd["prompt_encoder.not_a_point_embed.weight"] = one_hot(IDENTITY["pad"])
    no_mask = sd["prompt_encoder.no_mask_embed.weight"]
    no_mask[:, image_off] = 0
    sd["mask_decoder.iou_token.weight"] = one_hot(IDENTITY["iou"])
    sd["mask_decoder.mask_tokens.weight"] = np.concatenate([one_hot(c) for c in IDENTITY["masks"]])
    for name in ("image_encoder.neck.3.weight", "image_encoder.neck.3.bias"):
        sd[name][image_off] = 0

    t = "mask_decoder.transformer."

    def set_linear(prefix, weight, bias=None):
        sd[prefix + ".weight"] = weight.astype(np.float32)
        sd[prefix + ".bias"] = np.zeros(weight.shape[0], np.float32) if bias is None else bias.astype(np.float32)

    def zero_linear(prefix):
        set_linear(prefix, np.zeros_like(sd[prefix + ".weight"]))

    def layer_norm(prefix, off=()):
        w = np.ones(dim, np.float32)
        w[list(off)] = 0
        sd[prefix + ".weight"], sd[prefix + ".bias"] = w, np.zeros(dim, np.float32)

    # layer 0 self-attention: identity per token (the IoU token: half itself, half the point)
    q = np.zeros((dim, dim), np.float32)
    k = np.zeros((dim, dim), np.float32)
    for head in range(8):
        base = 32 * head
        q[base + 0, IDENTITY["iou"]] = q[base + 1, IDENTITY["iou"]] = 1
        k[base + 0, IDENTITY["iou"]] = 1
        k[base + 1, IDENTITY["fg"]] = 1  # the IoU token's second key: the point
        for j, channel in enumerate(IDENTITY["masks"]):
            q[base + 2 + j, channel] = k[base + 2 + j, channel] = 1
        q[base + 6, IDENTITY["fg"]] = k[base + 6, IDENTITY["fg"]] = 1
        for j, name in enumerate(("pad", "bg", "corner0", "corner1")):
            q[base + 7 + j, IDENTITY[name]] = k[base + 7 + j, IDENTITY[name]] = 1
    set_linear(t + "layers.0.self_attn.q_proj", SELF_SHARPNESS * q)
    set_linear(t + "layers.0.self_attn.k_proj", SELF_SHARPNESS * k)
    copy = np.eye(dim, dtype=np.float32)
    copy[IOU_CHANNELS + np.arange(4), np.arange(4)] = 1
    set_linear(t + "layers.0.self_attn.v_proj", copy)
    set_linear(t + "layers.0.self_attn.out_proj", np.eye(dim))
    for layer in (0, 1):
        p = f"{t}layers.{layer}."
        zero_linear(p + "cross_attn_token_to_image.out_proj")
        zero_linear(p + "mlp.lin2")
        for norm in ("norm1", "norm2"):
            layer_norm(p + norm)
    zero_linear(t + "layers.1.self_attn.out_proj")
    zero_linear(t + "layers.0.cross_attn_image_to_token.out_proj")
    layer_norm(t + "layers.0.norm3")
    layer_norm(t + "layers.0.norm4", off=np.flatnonzero(image_off))  # image tokens: nothing on those channels
    layer_norm(t + "layers.1.norm3", off=pe_channels)  # tokens: the position only through their PE
    layer_norm(t + "layers.1.norm4")
    zero_linear(t + "final_attn_token_to_image.out_proj")
    layer_norm(t + "norm_final_attn")

    # layer 1 image-to-token: attention ~ PE(x) . PE(p); value = the point's identity channel
    qk = np.zeros((128, dim), np.float32)
    for j in range(FREQS):
        qk[2 * j, j] = qk[2 * j + 1, 128 + j] = CROSS_SHARPNESS
    set_linear(t + "layers.1.cross_attn_image_to_token.q_proj", qk)
    set_linear(t + "layers.1.cross_attn_image_to_token.k_proj", qk)
    v = np.zeros((128, dim), np.float32)
    out = np.zeros((dim, 128), np.float32)
    for head in range(8):
        v[16 * head, IDENTITY["fg"]] = 1
        out[PROMPT_CHANNEL, 16 * head] = PROMPT_GAIN / 8
    set_linear(t + "layers.1.cross_attn_image_to_token.v_proj", v)
    set_linear(t + "layers.1.cross_attn_image_to_token.out_proj", out)

    # upscaling: channel 0 = the prompt channel (+ a little image), channel 1 its negative, the rest +-3
    # (a fixed spread, so the LayerNorm over the 64 channels scales channel 0 by a near-constant)
    d = "mask_decoder."
    up0 = np.zeros((dim, 64, 2, 2), np.float32)
    image_channels = np.flatnonzero(~image_off)
    up0[PROMPT_CHANNEL, 0] = 1.0
    up0[image_channels, 0] = IMAGE_MIX * rng.normal(0, 1 / np.sqrt(image_channels.size), (image_channels.size, 2, 2))
    up0[:, 1] = -up0[:, 0]
    b0 = np.zeros(64, np.float32)
    b0[2:] = np.where(np.arange(62) % 2 == 0, 3.0, -3.0)
    sd[d + "output_upscaling.0.weight"], sd[d + "output_upscaling.0.bias"] = up0, b0
    layer_norm(d + "output_upscaling.1")
    sd[d + "output_upscaling.1.weight"], sd[d + "output_upscaling.1.bias"] = np.ones(64, np.float32), np.zeros(64, np.float32)
    up3 = np.zeros((64, 32, 2, 2), np.float32)
    up3[0, 0] = 4.0
    b3 = np.zeros(32, np.float32)
    b3[1] = 3.0
    sd[d + "output_upscaling.3.weight"], sd[d + "output_upscaling.3.bias"] = up3, b3

    gelu3 = 3.0 * 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (3 + 0.044715 * 27)))  # ~ GELU(3); any positive constant works
    for i in range(4):
        p = f"{d}output_hypernetworks_mlps.{i}.layers."
        for j in (0, 1):
            set_linear(p + str(j), np.zeros((dim, dim)), np.ones(dim))
        bias = np.zeros(32, np.float32)
        gain, level = (MASK_GAIN[i - 1], MASK_LEVEL[i - 1]) if i else (MASK_GAIN[1], MASK_LEVEL[1])
        bias[0], bias[1] = gain, -gain * level / gelu3
        set_linear(p + "2", np.zeros((32, dim)), bias)

    # IoU head: linear in the copied positional channels 80..83 (ReLUs kept open by a bias of 5)
    h = d + "iou_prediction_head.layers."
    w0 = np.zeros((dim, dim), np.float32)
    w0[np.arange(4), IOU_CHANNELS + np.arange(4)] = 1
    b0 = np.zeros(dim, np.float32)
    b0[:4] = 5
    set_linear(h + "0", w0, b0)
    w1 = np.zeros((dim, dim), np.float32)
    w1[np.arange(4), np.arange(4)] = 1
    set_linear(h + "1", w1)
    scale = IOU_SPREAD / 1.8
    set_linear(h + "2", scale * w1[:4], IOU_CENTRE - scale * (5 + np.array(IOU_CHANNEL_MEAN)))
    return sd
