"""Where LaMa's GPU time goes: each layer of the generator timed alone, MLX beside PyTorch.

    MLX_ENABLE_TF32=0 python benchmarks/lama_profile.py --upstream ../shared/bench/upstream/python \
        --size 512 --dtypes float16,float32 --json lama_profile.json

For each dtype: the generator's top-level layers (upstream's ``model.N``) and the parts of one
residual block (its FFC paths and the Fourier unit's steps), each timed alone on its own input
(median of --repeats synchronised calls; MLX eager and under ``mx.compile``, PyTorch eager), the
whole generator, and the user path (``model(image, mask)``, its compiled forward). Synthetic weights. The per-layer times include one synchronisation each,
so they add up to more than the whole forward.
"""
from __future__ import annotations

import json

import numpy as np
from layer_timing import median_ms, mx_sync, parse, parser, torch_sync, write_json  # same folder

import zoo  # zoo's process settings before MLX starts


def main() -> None:
    args = parse(parser(__doc__, "saicinpainting/ (upstream LaMa code)", 512, "float16,float32"))
    import mlx.core as mx
    import torch

    from zoo.bench.cases import build_peer, nchw
    from zoo.models.layers import irfft2_parts, rfft2_parts

    sync = torch_sync(args.torch_device)

    rows = []
    for dtype in args.dtypes.split(","):
        model = zoo.load("lama", weights="synthetic:0", dtype=dtype)
        peer = build_peer("lama", 0)[0].to(args.torch_device, getattr(torch, dtype))
        rng = np.random.default_rng(0)
        x = rng.random((1, args.size, args.size, 4), dtype=np.float32)
        mx_in = mx.array(x).astype(model.dtype)
        th_in = torch.from_numpy(nchw(x)).to(args.torch_device, getattr(torch, dtype))

        def record(name, mlx_fn, torch_fn):
            """mlx_fn: (function, its array arguments), compiled with the arguments as its inputs."""
            row = {"dtype": dtype, "layer": name}
            if mlx_fn is not None:
                fn, inputs = mlx_fn
                row["mlx_eager_ms"] = median_ms(lambda: fn(*inputs), mx_sync, args.repeats)
                compiled = mx.compile(fn)
                row["mlx_compiled_ms"] = median_ms(lambda: compiled(*inputs), mx_sync, args.repeats)
            if torch_fn is not None:
                with torch.no_grad():
                    row["torch_ms"] = median_ms(torch_fn, sync, args.repeats)
            rows.append(row)
            print(json.dumps(row), flush=True)

        record("whole generator", (model.generator, [mx_in]), lambda: peer(th_in))
        image, mask = mx_in[..., :3], mx_in[..., 3:]
        mx.eval(image, mask)
        record("user path model(image, mask) [eager column; compiled: the same, traced again]", (model, [image, mask]), None)
        mx_x, th_x = mx_in, th_in
        block_inputs = None
        for i, layer in enumerate(model.generator.model.children_in_order()):
            th_layer = peer.model[i]
            if i == 5:
                block_inputs = (mx_x, th_x)
            record(f"model.{i} {type(layer).__name__}",
                   (layer, [mx_x]), lambda th_layer=th_layer, a=th_x: th_layer(a))
            mx_x = layer(mx_x)
            mx.eval(mx_x)
            with torch.no_grad():
                th_x = th_layer(th_x)

        # one residual block's parts
        (mx_l, mx_g), (th_l, th_g) = block_inputs
        ffc, th_ffc = model.generator.model['5'].conv1.ffc, peer.model[5].conv1.ffc
        for path, a, ta in (("convl2l", mx_l, th_l), ("convl2g", mx_l, th_l), ("convg2l", mx_g, th_g),
                            ("convg2g", mx_g, th_g)):
            record(f"block.conv1.ffc.{path}", (ffc[path], [a]),
                   lambda p=path, ta=ta: getattr(th_ffc, p)(ta))
        st, th_st = ffc.convg2g, th_ffc.convg2g
        mx_h = st.conv1(mx_g)
        with torch.no_grad():
            th_h = th_st.conv1(th_g)
        mx.eval(mx_h)
        record("block.conv1.ffc.convg2g.conv1", (st.conv1, [mx_g]), lambda: th_st.conv1(th_g))
        record("block.conv1.ffc.convg2g.fu (matrix products)", (st.fu, [mx_h]), lambda: th_st.fu(th_h))
        parts = rfft2_parts(mx_h)
        mx.eval(parts)
        size = mx_h.shape[1:3]
        record("block.fu rfft2", (rfft2_parts, [mx_h]),
               lambda: torch.fft.rfftn(th_h.float(), dim=(-2, -1), norm="ortho"))
        record("block.fu conv+bn+relu", (lambda p: st.fu.relu(st.fu.bn(st.fu.conv_layer(p))), [parts]), None)
        record("block.fu irfft2", (lambda p: irfft2_parts(p, size), [parts]),
               lambda: torch.fft.irfftn(torch.fft.rfftn(th_h.float(), dim=(-2, -1), norm="ortho"),
                                        s=th_h.shape[-2:], dim=(-2, -1), norm="ortho"))
        record("block.conv1.ffc.convg2g.conv2", (st.conv2, [mx_h]), lambda: th_st.conv2(th_h))
        record("block.conv1 (FFC_BN_ACT)", (lambda a, b: model.generator.model['5'].conv1((a, b)), [mx_l, mx_g]),
               lambda: peer.model[5].conv1((th_l, th_g)))
        mx.clear_cache()
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
