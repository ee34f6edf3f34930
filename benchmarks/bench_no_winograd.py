"""``python -m zoo.bench`` with the Winograd form switched off: the large stride-1 3x3 float32
convolutions then go to the implicit GEMM (an experiment on MLX's CUDA backend: docs/speed-gpu.md,
"Memory: what else was tried"). Takes zoo.bench's arguments:

    MLX_ENABLE_TF32=0 python benchmarks/bench_no_winograd.py --upstream ../shared/bench/upstream/python \\
        --variants user,torch --dtypes float32 --models yolov8n,yolov8s --batches 16
"""
import sys

import torch  # its cuDNN before MLX loads one (../shared/device/README.md)

torch.backends.cudnn.version()
from zoo.bench.__main__ import main  # noqa: E402
from zoo.kernels import winograd  # noqa: E402

winograd.worth_it = lambda x_shape, weight_shape: False  # models.layers asks this before each convolution
sys.exit(main())
