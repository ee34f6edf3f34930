"""Compiled helpers (built at install, optional): cblas_forward (see zoo.blas), cpu_ops (see zoo.kernels.cpu)."""
