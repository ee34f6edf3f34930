"""One kernel source for Metal and CUDA: preludes, build cache, dispatch, fallback switch.

A kernel is a *body*: the inside of a function, written in the subset of C++
that Metal Shading Language and CUDA C++ share (typed buffers, integer and
float arithmetic, loops, ``static_cast``). It sees its inputs and outputs by
name as pointers, the template arguments of its launch (a type ``T``, ints,
bools) and these names, which the per-backend prelude below defines:

- ``thread_pos`` (``uint3``): position of this thread in the launch grid;
- ``local_pos``, ``local_size`` (``uint3``): position in, and size of, its
  threadgroup (CUDA: block);
- ``zoo_barrier()``: threadgroup barrier that also orders device memory;
- ``ZOO_SHARED``: declares an array in threadgroup (CUDA: shared) memory, e.g.
  ``ZOO_SHARED float4 tile[256];``, ``zoo_group_barrier()`` the barrier that orders
  its reads and writes; ``ZOO_SHARED_PTR`` and ``ZOO_DEVICE_PTR`` qualify pointers
  into threadgroup and device memory (Metal's address spaces; nothing on CUDA);
- ``zoo_mul_rn(a, b)``: a float product that is rounded on its own, never
  contracted with a following add into an FMA, so that sums of products round
  like numpy's;
- ``zoo_exp(x)``: the float exponential (``metal::exp``, CUDA's ``expf``).

On CUDA MLX launches ``ceil(grid / threadgroup)`` whole blocks, Metal launches
exactly ``grid`` threads; the CUDA prelude therefore returns early from the
threads outside the grid. A kernel that uses ``zoo_barrier()`` must be launched
with a grid that is a multiple of its threadgroup so that no thread leaves early.

Which variant runs: the native kernel when MLX's default device is the GPU and a
Metal or CUDA backend is available, the fallback (plain MLX ops) otherwise, or
always the fallback when the environment variable ``ZOO_KERNELS=fallback`` is
set (so that the two can be compared on the GPU).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from zoo.devices import gpu_backend
from zoo.errors import ZooError

ENV_VAR = "ZOO_KERNELS"

# An activation the kernels apply before their one write: name -> (its ACTIVATION code in the
# kernels, MLX's op where MLX's ops run instead). The GPU kernels apply codes 0-2 (their own
# tables are the first three entries); zoo/native/cpu_ops.c's ACT_* all four.
ACTIVATIONS = {None: (0, lambda y: y), "relu": (1, nn.relu), "silu": (2, nn.silu), "gelu": (3, nn.gelu)}

# Metal has no separately rounded multiply like CUDA's __fmul_rn: zoo_mul_rn is a plain
# product there, and whether Apple's compiler fuses it into an FMA is not verified here
# (docs/kernels.md: real Metal was not available).
METAL_HEADER = """\
#define zoo_barrier() metal::threadgroup_barrier(metal::mem_flags::mem_device)
#define zoo_group_barrier() metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup)
#ifndef ZOO_SHARED  /* the CPU shim (metal_shim.h) defines it as a static */
#define ZOO_SHARED threadgroup
#endif
#define ZOO_SHARED_PTR threadgroup
#define ZOO_DEVICE_PTR device
#define zoo_mul_rn(a, b) ((a) * (b))
#define zoo_exp(x) metal::exp(x)
"""

# Prelude lines per name; a kernel gets those its body uses (thread_pos always on CUDA,
# for the bounds check). On Metal a named attribute becomes a kernel parameter.
METAL_PRELUDE = {
    "thread_pos": "    const uint3 thread_pos = thread_position_in_grid;\n",
    "local_pos": "    const uint3 local_pos = thread_position_in_threadgroup;\n",
    "local_size": "    const uint3 local_size = threads_per_threadgroup;\n",
}

CUDA_HEADER = """\
typedef unsigned int uint;
#define zoo_barrier() __syncthreads()
#define zoo_group_barrier() __syncthreads()
#define ZOO_SHARED __shared__
#define ZOO_SHARED_PTR
#define ZOO_DEVICE_PTR
#define zoo_mul_rn(a, b) __fmul_rn((a), (b))
#define zoo_exp(x) expf(x)
"""

# `launch_grid` is an extra input that zoo appends on CUDA: the grid in threads.
CUDA_PRELUDE = {
    "thread_pos": """\
    const uint3 thread_pos = make_uint3(blockIdx.x * blockDim.x + threadIdx.x,
                                        blockIdx.y * blockDim.y + threadIdx.y,
                                        blockIdx.z * blockDim.z + threadIdx.z);
    if (thread_pos.x >= launch_grid[0] || thread_pos.y >= launch_grid[1] ||
        thread_pos.z >= launch_grid[2]) {
        return;
    }
""",
    "local_pos": "    const uint3 local_pos = threadIdx;\n",
    "local_size": "    const uint3 local_size = make_uint3(blockDim.x, blockDim.y, blockDim.z);\n",
}

BACKENDS = ("metal", "cuda")


@dataclass(frozen=True)
class Kernel:
    """A kernel body and the names of its buffers, in signature order."""

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    body: str

    @property
    def uses_barriers(self) -> bool:
        return "zoo_barrier()" in self.body or self.cooperative

    @property
    def cooperative(self) -> bool:
        """Its threads share threadgroup memory: a threadgroup's threads run together."""
        return "zoo_group_barrier()" in self.body


@dataclass(frozen=True)
class Launch:
    """Everything one kernel call needs; built by the kernel modules, run by `run`
    on the GPU and by the Metal shim test on the CPU."""

    kernel: Kernel
    inputs: tuple[mx.array, ...]
    template: tuple[tuple[str, object], ...]
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[mx.Dtype, ...]
    init_value: float | None = None

    def __post_init__(self):
        if len(self.inputs) != len(self.kernel.input_names):
            raise ValueError(f"{self.kernel.name}: {len(self.inputs)} inputs for {self.kernel.input_names}")
        if len(self.output_shapes) != len(self.kernel.output_names) or len(self.output_dtypes) != len(
            self.kernel.output_names
        ):
            raise ValueError(f"{self.kernel.name}: output shapes/dtypes do not match {self.kernel.output_names}")
        if min(self.grid) < 1 or min(self.threadgroup) < 1:
            raise ValueError(f"{self.kernel.name}: empty grid {self.grid} or threadgroup {self.threadgroup}")
        if self.kernel.uses_barriers and any(g % t for g, t in zip(self.grid, self.threadgroup)):
            raise ValueError(
                f"{self.kernel.name} uses barriers: grid {self.grid} must be a multiple of threadgroup "
                f"{self.threadgroup}"
            )


def source(kernel: Kernel, backend: str) -> tuple[str, str]:
    """(header, source) as handed to ``mx.fast.metal_kernel`` / ``mx.fast.cuda_kernel``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    header, prelude = (METAL_HEADER, METAL_PRELUDE) if backend == "metal" else (CUDA_HEADER, CUDA_PRELUDE)
    lines = "".join(
        line
        for name, line in prelude.items()
        if re.search(rf"\b{name}\b", kernel.body) or (backend == "cuda" and name == "thread_pos")
    )
    return header, lines + kernel.body


def native_backend() -> str | None:
    """The backend whose native kernels run now, or None when the fallback runs."""
    choice = os.environ.get(ENV_VAR, "")
    if choice not in ("", "auto", "fallback"):
        raise ZooError(f"{ENV_VAR}={choice!r} is not understood; use 'fallback' or 'auto' (or leave it unset)")
    if choice == "fallback" or mx.default_device().type != mx.gpu:
        return None
    return gpu_backend()


@functools.cache
def _build(kernel: Kernel, backend: str):
    header, body = source(kernel, backend)
    if backend == "metal":
        return mx.fast.metal_kernel(
            name=kernel.name,
            input_names=list(kernel.input_names),
            output_names=list(kernel.output_names),
            source=body,
            header=header,
        )
    return mx.fast.cuda_kernel(
        name=kernel.name,
        input_names=[*kernel.input_names, "launch_grid"],
        output_names=list(kernel.output_names),
        source=body,
        header=header,
    )


@functools.lru_cache(maxsize=1024)
def constant(values: tuple, dtype: mx.Dtype) -> mx.array:
    """A small array of host values (sizes, thresholds), made once per process.

    MLX's CUDA backend keeps arrays made from host data in managed memory: an array
    made afresh for every call costs a page migration to the GPU on every call.
    """
    return mx.array(values, dtype=dtype)


def run(launch: Launch, backend: str) -> list[mx.array]:
    """Run `launch` with the native kernel of `backend` (built once per process)."""
    inputs = list(launch.inputs)
    if backend == "cuda":
        inputs.append(constant(launch.grid, mx.uint32))
    return _build(launch.kernel, backend)(
        inputs=inputs,
        template=list(launch.template),
        grid=launch.grid,
        threadgroup=launch.threadgroup,
        output_shapes=list(launch.output_shapes),
        output_dtypes=list(launch.output_dtypes),
        init_value=launch.init_value,
    )


def pair(v) -> tuple[int, int]:
    """A convolution's stride, padding or dilation, given as an int or a pair, as a pair."""
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_output_size(x_shape, weight_shape, stride, padding) -> tuple[int, int]:
    """(OH, OW) of the convolution of an NHWC input of ``x_shape`` with an (O, KH, KW, I) weight."""
    (sh, sw), (ph, pw) = pair(stride), pair(padding)
    return (x_shape[1] + 2 * ph - weight_shape[1]) // sh + 1, (x_shape[2] + 2 * pw - weight_shape[2]) // sw + 1


def as_array(name: str, value) -> mx.array:
    """`value` as an mx.array (numpy arrays are converted), or a ZooError."""
    if isinstance(value, mx.array):
        return value
    if hasattr(value, "__array__") and hasattr(value, "dtype"):
        return mx.array(value)
    raise ZooError(f"{name} must be an mx.array (or a numpy array), got {type(value).__name__}")


FLOAT_DTYPES = (mx.float32, mx.float16, mx.bfloat16)


def nhwc_float_input(op: str, x) -> mx.array:
    """The image input of an NHWC kernel: a non-empty 4-D float32/float16/bfloat16 array, or a ZooError."""
    x = as_array("x", x)
    if x.ndim != 4:
        raise ZooError(f"{op}: x must be NHWC (N, H, W, C), got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ZooError(f"{op}: x must be float32, float16 or bfloat16, got {x.dtype}")
    if x.size == 0:
        raise ZooError(f"{op}: x is empty (shape {tuple(x.shape)})")
    return x


def is_float(dtype: mx.Dtype) -> bool:
    return mx.issubdtype(dtype, mx.floating)


# Kernels index with 32-bit unsigned ints (and MLX's grid is given in ints).
MAX_ELEMENTS = 2**31 - 1


def check_size(name: str, count: int) -> None:
    if count > MAX_ELEMENTS:
        raise ZooError(f"{name} has {count} elements; the kernels index with 32 bits (at most {MAX_ELEMENTS})")
