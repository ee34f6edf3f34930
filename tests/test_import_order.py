"""A script that imports mlx (or another MLX library) before zoo: MLX keeps its own BLAS, zoo's C routines
have no OpenBLAS sgemm to call, and those given no packed weight (hosts without AVX2/AVX-512 pack none)
decline. Each model then takes MLX's products and gives the same outputs as with zoo imported first."""
import subprocess
import sys

import numpy as np
import pytest

CHILD = """
import sys
order, model, out, no_packs = sys.argv[1:]
if order == "mlx-first":
    import mlx.core  # as a script that imports mlx before zoo
import numpy as np
import zoo
from zoo import blas
from zoo.kernels import cpu

if no_packs == "1":  # as a host whose CPU takes no packed products
    cpu._pack = lambda *args: None
rng = np.random.default_rng(0)
image = rng.integers(0, 256, (32, 48, 3), np.uint8)
net = zoo.load(model, weights="synthetic:0", device="cpu")
if model == "lama":
    hole = np.zeros((32, 48), bool)
    hole[8:20, 10:30] = True
    result = net.inpaint(image, hole)
else:
    import mlx.core as mx
    result = np.array(net.forward(mx.array(image[None, :32, :32] / 255, mx.float32)))  # eager: the C forms
np.save(out, result)
print(blas.info()["blas"])
"""


def run(tmp_path, order: str, model: str, no_packs: bool) -> tuple[np.ndarray, str]:
    out = tmp_path / f"{model}-{order}-{int(no_packs)}.npy"
    done = subprocess.run([sys.executable, "-c", CHILD, order, model, str(out), str(int(no_packs))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return np.load(out), done.stdout.split()[0]


@pytest.mark.parametrize("model, no_packs", [("lama", False), ("yolov8n", True)])
def test_mlx_imported_first_gives_the_same_outputs(tmp_path, model, no_packs):
    """Before: LaMa's inpaint, and YOLO's forward on a host without packs, raised AttributeError
    ('NoneType' object has no attribute 'shape') where the C call declined."""
    theirs, theirs_blas = run(tmp_path, "mlx-first", model, no_packs)
    ours, our_blas = run(tmp_path, "zoo-first", model, no_packs)
    assert theirs_blas == "mlx's" and our_blas != "mlx's"  # both paths ran
    if model == "lama":  # uint8 pixels: BLAS rounding moves a level at most
        assert np.abs(theirs.astype(int) - ours).max() <= 1
    else:
        assert np.allclose(theirs, ours, rtol=1e-4, atol=1e-4)
