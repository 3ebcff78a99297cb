"""Scoring a task model on held-out data: metrics.py holds the task metrics (accuracy, F1, MCC,
entity F1, SQuAD EM/F1), predictions.py decodes a model's logits into predictions, scores them
and draws their bootstrap replicates. Fine-tuning, distillation and pruning share both."""
