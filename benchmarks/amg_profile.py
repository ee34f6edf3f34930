"""Where segment-everything's time goes (MLX side): each stage timed with mx.eval + perf_counter.

    python benchmarks/amg_profile.py --device gpu --size 1024 --points-per-side 32

The stages are wrapped so that each evaluates its result before the clock stops (this adds
syncs: the staged total is above the plain one, which is printed first)."""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import amg_vs_upstream as bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--points-per-side", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    from zoo import devices
    devices.use(args.device)
    import mlx.core as mx
    from PIL import Image

    from zoo.models.mobilesam import amg, automatic_mask_generator as amg_mod
    image = np.asarray(Image.open(bench.SCENE).convert("RGB").resize((args.size, args.size), Image.BILINEAR))
    gen = bench.mlx_generator(bench.state_dict("crafted", 0), {"points_per_side": args.points_per_side})
    gen.generate(image)
    plain = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        out = gen.generate(image)
        mx.synchronize()
        plain.append((time.perf_counter() - t) * 1000)
    totals = collections.defaultdict(float)
    calls = collections.Counter()

    def wrap(owner, name, label):
        fn = getattr(owner, name, None)
        if fn is None:
            return

        def timed(*a, **k):
            mx.synchronize()
            t = time.perf_counter()
            r = fn(*a, **k)
            arrays = [x for x in (r if isinstance(r, (tuple, list)) else [r]) if isinstance(x, mx.array)]
            if arrays:
                mx.eval(*arrays)
            mx.synchronize()
            totals[label] += (time.perf_counter() - t) * 1000
            calls[label] += 1
            return r
        setattr(owner, name, timed)

    p = gen.predictor
    wrap(p, "set_image", "encoder (set_image)")
    wrap(p, "decode", "decode")
    wrap(gen, "_upsample", "upsample")
    for name in ("stability_score", "batched_mask_to_box", "is_box_near_crop_edge", "rle_to_mask",
                 "mask_columns_to_rle"):
        wrap(amg, name, name)
    wrap(amg_mod, "_nms", "nms")
    wrap(gen, "_rles", "_rles (all)")
    wrap(gen, "records", "records")
    staged = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        gen.generate(image)
        mx.synchronize()
        staged.append((time.perf_counter() - t) * 1000)
    result = {"plain_ms": [round(x, 1) for x in plain], "masks": len(out),
              "staged_total_ms": [round(x, 1) for x in staged],
              "per_generate_ms": {k: round(v / args.rounds, 2) for k, v in totals.items()},
              "calls_per_generate": {k: v // args.rounds for k, v in calls.items()}}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
