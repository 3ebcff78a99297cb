"""Pruning schedules and their summaries: which heads to mask next, the area under a
fraction-pruned → metric curve, how much goes within a loss budget, and global magnitude
pruning of the encoder's linear weights.

Michel et al. (2019, §4.2) mask heads in order of increasing importance in steps of 10% of all
heads and read the metric after each step; HF's run_bertology.py (the reference implementation
of their procedure) re-scores the remaining heads with the current mask after every step.
Gordon et al. (2020, "Compressing BERT") prune the smallest-magnitude weights globally.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bertology.errors import require
from bertology.pruning.heads import encoder_layers


def compute_step_counts(total: int, step_fraction: float) -> list[int]:
    """Heads masked after each step, cumulative: round(k · step_fraction · total) for
    k = 1, 2, … while at least one head stays; repeats (small models) are dropped."""
    require(total > 1, f"a pruning schedule needs at least 2 heads; the model has {total}")
    counts: list[int] = []
    k = 1
    while (count := round(k * step_fraction * total)) < total:
        if count > (counts[-1] if counts else 0):
            counts.append(count)
        k += 1
    return counts


def select_heads_to_mask(scores: np.ndarray, gates: torch.Tensor, count: int
                         ) -> list[tuple[int, int]]:
    """The `count` lowest-scoring heads that are still on (gate 1, score not NaN), as
    (layer, head); ties go to the lower layer and head, so a schedule is deterministic."""
    on = (gates.detach().cpu().numpy() == 1.0) & ~np.isnan(scores)
    candidates = [(float(scores[layer, head]), int(layer), int(head))
                  for layer, head in zip(*np.nonzero(on))]
    require(count <= len(candidates),
            f"cannot mask {count} more heads: only {len(candidates)} are left")
    return [(layer, head) for _, layer, head in sorted(candidates)[:count]]


def compute_curve_area(fractions: list[float], values: list[float], upto: float) -> float:
    """Mean of the curve over [0, upto] by the trapezoid rule (linear between points, the
    curve cut at `upto`): in the metric's own units, so curves over the same range compare."""
    require(len(fractions) == len(values) and len(fractions) >= 2 and fractions[0] == 0.0,
            "a pruning curve needs points from fraction 0")
    require(0.0 < upto <= fractions[-1] + 1e-12,
            f"cannot take the area up to {upto}: the curve ends at {fractions[-1]}")
    xs = [x for x in fractions if x < upto] + [upto]
    ys = list(np.interp(xs, fractions, values))
    area = sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:]))
    return float(area / upto)


def compute_fraction_within_loss(fractions: list[float], values: list[float], base: float,
                                 max_loss: float) -> float:
    """The largest fraction pruned before the metric first falls more than `max_loss` below
    `base` (0 when the first step already does)."""
    within = 0.0
    for fraction, value in zip(fractions, values):
        if value < base - max_loss - 1e-12:
            break
        within = fraction
    return within


def encoder_linear_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weights of every nn.Linear inside the encoder layers (attention q/k/v/output and the
    feed-forward pair); embeddings, pooler and task head are left alone, as in Gordon et al."""
    return [module.weight for layer in encoder_layers(model) for module in layer.modules()
            if isinstance(module, nn.Linear) and module.weight.numel() > 0]


@torch.no_grad()
def prune_magnitude(model: nn.Module, sparsity: float) -> float:
    """Zero the `sparsity` share of the encoder's linear weights with the smallest |w|, one
    global threshold over all of them (unstructured). In place; returns the share zeroed."""
    require(0.0 <= sparsity < 1.0, f"magnitude sparsity {sparsity} must lie in [0, 1)")
    weights = encoder_linear_weights(model)
    require(bool(weights), "the model has no encoder linear weights to prune")
    magnitudes = torch.cat([w.detach().abs().flatten().float() for w in weights])
    k = int(round(sparsity * magnitudes.numel()))
    if k == 0:
        return 0.0
    threshold = torch.kthvalue(magnitudes, k).values
    zeroed = 0
    for weight in weights:
        small = weight.abs() <= threshold
        weight.masked_fill_(small, 0.0)
        zeroed += int(small.sum())
    return zeroed / magnitudes.numel()
