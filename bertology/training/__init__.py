"""The one training loop (pretrain, finetune and distill share it), the Objective contract it
calls, budgets, FLOPs, precision, preemption, cross-process collectives and checkpoints."""
