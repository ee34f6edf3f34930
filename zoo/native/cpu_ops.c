/*
 * CPU forms of the ops MLX's Linux CPU backend runs slowly (see zoo/kernels/cpu.py, docs/speed-cpu.md).
 *
 * MLX's x86 CPU wheel is built for baseline x86-64: its element-wise ops run one
 * float at a time, and exp/erf/fma/floor become library calls (sigmoid ~20 ns per
 * element, exact GELU ~35 ns, where an add takes 0.3 ns). Grouped convolutions
 * (depthwise) take its naive loop (~0.5 GFLOP/s); softmax pays the same exp. Here the same maths is written as
 * plain loops that the compiler vectorises; on x86-64 each entry point is built for
 * AVX-512, AVX2+FMA and baseline, and the loader picks the best one the CPU has
 * (target_clones). Work is split over `threads` POSIX threads.
 *
 * float32 only, contiguous buffers; the Python side casts and checks.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getcpu, pthread_attr_setaffinity_np */
#endif
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One clone per x86-64 level, so that the AVX2 one also has FMA: "avx2,fma" names two clones
 * (avx2 without FMA was the one taken: GELU 1.6x slower), and "arch=haswell" is taken only on
 * Intel Haswell-family CPUs (__builtin_cpu_is), not on an AMD EPYC. GCC 12 knows the levels. */
#if defined(ZOO_CLONES) /* given empty on the command line: one build for the level -march names
                          * (benchmarks/avx2_emulation.py builds an AVX2 one on an AVX-512 host) */
#define ZOO_ONE_LEVEL 1
#elif defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define ZOO_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define ZOO_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ZOO_CLONES
#endif

/* Which clone of the entry points the loader takes on this CPU, by the test GCC's target_clones
 * resolver makes (zoo.blas logs it at import) */
const char *zoo_cpu_forms(void) {
#if defined(ZOO_ONE_LEVEL) && defined(__AVX512F__)
  return "avx512 (one level, as compiled)";
#elif defined(ZOO_ONE_LEVEL) && defined(__AVX2__)
  return "avx2 (one level, as compiled)";
#elif defined(ZOO_ONE_LEVEL)
  return "generic (one level, as compiled)";
#elif defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "avx512 (x86-64-v4)";
  if (__builtin_cpu_supports("x86-64-v3")) return "avx2 (x86-64-v3)";
  return "generic (x86-64)";
#elif defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512 (avx512f)";
  if (__builtin_cpu_supports("avx2")) return "avx2 (avx2)";
  return "generic (x86-64)";
#else
  return "generic (one build)";
#endif
}

/* Before a loop whose stores never alias its loads, which the compiler cannot prove (the
 * Winograd transforms read 16 pointers and write 16 planes: more alias checks than GCC makes) */
#if defined(__clang__)
#define ZOO_NO_ALIAS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define ZOO_NO_ALIAS _Pragma("GCC ivdep")
#else
#define ZOO_NO_ALIAS
#endif

#define MAX_THREADS 64

/* ---- a minimal parallel-for: [0, n) in blocks that `threads` threads take in turn ---------- */

typedef void (*range_fn)(const void *args, ptrdiff_t begin, ptrdiff_t end);

/* Blocks per thread: a thread that runs slower (here one vCPU of two often ran at half speed for
 * tens of ms) takes fewer blocks, instead of the whole op waiting for its fixed half. */
#define BLOCKS_PER_THREAD 8

/* The work of one parallel_for, on the heap: a worker that comes to it only after the caller took every
 * block finds none left, and neither touches the caller's arguments nor is waited for. Waiting for such a
 * thread cost a whole scheduler slice per op on a loaded host (load average ~5 on 2 cores). The last
 * owner frees it. */
typedef struct {
  range_fn fn;
  const void *args;
  ptrdiff_t n, block, blocks;
  atomic_llong next;  /* the next block to take */
  atomic_llong done;  /* blocks finished */
  atomic_int owners;  /* the caller and the workers still to leave */
  pthread_mutex_t lock;
  pthread_cond_t finished; /* done reached blocks */
} work_t;

static void leave(work_t *w) {
  if (atomic_fetch_sub(&w->owners, 1) == 1) {
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->finished);
    free(w);
  }
}

static void take_blocks(work_t *w) {
  for (;;) {
    const ptrdiff_t index = (ptrdiff_t)atomic_fetch_add(&w->next, 1), begin = index * w->block;
    if (index >= w->blocks) return;
    w->fn(w->args, begin, begin + w->block < w->n ? begin + w->block : w->n);
    if (atomic_fetch_add(&w->done, 1) + 1 == w->blocks) {
      pthread_mutex_lock(&w->lock);
      pthread_cond_signal(&w->finished);
      pthread_mutex_unlock(&w->lock);
    }
  }
}

/* Workers that stay: each waits for the work handed to it, yielding its CPU in a loop for up to WORKER_SPIN_NS
 * after its last work and then sleeping. A thread started per parallel_for (until 2026-11-29) cost 20-45 us
 * a call on this 2-core VM, and a forward makes ~100 of them (YOLOv8n 69 C calls, Winograd's three passes
 * in each): with workers that stay, ResNet-50 took 46.9 against 50.5 ms, YOLOv8n 59.1 against 64.9 (the two
 * libraries alternated in one process). The loop yields (sched_yield) rather than spins: a thread that needs
 * the CPU (OpenBLAS's, MLX's stream) gets it. */
#define WORKER_SPIN_NS 1000000

typedef struct {
  _Atomic(work_t *) work; /* handed by parallel_for, cleared by the worker when done */
  atomic_int sleeping;
  pthread_mutex_t lock;
  pthread_cond_t wake;
} worker_t;

static worker_t workers[MAX_THREADS];
static atomic_int worker_count;
static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *worker_loop(void *p) {
  worker_t *me = (worker_t *)p;
  for (;;) {
    work_t *w = atomic_load(&me->work);
    for (const double start = now_ns(); w == NULL && now_ns() - start < WORKER_SPIN_NS; w = atomic_load(&me->work))
      sched_yield();
    if (w == NULL) {
      pthread_mutex_lock(&me->lock);
      atomic_store(&me->sleeping, 1);
      while ((w = atomic_load(&me->work)) == NULL) pthread_cond_wait(&me->wake, &me->lock);
      atomic_store(&me->sleeping, 0);
      pthread_mutex_unlock(&me->lock);
    }
    take_blocks(w);
    atomic_store(&me->work, NULL);
    leave(w);
  }
  return NULL;
}

/* A forked child has none of its parent's workers: it starts its own */
static void forget_workers(void) {
  atomic_store(&worker_count, 0);
  pthread_mutex_init(&workers_lock, NULL);
}

/* Each new worker's attributes: on Linux, pinned to an allowed CPU other than the caller's. Left to
 * itself the scheduler put the second thread on the caller's CPU after every OpenBLAS call (the other
 * CPU still counted busy with OpenBLAS's just-parked worker), so the work that follows a sgemm ran on
 * one core of two. */
static void spread_workers(pthread_attr_t *attrs, int first, int count) {
#if defined(__linux__)
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < count + 1) return;
  const int here = sched_getcpu();
  int cpu = -1;
  for (int t = 0; t < count; ++t) {
    do ++cpu; while (cpu < CPU_SETSIZE && (!CPU_ISSET(cpu, &allowed) || cpu == here));
    if (cpu >= CPU_SETSIZE) return;
    if (t < first) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_attr_setaffinity_np(&attrs[t], sizeof one, &one);
  }
#else
  (void)attrs;
  (void)first;
  (void)count;
#endif
}

/* ``wanted`` workers started (fewer where a thread could not start): how many there are */
static int start_workers(int wanted) {
  if (wanted > MAX_THREADS) wanted = MAX_THREADS;
  int have = atomic_load(&worker_count);
  if (have >= wanted) return wanted;
  pthread_mutex_lock(&workers_lock);
  static int fork_handler = 0;
  if (!fork_handler) fork_handler = pthread_atfork(NULL, NULL, forget_workers) == 0;
  have = atomic_load(&worker_count);
  pthread_attr_t attrs[MAX_THREADS];
  for (int t = have; t < wanted; ++t) {
    pthread_attr_init(&attrs[t]);
    pthread_attr_setdetachstate(&attrs[t], PTHREAD_CREATE_DETACHED);
  }
  spread_workers(attrs, have, wanted);
  for (int t = have; t < wanted; ++t) {
    worker_t *w = &workers[t];
    atomic_init(&w->work, NULL);
    atomic_init(&w->sleeping, 0);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_t id;
    if (have == t && pthread_create(&id, &attrs[t], worker_loop, w) == 0) ++have;
    pthread_attr_destroy(&attrs[t]);
  }
  atomic_store(&worker_count, have);
  pthread_mutex_unlock(&workers_lock);
  return have;
}

static void parallel_for(range_fn fn, const void *args, ptrdiff_t n, int threads) {
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  if (threads < 1 || n < 2 * threads) threads = 1;
  work_t *work = threads == 1 ? NULL : (work_t *)malloc(sizeof(work_t));
  if (work == NULL) { /* one thread, or no memory for the shared work: the caller does it all */
    if (n > 0) fn(args, 0, n);
    return;
  }
  const ptrdiff_t blocks = (ptrdiff_t)threads * BLOCKS_PER_THREAD, block = (n + blocks - 1) / blocks;
  work->fn = fn, work->args = args, work->n = n, work->block = block, work->blocks = (n + block - 1) / block;
  atomic_init(&work->next, 0);
  atomic_init(&work->done, 0);
  atomic_init(&work->owners, 1);
  pthread_mutex_init(&work->lock, NULL);
  pthread_cond_init(&work->finished, NULL);
  const int count = start_workers(threads - 1);
  for (int t = 0; t < count; ++t) {
    worker_t *w = &workers[t];
    work_t *none = NULL;
    atomic_fetch_add(&work->owners, 1);
    if (!atomic_compare_exchange_strong(&w->work, &none, work)) { /* still on earlier work (another caller's) */
      atomic_fetch_sub(&work->owners, 1);
      continue;
    }
    if (atomic_load(&w->sleeping)) {
      pthread_mutex_lock(&w->lock);
      pthread_cond_signal(&w->wake);
      pthread_mutex_unlock(&w->lock);
    }
  }
  take_blocks(work); /* the caller takes blocks too (all of them where no worker came in time) */
  pthread_mutex_lock(&work->lock);
  while (atomic_load(&work->done) < work->blocks) pthread_cond_wait(&work->finished, &work->lock);
  pthread_mutex_unlock(&work->lock);
  leave(work);
}

/* ---- exp for x <= 0, vectorisable (no library calls) -------------------------------------- */

/* exp(x) for x <= 0: x = n ln2 + r, |r| <= ln2/2 (ln2 split in two for an exact n ln2),
 * exp(r) by Cephes' degree-6 polynomial (~1 ulp), 2^n from the exponent bits. Below -87
 * (where exp is < 2^-125) it returns exp(-87): callers add it to 1 or multiply it by x. */
static inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  float n = x * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  union {
    int32_t i;
    float f;
  } scale;
  scale.i = ((int32_t)n + 127) << 23;
  return p * scale.f;
}

/* sigmoid(x) = 1 / (1 + e^-x); with e = exp(-|x|) <= 1 both halves stay accurate:
 * x >= 0: 1 / (1 + e), x < 0: e / (1 + e). */
static inline float sigmoid1(float x) {
  float e = exp_nonpositive(-fabsf(x));
  float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : e * s;
}

/* Phi(x) = 0.5 erfc(-x / sqrt 2), the normal CDF of exact GELU. erfc(z) for z >= 0 by the
 * Chebyshev-fitted form of Numerical Recipes (erfcc: fractional error < 1.2e-7 for every z),
 * so the negative tail keeps its relative precision instead of cancelling in 1 + erf. One exp of
 * the rounded p - z^2 (~z^2 * 6e-8 relative: GELU's worst 1.3e-6 of max(|GELU|, 1e-3), at x = -3.4,
 * against float64); an exactly split square took a second exp and 1.5x the time. */
static inline float normal_cdf(float x) {
  float z = fabsf(x) * 0.70710678118654752f;
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  float half_erfc = 0.5f * t * exp_nonpositive(p - z * z);
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

/* ---- element-wise ops ---------------------------------------------------------------------- */

/* y = act(x) (x may be y): the element-wise ops, and the activation a convolution applies to its
 * output before returning (its epilogue). The codes of zoo.kernels.core.ACTIVATIONS, sigmoid
 * (ACT_SIGMOID) only as an op of its own. One loop per activation, so that each vectorises. */
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_SILU = 2, ACT_GELU = 3, ACT_SIGMOID = 4 };

ZOO_CLONES static void activate(const float *x, float *y, ptrdiff_t n, int act) {
  if (act == ACT_RELU) { /* NaN stays NaN, as in MLX's and torch's relu: broken weights must not look fine */
    for (ptrdiff_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
  } else if (act == ACT_SILU) {
    for (ptrdiff_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid1(x[i]);
  } else if (act == ACT_GELU) {
    for (ptrdiff_t i = 0; i < n; ++i) y[i] = x[i] * normal_cdf(x[i]);
  } else if (act == ACT_SIGMOID) {
    for (ptrdiff_t i = 0; i < n; ++i) y[i] = sigmoid1(x[i]);
  } else if (x != y) {
    memcpy(y, x, sizeof(float) * (size_t)n);
  }
}

typedef struct {
  const float *x;
  float *y;
  ptrdiff_t cols; /* elements per index of the parallel range */
  int act;
} activate_args;

static void activate_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const activate_args *a = (const activate_args *)p;
  activate(a->x + b * a->cols, a->y + b * a->cols, (e - b) * a->cols, a->act);
}

/* Below this many elements one thread does it: starting a thread costs ~20 us. */
#define UNARY_GRAIN 65536

/* y = act(x) over (rows, cols), rows split over the threads where there is enough work */
static void activate_all(const float *x, float *y, ptrdiff_t rows, ptrdiff_t cols, int act, int threads) {
  activate_args a = {x, y, cols, act};
  parallel_for(activate_rows, &a, rows, rows * cols < UNARY_GRAIN * 2 ? 1 : threads);
}

void zoo_sigmoid_f32(const float *x, float *y, ptrdiff_t n, int threads) { activate_all(x, y, n, 1, ACT_SIGMOID, threads); }
void zoo_silu_f32(const float *x, float *y, ptrdiff_t n, int threads) { activate_all(x, y, n, 1, ACT_SILU, threads); }
void zoo_gelu_f32(const float *x, float *y, ptrdiff_t n, int threads) { activate_all(x, y, n, 1, ACT_GELU, threads); }

/* ---- row-wise ops over (rows, cols): a routine per row, rows split over the threads --------- */

typedef void (*row_op)(const void *params, const float *x, float *y, ptrdiff_t row, ptrdiff_t cols);

typedef struct {
  row_op op;
  const void *params;
  const float *x;
  float *y;
  ptrdiff_t cols;
} rows_args;

static void rows_range(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const rows_args *a = (const rows_args *)p;
  for (ptrdiff_t row = b; row < e; ++row) a->op(a->params, a->x + row * a->cols, a->y + row * a->cols, row, a->cols);
}

static void for_each_row(row_op op, const void *params, const float *x, float *y, ptrdiff_t rows, ptrdiff_t cols,
                         int threads) {
  rows_args a = {op, params, x, y, cols};
  if (rows * cols < UNARY_GRAIN * 2) threads = 1;
  parallel_for(rows_range, &a, rows, threads);
}

/* Reductions in 16 independent lanes: the compiler vectorises them (one accumulator would need
 * licence to reorder the float additions). */
#define LANES 16

static inline float row_sum(const float *x, ptrdiff_t n) {
  float lanes[LANES] = {0};
  const ptrdiff_t whole = n / LANES * LANES;
  for (ptrdiff_t i = 0; i < whole; i += LANES)
    for (int l = 0; l < LANES; ++l) lanes[l] += x[i + l];
  float sum = 0.0f;
  for (int l = 0; l < LANES; ++l) sum += lanes[l];
  for (ptrdiff_t i = whole; i < n; ++i) sum += x[i];
  return sum;
}

static inline float row_max(const float *x, ptrdiff_t n) {
  float lanes[LANES];
  for (int l = 0; l < LANES; ++l) lanes[l] = x[0];
  const ptrdiff_t whole = n / LANES * LANES;
  for (ptrdiff_t i = 0; i < whole; i += LANES)
    for (int l = 0; l < LANES; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  float top = x[0];
  for (int l = 0; l < LANES; ++l) top = lanes[l] > top ? lanes[l] : top;
  for (ptrdiff_t i = whole; i < n; ++i) top = x[i] > top ? x[i] : top;
  return top;
}

/* per-channel scale and shift (BatchNorm at inference), channels last */
typedef struct {
  const float *scale, *shift;
} affine_params;

ZOO_CLONES static void affine_row(const void *p, const float *x, float *y, ptrdiff_t row, ptrdiff_t C) {
  const affine_params *a = (const affine_params *)p;
  (void)row;
  for (ptrdiff_t c = 0; c < C; ++c) y[c] = x[c] * a->scale[c] + a->shift[c];
}

void zoo_channel_affine_f32(const float *x, const float *scale, const float *shift, float *y, ptrdiff_t rows,
                            ptrdiff_t channels, int threads) {
  affine_params a = {scale, shift};
  for_each_row(affine_row, &a, x, y, rows, channels, threads);
}

/* softmax of scale * x + bias; bias (bias_rows, cols): row r takes bias row r % bias_rows, or NULL */
typedef struct {
  const float *bias;
  ptrdiff_t bias_rows;
  float scale;
} softmax_params;

ZOO_CLONES static void softmax_row(const void *p, const float *x, float *y, ptrdiff_t row, ptrdiff_t cols) {
  const softmax_params *a = (const softmax_params *)p;
  const float scale = a->scale;
  if (a->bias != NULL) {
    const float *bias = a->bias + (row % a->bias_rows) * cols;
    for (ptrdiff_t i = 0; i < cols; ++i) y[i] = scale * x[i] + bias[i];
  } else {
    for (ptrdiff_t i = 0; i < cols; ++i) y[i] = scale * x[i];
  }
  const float top = row_max(y, cols);
  for (ptrdiff_t i = 0; i < cols; ++i) y[i] = exp_nonpositive(y[i] - top);
  const float inv = 1.0f / row_sum(y, cols);
  for (ptrdiff_t i = 0; i < cols; ++i) y[i] *= inv;
}

void zoo_softmax_f32(const float *x, const float *bias, ptrdiff_t bias_rows, float scale, float *y, ptrdiff_t rows,
                     ptrdiff_t cols, int threads) {
  softmax_params a = {bias, bias_rows > 0 ? bias_rows : 1, scale};
  for_each_row(softmax_row, &a, x, y, rows, cols, threads);
}

/* LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, two passes over the row for the moments,
 * then the activation (ACT_*: SAM's upscaling GELU) while the row is in cache */
typedef struct {
  const float *weight, *bias;
  float eps;
  int act;
} layer_norm_params;

ZOO_CLONES static void layer_norm_row(const void *p, const float *x, float *y, ptrdiff_t row, ptrdiff_t cols) {
  const layer_norm_params *a = (const layer_norm_params *)p;
  (void)row;
  const float mean = row_sum(x, cols) / (float)cols;
  for (ptrdiff_t i = 0; i < cols; ++i) y[i] = (x[i] - mean) * (x[i] - mean); /* y as scratch */
  const float inv = 1.0f / sqrtf(row_sum(y, cols) / (float)cols + a->eps);
  for (ptrdiff_t i = 0; i < cols; ++i) y[i] = (x[i] - mean) * inv * a->weight[i] + a->bias[i];
  if (a->act != ACT_NONE) activate(y, y, cols, a->act);
}

void zoo_layer_norm_f32(const float *x, const float *weight, const float *bias, float eps, float *y, ptrdiff_t rows,
                        ptrdiff_t cols, int act, int threads) {
  layer_norm_params a = {weight, bias, eps, act};
  for_each_row(layer_norm_row, &a, x, y, rows, cols, threads);
}

/* ---- depthwise 2-D convolution, NHWC --------------------------------------------------------- */

typedef struct {
  const float *x;    /* (N, H, W, C) */
  const float *w;    /* (KH, KW, C) */
  const float *bias; /* (C) or NULL */
  float *y;          /* (N, OH, OW, C) */
  int H, W, C, KH, KW, OH, OW, stride, pad_top, pad_left, act;
} dw_args;

/* One output row: ``in`` holds the KH input rows its taps read (NULL: a row of the zero padding);
 * every output pixel sums its valid taps over the channel vector (the loop the compiler
 * vectorises), then the bias and the activation (the row is still in cache). */
static inline void depthwise_row(const float *const *in, const float *w, const float *bias, float *out, int W, int C,
                                 int KH, int KW, int OW, int stride, int pad_left, int act) {
  for (int ow = 0; ow < OW; ++ow) {
    float *o = out + (size_t)ow * C;
    memset(o, 0, sizeof(float) * C);
    for (int kh = 0; kh < KH; ++kh) {
      if (in[kh] == NULL) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = ow * stride - pad_left + kw;
        if (iw < 0 || iw >= W) continue;
        const float *src = in[kh] + (size_t)iw * C;
        const float *wt = w + ((size_t)kh * KW + kw) * C;
        for (int c = 0; c < C; ++c) o[c] += src[c] * wt[c];
      }
    }
    if (bias != NULL)
      for (int c = 0; c < C; ++c) o[c] += bias[c];
  }
  activate(out, out, (ptrdiff_t)OW * C, act);
}

/* One output row (n, oh) per index */
ZOO_CLONES static void depthwise_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const dw_args *a = (const dw_args *)p;
  const float *in[a->KH];
  for (ptrdiff_t row = b; row < e; ++row) {
    const ptrdiff_t n = row / a->OH;
    const int oh = (int)(row % a->OH);
    for (int kh = 0; kh < a->KH; ++kh) {
      const int ih = oh * a->stride - a->pad_top + kh;
      in[kh] = ih < 0 || ih >= a->H ? NULL : a->x + ((size_t)n * a->H + ih) * a->W * a->C;
    }
    depthwise_row(in, a->w, a->bias, a->y + (size_t)row * a->OW * a->C, a->W, a->C, a->KH, a->KW, a->OW, a->stride,
                  a->pad_left, a->act);
  }
}

/* y = act(depthwise(x, w) + bias): bias (C) or NULL, act an ACT_* code. */
void zoo_depthwise_conv2d_f32(const float *x, const float *w, const float *bias, float *y, int N, int H, int W, int C,
                              int KH, int KW, int stride, int pad_top, int pad_left, int OH, int OW, int act,
                              int threads) {
  dw_args a = {x, w, bias, y, H, W, C, KH, KW, OH, OW, stride, pad_top, pad_left, act};
  if ((ptrdiff_t)N * OH * OW * C * KH * KW < UNARY_GRAIN * 4) threads = 1;
  parallel_for(depthwise_rows, &a, (ptrdiff_t)N * OH, threads);
}

/* ---- an anchor-free detection head's decode (zoo.kernels.box_decode's kernel, for the CPU) ----
 * y (N, A, 4 + classes): per cell of the three levels in order, its box (centre x, centre y, width,
 * height in pixels: the DFL integral of each side's bins from the cell's centre, times the level's
 * stride) and the sigmoid of its class logits, read from the levels' NHWC maps where they lie. As MLX
 * ops on the CPU: three concatenations, a transposed copy for the softmax, the bins' product, the
 * anchor grid and the final concatenation, each one float at a time on one thread (YOLOv8n at 640:
 * 3.9 ms after the last convolution). Rows (n, a) over the threads. */
typedef struct {
  const float *box[3], *cls[3], *bins;
  float *y;
  int bin_count, classes, cells[3], width[3], stride[3];
  ptrdiff_t anchors;
} decode_args;

ZOO_CLONES static void decode_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const decode_args *a = (const decode_args *)p;
  const int B = a->bin_count, out_width = 4 + a->classes;
  float weights[64];
  for (ptrdiff_t r = b; r < e; ++r) {
    const ptrdiff_t n = r / a->anchors;
    ptrdiff_t cell = r % a->anchors;
    int level = 0;
    while (cell >= a->cells[level]) cell -= a->cells[level++];
    const ptrdiff_t row = n * a->cells[level] + cell;
    const float *logits = a->box[level] + row * 4 * B;
    float distance[4]; /* left, top, right, bottom */
    for (int side = 0; side < 4; ++side) {
      const float *v = logits + side * B;
      float top = v[0];
      for (int j = 1; j < B; ++j) top = v[j] > top ? v[j] : top;
      float total = 0.0f, weighted = 0.0f;
      for (int j = 0; j < B; ++j) weights[j] = exp_nonpositive(v[j] - top);
      for (int j = 0; j < B; ++j) {
        total += weights[j];
        weighted += weights[j] * a->bins[j];
      }
      distance[side] = weighted / total;
    }
    const float cx = (float)(cell % a->width[level]) + 0.5f, cy = (float)(cell / a->width[level]) + 0.5f;
    const float stride = (float)a->stride[level];
    float *out = a->y + r * out_width;
    const float left = cx - distance[0], top = cy - distance[1], right = cx + distance[2], bottom = cy + distance[3];
    out[0] = (left + right) / 2.0f * stride;
    out[1] = (top + bottom) / 2.0f * stride;
    out[2] = (right - left) * stride;
    out[3] = (bottom - top) * stride;
    activate(a->cls[level] + row * a->classes, out + 4, a->classes, ACT_SIGMOID);
  }
}

/* box<l> (N, H_l, W_l, 4 * bin_count), cls<l> (N, H_l, W_l, classes), bins (bin_count <= 64). Returns 0,
 * or -1 for more bins (the caller falls back). */
int zoo_box_decode_f32(const float *box0, const float *box1, const float *box2, const float *cls0, const float *cls1,
                       const float *cls2, const float *bins, int bin_count, float *y, int N, int classes, int H0,
                       int W0, int H1, int W1, int H2, int W2, int stride0, int stride1, int stride2, int threads) {
  if (bin_count > 64) return -1;
  decode_args a = {{box0, box1, box2}, {cls0, cls1, cls2}, bins, y, bin_count, classes,
                   {H0 * W0, H1 * W1, H2 * W2}, {W0, W1, W2}, {stride0, stride1, stride2},
                   (ptrdiff_t)H0 * W0 + (ptrdiff_t)H1 * W1 + (ptrdiff_t)H2 * W2};
  const ptrdiff_t rows = (ptrdiff_t)N * a.anchors;
  parallel_for(decode_rows, &a, rows, rows * (4 * bin_count + classes) < UNARY_GRAIN ? 1 : threads);
  return 0;
}

/* ---- max pooling, NHWC -------------------------------------------------------------------
 * MLX's MaxPool2d pads into a copy (-inf) and reduces a strided window view one float at a time on
 * one thread: ResNet's stem pool (112x112x64 -> 56x56) took 1.1 ms, here a pass over the
 * windows' pixels, vectorised over the channels, rows over the threads. The padding is left out of
 * the windows (torch's -inf); NaN wins, as in torch's max_pool2d. */
typedef struct {
  const float *x;
  float *y;
  int H, W, C, K, stride, pad, OH, OW;
} pool_args;

ZOO_CLONES static void max_pool_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const pool_args *a = (const pool_args *)p;
  const ptrdiff_t C = a->C;
  for (ptrdiff_t r = b; r < e; ++r) {
    const ptrdiff_t n = r / a->OH;
    const int top = (int)(r % a->OH) * a->stride - a->pad;
    const int h0 = top > 0 ? top : 0, h1 = top + a->K < a->H ? top + a->K : a->H;
    for (int ow = 0; ow < a->OW; ++ow) {
      const int left = ow * a->stride - a->pad;
      const int w0 = left > 0 ? left : 0, w1 = left + a->K < a->W ? left + a->K : a->W;
      float *restrict out = a->y + (r * a->OW + ow) * C;
      memcpy(out, a->x + ((n * a->H + h0) * a->W + w0) * C, sizeof(float) * (size_t)C);
      for (int h = h0; h < h1; ++h)
        for (int w = (h == h0 ? w0 + 1 : w0); w < w1; ++w) {
          const float *restrict v = a->x + ((n * a->H + h) * a->W + w) * C;
          for (ptrdiff_t c = 0; c < C; ++c) out[c] = (v[c] > out[c] || v[c] != v[c]) ? v[c] : out[c];
        }
    }
  }
}

/* y (N, OH, OW, C) = the K x K window maxima of x (N, H, W, C) at ``stride``, ``pad`` < K on each side. */
void zoo_max_pool2d_f32(const float *x, float *y, int N, int H, int W, int C, int K, int stride, int pad, int OH,
                        int OW, int threads) {
  pool_args a = {x, y, H, W, C, K, stride, pad, OH, OW};
  if ((ptrdiff_t)N * OH * OW * C * K * K < UNARY_GRAIN * 4) threads = 1;
  parallel_for(max_pool_rows, &a, (ptrdiff_t)N * OH, threads);
}

/* ---- 2-D convolution, NHWC: patch rows (im2col) + one OpenBLAS sgemm per chunk -------------- */

/* MLX's CPU convolution pads into a copy, copies every patch (both single-threaded, one
 * float at a time) and then calls sgemm: a third of a 3x3 convolution's time at 32x32x384.
 * Here the patch rows are gathered straight from the input (zero or reflect padding read in
 * place, threads over rows), in chunks that stay in cache, and multiplied by the weight
 * (O, KH*KW*C) with the bias as the sgemm's initial C. */

typedef void (*sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc);
static sgemm_fn sgemm = NULL;

typedef int (*get_threads_fn)(void);
typedef void (*set_threads_fn)(int);
static get_threads_fn blas_get_threads = NULL;
static set_threads_fn blas_set_threads = NULL;

/* The library knows no BLAS: the Python side passes OpenBLAS's cblas_sgemm and its
 * openblas_get/set_num_threads (either may be NULL). */
void zoo_set_sgemm(void *fn, void *get_threads, void *set_threads) {
  sgemm = (sgemm_fn)fn;
  blas_get_threads = (get_threads_fn)get_threads;
  blas_set_threads = (set_threads_fn)set_threads;
}

/* Many independent products, [0, n) over ``threads`` of ours, each product one sgemm on one OpenBLAS
 * thread (OpenBLAS set to 1 thread meanwhile, then put back). OpenBLAS splitting each product over
 * its own threads costs one wake-up and wait of its workers per product: on a loaded 2-core host
 * (load average ~10) LaMa's Winograd 3x3 at 32x32x128->384 took 255 ms of CPU time with its 16
 * products so, 10 ms on one thread. One product per thread waits once per batch. */
static pthread_mutex_t blas_threads_lock = PTHREAD_MUTEX_INITIALIZER; /* callers on several threads: one
                                                                      at a time reads and puts back the count */

static void parallel_products(range_fn fn, const void *args, ptrdiff_t n, int threads) {
  if (blas_get_threads == NULL || blas_set_threads == NULL) {
    fn(args, 0, n);
    return;
  }
  /* on one thread of ours too: OpenBLAS's threaded sgemm rounds otherwise than its one-thread form (seen with
   * its Haswell kernels on an AVX2 host), and a result must not depend on how many threads we run */
  pthread_mutex_lock(&blas_threads_lock);
  const int before = blas_get_threads();
  blas_set_threads(1);
  parallel_for(fn, args, n, threads);
  blas_set_threads(before);
  pthread_mutex_unlock(&blas_threads_lock);
}

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef struct {
  const float *x; /* (N, H, W, C) */
  float *cols;    /* (rows of this chunk, KH*KW*C) */
  ptrdiff_t first_pixel;
  int H, W, C, KH, KW, OH, OW, stride, pad_top, pad_left, reflect;
} patch_args;

/* torch's reflect padding (the edge is not repeated); valid for pad < size */
static inline int reflect_index(int i, int n) { return i < 0 ? -i : (i >= n ? 2 * n - 2 - i : i); }

static void patch_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const patch_args *a = (const patch_args *)p;
  const int C = a->C;
  const size_t width = (size_t)a->KH * a->KW * C;
  for (ptrdiff_t r = b; r < e; ++r) {
    const ptrdiff_t pixel = a->first_pixel + r;
    const ptrdiff_t n = pixel / ((ptrdiff_t)a->OH * a->OW);
    const int oh = (int)(pixel / a->OW % a->OH), ow = (int)(pixel % a->OW);
    float *dst = a->cols + (size_t)r * width;
    const int iw0 = ow * a->stride - a->pad_left;
    const int span_inside = iw0 >= 0 && iw0 + a->KW <= a->W;
    for (int kh = 0; kh < a->KH; ++kh) {
      int ih = oh * a->stride - a->pad_top + kh;
      const int row_inside = ih >= 0 && ih < a->H;
      if (a->reflect) ih = reflect_index(ih, a->H);
      if (span_inside && (row_inside || a->reflect)) { /* the KW taps are KW adjacent input pixels */
        memcpy(dst, a->x + (((size_t)n * a->H + ih) * a->W + iw0) * C, sizeof(float) * a->KW * C);
        dst += (size_t)a->KW * C;
        continue;
      }
      for (int kw = 0; kw < a->KW; ++kw, dst += C) {
        int iw = ow * a->stride - a->pad_left + kw;
        const int inside = row_inside && iw >= 0 && iw < a->W;
        if (a->reflect) iw = reflect_index(iw, a->W);
        if (inside || a->reflect)
          memcpy(dst, a->x + (((size_t)n * a->H + ih) * a->W + iw) * C, sizeof(float) * C);
        else
          memset(dst, 0, sizeof(float) * C);
      }
    }
  }
}

/* y (rows, cols) = bias (cols) in every row plus add (rows, cols), either NULL (none; both: zeros):
 * a product's initial C, its bias and a residual */
static void initial_c(float *y, const float *bias, const float *add, ptrdiff_t rows, ptrdiff_t cols) {
  for (ptrdiff_t r = 0; r < rows; ++r, y += cols) {
    const float *x = add == NULL ? NULL : add + r * cols;
    if (x != NULL && bias != NULL)
      for (ptrdiff_t c = 0; c < cols; ++c) y[c] = x[c] + bias[c];
    else if (x != NULL || bias != NULL)
      memcpy(y, x != NULL ? x : bias, sizeof(float) * (size_t)cols);
    else
      memset(y, 0, sizeof(float) * (size_t)cols);
  }
}

/* ---- products with a packed weight --------------------------------------------------------
 * OpenBLAS packs both matrices of every sgemm it makes. A convolution's weight is the same at every
 * call: it is packed once (zoo_pack_f32; the Python side keeps it with the weight's other forms) in
 * panels of PANEL output channels, each panel (K, PANEL) row-major, and multiplied here PACKED_ROWS
 * rows at a time, their PACKED_ROWS x PANEL sums held in registers over all of K (24 of the 32 vector
 * registers AVX-512 gives; 8-float vectors: on an AMD EPYC (Zen 4) as fast as 16-float ones). On that
 * 2-core host, one thread, ResNet-50's 1x1 products ran at ~110 GFLOP/s against OpenBLAS's 64-104
 * (49 x 2048 -> 512: 0.92 against 1.60 ms; 784 x 512 -> 128: 0.90 against 1.01 ms). With 16 vector
 * registers (AVX2) the block takes half a panel at a time (12 registers of sums): with every library
 * held to AVX2 on that host, ResNet-50 took 52.8 against 63.0 ms with OpenBLAS's Haswell kernels,
 * YOLOv8n 76.3 against 111.3 (docs/speed-cpu.md). Without AVX2, OpenBLAS keeps the products. */
#define PANEL 32
#define PACKED_ROWS 6
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define PACKED_FORM 1
#define PACKED_WIDE __attribute__((target("arch=x86-64-v4")))
#define PACKED_HALVES __attribute__((target("arch=x86-64-v3")))
#else
#define PACKED_FORM 0
#define PACKED_WIDE
#define PACKED_HALVES
#endif

/* Whether this CPU takes the packed products (else the callers pass no packed weight): 2 with AVX-512
 * (whole panels), 1 with AVX2 and FMA (half panels), 0; ZOO_PACKED=off says 0 (OpenBLAS multiplies),
 * ZOO_PACKED=halves at most 1 (an AVX2 CPU's form, to compare) */
int zoo_packs(void) {
#if PACKED_FORM
  const char *chosen = getenv("ZOO_PACKED");
  __builtin_cpu_init();
  if ((chosen != NULL && strcmp(chosen, "off") == 0) || !__builtin_cpu_supports("x86-64-v3")) return 0;
#if defined(ZOO_ONE_LEVEL) && !defined(__AVX512F__)
  return 1; /* a build held to AVX2 takes its form wherever it runs */
#endif
  return __builtin_cpu_supports("x86-64-v4") && !(chosen != NULL && strcmp(chosen, "halves") == 0) ? 2 : 1;
#else
  return 0;
#endif
}

/* zoo_packs, asked once */
static int packed_level(void) {
  static atomic_int level = -1;
  if (atomic_load(&level) < 0) atomic_store(&level, zoo_packs());
  return atomic_load(&level);
}

/* ``packed``, or NULL where this CPU cannot run the packed products (a packed form that came from
 * another host, or ZOO_PACKED=off: its products go to sgemm instead) */
static const float *usable(const float *packed) { return packed != NULL && packed_level() ? packed : NULL; }

/* Floats of the packed form of ``batch`` matrices of N output channels by K */
ptrdiff_t zoo_packed_floats(int batch, int N, int K) {
  return (ptrdiff_t)batch * ((N + PANEL - 1) / PANEL) * K * PANEL;
}

/* packed[b][panel][k][j] = w[b * batch_step + n * n_step + k * k_step], n = panel * PANEL + j (zero past N):
 * a weight (N, K) has n_step K and k_step 1; Winograd's (16, K, N) has n_step 1 and k_step N */
void zoo_pack_f32(const float *w, ptrdiff_t batch_step, ptrdiff_t n_step, ptrdiff_t k_step, int batch, int N, int K,
                  float *packed) {
  const int panels = (N + PANEL - 1) / PANEL;
  for (int b = 0; b < batch; ++b)
    for (int p = 0; p < panels; ++p)
      for (ptrdiff_t k = 0; k < K; ++k, packed += PANEL)
        for (int j = 0; j < PANEL; ++j) {
          const ptrdiff_t n = (ptrdiff_t)p * PANEL + j;
          packed[j] = n < N ? w[b * batch_step + n * n_step + k * k_step] : 0.0f;
        }
}

typedef float f32x8 __attribute__((vector_size(32)));

/* c (rows, 8 * vectors; ldc) = (accumulate ? c : 0) + a (rows, K; lda) times the first 8 * vectors columns of
 * one panel (K, PANEL), rows <= PACKED_ROWS, vectors <= PANEL / 8 (constants where it is inlined: its loops
 * unrolled, the sums in registers) */
__attribute__((always_inline)) static inline void packed_block(int rows, int vectors, const float *restrict a,
                                                               ptrdiff_t lda, const float *restrict panel, ptrdiff_t K,
                                                               float *restrict c, ptrdiff_t ldc, int accumulate) {
  f32x8 sum[PACKED_ROWS][PANEL / 8];
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < vectors; ++v) {
      if (accumulate)
        memcpy(&sum[r][v], c + r * ldc + 8 * v, sizeof(f32x8));
      else
        sum[r][v] = (f32x8){0};
    }
  for (ptrdiff_t k = 0; k < K; ++k) {
    f32x8 w[PANEL / 8]; /* a load each (one copy of the whole row went through the stack: 1.8x slower) */
    for (int v = 0; v < vectors; ++v) memcpy(&w[v], panel + k * PANEL + 8 * v, sizeof(f32x8));
#pragma GCC unroll 6
    for (int r = 0; r < rows; ++r) {
      const float x = a[r * lda + k];
      for (int v = 0; v < vectors; ++v) sum[r][v] += x * w[v];
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < vectors; ++v) memcpy(c + r * ldc + 8 * v, &sum[r][v], sizeof(f32x8));
}

/* packed_block with rows and vectors as constants: one unrolled block for each */
#define PACKED_BLOCKS(vectors, panel, block)                                                   \
  switch (rows) {                                                                              \
  case 6: packed_block(6, vectors, x, lda, panel, K, block, ld, accumulate); break;            \
  case 5: packed_block(5, vectors, x, lda, panel, K, block, ld, accumulate); break;            \
  case 4: packed_block(4, vectors, x, lda, panel, K, block, ld, accumulate); break;            \
  case 3: packed_block(3, vectors, x, lda, panel, K, block, ld, accumulate); break;            \
  case 2: packed_block(2, vectors, x, lda, panel, K, block, ld, accumulate); break;            \
  default: packed_block(1, vectors, x, lda, panel, K, block, ld, accumulate); break;           \
  }

/* c (M, cols; ldc) = (accumulate ? c : 0) + a (M, K; lda) times ``cols`` columns of a packed weight from
 * ``panels`` (its first panel, at the first of the K rows to use), ``panel_step`` floats from panel to
 * panel. A last panel of fewer than PANEL columns sums only its first half where the rest is padding
 * (YOLO's 80 classes: 2.5 panels), and goes through a scratch block where it is not a whole half. */
__attribute__((always_inline)) static inline void packed_panels(int wide, const float *a, ptrdiff_t lda,
                                                                ptrdiff_t M, ptrdiff_t K, const float *panels,
                                                                ptrdiff_t panel_step, ptrdiff_t cols, float *c,
                                                                ptrdiff_t ldc, int accumulate) {
  float scratch[PACKED_ROWS * PANEL];
  for (ptrdiff_t col = 0; col < cols; col += PANEL, panels += panel_step) {
    const ptrdiff_t width = cols - col < PANEL ? cols - col : PANEL;
    for (ptrdiff_t row = 0; row < M; row += PACKED_ROWS) {
      const int rows = M - row < PACKED_ROWS ? (int)(M - row) : PACKED_ROWS;
      const float *x = a + row * lda;
      float *out = c + row * ldc + col, *block = out;
      ptrdiff_t ld = ldc;
      const int narrow = width != PANEL && width != PANEL / 2; /* not a whole panel or half */
      if (narrow) {
        block = scratch, ld = PANEL;
        for (int r = 0; accumulate && r < rows; ++r) memcpy(scratch + r * PANEL, out + r * ldc, sizeof(float) * width);
      }
      if (wide && width > PANEL / 2)
        PACKED_BLOCKS(PANEL / 8, panels, block)
      else { /* a half panel, or (AVX2: 16 vector registers) each half in turn */
        PACKED_BLOCKS(PANEL / 16, panels, block)
        if (width > PANEL / 2) PACKED_BLOCKS(PANEL / 16, panels + PANEL / 2, block + PANEL / 2)
      }
      if (narrow)
        for (int r = 0; r < rows; ++r) memcpy(out + r * ldc, scratch + r * PANEL, sizeof(float) * width);
    }
  }
}

PACKED_WIDE static void packed_product_wide(const float *a, ptrdiff_t lda, ptrdiff_t M, ptrdiff_t K,
                                            const float *panels, ptrdiff_t panel_step, ptrdiff_t cols, float *c,
                                            ptrdiff_t ldc, int accumulate) {
  packed_panels(1, a, lda, M, K, panels, panel_step, cols, c, ldc, accumulate);
}

PACKED_HALVES static void packed_product_halves(const float *a, ptrdiff_t lda, ptrdiff_t M, ptrdiff_t K,
                                                const float *panels, ptrdiff_t panel_step, ptrdiff_t cols, float *c,
                                                ptrdiff_t ldc, int accumulate) {
  packed_panels(0, a, lda, M, K, panels, panel_step, cols, c, ldc, accumulate);
}

/* The form for this CPU (callers run it only where usable() let a packed weight through) */
static void packed_product(const float *a, ptrdiff_t lda, ptrdiff_t M, ptrdiff_t K, const float *panels,
                           ptrdiff_t panel_step, ptrdiff_t cols, float *c, ptrdiff_t ldc, int accumulate) {
  (packed_level() == 2 ? packed_product_wide : packed_product_halves)(a, lda, M, K, panels, panel_step, cols, c, ldc,
                                                                     accumulate);
}

/* Patch-matrix floats per chunk (16 MiB): LaMa's 32x32 maps in one sgemm (splitting it costs
 * ~5%), full-resolution maps in pieces instead of a patch matrix of hundreds of MB. */
#define PATCH_CHUNK_FLOATS (1 << 22)

/* Patch rows at most this wide, into at most DIRECT_MAX_OUTPUTS channels, are multiplied here instead
 * of by sgemm: OpenBLAS ran TinyViT's first convolution (3x3 stride 2 over 3 channels: 27-float
 * rows, 32 outputs, 1024 px) at ~8 GFLOP/s, its packing dominating so short a sum. */
#define DIRECT_MAX_WIDTH 32
#define DIRECT_MAX_OUTPUTS 64
/* and wider rows of a kernel larger than 1x1 into a multiple of 16 channels, summed in registers
 * (direct_block16): YOLOv8n's second convolution (3x3 stride 2, 16 -> 32: 144-float rows), LaMa's first
 * (7x7 over 4 channels -> 64: 196) */
#define DIRECT_MAX_BLOCK_WIDTH 256
#define DIRECT_PIXELS 16

typedef struct {
  patch_args patches; /* its cols unused: each block gathers one output row at a time */
  const float *wt;    /* (width, O): the weight transposed */
  const float *bias;  /* (O) or NULL */
  const float *add;   /* (N, OH, OW, O) or NULL */
  float *y;
  int O, act;
  atomic_int failed; /* no memory for a block's patch row: set, the caller falls back */
} direct_args;

/* DIRECT_PIXELS pixels' sums over 16 output channels from column c0, held in registers over all the
 * taps as two 8-float halves (GCC's vector type at AVX2's width: a 16-float type ran 1.8x slower than
 * the loop through memory in the AVX2 clone, its halves spilled; these ran 3.4x faster there and 3.8x
 * in the AVX-512 one, a 144-float row into 32 channels). Through memory each tap's add waited on the
 * store before it (YOLOv8n's first convolution 2.5-3x slower). */
typedef float f32x8 __attribute__((vector_size(32)));

__attribute__((always_inline)) static inline void direct_block16(const float *restrict cols, ptrdiff_t width,
                                                                 const float *restrict wt, ptrdiff_t O, ptrdiff_t c0,
                                                                 float *restrict out) {
  f32x8 lo[DIRECT_PIXELS], hi[DIRECT_PIXELS];
  for (int px = 0; px < DIRECT_PIXELS; ++px) {
    memcpy(&lo[px], out + px * O + c0, sizeof(f32x8));
    memcpy(&hi[px], out + px * O + c0 + 8, sizeof(f32x8));
  }
  for (ptrdiff_t t = 0; t < width; ++t) {
    f32x8 w_lo, w_hi;
    memcpy(&w_lo, wt + t * O + c0, sizeof w_lo);
    memcpy(&w_hi, wt + t * O + c0 + 8, sizeof w_hi);
#pragma GCC unroll 16
    for (int px = 0; px < DIRECT_PIXELS; ++px) {
      const float v = cols[px * width + t];
      lo[px] += v * w_lo;
      hi[px] += v * w_hi;
    }
  }
  for (int px = 0; px < DIRECT_PIXELS; ++px) {
    memcpy(out + px * O + c0, &lo[px], sizeof(f32x8));
    memcpy(out + px * O + c0 + 8, &hi[px], sizeof(f32x8));
  }
}

/* Output rows (n, oh) in [b, e): gather the row's patches, then every output pixel is its bias plus
 * each patch float times the weight's row for it, over the output channels (vectorised). */
ZOO_CLONES static void direct_conv_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  direct_args *a = (direct_args *)p;
  patch_args rows = a->patches;
  const ptrdiff_t width = (ptrdiff_t)rows.KH * rows.KW * rows.C, O = a->O, OW = rows.OW;
  rows.cols = (float *)malloc(sizeof(float) * (size_t)(OW * width));
  if (rows.cols == NULL) {
    atomic_store(&a->failed, 1);
    return;
  }
  for (ptrdiff_t r = b; r < e; ++r) {
    rows.first_pixel = r * OW;
    patch_rows(&rows, 0, OW);
    float *out = a->y + (size_t)(r * OW * O);
    initial_c(out, a->bias, a->add == NULL ? NULL : a->add + r * OW * O, OW, O);
    /* DIRECT_PIXELS pixels a tap at a time: their sums are independent chains (one pixel's taps in a
     * row waited on each add's result through the store: 4x slower) */
    for (ptrdiff_t first = 0; first < OW; first += DIRECT_PIXELS) {
      const ptrdiff_t last = first + DIRECT_PIXELS < OW ? first + DIRECT_PIXELS : OW;
      if (last - first == DIRECT_PIXELS && O % 16 == 0) {
        for (ptrdiff_t c0 = 0; c0 < O; c0 += 16)
          direct_block16(rows.cols + first * width, width, a->wt, O, c0, out + first * O);
        continue;
      }
      for (ptrdiff_t t = 0; t < width; ++t) {
        const float *restrict w = a->wt + t * O;
        for (ptrdiff_t px = first; px < last; ++px) {
          float *restrict o = out + px * O;
          const float v = rows.cols[px * width + t];
          for (ptrdiff_t c = 0; c < O; ++c) o[c] += v * w[c];
        }
      }
    }
    activate(out, out, OW * O, a->act);
  }
  free(rows.cols);
}

/* A 1x1 convolution (a Linear's product) in tiles of at most POINTWISE_ROWS rows, the tiles over our
 * threads, each tile one sgemm on one OpenBLAS thread followed by its activation while the tile is in
 * cache. OpenBLAS splitting each product over its threads left ~30% of the TinyViT encoder's CPU
 * time in its workers' spinning and waiting (blas_thread_server, exec_blas_async_wait: perf, loaded
 * 2-core host), and the activation then took another pass over the whole output. A product of fewer
 * rows than two tiles a thread is also split over its output channels (YOLO's parts at 20x20: 400
 * rows), so that every thread has tiles. Convolutions of fewer than POINTWISE_MIN_ROWS pixels take the
 * patch-row path's one sgemm, which OpenBLAS splits itself. */
#define POINTWISE_ROWS 256
#define POINTWISE_MIN_COLUMNS 16
#define POINTWISE_MIN_ROWS 2048
#define POINTWISE_MAX_PARTS 8

/* The product's input as up to POINTWISE_MAX_PARTS matrices side by side (a channel concatenation
 * read where its parts lie: YOLO's C2f and neck), each (rows, width) with its own row stride ld, and
 * its columns of w from offset. add, where given, is (rows, O), or with add_half a (N, H/2, W/2, O) map
 * whose nearest 2x upsampling (N, H, W, O) is added: a 1x1 convolution commutes with that upsampling,
 * so an upsampled part's product is made at a quarter of the pixels. */
typedef struct {
  const float *x[POINTWISE_MAX_PARTS];
  ptrdiff_t ld[POINTWISE_MAX_PARTS], width[POINTWISE_MAX_PARTS], offset[POINTWISE_MAX_PARTS];
  int parts;
  const float *w, *bias, *add; /* w (O, w_ld), bias (O) or NULL, add as above or NULL */
  const float *packed;         /* w packed (zoo_pack_f32), or NULL: OpenBLAS's sgemm */
  int add_half;
  ptrdiff_t H, W, w_ld;
  float *y; /* (rows, O) */
  ptrdiff_t rows, O, tile_rows, tile_cols, col_tiles;
  int act;
} pointwise_args;

static const float *add_row(const pointwise_args *a, ptrdiff_t pixel) {
  if (!a->add_half) return a->add + pixel * a->O;
  const ptrdiff_t n = pixel / (a->H * a->W), h = pixel / a->W % a->H, w = pixel % a->W;
  return a->add + ((n * (a->H / 2) + h / 2) * (a->W / 2) + w / 2) * a->O;
}

static void pointwise_tiles(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const pointwise_args *a = (const pointwise_args *)p;
  for (ptrdiff_t tile = b; tile < e; ++tile) {
    const ptrdiff_t first = tile / a->col_tiles * a->tile_rows, col = tile % a->col_tiles * a->tile_cols;
    const ptrdiff_t rows = a->rows - first < a->tile_rows ? a->rows - first : a->tile_rows;
    const ptrdiff_t cols = a->O - col < a->tile_cols ? a->O - col : a->tile_cols;
    float *out = a->y + first * a->O + col;
    const int initial = a->bias != NULL || a->add != NULL;
    for (ptrdiff_t r = 0; initial && r < rows; ++r)
      initial_c(out + r * a->O, a->bias == NULL ? NULL : a->bias + col,
                a->add == NULL ? NULL : add_row(a, first + r) + col, 1, cols);
    for (int part = 0; part < a->parts; ++part)
      if (a->packed != NULL)
        packed_product(a->x[part] + first * a->ld[part], a->ld[part], rows, a->width[part],
                       a->packed + (col / PANEL * a->w_ld + a->offset[part]) * PANEL, a->w_ld * PANEL, cols, out, a->O,
                       initial || part > 0);
      else
        sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)rows, (int)cols, (int)a->width[part], 1.0f,
              a->x[part] + first * a->ld[part], (int)a->ld[part], a->w + col * a->w_ld + a->offset[part], (int)a->w_ld,
              initial || part > 0 ? 1.0f : 0.0f, out, (int)a->O);
    for (ptrdiff_t r = 0; r < rows; ++r) activate(out + r * a->O, out + r * a->O, cols, a->act);
  }
}

/* The pointwise product over ``threads``: tiles of POINTWISE_ROWS rows, split over the output channels too
 * (in multiples of POINTWISE_MIN_COLUMNS, of PANEL with a packed weight) where there are fewer than two row
 * tiles a thread. */
static void pointwise_product(pointwise_args *args, int threads) {
  ptrdiff_t width = 0;
  for (int part = 0; part < args->parts; ++part) width += args->width[part];
  /* one thread for products OpenBLAS would run on one (m*n*k up to 2^18), and for packed ones up to 2^22
   * (~0.08 ms on one thread: starting the second one cost more, YOLOv8n's 20x20 maps) */
  if ((double)args->rows * width * args->O <= (args->packed != NULL ? 1 << 22 : 1 << 18)) threads = 1;
  ptrdiff_t row_tiles = (args->rows + POINTWISE_ROWS - 1) / POINTWISE_ROWS, tile_rows = POINTWISE_ROWS;
  if (args->packed != NULL && row_tiles > 1) { /* as many tiles a thread, of whole blocks of rows */
    row_tiles = (row_tiles + threads - 1) / threads * threads;
    tile_rows = ((args->rows + row_tiles - 1) / row_tiles + PACKED_ROWS - 1) / PACKED_ROWS * PACKED_ROWS;
    row_tiles = (args->rows + tile_rows - 1) / tile_rows;
  }
  ptrdiff_t tile_cols = args->O;
  if (threads > 1 && row_tiles < 2 * threads) {
    const ptrdiff_t col_tiles = (2 * threads + row_tiles - 1) / row_tiles;
    const ptrdiff_t step = args->packed != NULL ? PANEL : POINTWISE_MIN_COLUMNS;
    tile_cols = ((args->O + col_tiles - 1) / col_tiles + step - 1) / step * step;
  }
  args->tile_rows = tile_rows;
  args->tile_cols = tile_cols;
  args->col_tiles = (args->O + tile_cols - 1) / tile_cols;
  if (args->packed != NULL)
    parallel_for(pointwise_tiles, args, row_tiles * args->col_tiles, threads);
  else
    parallel_products(pointwise_tiles, args, row_tiles * args->col_tiles, threads);
}

/* y (rows, O) = act(x (rows, width) w^T + bias + add), w (O, width) or ``packed``: pointwise_product of one
 * part read in place (a 1x1 convolution's pixels, or a chunk of patch rows) */
static void rows_product(const float *x, ptrdiff_t rows, ptrdiff_t width, const float *w, const float *packed,
                         const float *bias, const float *add, float *y, int O, int act, int threads) {
  pointwise_args args = {{x}, {width}, {width}, {0}, 1, w, bias, add, packed, 0, 1, rows, width, y, rows, O, 0, 0, 0,
                         act};
  pointwise_product(&args, threads);
}

/* y (N, H, W, O) = act(concat(parts) w^T + bias + add): a 1x1 convolution of a channel concatenation
 * of ``parts`` maps read where they lie (pointwise_args: xs, lds, widths, offsets into w (O, w_ld), which
 * ``packed`` holds packed, or NULL);
 * add NULL, (N, H, W, O), or with add_half (N, H/2, W/2, O) upsampled 2x (nearest). Returns 0, or -1
 * when no sgemm was given or there are too many parts (the caller falls back). */
int zoo_pointwise_parts_f32(const float *const *xs, const ptrdiff_t *lds, const ptrdiff_t *widths,
                            const ptrdiff_t *offsets, int parts, const float *w, const float *packed, ptrdiff_t w_ld,
                            const float *bias, const float *add, int add_half, float *y, int N, int H, int W, int O,
                            int act, int threads) {
  packed = usable(packed);
  if ((sgemm == NULL && packed == NULL) || parts < 1 || parts > POINTWISE_MAX_PARTS) return -1;
  pointwise_args args = {{0}, {0}, {0}, {0}, parts, w, bias, add, packed, add_half, H, W, w_ld, y,
                         (ptrdiff_t)N * H * W, O, 0, 0, 0, act};
  for (int part = 0; part < parts; ++part) {
    args.x[part] = xs[part];
    args.ld[part] = lds[part];
    args.width[part] = widths[part];
    args.offset[part] = offsets[part];
  }
  pointwise_product(&args, threads);
  return 0;
}

/* Whether zoo_conv2d_f32 multiplies a convolution of these sizes in C (direct_conv_rows) rather than by
 * sgemm: short patch rows, or rows of a kernel larger than 1x1 into a multiple of 16 channels. */
int zoo_conv2d_direct(int O, int KH, int KW, int C) {
  const ptrdiff_t width = (ptrdiff_t)KH * KW * C;
  return O <= DIRECT_MAX_OUTPUTS &&
         (width <= DIRECT_MAX_WIDTH || (KH * KW > 1 && O % 16 == 0 && width <= DIRECT_MAX_BLOCK_WIDTH));
}

/* y (N, OH, OW, O) = act(conv(x (N, H, W, C), w (O, KH, KW, C)) + bias (O, or NULL) + add (N, OH, OW, O, or
 * NULL: a residual)), act an ACT_*
 * code applied to each chunk after its sgemm (chunks small enough to stay in cache took more sgemm
 * calls and measured slower: docs/speed-cpu.md). Short patch rows into few channels are multiplied
 * in C (direct_conv_rows); a 1x1 stride-1 convolution without padding multiplies the input itself
 * (its patch rows are its pixels), in tiles over the threads (pointwise_product). Returns 0, or -1
 * when no sgemm was given or memory ran out (the caller falls back). */
int zoo_conv2d_f32(const float *x, const float *w, const float *packed, const float *bias, const float *add, float *y,
                   int N, int H, int W, int C, int O, int KH, int KW, int stride, int pad_top, int pad_left,
                   int reflect, int OH, int OW, int act, int threads) {
  const ptrdiff_t width = (ptrdiff_t)KH * KW * C, pixels = (ptrdiff_t)N * OH * OW;
  packed = usable(packed);
  if (zoo_conv2d_direct(O, KH, KW, C)) {
    float *wt = (float *)malloc(sizeof(float) * (size_t)(width * O));
    if (wt == NULL) return -1;
    for (ptrdiff_t o = 0; o < O; ++o)
      for (ptrdiff_t t = 0; t < width; ++t) wt[t * O + o] = w[o * width + t];
    direct_args d = {{x, NULL, 0, H, W, C, KH, KW, OH, OW, stride, pad_top, pad_left, reflect}, wt, bias, add, y, O, act,
                     0};
    parallel_for(direct_conv_rows, &d, (ptrdiff_t)N * OH, pixels * width * O < UNARY_GRAIN ? 1 : threads);
    free(wt);
    return atomic_load(&d.failed) ? -1 : 0;
  }
  if (sgemm == NULL && packed == NULL) return -1;
  const int pointwise = KH == 1 && KW == 1 && stride == 1 && pad_top == 0 && pad_left == 0 && OH == H && OW == W;
  if (pointwise && (pixels >= POINTWISE_MIN_ROWS || packed != NULL)) {
    rows_product(x, pixels, width, w, packed, bias, add, y, O, act, threads);
    return 0;
  }
  ptrdiff_t chunk = PATCH_CHUNK_FLOATS / (width > O ? width : O);
  if (chunk < 64) chunk = 64;
  if (chunk > pixels) chunk = pixels;
  float *cols = pointwise ? NULL : (float *)malloc(sizeof(float) * (size_t)chunk * width);
  if (!pointwise && cols == NULL) return -1;
  patch_args a = {x, cols, 0, H, W, C, KH, KW, OH, OW, stride, pad_top, pad_left, reflect};
  for (ptrdiff_t first = 0; first < pixels; first += chunk) {
    const ptrdiff_t rows = pixels - first < chunk ? pixels - first : chunk;
    const float *patches = pointwise ? x + (size_t)first * C : cols; /* a 1x1's patch rows are its pixels */
    if (!pointwise) {
      a.first_pixel = first;
      parallel_for(patch_rows, &a, rows, rows * width < UNARY_GRAIN ? 1 : threads);
    }
    float *out = y + (size_t)first * O;
    if (packed != NULL) { /* the chunk's patch rows as a 1x1 convolution's input */
      rows_product(patches, rows, width, w, packed, bias, add == NULL ? NULL : add + (size_t)first * O, out, O, act,
                   threads);
      continue;
    }
    const int initial = bias != NULL || add != NULL;
    if (initial) initial_c(out, bias, add == NULL ? NULL : add + (size_t)first * O, rows, O);
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)rows, O, (int)width, 1.0f, patches, (int)width, w,
          (int)width, initial ? 1.0f : 0.0f, out, O);
    if (act != ACT_NONE) activate_all(out, out, rows, O, act, threads);
  }
  free(cols);
  return 0;
}

/* ---- inverted residual (MobileNetV2's, TinyViT's MBConv), a band of rows per thread ----------
 * y = act(x + project(act(depthwise3x3(act(expand(x)))))), each convolution with its BatchNorm
 * folded into its weight and bias. As three convolutions, the expanded map (TinyViT at 1024 px:
 * 256x256x256 floats, 268 MB) went through memory five times: written by the expand, read and
 * written by the depthwise, read by the project, besides the activations' passes. Here a thread
 * keeps only the three expanded rows the depthwise of one output row reads (a ring, in cache) and
 * per output row makes one expand sgemm (the row below), the depthwise row, and one project sgemm
 * whose initial C is x + bias. A band recomputes the expanded rows just above it. */
typedef struct {
  const float *x, *w1, *b1, *wd, *bd, *w3, *b3; /* x (N, H, W, C); w1 (E, C); wd (3, 3, E); w3 (C, E) */
  float *y;                                     /* (N, H, W, C) */
  int H, W, C, E, act;
  atomic_int failed; /* no memory for a thread's rows: set, the caller falls back */
} inverted_residual_args;

ZOO_CLONES static void inverted_residual_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  inverted_residual_args *a = (inverted_residual_args *)p;
  const int H = a->H, W = a->W, C = a->C, E = a->E;
  const size_t row = (size_t)W * E;
  float *ring = (float *)malloc(sizeof(float) * 4 * row); /* 3 expanded rows, then the depthwise's row */
  if (ring == NULL) {
    atomic_store(&a->failed, 1);
    return;
  }
  float *mid = ring + 3 * row;
  ptrdiff_t next = b - 1; /* the next (image * H + row) to expand; row g lives in ring slot g % 3 */
  for (ptrdiff_t r = b; r < e; ++r) {
    const int h = (int)(r % H);
    const ptrdiff_t first = h > 0 ? r - 1 : r, last = h < H - 1 ? r + 1 : r;
    if (next < first) next = first;
    for (; next <= last; ++next) {
      float *out = ring + (size_t)(next % 3) * row;
      initial_c(out, a->b1, NULL, W, E);
      sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, W, E, C, 1.0f, a->x + (size_t)next * W * C, C, a->w1, C,
            1.0f, out, E);
      activate(out, out, (ptrdiff_t)row, a->act);
    }
    const float *in[3] = {h > 0 ? ring + (size_t)((r - 1) % 3) * row : NULL, ring + (size_t)(r % 3) * row,
                          h < H - 1 ? ring + (size_t)((r + 1) % 3) * row : NULL};
    depthwise_row(in, a->wd, a->bd, mid, W, E, 3, 3, W, 1, 1, a->act);
    float *out = a->y + (size_t)r * W * C;
    initial_c(out, a->b3, a->x + (size_t)r * W * C, W, C);
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, W, C, E, 1.0f, mid, E, a->w3, E, 1.0f, out, C);
    activate(out, out, (ptrdiff_t)W * C, a->act);
  }
  free(ring);
}

/* y = act(x + project(act(depthwise3x3(act(expand(x)))))) over (N, H, W, C), the depthwise stride 1
 * with zero padding 1; every weight with its bias (none NULL). Returns 0, or -1 when no sgemm was
 * given or memory ran out (the caller falls back). */
int zoo_inverted_residual_f32(const float *x, const float *w1, const float *b1, const float *wd, const float *bd,
                              const float *w3, const float *b3, float *y, int N, int H, int W, int C, int E, int act,
                              int threads) {
  if (sgemm == NULL) return -1;
  inverted_residual_args a = {x, w1, b1, wd, bd, w3, b3, y, H, W, C, E, act, 0};
  parallel_products(inverted_residual_rows, &a, (ptrdiff_t)N * H, threads);
  return atomic_load(&a.failed) ? -1 : 0;
}

/* ---- the taps' sums of a convolution or transposed convolution computed as one GEMM -------------
 * zoo/kernels/cpu.py multiplies every input pixel by all KH*KW taps of the weight in one GEMM
 * (taps (N, H, W, KH*KW, O)); each output pixel is then the sum of the tap products of the input
 * pixels it reads. MLX summed them as one shifted plane per tap (pads, slices, adds, an interleave
 * of the phases: single-threaded passes over the output, most of LaMa's upsampling time). Here one
 * threaded pass gathers each output pixel's taps, with the bias and the activation. */

typedef struct {
  const float *taps, *bias; /* (N, H, W, KH*KW, O), (O) or NULL */
  float *y;                 /* (N, OH, OW, O) */
  int H, W, O, KH, KW, stride, pad_top, pad_left, transposed, OH, OW, act;
} tap_sum_args;

/* The input position tap k reads for output position o, or -1 where it reads none: a convolution
 * reads o * stride - pad + k; a transposed convolution's input i reaches o = i * stride - pad + k. */
static inline int tap_input(int o, int k, int stride, int pad, int transposed, int size) {
  int i;
  if (transposed) {
    const int reach = o + pad - k; /* i * stride */
    if (reach < 0 || reach % stride) return -1;
    i = reach / stride;
  } else {
    i = o * stride - pad + k;
  }
  return i >= 0 && i < size ? i : -1;
}

ZOO_CLONES static void tap_sum_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const tap_sum_args *a = (const tap_sum_args *)p;
  const ptrdiff_t O = a->O, pixel_taps = (ptrdiff_t)a->KH * a->KW * O;
  for (ptrdiff_t row = b; row < e; ++row) { /* row = image * OH + output row */
    const ptrdiff_t n = row / a->OH;
    const int oh = (int)(row % a->OH);
    float *restrict out = a->y + row * a->OW * O;
    initial_c(out, a->bias, NULL, a->OW, O);
    /* tap by tap over the row: the input row and the tap's offset are found once per tap */
    for (int kh = 0; kh < a->KH; ++kh) {
      const int ih = tap_input(oh, kh, a->stride, a->pad_top, a->transposed, a->H);
      if (ih < 0) continue;
      const float *in_row = a->taps + (n * a->H + ih) * a->W * pixel_taps;
      for (int kw = 0; kw < a->KW; ++kw) {
        const float *tap = in_row + (kh * a->KW + kw) * O;
        for (int ow = 0; ow < a->OW; ++ow) {
          const int iw = tap_input(ow, kw, a->stride, a->pad_left, a->transposed, a->W);
          if (iw < 0) continue;
          const float *restrict src = tap + iw * pixel_taps;
          float *restrict dst = out + (ptrdiff_t)ow * O;
          ZOO_NO_ALIAS
          for (ptrdiff_t c = 0; c < O; ++c) dst[c] += src[c];
        }
      }
    }
    activate(out, out, a->OW * O, a->act); /* the row is still in cache */
  }
}

/* y (N, OH, OW, O) = act(bias + the sum of each output pixel's taps): ``transposed`` 0 for a
 * convolution (zero padding), 1 for a transposed convolution (stride, padding and OH, OW its own). */
void zoo_tap_sum_f32(const float *taps, const float *bias, float *y, int N, int H, int W, int O, int KH, int KW,
                     int stride, int pad_top, int pad_left, int transposed, int OH, int OW, int act, int threads) {
  tap_sum_args a = {taps, bias, y, H, W, O, KH, KW, stride, pad_top, pad_left, transposed, OH, OW, act};
  if ((ptrdiff_t)N * OH * OW * O < UNARY_GRAIN) threads = 1;
  parallel_for(tap_sum_rows, &a, (ptrdiff_t)N * OH, threads);
}

/* ---- 3x3 stride-1 convolution as Winograd F(2x2, 3x3) ----------------------------------------
 * zoo/kernels/winograd.py's transforms (its docstring has the maths): V = B^T d B per tile and
 * input channel, 16 sgemm V[k] (tiles x C) @ U[k] (C x O), Y = A^T M A + bias per tile and
 * output channel, the activation applied as each tile's outputs are written. 2.25x fewer
 * multiplications than the patch-row GEMM above; the transforms' loops run over the channels
 * (vectorised), threads over tiles. Tiles are in (image, tile row, tile column) order. */

/* Tile ``tile``'s image, and its row and column among the image's tiles */
static inline ptrdiff_t tile_position(ptrdiff_t tile, int tile_rows, int tile_cols, int *ty, int *tx) {
  *tx = (int)(tile % tile_cols);
  *ty = (int)(tile / tile_cols % tile_rows);
  return tile / ((ptrdiff_t)tile_cols * tile_rows);
}

typedef struct {
  const float *x; /* (N, H, W, C), its pixels ldx floats apart (C where contiguous: a channel slice more) */
  float *v;       /* (16, tiles, C) */
  const float *zeros; /* C zeros: the patch outside the (padded) image */
  ptrdiff_t tiles, ldx;
  int H, W, C, pad, reflect, tile_rows, tile_cols;
} winograd_in_args;

ZOO_CLONES static void winograd_input_tiles(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const winograd_in_args *a = (const winograd_in_args *)p;
  const ptrdiff_t C = a->C, plane = a->tiles * C;
  for (ptrdiff_t tile = b; tile < e; ++tile) {
    int tx, ty;
    const ptrdiff_t n = tile_position(tile, a->tile_rows, a->tile_cols, &ty, &tx);
    const float *d[16]; /* the 4x4 patch's pixels, row by row */
    for (int i = 0; i < 4; ++i) {
      int r = 2 * ty - a->pad + i;
      /* rows past the padded image only feed outputs past the map, which are not written */
      const int row_ok = a->reflect ? r >= -a->pad && r < a->H + a->pad : r >= 0 && r < a->H;
      if (a->reflect) r = reflect_index(r, a->H);
      for (int j = 0; j < 4; ++j) {
        int q = 2 * tx - a->pad + j;
        const int ok = row_ok && (a->reflect ? q >= -a->pad && q < a->W + a->pad : q >= 0 && q < a->W);
        if (a->reflect) q = reflect_index(q, a->W);
        d[4 * i + j] = ok ? a->x + ((n * a->H + r) * a->W + q) * a->ldx : a->zeros;
      }
    }
    /* B^T d (rows d0 - d2, d1 + d2, d2 - d1, d1 - d3), then the same on the columns, over the
     * channels */
    const float *restrict d00 = d[0], *restrict d01 = d[1], *restrict d02 = d[2], *restrict d03 = d[3];
    const float *restrict d10 = d[4], *restrict d11 = d[5], *restrict d12 = d[6], *restrict d13 = d[7];
    const float *restrict d20 = d[8], *restrict d21 = d[9], *restrict d22 = d[10], *restrict d23 = d[11];
    const float *restrict d30 = d[12], *restrict d31 = d[13], *restrict d32 = d[14], *restrict d33 = d[15];
    float *restrict v = a->v + tile * C;
    ZOO_NO_ALIAS
    for (ptrdiff_t c = 0; c < C; ++c) {
      const float t00 = d00[c] - d20[c], t01 = d01[c] - d21[c], t02 = d02[c] - d22[c], t03 = d03[c] - d23[c];
      const float t10 = d10[c] + d20[c], t11 = d11[c] + d21[c], t12 = d12[c] + d22[c], t13 = d13[c] + d23[c];
      const float t20 = d20[c] - d10[c], t21 = d21[c] - d11[c], t22 = d22[c] - d12[c], t23 = d23[c] - d13[c];
      const float t30 = d10[c] - d30[c], t31 = d11[c] - d31[c], t32 = d12[c] - d32[c], t33 = d13[c] - d33[c];
      v[c] = t00 - t02, v[plane + c] = t01 + t02, v[2 * plane + c] = t02 - t01, v[3 * plane + c] = t01 - t03;
      v[4 * plane + c] = t10 - t12, v[5 * plane + c] = t11 + t12, v[6 * plane + c] = t12 - t11;
      v[7 * plane + c] = t11 - t13;
      v[8 * plane + c] = t20 - t22, v[9 * plane + c] = t21 + t22, v[10 * plane + c] = t22 - t21;
      v[11 * plane + c] = t21 - t23;
      v[12 * plane + c] = t30 - t32, v[13 * plane + c] = t31 + t32, v[14 * plane + c] = t32 - t31;
      v[15 * plane + c] = t31 - t33;
    }
  }
}

typedef struct {
  const float *m;     /* (16, tiles, O) */
  const float *bias;  /* (O) or NULL */
  const float *zeros; /* O zeros: no bias */
  float *y;           /* (N, OH, OW, O) */
  float *spare[3];    /* O floats each: where a half tile's missing outputs go (one thread) */
  const float *add;   /* (N, OH, OW, O) with its pixels ld_add floats apart, or NULL */
  ptrdiff_t tiles, ld_add;
  int OH, OW, O, tile_rows, tile_cols, act, add_after; /* add_after: add after the activation, else before */
} winograd_out_args;

ZOO_CLONES static void winograd_output_tiles(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const winograd_out_args *a = (const winograd_out_args *)p;
  const ptrdiff_t O = a->O, plane = a->tiles * O;
  for (ptrdiff_t tile = b; tile < e; ++tile) {
    int tx, ty;
    const ptrdiff_t n = tile_position(tile, a->tile_rows, a->tile_cols, &ty, &tx);
    const int rows = 2 * ty + 1 < a->OH ? 2 : 1, cols = 2 * tx + 1 < a->OW ? 2 : 1; /* odd maps: a half tile */
    float *out[4];
    for (int i = 0; i < 4; ++i)
      out[i] = a->y + ((n * a->OH + 2 * ty + (i / 2 < rows ? i / 2 : 0)) * a->OW + 2 * tx + (i % 2 < cols ? i % 2 : 0)) * O;
    const float *restrict m = a->m + tile * O;
    const float *restrict bias = a->bias != NULL ? a->bias : a->zeros;
    float *restrict y00 = out[0], *restrict y01 = out[1], *restrict y10 = out[2], *restrict y11 = out[3];
    if (rows < 2 || cols < 2) { /* a half tile: its missing outputs go to a scratch row */
      if (rows < 2) y10 = a->spare[0], y11 = a->spare[1];
      if (cols < 2) y01 = a->spare[2], y11 = a->spare[1];
    }
    ZOO_NO_ALIAS
    for (ptrdiff_t c = 0; c < O; ++c) { /* A^T M A, A^T = [[1, 1, 1, 0], [0, 1, -1, -1]], columns j */
      const float m10 = m[4 * plane + c], m11 = m[5 * plane + c], m12 = m[6 * plane + c], m13 = m[7 * plane + c];
      const float m20 = m[8 * plane + c], m21 = m[9 * plane + c], m22 = m[10 * plane + c], m23 = m[11 * plane + c];
      const float s00 = m[c] + m10 + m20, s01 = m[plane + c] + m11 + m21;
      const float s02 = m[2 * plane + c] + m12 + m22, s03 = m[3 * plane + c] + m13 + m23;
      const float s10 = m10 - m20 - m[12 * plane + c], s11 = m11 - m21 - m[13 * plane + c];
      const float s12 = m12 - m22 - m[14 * plane + c], s13 = m13 - m23 - m[15 * plane + c];
      y00[c] = s00 + s01 + s02 + bias[c];
      y01[c] = s01 - s02 - s03 + bias[c];
      y10[c] = s10 + s11 + s12 + bias[c];
      y11[c] = s11 - s12 - s13 + bias[c];
    }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        if (i >= rows || j >= cols) continue;
        float *restrict o = out[2 * i + j];
        const float *restrict r = a->add == NULL ? NULL : a->add + (o - a->y) / O * a->ld_add;
        if (r != NULL && !a->add_after)
          for (ptrdiff_t c = 0; c < O; ++c) o[c] += r[c];
        activate(o, o, O, a->act);
        if (r != NULL && a->add_after)
          for (ptrdiff_t c = 0; c < O; ++c) o[c] += r[c];
      }
  }
}

typedef struct {
  const float *v, *u; /* (16, tiles, C), (16, C, O) */
  const float *packed; /* u packed (zoo_pack_f32: 16 matrices of O by C), or NULL */
  float *m;           /* (16, tiles, O) */
  ptrdiff_t tiles, chunks; /* with packed: each product in chunks of WINOGRAD_CHUNK tiles */
  int C, O;
} winograd_products_args;

/* M[k] = V[k] @ U[k] for k in [b, e) */
static void winograd_products(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const winograd_products_args *a = (const winograd_products_args *)p;
  for (ptrdiff_t k = b; k < e; ++k)
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, (int)a->tiles, a->O, a->C, 1.0f,
          a->v + (size_t)k * a->tiles * a->C, a->C, a->u + (size_t)k * a->C * a->O, a->O, 0.0f,
          a->m + (size_t)k * a->tiles * a->O, a->O);
}

/* The same products with U packed, WINOGRAD_CHUNK tiles of product k / chunks at a time: every thread has
 * work where the maps are small, and a chunk's V rows stay in cache over U's panels */
#define WINOGRAD_CHUNK 192
static void winograd_packed_products(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const winograd_products_args *a = (const winograd_products_args *)p;
  const ptrdiff_t panels = (a->O + PANEL - 1) / PANEL;
  for (ptrdiff_t item = b; item < e; ++item) {
    const ptrdiff_t k = item / a->chunks, first = item % a->chunks * WINOGRAD_CHUNK;
    const ptrdiff_t rows = a->tiles - first < WINOGRAD_CHUNK ? a->tiles - first : WINOGRAD_CHUNK;
    packed_product(a->v + (k * a->tiles + first) * a->C, a->C, rows, a->C, a->packed + k * panels * a->C * PANEL,
                   (ptrdiff_t)a->C * PANEL, a->O, a->m + (k * a->tiles + first) * a->O, a->O, 0);
  }
}

/* y (N, OH, OW, O) = act(conv3x3(x (N, H, W, C), g) + bias + add), or with add_after act(...) + add (YOLO's
 * Bottleneck adds its input after the SiLU), stride 1, padding pad (0 or 1; zero or reflect), from
 * u = G g G^T laid out (16, C, O) and/or the same packed (either NULL); x's pixels ldx floats apart, add's
 * ld_add (add NULL: none).
 * Returns 0, or -1 when no sgemm was given or memory ran out (nothing written: the caller falls back). */
int zoo_winograd_conv3x3_f32(const float *x, ptrdiff_t ldx, const float *u, const float *packed, const float *bias,
                             const float *add, ptrdiff_t ld_add, int add_after, float *y, int N, int H, int W, int C,
                             int O, int pad, int reflect, int act, int threads) {
  packed = usable(packed);
  if ((sgemm == NULL || u == NULL) && packed == NULL) return -1;
  const int OH = H + 2 * pad - 2, OW = W + 2 * pad - 2, tile_rows = (OH + 1) / 2, tile_cols = (OW + 1) / 2;
  const ptrdiff_t tiles = (ptrdiff_t)N * tile_rows * tile_cols;
  float *v = (float *)malloc(sizeof(float) * 16 * (size_t)tiles * C);
  float *m = (float *)malloc(sizeof(float) * 16 * (size_t)tiles * O);
  float *zeros = (float *)calloc((size_t)(C > O ? C : O) * 4, sizeof(float)); /* zeros, then 3 spares */
  if (v == NULL || m == NULL || zeros == NULL) {
    free(v), free(m), free(zeros);
    return -1;
  }
  winograd_in_args in = {x, v, zeros, tiles, ldx, H, W, C, pad, reflect, tile_rows, tile_cols};
  parallel_for(winograd_input_tiles, &in, tiles, tiles * C < UNARY_GRAIN ? 1 : threads);
  const ptrdiff_t chunks = (tiles + WINOGRAD_CHUNK - 1) / WINOGRAD_CHUNK;
  winograd_products_args products = {v, u, packed, m, tiles, chunks, C, O};
  /* products OpenBLAS would run on one thread anyway (m*n*k up to 2^18) in a row on this one */
  const int product_threads = (double)tiles * C * O <= (1 << 18) ? 1 : threads;
  if (packed != NULL)
    parallel_for(winograd_packed_products, &products, 16 * chunks, product_threads);
  else
    parallel_products(winograd_products, &products, 16, product_threads);
  /* half tiles (odd maps) are the last row and column of tiles: done by one thread, with its spares */
  const ptrdiff_t whole = (OH % 2 || OW % 2) ? 0 : tiles;
  const size_t width = (size_t)(C > O ? C : O);
  winograd_out_args out = {m, bias, zeros, y, {zeros + width, zeros + 2 * width, zeros + 3 * width}, add, tiles,
                           ld_add, OH, OW, O, tile_rows, tile_cols, act, add_after};
  if (whole)
    parallel_for(winograd_output_tiles, &out, tiles, tiles * O < UNARY_GRAIN ? 1 : threads);
  else
    winograd_output_tiles(&out, 0, tiles);
  free(v), free(m), free(zeros);
  return 0;
}

/* ---- matrix products in tiles over our threads --------------------------------------------- */

/* MLX's CPU batched matmul calls sgemm once per product, and OpenBLAS splits each over its threads:
 * LaMa's Fourier units (rfft2_planar at 256 px: 32 products of 68x32 by 32x192 per unit) then waited
 * for OpenBLAS's second thread 64 times per unit, and a product that followed other work waited for
 * that sleeping thread to wake: the units' products over H (32 x 64 by 64 x 6528) took 0.3 ms alone and
 * up to 13 ms after our C calls (2026-11-29, a 2-core VM); the transposed convolutions' tap products
 * likewise. Here every product is cut in tiles of at most TILE_ROWS x TILE_COLUMNS (small ones are
 * one tile), the tiles of all products go over our threads, each tile one sgemm on one OpenBLAS
 * thread (parallel_products). */
#define TILE_ROWS 512
#define TILE_COLUMNS 256

typedef struct {
  const float *a, *b; /* (batch or 1, M, K), (batch, K, N) */
  float *c;           /* (batch, M, N) */
  ptrdiff_t a_step;   /* M * K, or 0: one left matrix for every product */
  int M, N, K, row_tiles, col_tiles;
} matmul_args;

static void matmul_tiles(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const matmul_args *a = (const matmul_args *)p;
  const ptrdiff_t per_product = (ptrdiff_t)a->row_tiles * a->col_tiles;
  for (ptrdiff_t tile = b; tile < e; ++tile) {
    const ptrdiff_t i = tile / per_product;
    const int row = (int)(tile % per_product / a->col_tiles) * TILE_ROWS;
    const int col = (int)(tile % a->col_tiles) * TILE_COLUMNS;
    const int rows = a->M - row < TILE_ROWS ? a->M - row : TILE_ROWS;
    const int cols = a->N - col < TILE_COLUMNS ? a->N - col : TILE_COLUMNS;
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, rows, cols, a->K, 1.0f,
          a->a + i * a->a_step + (ptrdiff_t)row * a->K, a->K, a->b + i * (ptrdiff_t)a->K * a->N + col, a->N, 0.0f,
          a->c + i * (ptrdiff_t)a->M * a->N + (ptrdiff_t)row * a->N + col, a->N);
  }
}

/* c[i] = a[i] @ b[i] (a_shared: a @ b[i]) for i in [0, batch). Returns 0, or -1 when no sgemm was given. */
int zoo_matmul_batched_f32(const float *a, const float *b, float *c, ptrdiff_t batch, int a_shared, int M, int N,
                           int K, int threads) {
  if (sgemm == NULL) return -1;
  matmul_args args = {a, b, c, a_shared ? 0 : (ptrdiff_t)M * K, M, N, K, (M + TILE_ROWS - 1) / TILE_ROWS,
                      (N + TILE_COLUMNS - 1) / TILE_COLUMNS};
  parallel_products(matmul_tiles, &args, batch * args.row_tiles * args.col_tiles,
                    (double)batch * M * N * K <= (1 << 18) ? 1 : threads);
  return 0;
}

/* ---- attention: softmax(scale * q k^T + bias) v, one (batch, head) per product ------------- */

/* MLX's CPU attention is matmul, softmax, matmul, each matmul a loop of one sgemm per (batch, head)
 * that OpenBLAS splits over its threads: TinyViT's 49- and 196-token windows made ~5,600 small
 * products per image, each waiting for OpenBLAS's second thread (on a loaded 2-core host ~1 ms
 * apiece: 11.8 s of a 17.5 s forward, 2026-11-29). Here each (batch, head) runs both products on
 * one OpenBLAS thread and the softmax between them in cache, the heads spread over our threads. */
/* Where (batch b, head h)'s matrix of q, k, v and out starts and how far apart its rows are:
 * element [row][j] at base + b * batch + h * head + row * row_stride + j. Contiguous (B, H, N, D)
 * arrays have batch = H N D, head = N D, row = D; heads read straight out of a fused qkv
 * projection (B, N, H, 3, D) and written into (B, N, H, DV) spare the two transposing copies. */
typedef struct {
  ptrdiff_t batch, head, row;
} layout_t;

typedef struct {
  const float *q, *k, *v, *bias; /* NQ x D, NK x D, NK x DV matrices (layouts below); bias (planes, NQ, NK) or NULL */
  float *out;                    /* NQ x DV matrices */
  layout_t lq, lk, lv, lout;
  ptrdiff_t heads, planes, NQ, NK, D, DV;
  float scale;
  atomic_int failed; /* no memory for a thread's scores: set, the caller falls back */
} attention_args;

static inline ptrdiff_t matrix_offset(layout_t l, ptrdiff_t bh, ptrdiff_t heads) {
  return bh / heads * l.batch + bh % heads * l.head;
}

static void attention_heads(const void *p, ptrdiff_t b, ptrdiff_t e) {
  attention_args *a = (attention_args *)p;
  float *scores = (float *)malloc(sizeof(float) * (size_t)a->NQ * a->NK);
  if (scores == NULL) {
    atomic_store(&a->failed, 1);
    return;
  }
  for (ptrdiff_t bh = b; bh < e; ++bh) {
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)a->NQ, (int)a->NK, (int)a->D, 1.0f,
          a->q + matrix_offset(a->lq, bh, a->heads), (int)a->lq.row, a->k + matrix_offset(a->lk, bh, a->heads),
          (int)a->lk.row, 0.0f, scores, (int)a->NK);
    softmax_params sp = {a->bias == NULL ? NULL : a->bias + (bh % a->planes) * a->NQ * a->NK, a->NQ, a->scale};
    for (ptrdiff_t row = 0; row < a->NQ; ++row)
      softmax_row(&sp, scores + row * a->NK, scores + row * a->NK, row, a->NK);
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, (int)a->NQ, (int)a->DV, (int)a->NK, 1.0f, scores,
          (int)a->NK, a->v + matrix_offset(a->lv, bh, a->heads), (int)a->lv.row, 0.0f,
          a->out + matrix_offset(a->lout, bh, a->heads), (int)a->lout.row);
  }
  free(scores);
}

/* out = softmax(scale * q k^T + bias) v per (batch, head) bh in [0, B * heads); bias plane bh % planes
 * (NULL: none). ``strides``: the (batch, head, row) strides of q, k, v and out, 12 in all (layout_t).
 * Returns 0, or -1 when no sgemm was given or memory ran out (the caller falls back). */
int zoo_attention_f32(const float *q, const float *k, const float *v, const float *bias, ptrdiff_t planes,
                      float scale, float *out, const ptrdiff_t *strides, ptrdiff_t B, ptrdiff_t heads, ptrdiff_t NQ,
                      ptrdiff_t NK, ptrdiff_t D, ptrdiff_t DV, int threads) {
  if (sgemm == NULL) return -1;
  layout_t l[4];
  for (int i = 0; i < 4; ++i) l[i] = (layout_t){strides[3 * i], strides[3 * i + 1], strides[3 * i + 2]};
  attention_args a = {q, k, v, bias, out, l[0], l[1], l[2], l[3], heads, planes > 0 ? planes : 1, NQ, NK, D, DV,
                      scale, 0};
  parallel_products(attention_heads, &a, B * heads, threads);
  return atomic_load(&a.failed) ? -1 : 0;
}

/* ---- attention heads out of a fused projection ---------------------------------------------- */

typedef struct {
  const float *x; /* (B, N, H, parts, D) */
  float *out[3];  /* each (B, H, N, D) */
  ptrdiff_t N, H, D, parts;
} heads_args;

static void split_heads_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const heads_args *a = (const heads_args *)p;
  for (ptrdiff_t row = b; row < e; ++row) { /* row = batch * N + token */
    const ptrdiff_t batch = row / a->N, token = row % a->N;
    const float *src = a->x + row * a->H * a->parts * a->D;
    for (ptrdiff_t h = 0; h < a->H; ++h)
      for (ptrdiff_t t = 0; t < a->parts; ++t, src += a->D)
        memcpy(a->out[t] + ((batch * a->H + h) * a->N + token) * a->D, src, sizeof(float) * a->D);
  }
}

/* x (B, N, H, parts, D) -> parts arrays (B, H, N, D): the copy MLX makes, one float at a time,
 * for a 5-D transpose (e.g. TinyViT's qkv, (B, N, H, 3, D) -> 3 x (B, H, N, D)). parts <= 3. */
void zoo_split_heads_f32(const float *x, float *a, float *b, float *c, ptrdiff_t B, ptrdiff_t N, ptrdiff_t H,
                         ptrdiff_t parts, ptrdiff_t D, int threads) {
  heads_args args = {x, {a, b, c}, N, H, D, parts};
  if (B * N * H * parts * D < UNARY_GRAIN * 2) threads = 1;
  parallel_for(split_heads_rows, &args, B * N, threads);
}

/* ---- windows of a map (window attention), NHWC ---------------------------------------------- */

typedef struct {
  const float *src;
  float *dst;
  ptrdiff_t H, W, C, ws, nh, nw;
} window_args;

/* One index per (batch, window row, pixel row in the window): copy its nw window rows. */
static void partition_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const window_args *a = (const window_args *)p;
  const ptrdiff_t ws = a->ws, C = a->C;
  for (ptrdiff_t idx = b; idx < e; ++idx) {
    const ptrdiff_t batch = idx / (a->nh * ws), wy = idx / ws % a->nh, iy = idx % ws, y = wy * ws + iy;
    for (ptrdiff_t wx = 0; wx < a->nw; ++wx) {
      float *dst = a->dst + (((batch * a->nh + wy) * a->nw + wx) * ws + iy) * ws * C;
      const ptrdiff_t x0 = wx * ws, inside = y < a->H ? (a->W - x0 < ws ? a->W - x0 : ws) : 0;
      if (inside > 0) memcpy(dst, a->src + ((batch * a->H + y) * a->W + x0) * C, sizeof(float) * inside * C);
      if (inside < ws) memset(dst + inside * C, 0, sizeof(float) * (ws - inside) * C);
    }
  }
}

/* x (B, H, W, C) -> (B * nh * nw, ws * ws, C), windows in row-major order, zero padding past H, W. */
void zoo_window_partition_f32(const float *x, float *y, ptrdiff_t B, ptrdiff_t H, ptrdiff_t W, ptrdiff_t C,
                              ptrdiff_t ws, int threads) {
  const ptrdiff_t nh = (H + ws - 1) / ws, nw = (W + ws - 1) / ws;
  window_args a = {x, y, H, W, C, ws, nh, nw};
  if (B * nh * nw * ws * ws * C < UNARY_GRAIN * 2) threads = 1;
  parallel_for(partition_rows, &a, B * nh * ws, threads);
}

/* One index per output row (batch, y): gather it from its windows. */
static void merge_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const window_args *a = (const window_args *)p;
  const ptrdiff_t ws = a->ws, C = a->C;
  for (ptrdiff_t idx = b; idx < e; ++idx) {
    const ptrdiff_t batch = idx / a->H, y = idx % a->H, wy = y / ws, iy = y % ws;
    for (ptrdiff_t wx = 0; wx < a->nw; ++wx) {
      const ptrdiff_t x0 = wx * ws, count = a->W - x0 < ws ? a->W - x0 : ws;
      memcpy(a->dst + ((batch * a->H + y) * a->W + x0) * C,
             a->src + (((batch * a->nh + wy) * a->nw + wx) * ws + iy) * ws * C, sizeof(float) * count * C);
    }
  }
}

/* The inverse: windows (B * nh * nw, ws * ws, C) -> (B, H, W, C), the padding dropped. */
void zoo_window_merge_f32(const float *x, float *y, ptrdiff_t B, ptrdiff_t H, ptrdiff_t W, ptrdiff_t C, ptrdiff_t ws,
                          int threads) {
  const ptrdiff_t nh = (H + ws - 1) / ws, nw = (W + ws - 1) / ws;
  window_args a = {x, y, H, W, C, ws, nh, nw};
  if (B * H * W * C < UNARY_GRAIN * 2) threads = 1;
  parallel_for(merge_rows, &a, B * H, threads);
}
