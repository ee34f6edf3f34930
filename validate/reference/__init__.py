"""Numpy-only CPU reference: NCHW like upstream, upstream module names. Never imports mlx or zoo.models."""
