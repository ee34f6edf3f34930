"""The test session draws each synthetic checkpoint once.

zoo.load(..., weights="synthetic") spends most of its time in numpy's generator (float64 draws of
every tensor: ~4/5 of a ResNet-18 load), and the suite loads the same few checkpoints hundreds of
times. memoise() makes zoo.weights.synthetic.synthetic_state_dict keep its recent results (up to
CACHE_BYTES) and hand out copies: a caller may change its arrays and its dict freely, and the
first call of each (manifest, seed) is the real recipe, so every value is the one it would draw.
"""
from collections import OrderedDict

from zoo.weights import synthetic

CACHE_BYTES = 640 * 2**20  # resnet50, lama, mobilesam and the small YOLOs together; yolov8l/x come and go


def memoise() -> None:
    draw = synthetic.synthetic_state_dict
    kept: OrderedDict = OrderedDict()  # (seed, manifest items) -> state dict, least recently used first

    def synthetic_state_dict(manifest, seed):
        key = (seed, tuple(sorted(manifest.items())))
        if key in kept:
            kept.move_to_end(key)
        else:
            kept[key] = draw(manifest, seed)
            while len(kept) > 1 and sum(a.nbytes for sd in kept.values() for a in sd.values()) > CACHE_BYTES:
                kept.popitem(last=False)
        return {name: a.copy() for name, a in kept[key].items()}

    synthetic.synthetic_state_dict = synthetic_state_dict
