"""Model construction per family and the per-family module paths."""
