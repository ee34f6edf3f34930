"""mlx-zoo: YOLOv8, ResNet, MobileSAM and LaMa on MLX, validated layer by layer against numpy."""
from . import blas

blas.preload()  # before anything imports mlx: MLX's Linux CPU backend then calls OpenBLAS

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
