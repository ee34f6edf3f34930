import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.numpy import save_file

# The suite checks the project's defaults, whatever the shell running it exports for its own runs (README's
# ZOO_WEIGHTS=synthetic, a raised ZOO_MAX_IMAGE_PIXELS): tests that need a setting set it. ZOO_FUZZ_EXAMPLES is
# the suite's own knob (docs/hardening.md).
for name in [name for name in os.environ if name.startswith("ZOO_") and name != "ZOO_FUZZ_EXAMPLES"]:
    del os.environ[name]

import synthetic_cache  # noqa: E402

synthetic_cache.memoise()  # before any test module imports synthetic_state_dict

# Under pytest-xdist the workers share the host's cores: each runs OpenBLAS and the C routines on its share (2 cores,
# 2 workers: one thread each). With a thread per core each, one worker's idle threads spun on the cores the other
# computed on: the README's command took 9:04 against 6:21 (2026-12-01, docs/testing.md). The threaded forms keep
# their own test (test_cpu_ops.py: one thread against several, bit for bit).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    from zoo import blas

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # macOS
    blas.set_threads(max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
from zoo.weights.synthetic import read_manifest, synthetic_state_dict  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
MANIFESTS = Path(__file__).parent.parent / "models" / "manifests"


@pytest.fixture
def two_blas_threads():
    """Two OpenBLAS threads (and C routines) for the test, whatever the worker's share: LaMa's synthetic weights
    amplify the products' rounding through its 18 blocks, and the tests comparing its forms were measured with
    two (with one, 8 of 3,072 outputs of the compiled forward moved by up to 3.8e-4 against eager)."""
    from zoo import blas

    before = blas.info().get("threads") or 1
    blas.set_threads(2)
    yield
    blas.set_threads(before)


def synthetic_checkpoint(variant: str, path: Path, seed: int = 0) -> Path:
    """A safetensors file in the upstream naming, holding the reference cases' weights."""
    save_file(synthetic_state_dict(read_manifest(MANIFESTS / f"{variant}.json"), seed), str(path))
    return path


def write_video(path: Path, frames: int = 3) -> Path:
    """A 96 x 64 MPEG-4 video at 10 frames/s, frame i grey 60 * i (PyAV)."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 96, 64, "yuv420p"
        for i in range(frames):
            rgb = np.full((64, 96, 3), 60 * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())
    return path


# Python source for a child process to report its peak RSS in KB as peak_rss_kb(): its own high-water
# mark (Linux's VmHWM). ru_maxrss would also count the parent's RSS when it spawned the child: the
# pytest process's, which by then may hold models of earlier tests.
def pyproject() -> dict:
    """The project's pyproject.toml, parsed (tomllib; on Python 3.10 the test extra's backport, tomli)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        import tomli as tomllib
    return tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())


PEAK_RSS_KB = """
import resource
def peak_rss_kb():
    try:
        with open("/proc/self/status") as status:
            return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""


def rebuild_input(sidecar: dict, make) -> np.ndarray:
    """Rebuild a case input from its recipe and check it against the recorded hash."""
    x = make()
    assert hashlib.sha256(x.tobytes()).hexdigest() == sidecar["input_sha256_float32_bytes"]
    return x


def load_case(model: str, case: str):
    return np.load(FIXTURES / model / f"{case}.npz"), json.loads((FIXTURES / model / f"{case}.json").read_text())


def parity_run(spec, model, state_dict: dict, dtype: str = "float32", **case_options):
    """The validator's engine.Run of ``spec``'s parity case, input made with ``case_options`` (seed 1234)."""
    from zoo.validate import case_defaults, engine

    case = engine.case_module(spec.family)
    settings = case_defaults(case)  # the case's command-line defaults, then these options
    for name, value in {"seed": 1234, **case_options}.items():
        setattr(settings, name, value)
    inputs = case.make_inputs(spec, settings)
    return engine.Run(spec, model, state_dict, case, inputs, dtype)


def cli_inputs(root: Path) -> Path:
    """The files the command-line tests name: ok.jpg, imgs/a.jpg, mask.png (a rectangular hole), zero.pt."""
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(root / "ok.jpg")
    (root / "imgs").mkdir()
    Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(root / "imgs" / "a.jpg")
    mask = np.zeros((48, 64), np.uint8)
    mask[10:30, 20:40] = 255
    Image.fromarray(mask).save(root / "mask.png")
    (root / "zero.pt").write_bytes(b"")
    return root


HASHED_BYTES = 64 << 20  # larger files (test_errors' sparse 3 GiB checkpoint) by size, time and inode: hashing
# 3 GiB of holes before and after each of its rows took minutes


def file_tree(root: Path) -> dict[str, str]:
    """Every file and folder under ``root`` with its sha256: equal before and after = nothing written."""
    def signature(p: Path) -> str:
        if p.is_symlink():  # compared as a link: it may lead nowhere
            return f"link to {os.readlink(p)}"
        if p.is_dir():
            return "dir"
        st = p.stat()
        if st.st_size > HASHED_BYTES:
            return f"size {st.st_size} mtime {st.st_mtime_ns} inode {st.st_ino}"
        return hashlib.sha256(p.read_bytes()).hexdigest()

    return {str(p.relative_to(root)): signature(p) for p in sorted(root.rglob("*"))}


def cli_error(argv: list[str], capsys) -> str:
    """Run ``python -m zoo.run ARGV`` in-process; it must fail with one `error:` line, no traceback
    (exit 2 for usage, 1 for runtime problems: tests/test_errors.py checks which is which)."""
    from zoo.run import main

    assert main(argv) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    last = err.splitlines()[-1]  # warnings (e.g. synthetic weights) may come first
    assert last.startswith("error: ")
    return last


@pytest.fixture
def small_mobilesam(monkeypatch):
    """MobileSAM registered with a 128 px encoder input instead of 1024: the command line's
    behaviour, at a 64th of the encoder's work."""
    import dataclasses

    from zoo import registry

    spec = registry.get_spec("mobilesam")
    monkeypatch.setitem(registry.REGISTRY, "mobilesam", dataclasses.replace(spec, preprocess={"image_size": 128}))


@pytest.fixture
def s3_bucket(monkeypatch):
    """``s3://bucket/``, empty, in moto's S3 server in this process, the AWS settings (``AWS_ENDPOINT_URL`` its address,
    read by pyarrow's S3 file system as by boto3) pointing at it; yields a boto3 client of it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        settings = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test",
                    "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="bucket")
        yield s3
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path_factory):
    """No test may reach the network or a user's Hub cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.getbasetemp() / "hf_home"))


@pytest.fixture(autouse=True, scope="module")
def freed_memory_returned():
    """After each test module (its fixtures gone): MLX's buffer cache and the heap's freed blocks go back to the
    system. import zoo keeps up to 1 GiB freed for reuse (zoo.blas.keep_freed_memory), fragmented between live
    blocks; one process running every model's tests grew to 11 GB resident without this."""
    yield
    import gc

    import mlx.core as mx

    from zoo import blas

    gc.collect()
    mx.clear_cache()
    blas.return_freed_memory()
