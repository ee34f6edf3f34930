"""The Metal variant of every zoo kernel, compiled with the machine's C++ compiler
against zoo/kernels/metal_shim.h, run thread by thread on the CPU and compared with
numpy.

Each launch is the one the kernel module builds for the GPU (same inputs, template
arguments, grid, threadgroup); its source is wrapped in the signature that
``mx.fast.metal_kernel`` generates (mlx/backend/common/metal_kernel.cpp,
``write_signature``): inputs with fewer than 8 elements in the ``constant`` address
space, the others in ``device``; outputs ``device``; the Metal attributes the
source mentions appended as parameters; ``template <...>`` plus an explicit
instantiation. A kernel with barriers (the NMS greedy pass) runs with one thread
per threadgroup, where a barrier has nothing to wait for. Data types: float32 and
float16 (the shim has no bfloat16).
"""

import ctypes
import dataclasses
import functools
import shutil
import subprocess
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import zoo.kernels
from zoo.kernels import core
from zoo.kernels.nms import _suppression_matrix, float32_threshold, greedy_keep_launch, iou_mask_launch, score_sorted
from zoo.kernels.resize import resize_launch, source_taps
from zoo.kernels.sppf import sppf_launch
from zoo.kernels import box_decode, depthwise, few_outputs, implicit_gemm, winograd
from zoo.validate.reference import kernels as ref

from test_kernels import decode_error, dfl_logits, dfl_within_bound
from test_winograd import assert_as_accurate

COMPILER = shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (g++ or clang++) on PATH")

SHIM = Path(zoo.kernels.__file__).parent / "metal_shim.h"

# MLX's type names in generated Metal source (get_type_string).
TYPE_NAMES = {
    mx.float32: "float",
    mx.float16: "float16_t",
    mx.int32: "int32_t",
    mx.uint32: "uint32_t",
}
NUMPY_TYPES = {mx.float32: np.float32, mx.float16: np.float16, mx.int32: np.int32, mx.uint32: np.uint32}
# Inputs this small go to the constant address space (max_constant_array_size).
CONSTANT_BELOW = 8
# The Metal attributes MLX appends when the source names them, in MLX's order, with the
# value the shim passes; the other attributes of MLX's list are not used by zoo.
ATTRIBUTES = {
    "thread_position_in_grid": "position",
    "thread_position_in_threadgroup": "local",
    "threads_per_threadgroup": "group",
}


def template_value(value) -> str:
    if isinstance(value, bool):
        return str(int(value))  # MLX streams bools as 1 / 0
    if isinstance(value, int):
        return str(value)
    return TYPE_NAMES[value]


def metal_source(launch: core.Launch) -> tuple[str, str]:
    """(kernel function name with template arguments, the whole Metal source)."""
    kernel = launch.kernel
    header, body = core.source(kernel, "metal")
    for name in kernel.input_names:
        assert not any(f"{name}_{info}" in body for info in ("shape", "strides", "ndim")), "not emulated"
    template_args = ", ".join(template_value(v) for _, v in launch.template)
    name = "custom_kernel_" + kernel.name + "".join(f"_{template_value(v)}" for _, v in launch.template)
    params = []
    for index, (input_name, array) in enumerate(zip(kernel.input_names, launch.inputs, strict=True)):
        space = "constant" if array.size < CONSTANT_BELOW else "device"
        params.append(f"  const {space} {TYPE_NAMES[array.dtype]}* {input_name} [[buffer({index})]]")
    for index, (output_name, dtype) in enumerate(zip(kernel.output_names, launch.output_dtypes, strict=True)):
        params.append(f"  device {TYPE_NAMES[dtype]}* {output_name} [[buffer({len(kernel.input_names) + index})]]")
    params += [f"  uint3 {attribute} [[{attribute}]]" for attribute in ATTRIBUTES if attribute in body]
    source = header
    if launch.template:
        kinds = {bool: "bool", int: "int"}
        source += "template <" + ", ".join(f"{kinds.get(type(v), 'typename')} {n}" for n, v in launch.template) + ">\n"
    source += f"[[kernel]] void {name}(\n" + ",\n".join(params) + ") {\n" + body + "\n}\n"
    if launch.template:
        instance = f"{name}<{template_args}>"
        source += f'\ntemplate [[host_name("{name}")]] [[kernel]] decltype({instance}) {instance};\n'
        return instance, source
    return name, source


def runner(launch: core.Launch, function: str) -> str:
    """C entry point: call `function` for every thread position of the launch grid; the threads
    of a cooperative kernel's threadgroup (threadgroup memory, zoo_group_barrier) as OS threads
    that run together, one threadgroup after another."""
    kernel = launch.kernel
    args = []
    for index, array in enumerate(launch.inputs):
        args.append(f"(const {TYPE_NAMES[array.dtype]}*)buffers[{index}]")
    for index, dtype in enumerate(launch.output_dtypes):
        args.append(f"({TYPE_NAMES[dtype]}*)buffers[{len(launch.inputs) + index}]")
    _, body = core.source(kernel, "metal")
    args += [value for attribute, value in ATTRIBUTES.items() if attribute in body]
    call = f"{function}({', '.join(args)});"
    if kernel.cooperative:
        return f"""
extern "C" void zoo_shim_run(void** buffers, const uint* grid, const uint* group_size) {{
    const uint3 group = {{group_size[0], group_size[1], group_size[2]}};
    for (uint gz = 0; gz < grid[2] / group.z; ++gz)
        for (uint gy = 0; gy < grid[1] / group.y; ++gy)
            for (uint gx = 0; gx < grid[0] / group.x; ++gx) {{
                ZooThreadgroupBarrier barrier(group.x * group.y * group.z);
                std::vector<ZooShimThread> threads;
                for (uint z = 0; z < group.z; ++z)
                    for (uint y = 0; y < group.y; ++y)
                        for (uint x = 0; x < group.x; ++x)
                            threads.emplace_back([&, x, y, z, gx, gy, gz] {{
                                zoo_shim_barrier = &barrier;
                                [[maybe_unused]] const uint3 position = {{gx * group.x + x, gy * group.y + y,
                                                                          gz * group.z + z}};
                                [[maybe_unused]] const uint3 local = {{x, y, z}};
                                {call}
                            }});
                for (auto& t : threads) t.join();
            }}
}}
"""
    return f"""
extern "C" void zoo_shim_run(void** buffers, const uint* grid, const uint* group_size) {{
    // (not `threadgroup`: the shim defines that address-space qualifier away)
    [[maybe_unused]] const uint3 group = {{group_size[0], group_size[1], group_size[2]}};
    for (uint z = 0; z < grid[2]; ++z)
        for (uint y = 0; y < grid[1]; ++y)
            for (uint x = 0; x < grid[0]; ++x) {{
                [[maybe_unused]] const uint3 position = {{x, y, z}};
                [[maybe_unused]] const uint3 local = {{x % group.x, y % group.y, z % group.z}};
                {call}
            }}
}}
"""


FLAGS = ["-std=c++17", "-O0", "-fPIC", "-pthread"]  # the same for the precompiled header and each kernel


@functools.cache
def shim_header(tmp_dir: Path) -> tuple[Path, list[str]]:
    """The shim header to include and the flags it needs: with g++, a copy beside its precompiled form, so that each
    kernel's compile skips parsing the standard headers (0.47 against 1.04 s a kernel, 2-core CPU). The header's
    pragma against the Metal attributes does not carry over from a precompiled header: -Wno-attributes says it."""
    if Path(COMPILER).name != "g++":
        return SHIM, []
    header = tmp_dir / SHIM.name
    shutil.copyfile(SHIM, header)
    # without -Werror: g++ warns of the header's #pragma once in a file compiled on its own
    built = subprocess.run([COMPILER, *FLAGS, "-x", "c++-header", str(header), "-o", f"{header}.gch"],
                           capture_output=True, text=True)
    return (header, ["-Winvalid-pch", "-Wno-attributes"]) if built.returncode == 0 else (SHIM, [])


@functools.cache
def compiled(source: str, tmp_dir: Path) -> ctypes.CDLL:
    path = tmp_dir / f"kernel_{abs(hash(source)):x}"
    header, header_flags = shim_header(tmp_dir)
    path.with_suffix(".cpp").write_text(f'#include "{header}"\n{source}')
    result = subprocess.run(
        [COMPILER, *FLAGS, *header_flags, "-shared", "-Wall", "-Werror",
         "-o", str(path.with_suffix(".so")), str(path.with_suffix(".cpp"))],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"{COMPILER} rejected the Metal source:\n{result.stderr}\n{source}"
    return ctypes.CDLL(str(path.with_suffix(".so")))


@pytest.fixture(scope="module")
def run_metal(tmp_path_factory):
    tmp_dir = tmp_path_factory.mktemp("metal_shim")

    def run(launch: core.Launch) -> list[np.ndarray]:
        if launch.kernel.uses_barriers and not launch.kernel.cooperative:
            launch = dataclasses.replace(launch, grid=(1, 1, 1), threadgroup=(1, 1, 1))
        function, source = metal_source(launch)
        library = compiled(source + runner(launch, function), tmp_dir)
        inputs = [np.ascontiguousarray(np.array(a), dtype=NUMPY_TYPES[a.dtype]) for a in launch.inputs]
        outputs = []
        for shape, dtype in zip(launch.output_shapes, launch.output_dtypes, strict=True):
            if launch.init_value is None:
                # Uninitialised on the GPU: all-ones bytes (NaN, -1) show unwritten elements.
                out = np.frombuffer(b"\xff" * (int(np.prod(shape)) * np.dtype(NUMPY_TYPES[dtype]).itemsize),
                                    dtype=NUMPY_TYPES[dtype]).reshape(shape).copy()
            else:
                out = np.full(shape, launch.init_value, dtype=NUMPY_TYPES[dtype])
            outputs.append(out)
        buffers = (ctypes.c_void_p * (len(inputs) + len(outputs)))(*(a.ctypes.data for a in inputs + outputs))
        library.zoo_shim_run(
            buffers, (ctypes.c_uint * 3)(*launch.grid), (ctypes.c_uint * 3)(*launch.threadgroup)
        )
        return outputs

    return run


def test_shim_sees_unwritten_outputs(run_metal):
    # The check below relies on outputs the kernel does not write staying NaN.
    x = mx.zeros((1, 2, 2, 1))
    launch = sppf_launch(x, 5)
    half_grid = dataclasses.replace(launch, grid=(2, 1, 1))
    y1 = run_metal(half_grid)[0].ravel()
    assert (y1[:2] == 0).all() and np.isnan(y1[2:]).all()


# ---------------------------------------------------------------- NMS


def nms_cases():
    rng = np.random.default_rng(0)
    centers = rng.uniform(0, 640, (700, 2))
    sizes = rng.uniform(4, 200, (700, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1).astype(np.float32)
    scores = rng.uniform(0.25, 1, 700).astype(np.float32)
    scores[::7] = 0.5  # ties
    chain = np.array([[10 * k, 0, 10 * k + 100, 100] for k in range(40)], np.float32)
    return {
        "random, 80 classes": (boxes, scores, rng.integers(0, 80, 700).astype(np.int32), 0.7, 300),
        "random, agnostic, max_det 50": (boxes, scores, None, 0.45, 50),
        "chain": (chain, np.linspace(1, 0.5, 40).astype(np.float32), None, 0.7, 300),
        "one box": (boxes[:1], scores[:1], None, 0.7, 300),
    }


@pytest.mark.parametrize("case", list(nms_cases()))
def test_nms_metal(run_metal, case):
    boxes, scores, classes, iou, max_det = nms_cases()[case]
    order, sorted_boxes, areas = score_sorted(
        mx.array(boxes), mx.array(scores), None if classes is None else mx.array(classes)
    )
    threshold = float32_threshold(iou)
    (mask,) = run_metal(iou_mask_launch(sorted_boxes, areas, threshold))
    # The bitmask is the fallback's boolean suppression matrix, packed 32 columns per word.
    n = len(boxes)
    matrix = np.array(_suppression_matrix(sorted_boxes, areas, threshold))
    padded = np.zeros((n, (n + 31) // 32 * 32), dtype=bool)
    padded[:, :n] = matrix
    words = np.packbits(padded, axis=1, bitorder="little").view(np.uint32).ravel()
    np.testing.assert_array_equal(mask, words)
    removed, kept, count = run_metal(greedy_keep_launch(mx.array(mask), order, max_det))
    np.testing.assert_array_equal(kept[: count[0]], ref.nms(boxes, scores, iou, classes, max_det))


# ---------------------------------------------------------------- resize


@pytest.mark.parametrize("mode, align_corners", [("bilinear", False), ("bilinear", True), ("nearest", False)])
@pytest.mark.parametrize("size", [(40, 61), (5, 7), (1, 1), (13, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_resize_metal(run_metal, size, mode, align_corners, dtype):
    x = np.random.default_rng(1).standard_normal((2, 13, 17, 3)).astype(dtype)
    rows, row_weights = source_taps(13, size[0], mode, align_corners)
    cols, col_weights = source_taps(17, size[1], mode, align_corners)
    (y,) = run_metal(resize_launch(mx.array(x), rows, row_weights, cols, col_weights, mode == "nearest"))
    expected = ref.resize(x, size, mode, align_corners)
    tolerance = 1e-6 if dtype == np.float32 else 1e-3
    np.testing.assert_allclose(y.astype(np.float32), expected.astype(np.float32), rtol=tolerance, atol=tolerance)


# ---------------------------------------------------------------- SPPF max-pool


@pytest.mark.parametrize("shape, k", [((1, 20, 20, 8), 5), ((2, 7, 9, 3), 3), ((1, 2, 3, 4), 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_sppf_metal(run_metal, shape, k, dtype):
    x = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    x.flat[5] = np.nan
    outputs = run_metal(sppf_launch(mx.array(x), k))
    for out, expected in zip(outputs, ref.sppf_maxpool(x, k), strict=True):
        np.testing.assert_array_equal(out, expected)


# ---------------------------------------------------------------- box decode


@pytest.mark.parametrize("n, nc, sizes", [(2, 5, ((4, 6), (2, 3), (1, 2))), (1, 1, ((2, 2), (1, 1), (1, 1)))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_box_decode_metal(run_metal, n, nc, sizes, dtype):
    rng = np.random.default_rng(5)
    boxes = [(rng.standard_normal((n, h, w, 64)) * 3).astype(dtype) for h, w in sizes]
    classes = [(rng.standard_normal((n, h, w, nc)) * 4).astype(dtype) for h, w in sizes]
    bins = rng.uniform(0, 16, 16).astype(np.float32)
    (y,) = run_metal(box_decode.decode_launch([mx.array(b) for b in boxes], [mx.array(c) for c in classes],
                                              mx.array(bins), (8, 16, 32)))
    expected = ref.box_decode(boxes, classes, bins, (8, 16, 32))
    assert decode_error(y.astype(np.float64), expected) <= (2e-6 if dtype == np.float32 else 2e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_dfl_distances_metal(run_metal, dtype):
    box, bins = dfl_logits(9, dtype)
    (y,) = run_metal(box_decode.distances_launch(mx.array(box), mx.array(bins)))
    assert dfl_within_bound(y, box, bins)


# ---------------------------------------------------------------- depthwise convolution


@pytest.mark.parametrize("shape, kernel, stride, padding", [((2, 9, 7, 8), (3, 3), (1, 1), (1, 1)),
                                                            ((1, 10, 11, 4), (3, 3), (2, 2), (1, 1)),
                                                            ((1, 5, 6, 3), (3, 5), (2, 1), (0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_depthwise_metal(run_metal, shape, kernel, stride, padding, dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(dtype)
    weight = rng.standard_normal((shape[3], *kernel, 1)).astype(dtype)
    (y,) = run_metal(depthwise.depthwise_launch(mx.array(x), mx.array(weight), stride, padding))
    tolerance = 1e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(y.astype(np.float64), ref.depthwise_conv2d(x, weight, stride, padding),
                               rtol=tolerance, atol=tolerance)


# ---------------------------------------------------------------- Winograd 3x3 convolution


@pytest.mark.parametrize("shape, out_channels, padding, activation", [
    ((2, 7, 9, 5), 6, 1, None), ((1, 8, 6, 3), 4, 0, "relu"), ((1, 1, 1, 2), 3, 1, "silu"), ((1, 3, 4, 1), 1, 0, None),
    ((2, 5, 6, 4), 5, 1, "silu")])
@pytest.mark.parametrize("form", [winograd.F2, winograd.F4], ids=["F2", "F4"])
def test_winograd_metal(run_metal, shape, out_channels, padding, activation, form):
    # the two transform kernels around numpy's GEMM, against the reference's direct convolution
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, 3, 3, shape[-1])).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    n, h, w, _ = shape
    out_size = (h + 2 * padding - 2, w + 2 * padding - 2)
    tiles = (n, -(-out_size[0] // form.tile), -(-out_size[1] // form.tile))
    (v,) = run_metal(winograd.input_launch(form, mx.array(x), padding, tiles))
    m = v @ np.array(winograd.transform_weight(mx.array(weight), form))
    (y,) = run_metal(winograd.output_launch(form, mx.array(m), mx.array(bias), out_size, tiles, activation))
    assert_as_accurate(form, y, ref.conv2d_activated(x, weight, bias, padding, activation))


# ---------------------------------------------------------------- implicit-GEMM convolution


T32x16 = implicit_gemm.Tiles(32, 16, 4, 4)


@pytest.mark.parametrize("shape, out_channels, kernel, stride, padding, activation, tiles, splits", [
    ((2, 7, 9, 12), 8, 3, 1, 1, None, T32x16, 1),  # channels past a slice of 8
    ((1, 9, 8, 8), 20, 3, 2, 1, "silu", T32x16, 1),  # outputs past a tile
    ((2, 6, 6, 4), 4, 1, 1, 0, "relu", T32x16, 1),
    ((1, 11, 10, 4), 8, 7, 2, 3, None, implicit_gemm.Tiles(64, 16, 8, 4), 1),  # two A vectors a thread
    ((1, 5, 5, 16), 12, (3, 1), 1, (1, 0), "silu", implicit_gemm.Tiles(16, 32, 4, 8), 1),
    ((1, 4, 6, 8), 60, 3, 1, 1, "relu", implicit_gemm.Tiles(8, 64, 4, 4), 1),  # fewer A vectors than threads
    # K steps split in runs: 18 steps in 4 runs (runs start mid-tap, at the second slice of 8 channels)
    ((2, 7, 9, 12), 8, 3, 1, 1, "relu", T32x16, 4),
    ((1, 11, 10, 4), 8, 7, 2, 3, "silu", implicit_gemm.Tiles(64, 16, 8, 4), 3),  # 49 taps in 3 runs
    ((1, 5, 5, 32), 8, 1, 1, 0, "relu", T32x16, 2),  # a 1x1's 4 slices in 2 runs
    ((1, 6, 6, 64), 20, 3, 1, 1, None, T32x16, None),  # splits_for's choice: 72 steps, 4 tiles
])
def test_implicit_gemm_metal(run_metal, shape, out_channels, kernel, stride, padding, activation, tiles, splits):
    # small tiles, so that a few threads cover every path of the kernel (rows and outputs past
    # a tile, channels past a slice, several loads a thread, runs of K steps) in shim time
    rng = np.random.default_rng(4)
    (kh, kw), (ph, pw) = core.pair(kernel), core.pair(padding)
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, kh, kw, shape[-1])).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    launch = implicit_gemm.conv_launch(mx.array(x), mx.array(weight), mx.array(bias), core.pair(stride), (ph, pw),
                                       activation, tiles, splits)
    runs = dict(launch.template)["SPLITS"]
    assert runs == (splits or 9)  # the last case: min(264 / 4 tiles, 72 steps / 8, ...)
    (y,) = run_metal(launch)
    if runs > 1:
        y = np.asarray(implicit_gemm.added_runs(mx.array(y), mx.array(bias), activation))
    expected = ref.conv2d_activated(x, weight, bias, (ph, pw), activation, stride)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, out_channels, activation, tiles", [
    ((1, 5, 7, 12), 8, "relu", T32x16),  # channels past a slice of 8, rows past a tile
    ((2, 3, 4, 4), 20, None, T32x16),  # outputs past a tile, two images
    ((1, 4, 4, 8), 4, "silu", implicit_gemm.Tiles(64, 16, 8, 4)),
])
def test_implicit_gemm_subpixel_metal(run_metal, shape, out_channels, activation, tiles):
    # LaMa's upsampling (kernel 3, stride 2, padding 1, output padding 1) as its four output phases
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    weight = rng.standard_normal((out_channels, 3, 3, shape[-1])).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    (y,) = run_metal(implicit_gemm.subpixel_launch(mx.array(x), implicit_gemm.subpixel_weights(mx.array(weight)),
                                                   mx.array(bias), activation, tiles))
    expected = ref.conv_transpose2d_activated(x, weight, bias, 2, 1, 1, activation)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- few-output convolution


@pytest.mark.parametrize("shape, out_channels, kernel, padding, reflect, dtype", [
    ((1, 9, 8, 8), 3, 7, 3, True, np.float32),  # LaMa's last, small: most taps reflected
    ((2, 5, 6, 5), 4, 3, (1, 2), False, np.float32),  # zeros, uneven padding, odd channels
    ((1, 6, 7, 4), 1, (3, 5), (1, 2), True, np.float16),
    # 2 x 2 blocks, the last reaching past one reflection; a slice and a half of channels
    ((1, 10, 70, 12), 3, 7, 3, True, np.float32),
])
def test_few_outputs_metal(run_metal, shape, out_channels, kernel, padding, reflect, dtype):
    rng = np.random.default_rng(5)
    (kh, kw), (ph, pw) = core.pair(kernel), core.pair(padding)
    x = rng.standard_normal(shape).astype(dtype)
    # unit-sized sums, so that float32's rounding of them is ~1e-7 whatever their length
    weight = (rng.standard_normal((out_channels, kh, kw, shape[-1])) / np.sqrt(kh * kw * shape[-1])).astype(dtype)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    (y,) = run_metal(few_outputs.conv_launch(mx.array(x), mx.array(weight), mx.array(bias), (ph, pw), reflect))
    expected = ref.conv2d_padded(x, weight, bias, (ph, pw), reflect)
    tolerance = 1e-5 if dtype == np.float32 else 2e-3 * np.abs(expected).max()  # one rounding to float16
    assert y.dtype == dtype
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=tolerance)
