"""ResNet forward time: zoo (MLX) against torchvision (PyTorch) on the same GPU, same weights.

    python benchmarks/resnet_vs_torch.py [--models resnet18 resnet50] [--batches 1 16] [--dtypes float32 float16]

Both sides get the same synthetic weights (speed does not depend on trained
values) and a random NHWC / NCHW input; each figure is the median of timed runs
after a warm-up, synchronised (mx.eval / torch.cuda.synchronize). MLX is timed
eager and under mx.compile. Needs torch + torchvision with CUDA for the peer.
"""
from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np

import zoo
from zoo import registry


def median_ms(fn, repeats: int, warmup_s: float = 1.0) -> float:
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:  # GPUs idle at low clocks: warm up by time, not by count
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def torch_model(name: str, state_dict: dict, dtype: str):
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(weights=None)
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state_dict.items()})
    return model.cuda().eval().to(getattr(torch, dtype))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    import torch

    zoo.devices.use("gpu")
    print(f"device: {zoo.devices.describe()}, MLX {mx.__version__}, torch {torch.__version__}, TF32 "
          f"{'on' if zoo.devices.tf32_enabled() else 'off'} (MLX), torch allow_tf32={torch.backends.cudnn.allow_tf32}")
    print(f"{'model':<10} {'dtype':<8} {'batch':>5} {'mlx ms':>8} {'mlx compiled':>12} {'torch ms':>9} {'mlx/torch':>9} {'compiled/torch':>14}")
    for name in args.models:
        spec = registry.get_spec(name)
        weights = registry.read_weights(spec, "synthetic:0")
        for dtype in args.dtypes:
            model = registry.build(spec, weights, dtype)
            compiled = mx.compile(model)
            peer = torch_model(name, weights.state_dict, dtype)
            for batch in args.batches:
                x = np.random.default_rng(0).standard_normal((batch, 224, 224, 3)).astype(np.float32)
                xm = mx.array(x).astype(model.dtype)
                xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).cuda().to(getattr(torch, dtype))

                def run_torch():
                    with torch.inference_mode():
                        peer(xt)
                    torch.cuda.synchronize()

                mlx_ms = median_ms(lambda: mx.eval(model(xm)), args.repeats)
                comp_ms = median_ms(lambda: mx.eval(compiled(xm)), args.repeats)
                torch_ms = median_ms(run_torch, args.repeats)
                print(f"{name:<10} {dtype:<8} {batch:>5} {mlx_ms:>8.2f} {comp_ms:>12.2f} {torch_ms:>9.2f} "
                      f"{mlx_ms / torch_ms:>9.2f} {comp_ms / torch_ms:>14.2f}")


if __name__ == "__main__":
    main()
