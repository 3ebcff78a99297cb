"""The attention analysis's null (`attention/random/…`): the random-init twin's maps, each head
sharpened to the model's head's mean entropy.

A twin part asks whether the model's heads do something (put most of their mass on [CLS],
[SEP] and punctuation; attend alike within a layer) more than an untrained model of the same
architecture would. The twin itself cannot answer: transformers draws its weights at
initializer_range (0.02), so q·k stays small and every map is near uniform (all-MiniLM-L6-v2's
twin: mean row entropy 0.98 of uniform's). A uniform head puts mass (2 + punctuation)/(n + 2) on
the special tokens, under one half, and is as far from every other head as from itself, so the
twin's special-heads share is 0 and its across − within divergence 0 by construction, whatever
the architecture would do with attention as focused as a trained model's: the twin parts of
special_heads and head_similarity could never bind.

The null keeps the twin's logits (what the architecture, the embeddings and the tokenizer give
without training) and multiplies each head's by the factor t that brings its mean entropy over
the word rows to the model's head's: softmax(t · log p) of each twin row p, the row its logits
times t give (at the word level: rows of maps pooled from sub-words, which is what every
statistic reads). What it takes from the model is one number a head, how focused it is, never
where it looks: two models whose heads are equally focused get the same null. A head this
focused and untrained still looks wherever random weights send it, so a null head can be special
(a twin whose logits favour [CLS] gives special heads once sharpened) and can resemble its
layer's other heads, and the twin parts can fail.

Chosen by measurement (bench/bench_attention_nulls.py; all-MiniLM-L6-v2, 300 UD English-EWT
dev sentences; mean row entropy over uniform's, special heads' share, across − within JS):
MiniLM 0.603, 0.472, +0.038; the twin 0.983, 0, +0.000; the twin with every tensor drawn at
the trained tensor's mean and standard deviation, or the trained tensors' entries shuffled,
still 0.92, 0, +0.003 (the scale of single weights does not focus attention: a trained q·k is
large because W_q and W_k are aligned, which is learned); MiniLM's heads moved to other
layers 0.71, 0.19, +0.017, but they keep what they learned (its best nsubj head stays 17
points above the offset baseline, where every untrained candidate is 26-30 below), so it is
no untrained null; MiniLM's maps with the heads' layers permuted keep its special heads'
share exactly (it counts heads) and give across − within +0.000 by construction. This null
(factors 1.8-206): 0.623, 0, +0.013, its heads 0.067 apart within a layer where the twin's are
0.003 (another sentence sample: 0.624, 0, +0.013). The +0.013 is what equal focus within a
layer, taken from the model, makes of untrained heads (one factor a layer gives +0.013, one
for the whole model +0.000): head_similarity's twin part asks that a layer's heads attend
more alike than untrained heads as focused as theirs, a third of MiniLM's +0.038. A factor a
head, not one for the model, because a head special in the model is far more focused than
the mean (a [SEP] head), and the null must give each head the same chance to be special.

Its special heads' share is 0: untrained heads as focused as MiniLM's put 0.18 of their mass
on [CLS], [SEP] and punctuation (0.22 of the tokens), none over one half. That is a measured
null, not a forced one: special_heads' twin part holds on MiniLM because no untrained head
this focused is special, and it would fail on a model whose twin's logits favour them.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

TINY = 1e-12  # log of a zero entry (a float16 underflow): far below any other
FIT_SENTENCES = 100  # the first sentences the factors are fitted on
FIT_STEPS = 30  # bisection steps over log t in [ln FACTOR_RANGE[0], ln FACTOR_RANGE[1]]
FACTOR_RANGE = (1e-2, 1e4)


def sharpen(maps: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """(layers, heads, m, m) rows p → softmax(t · log p) with t each head's factor
    (layers, heads): the rows the head's logits multiplied by t give."""
    logits = np.log(np.clip(maps, TINY, None)) * factors[:, :, None, None]
    logits -= logits.max(-1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(-1, keepdims=True)


def word_row_entropy(maps: np.ndarray) -> np.ndarray:
    """(layers, heads) entropy in nats summed over one sentence's word rows (rows 1 … n of
    its (layers, heads, n + 2, n + 2) maps: the rows the statistics read)."""
    n = maps.shape[-1] - 2
    rows = maps[:, :, 1:n + 1, :]
    return -(rows * np.log(np.clip(rows, TINY, None))).sum((-1, -2))


def mean_entropy(maps: list[np.ndarray], factors: np.ndarray | None = None) -> np.ndarray:
    """(layers, heads) mean entropy over the word rows of all maps, each sharpened by
    `factors` where given."""
    total = sum(word_row_entropy(m if factors is None else sharpen(m, factors)) for m in maps)
    return total / sum(m.shape[-1] - 2 for m in maps)


def fit_factors(maps: list[np.ndarray], target: np.ndarray,
                groups: np.ndarray | None = None) -> np.ndarray:
    """(layers, heads) factors that bring the mean word-row entropy of the sharpened maps to
    `target` (layers, heads), by bisection on log t (entropy falls as t grows). groups
    (layers, heads) ids 0 … G-1: one factor a group, fitted to the group's mean; None: one a
    head."""
    groups = np.arange(target.size).reshape(target.shape) if groups is None else groups
    count = int(groups.max()) + 1
    size = np.bincount(groups.ravel(), minlength=count)
    goal = np.bincount(groups.ravel(), target.ravel(), count) / size
    low, high = np.full(count, np.log(FACTOR_RANGE[0])), np.full(count, np.log(FACTOR_RANGE[1]))
    for _ in range(FIT_STEPS):
        middle = 0.5 * (low + high)
        found = mean_entropy(maps, np.exp(middle)[groups])
        too_flat = np.bincount(groups.ravel(), found.ravel(), count) / size > goal
        low, high = np.where(too_flat, middle, low), np.where(too_flat, high, middle)
    return np.exp(0.5 * (low + high))[groups]


class SharpenedMaps:
    """Features (features.py) whose attention maps are read sharpened, head by head."""

    def __init__(self, features, factors: np.ndarray):
        self.features, self.factors = features, factors
        self.num_layers, self.num_heads = features.num_layers, features.num_heads

    @property
    def num_sentences(self) -> int:
        return self.features.num_sentences

    def attention_map(self, index: int) -> np.ndarray:
        return sharpen(self.features.attention_map(index), self.factors).astype(np.float32)


def build_attention_null(model, twin, count: int) -> SharpenedMaps:
    """The twin's maps sharpened to the model's entropy, head by head, with the factors fitted
    on the first min(count, FIT_SENTENCES) sentences (the same for every resample: the null
    is fixed before the sentences are resampled)."""
    fitted = range(min(count, FIT_SENTENCES))
    target = mean_entropy([model.attention_map(i) for i in fitted])
    factors = fit_factors([twin.attention_map(i) for i in fitted], target)
    log.info("attention null: the twin's heads sharpened by factors %.2f-%.2f to the model's "
             "mean entropy (%.3f-%.3f nats)", factors.min(), factors.max(), target.min(),
             target.max())
    return SharpenedMaps(twin, factors)
