"""What zoo.validate.compare costs beside the two forwards it compares.

The issue's bound, for a 25M-parameter model at 224 px: compare (both modes) takes under 3x the
time of one forward on the device in the dtype plus one forward on the CPU in float64, and its
peak memory stays under 2x one forward's (the records live on the host). The model: zoo's
ResNet-50 with synthetic weights (25.6M parameters), or any registry name taking an NHWC image.

    MLX_ENABLE_TF32=0 python benchmarks/compare_cost.py --device gpu --dtype float32
    python benchmarks/compare_cost.py --device gpu --dtype float16 --json cost.json
    python benchmarks/compare_cost.py --device gpu --module tests/any_models.py:unet --input 1,8,8,4 --input 1 --input 1,3,6
    python benchmarks/compare_cost.py --device cpu --model resnet18 --size 32   # a smoke check of the script

Forwards run as compare runs them: eager (zoo.compiled.eager), the parameters cast to the dtype,
inside mx.stream. Times are the best of --repeat runs after one warm-up. Memory is MLX's peak
(mx.get_peak_memory, reset before each measurement): on CUDA it counts the CPU reference's
arrays too (MLX allocates them in unified memory), so "compare peak / one forward's" is an upper
bound of the device's share there.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

import zoo
import zoo.validate
from zoo import devices
from zoo.compiled import eager
from zoo.cli.validate import load_model, make_inputs
from zoo.validate.modules import arrays, cast, describe_inputs, evaluation_mode, inputs_on_host, parameters_as

TIME_BOUND, MEMORY_BOUND = 3.0, 2.0


def best_time(fn, repeat: int) -> float:
    fn()  # warm-up: kernels built, buffers cached
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def peak(fn) -> int:
    mx.synchronize()
    mx.clear_cache()
    mx.reset_peak_memory()
    fn()
    return mx.get_peak_memory()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="a registry name taking an NHWC image (synthetic weights)")
    parser.add_argument("--size", type=int, default=224, help="the image side for --model")
    parser.add_argument("--module", metavar="PKG.MOD:FACTORY", help="any MLX model instead, as python -m zoo.validate --module")
    parser.add_argument("--input", action="append", metavar="SHAPE[:int32[:HIGH]]", help="--module's inputs")
    parser.add_argument("--device", choices=("gpu", "cpu"))
    parser.add_argument("--dtype", choices=tuple(devices.DTYPES), default="float32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="append the result as one JSON line")
    args = parser.parse_args()

    device = mx.gpu if devices.use(args.device) == "gpu" else mx.cpu
    if args.module:
        model, inputs = load_model(args.module), make_inputs(args.input or [], 0)
    else:
        model = zoo.load(args.model, weights="synthetic:0")
        inputs = [np.random.default_rng(0).standard_normal((1, args.size, args.size, 3)).astype(np.float32)]
    parameters = sum(v.size for _, v in tree_flatten(model.parameters()))
    dtype = devices.DTYPES[args.dtype]

    def forward(on, as_dtype):
        def run():
            with mx.stream(on), eager(), parameters_as(model, as_dtype), evaluation_mode(model):
                mx.eval(arrays(model(*cast(inputs_on_host(inputs), as_dtype))))
        return run

    def compare():
        zoo.validate.compare(model, *inputs, device=args.device, dtype=args.dtype)

    test_time = best_time(forward(device, dtype), args.repeat)
    reference_time = best_time(forward(mx.cpu, mx.float64), args.repeat)
    compare_time = best_time(compare, args.repeat)
    test_peak, reference_peak, compare_peak = (peak(forward(device, dtype)), peak(forward(mx.cpu, mx.float64)),
                                               peak(compare))
    result = {
        "model": args.module or args.model, "input": describe_inputs(tuple(inputs)), "parameters": parameters, "size": args.size, "device": devices.describe(),
        "dtype": args.dtype, "tf32": devices.tf32_enabled(), "mlx": mx.__version__, "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "forward_s": round(test_time, 4), "reference_forward_s": round(reference_time, 4),
        "compare_s": round(compare_time, 4), "time_ratio": round(compare_time / (test_time + reference_time), 3),
        "forward_peak_mib": round(test_peak / 2**20, 1), "reference_forward_peak_mib": round(reference_peak / 2**20, 1),
        "compare_peak_mib": round(compare_peak / 2**20, 1), "memory_ratio": round(compare_peak / test_peak, 3),
    }
    result["within_bounds"] = result["time_ratio"] < TIME_BOUND and result["memory_ratio"] < MEMORY_BOUND
    line = json.dumps(result)
    print(line)
    if args.json:
        with open(args.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
