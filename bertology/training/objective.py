"""What every pretraining objective provides to the training loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Objective:
    name: str
    pair_task: str | None  # "nsp" | "sop" | None: how the input format builds sentence pairs
    collate: Callable[[list[dict]], dict[str, torch.Tensor]]
    # loss(model, batch) -> (loss with grad, logs of detached scalars: losses and summed counts;
    # logs named seq_* are (batch,) per-sequence counts, for the eval's item replicates)
    loss: Callable[[torch.nn.Module, dict], tuple[torch.Tensor, dict[str, torch.Tensor]]]
    # metrics(summed eval logs, number of batches) -> {"mlm_accuracy": ..., ...}
    metrics: Callable[[dict[str, float], int], dict[str, float]]
    # flops(model, batch) -> training FLOPs of the batch; None: encoder + MLM (+ pair) head,
    # training/flops.masked_lm_flops. Objectives with other modules count them here.
    flops: Callable[[torch.nn.Module, dict], float] | None = None
    # eval metric -> (numerator, denominator) seq_* logs it is the pooled ratio of; the eval
    # writes bootstrap replicates of these over held-out sequences (run/replicates.py)
    item_ratios: dict[str, tuple[str, str]] = field(default_factory=dict)
    # eval metric -> the item_ratios whose mean it is (balanced accuracy: the mean of the two
    # class rates); its replicates are that mean taken resample by resample
    item_means: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # flops by ELECTRA's App. D (trainer.flops_convention=electra); None: masked-LM
    # objectives, training/flops.masked_lm_flops_app_d
    flops_app_d: Callable[[torch.nn.Module, dict], float] | None = None

    def __post_init__(self):
        # a misspelt part would silently drop the mean's replicates (and so its interval)
        unknown = {p for parts in self.item_means.values() for p in parts} - set(self.item_ratios)
        if unknown:
            raise ValueError(f"item_means of {self.name} name no item ratio: {sorted(unknown)}")
