"""MobileSAM parity case: ``SamPredictor.set_image`` + ``predict`` on both sides.

The default is the upstream reference case: the random 640x480 image of
``np.random.default_rng(1234)`` (``--seed``), a foreground point at (320, 240) and
a background point at (100, 400), three masks. ``--image``, ``--point``, ``--box``
and ``--single-mask`` change it. The output compared as ``output`` is
(mask logits at the original size, IoU predictions, low-res logits).
"""
import mlx.core as mx
import numpy as np

from zoo.images import load_image
from zoo.models.mobilesam.predictor import check_prompts, parse_box, parse_point
from zoo.validate.reference import mobilesam as reference

IMAGE_SHAPE = (480, 640, 3)
DEFAULT_POINTS = ((320.0, 240.0, 1), (100.0, 400.0, 0))


def add_arguments(parser):
    parser.add_argument("--image", help="image file (default: the upstream case's random 640x480 image of --seed)")
    parser.add_argument("--point", action="append", default=[], metavar="X,Y[,LABEL]",
                        help="prompt point in image pixels, label 1 (foreground, default) or 0; repeatable "
                             "(default without --point/--box: 320,240,1 and 100,400,0)")
    parser.add_argument("--box", metavar="X1,Y1,X2,Y2", help="box prompt in image pixels")
    parser.add_argument("--single-mask", action="store_true", help="multimask_output=False (one mask)")


def make_inputs(spec, args):
    if args.image:
        image = load_image(args.image)
    else:
        image = np.random.default_rng(args.seed).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)
    points = [parse_point(p) for p in args.point] or ([] if args.box else DEFAULT_POINTS)
    coords, labels, box, _ = check_prompts(
        image.shape[:2], np.array([p[:2] for p in points]) if points else None,
        np.array([p[2] for p in points]) if points else None, parse_box(args.box) if args.box else None)
    inputs = {"image": image, "multimask_output": np.array(not args.single_mask)}
    for name, value in (("point_coords", coords), ("point_labels", labels), ("box", box)):
        if value is not None:
            inputs[name] = value
    return inputs


def run_mlx(model, inputs):
    predictor = model.predictor()
    predictor.set_image(inputs["image"])
    masks, scores, low_res = predictor.predict(inputs.get("point_coords"), inputs.get("point_labels"), inputs.get("box"),
                                               multimask_output=bool(inputs["multimask_output"]), return_logits=True)
    return mx.array(masks), mx.array(scores), mx.array(low_res)


def run_reference(spec, state_dict, inputs, trace):
    return reference.predict(state_dict, inputs["image"], inputs.get("point_coords"), inputs.get("point_labels"),
                             inputs.get("box"), multimask_output=bool(inputs["multimask_output"]), trace=trace,
                             img_size=spec.preprocess["image_size"])
