"""python -m zoo.bench: MLX (eager and the user path) against upstream PyTorch, same process.

    python -m zoo.bench --upstream ../shared/bench/upstream/python           # every model, GPU if MLX has one
    python -m zoo.bench --models resnet50,yolov8n --dtypes float16 --batches 1,8 --json out.json
    python -m zoo.bench --device cpu --dtypes float32 --batches 1 --lama-size 256

float32 is strict (TF32 off in MLX and in torch) unless --tf32. The torch peers: torchvision
(pip install torchvision), ultralytics (pip install 'mlx-zoo[bench]', or a folder on
--upstream), MobileSAM and LaMa from the folder given with --upstream (holding mobile_sam/
and saicinpainting/). Without a peer a case still times the MLX variants.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile

from zoo.bench.cases import MODELS
from zoo.errors import ZooError, command_line
from zoo.files import check_output_file

VARIANTS = ("eager", "user", "torch")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m zoo.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma list of %(default)s (mobilesam = both SAM cases)")
    ap.add_argument("--dtypes", default="float16,float32", help="comma list of float16, float32, bfloat16")
    ap.add_argument("--batches", help="batch sizes of resnet50 and the YOLO models, e.g. 1,8 "
                                      "(default: resnet50 1,32; yolov8n/s, yolo11n/s, yolov8n-seg, yolo11n-pose 1,16); "
                                      "the others run batch 1")
    ap.add_argument("--device", choices=("gpu", "cpu"), help="default: the GPU when MLX has one (torch: cuda/cpu)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 for float32 on both sides (default: strict)")
    ap.add_argument("--upstream", action="append", default=[], metavar="DIR",
                    help="folder put first on sys.path for the peers (mobile_sam/, saicinpainting/, ultralytics/)")
    ap.add_argument("--upstream-fallback", action="append", default=[], metavar="DIR",
                    help="folder put last on sys.path: import-time stand-ins for packages not installed")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="subset of %(default)s")
    ap.add_argument("--torch-compile", default="", metavar="MODES",
                    help="also time torch.compile(peer, mode=M) for each comma-separated mode, e.g. "
                         "reduce-overhead,max-autotune-no-cudagraphs: the stronger peer (compiling takes minutes)")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed rounds per case (default 10)")
    ap.add_argument("--warmup-seconds", type=float, help="interleaved warm-up per case (default: 3 GPU, 1 CPU)")
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=500)
    ap.add_argument("--lama-size", type=int, default=512, help="LaMa input side (default 512)")
    ap.add_argument("--yolo-torch-fused", action="store_true",
                    help="torch YOLO peer Conv+BN-fused (model.fuse(), what ultralytics predict runs)")
    ap.add_argument("--torch-threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0, help="synthetic weight seed")
    ap.add_argument("--json", help="full report (default: bench-DEVICE-TIME.json)")
    ap.add_argument("--rows", help="also write the result rows alone, a JSON list (benchmarks/results/gpu.json)")
    ap.add_argument("--overwrite", action="store_true", help="replace existing --json/--rows files")
    args = ap.parse_args(argv)
    if args.json is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        args.json = f"bench-{args.device or 'default'}-{stamp}.json"
    for flag, path in (("--json", args.json), ("--rows", args.rows)):
        if path is not None:
            check_output_file(path, flag, overwrite=args.overwrite)
    models = []
    for m in (m.strip() for m in args.models.split(",") if m.strip()):
        expanded = ["mobilesam-encoder", "mobilesam-decoder"] if m == "mobilesam" else [m]
        if any(e not in MODELS for e in expanded):
            raise ZooError(f"--models: unknown model {m!r}: use {', '.join(MODELS)} or mobilesam")
        models += [e for e in expanded if e not in models]
    args.model_list = models
    args.dtype_list = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not args.dtype_list or any(d not in ("float16", "float32", "bfloat16") for d in args.dtype_list):
        raise ZooError(f"--dtypes {args.dtypes!r}: use a comma list of float16, float32, bfloat16")
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.variant_list or any(v not in VARIANTS for v in args.variant_list):
        raise ZooError(f"--variants {args.variants!r}: use a subset of {','.join(VARIANTS)}")
    args.compile_modes = [m.strip() for m in args.torch_compile.split(",") if m.strip()]
    known_modes = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
    if any(m not in known_modes for m in args.compile_modes):
        raise ZooError(f"--torch-compile {args.torch_compile!r}: use a comma list of {', '.join(known_modes)}")
    try:
        args.batch_list = [int(b) for b in args.batches.split(",")] if args.batches else None
    except ValueError:
        raise ZooError(f"--batches {args.batches!r}: use a comma list of positive integers, e.g. 1,16") from None
    if args.batch_list is not None and (not args.batch_list or min(args.batch_list) < 1):
        raise ZooError(f"--batches {args.batches!r}: use a comma list of positive integers, e.g. 1,16")
    if args.lama_size % 8 or args.lama_size < 16:
        raise ZooError(f"--lama-size {args.lama_size}: use a multiple of 8 of at least 16, e.g. 512")
    for folder in args.upstream + args.upstream_fallback:
        if not os.path.isdir(folder):
            raise ZooError(f"--upstream {folder}: no such folder")
    if args.seconds <= 0 or args.min_rounds < 1 or args.max_rounds < args.min_rounds:
        raise ZooError("--seconds must be positive and 1 <= --min-rounds <= --max-rounds")
    return args


def prepare_environment(args) -> dict:
    """Before torch or mlx is imported: TF32 setting, peer import paths, ultralytics kept offline."""
    notes = {}
    os.environ["MLX_ENABLE_TF32"] = "1" if args.tf32 else "0"  # read by MLX at its first float32 matmul/conv
    sys.path[:0] = [os.path.abspath(d) for d in args.upstream]
    sys.path += [os.path.abspath(d) for d in args.upstream_fallback]
    settings = tempfile.mkdtemp(prefix="zoo_bench_")
    os.environ.setdefault("YOLO_OFFLINE", "true")
    os.environ.setdefault("YOLO_VERBOSE", "false")
    os.environ.setdefault("YOLO_CONFIG_DIR", settings)  # ultralytics writes its settings file here, not in ~
    os.environ.setdefault("MPLCONFIGDIR", settings)
    return notes


def import_torch(args, notes):
    """torch first, with its cuDNN loaded, before MLX's CUDA backend brings its own; None without torch."""
    try:
        import torch
    except ImportError as e:
        notes["torch"] = f"not importable ({e}): MLX variants only"
        return None, None
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    want_gpu = args.device != "cpu"
    if want_gpu and torch.cuda.is_available():
        torch.backends.cudnn.version()
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        return torch, torch.device("cuda")
    return torch, torch.device("cpu")


def main(argv=None) -> int:
    with command_line():  # its errors name flags (--overwrite), not keyword arguments
        return run_command(sys.argv[1:] if argv is None else argv)


def run_command(argv) -> int:
    try:
        args = parse_args(argv)
        notes = prepare_environment(args)
        torch, tdev = import_torch(args, notes)
        from zoo import devices

        device = devices.use(args.device)
        if torch is not None and (device == "gpu") != (tdev.type == "cuda"):
            notes["torch"] = f"MLX runs on {device} but torch on {tdev.type}: no torch variant"
            torch = None
        from zoo.bench.run import run

        return run(args, device, torch, tdev, notes)
    except ZooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
