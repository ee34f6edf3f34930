import mlx.core as mx
import numpy as np

from zoo.errors import ZooError
from zoo.validate.reference import resnet


def add_arguments(parser):
    parser.add_argument("--size", type=int, default=224, help="input height and width (default 224)")


def make_inputs(spec, args):
    if not 1 <= args.size <= 4096:
        raise ZooError(f"--size {args.size}: use a side from 1 to 4096 pixels, e.g. 224")
    # seed 1234 at 224 is the input of the upstream resnet18 reference case
    x = np.random.default_rng(args.seed).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    return {"x": x}


def run_mlx(model, inputs):
    return model(mx.array(inputs["x"].transpose(0, 2, 3, 1)).astype(model.dtype))


def run_reference(spec, state_dict, inputs, trace):
    return resnet.forward(state_dict, inputs["x"], trace)
