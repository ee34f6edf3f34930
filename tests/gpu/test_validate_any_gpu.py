"""The GPU half of tests/test_validate_any.py: run by hand on a machine with an MLX GPU (Metal or
CUDA); the default test run leaves this folder out (pyproject.toml's norecursedirs), and here
nothing skips: without a GPU, or with TF32 on, every test fails saying why.

    MLX_ENABLE_TF32=0 python -m pytest tests/gpu -q

The custom kernel of any_models.KernelAdd drops its second operand on the GPU only (on the CPU it
falls back to MLX's add, and tests/test_validate_any.py shows the model passes there): compare
must name that layer, ``add``, first, in both modes; the correct models must pass on the GPU.
"""
import os

import mlx.core as mx
import pytest

import any_models
import zoo.validate
from zoo.devices import gpu_backend


@pytest.fixture(autouse=True)
def on_a_gpu():
    assert gpu_backend() is not None, "no MLX GPU backend here: run tests/gpu on a machine with Metal or CUDA"
    assert os.environ.get("MLX_ENABLE_TF32") == "0", "set MLX_ENABLE_TF32=0: TF32 fails float32 parity by design"


def test_the_gpu_only_kernel_fault_is_named_at_its_layer():
    report = zoo.validate.compare(any_models.kernel_net(), *any_models.inputs("kernel_net"), device="gpu")
    assert [m.first_failure for m in report.modes] == ["add", "add"]
    isolated = report.modes[1]
    assert [r.name for r in isolated.layers if r.failed] == ["add"]  # the layers after it agree again
    assert {"layer": "add", "module": "KernelAdd", "op": "add", "implementation": "custom kernel"} in report.coverage()


@pytest.mark.parametrize("name", sorted(set(any_models.FACTORIES) - {"kernel_net"}))
def test_correct_models_pass_on_the_gpu(name):
    report = zoo.validate.compare(any_models.FACTORIES[name](), *any_models.inputs(name), device="gpu",
                                  dtype=["float32", "float16"])
    assert report.passed, (name, report.first_failure)
    assert mx.default_device() == mx.gpu
