"""Per-family module paths: where the encoder and each head live inside a model.

Losses reach the heads directly so they can run the MLM head only where a loss is taken.
"""

from __future__ import annotations

from torch import nn


def encoder_of(model: nn.Module) -> nn.Module:
    """The bare encoder (BertModel, RobertaModel): `model.bert`, `model.roberta`, ..."""
    return getattr(model, model.base_model_prefix)


# family -> the MLM prediction head: transform + decoder, applied to (n, hidden) states.
MLM_HEADS = {
    "bert": lambda model: model.cls.predictions,
    "roberta": lambda model: model.lm_head,
    "spanbert": lambda model: model.cls.predictions,  # a BertForMaskedLM
}

# family -> the 2-way sentence-pair classifier on the pooled [CLS] output.
PAIR_HEADS = {
    "bert": lambda model: model.cls.seq_relationship,
}


def mlm_head_of(model: nn.Module, family: str) -> nn.Module:
    return MLM_HEADS[family](model)


def pair_head_of(model: nn.Module, family: str) -> nn.Module:
    return PAIR_HEADS[family](model)


def sbo_head_of(model: nn.Module) -> nn.Module:
    """SpanBERT's span-boundary head, attached by models/spanbert.attach_sbo_head."""
    return model.sbo_head
