"""big-lama's generator in numpy over its checkpoint (NCHW, OIHW, float64, numpy.fft).

Written from advimman/lama's saicinpainting/training/modules/ffc.py. Module names
are upstream's, under the training module: generator, generator.model,
generator.model.K (K = 0..35), and inside the FFC layers ffc, ffc.convl2l,
ffc.convl2g, ffc.convg2l, ffc.convg2g (.conv1.0/1/2, .fu, .fu.conv_layer, .fu.bn,
.fu.relu, .conv2), bn_l, act_l, bn_g, act_g; residual blocks have conv1, conv2.
FFC layers output (local, global); a part without channels is the int 0, as upstream.
"""
from __future__ import annotations

import numpy as np

from . import ops
from .trace import Trace


def _bn(t: Trace, sd, name, x):
    p = [sd[f"{name}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")]
    return t(name, lambda v: ops.batch_norm(v, *p), x)


def _conv(t: Trace, sd, name, x, stride=1, reflect=0):
    """Conv2d with padding_mode="reflect" (torch pads by reflection, edge not repeated)."""
    w, b = sd[f"{name}.weight"], sd.get(f"{name}.bias")
    return t(name, lambda v: ops.conv2d(ops.pad_reflect(v, reflect) if reflect else v, w, b, stride=stride), x)


def _fourier_unit(t: Trace, sd, name, x):
    def run(v):
        n, c, h, w = v.shape
        spectrum = np.fft.rfft2(v, axes=(-2, -1), norm="ortho")
        # (n, c, 2, h, w//2+1) -> channels c0.re, c0.im, c1.re, ...
        parts = np.stack([spectrum.real, spectrum.imag], axis=2).reshape(n, 2 * c, h, w // 2 + 1)
        parts = _conv(t, sd, f"{name}.conv_layer", parts)
        parts = _bn(t, sd, f"{name}.bn", parts)
        parts = t(f"{name}.relu", ops.relu, parts).reshape(n, c, 2, h, w // 2 + 1)
        return np.fft.irfft2(parts[:, :, 0] + 1j * parts[:, :, 1], s=(h, w), axes=(-2, -1), norm="ortho")

    return t(name, run, x)


def _spectral_transform(t: Trace, sd, name, x):
    def conv1(v):
        v = _conv(t, sd, f"{name}.conv1.0", v)
        v = _bn(t, sd, f"{name}.conv1.1", v)
        return t(f"{name}.conv1.2", ops.relu, v)

    def run(v):
        v = t(f"{name}.conv1", conv1, v)
        return _conv(t, sd, f"{name}.conv2", v + _fourier_unit(t, sd, f"{name}.fu", v))

    return t(name, run, x)


def _ffc(t: Trace, sd, name, x, stride, reflect):
    """A path exists where the checkpoint has its weights (upstream makes the others
    nn.Identity, which only ever passes on the int 0 of a missing part)."""
    def path(kind, v):
        if f"{name}.{kind}.conv2.weight" in sd:
            return _spectral_transform(t, sd, f"{name}.{kind}", v)
        return _conv(t, sd, f"{name}.{kind}", v, stride, reflect)

    def run(v):
        x_l, x_g = v if isinstance(v, tuple) else (v, 0)
        present = {k for k in ("convl2l", "convg2l", "convl2g", "convg2g")
                   if f"{name}.{k}.weight" in sd or f"{name}.{k}.conv2.weight" in sd}
        out_l = sum(path(k, u) for k, u in (("convl2l", x_l), ("convg2l", x_g)) if k in present)
        out_g = sum(path(k, u) for k, u in (("convl2g", x_l), ("convg2g", x_g)) if k in present)
        return out_l, out_g

    return t(name, run, x)


def _ffc_bn_act(t: Trace, sd, name, x, stride=1, reflect=0):
    def run(v):
        x_l, x_g = _ffc(t, sd, f"{name}.ffc", v, stride, reflect)
        x_l = t(f"{name}.act_l", ops.relu, _bn(t, sd, f"{name}.bn_l", x_l))
        if f"{name}.bn_g.weight" in sd:
            x_g = t(f"{name}.act_g", ops.relu, _bn(t, sd, f"{name}.bn_g", x_g))
        return x_l, x_g

    return t(name, run, x)


def _resnet_block(t: Trace, sd, name, x):
    def run(v):
        y_l, y_g = _ffc_bn_act(t, sd, f"{name}.conv2", _ffc_bn_act(t, sd, f"{name}.conv1", v, reflect=1), reflect=1)
        return v[0] + y_l, v[1] + y_g

    return t(name, run, x)


def _generator_layers(sd) -> list[tuple[str, int]]:
    """(kind, K) of each layer of generator.model, as FFCResNetGenerator builds it
    for big-lama (3 downsamplings); the number of residual blocks is read off the checkpoint."""
    n_blocks = len({k.split(".")[2] for k in sd if k.startswith("generator.model.") and ".conv1.ffc." in k})
    layers = [("pad", 0), ("ffc", 1), ("down", 2), ("down", 3), ("down", 4)]
    layers += [("block", 5 + i) for i in range(n_blocks)]
    k = 5 + n_blocks
    layers.append(("concat", k))
    for i in range(3):  # ConvTranspose2d, BatchNorm2d, ReLU
        layers += [("up", k + 1 + 3 * i), ("bn", k + 2 + 3 * i), ("relu", k + 3 + 3 * i)]
    k += 10
    return layers + [("pad", k), ("out", k + 1), ("sigmoid", k + 2)]


def generator(sd: dict[str, np.ndarray], x: np.ndarray, trace: Trace | None = None) -> np.ndarray:
    """x: (N, 4, H, W) generator input -> (N, 3, H, W) predicted image in [0, 1]."""
    t = trace or Trace()
    sd = {k: v.astype(np.float64, copy=False) for k, v in sd.items()
          if k.startswith("generator.") and not k.endswith("num_batches_tracked")}
    steps = {
        "pad": lambda v, name: ops.pad_reflect(v, 3),
        "ffc": lambda v, name: _ffc_bn_act(t, sd, name, v),
        "down": lambda v, name: _ffc_bn_act(t, sd, name, v, stride=2, reflect=1),
        "block": lambda v, name: _resnet_block(t, sd, name, v),
        "concat": lambda v, name: np.concatenate(v, axis=1),
        "up": lambda v, name: ops.conv_transpose2d(v, sd[f"{name}.weight"], sd[f"{name}.bias"],
                                                   stride=2, padding=1, output_padding=1),
        "bn": lambda v, name: ops.batch_norm(v, *(sd[f"{name}.{p}"] for p in ("weight", "bias", "running_mean", "running_var"))),
        "relu": lambda v, name: ops.relu(v),
        "out": lambda v, name: ops.conv2d(v, sd[f"{name}.weight"], sd[f"{name}.bias"]),
        "sigmoid": lambda v, name: ops.sigmoid(v),
    }

    def sequential(v):
        for kind, k in _generator_layers(sd):
            name = f"generator.model.{k}"
            v = t(name, lambda u, kind=kind, name=name: steps[kind](u, name), v)
        return v

    def run(v):
        return t("generator.model", sequential, v)

    return t("generator", run, x)


def generator_input(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Upstream's DefaultInpaintingTrainingModule.forward: cat([image * (1 - mask), mask], dim=1)."""
    return np.concatenate([image * (1 - mask), mask], axis=1)


def forward(sd: dict[str, np.ndarray], image: np.ndarray, mask: np.ndarray, trace: Trace | None = None) -> np.ndarray:
    """image (N, 3, H, W) in [0, 1], mask (N, 1, H, W) in {0, 1} -> predicted (N, 3, H, W)."""
    return generator(sd, generator_input(image, mask), trace)


def inpainted(image: np.ndarray, mask: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """The output bin/predict.py writes: mask * predicted + (1 - mask) * image."""
    return mask * predicted + (1 - mask) * image
