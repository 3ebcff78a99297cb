"""Is attention to the special tokens doing anything? (Clark et al., 2019, §3.2.)

Clark et al. find heads putting most of their attention on [SEP] in BERT's middle layers, yet
the gradient of the loss with respect to those attention weights is small there: attending to
[SEP] looks like a no-op, a place to put attention when a head's pattern does not apply. For
each eval example and head, this compares two shares over the example's query tokens:
- attention share: the attention mass on [CLS] and [SEP] (the sequence's first and last real
  tokens), the mean over queries of Σ_{k special} α_qk;
- gradient share: Σ_{k special} |∂L/∂α_qk| / Σ_k |∂L/∂α_qk|, the part of the loss's
  sensitivity to the head's weights that sits on those keys, meaned over queries.
A no-op sink has a high attention share and a low gradient share. Deviation: Clark et al.
take the masked-LM loss of pretrained BERT on [SEP] alone; here the loss is the fine-tuned
model's task loss (the prune pipeline's model), and [CLS] and [SEP] are pooled, since which of
them a model uses as its sink differs (all-MiniLM-L6-v2 attends to [CLS] far more).

With a twin (the random-init twin fine-tuned the same way: prune's twin_name_or_path), the same
shares are measured on it, on the same examples, under prune/twin/special/ (and its accuracy
under prune/twin/original/): a fine-tuned random-init MiniLM shows the gap too, so only the
part pretraining adds is a claim about the model (special_token_gradients).
"""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from bertology.data.encode import build_collate
from bertology.errors import require
from bertology.models.task_model import INPUT_KEYS, TaskModel
from bertology.models.windows import fitting, log_fitting
from bertology.pruning.importance import eager_attention, evaluating
from bertology.pruning.prune_context import PruneContext
from bertology.run.replicates import compute_item_ids, compute_mean_replicates

log = logging.getLogger(__name__)


def special_key_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(batch, k) 1 at each sequence's first and last real token ([CLS], [SEP])."""
    lengths = attention_mask.sum(dim=1)  # (batch,)
    special = torch.zeros_like(attention_mask, dtype=torch.float64)
    rows = torch.arange(len(lengths))
    special[rows, 0] = 1.0
    special[rows, lengths - 1] = 1.0
    return special


def compute_shares(weights: torch.Tensor, grads: torch.Tensor, attention_mask: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example and head, the attention and gradient shares on the special keys, meaned
    over real query tokens: (batch, heads) each."""
    special = special_key_mask(attention_mask)[:, None, None, :]  # (batch, 1, 1, k)
    queries = attention_mask.to(torch.float64)[:, None, :]  # (batch, 1, q)
    attention = (weights.double() * special).sum(dim=-1)  # (batch, heads, q)
    magnitude = grads.double().abs()  # (batch, heads, q, k)
    gradient = (magnitude * special).sum(-1) / magnitude.sum(-1).clamp(min=1e-30)
    count = queries.sum(dim=-1)  # (batch, 1)
    return (attention * queries).sum(-1) / count, (gradient * queries).sum(-1) / count


def collect_shares(ctx: PruneContext, task_model: TaskModel) -> tuple[np.ndarray, np.ndarray]:
    """(examples, layers, heads) attention and gradient shares of a task model over the eval
    set. The loss is summed over the batch: an example's attention weights reach only its own
    loss, so each gets the gradient of its own loss."""
    require(task_model.kind == "classification", "prune.experiments=[attention_gradients] "
            f"needs a classification task; task={ctx.config.task.name} is {task_model.kind}")
    model = task_model.model
    collate = build_collate(ctx.tokenizer.pad_token_id)
    size = ctx.config.prune.batch_size
    attention, gradient = [], []
    with evaluating(model), eager_attention(model):
        for start in tqdm(range(0, len(ctx.eval_features), size), desc="attention gradients",
                          unit="batch", leave=False):
            batch = collate(ctx.eval_features[start: start + size])
            inputs = {k: batch[k] for k in INPUT_KEYS if k in batch}
            outputs = model(**inputs, output_attentions=True)
            for weights in outputs.attentions:  # (batch, heads, q, k), in the graph
                weights.retain_grad()
            F.cross_entropy(outputs.logits.float(), batch["labels"], reduction="sum").backward()
            shares = [compute_shares(w.detach(), w.grad, batch["attention_mask"])
                      for w in outputs.attentions]
            attention.append(torch.stack([a for a, _ in shares], dim=1).numpy())
            gradient.append(torch.stack([g for _, g in shares], dim=1).numpy())
            model.zero_grad(set_to_none=True)
    return np.concatenate(attention), np.concatenate(gradient)


def run_attention_gradients(ctx: PruneContext) -> dict[str, float]:
    metrics = measure_shares(ctx, ctx.model, "prune/special")
    if ctx.twin is not None and metrics:
        metrics.update(measure_shares(ctx, ctx.twin, "prune/twin/special"))
        scores = ctx.evaluate(ctx.twin, record="prune/twin/original")
        metrics.update({f"prune/twin/original/{k}": v for k, v in scores.items()})
        log.info("the twin: %s %.4f", ctx.metric, scores[ctx.metric])
    return metrics


def measure_shares(ctx: PruneContext, task_model: TaskModel, prefix: str) -> dict[str, float]:
    """The shares of one task model, meaned over examples, layers and heads (and per layer),
    as <prefix>/attention_share, gradient_share, share_gap; their replicates into ctx."""
    attention, gradient = collect_shares(ctx, task_model)  # (examples, layers, heads)
    # a local-window layer (ModernBERT) cannot reach [CLS] from far along a long example
    lengths = [len(f["input_ids"]) for f in ctx.eval_features]
    keep, line = fitting(task_model.model.config, lengths, "examples", "special-token gradients")
    log_fitting(log, keep, line)
    if keep is not None:
        if not keep:
            return {}
        attention, gradient = attention[keep], gradient[keep]  # (kept, layers, heads) each
    if len(ctx.eval_features) == len(ctx.data.eval):  # one feature an example: their ids
        ids = compute_item_ids(ctx.data.eval)
        ctx.special_items = ids if keep is None else [ids[i] for i in keep]
    gap = attention - gradient
    metrics = {f"{prefix}/attention_share": float(attention.mean()),
               f"{prefix}/gradient_share": float(gradient.mean()),
               f"{prefix}/share_gap": float(gap.mean())}
    replicates = {f"{prefix}/attention_share": attention.mean(axis=(1, 2)),
                  f"{prefix}/gradient_share": gradient.mean(axis=(1, 2)),
                  f"{prefix}/share_gap": gap.mean(axis=(1, 2))}
    for layer in range(attention.shape[1]):
        for name, values in (("attention_share", attention), ("gradient_share", gradient)):
            key = f"{prefix}/layer_{layer + 1:02d}/{name}"
            metrics[key] = float(values[:, layer].mean())
            replicates[key] = values[:, layer].mean(axis=1)
    ctx.replicates.update({k: compute_mean_replicates(v) for k, v in replicates.items()})
    log.info("%s: %.3f of attention, %.3f of the loss gradient on attention on [CLS]/[SEP]",
             prefix, metrics[f"{prefix}/attention_share"], metrics[f"{prefix}/gradient_share"])
    return metrics
