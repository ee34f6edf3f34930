"""MobileSAM: TinyViT image encoder + SAM prompt encoder + SAM mask decoder (upstream ``build_sam_vit_t``)."""
from __future__ import annotations

from functools import partial

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from zoo.compiled import CompiledForward
from zoo.devices import as_model_input
from zoo.kernels import resize
from zoo.kernels.resize import source_taps
from zoo.errors import ZooError
from zoo.results import is_device

from .automatic_mask_generator import SamAutomaticMaskGenerator
from .mask_decoder import MaskDecoder, image_projections_with_pe, merged_projections, stack_heads
from .predictor import SamPredictor, prompt_count
from .prompt_encoder import PromptEncoder, prompt_array
from .tiny_vit import TinyViT

PIXEL_MEAN = (123.675, 116.28, 103.53)
PIXEL_STD = (58.395, 57.12, 57.375)
PROMPT_EMBED_DIM = 256
PATCH_SIZE = 16  # image pixels per image-embedding cell
BAND_BYTES = 64 << 20  # full-size mask logits made at a time


class Sam(nn.Module):
    mask_threshold = 0.0
    image_format = "RGB"  # upstream's: the channel order the encoder takes (SamPredictor flips "BGR" arrays)

    def __init__(self, img_size: int = 1024):
        super().__init__()
        self.img_size = img_size
        grid = img_size // PATCH_SIZE
        self.image_encoder = TinyViT(img_size)
        self.prompt_encoder = PromptEncoder(PROMPT_EMBED_DIM, (grid, grid), (img_size, img_size), mask_in_chans=16)
        self.mask_decoder = MaskDecoder(PROMPT_EMBED_DIM)
        # the user paths, compiled per input signature (zoo.compiled): set_image's encoder and
        # predict's prompt encoder + mask decoder (one trace per prompt kind and point count)
        # its BatchNorms folded; in stages in float32 (H200, batch 1, five processes against whole: 1% slower once,
        # 1-8% faster in four; float16 -7 to +4%, so whole), as zoo.compiled.stages_pay has ResNet and YOLO
        self.encode_image = CompiledForward(self.image_encoder, self.image_encoder, folds=self.image_encoder.folds(),
                                            stages=self.image_encoder.stages(),
                                            staged=lambda *args: self.image_encoder.dtype == mx.float32,
                                            prepare=lambda x: (self.image_encoder.model_input(x),), owner=self)
        # no floor under its memory cap: capped at its least memory it took the same time (H200, float32: 2.53 ms
        # and 23 MiB, 2.59 ms and 32 MiB at the 32 MiB floor; PyTorch's peak 32 MiB)
        self.decode_prompt = CompiledForward(self.prompt_and_decode, [self.prompt_encoder, self.mask_decoder],
                                             folds=self.decoder_folds(), cap_floor=False,
                                             prepare=self.prompt_inputs, owner=self)

    @property
    def dtype(self) -> mx.Dtype:
        return self.image_encoder.dtype

    def decoder_folds(self) -> list[tuple]:
        """The arrays decode_prompt's compiled forward derives from the weights (zoo.compiled.FoldedConvs),
        so that it runs fewer, larger products: the dense positional encoding; each group of
        projections of the image tokens as one (its positional encoding's share derived, valid since
        prompt_and_decode passes get_dense_pe as the image PE); each self-attention's q and k; the
        IoU head with the hypernetwork MLPs."""
        encoder, decoder = self.prompt_encoder, self.mask_decoder
        pe_layer = encoder.pe_layer
        folds = [(pe_layer, encoder.no_mask_embed, encoder.dense_pe)]
        for (first, *others), with_pe in decoder.transformer.image_projections():
            folds.append((first, (*others, pe_layer),
                          partial(image_projections_with_pe, with_pe=with_pe, grid=encoder.image_embedding_size)))
        for layer in decoder.transformer.layers:
            folds.append((layer.self_attn.q_proj, (layer.self_attn.k_proj,), merged_projections))
        first, *others = decoder.head_layers()
        return folds + [(first, tuple(others), stack_heads)]

    def __call__(self, batched_input: list[dict], multimask_output: bool) -> list[dict]:
        """upstream's ``Sam.forward`` (segment-anything's notebook, "end-to-end batched inference"): per image a
        dict of ``image`` (3, H, W) resized by ``transform.apply_image``, ``original_size`` (height, width),
        and optionally ``point_coords`` (B, N, 2) with ``point_labels`` (B, N), ``boxes`` (B, 4), ``mask_inputs``
        (B, 1, 256, 256), all in the resized image's pixels -> per image {"masks" (B, C, H, W) bool,
        "iou_predictions" (B, C), "low_res_logits" (B, C, 256, 256)} as TensorArrays: SamPredictor's
        set_torch_image + predict_torch on each image in turn (the encoder's memory is one image's)."""
        outputs = []
        for record in batched_input:
            if not isinstance(record, dict) or "image" not in record or "original_size" not in record:
                raise ZooError("sam(batched_input, multimask_output): each input is a dict with 'image' (3, H, W) and "
                               "'original_size', optionally 'point_coords', 'point_labels', 'boxes', 'mask_inputs'")
            predictor = SamPredictor(self)
            predictor.set_torch_image(np.asarray(record["image"])[None], record["original_size"])
            masks, iou, low_res = predictor.predict_torch(record.get("point_coords"), record.get("point_labels"),
                                                          record.get("boxes"), record.get("mask_inputs"),
                                                          multimask_output)
            outputs.append({"masks": masks, "iou_predictions": iou, "low_res_logits": low_res})
        return outputs

    def prompt_inputs(self, features, points=None, boxes=None, masks=None, multimask_output: bool = True) -> tuple:
        """decode_prompt's arguments (mx.arrays or numpy arrays) as its network takes them, or one ZooError: the
        embedding and the mask input in the model's dtype, coordinates and boxes float32, labels int32; B >= 1
        prompt sets alike in each prompt given, with one embedding for all of them or one each."""
        encoder = self.prompt_encoder
        features = as_model_input(features, self.dtype, "image embedding")
        expected = (*encoder.image_embedding_size, encoder.embed_dim)
        if features.ndim != 4 or tuple(features.shape[1:]) != expected:
            raise ZooError(f"the image embedding has shape {tuple(features.shape)}, expected "
                           f"(B, {', '.join(map(str, expected))}): pass what encode_image returned")
        counts = {}
        if points is not None:
            if not isinstance(points, (tuple, list)) or len(points) != 2:
                raise ZooError("decode_prompt's points are (coords (B, N, 2), labels (B, N)): pass a pair or None")
            coords = prompt_array(points[0], mx.float32, "point coords")
            labels = prompt_array(points[1], mx.int32, "point labels")
            if coords.ndim != 3 or coords.shape[2] != 2 or tuple(labels.shape) != tuple(coords.shape[:2]):
                raise ZooError(f"points: coords {tuple(coords.shape)} and labels {tuple(labels.shape)}, expected "
                               "(B, N, 2) and (B, N): N points (x, y) for each of B prompt sets, a label each")
            points, counts["points"] = (coords, labels), coords.shape[0]
        if boxes is not None:
            boxes = prompt_array(boxes, mx.float32, "boxes")
            if boxes.ndim != 2 or boxes.shape[1] != 4:
                raise ZooError(f"boxes has shape {tuple(boxes.shape)}, expected (B, 4): x1, y1, x2, y2 a prompt set")
            counts["boxes"] = boxes.shape[0]
        if masks is not None:
            masks = as_model_input(masks, self.dtype, "mask input", channels=1)
            if tuple(masks.shape[1:3]) != encoder.mask_input_size:
                raise ZooError(f"mask input has shape {tuple(masks.shape)}, expected (B, "
                               f"{', '.join(map(str, encoder.mask_input_size))}, 1): low-res logits, channels last")
            counts["masks"] = masks.shape[0]
        sets = prompt_count(counts)
        if sets == 0:
            raise ZooError("no prompt sets (B = 0): give at least one")
        if features.shape[0] not in (1, sets or 1):
            raise ZooError(f"the image embedding's batch is {features.shape[0]} for {sets or 1} prompt set(s): pass "
                           "one embedding (batch 1) for all of them, or one for each")
        return features, points, boxes, masks, bool(multimask_output)

    def prompt_and_decode(self, features, points=None, boxes=None, masks=None, multimask_output: bool = True):
        """Image embedding (B, 64, 64, 256) + one prompt -> (low-res mask logits (B, 256, 256, C), IoU (B, C))."""
        features, points, boxes, masks, multimask_output = self.prompt_inputs(features, points, boxes, masks,
                                                                               multimask_output)
        sparse, dense = self.prompt_encoder(points, boxes, masks)
        if masks is None:  # the same no-mask embedding for every prompt set: the decoder shares its image side
            dense = dense[:1]
        return self.mask_decoder(features, self.prompt_encoder.get_dense_pe(), sparse, dense, multimask_output)

    def preprocess(self, image: np.ndarray) -> mx.array:
        """Resized uint8 (h, w, 3) image -> (1, S, S, 3) normalised and zero-padded at the bottom/right.

        Normalised in float32, then cast: the padding is zeros after normalisation.
        """
        h, w = image.shape[:2]
        x = (mx.array(image).astype(mx.float32) - mx.array(PIXEL_MEAN, mx.float32)) / mx.array(PIXEL_STD, mx.float32)
        x = mx.pad(x, ((0, self.img_size - h), (0, self.img_size - w), (0, 0)))
        return x[None].astype(self.dtype)

    def postprocess_masks(self, masks: mx.array, input_size: tuple[int, int], original_size: tuple[int, int]) -> mx.array:
        """Low-res logits (B, 256, 256, C) -> (B, H, W, C) float32 logits at the original image size.

        Bilinear (align_corners=False) to S x S, crop the padding away, bilinear to
        the original size: two resizes, as upstream, not one. The second is skipped when the
        sizes already agree (a 1024 x 1024 image): a resize to the same size is the identity
        (weights 1 and 0; PyTorch copies too), and it costs a full-size pass per mask.
        """
        masks = self.input_logits(masks, input_size)
        if masks.shape[1:3] == tuple(original_size):
            return masks
        return resize(masks, tuple(original_size), mode="bilinear")

    def input_logits(self, masks: mx.array, input_size: tuple[int, int]) -> mx.array:
        """postprocess_masks' first resize: (B, 256, 256, C) -> (B, h, w, C) float32 at the resized image's size:
        upstream's resize to S x S cropped to the image, made only over the image (the same values: the
        resize's band and columns; a 4:3 photo skips a quarter of the pixels)."""
        return resize(masks.astype(mx.float32), (self.img_size, self.img_size), mode="bilinear",
                      band=(0, input_size[0]), columns=(0, input_size[1]))

    def masks_into(self, masks: mx.array, input_size: tuple[int, int], out: np.ndarray) -> np.ndarray:
        """``postprocess_masks`` written into ``out`` (B, C, H, W): bool ``out`` gets logits >
        mask_threshold (each mask made only where it can be true: ``mask_crop``), float32 the
        logits, made in bands of rows, so a big image holds one band of float32 logits beside the
        result (8000x8000: 3.3 GB at once before)."""
        height, width = out.shape[2:]
        if out.dtype == bool:
            out[:] = False
            for b in range(out.shape[0]):
                for c in range(out.shape[1]):
                    top, left, crop = self.mask_crop(masks[b:b + 1, ..., c:c + 1], input_size, (height, width))
                    out[b, c, top:top + crop.shape[0], left:left + crop.shape[1]] = crop
            return out
        masks = self.input_logits(masks, input_size)
        mx.eval(masks)  # once, not once per band
        rows = max(1, BAND_BYTES // (4 * out.shape[0] * out.shape[1] * width))  # float32 logits per band
        for start in range(0, height, rows):
            band = (start, min(height, start + rows))
            logits = (masks[:, band[0]:band[1]] if masks.shape[1:3] == (height, width) else
                      resize(masks, (height, width), mode="bilinear", band=band))
            out[:, :, band[0]:band[1]] = np.array(logits).transpose(0, 3, 1, 2)
        return out

    def mask_crop(self, low_res: mx.array, input_size: tuple[int, int],
                  original_size: tuple[int, int]) -> tuple[int, int, np.ndarray]:
        """One mask's low-res logits (1, 256, 256, 1) -> (top, left, crop): its full-size mask
        (postprocess_masks > mask_threshold) is ``crop`` (bool) at rows top.., columns left.. and
        false elsewhere. The crop is the rectangle where the mask can be true, plus one pixel each
        side, made in bands of rows: a small object on a big photo costs its own size, not the photo's.

        Why the pixels outside are false: mask_threshold is 0 and the second resize makes each pixel
        from its two source rows and two source columns with weights >= 0; products and sums of
        non-positive numbers by non-negative weights are non-positive in floating point too
        (rounding keeps signs, NaN is not > 0), so a pixel is > 0 only if one of its four sources is.
        The rectangle is the output rows and columns that sample a source row and column of the
        rectangle around the positive sources."""
        height, width = original_size
        logits = self.input_logits(low_res, input_size)
        positive = np.array(logits[0, ..., 0] > self.mask_threshold)
        if not positive.any():
            return 0, 0, np.zeros((0, 0), bool)
        resized = positive.shape != (height, width)
        spans = []
        for axis, size in ((0, height), (1, width)):
            sources = np.flatnonzero(positive.any(axis=1 - axis))
            first, last = int(sources[0]), int(sources[-1])
            if resized:  # the output pixels whose source pair reaches [first, last] (taps never decrease)
                taps = np.array(source_taps(positive.shape[axis], size, "bilinear", False)[0])
                first = int(np.searchsorted(taps[:, 1], first))
                last = int(np.searchsorted(taps[:, 0], last, "right")) - 1
            spans.append((max(0, first - 1), min(size, last + 2)))
        (top, bottom), (left, right) = spans
        if not resized:
            return top, left, positive[top:bottom, left:right]
        crop = np.empty((bottom - top, right - left), bool)
        rows = max(1, BAND_BYTES // (4 * (right - left)))  # float32 logits per band
        for start in range(top, bottom, rows):
            band = (start, min(bottom, start + rows))
            part = resize(logits, (height, width), mode="bilinear", band=band, columns=(left, right))
            crop[start - top:band[1] - top] = np.array(part[0, ..., 0] > self.mask_threshold)
        return top, left, crop

    def to(self, device=None) -> Sam:
        """upstream README's ``sam.to(device=device)``: MLX computes on the process's device (zoo.load's
        ``device=``), so a device as torch names it is checked and the model returned as it is."""
        if device is not None and not is_device(device):
            raise ZooError(f"to(device={device!r}): not a device; MLX runs on the device zoo.load(device=...) chose")
        return self

    @property
    def device(self) -> str:
        """upstream's ``sam.device``, where scripts put their prompt tensors: host memory (numpy), whatever
        device MLX computes on."""
        return "cpu"

    def predictor(self) -> SamPredictor:
        """A SamPredictor on this model: set_image once, predict many times."""
        return SamPredictor(self)

    def mask_generator(self, **params) -> SamAutomaticMaskGenerator:
        """Segment everything: ``mask_generator(points_per_side=32, ...).generate(image)`` (upstream's parameters)."""
        return SamAutomaticMaskGenerator(self, **params)
