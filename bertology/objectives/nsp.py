"""MLM plus a sentence-pair task on the pooled [CLS] output.

NSP (Devlin et al., 2019, §3.1 Task #2): is segment B the text that follows A, or a segment of
another document? SOP (ALBERT, Lan et al., 2020, §4.2): are two consecutive segments in order
or swapped? ALBERT argues NSP is mostly solved by topic cues, while SOP needs coherence. The
pairs and labels are made by data/formats.py; the head is BERT's 2-way seq_relationship.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from bertology.config.groups import ObjectiveConfig
from bertology.models.structure import pair_head_of
from bertology.objectives import mlm
from bertology.training.objective import Objective


def _build(cfg: ObjectiveConfig, tokenizer: PreTrainedTokenizerBase, family: str, seed: int,
           task: str) -> Objective:
    spec = mlm.MaskingSpec.build(cfg, tokenizer, seed)
    pad_id = tokenizer.pad_token_id

    def collate(examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = mlm.pad_batch(examples, spec, pad_id)
        batch["sentence_label"] = torch.tensor([e["sentence_label"] for e in examples])
        return batch

    def loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        encoded, mlm_loss, logs = mlm.encode_and_mlm(model, family, batch)
        logits = pair_head_of(model, family)(encoded.pooler_output)  # (batch, 2)
        pair_loss = F.cross_entropy(logits.float(), batch["sentence_label"])
        logs[f"{task}_loss"] = pair_loss.detach()
        if model.training:  # the counts are the eval's (mlm.py)
            return mlm_loss + pair_loss, logs
        correct = (logits.argmax(-1) == batch["sentence_label"]).float()  # (batch,)
        logs[f"{task}_correct"] = correct.sum()
        logs[f"{task}_count"] = torch.tensor(len(logits))
        logs[f"seq_{task}_correct"], logs[f"seq_{task}_count"] = correct, torch.ones_like(correct)
        return mlm_loss + pair_loss, logs

    def metrics(sums: dict[str, float], batches: int) -> dict[str, float]:
        out = mlm.mlm_metrics(sums, batches)
        out[f"{task}_loss"] = sums[f"{task}_loss"] / batches
        out[f"{task}_accuracy"] = sums[f"{task}_correct"] / max(1, sums[f"{task}_count"])
        return out

    items = {**mlm.MLM_ITEMS, f"{task}_accuracy": (f"seq_{task}_correct", f"seq_{task}_count")}
    return Objective(f"mlm_{task}", task, collate, loss, metrics, item_ratios=items)


def build_nsp(cfg, tokenizer, family, seed) -> Objective:
    return _build(cfg, tokenizer, family, seed, "nsp")


def build_sop(cfg, tokenizer, family, seed) -> Objective:
    return _build(cfg, tokenizer, family, seed, "sop")
