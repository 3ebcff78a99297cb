"""Where a training run is: its state (everything besides weights and optimizer a resumed run
needs to continue exactly), the first non-finite step, how much of its budget is spent, and
the learning rate that follows. A fine-tuning budget in epochs (BERT §A.3: 2-4 epochs) is
resolved to steps here too, once the training set's size is known."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from bertology.config.groups import TrainerConfig
from bertology.errors import RunFailed


class Health:
    """The first step whose loss (or, without fp16's loss scaler, gradient norm) is not finite,
    with both values, kept as device tensors so recording it never waits for the device."""

    def __init__(self):
        self.step = self.loss = self.grad_norm = None

    def record(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor,
               scaled: bool) -> None:
        loss, grad_norm = loss.detach().float(), grad_norm.detach().float().to(loss.device)
        bad = ~torch.isfinite(loss)
        if not scaled:  # under fp16 an inf gradient is routine: the scaler skips that step
            bad = bad | ~torch.isfinite(grad_norm)
        if self.step is None:
            self.step = torch.full_like(loss, -1.0)
            self.loss, self.grad_norm = torch.zeros_like(loss), torch.zeros_like(loss)
        first = bad & (self.step < 0)
        self.step = torch.where(first, torch.full_like(loss, float(step)), self.step)
        self.loss = torch.where(first, loss, self.loss)
        self.grad_norm = torch.where(first, grad_norm, self.grad_norm)

    def check(self) -> None:
        """Raise RunFailed if a step since the run started was not finite (reads the device)."""
        if self.step is None or float(self.step) < 0:
            return
        raise RunFailed(f"non-finite training loss ({float(self.loss):g}, gradient norm "
                        f"{float(self.grad_norm):g}) at step {int(self.step)}; lower trainer.lr "
                        "or raise trainer.warmup_steps, the checkpoints written before it are "
                        "kept")


@dataclass
class LoopState:
    """Everything besides weights and optimizer a resumed run needs to continue exactly."""

    step: int = 0
    epoch: int = 0  # the data position: the group of examples starting `offset` into `epoch`
    offset: int = 0
    group_batches: int = 0  # batches already served from that group
    tokens: int = 0
    train_seconds: float = 0.0
    data_seconds: float = 0.0  # of train_seconds, spent waiting for the next batch
    flops: float = 0.0  # estimated training FLOPs so far (training/flops.py)
    warmup_progress: float = 0.0  # budget spent when warmup ended: the decay starts from there
    window: dict[str, float] = field(default_factory=dict)  # sums since the last log line
    window_steps: int = 0
    last_train: dict[str, float] = field(default_factory=dict)
    last_eval: dict[str, float] = field(default_factory=dict)
    # not checkpointed: the first non-finite step since the last check, kept on the device
    health: Health = field(default_factory=Health, compare=False, repr=False)

    def saved(self) -> dict:
        """What a checkpoint holds: every field but the device-side health flag, the window
        read back to floats."""
        fields = {k: v for k, v in vars(self).items() if k != "health"}
        return {**fields, "window": read_window(self.window)}


def read_window(window: dict) -> dict[str, float]:
    """The window's sums as floats: the one read of the device per log step."""
    return {key: float(value) for key, value in window.items()}



def resolve_budget(trainer: TrainerConfig, num_examples: int) -> TrainerConfig:
    """trainer.epochs → max_steps (whichever is smaller); warmup_ratio → warmup_steps."""
    if trainer.epochs is not None:
        per_step = trainer.batch_size * trainer.grad_accum_steps
        steps = max(1, math.ceil(trainer.epochs * num_examples / per_step))
        trainer = dataclasses.replace(trainer, max_steps=min(trainer.max_steps, steps))
    if trainer.warmup_ratio > 0:  # in steps from here on: HF's schedule exactly
        trainer = dataclasses.replace(trainer, warmup_ratio=0.0,
                                      warmup_steps=round(trainer.warmup_ratio * trainer.max_steps))
    return trainer


def budget_progress(state: LoopState, cfg: TrainerConfig) -> float:
    """How much of the run is spent, 0..1: the largest share of any budget (steps, FLOPs,
    seconds), so the run ends, and the learning rate reaches zero, with the first to run out."""
    shares = [state.step / cfg.max_steps]
    if cfg.max_flops is not None:
        shares.append(state.flops / cfg.max_flops)
    if cfg.max_time_s is not None:
        shares.append(state.train_seconds / cfg.max_time_s)
    return min(1.0, max(shares))


def compute_lr(state: LoopState, cfg: TrainerConfig) -> float:
    """Linear warmup, then linear decay to zero at the end of the budget (BERT §A.2). The
    warmup runs over warmup_steps (with only a step budget this is HF's
    get_linear_schedule_with_warmup) or, where a warmup_ratio is left unresolved (pretraining,
    whose budget may be FLOPs or seconds: resolve_budget turns it into steps for fine-tuning),
    over that share of the budget."""
    progress = budget_progress(state, cfg)
    if cfg.warmup_ratio > 0:
        if progress < cfg.warmup_ratio:
            return cfg.lr * progress / cfg.warmup_ratio
        warmed = cfg.warmup_ratio
    elif state.step < cfg.warmup_steps:
        return cfg.lr * state.step / cfg.warmup_steps
    else:
        warmed = state.warmup_progress  # the budget spent when warmup ended
    return cfg.lr * max(0.0, 1.0 - progress) / max(1e-12, 1.0 - warmed)
