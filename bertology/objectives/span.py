"""Span masking and the span-boundary objective (SpanBERT, Joshi et al., 2020, §3.1-3.2).

Masking (§3.1): spans of whole words are drawn until `mask_prob` of the non-special tokens are
covered. Each span's length in words is drawn from Geo(p), p = 0.2, clipped at ℓmax = 10 words
(truncated and renormalised, as the official code's len_distrib: mean 3.8 words), then a start
word uniformly among the words not yet masked. A span stops early at a special token, an already
masked word or the budget: the exact per-sequence count of mlm.py, met as nearly as whole words
allow (the official code cuts the last word to hit it exactly). As in the official code, spans
that touch are merged, and 80/10/10 ([MASK] / random / unchanged) is decided once per merged
span: every token of a span shares it (§3.1, "we perform this replacement at the span level").

SBO (§3.2): every masked token x_i of a span (s, e) is also predicted from the encoder states of
the boundary tokens x_{s-1} and x_{e+1} (never masked, as merged spans are maximal; [CLS] and
[SEP] serve as boundaries) and its position i - s + 1. Loss = MLM + sbo_weight * SBO, both at
the masked positions only; the head is models/spanbert.SpanBoundaryHead.

Masks are drawn from a generator seeded by (seed, example's mask_key), as in mlm.py, so static
and dynamic masking and exact resume work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from bertology.config.groups import ObjectiveConfig
from bertology.models.structure import encoder_of, sbo_head_of
from bertology.objectives import mlm
from bertology.objectives.mlm import IGNORE, MaskingSpec
from bertology.training.flops import (
    ACTIVATION_FLOPS,
    LAYER_NORM_FLOPS,
    SOFTMAX_FLOPS,
    masked_lm_flops,
    masked_lm_flops_app_d,
)
from bertology.training.objective import Objective

# The per-token arrays masking makes besides input_ids, with their value where no token is
# predicted (and in padding): the sbo_* arrays hold 0 there, a valid index that no loss reads.
MASK_VALUES = {"labels": IGNORE, "sbo_left": 0, "sbo_right": 0, "sbo_position": 0}


def compute_length_pmf(p: float, max_words: int) -> np.ndarray:
    """P(ℓ = 1..max_words) for ℓ ~ Geo(p) clipped at max_words, i.e. truncated and renormalised
    (Joshi et al. §3.1: p = 0.2, ℓmax = 10 give a mean of 3.8 words). Shape (max_words,)."""
    pmf = p * (1.0 - p) ** np.arange(max_words)
    return pmf / pmf.sum()


@dataclass(frozen=True)
class Words:
    """A sequence cut into words. Special tokens are words of their own, so no word mixes
    special and ordinary tokens (a span can then never reach into [SEP] or [UNK])."""

    of_token: np.ndarray  # (seq,) word number of every token
    first: np.ndarray  # (words,) first token of each word
    size: np.ndarray  # (words,) tokens in each word
    maskable: np.ndarray  # (words,) bool: not a special token

    @classmethod
    def of(cls, input_ids: np.ndarray, word_starts: np.ndarray, special_ids: np.ndarray):
        special = np.isin(input_ids, special_ids)
        starts = word_starts.astype(bool) | special
        starts[1:] |= special[:-1]  # the token after a special one begins a word
        starts[0] = True
        first = np.flatnonzero(starts)
        return cls(np.cumsum(starts) - 1, first, np.diff(np.append(first, len(input_ids))),
                   ~special[first])


def sample_spans(words: Words, budget: int, pmf: np.ndarray,
                 rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Spans of words, in the order drawn: (first word, words taken, length drawn). Spans never
    overlap; a span stops early at a word it may not take, and masking stops at the word that
    would leave the count further from the budget than stopping does (whole words round the
    count to the nearest, so coverage is unbiased; the first word is always taken)."""
    taken = ~words.maskable  # (words,) special, or masked already
    spans, covered, done = [], 0, False
    while covered < budget and not done:  # a word is left: budget <= the maskable tokens
        length = int(rng.choice(len(pmf), p=pmf)) + 1
        first = int(rng.choice(np.flatnonzero(~taken)))
        end = first
        while end < len(taken) and not taken[end] and end - first < length and covered < budget:
            size = int(words.size[end])
            done = covered > 0 and covered + size - budget > budget - covered
            if done:  # stopping here is nearer the budget than taking this word
                break
            taken[end] = True
            covered += size
            end += 1
        if end > first:
            spans.append((first, end - first, length))
    return spans


def compute_runs(masked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) token of every maximal run of masked tokens: the sampled spans, merged
    where they touch (the official code's merge_intervals)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], masked.astype(np.int8), [0]])))
    return edges[0::2], edges[1::2] - 1  # (runs,), (runs,)


@dataclass(frozen=True)
class SpanMask:
    arrays: dict[str, np.ndarray]  # input_ids (corrupted) and MASK_VALUES' keys, each (seq,)
    spans: list[tuple[int, int, int]]  # as sample_spans returns them
    words: Words


def compute_span_mask(input_ids: np.ndarray, word_starts: np.ndarray, spec: MaskingSpec,
                      pmf: np.ndarray, rng: np.random.Generator) -> SpanMask:
    """Mask one [CLS] ... [SEP] sequence: corrupted ids, labels (IGNORE where no loss), and for
    each masked token its span's boundary tokens and its 1-based position in the span."""
    words = Words.of(input_ids, word_starts, spec.special_ids)
    candidates = int(words.size[words.maskable].sum())
    budget = max(1, int(round(candidates * spec.mask_prob))) if candidates else 0
    spans = sample_spans(words, budget, pmf, rng)
    masked = np.zeros(len(words.first), dtype=bool)
    for first, count, _ in spans:
        masked[first: first + count] = True
    masked = masked[words.of_token]  # (seq,)
    n = len(input_ids)
    out = {key: np.full(n, value, dtype=np.int64) for key, value in MASK_VALUES.items()}
    out["input_ids"] = input_ids.astype(np.int64)
    out["labels"][masked] = input_ids[masked]
    for start, end in zip(*compute_runs(masked)):
        out["sbo_left"][start: end + 1] = start - 1  # [CLS] at the latest: never masked
        out["sbo_right"][start: end + 1] = end + 1  # [SEP] at the latest
        out["sbo_position"][start: end + 1] = np.arange(1, end - start + 2)
        _replace_span(out["input_ids"], start, end, spec, rng)
    return SpanMask(out, spans, words)


def _replace_span(ids: np.ndarray, start: int, end: int, spec: MaskingSpec,
                  rng: np.random.Generator) -> None:
    """80/10/10 for the whole span at once; random tokens are drawn per token, from the corpus's
    unigram distribution with objective.random_tokens=unigram (official code)."""
    draw = rng.random()
    if draw < spec.mask_token_ratio:
        ids[start: end + 1] = spec.replacement_id
    elif draw < spec.mask_token_ratio + spec.random_token_ratio:
        ids[start: end + 1] = rng.choice(spec.random_pool, size=end - start + 1,
                                         p=spec.random_weights)


def pad_span_batch(examples: list[dict], spec: MaskingSpec, pmf: np.ndarray,
              pad_id: int) -> dict[str, torch.Tensor]:
    """Mask each example with its own seeded generator (as mlm.pad_batch) and pad to the
    longest. Every value is (batch, seq) int64, but mlm_positions (batch, slots_of(...)): the
    masked positions in a static number of slots, read by both heads (mlm.masked_slots)."""
    length = max(len(e["input_ids"]) for e in examples)
    fill = {"input_ids": pad_id, **MASK_VALUES, "attention_mask": 0, "token_type_ids": 0}
    batch = {key: np.full((len(examples), length), value, np.int64) for key, value in fill.items()}
    for row, example in enumerate(examples):
        rng = np.random.default_rng([spec.seed, *example["mask_key"]])
        arrays = compute_span_mask(example["input_ids"], example["word_starts"], spec, pmf,
                                   rng).arrays
        arrays["attention_mask"] = np.ones(len(example["input_ids"]), np.int64)
        arrays["token_type_ids"] = example["token_type_ids"]
        for key, values in arrays.items():
            batch[key][row, : len(values)] = values
    batch["mlm_positions"] = mlm.list_positions(batch["labels"], slots_of(batch["labels"],
                                                                        spec.mask_prob))
    return {key: torch.from_numpy(value) for key, value in batch.items()}


# Slots past mlm.row_bound: whole words round a row's masked count to the nearest
# (sample_spans), so a row passes its budget by at most half its last word's tokens, i.e. by
# 8 or fewer for any word of up to 16 word pieces.
OVERSHOOT_SLOTS = 8


def slots_of(labels: np.ndarray, mask_prob: float) -> int:
    """Masked-token slots for a (batch, seq) batch: mlm.row_bound(seq) + OVERSHOOT_SLOTS,
    capped at seq, a function of the shape only. A row can go past it only through a longer
    word, or a first word longer than its whole budget (always taken); the batch then widens to
    its largest row (a new shape, one recompile) rather than drop a target."""
    masked = int((labels != IGNORE).sum(1).max(initial=0))
    bound = mlm.row_bound(labels.shape[1], mask_prob) + OVERSHOOT_SLOTS
    return max(min(labels.shape[1], bound), masked)


def sbo_step(model: torch.nn.Module, hidden: torch.Tensor, batch: dict):
    """The span-boundary loss at the masked positions, from the encoder's last states
    (batch, seq, hidden). Gathers through mlm.masked_slots (the collate's static slots; spare
    slots read position 0 of their row, whose sbo_* are 0, with an IGNORE target), so the step
    has static shapes and no host synchronisation. Returns (loss, logs): in training mode the
    loss only, in eval mode also the summed counts."""
    labels = batch["labels"]  # (batch, seq)
    flat, targets = mlm.masked_slots(batch)  # (count,) each, row-major
    states = hidden.flatten(0, 1)  # (batch * seq, hidden)
    row_start = flat - flat % labels.shape[1]  # (count,) flat index of each slot's token 0
    left = states[row_start + batch["sbo_left"].flatten()[flat]]  # (count, hidden)
    right = states[row_start + batch["sbo_right"].flatten()[flat]]  # (count, hidden)
    embeddings = encoder_of(model).get_input_embeddings().weight  # (vocab, hidden): tied
    logits = sbo_head_of(model)(left, right, batch["sbo_position"].flatten()[flat], embeddings)
    loss = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE)
    if model.training:
        return loss, {"sbo_loss": loss.detach()}
    valid = targets != IGNORE
    correct = ((logits.argmax(-1) == targets) & valid).detach()  # (count,)
    rows = flat // labels.shape[1]  # (count,) each slot's sequence
    logs = {"sbo_loss": loss.detach(), "sbo_correct": correct.sum(), "sbo_count": valid.sum(),
            "seq_sbo_correct": mlm.per_row(rows, correct, labels.shape[0]),
            "seq_sbo_count": (labels != IGNORE).sum(1)}
    return loss, logs


def span_metrics(sums: dict[str, float], batches: int) -> dict[str, float]:
    out = mlm.mlm_metrics(sums, batches)
    out["sbo_loss"] = sums["sbo_loss"] / batches
    out["sbo_accuracy"] = sums["sbo_correct"] / max(1, sums["sbo_count"])
    return out


def span_flops(model: torch.nn.Module, batch: dict) -> float:
    """Encoder and MLM head (training/flops.py), plus the SBO head at every masked token: its
    two layers (3H x H, H x H) and the tied vocabulary projection (H x V)."""
    hidden, vocab = model.config.hidden_size, model.config.vocab_size
    predicted = float((batch["labels"] != IGNORE).sum())
    head = 4 * hidden * hidden + hidden * vocab
    return masked_lm_flops(model, batch) + 6.0 * head * predicted


def span_flops_app_d(model: torch.nn.Module, batch: dict) -> float:
    """The same by ELECTRA's App. D (training/flops.py): twice the forward of the encoder, the
    MLM head and, at every masked token, the SBO head's two dense + GeLU + LayerNorm layers
    and its tied output softmax."""
    h, vocab = model.config.hidden_size, model.config.vocab_size
    predicted = float((batch["labels"] != IGNORE).sum())
    layers = 2 * 3 * h * h + 2 * h * h + 2 * h + 2 * (ACTIVATION_FLOPS + LAYER_NORM_FLOPS) * h
    output = 2 * h * vocab + vocab + SOFTMAX_FLOPS * vocab + 2 * vocab
    return masked_lm_flops_app_d(model, batch) + 2.0 * (layers + output) * predicted


def build(cfg: ObjectiveConfig, tokenizer: PreTrainedTokenizerBase, family: str,
          seed: int, token_counts: np.ndarray | None = None) -> Objective:
    """token_counts (vocab,): the training corpus's, for objective.random_tokens=unigram."""
    spec = MaskingSpec.build(cfg, tokenizer, seed, token_counts)
    pmf = compute_length_pmf(cfg.span_geometric_p, cfg.max_span_words)
    pad_id = tokenizer.pad_token_id

    def collate(examples: list[dict]) -> dict[str, torch.Tensor]:
        return pad_span_batch(examples, spec, pmf, pad_id)

    def loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        encoded, mlm_loss, logs = mlm.encode_and_mlm(model, family, batch)
        sbo_loss, sbo_logs = sbo_step(model, encoded.last_hidden_state, batch)
        return mlm_loss + cfg.sbo_weight * sbo_loss, {**logs, **sbo_logs}

    items = {**mlm.MLM_ITEMS, "sbo_accuracy": ("seq_sbo_correct", "seq_sbo_count")}
    return Objective("span_sbo", None, collate, loss, span_metrics, span_flops, items,
                     flops_app_d=span_flops_app_d)
