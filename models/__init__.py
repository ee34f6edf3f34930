"""MLX model families: one file (or small package) per family; see zoo.registry for the names."""
