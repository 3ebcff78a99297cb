"""The one training loop (pretrain, finetune and distill share it), read top to bottom in loop.py
with its budgets, batches and preemption; beside it the Objective contract it calls, FLOPs,
precision, the held-out evaluation, cross-process collectives and checkpoints."""
