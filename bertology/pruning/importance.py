"""Head importance: one score per attention head, a (layers, heads) numpy array in the
model's original head numbering, higher = more important. Heads that prune_heads removed are
NaN (nothing left to score), so ranking code should skip NaN.

- gradient (Michel et al., 2019, §4.1): I_h = E_x |∂L(x)/∂ξ_h|, ξ_h the head's gate at 1,
  the absolute value taken per example x (not per batch, where signs would cancel).
- attention confidence / entropy (Voita et al., 2019, §4.2): how peaked a head's attention is;
  confidence leaves out the end-of-sentence token ([SEP] / </s>), as the paper defines it.
- ablation: the metric lost when the head alone is gated off - the slow, direct reference.
- random: the baseline order.

loss_fn(model, batch) -> scalar tensor and metric_fn(model, batch) -> float (higher = better;
give -loss for a loss) run the model on one batch, a dict of tensors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from bertology.data.encode import IGNORE
from bertology.errors import require
from bertology.models.task_model import INPUT_KEYS
from bertology.models.windows import fits_window, fitting, log_fitting, narrowest_reach
from bertology.pruning.heads import HeadGates, build_gates, encoder_layers, kept_heads

log = logging.getLogger(__name__)

Batch = dict[str, torch.Tensor]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]
MetricFn = Callable[[nn.Module, Batch], float]


@contextmanager
def evaluating(model: nn.Module):
    """Dropout off while scoring (Michel et al. score the trained model as it is used)."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@contextmanager
def eager_attention(model: nn.Module):
    """Attention weights exist only with eager attention (SDPA returns none)."""
    previous = model.config._attn_implementation
    if previous != "eager":
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)


def mark_removed(model: nn.Module, scores: np.ndarray) -> np.ndarray:
    """NaN for heads no longer in the model."""
    scores = scores.astype(np.float64, copy=True)
    for layer, heads in enumerate(kept_heads(model)):
        removed = [h for h in range(scores.shape[1]) if h not in heads]
        scores[layer, removed] = np.nan
    return scores


def compute_layer_normalized(scores: np.ndarray) -> np.ndarray:
    """Each layer's scores divided by their L2 norm (Michel et al., 2019, §4.1, after
    Molchanov et al., 2017): comparable across layers, so heads can be pruned globally."""
    norms = np.sqrt(np.nansum(scores**2, axis=1, keepdims=True))
    return scores / np.maximum(norms, 1e-20)


def compute_gate_gradients(model: nn.Module, batch: Batch, loss_fn: LossFn,
                           gates: torch.Tensor | None = None) -> torch.Tensor:
    """∂L/∂ξ on one batch, signed, (layers, heads); ξ = `gates` (ones by default)."""
    gates = build_gates(model) if gates is None else gates.detach().clone()
    gates.requires_grad_(True)
    with HeadGates(model, gates):
        loss = loss_fn(model, batch)
    (grad,) = torch.autograd.grad(loss, gates)  # the gates only: no parameter gradients
    return grad


def split_examples(batch: Batch) -> Iterable[Batch]:
    """The batch's examples one by one, each cut to its own length (batches are right-padded,
    so the padding columns are the tail): the same loss as in the batch, less work. A tagging
    example with no scored token (every label IGNORE, cross-entropy's ignore index) is left
    out: its loss is 0/0."""
    lengths = batch["attention_mask"].sum(dim=1).tolist()  # (batch,)
    width = batch["input_ids"].shape[1]
    for i, length in enumerate(lengths):
        example = {key: value[i: i + 1, :length] if value.dim() > 1 and value.shape[1] == width
                   else value[i: i + 1] for key, value in batch.items()}
        labels = example.get("labels")
        if labels is None or labels.dim() == 1 or bool((labels != IGNORE).any()):
            yield example


def compute_gradient_importance(model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn,
                                normalize: bool = True, gates: torch.Tensor | None = None
                                ) -> np.ndarray:
    """Michel et al.'s I_h = E_x |∂L(x)/∂ξ_h|: one forward + backward per example x.

    The absolute value is per example, as the paper's expectation has it: taken per batch,
    examples whose gradients disagree in sign cancel, and the ranking changes with them (the
    numbers: docs/probing.md, "Analyses and their papers"). normalize:
    divide each layer by its L2 norm, as Michel et al. do. gates: score a partly masked model
    (iterative pruning), default all heads on."""
    total, count = None, 0
    with evaluating(model):
        for batch in tqdm(batches, desc="gradient importance", unit="batch", leave=False):
            for example in split_examples(batch):
                grad = compute_gate_gradients(model, example, loss_fn, gates).abs()
                total = grad if total is None else total + grad
                count += 1
    require(count > 0, "head importance needs at least one example")
    scores = (total / count).double().cpu().numpy()
    return mark_removed(model, compute_layer_normalized(scores) if normalize else scores)


def compute_mean_metric(model: nn.Module, batches: list[Batch], metric_fn: MetricFn,
                        gates: torch.Tensor) -> float:
    with HeadGates(model, gates):
        return float(np.mean([float(metric_fn(model, batch)) for batch in batches]))


def compute_ablation_importance(model: nn.Module, batches: Iterable[Batch],
                                metric_fn: MetricFn, gates: torch.Tensor | None = None
                                ) -> np.ndarray:
    """Leave one head out: metric(all heads) - metric(all but h), per head; the metric is the
    mean of metric_fn over batches. 1 + heads passes over the batches. gates: the starting
    mask (a head already gated off scores 0), default all heads on."""
    batches = list(batches)
    gates = build_gates(model) if gates is None else gates.detach().clone()
    scores = np.zeros(tuple(gates.shape))
    heads = [(layer, h) for layer, kept in enumerate(kept_heads(model)) for h in kept]
    with evaluating(model), torch.no_grad():
        base = compute_mean_metric(model, batches, metric_fn, gates)
        for layer, head in tqdm(heads, desc="ablation importance", unit="head", leave=False):
            ablated = gates.clone()
            ablated[layer, head] = 0.0
            scores[layer, head] = base - compute_mean_metric(model, batches, metric_fn, ablated)
    return mark_removed(model, scores)


def compute_max_weight(weights: torch.Tensor, is_end: torch.Tensor) -> torch.Tensor:
    """Voita et al. (2019) §4.2: the largest weight "excluding the end of sentence symbol":
    the sink heads that park their attention on [SEP] would otherwise rank most confident."""
    keep = ~is_end[:, None, None, :]  # (batch, 1, 1, k)
    return weights.masked_fill(~keep, 0.0).amax(dim=-1)  # (batch, heads, q)


def compute_negative_entropy(weights: torch.Tensor, is_end: torch.Tensor) -> torch.Tensor:
    return -torch.special.entr(weights).sum(dim=-1)  # (batch, heads, q), nats; 0 log 0 = 0


# score -> per query token, from attention weights (batch, heads, q, k) and the (batch, k)
# end-of-sentence keys
ATTENTION_SCORES = {
    "confidence": compute_max_weight,  # Voita et al.'s "confidence"
    "entropy": compute_negative_entropy,  # negated, so that focused heads score higher
}


def compute_entropy_importance(model: nn.Module, batches: Iterable[Batch],
                               score: str = "confidence", end_token_id: int | None = None
                               ) -> np.ndarray:
    """Voita et al. (2019): a head's confidence is its maximum attention weight, leaving out
    the end-of-sentence key (`end_token_id`: [SEP], </s>), averaged over the (non-padding)
    query tokens of the batches; score="entropy" gives minus the mean attention entropy
    instead. Runs with eager attention, then restores the model's own. With local-window
    layers (ModernBERT) only the sequences every layer sees whole are read, and one line says
    so (models/windows.py)."""
    require(score in ATTENTION_SCORES,
            f"unknown attention score {score!r}; valid: {', '.join(ATTENTION_SCORES)}")
    heads = [torch.tensor(h, dtype=torch.long) for h in kept_heads(model)]
    totals = torch.zeros(len(heads), model.config.num_attention_heads, dtype=torch.float64)
    tokens, lengths, reach = 0.0, [], narrowest_reach(model.config)
    with evaluating(model), eager_attention(model), torch.no_grad():
        for batch in tqdm(batches, desc="attention importance", unit="batch", leave=False):
            inputs = {k: batch[k] for k in INPUT_KEYS if k in batch}
            attentions = model(**inputs, output_attentions=True).attentions
            require(len(attentions) == len(heads), "the model returned no attention weights")
            mask = batch.get("attention_mask", torch.ones_like(batch["input_ids"]))
            counts = mask.sum(dim=1).tolist()  # (batch,) real tokens per sequence
            lengths += counts
            whole = torch.tensor([fits_window(n, reach) for n in counts], dtype=torch.float64,
                                 device=mask.device)
            mask = mask.to(torch.float64)[:, None, :] * whole[:, None, None]  # (batch, 1, q)
            is_end = (batch["input_ids"] == end_token_id if end_token_id is not None
                      else torch.zeros_like(batch["input_ids"], dtype=torch.bool))  # (batch, k)
            for layer, weights in enumerate(attentions):  # (batch, heads, q, k)
                per_query = ATTENTION_SCORES[score](weights.double(), is_end)  # (batch, heads, q)
                totals[layer, heads[layer]] += (per_query * mask).sum(dim=(0, 2)).cpu()
            tokens += float(mask.sum())
    keep, line = fitting(model.config, lengths, "sequences", f"attention importance ({score})")
    log_fitting(log, keep, line)
    require(keep != [], f"prune.scores={score} reads attention maps, and no sequence lies "
            f"inside the ±{reach}-token window of the model's local layers; drop it from "
            "prune.scores (gradient does not read them) or use shorter examples")
    require(tokens > 0, "head importance needs at least one token")
    return mark_removed(model, (totals / tokens).numpy())


def compute_random_importance(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Uniform scores in [0, 1): the random pruning-order baseline."""
    return np.random.default_rng(seed).random(shape)


def importance_shape(model: nn.Module) -> tuple[int, int]:
    """The (layers, heads) shape every importance array of `model` has."""
    return len(encoder_layers(model)), model.config.num_attention_heads
