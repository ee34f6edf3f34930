"""YOLOv8 and YOLO11 parity case (the reference of the checkpoint's generation: its head's index): a random image in [0, 1], as the upstream case yolov8n_seed0_320 builds it,
or ``--image``: a photo letterboxed to ``--imgsz`` as ultralytics' predictor does (grey 114 padding).

Upstream returns (N, 4 + nc, A); the MLX model returns (N, A, 4 + nc), so the
reference output is compared transposed; segmentation models add their prototypes (output/1), pose
models their keypoints to each anchor's row.
"""
import mlx.core as mx
import numpy as np

from zoo.errors import ZooError, option
from zoo.images import load_image
from zoo.models.yolov8.ops import letterbox
from zoo.validate.reference import yolo11, yolov8


def add_arguments(parser):
    parser.add_argument("--imgsz", type=int, nargs="+", default=[320], metavar="SIZE",
                        help="input size: one value (square) or height width; multiples of 32 (default 320)")
    parser.add_argument("--image", help="image file instead of the random input of --seed")


def input_shape(imgsz) -> tuple[int, int]:
    if len(imgsz) not in (1, 2) or any(s < 32 or s % 32 for s in imgsz):
        raise ZooError(f"{option('imgsz', list(imgsz))}: give one or two positive multiples of 32, e.g. "
                       f"{option('imgsz', 320)}")
    return (imgsz[0], imgsz[-1])


def make_inputs(spec, args):
    h, w = input_shape(args.imgsz)
    if args.image:
        image = letterbox(load_image(args.image), (h, w), auto=False)
        return {"x": np.ascontiguousarray(image.transpose(2, 0, 1)[None]).astype(np.float32) / 255}
    # seed 1234 at 320 x 320 is the input of the upstream yolov8n_seed0_320 case
    return {"x": np.random.default_rng(args.seed).uniform(0, 1, (1, 3, h, w)).astype(np.float32)}


def run_mlx(model, inputs):
    return model(mx.array(inputs["x"].transpose(0, 2, 3, 1)).astype(model.dtype))


def run_reference(spec, state_dict, inputs, trace):
    """The reference's output as the MLX model gives it: (N, A, C), and a segmentation model's protos."""
    reference = yolo11 if "model.23.dfl.conv.weight" in state_dict else yolov8
    y, _ = reference.forward(state_dict, inputs["x"], trace, spec.config.get("kpt_shape"))
    if isinstance(y, tuple):
        y, protos = y
        return y.transpose(0, 2, 1), protos
    return y.transpose(0, 2, 1)
