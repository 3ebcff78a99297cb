"""Do the heads of one layer attend alike? (Clark et al., 2019, §6; the survey §6.1: heads in
one layer are often similar, and many could be merged or pruned.)

Clark et al. measure the distance between two heads as the Jensen–Shannon divergence of their
attention distributions, summed over the tokens of their data, and find that heads of the same
layer lie close together. Here, per eval sentence, every pair of heads gets the mean over its
query tokens of JS(α_i(q), α_j(q)) (natural log: 0 for identical rows, at most ln 2), on the
word-level maps with [CLS] and [SEP]; pairs within a layer and pairs across layers are
averaged apart. The sentences are the items the replicates resample.
"""

from __future__ import annotations

import numpy as np

from bertology.analysis.features import Features
from bertology.run.replicates import compute_mean_replicates

LOG_EPS = 1e-12


def entropy(p: np.ndarray) -> np.ndarray:
    """Entropy in nats over the last axis."""
    return -(p * np.log(p + LOG_EPS)).sum(axis=-1)


def compute_pair_divergence(maps: np.ndarray) -> np.ndarray:
    """(heads, heads) mean over queries of the JS divergence between every two heads' rows;
    maps: (heads, q, k) attention rows (all heads of all layers, flattened)."""
    own = entropy(maps)  # (heads, q)
    mixture = 0.5 * (maps[:, None] + maps[None, :])  # (heads, heads, q, k)
    js = entropy(mixture) - 0.5 * (own[:, None] + own[None, :])  # (heads, heads, q)
    return np.clip(js, 0.0, None).mean(axis=-1)


def layer_pairs(layers: int, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean (H·L, H·L) masks of distinct pairs within one layer and across layers."""
    layer_of = np.repeat(np.arange(layers), heads)
    upper = np.triu(np.ones((layers * heads,) * 2, dtype=bool), k=1)
    same = layer_of[:, None] == layer_of[None, :]
    return upper & same, upper & ~same


def compute_head_distances(features: Features, sentences: int,
                           indices: np.ndarray | None = None,
                           prefix: str = "attention") -> tuple[dict, dict]:
    """Mean within-layer and across-layer JS divergence over the first `sentences` eval
    sentences: (metrics, their replicates over the resampled sentences `indices`, (replicates,
    sentences); bootstrap_indices of the sentences where None)."""
    within_mask, across_mask = layer_pairs(features.num_layers, features.num_heads)
    within, across = [], []
    for index in range(min(sentences, features.num_sentences)):
        maps = features.attention_map(index)  # (layers, heads, n + 2, n + 2)
        divergence = compute_pair_divergence(maps.reshape(-1, *maps.shape[2:]))
        within.append(divergence[within_mask].mean())
        across.append(divergence[across_mask].mean())
    within, across = np.array(within), np.array(across)
    values = {f"{prefix}/head_divergence/within_layer": within,
              f"{prefix}/head_divergence/across_layers": across,
              f"{prefix}/head_divergence/across_minus_within": across - within}
    return ({k: float(v.mean()) for k, v in values.items()},
            {k: compute_mean_replicates(v, indices) for k, v in values.items()})
