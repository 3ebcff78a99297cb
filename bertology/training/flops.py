"""Training FLOPs of a batch, counted as Kaplan et al. (2020, §2.1) count them: 6 x (weights a
position runs through) x (positions), forward (2) plus backward (4), and attention's two
(seq x seq x hidden) matmuls per layer. Element-wise work (LayerNorm, GeLU, softmax) and
embedding look-ups are not counted. This is NOT ELECTRA's accounting (Clark et al., 2020,
App. D; google-research/electra flops_computation.py): that one counts backward = forward
(4 x MACs in all), embedding look-ups as dense one-hot matmuls (2 x E x V per position) and the
element-wise work, which makes an ELECTRA step cost 1.65-1.79x an MLM step at tiny/mini with
a 30,522 vocabulary, against 1.06-1.10x here (issue 29): equal-compute comparisons in this
project (trainer.max_flops) are equal by this convention. Heads count only where they
run: the MLM head at masked positions, the pair head once per sequence. This is what lets
objectives be compared at equal compute (trainer.max_flops).
"""

from __future__ import annotations

import torch

IGNORE = -100


def encoder_flops(config, lengths: torch.Tensor) -> float:
    """A BERT-style encoder over sequences of the given real lengths (padding not counted)."""
    layers, hidden = config.num_hidden_layers, config.hidden_size
    tokens = float(lengths.sum())
    # Per token and layer: q, k, v and output projections (4 H^2) and the FFN (2 H I).
    dense = 6.0 * layers * (4 * hidden * hidden + 2 * hidden * config.intermediate_size) * tokens
    # Per sequence and layer: scores Q K^T and the mix A V, each n^2 H multiply-adds.
    attention = 12.0 * layers * hidden * float((lengths.double() ** 2).sum())
    return dense + attention


def mlm_head_flops(config, predicted: int) -> float:
    """Transform (H x H) and decoder (H x V) at each predicted position."""
    hidden = config.hidden_size
    return 6.0 * (hidden * hidden + hidden * config.vocab_size) * predicted


def pair_head_flops(config, sequences: int) -> float:
    """Pooler (H x H) and the 2-way classifier on [CLS], once per sequence."""
    hidden = config.hidden_size
    return 6.0 * (hidden * hidden + 2 * hidden) * sequences


def masked_lm_flops(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> float:
    """MLM (and NSP/SOP when the batch has sentence labels) on one batch."""
    config = model.config
    lengths = batch["attention_mask"].sum(dim=1)
    total = encoder_flops(config, lengths)
    total += mlm_head_flops(config, int((batch["labels"] != IGNORE).sum()))
    if "sentence_label" in batch:
        total += pair_head_flops(config, len(lengths))
    return total
