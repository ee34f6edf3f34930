"""MobileSAM (ChaoningZhang/MobileSAM, ``build_sam_vit_t``) in MLX: promptable segmentation.

    sam = zoo.load("mobilesam")
    predictor = sam.predictor()            # or SamPredictor(sam)
    predictor.set_image("photo.jpg")       # the image encoder runs once per image
    masks, scores, low_res = predictor.predict(point_coords=[[320, 240]], point_labels=[1])
    masks, scores, _ = predictor.predict(boxes=[[10, 20, 200, 240], [300, 40, 600, 400]])  # (N, C, H, W)
    records = sam.mask_generator(points_per_side=32).generate("photo.jpg")   # segment everything

Checkpoints in the official naming load as they are: lmz/candle-sam's
``mobile_sam-tiny-vitt.safetensors`` (the default) and the official ``mobile_sam.pt``.
"""
from __future__ import annotations

from .automatic_mask_generator import SamAutomaticMaskGenerator
from .predictor import SamPredictor
from .sam import Sam
from zoo.errors import ZooError

__all__ = ["Sam", "SamAutomaticMaskGenerator", "SamPredictor", "build", "build_sam_vit_t", "sam_model_registry",
           "sanitize"]


def build_sam_vit_t(checkpoint=None) -> Sam:
    """upstream's ``sam_model_registry["vit_t"](checkpoint=...)``: the checkpoint's weights (mobile_sam.pt or
    a .safetensors), or random ones without one, as upstream's (zoo.load warns that they are)."""
    from zoo.registry import load

    return load("mobilesam", weights=checkpoint, pretrained=checkpoint is not None)


class _Registry(dict):
    def __missing__(self, key):
        raise ZooError(f"sam_model_registry[{key!r}]: mlx-zoo has MobileSAM only, 'vit_t' "
                       "(upstream's 'default' is SAM's ViT-H, which it does not have)")


sam_model_registry = _Registry(vit_t=build_sam_vit_t)  # MobileSAM's README: sam_model_registry["vit_t"](checkpoint=...)

# TinyViT's ImageNet classifier: in the checkpoint, never used by SAM.
UNUSED_PREFIXES = ("image_encoder.norm_head.", "image_encoder.head.")
# Non-persistent buffers a checkpoint may still carry: the model recomputes them.
RECOMPUTED_SUFFIXES = (".attention_bias_idxs", ".ab")
RECOMPUTED_NAMES = ("pixel_mean", "pixel_std")


def build(spec) -> Sam:
    return Sam(spec.preprocess["image_size"])


# segment-anything's SAM checkpoints (a ViT image encoder), by the encoder's width; SAM 2's (a Hiera trunk, memory
# attention): the same prompt encoder and mask decoder, another network
SAM_VITS = {768: "ViT-B (sam_vit_b_01ec64.pth)", 1024: "ViT-L (sam_vit_l_0b3195.pth)",
            1280: "ViT-H (sam_vit_h_4b8939.pth)"}


def other_sam(state_dict: dict) -> str:
    """Which other SAM a checkpoint holds ('' for none): ViT-B/L/H, or SAM 2."""
    patch = state_dict.get("image_encoder.patch_embed.proj.weight")
    if "image_encoder.pos_embed" in state_dict and patch is not None:
        width = int(patch.shape[0])
        return "segment-anything's SAM " + SAM_VITS.get(width, f"ViT of width {width}")
    if any(k.startswith(("image_encoder.trunk.", "memory_attention.")) for k in state_dict):
        return "SAM 2's model (a Hiera image encoder and memory attention)"
    return ""


def sanitize(state_dict: dict, meta: dict) -> dict:
    """Drop the classifier head and any stored copies of recomputed buffers; refuse another SAM by name."""
    other = other_sam(state_dict)
    if other:
        raise ZooError(f"the checkpoint holds {other}, not MobileSAM's TinyViT image encoder: mlx-zoo has MobileSAM "
                       "only; pass mobile_sam.pt or mobile_sam-tiny-vitt.safetensors")
    return {
        name: value
        for name, value in state_dict.items()
        if not name.startswith(UNUSED_PREFIXES) and not name.endswith(RECOMPUTED_SUFFIXES)
        and name not in RECOMPUTED_NAMES
    }
