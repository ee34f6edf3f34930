"""ResNet parity case: a random NCHW input (seed 1234 at 224 is the upstream resnet18 case's), or
``--image``: a photo preprocessed as torchvision's classification transform (shorter side to
size * 256/224, centre crop ``--size``, ImageNet normalisation)."""
import mlx.core as mx
import numpy as np

from zoo.errors import ZooError, option
from zoo.images import center_crop, load_image, resize_shorter_side
from zoo.validate.reference import resnet


def add_arguments(parser):
    parser.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    parser.add_argument("--image", help="image file instead of the random input of --seed")


def make_inputs(spec, args):
    if not 1 <= args.size <= 4096:
        raise ZooError(f"{option('size', args.size)}: use a side from 1 to 4096 pixels, e.g. 224")
    if args.image:
        p = spec.preprocess
        image = load_image(args.image)
        image = center_crop(resize_shorter_side(image, round(args.size * p["resize"] / p["crop"])), args.size)
        x = (image.astype(np.float32) / 255.0 - np.float32(p["mean"])) / np.float32(p["std"])
        return {"x": np.ascontiguousarray(x.transpose(2, 0, 1)[None])}
    x = np.random.default_rng(args.seed).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    return {"x": x}


def run_mlx(model, inputs):
    return model(mx.array(inputs["x"].transpose(0, 2, 3, 1)).astype(model.dtype))


def run_reference(spec, state_dict, inputs, trace):
    return resnet.forward(state_dict, inputs["x"], trace)
