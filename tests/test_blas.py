"""zoo.blas: MLX's Linux CPU matmul runs on OpenBLAS when zoo is imported first."""
import json
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preload is Linux-only")


def _info(code: str, env_extra: dict | None = None) -> dict:
    import os

    env = {**os.environ, **(env_extra or {})}
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, zoo.blas; print(json.dumps(zoo.blas.info()))"],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@linux_only
def test_zoo_first_gives_mlx_openblas():
    import zoo.blas

    info = zoo.blas.info()
    assert info["blas"].startswith("OpenBLAS"), info["reason"]
    maps = open("/proc/self/maps").read()
    assert "libscipy_openblas" in maps and "cblas_forward" in maps


@linux_only
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_forwarded_gemm_is_correct(dtype):
    """sgemm, dgemm and cgemm (complex alpha/beta by pointer) through the forwarder, against numpy."""
    import mlx.core as mx

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((37, 53)), rng.standard_normal((53, 29))
    if dtype == "complex64":
        a, b = a + 1j * rng.standard_normal(a.shape), b + 1j * rng.standard_normal(b.shape)
    a, b = a.astype(dtype), b.astype(dtype)
    got = np.array(mx.matmul(mx.array(a), mx.array(b), stream=mx.cpu))
    np.testing.assert_allclose(got, a.astype(np.complex128 if dtype == "complex64" else np.float64) @ b,
                               rtol=1e-5, atol=1e-4)


@linux_only
def test_mlx_imported_first_keeps_its_blas_and_says_why():
    info = _info("import mlx.core\nimport zoo")
    assert info["blas"] == "mlx's own" and "import zoo first" in info["reason"]


@linux_only
def test_reference_blas_on_request():
    info = _info("import zoo", {"ZOO_BLAS": "reference"})
    assert info["blas"] == "mlx's own" and info["reason"] == "ZOO_BLAS=reference"


@linux_only
def test_malloc_keeps_freed_memory_unless_told_not_to():
    assert "kept for reuse" in _info("import zoo")["malloc"]
    assert _info("import zoo", {"ZOO_MALLOC": "system"})["malloc"] == "system"


# The x86-64 levels as /proc/cpuinfo names their features ("abm" is LZCNT); GCC's target_clones
# resolver takes the x86-64-v4 clone where all of these are present, v3 without the AVX-512 ones.
X86_64_V3 = {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma",
             "abm", "movbe", "xsave"}
X86_64_V4 = X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@linux_only
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the C forms' clones are x86-64 levels")
def test_import_logs_the_blas_and_the_cpu_forms_in_use():
    """`import zoo` says at debug level which BLAS MLX calls, which clone of the C forms this CPU takes and
    whose products the convolutions' packed weights take."""
    flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split(":")[1].split())
    level = "avx512" if X86_64_V4 <= flags else "avx2" if X86_64_V3 <= flags else "generic"
    out = subprocess.run([sys.executable, "-c", "import logging; logging.basicConfig(level=logging.DEBUG); import zoo"],
                         capture_output=True, text=True, check=True)
    lines = [line for line in out.stderr.splitlines() if line.startswith("DEBUG:zoo:CPU: ")]
    assert len(lines) == 1, out.stderr
    products = {"avx512": r"zoo's, whole panels \(AVX-512\)", "avx2": r"zoo's, half panels \(AVX2\)",
                "generic": "OpenBLAS's"}[level]
    assert re.fullmatch(r"DEBUG:zoo:CPU: BLAS OpenBLAS .+ \(scipy-openblas32\), \w+ kernels, \d+ threads; "
                        rf"C forms {level} \(.+\), weight products {products}", lines[0]), lines[0]


IDLE_CPU_AFTER_GEMM = """
import os, time, zoo
import mlx.core as mx
a = mx.ones((1024, 1024))
for _ in range(3):
    mx.eval(a @ a)  # OpenBLAS's workers take part
start = os.times()
time.sleep(0.5)
end = os.times()
print(end.user + end.system - start.user - start.system)
"""


@linux_only
def test_openblas_workers_sleep_after_a_product():
    """OpenBLAS reads OPENBLAS_THREAD_TIMEOUT when it loads: zoo sets it before anything loads the library,
    so its idle workers sleep at once (by default they spin ~0.1 s after each product, 2^28 cycles)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    runs = [subprocess.run([sys.executable, "-c", IDLE_CPU_AFTER_GEMM], capture_output=True, text=True, env=env,
                           check=True) for _ in range(3)]
    idle_cpu = [float(run.stdout.split()[-1]) for run in runs]
    assert min(idle_cpu) < 0.02, idle_cpu


def test_a_native_build_older_than_its_source_is_not_loaded(tmp_path, monkeypatch, capsys):
    """An editable install after a pull: the C source changed and the library was not rebuilt, so its functions
    may take other arguments than the Python calling them. It is left unused, said once in one line."""
    import importlib.machinery
    import importlib.util
    import os

    import zoo.native as native

    library, source = tmp_path / "probe_ops.so", tmp_path / "probe_ops.c"
    library.write_bytes(b""), source.write_text("")
    spec = importlib.machinery.ModuleSpec("zoo.native.probe_ops", None, origin=str(library))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec if name == "zoo.native.probe_ops" else None)
    os.utime(source, (1_000, 1_000)), os.utime(library, (2_000, 2_000))
    assert native.built("probe_ops") == library  # built after its source: used
    os.utime(source, (3_000, 3_000))
    assert native.built("probe_ops") is None and native.built("probe_ops") is None
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and note[0].startswith("note: ") and "pip install -e ." in note[0]
    source.unlink()  # an installed wheel holds no source: its library is used
    assert native.built("probe_ops") == library
