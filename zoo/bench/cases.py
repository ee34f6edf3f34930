"""The benchmark's cases: per model its inputs, its MLX user path and its PyTorch peer.

  model               input (upstream layout)                    MLX user path                  PyTorch peer
  resnet50            (B, 3, 224, 224) standard normal           model(x)                        torchvision resnet50
  yolov8n, yolov8s,   (B, 3, 640, 640) uniform [0, 1]            model(x): decoded (B, A, 84)    ultralytics DetectionModel
  yolo11n, yolo11s                                                                               (eval: decoded, no NMS)
  yolov8n-seg         (B, 3, 640, 640) uniform [0, 1]            model(x): (B, A, 116), protos   SegmentationModel (eval)
  yolo11n-pose        (B, 3, 640, 640) uniform [0, 1]            model(x): (B, A, 56) decoded    PoseModel (eval, 1 class,
                                                                                                 17 x 3 keypoints)
  mobilesam-encoder   (1, 3, 1024, 1024) standard normal         sam.encode_image(x)             build_sam_vit_t().image_encoder
  mobilesam-decoder   the encoder's embedding, 2 points          sam.decode_prompt(...)          prompt_encoder + mask_decoder
                      (labels 1, 0), three masks                 (what predict runs)             (what predict_torch runs)
  lama                cat([image * (1 - mask), mask]), S x S     lama(image, mask)               FFCResNetGenerator (big-lama)

Both sides load the same synthetic weights (zoo.weights.synthetic from the model's
manifest, in the upstream naming): speed does not depend on trained values. The MLX
side's inputs are the same arrays transposed to NHWC; the decoder case feeds both sides
the torch encoder's embedding (the MLX encoder's when there is no torch peer).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

# YOLO models: the same inputs; a detector's output is its decoded predictions, a segmentation model's
# also its prototypes, a pose model's predictions carry the keypoints
YOLO = ("yolov8n", "yolov8s", "yolo11n", "yolo11s", "yolov8n-seg", "yolo11n-pose")
MODELS = ("resnet50", *YOLO, "mobilesam-encoder", "mobilesam-decoder", "lama")
BATCHED = {"resnet50": (1, 32), **{m: (1, 16) for m in YOLO}}  # others: batch 1 only
IMAGE_SIZE = {"resnet50": 224, **{m: 640 for m in YOLO}, "mobilesam-encoder": 1024}
DECODER_POINTS = ((512.0, 384.0), (200.0, 700.0))  # in the 1024 frame, as predict hands them on
DECODER_LABELS = (1, 0)
# configs/training/big-lama.yaml's generator arguments (the MLX model hard-codes the same network)
LAMA_GENERATOR = dict(
    input_nc=4, output_nc=3, ngf=64, n_downsampling=3, n_blocks=18, add_out_act="sigmoid",
    init_conv_kwargs=dict(ratio_gin=0, ratio_gout=0, enable_lfu=False),
    downsample_conv_kwargs=dict(ratio_gin=0, ratio_gout=0, enable_lfu=False),
    resnet_conv_kwargs=dict(ratio_gin=0.75, ratio_gout=0.75, enable_lfu=False),
)


def registry_name(model: str) -> str:
    return "mobilesam" if model.startswith("mobilesam") else model


@dataclass(frozen=True)
class Case:
    model: str
    batch: int
    dtype: str
    size: int  # input side in pixels

    @property
    def name(self) -> str:
        return f"{self.model}/b{self.batch}"


def case_inputs(case: Case) -> dict[str, np.ndarray]:
    """float32 inputs in the upstream (NCHW) layout, the same for every variant."""
    rng = np.random.default_rng(1000 + case.batch)
    s = case.size
    if case.model == "lama":
        image = rng.uniform(0, 1, (case.batch, 3, s, s)).astype(np.float32)
        mask = np.zeros((case.batch, 1, s, s), np.float32)
        mask[:, :, s // 4: s // 2, s // 4: 3 * s // 4] = 1
        return {"image": image, "mask": mask}
    if case.model == "mobilesam-decoder":
        return {"coords": np.array([DECODER_POINTS], np.float32), "labels": np.array([DECODER_LABELS], np.int32)}
    if case.model in YOLO:
        return {"x": rng.uniform(0, 1, (case.batch, 3, s, s)).astype(np.float32)}
    return {"x": rng.standard_normal((case.batch, 3, s, s)).astype(np.float32)}


def nhwc(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def nchw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def manifest_state_dict(model: str, seed: int) -> dict[str, np.ndarray]:
    """The synthetic checkpoint in the upstream naming (what the MLX side loads as synthetic:SEED)."""
    from zoo import registry

    return registry.synthetic_checkpoint(registry.get_spec(registry_name(model)), seed)


# ---- MLX ------------------------------------------------------------------------------------


class MlxSide:
    """One registry model in one dtype; ``call(case, inputs)`` -> (fn, args, outputs-to-numpy)."""

    def __init__(self, model: str, dtype: str, seed: int):
        import zoo

        self.model = zoo.load(registry_name(model), weights=f"synthetic:{seed}", dtype=dtype)

    def call(self, case: Case, inputs: dict[str, np.ndarray], embedding: np.ndarray | None = None):
        import mlx.core as mx

        from zoo.models.yolov8 import Segment

        m = self.model
        dt = m.dtype

        def image(a):
            return mx.array(nhwc(a)).astype(dt)

        def one(o):
            return np.array(o.astype(mx.float32))

        if case.model == "resnet50":
            return m, (image(inputs["x"]),), lambda o: [one(o)]
        if case.model in YOLO:  # upstream's layout: (B, C, A), protos NCHW
            out = (lambda o: [one(o[0]).transpose(0, 2, 1), nchw(one(o[1]))]) if isinstance(m.head, Segment) \
                else (lambda o: [one(o).transpose(0, 2, 1)])
            return m, (image(inputs["x"]),), out
        if case.model == "mobilesam-encoder":
            return m.encode_image, (image(inputs["x"]),), lambda o: [nchw(one(o))]
        if case.model == "mobilesam-decoder":
            points = (mx.array(inputs["coords"]), mx.array(inputs["labels"]))
            return (m.decode_prompt, (image(embedding), points, None, None, True),
                    lambda o: [nchw(one(o[0])), one(o[1])])
        return m, (image(inputs["image"]), image(inputs["mask"])), lambda o: [nchw(one(o))]


# ---- PyTorch --------------------------------------------------------------------------------


class PeerMissing(Exception):
    """The peer's package is not importable: the case runs without a torch variant."""


def _import(module: str, hint: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise PeerMissing(f"{module} is not importable ({e}): {hint}") from None


UPSTREAM_HINT = "pass --upstream DIR, a folder holding mobile_sam/ and saicinpainting/ (the upstream repositories' code)"


def build_peer(model: str, seed: int):
    """The upstream float32 CPU module with the synthetic weights loaded strictly, and a description."""
    import torch

    sd = {k: torch.from_numpy(v) for k, v in manifest_state_dict(model, seed).items()}
    if model == "resnet50":
        tv = _import("torchvision", "pip install torchvision")
        module = tv.models.resnet50(weights=None, num_classes=1000)
        what = f"torchvision {tv.__version__} resnet50"
    elif model in YOLO:
        tasks = _import("ultralytics.nn.tasks", "pip install 'mlx-zoo[bench]' (ultralytics), or --upstream DIR holding ultralytics/")
        # the official files' heads: COCO's 80 classes; the pose models' one (person) with 17 x 3 keypoints
        kind, options = {"seg": ("SegmentationModel", {"nc": 80}),
                         "pose": ("PoseModel", {"nc": 1, "data_kpt_shape": (17, 3)})}.get(
            model.rpartition("-")[2], ("DetectionModel", {"nc": 80}))
        module = getattr(tasks, kind)(f"{model}.yaml", ch=3, verbose=False, **options)
        what = f"ultralytics {importlib.import_module('ultralytics').__version__} {kind}('{model}.yaml')"
    elif model.startswith("mobilesam"):
        module = _import("mobile_sam", UPSTREAM_HINT).build_sam_vit_t(checkpoint=None)
        what = "MobileSAM build_sam_vit_t()"
    else:
        ffc = _import("saicinpainting.training.modules.ffc", UPSTREAM_HINT)
        module = ffc.FFCResNetGenerator(**LAMA_GENERATOR)
        sd = {k.removeprefix("generator."): v for k, v in sd.items() if k.startswith("generator.")}
        what = "lama FFCResNetGenerator (big-lama)"
    module.load_state_dict(sd, strict=True)
    return module.eval(), what


class TorchSide:
    """One peer in one dtype on one device; ``call(case, inputs)`` -> (fn, args, outputs-to-numpy)."""

    def __init__(self, model: str, dtype: str, device, seed: int, yolo_fused: bool):
        import torch

        module, self.what = build_peer(model, seed)
        if yolo_fused and model in YOLO:
            module.fuse(verbose=False)
            self.what += ", fused (model.fuse(), as predict runs it)"
        self.torch_dtype = getattr(torch, dtype)
        self.device = device
        self.module = module.to(device=device, dtype=self.torch_dtype).eval()  # eval after .to: TinyViT caches biases
        if model.startswith("mobilesam") and dtype != "float32":
            # upstream's PromptEncoder builds float32 tensors: it stays float32, its outputs are cast
            self.module.prompt_encoder.float()
            self.what += "; prompt encoder float32 (upstream's only working dtype), outputs cast"

    def tensor(self, a: np.ndarray, float_type: bool = True):
        import torch

        t = torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
        return t.to(self.torch_dtype) if float_type else t

    def call(self, case: Case, inputs: dict[str, np.ndarray], embedding=None):
        m = self.module

        def one(t):
            return t.detach().float().cpu().numpy()

        if case.model == "resnet50":
            return m, (self.tensor(inputs["x"]),), lambda o: [one(o)]
        if case.model in YOLO:  # eval: (decoded, extras); a Segment's extras end with the prototypes
            out = (lambda o: [one(o[0]), one(o[1][-1])]) if case.model.endswith("-seg") else (lambda o: [one(o[0])])
            return m, (self.tensor(inputs["x"]),), out
        if case.model == "mobilesam-encoder":
            return m.image_encoder, (self.tensor(inputs["x"]),), lambda o: [one(o)]
        if case.model == "mobilesam-decoder":
            coords = self.tensor(inputs["coords"], float_type=False)
            labels = self.tensor(inputs["labels"], float_type=False)
            return self.decode, (self.tensor(embedding), coords, labels), lambda o: [one(o[0]), one(o[1])]
        x = np.concatenate([inputs["image"] * (1 - inputs["mask"]), inputs["mask"]], axis=1)
        return m, (self.tensor(x),), lambda o: [one(o)]

    def decode(self, embedding, coords, labels):
        """What SamPredictor.predict_torch runs before postprocess_masks."""
        m = self.module
        sparse, dense = m.prompt_encoder(points=(coords, labels), boxes=None, masks=None)
        dt = embedding.dtype
        return m.mask_decoder(image_embeddings=embedding, image_pe=m.prompt_encoder.get_dense_pe().to(dt),
                              sparse_prompt_embeddings=sparse.to(dt), dense_prompt_embeddings=dense.to(dt),
                              multimask_output=True)


def count_flops(fn, args) -> int:
    """FLOPs of one call as torch's FlopCounterMode counts them (convolutions and matrix products)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        fn(*args)
    return int(counter.get_total_flops())
