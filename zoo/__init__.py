"""mlx-zoo: YOLOv8, ResNet, MobileSAM and LaMa on MLX, validated layer by layer against numpy."""
from . import blas

blas.preload()  # before anything imports mlx: MLX's Linux CPU backend then calls OpenBLAS

from .errors import ZooError  # noqa: E402
from .registry import get_spec, list_models, load  # noqa: E402

__all__ = ["ZooError", "get_spec", "list_models", "load"]
__version__ = "0.1.0"
