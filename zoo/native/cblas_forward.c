/*
 * cblas_sgemm, cblas_dgemm and cblas_cgemm, forwarded to scipy-openblas32.
 *
 * MLX's Linux CPU wheel binds these three names to a reference (netlib) BLAS.
 * scipy-openblas32 (the OpenBLAS build numpy and SciPy ship) exports the same
 * functions under a scipy_ prefix and needs no Fortran runtime. zoo.blas loads
 * that library and then this one with RTLD_GLOBAL before mlx is imported, so
 * MLX's unprefixed calls resolve here. The scipy_ names are left undefined at
 * link time and resolve against the already loaded OpenBLAS.
 */
typedef int blasint; /* LP64: scipy-openblas32 and MLX both use 32-bit indices */

#define GEMM(T, SUFFIX, SCALAR)                                                              \
  extern void scipy_cblas_##SUFFIX(int, int, int, blasint, blasint, blasint, SCALAR, const T *, blasint, \
                                   const T *, blasint, SCALAR, T *, blasint);                            \
  void cblas_##SUFFIX(int order, int trans_a, int trans_b, blasint m, blasint n, blasint k, SCALAR alpha, \
                      const T *a, blasint lda, const T *b, blasint ldb, SCALAR beta, T *c, blasint ldc) { \
    scipy_cblas_##SUFFIX(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);         \
  }

GEMM(float, sgemm, float)
GEMM(double, dgemm, double)
GEMM(void, cgemm, const void *) /* complex: alpha and beta are passed by pointer */
