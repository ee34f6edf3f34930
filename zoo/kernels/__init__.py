"""Custom GPU kernels, each written once for Metal and CUDA, with an MLX fallback.

- ``nms(boxes, scores, iou_threshold, classes=None, max_det=300)``: kept indices,
  ultralytics / torchvision semantics;
- ``resize(x, size, mode="bilinear", align_corners=False)``: NHWC resize to an
  exact size, PyTorch ``F.interpolate`` semantics;
- ``sppf_maxpool(x, k=5)``: YOLOv8 SPPF's three chained max-pools;
- ``winograd.conv3x3(x, winograd.transform_weight(w), bias, padding, activation)``: a 3x3
  stride-1 convolution as Winograd F(2x2, 3x3), two kernels around one batched matmul (the
  models' large float32 convolutions on CUDA);
- ``implicit_gemm.conv2d(x, w, bias, stride, padding, activation)``: a float32 convolution as
  one implicit-GEMM kernel with no workspace (the models' other float32 convolutions on CUDA);
- ``few_outputs.conv2d(x, w, bias, padding, reflect)``: a stride-1 convolution to at most four
  channels, its zero or reflected padding read in place (LaMa's last convolution on CUDA).
- ``depthwise.conv2d(x, w, stride, padding)``: a depthwise convolution (MobileSAM's TinyViT in
  float32 on CUDA);
- ``box_decode.decode(boxes, classes, bins, strides)``: YOLOv8's head decode from its three
  levels' maps (the compiled float16 forward on CUDA).

The native kernel runs when MLX's default device is a Metal or CUDA GPU; the
fallback (plain MLX ops) otherwise, or always with ``ZOO_KERNELS=fallback``.
Bad input raises ``zoo.errors.ZooError``. See docs/kernels.md.

``zoo.kernels.cpu``: the other way round, compiled C forms of the ops MLX's CPU backend
runs slowly, used on the CPU only (docs/speed-cpu.md).
"""

from zoo.kernels.nms import nms
from zoo.kernels.resize import resize
from zoo.kernels.sppf import sppf_maxpool

__all__ = ["nms", "resize", "sppf_maxpool"]
