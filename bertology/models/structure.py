"""Where the encoder and each head live inside a model, read from the family table's module
paths (families.py).

Losses reach the heads directly so they can run the MLM head only where a loss is taken.
"""

from __future__ import annotations

from operator import attrgetter

from torch import nn

from bertology.families import FAMILIES


def encoder_of(model: nn.Module) -> nn.Module:
    """The bare encoder (BertModel, RobertaModel): `model.bert`, `model.roberta`, ..."""
    return getattr(model, model.base_model_prefix)


def mlm_head_of(model: nn.Module, family: str) -> nn.Module:
    """The MLM prediction head: transform + decoder, applied to (n, hidden) states."""
    row = FAMILIES[family]
    head = attrgetter(row.mlm_head)(model)
    if row.mlm_decoder is None:
        return head
    return nn.Sequential(head, attrgetter(row.mlm_decoder)(model))  # the same modules, chained


def pair_head_of(model: nn.Module, family: str) -> nn.Module:
    """The 2-way sentence-pair classifier on the pooled [CLS] output."""
    return attrgetter(FAMILIES[family].pair_head)(model)


def sbo_head_of(model: nn.Module) -> nn.Module:
    """SpanBERT's span-boundary head, attached by models/spanbert.attach_sbo_head."""
    return model.sbo_head
