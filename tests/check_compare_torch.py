"""compare_torch against a real PyTorch model: the hook recording, which the test suite (no torch)
cannot run. Run by hand with a Python that has torch and this checkout's zoo (docs/validate-any-model.md):

    python tests/check_compare_torch.py

A small PyTorch conv net and its MLX port, the weights carried over by zoo.weights.convert with a
name map: the port passes; the same port with a wrong BatchNorm eps is named at that layer, and a
weight transposed in the conversion is named in the "parameters" rows. Exit 0 when all three hold.
"""
import sys

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch

import zoo.errors
import zoo.validate
from zoo.validate import torch_port
from zoo.weights.convert import load_state_dict

NAME_MAP = {"features.0": "stem", "features.1": "bn", "features.3": "depthwise", "classifier.1": "fc"}


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), torch.nn.ReLU())
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.classifier = torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(8, 5))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


class Port(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm(8, eps=eps)
        self.depthwise = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.fc = nn.Linear(8, 5)

    def __call__(self, x):
        x = nn.relu(self.bn(self.stem(x)))
        return self.fc(nn.relu(self.depthwise(x)).mean(axis=(1, 2)))


def ported(torch_model, eps=1e-5):
    rename = torch_port.renamer(NAME_MAP)
    state = {rename(k): v.detach().numpy() for k, v in torch_model.state_dict().items()}
    model = Port(eps)
    load_state_dict(model, state, "TorchNet")
    return model.eval()


def main() -> int:
    torch.manual_seed(0)
    original = TorchNet().eval()
    with torch.no_grad():  # trained-looking BatchNorm statistics
        original.features[1].running_mean.uniform_(-0.2, 0.2)
        original.features[1].running_var.uniform_(0.5, 1.5)
    x = np.random.default_rng(0).standard_normal((2, 16, 16, 3)).astype(np.float32)  # the MLX model's NHWC input
    checks = []

    report = zoo.validate.compare_torch(ported(original), original, x, name_map=NAME_MAP, device="cpu")
    rows = {r.name: r for m in report.modes for r in m.layers}
    print("correct port:", "PASS" if report.passed else f"FAIL at {report.first_failure}",
          "| layers per mode:", {m.mode: f"{sum(not r.failed for r in m.compared)}/{len(m.compared)}" for m in report.modes},
          "| unpaired PyTorch layers:", sorted(n for n, r in rows.items() if r.status == "n/a" and "PyTorch" in r.flags[0]))
    checks.append(report.passed and report.modes[0].mode == "parameters" and rows["depthwise"].status == "pass")

    wrong_eps = zoo.validate.compare_torch(ported(original, eps=1e-2), original, x, name_map=NAME_MAP, device="cpu")
    isolated = next(m for m in wrong_eps.modes if m.mode == "isolated")
    print("BatchNorm eps 1e-2 instead of 1e-5: first failing layer", wrong_eps.first_failure,
          f"({wrong_eps.failing.mode}); isolated mode fails only", [r.name for r in isolated.layers if r.failed])
    checks.append(wrong_eps.first_failure == "bn" and isolated.first_failure == "bn")

    port = ported(original)
    port.stem.weight = port.stem.weight.swapaxes(1, 2)  # a conversion that swapped kH and kW
    swapped = zoo.validate.compare_torch(port, original, x, name_map=NAME_MAP, device="cpu", mode="isolated")
    print("stem weight with kH and kW swapped: first failing", swapped.first_failure, f"({swapped.failing.mode}); "
          "then", [r.name for m in swapped.modes[1:] for r in m.layers if r.failed])
    checks.append(swapped.first_failure == "stem.weight")
    mx.eval(port.parameters())

    # a Conv1d port: its (N, L, C) input reaches PyTorch as (N, C, L) with layout="channels-last"; without it
    # PyTorch's error is one line naming that option (it was PyTorch's traceback)
    torch_conv, conv = torch.nn.Sequential(torch.nn.Conv1d(4, 6, 3, padding=1)).eval(), nn.Conv1d(4, 6, 3, padding=1)
    load_state_dict(conv, {k.removeprefix("0."): v.numpy() for k, v in torch_conv.state_dict().items()}, "Conv1d")
    signal = np.random.default_rng(1).standard_normal((1, 10, 4)).astype(np.float32)
    conv1d = zoo.validate.compare_torch(conv, torch_conv, signal, name_map={"0": None}, layout="channels-last",
                                        device="cpu")
    try:
        zoo.validate.compare_torch(conv, torch_conv, signal, device="cpu")
        refused = "not refused"
    except zoo.errors.UsageError as e:
        refused = str(e)
    print("Conv1d port, layout='channels-last':", "PASS" if conv1d.passed else f"FAIL at {conv1d.first_failure}",
          "| without it:", refused[:90], "...")
    checks.append(conv1d.passed and "layout='channels-last'" in refused)
    print("all checks hold" if all(checks) else f"checks: {checks}")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
