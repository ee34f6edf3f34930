"""The GPU half of tests/docs: every README/docs block marked ``<!-- gpu -->`` runs as written, in
order, twice, in a folder of tiny sample files (tests/docs/test_docs.py's), on a machine with an MLX
GPU and TF32 off; blocks that name ``../shared/bench/upstream`` (the PyTorch peers) need ``../shared``
beside the clone and torch. Here nothing skips: without a GPU every test fails saying why.

    MLX_ENABLE_TF32=0 python -m pytest tests/gpu/test_docs_gpu.py
"""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "docs"))
from test_docs import PAGES, blocks, page_folder, page_id, run_page, samples  # noqa: E402,F401 (fixtures)

from zoo.devices import gpu_backend  # noqa: E402

GPU_PAGES = [page for page in PAGES if any(block.mark == "gpu" for block in blocks(page))]


@pytest.mark.parametrize("page", GPU_PAGES, ids=page_id)
def test_every_gpu_block_runs_twice(page, page_folder, monkeypatch):  # noqa: F811 (the fixture imported above)
    assert gpu_backend() is not None, "no MLX GPU backend here: run tests/gpu on a machine with Metal or CUDA"
    assert os.environ.get("MLX_ENABLE_TF32") == "0", "set MLX_ENABLE_TF32=0: the pages' float32 checks need it"
    run_page(page, page_folder, monkeypatch, ray=False, mark="gpu")
