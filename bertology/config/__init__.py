"""The checked schema, ground floor: one dataclass per config group and one module per
pipeline's config. Imports no torch, so `bertology --help` and a config error answer fast."""
