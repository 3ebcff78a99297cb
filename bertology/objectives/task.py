"""The fine-tuning objective: cross-entropy for classification and tagging; for extractive QA
the mean of the start and end cross-entropies over positions (BERT §4.2). Plugs into the one
training loop like a pretraining objective."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bertology.data.encode import IGNORE, build_collate
from bertology.models.task_model import TaskModel
from bertology.training.flops import encoder_flops
from bertology.training.objective import Objective


def task_loss(model: TaskModel, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    logits = model(batch)
    if model.kind == "qa":
        return qa_loss(logits, batch)
    labels = batch["labels"]
    loss = F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE)
    scored = labels != IGNORE
    correct = ((logits.argmax(dim=-1) == labels) & scored).sum()
    return loss, {"task_loss": loss.detach(), "correct": correct, "count": scored.sum()}


def qa_loss(logits: torch.Tensor, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    # Padding may not be picked as a start or an end.
    padding = batch["attention_mask"] == 0  # (batch, seq)
    logits = logits.float().masked_fill(padding.unsqueeze(-1), torch.finfo(torch.float32).min)
    start, end = logits.unbind(dim=-1)  # (batch, seq) each
    loss = (F.cross_entropy(start, batch["start_positions"])
            + F.cross_entropy(end, batch["end_positions"])) / 2
    correct = ((start.argmax(-1) == batch["start_positions"])
               & (end.argmax(-1) == batch["end_positions"])).sum()
    count = torch.tensor(len(start))
    return loss, {"task_loss": loss.detach(), "correct": correct, "count": count}


def task_metrics(sums: dict[str, float], batches: int) -> dict[str, float]:
    """Held-out loss and token/sequence (QA: exact span) accuracy during training; the task
    metrics (F1, EM, ...) come from full predictions at the end (pipelines/finetune.py)."""
    return {"loss": sums["task_loss"] / max(1, batches),
            "accuracy": sums["correct"] / max(1.0, sums["count"])}


def task_flops(model: TaskModel, batch: dict) -> float:
    """The encoder's training FLOPs (heads are negligible); a frozen encoder runs forward only,
    a third of the forward + backward count."""
    flops = encoder_flops(model.model.config, batch["attention_mask"].sum(dim=1))
    return flops / 3 if model.head_cfg.mode == "feature" else flops


def build(kind: str, pad_token_id: int) -> Objective:
    return Objective(f"task_{kind}", None, build_collate(pad_token_id), task_loss, task_metrics,
                     task_flops)
