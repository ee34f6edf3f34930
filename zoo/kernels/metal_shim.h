// metal_shim.h: compile Metal kernel sources, as mx.fast.metal_kernel generates them,
// with a C++ compiler (g++ / clang++), and run them on the CPU.
//
// Metal cannot run on Linux; this shim checks that the Metal variant of every zoo
// kernel is valid C++ with the types and signature MLX gives it, and lets
// tests/test_kernels_metal_shim.py run it thread by thread and compare with numpy.
// It provides only what zoo's Metal sources use; what it cannot check: Metal's own
// compiler, its rounding (FMA contraction), and the GPU's scheduling of threads.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>  // before `thread` is defined away below
#include <vector>

using ZooShimThread = std::thread;  // the runner's name for it once `thread` is defined away

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

// Threadgroup arrays (ZOO_SHARED, see zoo/kernels/core.py) are function statics: one copy
// that all threads of a threadgroup share. The runner runs one threadgroup at a time, its
// threads as OS threads that meet at threadgroup_barrier.
#define ZOO_SHARED static

typedef unsigned int uint;

struct uint3 {
    uint x, y, z;
};

// MLX's name for Metal's half (see get_type_string in mlx/backend/common/compiled.cpp).
typedef _Float16 float16_t;

struct float4 {
    float x, y, z, w;
};

// The barrier of the threadgroup that runs now, for a runner that starts each of its threads.
class ZooThreadgroupBarrier {
   public:
    explicit ZooThreadgroupBarrier(unsigned count) : count_(count) {}
    void wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        const unsigned generation = generation_;
        if (++waiting_ == count_) {
            waiting_ = 0;
            ++generation_;
            arrived_.notify_all();
        } else {
            arrived_.wait(lock, [&] { return generation != generation_; });
        }
    }

   private:
    std::mutex mutex_;
    std::condition_variable arrived_;
    unsigned count_;
    unsigned waiting_ = 0;
    unsigned generation_ = 0;
};

inline thread_local ZooThreadgroupBarrier* zoo_shim_barrier = nullptr;

namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };

// A kernel whose threads cooperate through threadgroup memory runs a threadgroup's threads
// together and they wait here for each other; the other kernels run their threads one after
// another, one thread per threadgroup for those with barriers, where there is nothing to wait for.
inline void threadgroup_barrier(mem_flags) {
    if (zoo_shim_barrier != nullptr) {
        zoo_shim_barrier->wait();
    }
}

inline float exp(float x) { return std::exp(x); }

}  // namespace metal
