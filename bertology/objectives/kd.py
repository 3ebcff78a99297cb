"""Task-specific knowledge distillation: a frozen fine-tuned teacher's predictions train a student.

loss = α·T²·KL(softmax(z_t/T) ‖ softmax(z_s/T)) + (1 − α)·CE(z_s, gold)          (Hinton et al.,
2015; DistilBERT, Sanh et al., 2019). T² keeps the soft term's gradients on the scale of the
hard term's as T changes (Hinton et al., §2). TinyBERT's intermediate terms (Jiao et al., 2020)
are added with their own weights: the MSE between student hidden states (projected by a learned
W_h where the widths differ) and the mapped teacher's (Eq. 8), and between attention maps (Eq. 7).
One W_h serves every layer, the embeddings included (TinyBERT learns a separate W_e for those).

What the training loop trains is a DistillationModel: the student and the projection. The teacher
stays outside it (in the loss's closure), so the optimizer, gradient clipping and checkpoints
never see it; it runs in eval mode under torch.no_grad.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertology.config.distill_config import KDConfig
from bertology.data.encode import IGNORE, build_collate
from bertology.models.task_model import INPUT_KEYS, TaskModel
from bertology.training.flops import encoder_flops
from bertology.training.objective import Objective


class DistillationModel(nn.Module):
    """The trainable side of distillation: the student and TinyBERT's W_h (identity when the
    student is as wide as the teacher)."""

    def __init__(self, student: TaskModel, teacher_hidden: int):
        super().__init__()
        self.student = student
        width = student.model.config.hidden_size
        self.projection = nn.Identity() if width == teacher_hidden \
            else nn.Linear(width, teacher_hidden)

    @property
    def config(self):
        """The student's config (the loop reads hidden_size to pick a precision)."""
        return self.student.model.config


def compute_kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                    labels: torch.Tensor, temperature: float, alpha: float
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Rows of logits (n, labels) and gold labels (n,): α·T²·KL + (1 − α)·CE, averaged over rows."""
    student_log_p = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher_log_p = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    # KL(teacher ‖ student) = Σ p_t (log p_t − log p_s), summed over labels, mean over rows
    kl = F.kl_div(student_log_p, teacher_log_p, log_target=True, reduction="batchmean")
    soft = temperature ** 2 * kl
    hard = F.cross_entropy(student_logits.float(), labels)
    loss = alpha * soft + (1.0 - alpha) * hard
    return loss, {"kd_loss": soft.detach(), "ce_loss": hard.detach()}


def compute_hidden_mse(student_hidden: tuple[torch.Tensor, ...],
                       teacher_hidden: tuple[torch.Tensor, ...], layer_map: list[int],
                       projection: nn.Module, mask: torch.Tensor) -> torch.Tensor:
    """Σ over student layers i of MSE(W_h·h_s[i], h_t[layer_map[i]]) at real tokens (TinyBERT
    sums its layer losses; padding is left out). Hidden states: (batch, seq, hidden) each."""
    real = mask.bool()  # (batch, seq)
    total = student_hidden[0].new_zeros((), dtype=torch.float32)
    for student_layer, teacher_layer in enumerate(layer_map):
        projected = projection(student_hidden[student_layer])[real].float()  # (tokens, H_t)
        target = teacher_hidden[teacher_layer][real].float()
        total = total + F.mse_loss(projected, target)
    return total


def compute_attention_mse(student_attn: tuple[torch.Tensor, ...],
                          teacher_attn: tuple[torch.Tensor, ...], layer_map: list[int],
                          mask: torch.Tensor, reaches: list[int | None] | None = None
                          ) -> torch.Tensor:
    """Σ over student layers m ≥ 1 of the MSE between its attention probabilities and those of
    teacher layer layer_map[m], averaged over heads and real (query, key) pairs. TinyBERT
    matches pre-softmax scores; transformers returns probabilities (MiniLM matches those).
    reaches[m - 1]: the window the pair shares (models/windows.matched_reaches; None: both
    global): only keys within it of the query count, since beyond a local layer's window its
    map is zero by construction and the squared error there would measure the window, not the
    head. Attentions: (batch, heads, q, k) each; attentions[m - 1] is layer m's."""
    real = mask.bool()
    pairs = (real[:, :, None] & real[:, None, :]).unsqueeze(1)  # (batch, 1, q, k)
    positions = torch.arange(mask.shape[1], device=mask.device)
    offset = (positions[:, None] - positions[None, :]).abs()  # (q, k): |i − j|
    total = student_attn[0].new_zeros((), dtype=torch.float32)
    for student_layer, teacher_layer in enumerate(layer_map[1:], start=1):
        diff = (student_attn[student_layer - 1].float()
                - teacher_attn[teacher_layer - 1].float()) ** 2  # (batch, heads, q, k)
        reach = reaches[student_layer - 1] if reaches is not None else None
        seen = pairs if reach is None else pairs & (offset <= reach)  # (batch, 1, q, k)
        total = total + diff[seen.expand_as(diff)].mean()
    return total


def run_models(model: DistillationModel, teacher: TaskModel, batch: dict, kd: KDConfig):
    """(student outputs, teacher outputs), with hidden states / attentions where a loss reads
    them. The teacher runs in eval mode (no dropout) and without a graph."""
    inputs = {k: batch[k] for k in INPUT_KEYS if k in batch}
    extras = {"output_hidden_states": kd.hidden_weight > 0,
              "output_attentions": kd.attention_weight > 0}
    teacher.eval()
    with torch.no_grad():
        teacher_out = teacher.model(**inputs, **extras)
    return model.student.model(**inputs, **extras), teacher_out


def distill_loss(model: DistillationModel, teacher: TaskModel, batch: dict, kd: KDConfig,
                 layer_map: list[int], reaches: list[int | None] | None = None
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    student_out, teacher_out = run_models(model, teacher, batch, kd)
    labels = batch["labels"]
    scored = labels != IGNORE  # (batch,) or, for tagging, (batch, seq): first sub-tokens
    student_logits = student_out.logits[scored]  # (n, labels)
    loss, logs = compute_kd_loss(student_logits, teacher_out.logits[scored], labels[scored],
                                 kd.temperature, kd.alpha)
    if kd.hidden_weight > 0:
        hidden = compute_hidden_mse(student_out.hidden_states, teacher_out.hidden_states,
                                    layer_map, model.projection, batch["attention_mask"])
        loss = loss + kd.hidden_weight * hidden
        logs["hidden_loss"] = hidden.detach()
    if kd.attention_weight > 0:
        attention = compute_attention_mse(student_out.attentions, teacher_out.attentions,
                                          layer_map, batch["attention_mask"], reaches)
        loss = loss + kd.attention_weight * attention
        logs["attention_loss"] = attention.detach()
    correct = (student_logits.argmax(dim=-1) == labels[scored]).sum()
    return loss, {**logs, "loss": loss.detach(), "correct": correct, "count": scored.sum()}


def distill_metrics(sums: dict[str, float], batches: int) -> dict[str, float]:
    """Held-out losses and the student's accuracy during training."""
    metrics = {key: sums[key] / max(1, batches) for key in sums if key.endswith("loss")}
    metrics["accuracy"] = sums["correct"] / max(1.0, sums["count"])
    return metrics


def build(kd: KDConfig, teacher: TaskModel, layer_map: list[int], pad_token_id: int,
          reaches: list[int | None] | None = None) -> Objective:
    """The objective the training loop runs; the teacher is moved to the batch's device on
    first use (the loop's accelerator places only the DistillationModel). reaches: the window
    each matched pair of attention maps shares (compute_attention_mse)."""

    def loss(model: DistillationModel, batch: dict):
        device = batch["input_ids"].device
        if next(teacher.parameters()).device != device:
            teacher.to(device)
        return distill_loss(model, teacher, batch, kd, layer_map, reaches)

    def flops(model: DistillationModel, batch: dict) -> float:
        """Student forward + backward, plus the teacher's forward (a third of its training)."""
        lengths = batch["attention_mask"].sum(dim=1)
        return (encoder_flops(model.config, lengths)
                + encoder_flops(teacher.model.config, lengths) / 3)

    return Objective("kd", None, build_collate(pad_token_id), loss, distill_metrics, flops)
