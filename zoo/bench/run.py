"""The benchmark loop: cases in dtype-major order, one JSON report rewritten after every case."""
from __future__ import annotations

import datetime
import gc
import importlib
import json
import math
import os
import platform
import sys
import warnings

import mlx.core as mx
from tqdm import tqdm

from zoo import devices
from zoo.bench import cases as C
from zoo.bench import measure as M
from zoo.files import write_text


def case_list(args) -> list[C.Case]:
    out = []
    for dtype in args.dtype_list:
        for model in args.model_list:
            batches = (args.batch_list or C.BATCHED[model]) if model in C.BATCHED else (1,)
            size = args.lama_size if model == "lama" else C.IMAGE_SIZE.get(model, 1024)
            out += [C.Case(model, b, dtype, size) for b in batches]
    return out


def device_name(device: str, tdev) -> str:
    if device == "gpu":
        try:
            return mx.device_info().get("device_name") or devices.describe()
        except (AttributeError, RuntimeError):
            return devices.describe()
    return platform.processor() or platform.machine()


def environment(args, device, torch, notes) -> dict:
    versions = {"mlx": mx.__version__, "python": platform.python_version(), "numpy": importlib.import_module("numpy").__version__}
    if torch is not None:
        versions["torch"] = torch.__version__
        for name in ("torchvision", "ultralytics"):
            module = sys.modules.get(name)
            if module is not None:
                versions[name] = getattr(module, "__version__", "?")
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "device": device_name(device, None), "mlx_device": devices.describe(), "versions": versions,
            "tf32": bool(args.tf32), "platform": platform.platform(), "argv": sys.argv[1:],
            "mlx_environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("MLX_", "ZOO_"))},
            "upstream": args.upstream, "notes": notes}


def row_of(result: dict, env: dict, compile_modes=()) -> dict:
    """A benchmarks/results row: the user path (mlx_ms) against torch eager (and torch.compile), p50s."""
    v = result["variants"]
    row = {"model": result["model"], "batch": result["batch"], "dtype": result["dtype"], "device": env["device"],
           "mlx_ms": v.get("user", {}).get("p50_ms"), "torch_ms": v.get("torch", {}).get("p50_ms"),
           "mlx_eager_ms": v.get("eager", {}).get("p50_ms"),
           "mlx_p90_ms": v.get("user", {}).get("p90_ms"), "torch_p90_ms": v.get("torch", {}).get("p90_ms"),
           "mlx_peak_extra_mib": v.get("user", {}).get("peak_extra_mib"),
           "torch_peak_extra_mib": v.get("torch", {}).get("peak_extra_mib"),
           "ratio": result.get("ratio_user"),
           **{f"torch_compile_ms:{m}": v.get(f"torch-compile:{m}", {}).get("p50_ms") for m in compile_modes},
           **{f"ratio_vs_compile:{m}": result.get(f"ratio_user_vs_compile:{m}") for m in compile_modes},
           "tf32": env["tf32"], "date": env["date"],
           "mlx": env["versions"]["mlx"], "torch": env["versions"].get("torch")}
    return row


def run_case(case: C.Case, args, mlx_side, torch_side, tdev, flops_cache: dict, embeddings: dict) -> dict:
    inputs = C.case_inputs(case)
    result = {"case": case.name, "model": case.model, "batch": case.batch, "dtype": case.dtype,
              "input_side": case.size, "variants": {}}
    embedding = None
    if case.model == "mobilesam-decoder":
        embedding = embeddings.get(case.dtype)
        if embedding is None:
            embedding = encoder_embedding(mlx_side, torch_side)
            embeddings[case.dtype] = embedding
    fn, xs, mlx_out = mlx_side.call(case, inputs, embedding)
    variants = []
    if "eager" in args.variant_list:
        variants.append(M.Variant("eager", M.mlx_runner(fn, xs, eager=True), "mlx"))
    if "user" in args.variant_list:
        variants.append(M.Variant("user", M.mlx_runner(fn, xs, eager=False), "mlx"))
    flops = None
    if torch_side is not None:
        tfn, txs, torch_out = torch_side.call(case, inputs, embedding)
        key = (case.model, case.size)
        if key not in flops_cache:
            one = C.Case(case.model, 1, case.dtype, case.size)
            flops_cache[key] = peer_flops(torch_side, one, embedding)
        flops = flops_cache[key] * case.batch if flops_cache[key] else None
        if "torch" in args.variant_list:
            variants.append(M.Variant("torch", M.torch_runner(tfn, txs, tdev), "torch"))
        for mode in args.compile_modes:
            variants.append(M.Variant(f"torch-compile:{mode}", M.torch_runner(compiled(tfn, mode), txs, tdev),
                                      "torch"))
    result["flops"] = flops
    result["rounds"] = M.run_rounds(variants, tdev, args.seconds, args.warmup_seconds, args.min_rounds,
                                    args.max_rounds)
    for v in variants:
        result["variants"][v.name] = M.summary(v, case.batch, flops)
    by_name = {v.name: v for v in variants}
    torch_v = by_name.get("torch")
    if torch_v is not None and torch_v.out is not None:
        ref = torch_out(torch_v.out)
        outs = {n: mlx_out(by_name[n].out) for n in ("eager", "user") if n in by_name and by_name[n].out is not None}
        result["sanity_rel_err"] = {n: M.relative_error(out, ref) for n, out in outs.items()}
        counts = {n: M.nonfinite(out) for n, out in {**outs, "torch": ref}.items()}
        if any(counts.values()):
            result["nonfinite_values"] = counts  # e.g. float16 overflow with synthetic weights
    t = result["variants"].get("torch", {}).get("p50_ms")
    for n in ("eager", "user"):
        p = result["variants"].get(n, {}).get("p50_ms")
        if p and t:
            result[f"ratio_{n}"] = round(p / t, 3)
        for mode in args.compile_modes:
            tc = result["variants"].get(f"torch-compile:{mode}", {}).get("p50_ms")
            if p and tc:
                result[f"ratio_{n}_vs_compile:{mode}"] = round(p / tc, 3)
        mem, tmem = (result["variants"].get(k, {}).get("peak_extra_mib") for k in (n, "torch"))
        if mem is not None and tmem:
            result[f"memory_ratio_{n}"] = round(mem / tmem, 2)
    for v in variants:
        v.out = None
    return result


def compiled(fn, mode: str):
    """The peer under torch.compile: the stronger PyTorch baseline (reduce-overhead = CUDA graphs). A
    compile that fails is recorded as that variant's error; the other variants still run."""
    import torch

    return torch.compile(fn, mode=mode)


def peer_flops(torch_side, case: C.Case, embedding) -> int | None:
    """FLOPs per image on the torch peer (batch 1)."""
    try:
        fn, xs, _ = torch_side.call(case, C.case_inputs(case), embedding)
        return C.count_flops(fn, xs)
    except Exception as e:  # noqa: BLE001  the count is a nicety; the timing goes on without it
        print(f"note: FLOPs not counted for {case.model}: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def encoder_embedding(mlx_side, torch_side):
    """The decoder case's input: the torch encoder's embedding of the encoder case's input (NCHW)."""
    enc = C.Case("mobilesam-encoder", 1, "float32", 1024)
    x = C.case_inputs(enc)["x"]
    if torch_side is not None:
        import torch

        with torch.inference_mode():
            return torch_side.module.image_encoder(torch_side.tensor(x)).float().cpu().numpy()
    fn, xs, out = mlx_side.call(enc, {"x": x})
    return out(fn(*xs))[0]


def print_table(results: list[dict]) -> None:
    print("\n| case | dtype | eager ms | user ms [p90] | torch ms [p90] | user/torch | img/s user/torch "
          "| peak+ MiB user/torch | TFLOP/s user | err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        v = r["variants"]

        def ms(n, p90=True):
            x = v.get(n, {})
            if "p50_ms" not in x:
                return "error" if x.get("error") else "-"
            return f"{x['p50_ms']:.2f}" + (f" [{x['p90_ms']:.2f}]" if p90 else "")

        def get(n, k, fmt):
            x = v.get(n, {}).get(k)
            return format(x, fmt) if isinstance(x, (int, float)) else "-"

        err = r.get("sanity_rel_err", {}).get("user")
        print(f"| {r['case']} | {r['dtype']} | {ms('eager', False)} | {ms('user')} | {ms('torch')} | "
              f"{r.get('ratio_user', '-')} | {get('user', 'img_per_s', '.1f')}/{get('torch', 'img_per_s', '.1f')} | "
              f"{get('user', 'peak_extra_mib', '.0f')}/{get('torch', 'peak_extra_mib', '.0f')} | "
              f"{get('user', 'tflops', '.1f')} | {'-' if err is None else format(err, '.1e')}{nonfinite_note(r)} |")


def nonfinite_note(result: dict) -> str:
    """' (NaN/Inf: user 12, torch 12)' where an output held values that are not finite, else ''."""
    counts = result.get("nonfinite_values")
    return "" if not counts else " (NaN/Inf: " + ", ".join(f"{n} {c}" for n, c in counts.items()) + ")"


def run(args, device, torch, tdev, notes) -> int:
    if args.warmup_seconds is None:
        args.warmup_seconds = 3.0 if device == "gpu" else 1.0
    if tdev is None:
        tdev = _Cpu()
    json_path = args.json
    env = environment(args, device, torch, notes)
    report = {"what": "zoo.bench: MLX eager and user path vs upstream PyTorch eager, one process, interleaved "
                      "rounds; ms are per call (the whole batch)", "env": env, "results": []}
    todo = case_list(args)
    print(f"zoo.bench: {env['mlx_device']} | MLX {mx.__version__} | torch {env['versions'].get('torch', '-')} "
          f"({tdev.type}) | TF32 {'on' if args.tf32 else 'off'} | {len(todo)} cases", file=sys.stderr)
    mlx_sides, torch_sides, flops_cache, embeddings = {}, {}, {}, {}
    bar = tqdm(total=len(todo), desc="zoo.bench", unit="case", file=sys.stderr, dynamic_ncols=True)
    try:
        for case in todo:
            bar.set_postfix_str(f"{case.name} {case.dtype}")
            key = (C.registry_name(case.model), case.dtype)
            tkey = (case.model.split("-")[0], case.dtype)  # the SAM cases share one model and one peer
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if key not in mlx_sides:
                    release(mlx_sides, torch_sides, torch)
                    mlx_sides[key] = C.MlxSide(case.model, case.dtype, args.seed)
                if torch is not None and tkey not in torch_sides:
                    try:
                        torch_sides[tkey] = C.TorchSide(case.model, case.dtype, tdev, args.seed, args.yolo_torch_fused)
                        env["notes"][f"peer {case.model.split('-')[0]}"] = torch_sides[tkey].what
                    except C.PeerMissing as e:
                        torch_sides[tkey] = None
                        env["notes"][f"peer {case.model.split('-')[0]}"] = str(e)
                        tqdm.write(f"note: {e}", file=sys.stderr)
            torch_side = torch_sides.get(tkey) if torch is not None else None
            try:
                result = run_case(case, args, mlx_sides[key], torch_side, tdev, flops_cache, embeddings)
            except Exception as e:  # noqa: BLE001  a failing case is recorded; the others run
                result = {"case": case.name, "model": case.model, "batch": case.batch, "dtype": case.dtype,
                          "error": f"{type(e).__name__}: {e}"[:1000], "variants": {}}
            report["results"].append(result)
            write_report(json_path, report)
            bar.update()
            r = result
            tqdm.write(f"{r['case']:<24} {r['dtype']:<8} user {r['variants'].get('user', {}).get('p50_ms', '-')} ms, "
                       f"torch {r['variants'].get('torch', {}).get('p50_ms', '-')} ms, user/torch "
                       f"{r.get('ratio_user', '-')}, memory user/torch {r.get('memory_ratio_user', '-')}"
                       + "".join(f", user/compile:{m} {r.get(f'ratio_user_vs_compile:{m}', '-')}"
                                 for m in args.compile_modes)
                       + (f", error: {r['error']}" if "error" in r else ""), file=sys.stderr)
    finally:
        bar.close()
    print_table(report["results"])
    print(f"\nwrote {json_path}")
    if args.rows:
        rows = [row_of(r, env, args.compile_modes) for r in report["results"] if "error" not in r]
        write_text(args.rows, strict_json(rows) + "\n")
        print(f"wrote {args.rows}")
    return 0 if all("error" not in r for r in report["results"]) else 1


class _Cpu:
    type = "cpu"


def release(mlx_sides: dict, torch_sides: dict, torch) -> None:
    """Drop the last case's models before the next are loaded: one model per framework in memory."""
    mlx_sides.clear()
    torch_sides.clear()
    gc.collect()
    mx.clear_cache()
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def write_report(path: str, report: dict) -> None:
    write_text(path, strict_json(report))


def strict_json(value) -> str:
    """``value`` as standard JSON: a NaN or infinite float (an error of inf where one side overflowed)
    as the string "nan", "inf" or "-inf", which Python's json would write as NaN/Infinity, tokens
    that strict parsers (JavaScript's JSON.parse, jq) refuse."""
    def finite(v):
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v
    return json.dumps(finite(value), indent=1, default=str, allow_nan=False)
