"""Budgets: a fine-tuning budget in epochs (BERT §A.3: 2-4 epochs) resolved to steps, once the
training set's size is known; how much of a run's budget is spent, and the learning rate that
follows it."""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

from bertology.config.groups import TrainerConfig


class Spent(Protocol):
    """What a budget reads of a run (training/loop.py's LoopState)."""

    step: int
    flops: float
    train_seconds: float
    warmup_progress: float


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


def budget_progress(state: Spent, cfg: TrainerConfig) -> float:
    """How much of the run is spent, 0..1: the largest share of any budget (steps, FLOPs,
    seconds), so the run ends, and the learning rate reaches zero, with the first to run out."""
    shares = [state.step / cfg.max_steps]
    if cfg.max_flops is not None:
        shares.append(state.flops / cfg.max_flops)
    if cfg.max_time_s is not None:
        shares.append(state.train_seconds / cfg.max_time_s)
    return min(1.0, max(shares))


def compute_lr(state: Spent, cfg: TrainerConfig) -> float:
    """Linear warmup over warmup_steps, then linear decay to zero at the end of the budget
    (BERT §A.2). With only a step budget this is HF's get_linear_schedule_with_warmup."""
    if state.step < cfg.warmup_steps:
        return cfg.lr * state.step / cfg.warmup_steps
    remaining = 1.0 - budget_progress(state, cfg)
    return cfg.lr * max(0.0, remaining) / max(1e-12, 1.0 - state.warmup_progress)
