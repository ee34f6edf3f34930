"""A compiled forward split into compiled units, at most DEPTH of them in flight, against the one-trace
user path and PyTorch (an experiment on MLX's CUDA backend: docs/speed-gpu.md, "Memory: what else was tried").

    MLX_ENABLE_TF32=0 PYTHONPATH=../shared/bench/upstream/python python benchmarks/staged_forward.py \
        yolov8n:16:float32 resnet50:32:float16 ...

Each YOLOv8 layer (ResNet: the stem, each block, the head) is its own ``CompiledForward`` with its
BatchNorm folds; a unit's output is scheduled (``mx.async_eval``) and the unit DEPTH back is waited
for (``mx.eval``), so that MLX, which keeps every op's inputs until its CUDA graph has run, holds
about DEPTH units' activations (DEPTH 0: no scheduling, all lazy until the end). Per case (model:batch:dtype;
zoo.bench's inputs and peers, the YOLOv8 peer Conv+BN-fused): after 5 warm-up calls the peak of
one call above the memory in use before it, then the median of 30 synchronised calls; PyTorch
with TF32 off. Models: resnet50, yolov8n, yolov8s.
"""
import sys
import time
from collections import deque

import torch  # its cuDNN before MLX loads one (../shared/device/README.md)

torch.backends.cudnn.version()
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from zoo.bench.cases import Case, IMAGE_SIZE, MlxSide, TorchSide, case_inputs  # noqa: E402
from zoo.compiled import CompiledForward  # noqa: E402

MIB = 2**20


def fold_entries(model):
    f = model.compiled.folds
    return [(c, p, f.makers[k]) if k in f.makers else (c, p) for k, (c, p) in f.pairs.items()]


def unit(fn, modules, entries):
    mods = modules if isinstance(modules, list) else [modules]
    inside = {id(m) for mod in mods for m in mod.modules()}
    return CompiledForward(fn, mods, folds=[e for e in entries if id(e[0]) in inside])


class Pacer:
    """Schedules each unit's output and waits for the one ``depth`` units back (0: does nothing)."""

    def __init__(self, depth):
        self.depth, self.q = depth, deque()

    def __call__(self, out):
        if self.depth:
            mx.async_eval(out)
            self.q.append(out)
            while len(self.q) > self.depth:
                mx.eval(self.q.popleft())
        return out


def staged_yolo(model):
    entries = fold_entries(model)
    layers = model.model.children_in_order()
    units = [unit(layer, layer, entries) for layer in layers]
    needed = model.read_later

    def run(x, depth):
        pace, saved = Pacer(depth), {}
        for i, ((inputs, *_), u) in enumerate(zip(model.arch.layers, units)):
            x = pace(u(x) if inputs == -1 else u(*(x if j == -1 else saved[j] for j in inputs)))
            if i in needed:
                saved[i] = x
        return x
    return run


def staged_resnet(model):
    entries = fold_entries(model)
    stem = unit(lambda x: model.maxpool(model.stem(x)), [model.conv1, model.bn1], entries)
    blocks = [unit(b, b, entries) for i in range(1, 5) for b in model[f"layer{i}"].children_in_order()]
    head = unit(model.forward_head, [model.fc], entries)

    def run(x, depth):
        pace = Pacer(depth)
        x = pace(stem(x))
        for b in blocks:
            x = pace(b(x))
        return pace(head(x))
    return run


def measure(fn, n=30):
    for _ in range(5):
        mx.eval(fn())
    mx.synchronize()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    mx.eval(fn())
    peak = (mx.get_peak_memory() - before) / MIB
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        mx.eval(fn())
        ts.append(time.perf_counter() - t)
    return peak, 1e3 * float(np.median(ts))


def measure_torch(m, x, n=30):
    dev = x.device
    with torch.inference_mode():
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        m(x)
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated(dev) - before) / MIB
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            m(x)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
    return peak, 1e3 * float(np.median(ts))


def main():
    depths = (1, 2, 3, 0)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for spec in sys.argv[1:]:
        name, batch, dtype = spec.split(":")
        case = Case(name, int(batch), dtype, IMAGE_SIZE[name])
        inputs = case_inputs(case)
        side = MlxSide(name, dtype, 0)
        fn, args, _ = side.call(case, inputs)
        run = staged_yolo(side.model) if name.startswith("yolo") else staged_resnet(side.model)
        tside = TorchSide(name, dtype, torch.device("cuda"), 0, yolo_fused=True)
        tfn, targs, _ = tside.call(case, inputs)
        tpeak, tms = measure_torch(tfn, targs[0])
        rows = [("whole", *measure(lambda: fn(*args)))]
        for d in depths:
            rows.append((f"depth {d}", *measure(lambda: run(args[0], d))))
        rows.append(("whole again", *measure(lambda: fn(*args))))
        tpeak2, tms2 = measure_torch(tfn, targs[0])
        ref = np.array(fn(*args).astype(mx.float32))
        got = np.array(run(args[0], 1).astype(mx.float32))
        print(f"{spec}: torch {tpeak:.0f} MiB {tms:.2f} ms (again {tms2:.2f}); staged-vs-whole max err "
              f"{np.abs(ref - got).max():.2e}")
        for label, peak, ms in rows:
            print(f"  {label:12s} {peak:8.0f} MiB ({peak / tpeak:5.2f}x)  {ms:7.2f} ms ({ms / tms:5.2f}x)")
        side = tside = None  # free this case's arrays before the next
        mx.clear_cache()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
