"""The PyTorch-peer half of tests/docs: every README/docs block marked ``<!-- peers -->`` runs as written, in
order, twice, in a folder of tiny sample files (tests/docs/test_docs.py's), with an interpreter that has torch
and polars beside the project (installed: ``pip install -e .``) and ``../shared`` beside the clone (sbs.py, and
ultralytics 8.3.253 under bench/upstream/python). Minutes of CPU. Here nothing skips: without the peers every
test fails saying what is missing.

    python -m pytest tests/peers
"""
import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "docs"))
from test_docs import PAGES, ROOT, blocks, page_folder, page_id, run_page, samples  # noqa: E402,F401 (fixtures)

PEER_PAGES = [page for page in PAGES if any(block.mark == "peers" for block in blocks(page))]
SHARED = ROOT.parent / "shared"


@pytest.mark.parametrize("page", PEER_PAGES, ids=page_id)
def test_every_peers_block_runs_twice(page, page_folder, monkeypatch):  # noqa: F811 (the fixture imported above)
    missing = [name for name in ("torch", "polars") if importlib.util.find_spec(name) is None]
    assert not missing, f"{sys.executable} cannot import {', '.join(missing)}: run tests/peers with a Python " \
        "that has torch and polars beside the project"
    assert (SHARED / "bench" / "sbs.py").is_file(), f"no {SHARED / 'bench' / 'sbs.py'}: the PyTorch peers' " \
        "../shared must lie beside the clone"
    run_page(page, page_folder, monkeypatch, ray=False, mark="peers")
