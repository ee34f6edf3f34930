"""One device per process; dtypes are never mixed quietly."""
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

import zoo
from zoo import devices
from zoo.errors import ZooError, command_line


def test_second_device_decision_is_refused(monkeypatch):
    monkeypatch.setattr(devices, "_chosen", "gpu")
    monkeypatch.setattr(devices, "gpu_backend", lambda: "cuda")
    monkeypatch.setattr(mx, "set_default_device", lambda d: None)
    assert devices.use() == "gpu" and devices.use("gpu") == "gpu"
    with pytest.raises(ZooError, match="already runs on gpu; one device per process"):
        devices.use("cpu")


@pytest.mark.parametrize("value, keeps", [(None, True), ("keep", True), ("release", False), (" Release ", False)])
def test_cuda_pool_kept_unless_released(monkeypatch, value, keeps):
    calls = []
    monkeypatch.setattr(devices, "_chosen", None)
    monkeypatch.setattr(devices, "gpu_backend", lambda: "cuda")
    monkeypatch.setattr(mx, "set_default_device", lambda d: None)
    monkeypatch.setattr(devices, "keep_cuda_pool", lambda: calls.append("kept"))
    if value is None:
        monkeypatch.delenv(devices.POOL_VAR, raising=False)
    else:
        monkeypatch.setenv(devices.POOL_VAR, value)
    assert devices.use("gpu") == "gpu"
    assert calls == (["kept"] if keeps else [])


def test_cuda_pool_bad_choice(monkeypatch):
    monkeypatch.setattr(devices, "_chosen", None)
    monkeypatch.setattr(devices, "gpu_backend", lambda: "cuda")
    monkeypatch.setattr(mx, "set_default_device", lambda d: None)
    monkeypatch.setenv(devices.POOL_VAR, "forever")
    with pytest.raises(ZooError, match="ZOO_CUDA_POOL='forever': use 'keep'"):
        devices.use("gpu")


def test_cuda_pool_without_a_driver_says_how_to_go_on(monkeypatch):
    import ctypes

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    with pytest.raises(ZooError, match="cannot load the CUDA driver.*ZOO_CUDA_POOL=release"):
        devices.keep_cuda_pool()


def test_cpu_leaves_the_cuda_pool_alone(monkeypatch):
    monkeypatch.setattr(devices, "_chosen", None)
    monkeypatch.setattr(devices, "keep_cuda_pool", lambda: pytest.fail("the CPU has no CUDA pool"))
    assert devices.use("cpu") == "cpu"


def test_gpu_request_without_backend(monkeypatch):
    monkeypatch.setattr(devices, "_chosen", None)
    monkeypatch.setattr(devices, "gpu_backend", lambda: None)
    with pytest.raises(ZooError, match="no GPU backend.*use device='cpu'"):  # the Python API's words
        devices.use("gpu")
    with command_line(), pytest.raises(ZooError, match="no GPU backend.*--device cpu"):  # a command line's
        devices.use("gpu")


def test_model_refuses_an_input_of_another_dtype():
    model = zoo.load("resnet18", weights="synthetic", dtype="float16", device="cpu")
    with pytest.raises(ZooError, match="input is float32 but the model runs in float16"):
        model(mx.zeros((1, 32, 32, 3), mx.float32))
    # an integer or bool array is not floats: loading the model in another dtype would not help
    with pytest.raises(ZooError, match=r"input is mlx.core.uint8, not floats: convert with x.astype\(mx.float16\)$"):
        model(mx.zeros((1, 32, 32, 3), mx.uint8))
    # numpy input is converted once at the boundary; the whole pass stays in float16
    assert model(np.zeros((1, 32, 32, 3), np.float32)).dtype == mx.float16
    # uint8 pixels went in as 0-255 where the network takes normalised values; an image of no pixels gave
    # logits of uninitialised memory
    with pytest.raises(ZooError, match="input has dtype uint8: pass floats, scaled as the network takes them"):
        model(np.zeros((1, 32, 32, 3), np.uint8))
    with pytest.raises(ZooError, match=r"input has shape \(1, 0, 32, 3\): an image of no pixels"):
        model(np.zeros((1, 0, 32, 3), np.float32))


def test_weights_are_converted_to_the_requested_dtype():
    from mlx.utils import tree_flatten

    model = zoo.load("resnet18", weights="synthetic", dtype="bfloat16", device="cpu")
    assert {v.dtype for _, v in tree_flatten(model.parameters())} == {mx.bfloat16}


def test_bad_dtype_name():
    with pytest.raises(ZooError, match="unknown dtype 'float64'"):
        zoo.load("resnet18", weights="synthetic", dtype="float64")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="set on Linux only (MLX's CUDA backend)")
@pytest.mark.parametrize("variable, default, users", [("MLX_MAX_OPS_PER_BUFFER", "6", "50"),
                                                      ("MLX_USE_CUDA_GRAPHS", "0", "1")])
def test_import_zoo_sets_mlx_cuda_launch_settings_unless_the_user_did(variable, default, users):
    def value_after_import(value: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != variable}
        if value is not None:
            env[variable] = value
        code = f"import os, zoo; print(os.environ[{variable!r}])"
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    assert value_after_import(None) == default
    assert value_after_import(users) == users
