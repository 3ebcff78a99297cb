"""The prune pipeline's nouns: head gating and structural removal, head importance, pruning
schedules, int8 quantisation, and the experiments (head curves, removal, layers, magnitude,
int8, the compression matrix) over a PruneContext."""
