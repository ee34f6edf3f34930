"""The few layers shared by several families."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from zoo.compiled import batch_norm_affine, fold_batch_norm, folded, kept, recording_layers
from zoo.kernels import coverage
from zoo.kernels import cpu as cpu_ops
from zoo.kernels import depthwise, implicit_gemm, winograd


class Sequential(nn.Module):
    """torch.nn.Sequential's naming: children are "0", "1", ... so that
    checkpoint keys like ``downsample.0.weight`` load by name (MLX's own
    Sequential names them ``layers.0``). A child is also found by its int
    index (``model.layer1[0]``, as torch's; MLX's ``update`` and ``load_weights``
    index digit-named children so)."""

    def __init__(self, *modules: nn.Module):
        super().__init__()
        for i, module in enumerate(modules):
            self[str(i)] = module

    def __getitem__(self, key):
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key + len(self) if key < 0 else key)
        return super().__getitem__(key)

    def children_in_order(self) -> list[nn.Module]:
        return [self[key] for key in sorted((k for k in self.keys() if k.isdigit()), key=int)]

    def __call__(self, x):
        for module in self.children_in_order():
            x = module(x)
        return x


class MaxPool2d(nn.MaxPool2d):
    """nn.MaxPool2d; a square window runs as one threaded C pass on the CPU (zoo.kernels.cpu.max_pool2d)."""

    def __call__(self, x: mx.array) -> mx.array:
        (kh, kw), (sh, sw), ((ph, _), (pw, _)) = self._kernel_size, self._stride, self._padding
        if kh == kw and sh == sw and ph == pw:
            return cpu_ops.max_pool2d(x, kh, sh, ph)
        return super().__call__(x)


class GlobalAvgPool(nn.Module):
    """AdaptiveAvgPool2d(1) on NHWC: (N, H, W, C) -> (N, 1, 1, C)."""

    def __call__(self, x: mx.array) -> mx.array:
        return mx.mean(x, axis=(1, 2), keepdims=True)


# Activations and convolutions every family shares. On the CPU they take zoo.kernels.cpu's
# fast forms of the ops MLX's CPU backend runs slowly; elsewhere MLX's own ops.

def sigmoid(x: mx.array) -> mx.array:
    return cpu_ops.sigmoid(x)


def silu(x: mx.array) -> mx.array:
    return cpu_ops.silu(x)


def gelu(x: mx.array) -> mx.array:
    """Exact (erf) GELU, as torch.nn.GELU()."""
    return cpu_ops.gelu(x)


def softmax(x: mx.array) -> mx.array:
    """Softmax over the last axis, in float32 maths (MLX's precise softmax)."""
    return cpu_ops.softmax(x)


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None = None) -> mx.array:
    """mx.fast.scaled_dot_product_attention with an additive mask (or none)."""
    return cpu_ops.attention(q, k, v, scale, mask)


def qkv_attention(qkv: mx.array, heads: int, scale: float, mask: mx.array | None = None) -> mx.array:
    """Self-attention over the heads of a fused projection (B, N, heads * 3 * D), laid out (heads, (q, k, v),
    D) per token -> (B, N, heads * D); an additive mask (N, N) or (heads, N, N), or none."""
    return cpu_ops.qkv_attention(qkv, heads, scale, mask)


def reflect_pad(x: mx.array, ph: int, pw: int | None = None) -> mx.array:
    """torch's reflect padding of H by ``ph`` and W by ``pw`` (default ``ph``), NHWC, as one gather."""
    return cpu_ops.reflect_pad(x, ph, pw)


def rfft2_parts(x: mx.array) -> mx.array:
    """Orthonormal rfft2 over H, W as float32 real/imaginary parts interleaved in channels."""
    return cpu_ops.rfft2_parts(x)


def irfft2_parts(parts: mx.array, size: tuple[int, int]) -> mx.array:
    """The inverse of rfft2_parts, to float32 (N, H, W, C) of the given (H, W)."""
    return cpu_ops.irfft2_parts(parts, size)


def split_heads(x: mx.array, heads: int, parts: int = 3) -> tuple[mx.array, ...]:
    """(B, N, heads * parts * D) laid out (heads, parts, D) per token -> ``parts`` x (B, heads, N, D)."""
    return cpu_ops.split_heads(x, heads, parts)


def window_partition(x: mx.array, window: int) -> mx.array:
    """(B, H, W, C) -> (B * windows, window**2, C), zero-padded to whole windows (bottom, right)."""
    return cpu_ops.window_partition(x, window)


def window_merge(x: mx.array, size: tuple[int, int], window: int) -> mx.array:
    """Windows back to (B, H, W, C) of the given (H, W), the padding dropped."""
    return cpu_ops.window_merge(x, size, window)


class GELU(nn.Module):
    """Exact GELU as a module (upstream's nn.GELU() in a Sequential keeps its index)."""

    def __call__(self, x: mx.array) -> mx.array:
        return gelu(x)


class Sigmoid(nn.Module):
    def __call__(self, x: mx.array) -> mx.array:
        return sigmoid(x)


class BatchNorm(nn.BatchNorm):
    """nn.BatchNorm (same parameters and names); at inference on the CPU one pass of
    x * scale + shift (zoo.compiled.batch_norm_affine, as the fold into a convolution uses it)."""

    def __call__(self, x: mx.array) -> mx.array:
        if self.training or not self.track_running_stats or not cpu_ops.on_cpu() or "weight" not in self:
            coverage.note("batch_norm", coverage.MLX_OP)
            return super().__call__(x)
        return cpu_ops.channel_affine(x, *self.scale_shift())

    def scale_shift(self) -> tuple[mx.array, mx.array]:
        """zoo.compiled.batch_norm_affine, kept until a source array is replaced (weights loaded or
        cast later): recomputing it took five small ops on every call."""
        return kept(self, "_scale_shift", (self,), lambda: batch_norm_affine(self))


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (same parameters and names); on the CPU one threaded C pass per row."""

    def __call__(self, x: mx.array, activation: str | None = None) -> mx.array:
        """activation(layer_norm(x)); on the CPU the activation applied by the same C pass (callers pass it
        only where ``fusing_on_cpu``: the validator records the layers apart)."""
        return cpu_ops.layer_norm(x, self.weight if "weight" in self else None,
                                  self.bias if "bias" in self else None, self.eps, activation)


def conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm, x: mx.array, eager=None, activation: str | None = None,
            residual: mx.array | None = None) -> mx.array:
    """``activation(bn(conv(x)) + residual)``; activation None, "relu", "silu" or "gelu"; ``residual`` an
    array of the output's shape, or None. In a compiled forward that folds them (zoo.compiled) one
    convolution whose weight and bias hold the BatchNorm (``conv2d_derived``); on the CPU one C
    convolution that also adds the residual and applies the activation (``Conv2d.with_batch_norm``,
    where ``fuses_on_cpu``); else the layers apart, as ``eager(x)`` where given (the module holding
    both: torchvision's ``downsample``, which the validator records)."""
    fold = folded(conv)
    if fold is None and fuses_on_cpu(conv, bn):
        return conv.with_batch_norm(x, bn, activation, residual)
    if residual is None:
        if fold is not None:
            return conv2d_derived(x, conv, fold, activation)
        return cpu_ops.ACTIVATION_OPS[activation](bn(conv(x)) if eager is None else eager(x))
    y = conv2d_derived(x, conv, fold) if fold is not None else bn(conv(x)) if eager is None else eager(x)
    return cpu_ops.ACTIVATION_OPS[activation](y + residual)


def fuses_on_cpu(conv: nn.Conv2d, bn: nn.BatchNorm) -> bool:
    """Whether ``conv`` then ``bn`` (and an activation) run as one C convolution with the BatchNorm
    folded in: on the CPU, a zoo Conv2d of a form the C routines compute (groups 1 or depthwise, no
    dilation), an inference BatchNorm with running statistics, and not inside zoo.compiled.eager()
    (the validator records the upstream layers apart)."""
    return isinstance(conv, Conv2d) and conv.folds() and fusing_on_cpu() and folds_batch_norm(bn)


def folds_batch_norm(bn: nn.BatchNorm) -> bool:
    """Whether ``bn`` is an affine map that folds into the convolution before it: at inference, with
    running statistics and its own weight and bias."""
    return not bn.training and bn.track_running_stats and "weight" in bn


def fusing_on_cpu() -> bool:
    """On the CPU, outside zoo.compiled.eager() (where the validator records every upstream layer
    apart): a layer and the activation after it may run as one C call."""
    return cpu_ops.on_cpu() and not recording_layers()


def conv2d_derived(x: mx.array, conv: nn.Conv2d, arrays: dict[str, mx.array], activation: str | None = None) -> mx.array:
    """``conv``'s convolution of x (its stride, padding, groups) with arrays a compiled forward derived
    from its weight (zoo.compiled): {weight[, bias][, winograd]}, then the activation. On CUDA in
    float32 a large 3x3 stride-1 runs as Winograd's form (zoo.kernels.winograd), others where
    implicit_gemm.worth_it says (small grids, 1x1 included) as an implicit GEMM, the activation in
    their last kernel; another 1x1 as a matmul where zoo.kernels.cpu says."""
    weight, bias = arrays["weight"], arrays.get("bias")
    if "winograd" in arrays and winograd.worth_it(x.shape, weight.shape):
        return winograd.conv3x3(x, arrays["winograd"], bias, conv.padding[0], activation)
    if implicit_gemm.preferred(weight.dtype, weight.shape, conv.stride, conv.padding, conv.groups, conv.dilation) \
            and implicit_gemm.worth_it(x.shape, weight.shape, conv.stride, conv.padding):
        return implicit_gemm.conv2d(x, weight, bias, conv.stride, conv.padding, activation)
    if weight.shape[1:3] == (1, 1) and conv.groups == 1 and tuple(conv.stride) == (1, 1) \
            and tuple(conv.padding) == (0, 0):
        y = cpu_ops.pointwise_conv2d(x, weight)
    elif conv.groups == weight.shape[0] > 1 and weight.shape[3] == 1 and _no_dilation(conv.dilation) \
            and depthwise.preferred(weight.dtype):  # as Conv2d's own call: YOLO11's folded depthwise Convs
        y = depthwise.conv2d(x, weight, conv.stride, conv.padding)
    else:
        y = mx.conv2d(x, weight, conv.stride, conv.padding, conv.dilation, conv.groups)
    return cpu_ops.ACTIVATION_OPS[activation](y if bias is None else y + bias)



def _no_dilation(dilation) -> bool:
    return dilation == 1 or (not isinstance(dilation, int) and tuple(dilation) == (1, 1))


class Conv2d(nn.Conv2d):
    """nn.Conv2d (same weights, same names) whose convolutions run as zoo.kernels.cpu's on the CPU:
    depthwise, 1x1 and few-output forms, and the rest as patch rows + one OpenBLAS sgemm.

    ``reflect_padding``: torch's ``padding_mode="reflect"`` (a subclass sets it, with ``padding`` 0);
    on the CPU the reflected border is read in place instead of padded into a copy."""

    reflect_padding = 0

    def __call__(self, x: mx.array) -> mx.array:
        return cpu_ops.per_image(self._forward, x)

    def folds(self) -> bool:
        """Whether a following BatchNorm can be folded into this convolution's C form (groups 1 or
        depthwise, no dilation): ``with_batch_norm``."""
        cout, _, _, cin = self.weight.shape
        return _no_dilation(self.dilation) and (self.groups == 1 or (self.groups == cout and cin == 1))

    def with_batch_norm(self, x: mx.array, bn: nn.BatchNorm, activation: str | None = None,
                        residual: mx.array | None = None, skip: mx.array | None = None) -> mx.array:
        """``activation(bn(self(x)) + residual) + skip`` with ``bn`` folded into the weight and bias
        (zoo.compiled's fold, computed in float32 and stored in the weight's dtype, as a compiled forward
        stores it; kept until a weight is replaced), the residual and the skip (arrays of the output's
        shape, or None) added and the activation applied by the C routine in place where its form takes
        them: no BatchNorm pass and no new array for either (layers.fuses_on_cpu says where)."""
        forms = self.batch_norm_forms(bn)
        return self.with_forms(x, forms, activation, residual, skip)

    def with_forms(self, x: mx.array, forms: dict[str, mx.array | None], activation: str | None = None,
                   residual: mx.array | None = None, skip: mx.array | None = None) -> mx.array:
        """activation(conv(x) + bias + residual) + skip with this convolution's stride and padding and
        another weight and bias (``forms`` of them: its input channels may differ), each image apart
        (cpu_ops.per_image)."""
        added = {name: a for name, a in (("residual", residual), ("skip", skip)) if a is not None}
        return cpu_ops.per_image(lambda image, *more: self._forward(image, forms, activation, **dict(zip(added, more))),
                                 x, *added.values())

    def batch_norm_forms(self, bn: nn.BatchNorm) -> dict[str, mx.array | None]:
        """``forms`` of the weight and bias with ``bn`` folded in (zoo.compiled's fold, computed in float32
        and stored in the weight's dtype), kept until a weight is replaced."""
        return kept(self, "_batch_norm_forms", (self, bn),
                    lambda: self.forms(*(a.astype(self.weight.dtype) for a in fold_batch_norm(self, bn))))

    def plain(self) -> bool:
        """Groups 1, stride 1, no padding, no dilation."""
        return self.groups == 1 and self.stride in (1, (1, 1)) and self.padding in (0, (0, 0)) \
            and _no_dilation(self.dilation)

    def few_outputs(self, weight: mx.array) -> bool:
        """Whether this convolution with ``weight`` takes zoo.kernels.cpu.conv2d_few_outputs (larger than
        1x1, plain, into at most an eighth of its input channels: LaMa's last convolution)."""
        cout, kh, kw, cin = weight.shape
        return self.plain() and (kh, kw) != (1, 1) and cout * 8 <= cin

    def forms(self, weight: mx.array, bias: mx.array | None) -> dict[str, mx.array | None]:
        """{weight, bias} and, where this convolution runs as Winograd's form on the CPU
        (zoo.kernels.cpu.winograd_suits), the transformed weight as "winograd"; where the host's CPU
        takes the C library's own products (zoo.kernels.cpu.pack), the weight packed for them as
        "packed", or the transformed one as "winograd packed" instead of "winograd"."""
        forms = {"weight": weight, "bias": bias}
        transformed = cpu_winograd(self, weight, self.reflect_padding or self.padding)
        packed = cpu_ops.pack_winograd(transformed) if transformed is not None else None
        if packed is not None:  # in place of the transformed weight: the memory it took (LaMa: 1.78x its 3x3s')
            forms["winograd packed"] = packed
        elif transformed is not None:
            forms["winograd"] = transformed
        elif self.groups == 1 and not self.few_outputs(weight):
            forms["packed"] = cpu_ops.pack(weight)
        return forms

    def _forward(self, x: mx.array, forms: dict | None = None, activation: str | None = None,
                 residual: mx.array | None = None, skip: mx.array | None = None) -> mx.array:
        """activation(conv(x) + bias + residual) + skip with the ``forms`` of a weight and bias (default:
        its own)."""
        if forms is None:
            bias = self.bias if "bias" in self else None
            forms = kept(self, "_forms", (self,), lambda: self.forms(self.weight, bias)) if cpu_ops.on_cpu() \
                else {"weight": self.weight, "bias": bias}
        weight, bias = forms["weight"], forms["bias"]
        cout, kh, kw, cin = weight.shape
        if x.shape[-1] != cin * self.groups:  # as mx.conv2d checks: the C forms would read past the input
            raise ValueError(f"[conv] input of shape {tuple(x.shape)} has {x.shape[-1]} channels where the "
                             f"weight {tuple(weight.shape)} with groups {self.groups} takes {cin * self.groups}")
        reflect = self.reflect_padding
        few_outputs = self.few_outputs(weight)
        if cpu_ops.on_cpu() and self.groups == 1 and _no_dilation(self.dilation) and not few_outputs:
            if ("winograd" in forms or "winograd packed" in forms) and (residual is None or skip is None):
                y = cpu_ops.winograd_conv3x3(x, forms.get("winograd"), bias, cpu_ops.pair(reflect or self.padding)[0],
                                             bool(reflect), activation, residual=residual, skip=skip,
                                             packed=forms.get("winograd packed"), outputs=cout)
                if y is not None:
                    return y
            y = cpu_ops.conv2d(x, weight, bias, self.stride, reflect or self.padding, reflect=bool(reflect),
                               activation=activation, residual=residual, packed=forms.get("packed"))
            return y if skip is None else y + skip
        if residual is not None or skip is not None:  # the forms below add neither
            y = self._forward(x, forms, activation if residual is None else None)
            y = y if residual is None else cpu_ops.ACTIVATION_OPS[activation](y + residual)
            return y if skip is None else y + skip
        if reflect:
            x = reflect_pad(x, reflect)
        if self.groups > 1 and self.groups == cout and cin == 1 and _no_dilation(self.dilation):
            if depthwise.preferred(x.dtype):
                return cpu_ops.biased_activation(depthwise.conv2d(x, weight, self.stride, self.padding), bias, activation)
            return cpu_ops.depthwise_conv2d(x, weight, self.stride, self.padding, bias, activation)
        if few_outputs:
            return cpu_ops.conv2d_few_outputs(x, weight, bias, activation)
        if self.plain() and kh == kw == 1:
            y = cpu_ops.pointwise_conv2d(x, weight)
        else:
            coverage.note("conv2d (dilated)" if not _no_dilation(self.dilation) else
                          "conv2d" if self.groups == 1 else "conv2d (grouped)", coverage.MLX_OP)
            y = mx.conv2d(x, weight, self.stride, self.padding, self.dilation, self.groups)
        return cpu_ops.biased_activation(y, bias, activation)


class Linear(nn.Linear):
    """nn.Linear (same parameters and names); on the CPU one product whose initial C is the bias
    (zoo.kernels.cpu.linear), with the weight packed for it (zoo.kernels.cpu.pack) kept until replaced."""

    def __call__(self, x: mx.array, activation: str | None = None, residual: mx.array | None = None) -> mx.array:
        """activation(x @ weight.T + bias + residual); on the CPU the activation and the residual (an array of
        the output's shape) applied by the product's C call (callers pass them only where ``fusing_on_cpu``:
        the validator records the layers apart)."""
        packed = kept(self, "_packed", (self,), lambda: cpu_ops.pack(self.weight)) \
            if cpu_ops.linear_in_c(x, self.weight) else None
        return cpu_ops.linear(x, self.weight, self.bias if "bias" in self else None, activation, residual, packed)


def cpu_winograd(conv: nn.Conv2d, weight: mx.array, padding) -> mx.array | None:
    """``weight`` transformed for Winograd's form (zoo.kernels.winograd.transform_weight) where
    ``conv`` runs as that form on the CPU (zoo.kernels.cpu.winograd_suits); else None."""
    if not cpu_ops.winograd_suits(weight.shape, conv.stride, padding, conv.groups, conv.dilation):
        return None
    return winograd.transform_weight(weight.astype(mx.float32))


class ConvTranspose2d(nn.ConvTranspose2d):
    """nn.ConvTranspose2d (same weights, same names) run as one GEMM and the sums of its taps (one C
    pass on the CPU: zoo.kernels.cpu.conv_transpose2d)."""

    def __call__(self, x: mx.array, activation: str | None = None) -> mx.array:
        """activation(conv_transpose2d(x) + bias); on the CPU the activation applied by the C pass that sums
        the taps (callers pass it only where ``fusing_on_cpu``: the validator records the layers apart)."""
        matrix = kept(self, "_tap_matrix", (self,), lambda: cpu_ops.tap_matrix(self.weight)) \
            if cpu_ops.on_cpu() else None
        return self._forward(x, self.weight, self.bias if "bias" in self else None, activation, matrix)

    def with_batch_norm(self, x: mx.array, bn: nn.BatchNorm, activation: str | None = None) -> mx.array:
        """``activation(bn(self(x)))`` with ``bn`` folded into the weight and bias (as
        Conv2d.with_batch_norm; kept until a weight is replaced, with the weight's GEMM operand), the
        bias and activation applied by the C pass that sums the taps (where ``fusing_on_cpu`` and
        ``folds_batch_norm``)."""
        def fold():
            weight, bias = (a.astype(self.weight.dtype) for a in fold_batch_norm(self, bn))
            return weight, bias, cpu_ops.tap_matrix(weight)
        weight, bias, matrix = kept(self, "_batch_norm_forms", (self, bn), fold)
        return self._forward(x, weight, bias, activation, matrix)

    def _forward(self, x: mx.array, weight: mx.array, bias: mx.array | None, activation: str | None = None,
                 matrix: mx.array | None = None):
        if not _no_dilation(self.dilation):
            return cpu_ops.biased_activation(mx.conv_transpose2d(x, weight, self.stride, self.padding, self.dilation,
                                                                 self.output_padding), bias, activation)
        return cpu_ops.conv_transpose2d(x, weight, self.stride, self.padding, self.output_padding, bias, activation,
                                        matrix)
