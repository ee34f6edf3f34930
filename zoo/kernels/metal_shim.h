// metal_shim.h: compile Metal kernel sources, as mx.fast.metal_kernel generates them,
// with a C++ compiler (g++ / clang++), and run them on the CPU.
//
// Metal cannot run on Linux; this shim checks that the Metal variant of every zoo
// kernel is valid C++ with the types and signature MLX gives it, and lets
// tests/test_kernels_metal_shim.py run it thread by thread and compare with numpy.
// It provides only what zoo's Metal sources use; what it cannot check: Metal's own
// compiler, its rounding (FMA contraction), and real concurrency.
#pragma once

#include <cmath>
#include <cstdint>

// Metal attributes ([[kernel]], [[buffer(i)]], [[thread_position_in_grid]],
// [[host_name("...")]]) are unknown to a C++ compiler, which ignores them.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wunknown-attributes"
#else
#pragma GCC diagnostic ignored "-Wattributes"
#endif

// Address-space qualifiers: the CPU has one address space.
#define device
#define constant
#define thread
#define threadgroup

typedef unsigned int uint;

struct uint3 {
    uint x, y, z;
};

// MLX's name for Metal's half (see get_type_string in mlx/backend/common/compiled.cpp).
typedef _Float16 float16_t;

namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };

// The shim runs the threads one after another, with one thread per threadgroup for a
// kernel that has barriers: a barrier then has nothing to wait for.
inline void threadgroup_barrier(mem_flags) {}

inline float exp(float x) { return std::exp(x); }

}  // namespace metal
