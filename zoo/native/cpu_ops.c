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
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define ZOO_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define ZOO_CLONES
#endif

#define MAX_THREADS 64

/* ---- a minimal parallel-for: [0, n) in `threads` contiguous chunks ---------------------- */

typedef void (*range_fn)(const void *args, ptrdiff_t begin, ptrdiff_t end);

typedef struct {
  range_fn fn;
  const void *args;
  ptrdiff_t begin, end;
} chunk_t;

static void *run_chunk(void *p) {
  chunk_t *c = (chunk_t *)p;
  c->fn(c->args, c->begin, c->end);
  return NULL;
}

static void parallel_for(range_fn fn, const void *args, ptrdiff_t n, int threads) {
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  if (threads < 1 || n < 2 * threads) threads = 1;
  chunk_t chunks[MAX_THREADS];
  pthread_t ids[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  for (int t = 0; t < threads; ++t) {
    chunks[t] = (chunk_t){fn, args, n * t / threads, n * (t + 1) / threads};
  }
  for (int t = 1; t < threads; ++t) {
    started[t] = pthread_create(&ids[t], NULL, run_chunk, &chunks[t]) == 0;
    if (!started[t]) run_chunk(&chunks[t]); /* no thread: do it here */
  }
  run_chunk(&chunks[0]);
  for (int t = 1; t < threads; ++t) {
    if (started[t]) pthread_join(ids[t], NULL);
  }
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
 * so the negative tail keeps its relative precision instead of cancelling in 1 + erf. */
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
  /* exp(p - z^2) as exp(-zh^2) exp(p - (z - zh)(z + zh)) with zh = z to 1/256: zh^2 is exact
   * in float, so the large part of the argument carries no rounding (Cephes' erfc does this). */
  float zh = ((z * 256.0f + 12582912.0f) - 12582912.0f) * (1.0f / 256.0f);
  float half_erfc = 0.5f * t * exp_nonpositive(-zh * zh) * exp_nonpositive(p - (z - zh) * (z + zh));
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

/* ---- element-wise ops ---------------------------------------------------------------------- */

typedef struct {
  const float *x;
  float *y;
} unary_args;

ZOO_CLONES static void sigmoid_range(const void *a, ptrdiff_t b, ptrdiff_t e) {
  const float *x = ((const unary_args *)a)->x;
  float *y = ((const unary_args *)a)->y;
  for (ptrdiff_t i = b; i < e; ++i) y[i] = sigmoid1(x[i]);
}

ZOO_CLONES static void silu_range(const void *a, ptrdiff_t b, ptrdiff_t e) {
  const float *x = ((const unary_args *)a)->x;
  float *y = ((const unary_args *)a)->y;
  for (ptrdiff_t i = b; i < e; ++i) y[i] = x[i] * sigmoid1(x[i]);
}

ZOO_CLONES static void gelu_range(const void *a, ptrdiff_t b, ptrdiff_t e) {
  const float *x = ((const unary_args *)a)->x;
  float *y = ((const unary_args *)a)->y;
  for (ptrdiff_t i = b; i < e; ++i) y[i] = x[i] * normal_cdf(x[i]);
}

/* Below this many elements one thread does it: starting a thread costs ~20 us. */
#define UNARY_GRAIN 65536

static void unary(range_fn fn, const float *x, float *y, ptrdiff_t n, int threads) {
  unary_args a = {x, y};
  if (n < UNARY_GRAIN * 2) threads = 1;
  parallel_for(fn, &a, n, threads);
}

void zoo_sigmoid_f32(const float *x, float *y, ptrdiff_t n, int threads) { unary(sigmoid_range, x, y, n, threads); }
void zoo_silu_f32(const float *x, float *y, ptrdiff_t n, int threads) { unary(silu_range, x, y, n, threads); }
void zoo_gelu_f32(const float *x, float *y, ptrdiff_t n, int threads) { unary(gelu_range, x, y, n, threads); }

/* ---- per-channel scale and shift (BatchNorm at inference), channels last ------------------- */

typedef struct {
  const float *x, *scale, *shift;
  float *y;
  ptrdiff_t channels;
} affine_args;

ZOO_CLONES static void affine_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const affine_args *a = (const affine_args *)p;
  const ptrdiff_t C = a->channels;
  for (ptrdiff_t row = b; row < e; ++row) {
    const float *x = a->x + row * C;
    float *y = a->y + row * C;
    for (ptrdiff_t c = 0; c < C; ++c) y[c] = x[c] * a->scale[c] + a->shift[c];
  }
}

void zoo_channel_affine_f32(const float *x, const float *scale, const float *shift, float *y, ptrdiff_t rows,
                            ptrdiff_t channels, int threads) {
  affine_args a = {x, scale, shift, y, channels};
  if (rows * channels < UNARY_GRAIN * 2) threads = 1;
  parallel_for(affine_rows, &a, rows, threads);
}

/* ---- softmax over the last axis -------------------------------------------------------------- */

typedef struct {
  const float *x;
  float *y;
  ptrdiff_t cols;
} softmax_args;

ZOO_CLONES static void softmax_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const softmax_args *a = (const softmax_args *)p;
  const ptrdiff_t cols = a->cols;
  for (ptrdiff_t row = b; row < e; ++row) {
    const float *x = a->x + row * cols;
    float *y = a->y + row * cols;
    float top = x[0];
    for (ptrdiff_t i = 1; i < cols; ++i) top = x[i] > top ? x[i] : top;
    float sum = 0.0f;
    for (ptrdiff_t i = 0; i < cols; ++i) {
      y[i] = exp_nonpositive(x[i] - top);
      sum += y[i];
    }
    const float inv = 1.0f / sum;
    for (ptrdiff_t i = 0; i < cols; ++i) y[i] *= inv;
  }
}

void zoo_softmax_f32(const float *x, float *y, ptrdiff_t rows, ptrdiff_t cols, int threads) {
  softmax_args a = {x, y, cols};
  if (rows * cols < UNARY_GRAIN * 2) threads = 1;
  parallel_for(softmax_rows, &a, rows, threads);
}

/* ---- depthwise 2-D convolution, NHWC --------------------------------------------------------- */

typedef struct {
  const float *x; /* (N, H, W, C) */
  const float *w; /* (KH, KW, C) */
  float *y;       /* (N, OH, OW, C) */
  int H, W, C, KH, KW, OH, OW, stride, pad_top, pad_left;
} dw_args;

/* One output row (n, oh) per index: every output pixel sums its valid taps over the
 * channel vector (the loop the compiler vectorises). */
ZOO_CLONES static void depthwise_rows(const void *p, ptrdiff_t b, ptrdiff_t e) {
  const dw_args *a = (const dw_args *)p;
  const int C = a->C;
  for (ptrdiff_t row = b; row < e; ++row) {
    const ptrdiff_t n = row / a->OH;
    const int oh = (int)(row % a->OH);
    float *out = a->y + (size_t)row * a->OW * C;
    for (int ow = 0; ow < a->OW; ++ow) {
      float *o = out + (size_t)ow * C;
      memset(o, 0, sizeof(float) * C);
      for (int kh = 0; kh < a->KH; ++kh) {
        const int ih = oh * a->stride - a->pad_top + kh;
        if (ih < 0 || ih >= a->H) continue;
        for (int kw = 0; kw < a->KW; ++kw) {
          const int iw = ow * a->stride - a->pad_left + kw;
          if (iw < 0 || iw >= a->W) continue;
          const float *in = a->x + (((size_t)n * a->H + ih) * a->W + iw) * C;
          const float *wt = a->w + ((size_t)kh * a->KW + kw) * C;
          for (int c = 0; c < C; ++c) o[c] += in[c] * wt[c];
        }
      }
    }
  }
}

void zoo_depthwise_conv2d_f32(const float *x, const float *w, float *y, int N, int H, int W, int C, int KH, int KW,
                              int stride, int pad_top, int pad_left, int OH, int OW, int threads) {
  dw_args a = {x, w, y, H, W, C, KH, KW, OH, OW, stride, pad_top, pad_left};
  if ((ptrdiff_t)N * OH * OW * C * KH * KW < UNARY_GRAIN * 4) threads = 1;
  parallel_for(depthwise_rows, &a, (ptrdiff_t)N * OH, threads);
}
