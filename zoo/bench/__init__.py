"""``python -m zoo.bench``: every model against its upstream PyTorch implementation, in one process.

Per case (model, batch, dtype) three variants run in interleaved rounds on the same
synthetic weights and the same input: ``eager`` (the MLX network called op by op),
``user`` (what ``model(x)``, ``predict``, ``set_image``/``predict`` and ``inpaint`` run:
the network through zoo.compiled) and ``torch`` (the upstream module, eval, under
``torch.inference_mode()``). Every call is synchronised and timed alone. Reported per
variant: p50/p90 ms, img/s, peak memory above what was in use before the call, achieved
TFLOP/s (FLOPs counted once on the torch peer with FlopCounterMode: convolutions and
matrix products, not element-wise ops or FFTs), and a sanity error
max|mlx - torch| / max|torch| of the outputs. ``cases.py`` has the models and peers,
``measure.py`` the timing.
"""
