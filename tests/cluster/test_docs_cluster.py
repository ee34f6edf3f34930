"""The cluster half of tests/docs: every README/docs block marked ``<!-- cluster -->`` (ray.md's "A cluster") runs as
written, in order, twice, in a folder of tiny sample files (tests/docs/test_docs.py's), each command a process of
its own as typed in a terminal, on this one machine standing for the cluster's:

- ``ray start --head`` and ``ray start --address $HEAD_IP:6379`` start two Ray nodes here: two raylets, each with
  ports of its own and the machine's CPUs (checked as the first run starts: two raylets alive);
- the placeholders are what the page tells a user to set once: ``HEAD_IP`` this machine's address (the one
  ``ray start --head`` prints), ``SHARED`` the page's folder (its ``photos/``), ``RAY_AUTH_MODE`` the block's own
  ``export``; the single machine shares the head's token file (``~/.ray/auth_token``), so no ``RAY_AUTH_TOKEN``;
- ``s3://bucket/photos/`` is a bucket of moto's S3 server in this process, holding the page's ``photos/``: the
  ``AWS_*`` settings (``AWS_ENDPOINT_URL`` its address, read by pyarrow's S3 file system) are set before the block,
  so Ray's read tasks on both nodes read it as they would read S3.

Every run prints only its own lines (the synthetic-weights warning and its result; the second time the refusal
to replace its file), and no Ray process outlives the block.

The block's ``ray stop`` ends every Ray process of the machine, not only the test's: run this test on its own
(``python -m pytest tests/cluster``, never beside another Ray or with ``-n``). It fails before starting anything
where another Ray runs, and ends what it started (``ray stop`` again) if it fails half-way. Without Ray or moto it
fails saying what to install. Two to three minutes of two cores, most of it Ray starting (the refusal's test
below, one more minute).
"""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from test_ray import write_images

sys.path.insert(0, str(Path(__file__).parents[1] / "docs"))
import test_docs  # noqa: E402 (the path above)
from test_docs import (PAGES, blocks, page_folder, page_id, run_child, run_command, run_page,  # noqa: E402,F401
                       samples)  # page_folder, samples: the fixtures

CLUSTER_PAGES = [page for page in PAGES if any(block.mark == "cluster" for block in blocks(page))]


def ray_processes() -> list[tuple[int, str]]:
    """This machine's Ray processes (anyone's), as ``ps`` shows them (pid, command line): those running a program of
    Ray's package (GCS, raylet, agents, monitors) and Ray's workers (``ray::...``)."""
    import ray

    package = str(Path(ray.__file__).parent) + os.sep
    listed = subprocess.run(["ps", "-A", "-ww", "-o", "pid=", "-o", "args="], capture_output=True, text=True,
                            check=True)  # -ww: whole command lines, whatever the terminal's width
    processes = [line.strip().split(None, 1) for line in listed.stdout.splitlines() if line.strip()]
    return [(int(pid), args) for pid, args in processes if args.startswith("ray::") or package in args]


@pytest.fixture
def machine_of_its_own():
    """Ray and moto installed, no other Ray on this machine (the block's ``ray stop`` would end it); after the test,
    none of its Ray processes left, even when it failed half-way."""
    missing = [name for name in ("ray", "moto", "boto3", "flask") if importlib.util.find_spec(name) is None]
    assert not missing, f"{sys.executable} cannot import {', '.join(missing)}: pip install -e \".[test]\""
    others = ray_processes()
    assert not others, f"Ray already runs on this machine ({len(others)} processes, e.g. {others[0]}): " \
        "the block's `ray stop` would end them; run tests/cluster where no other Ray runs"
    try:
        yield
    finally:
        if ray_processes():
            run_child(["ray", "stop", "--force"])


@pytest.fixture
def s3_photos(page_folder, s3_bucket):  # noqa: F811 (the fixture imported above)
    """``s3://bucket/photos/``: the page's photos/ in a bucket of moto's S3 server (conftest's s3_bucket)."""
    photos = sorted((page_folder / "photos").iterdir())
    for photo in photos:
        s3_bucket.put_object(Bucket="bucket", Key=f"photos/{photo.name}", Body=photo.read_bytes())
    return [photo.name for photo in photos]


def test_the_cluster_block_is_found():
    """ray.md's block is listed for the test below: a mark lost or misspelt would leave it nothing to run."""
    assert [page_id(page) for page in CLUSTER_PAGES] == ["docs/ray.md"]


@pytest.mark.parametrize("page", CLUSTER_PAGES, ids=page_id)
def test_every_cluster_block_runs_twice(page, page_folder, machine_of_its_own, s3_photos, monkeypatch):  # noqa: F811
    import pyarrow.parquet as pq
    import ray

    monkeypatch.setenv("HEAD_IP", ray.util.get_node_ip_address())
    monkeypatch.setenv("SHARED", str(page_folder))
    ran = []  # (command, raylets alive as it started, what it printed)

    def run_as_typed(command, patch):
        raylets = sum(Path(args.split()[0]).name == "raylet" for _, args in ray_processes())
        code, printed = run_command(command, patch, in_process=False)
        ran.append((command, raylets, printed))
        return code, printed

    monkeypatch.setattr(test_docs, "run_command", run_as_typed)
    run_page(page, page_folder, monkeypatch, ray=True, mark="cluster")
    assert not ray_processes(), "the block's `ray stop` left Ray processes"

    runs = [(command, raylets, printed.splitlines()) for command, raylets, printed in ran if "zoo.run" in command]
    assert [re.search(r"--out (\S+)/", command).group(1) for command, _, _ in runs] == ["classes", "boxes"] * 2
    assert runs[0][1] == 2  # both nodes up as the first run starts
    for command, _, lines in runs[:2]:  # the synthetic weights said, then the result
        out, model = re.search(r"--out (\S+)/", command).group(1), shlex.split(command)[3]
        assert len(lines) == 2 and lines[0].startswith(f"WARNING: ZOO_WEIGHTS=synthetic: {model} runs on synthetic "), \
            (command, lines)
        assert lines[1] == f"{len(s3_photos)} images; results in {out}/predictions.parquet", (command, lines)
    for command, _, lines in runs[2:]:  # run again: the file is kept
        out = re.search(r"--out (\S+)/", command).group(1)
        assert lines == [f"error: output {out}/predictions.parquet exists: pass --overwrite to replace it, or another "
                         "path"], (command, lines)
    classes = pq.read_table(page_folder / "classes" / "predictions.parquet").to_pylist()
    assert sorted(row["path"] for row in classes) == [str(page_folder / "photos" / name) for name in s3_photos]
    boxes = pq.read_table(page_folder / "boxes" / "predictions.parquet").to_pylist()
    assert sorted(row["path"] for row in boxes) == [f"bucket/photos/{name}" for name in s3_photos]
    assert all(row["error"] == "" for row in classes + boxes)


def test_a_run_the_head_refuses_says_why_in_one_line(machine_of_its_own, tmp_path, monkeypatch):
    """A head of Ray 2.59+ (token authentication) and a run given its address without RAY_AUTH_MODE=token: one error
    line naming Ray's reason, not Ray's client's 20 lines of retries before it."""
    import ray

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.chdir(tmp_path)
    write_images(tmp_path / "photos", 1)
    assert run_child(["ray", "start", "--head", "--port", "6379"])[0] == 0
    address = f"{ray.util.get_node_ip_address()}:6379"
    code, printed = run_child(["python", "-m", "zoo.run", "resnet18", "photos/", "--ray", "--ray-address", address,
                               "--weights", "synthetic:0", "--out", "out"])
    assert code == 1
    assert printed.splitlines() == [
        f"error: cannot join the Ray cluster {address!r} (Failed to connect to Ray cluster at {address}: "
        "InvalidAuthToken: Authentication token is missing or incorrect): start one with `ray start --head`; if one "
        "runs there with token authentication (Ray 2.59+ turns it on), set RAY_AUTH_MODE=token (on another machine "
        "also RAY_AUTH_TOKEN, the head's `ray get-auth-token`); or leave --ray-address out for a local one"]
    assert not (tmp_path / "out").exists()
