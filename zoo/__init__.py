"""mlx-zoo: YOLOv8, ResNet, MobileSAM and LaMa on MLX, validated layer by layer against numpy."""
# Ctrl-C while the package loads (OpenBLAS, the native build's check), which runpy and the console scripts import
# before a command's module: the command's one line, exit 130; a program's own `import zoo`: its KeyboardInterrupt
try:
    import os
    import sys

    from .searchpath import demote_current_folder

    demote_current_folder()  # before any other import: a json.py in the current folder is not the json module
    from . import blas
    from .errors import ZooError

    blas.preload()  # before anything imports mlx: MLX's Linux CPU backend then calls OpenBLAS
except KeyboardInterrupt:
    # imported here: the Ctrl-C may have come while zoo.errors loaded
    from .errors import interrupted_exits

    with interrupted_exits(commands_only=True):
        raise

# MLX's CUDA backend (Linux) records its work into CUDA graphs of up to 100 ops on an H100 and keeps
# every op's inputs and cuDNN workspace until its batch of ops has run. Direct kernel launches,
# committed every 6 ops, cost the host less than graphs (ResNet-50/YOLOv8 float16 8-40% faster) and
# hold less than MLX's default graphs of 100 ops (float32 YOLOv8s b16: 10877 -> 2794 MiB; H100,
# docs/speed-gpu.md). MLX reads both once, when it first uses the GPU; a value already set is kept.
# macOS (Metal) is left to MLX: nothing was measured there.
CUDA_OPS_PER_COMMIT = "6"
CUDA_GRAPHS = "0"
if sys.platform.startswith("linux"):
    os.environ.setdefault("MLX_MAX_OPS_PER_BUFFER", CUDA_OPS_PER_COMMIT)
    os.environ.setdefault("MLX_USE_CUDA_GRAPHS", CUDA_GRAPHS)

__all__ = ["SAM", "YOLO", "ZooError", "auto_annotate", "create_model", "get_spec", "is_model", "list_models", "load"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # mlx is imported on first use, not by `import zoo`: `python -m zoo.bench` must let torch
    # load its own cuDNN before MLX's CUDA backend loads an older one into the process.
    if name in ("SAM", "YOLO", "create_model", "get_spec", "is_model", "list_models", "load"):
        from . import registry

        return getattr(registry, name)
    if name == "auto_annotate":
        from .annotate import auto_annotate

        return auto_annotate
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")
