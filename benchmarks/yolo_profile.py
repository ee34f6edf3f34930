"""Where YOLOv8's GPU time goes: each of its 23 layers timed alone, mlx-zoo's compiled form beside PyTorch.

    MLX_ENABLE_TF32=0 python benchmarks/yolo_profile.py --upstream ../shared/bench/upstream/python \
        --model yolov8n --batch 16 --dtypes float32 --json p.json

Each layer (upstream's ``model.N``) runs on the input the whole network gives it, as the user
path runs it (``zoo.compiled.CompiledForward`` over that layer, its BatchNorms folded) and as
ultralytics' module (torch eager, TF32 off), median of --repeats synchronised calls; then the
whole network both ways. Synthetic weights. Each per-layer time includes one synchronisation,
so they add up to more than the whole forward. Needs ultralytics (pip install 'mlx-zoo[bench]',
or a folder holding ultralytics/ on --upstream).
"""
from __future__ import annotations

import json

import numpy as np
from layer_timing import median_ms, mx_sync, parse, parser, torch_sync, write_json  # same folder

import zoo


def main() -> None:
    p = parser(__doc__, "ultralytics/", 640, "float32")
    p.add_argument("--model", default="yolov8n")
    p.add_argument("--batch", type=int, default=16)
    args = parse(p)
    import mlx.core as mx
    import torch

    from zoo.bench.cases import build_peer, nchw
    from zoo.compiled import CompiledForward
    from zoo.models.yolov8.model import Conv

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    sync = torch_sync(args.torch_device)

    rows = []
    for dtype in args.dtypes.split(","):
        model = zoo.load(args.model, weights="synthetic:0", dtype=dtype)
        peer = build_peer(args.model, 0)[0].to(args.torch_device, getattr(torch, dtype))
        x = np.random.default_rng(0).random((args.batch, args.size, args.size, 3), dtype=np.float32)
        mx_x = mx.array(x).astype(model.dtype)
        th_x = torch.from_numpy(nchw(x)).to(args.torch_device, getattr(torch, dtype))

        def record(name, mlx_fn, mlx_args, torch_fn):
            row = {"dtype": dtype, "layer": name, "mlx_ms": median_ms(lambda: mlx_fn(*mlx_args), mx_sync, args.repeats)}
            with torch.inference_mode():
                row["torch_ms"] = median_ms(torch_fn, sync, args.repeats)
            row["ratio"] = round(row["mlx_ms"] / row["torch_ms"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)

        record("whole network (user path)", model, [mx_x], lambda: peer(th_x))
        mx_outputs, th_outputs = [], []
        for i, ((sources, *_), layer, th_layer) in enumerate(zip(model.arch.layers, model.model.children_in_order(), peer.model)):
            pick = lambda outs, last: [last if j == -1 else outs[j] for j in sources] if sources != -1 else [last]  # noqa: E731
            mx_in = pick(mx_outputs, mx_outputs[-1] if mx_outputs else mx_x)
            th_in = pick(th_outputs, th_outputs[-1] if th_outputs else th_x)
            convs = [(m.conv, m.bn) for m in layer.modules() if isinstance(m, Conv)]
            compiled = CompiledForward(layer, layer, folds=convs)
            # a fresh list per call: ultralytics' Detect writes its results into the list it is given
            th_call = (lambda t=th_layer, a=th_in: t(list(a) if len(a) > 1 else a[0]))
            record(f"model.{i} {type(layer).__name__}", compiled, mx_in, th_call)
            out = compiled(*mx_in)
            mx.eval(out)
            mx_outputs.append(out)
            with torch.inference_mode():
                th_outputs.append(th_call())
        mx.clear_cache()
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
