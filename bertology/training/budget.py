"""A fine-tuning budget in epochs (BERT §A.3: 2-4 epochs) resolved to steps, once the
training set's size is known."""

from __future__ import annotations

import dataclasses
import math

from bertology.config.groups import TrainerConfig


def resolve_budget(trainer: TrainerConfig, num_examples: int) -> TrainerConfig:
    """trainer.epochs → max_steps (whichever is smaller); warmup_ratio → warmup_steps."""
    if trainer.epochs is not None:
        per_step = trainer.batch_size * trainer.grad_accum_steps
        steps = max(1, math.ceil(trainer.epochs * num_examples / per_step))
        trainer = dataclasses.replace(trainer, max_steps=min(trainer.max_steps, steps))
    if trainer.warmup_ratio > 0:
        trainer = dataclasses.replace(trainer,
                                      warmup_steps=round(trainer.warmup_ratio * trainer.max_steps))
    return trainer
