"""Pipelines are verbs: run(cfg, out_dir) -> dict[str, float], read like a table of contents."""
