"""mlx-zoo: YOLOv8, ResNet, MobileSAM and LaMa on MLX, validated layer by layer against numpy."""
import os
import sys

from . import blas

blas.preload()  # before anything imports mlx: MLX's Linux CPU backend then calls OpenBLAS

# MLX's CUDA backend (Linux) launches its work as CUDA graphs of up to 100 ops on an H100 and keeps
# every op's inputs and cuDNN workspace until the graph has run. Graphs of 6 ops made these models'
# float16 forwards faster and their peak memory 1.1-4.2x lower (H100, docs/speed-gpu.md). Read
# once, when MLX first uses the GPU; a value already set is kept. macOS (Metal) is left to MLX:
# nothing was measured there.
CUDA_OPS_PER_GRAPH = "6"
if sys.platform.startswith("linux"):
    os.environ.setdefault("MLX_MAX_OPS_PER_BUFFER", CUDA_OPS_PER_GRAPH)

from .errors import ZooError  # noqa: E402

__all__ = ["ZooError", "auto_annotate", "get_spec", "list_models", "load"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # mlx is imported on first use, not by `import zoo`: `python -m zoo.bench` must let torch
    # load its own cuDNN before MLX's CUDA backend loads an older one into the process.
    if name in ("get_spec", "list_models", "load"):
        from . import registry

        return getattr(registry, name)
    if name == "auto_annotate":
        from .annotate import auto_annotate

        return auto_annotate
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")
