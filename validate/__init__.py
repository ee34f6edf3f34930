"""Layer parity of every model against an independent numpy reference (python -m zoo.validate)."""
