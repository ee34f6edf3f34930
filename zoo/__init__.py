"""mlx-zoo: YOLOv8, ResNet, MobileSAM and LaMa on MLX, validated layer by layer against numpy."""
from .errors import ZooError
from .registry import get_spec, list_models, load

__all__ = ["ZooError", "get_spec", "list_models", "load"]
__version__ = "0.1.0"
