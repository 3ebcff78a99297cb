"""What every prune experiment reads: the fine-tuned model, its task data, the examples heads
are scored on, the batch latency is timed on, and the unpruned model's scores.

Everything runs on the CPU in fp32: latency is a CPU measurement (int8 kernels are CPU ones),
and the metric of a pruned model is compared with the unpruned one's under the same numerics.
"""

from __future__ import annotations

import copy
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from bertology.config.groups import HeadConfig, TaskConfig
from bertology.config.prune_config import PruneConfig
from bertology.config.prune_settings import PRUNE_SCORES
from bertology.config.rows import load_function
from bertology.data.encode import build_collate, encode
from bertology.data.tasks import TaskData
from bertology.evaluation.predictions import compute_score_replicates, evaluate_task
from bertology.models.build import count_parameters
from bertology.models.latency import compare_latency
from bertology.models.task_model import TaskModel
from bertology.objectives.task import task_loss
from bertology.pruning.heads import HeadGates, kept_heads
from bertology.pruning.importance import (
    compute_ablation_importance,
    compute_entropy_importance,
    compute_gradient_importance,
    compute_random_importance,
    importance_shape,
    mark_removed,
)
from bertology.pruning.quantize import linear_weight_bytes
from bertology.run.figures import GREY, reference, save_figure

log = logging.getLogger(__name__)


@dataclass
class Curve:
    """One pruning order: per step the fraction and count of heads masked, the metric, and
    the gates (layers, heads) after the step."""

    score: str
    seed: int | None
    fractions: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    gates: list[torch.Tensor] = field(default_factory=list)
    first_scores: np.ndarray | None = None  # the importance of the whole model, step 0


@dataclass
class PruneContext:
    config: PruneConfig
    out_dir: Path
    model: TaskModel  # the fine-tuned model, CPU, eval mode; experiments prune copies of it
    tokenizer: PreTrainedTokenizerBase
    data: TaskData
    model_path: str
    eval_features: list[dict]
    importance_batches: list[dict]
    latency_batch: dict[str, torch.Tensor]
    base: dict[str, float] = field(default_factory=dict)  # the unpruned model's eval scores
    curves: dict[tuple[str, int | None], Curve] = field(default_factory=dict)
    pruned: TaskModel | None = None  # removal's model, saved to model/
    twin: TaskModel | None = None  # attention_gradients: the random-init twin, fine-tuned alike
    student_path: str | None = None  # the matrix's distilled student
    # metric key -> bootstrap replicates over eval examples (run/replicates.py), of every
    # evaluation recorded under a name; written to replicates/prune.csv
    replicates: dict[str, np.ndarray] = field(default_factory=dict)
    # the eval examples the special-token shares read, in their replicates' order (item ids:
    # compute_item_ids); None where unknown (features that are not one per example)
    special_items: list[str] | None = None

    @property
    def metric(self) -> str:
        return self.config.task.metric

    @property
    def base_metric(self) -> float:
        return self.base[self.metric]

    @property
    def total_heads(self) -> int:
        return sum(len(heads) for heads in kept_heads(self.model.model))

    def evaluate(self, model: TaskModel | None = None, gates: torch.Tensor | None = None,
                 record: str | None = None) -> dict[str, float]:
        """Task scores on the whole eval set, with `gates` applied to `model`'s heads; with
        `record`, the scores' item replicates are kept as <record>/<metric>."""
        model = self.model if model is None else model
        if gates is not None:
            with HeadGates(model.model, gates):
                return self.evaluate(model, record=record)
        task, labels = self.config.task, self.data.labels
        scores, rows = evaluate_task(model, task, self.data.eval, self.eval_features, labels,
                                     self.tokenizer.pad_token_id)
        if record is not None:
            self.replicates.update({f"{record}/{k}": v for k, v in compute_score_replicates(
                task.kind, rows, labels).items()})
        return scores

    def compare_latency(self, models: dict[str, nn.Module]) -> dict[str, float]:
        """Median CPU milliseconds per forward pass of each model on the latency batch, timed
        in interleaved rounds (latency.compare_latency)."""
        timings = compare_latency(models, self.latency_batch)
        return {name: timing["median_ms"] for name, timing in timings.items()}

    def copy_model(self) -> TaskModel:
        return copy.deepcopy(self.model)

    def score_heads(self, score: str, gates: torch.Tensor, seed: int | None,
                    model: TaskModel | None = None) -> np.ndarray:
        """(layers, heads) importance by `score` of `model` with `gates` applied (masked heads
        still get a score; the schedule skips them)."""
        model = self.model if model is None else model
        return load_function(PRUNE_SCORES[score].run)(self, model, gates, seed)


def task_loss_fn(kind: str):
    """loss_fn(hf_model, batch) for the importance functions: the fine-tuning loss."""
    return lambda hf_model, batch: task_loss(TaskModel(hf_model, kind, HeadConfig()), batch)[0]


# The scores, each config/prune_settings.py's PRUNE_SCORES row: (ctx, model, gates, seed) ->
# (layers, heads) importance, higher = keep.


def score_gradient(ctx: PruneContext, model: TaskModel, gates, seed) -> np.ndarray:
    """Michel et al. (2019) §4.1: the loss's sensitivity to each head's gate."""
    return compute_gradient_importance(model.model, ctx.importance_batches,
                                       task_loss_fn(model.kind), gates=gates)


def score_by_attention(ctx: PruneContext, model: TaskModel, gates, name: str) -> np.ndarray:
    with HeadGates(model.model, gates):
        return compute_entropy_importance(model.model, ctx.importance_batches, name,
                                          end_token_id=ctx.tokenizer.sep_token_id)


def score_confidence(ctx: PruneContext, model: TaskModel, gates, seed) -> np.ndarray:
    """Voita et al. (2019): a head's mean maximum attention weight."""
    return score_by_attention(ctx, model, gates, "confidence")


def score_entropy(ctx: PruneContext, model: TaskModel, gates, seed) -> np.ndarray:
    """Minus the mean attention entropy, so that focused heads score higher."""
    return score_by_attention(ctx, model, gates, "entropy")


def score_ablation(ctx: PruneContext, model: TaskModel, gates, seed) -> np.ndarray:
    """The metric is minus the loss on the scoring examples."""
    loss_fn = task_loss_fn(model.kind)
    return compute_ablation_importance(model.model, ctx.importance_batches,
                                       lambda m, batch: -float(loss_fn(m, batch)), gates=gates)


def score_random(ctx: PruneContext, model: TaskModel, gates, seed) -> np.ndarray:
    return mark_removed(model.model,
                        compute_random_importance(importance_shape(model.model), seed or 0))


def build_importance_batches(examples: list[dict], tokenizer, task: TaskConfig, count: int,
                             batch_size: int, seed: int) -> list[dict]:
    """Up to `count` training examples (a seeded sample), batched: heads are scored on
    training data, so the eval set only ever measures."""
    chosen = random.Random(seed).sample(list(examples), min(count, len(examples)))
    features = encode(chosen, tokenizer, task)
    collate = build_collate(tokenizer.pad_token_id)
    return [collate(features[i: i + batch_size])
            for i in range(0, len(features), batch_size)]


def model_sizes(model: nn.Module) -> dict[str, float]:
    """Sizes of a model for the tables: parameters and linear-weight megabytes."""
    return {"parameters": float(count_parameters(model)),
            "linear_weight_mb": linear_weight_bytes(model) / 2**20}


def save_curve_plot(ctx: PruneContext, figure, axis, xlabel: str, title: str, name: str,
                    caption: str = "") -> None:
    """What every pruning curve shows: the loss budget under the original metric, labelled
    axes, the task in the title (and what a band is, below it); then plots/<name>.png|pdf."""
    reference(axis.axhline(ctx.base_metric - ctx.config.prune.max_loss, color=GREY,
                           linestyle="--", label=f"original − {ctx.config.prune.max_loss:g}"))
    axis.set_xlabel(xlabel)
    axis.set_ylabel(f"eval {ctx.metric}")
    axis.set_title(f"{title}: {ctx.config.task.name}" + (f"\n{caption}" if caption else ""))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save_figure(figure, ctx.out_dir, name)
