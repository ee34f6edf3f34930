"""Compiled helpers (built at install, optional): cblas_forward, see zoo.blas."""
