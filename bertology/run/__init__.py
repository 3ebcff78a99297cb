"""A run's life: which process this is, its status and lock, atomic files, tables and figures,
and tracking (metrics.jsonl / metrics.json / W&B). Imports no torch."""
