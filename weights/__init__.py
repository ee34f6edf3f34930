"""Weights: Hub download, torch-free checkpoint reading, synthetic weights, conversion to MLX layout."""
