"""One parity case per model family: how to make inputs and run each side.

A case module provides
  make_inputs(spec, args) -> dict of numpy arrays in upstream layout (NCHW)
  run_mlx(model, inputs) -> output of the MLX model
  run_reference(spec, state_dict, inputs, trace) -> output of the numpy reference
and optionally add_arguments(parser), SAME_LAYOUT (fnmatch patterns of
module names whose 4-D MLX values already have the upstream layout) and
tolerance(name, mode, dtype, default) -> float (a layer's bound where the
default does not fit; the report flags it).
"""
