"""Training FLOPs of a batch, under one of two conventions (trainer.flops_convention).

kaplan (the default): as Kaplan et al. (2020, §2.1) count them, 6 x (weights a position runs
through) x (positions), forward (2) plus backward (4), and attention's two (seq x seq x hidden)
matmuls per layer. Element-wise work (LayerNorm, GeLU, softmax) and embedding look-ups are not
counted. Heads count only where they run: the MLM head at masked positions, the pair head once
per sequence.

electra: ELECTRA's (Clark et al., 2020, App. D; google-research/electra flops_computation.py),
*_app_d below: a matmul is 2 x MACs, backward = forward (so 2 x the forward, 4 x MACs in all),
embedding look-ups are dense one-hot matmuls (2 x E x V per position, the position and
token-type tables 2 x E x (seq + 2)), and the element-wise work counts by its constants
(dropout 4, LayerNorm 5, GeLU 8, softmax 5 per element). By it an ELECTRA step costs 1.65-1.79x
an MLM step at tiny/mini with a 30,522 vocabulary, against 1.06-1.10x by kaplan: the look-ups
are nearly the whole cost of a small model with a large vocabulary, and the generator looks the
embeddings up again. What differs from the script: lengths are each sequence's real length
(padding not counted), and the MLM head runs at the masked positions counted, not a fixed
output_frac of them.

trainer.max_flops budgets and the reported train/flops use the chosen convention, so runs are
at equal compute by it; the project's studies use kaplan.
"""

from __future__ import annotations

import torch

from bertology.config.groups import FLOPS_CONVENTIONS
from bertology.data.encode import IGNORE
from bertology.errors import require
from bertology.families import config_names_of, family_of_checkpoint
from bertology.models.windows import local_reach


def encoder_flops(config, lengths: torch.Tensor) -> float:
    """A BERT-style encoder over sequences of the given real lengths (padding not counted).
    A gated FFN (families.py's glu: ModernBERT's GeGLU) projects to 2 I; a local-window layer
    (models/windows.py) scores only the query-key pairs inside its window: what the
    architecture needs, as FlashAttention's sliding window runs it (eager and SDPA compute
    every pair and mask the rest, so a local layer costs them as much as a global one)."""
    layers, hidden = config.num_hidden_layers, config.hidden_size
    tokens = float(lengths.sum())
    family = family_of_checkpoint(config.model_type)
    ffn = 3 if family.glu else 2  # H x (1 or 2) I, I x H
    # the FFN width under the config's name for it (DistilBERT: hidden_dim)
    width = getattr(config, config_names_of(family, "intermediate_size")[0])
    # Per token and layer: q, k, v and output projections (4 H^2) and the FFN (2 or 3 H I).
    dense = 6.0 * layers * (4 * hidden * hidden + ffn * hidden * width) * tokens
    # Per sequence and layer: scores Q K^T and the mix A V, each H multiply-adds per pair.
    pairs = sum(attended_pairs(lengths, reach) for reach in local_reach(config))
    return dense + 12.0 * hidden * pairs


def attended_pairs(lengths: torch.Tensor, reach: int | None) -> float:
    """Query-key pairs a layer scores over sequences of these lengths: n^2 each, less the
    (n - r - 1)(n - r) pairs more than r apart in a window of reach r (2 x sum over
    d = r+1 .. n-1 of the n - d pairs at distance d)."""
    n = lengths.double()
    if reach is None:
        return float((n ** 2).sum())
    beyond = (n - reach - 1).clamp(min=0) * (n - reach).clamp(min=0)
    return float((n ** 2 - beyond).sum())


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

# ELECTRA's flops_computation.py constants: FLOPs per element of each element-wise op.
DROPOUT_FLOPS = 4  # random number, >=, multiply by the mask, multiply by 1 / (1 - p)
LAYER_NORM_FLOPS = 5  # mean, variance (square and sum), bias, scale
ACTIVATION_FLOPS = 8  # GeLU's tanh form
SOFTMAX_FLOPS = 5  # max / subtract, exp, sum, divide


def encoder_app_d(config, lengths: torch.Tensor) -> float:
    """Forward FLOPs of the embeddings (dense look-ups) and the blocks over sequences of the
    given real lengths, per get_block_flops and get_embedding_flops(output=False). Its
    post-attention LayerNorm is counted as 5 FLOPs a position, not 5 x hidden, as the script
    writes it (attn_output_layer_norm): negligible, kept for a faithful count."""
    h, i, heads = config.hidden_size, config.intermediate_size, config.num_attention_heads
    e = getattr(config, "embedding_size", h)
    n = lengths.double()
    tokens, squares = float(n.sum()), float((n ** 2).sum())
    per_token = (3 * 2 * h * h + 3 * h + 2 * h * h + h + DROPOUT_FLOPS * h + h + LAYER_NORM_FLOPS
                 + 2 * h * i + ACTIVATION_FLOPS * i + i + 2 * h * i + h + DROPOUT_FLOPS * h + h
                 + LAYER_NORM_FLOPS * h)
    # scores and weighted average (2 h n each), softmax, dropout and scale per head and key
    per_token_and_key = 2 * h + (SOFTMAX_FLOPS + DROPOUT_FLOPS + 1) * heads + 2 * h
    blocks = config.num_hidden_layers * (per_token * tokens + per_token_and_key * squares)
    embed = (2 * e * config.vocab_size + 2 * e + LAYER_NORM_FLOPS * e + DROPOUT_FLOPS * e
             + (2 * h * e + h if e != h else 0)) * tokens + 2 * e * float((n * (n + 2)).sum())
    return blocks + embed


def output_app_d(hidden: int, embedding: int, vocab: int, predicted: float) -> float:
    """Forward FLOPs of an MLM head (hidden -> embedding transform, GeLU, LayerNorm, tied
    decoder, softmax) at the predicted positions: get_embedding_flops(output=True)."""
    e = embedding
    per = (2 * e * vocab + 2 * hidden * e + e + ACTIVATION_FLOPS * e + LAYER_NORM_FLOPS * e
           + SOFTMAX_FLOPS * vocab + 2 * vocab)
    return per * predicted


def classifier_app_d(hidden: int, count: float) -> float:
    """Forward FLOPs of a dense + GeLU + 1-2 logit head (get_binary_classification_flops):
    the discriminator's per token, the pair head's per sequence."""
    return (2 * hidden * hidden + hidden + ACTIVATION_FLOPS * hidden + 2 * hidden) * count


def masked_lm_flops_app_d(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> float:
    """MLM (and NSP/SOP when the batch has sentence labels) on one batch, by App. D: twice the
    forward (get_train_flops)."""
    config = model.config
    lengths = batch["attention_mask"].sum(dim=1)
    forward = encoder_app_d(config, lengths)
    forward += output_app_d(config.hidden_size, config.hidden_size, config.vocab_size,
                            float((batch["labels"] != IGNORE).sum()))
    if "sentence_label" in batch:
        forward += classifier_app_d(config.hidden_size, len(lengths))
    return 2.0 * forward


def flops_counter(objective, convention: str):
    """The objective's flops(model, batch) by the convention (one of FLOPS_CONVENTIONS)."""
    assert convention in FLOPS_CONVENTIONS, convention  # TrainerConfig checked it
    if convention == "electra":
        # masked-LM objectives that count like mlm (flops None) share masked_lm_flops_app_d
        require(objective.flops_app_d is not None or objective.flops is None,
                f"trainer.flops_convention=electra has no count for the {objective.name} "
                "objective (ELECTRA's App. D covers pretraining); use trainer.flops_convention="
                "kaplan")
        return objective.flops_app_d or masked_lm_flops_app_d
    return objective.flops or masked_lm_flops
