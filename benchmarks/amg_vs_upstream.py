"""Segment everything: MLX ``sam.mask_generator(...).generate(img)`` against upstream MobileSAM's
``SamAutomaticMaskGenerator`` in ONE process, same weights, same image, interleaved rounds.

    python benchmarks/amg_vs_upstream.py --upstream ../shared/bench/upstream/python --device cuda
    python benchmarks/amg_vs_upstream.py --upstream ../shared/bench/upstream/python --device cpu \
        --size 256 --points-per-side 8 --rounds 2

Weights: ``crafted`` (default; tests/sam_crafted.py's prompt-responsive decoder on synthetic:SEED,
so each point gives its own masks and NMS keeps many: the post-processing does real work) or
``synthetic`` (random weights: near-uniform masks, NMS keeps about one). Image: the test scene
(tests/fixtures/mobilesam/amg_scene.png, shapes on a background) resized to SIZE x SIZE.
Both sides float32, TF32 off (MLX_ENABLE_TF32=0, torch's cudnn/matmul TF32 off). The upstream side
needs torch and torchvision (its batched_nms and resize); torch is imported before MLX (its cuDNN
first, as zoo.bench does). Each round times one whole ``generate`` per side (synchronised), after
one untimed warm-up call each; the sides alternate. Prints and optionally writes (--json) the
median ms, the ratio MLX / upstream and the mask counts (and how many MLX masks match an upstream
mask at IoU >= 0.98).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENE = ROOT / "tests" / "fixtures" / "mobilesam" / "amg_scene.png"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, metavar="DIR", help="folder holding mobile_sam/ (upstream code)")
    ap.add_argument("--upstream-fallback", action="append", default=[], metavar="DIR",
                    help="folder put last on sys.path: import-time stand-ins (e.g. ../shared/bench/upstream/stubs "
                         "for timm)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--weights", choices=("crafted", "synthetic"), default="crafted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=1024, help="image side in pixels (default 1024)")
    ap.add_argument("--points-per-side", type=int, default=32)
    ap.add_argument("--points-per-batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per side (default 5)")
    ap.add_argument("--torch-threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    if args.size < 16 or args.points_per_side < 1 or args.rounds < 1:
        ap.error("--size >= 16, --points-per-side >= 1 and --rounds >= 1")
    return args


def state_dict(kind: str, seed: int) -> dict[str, np.ndarray]:
    """The checkpoint both sides load, in the upstream naming."""
    from zoo.bench.cases import manifest_state_dict

    sd = manifest_state_dict("mobilesam", seed)
    if kind == "crafted":
        sys.path.insert(0, str(ROOT / "tests"))
        import sam_crafted

        sd = sam_crafted.prompt_responsive(sd, seed)
    return sd


def upstream_generator(sd, params, torch, device):
    from zoo.bench.cases import build_peer

    module, _ = build_peer("mobilesam", 0)  # MobileSAM build_sam_vit_t(), strict load
    module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
    module = module.to(device).eval()  # eval after .to: TinyViT caches its attention biases
    from mobile_sam import SamAutomaticMaskGenerator

    return SamAutomaticMaskGenerator(module, **params)


def mlx_generator(sd, params):
    from zoo import registry
    from zoo.models import mobilesam

    spec = registry.get_spec("mobilesam")
    model = registry.build(spec, registry.Weights(mobilesam.sanitize(sd, {}), "benchmark", {}))
    return model.mask_generator(**params)


def matched(ours: list[dict], theirs: list[dict]) -> int:
    """How many upstream masks have an MLX mask at IoU >= 0.98."""
    if not ours or not theirs:
        return 0
    a = np.stack([r["segmentation"].reshape(-1) for r in ours]).astype(np.float32)
    b = np.stack([r["segmentation"].reshape(-1) for r in theirs]).astype(np.float32)
    inter = b @ a.T
    union = b.sum(1)[:, None] + a.sum(1)[None] - inter
    return int(((inter / np.maximum(union, 1)).max(1) >= 0.98).sum())


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from zoo.bench.__main__ import import_torch, prepare_environment
    from zoo.errors import ZooError, command_line
    from zoo.files import check_output_file

    if args.json:
        try:
            with command_line():  # its refusal names --overwrite, as a command's
                check_output_file(args.json, "--json", overwrite=args.overwrite)
        except ZooError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    bench_args = SimpleNamespace(upstream=[args.upstream], upstream_fallback=args.upstream_fallback, tf32=False,
                                 device="gpu" if args.device == "cuda" else "cpu", torch_threads=args.torch_threads)
    prepare_environment(bench_args)
    torch, tdev = import_torch(bench_args, {})  # before mlx: torch's cuDNN first
    if torch is None or tdev.type != args.device:
        print(f"error: torch with {args.device} is needed for the upstream side", file=sys.stderr)
        return 1
    from PIL import Image

    from zoo import devices

    device = devices.use(bench_args.device)
    import mlx.core as mx

    image = np.asarray(Image.open(SCENE).convert("RGB").resize((args.size, args.size), Image.BILINEAR))
    params = {"points_per_side": args.points_per_side, "points_per_batch": args.points_per_batch}
    sd = state_dict(args.weights, args.seed)
    ours = mlx_generator(sd, params)
    from zoo.bench.cases import PeerMissing

    try:
        theirs = upstream_generator(sd, params, torch, tdev)
    except PeerMissing as e:
        print(f"error: upstream MobileSAM: {e}", file=sys.stderr)
        return 1

    def run_mlx():
        records = ours.generate(image)
        mx.synchronize()
        return records

    def run_upstream():
        with torch.no_grad():
            records = theirs.generate(image)
        if tdev.type == "cuda":
            torch.cuda.synchronize()
        return records

    sides = {"mlx": run_mlx, "upstream": run_upstream}
    outputs = {name: fn() for name, fn in sides.items()}  # warm-up: compile traces, cuDNN autotuning
    times = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, fn in sides.items():
            start = time.perf_counter()
            outputs[name] = fn()
            times[name].append((time.perf_counter() - start) * 1000)
    median = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "what": "segment everything: MLX mask_generator().generate vs upstream MobileSAM SamAutomaticMaskGenerator, "
                "one process, interleaved rounds, whole generate() each, float32, TF32 off",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": {"mlx": devices.describe(), "torch": str(tdev) + (f" ({torch.cuda.get_device_name()})"
                                                                     if tdev.type == "cuda" else "")},
        "versions": {"python": platform.python_version(), "mlx": mx.__version__, "torch": torch.__version__,
                     "numpy": np.__version__},
        "mlx_device": device, "weights": f"{args.weights} (seed {args.seed})", "image": f"{args.size}x{args.size}",
        "params": params, "rounds": args.rounds,
        "ms": {name: [round(t, 2) for t in ts] for name, ts in times.items()},
        "median_ms": {name: round(m, 2) for name, m in median.items()},
        "ratio_mlx_over_upstream": round(median["mlx"] / median["upstream"], 4),
        "masks": {name: len(out) for name, out in outputs.items()},
        "upstream_masks_matched_iou_0.98": matched(outputs["mlx"], outputs["upstream"]),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        from zoo.files import write_text

        write_text(args.json, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
