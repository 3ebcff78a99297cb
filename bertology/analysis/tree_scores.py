"""Scores of structural probes' predictions (Hewitt & Manning, 2019), pure numpy: trees
from head indices, the minimum spanning tree, UUAS and root accuracy, the length-averaged
Spearman correlations DSpr./NSpr., their per-sentence parts for item replicates, and H&M's
LINEAR baseline. The probes that predict them are in analysis/structural.py.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy.stats import rankdata

from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require

PUNCT_UPOS = ("PUNCT", "SYM")  # H&M leave punctuation out of UUAS and root accuracy
SPEARMAN_LENGTHS = (5, 50)  # H&M average DSpr./NSpr. over sentence lengths 5-50
TREE_METRICS = {"distance": ("uuas", "dist_spearman"), "depth": ("root_acc", "depth_spearman")}


# ---------------------------------------------------------------- trees (pure)


def compute_tree_distances(heads: tuple[int, ...]) -> np.ndarray:
    """(n, n) path lengths in the undirected tree given by 1-based heads (0 = root)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    n = len(heads)
    edges = [(child, head - 1) for child, head in enumerate(heads) if head > 0]
    rows, cols = zip(*edges) if edges else ((), ())
    adjacency = csr_matrix((np.ones(len(edges)), (rows, cols)), shape=(n, n))
    distances = shortest_path(adjacency, directed=False, unweighted=True)  # BFS per word
    require(bool(np.isfinite(distances).all()), f"heads {heads} do not form one tree")
    return distances.astype(np.int64)


def compute_depths(heads: tuple[int, ...]) -> np.ndarray:
    """(n,) edges from each word up to the root (the root's depth is 0)."""
    depths = np.zeros(len(heads), dtype=np.int64)
    for word in range(len(heads)):
        node, steps = word, 0
        while heads[node] > 0:
            node, steps = heads[node] - 1, steps + 1
            require(steps <= len(heads), f"heads {heads} contain a cycle")
        depths[word] = steps
    return depths


def compute_mst_edges(distances: np.ndarray) -> list[tuple[int, int]]:
    """Prim's minimum spanning tree of a dense (n, n) symmetric matrix; edges (i, j), i < j."""
    weights = np.asarray(distances, dtype=np.float64)
    n = len(weights)
    if n < 2:
        return []
    in_tree = np.zeros(n, dtype=bool)
    in_tree[0] = True
    best = weights[0].copy()  # (n,) the cheapest link of each word to the tree so far
    parent = np.zeros(n, dtype=np.int64)
    edges = []
    for _ in range(n - 1):
        word = int(np.argmin(np.where(in_tree, np.inf, best)))
        edges.append((min(parent[word], word), max(parent[word], word)))
        in_tree[word] = True
        closer = ~in_tree & (weights[word] < best)
        best[closer] = weights[word][closer]
        parent[closer] = word
    return [(int(i), int(j)) for i, j in edges]


def compute_keep_mask(sentence: ProbeSentence) -> np.ndarray:
    """(n,) words scored by UUAS and root accuracy: all but PUNCT/SYM where UPOS is known."""
    if sentence.upos is None:
        return np.ones(len(sentence.words), dtype=bool)
    return np.array([tag not in PUNCT_UPOS for tag in sentence.upos], dtype=bool)


def compute_gold_edges(gold_heads: tuple[int, ...], keep_mask: np.ndarray
                       ) -> set[tuple[int, int]]:
    """Undirected (i, j), i < j, 0-based dependency edges between two kept words."""
    return {(min(child, head - 1), max(child, head - 1)) for child, head in enumerate(gold_heads)
            if head > 0 and keep_mask[child] and keep_mask[head - 1]}


def compute_kept_mst(distances: np.ndarray, keep_mask: np.ndarray) -> list[tuple[int, int]]:
    """H&M's prims_matrix_to_edges: the MST over the kept (non-punctuation) words only, in
    sentence positions."""
    kept = np.flatnonzero(keep_mask)
    edges = compute_mst_edges(distances[np.ix_(kept, kept)])
    return [(int(kept[i]), int(kept[j])) for i, j in edges]


def count_correct_edges(pred_edges, gold_heads, keep_mask) -> tuple[int, int]:
    """(predicted edges that are gold, gold edges) of one sentence."""
    gold = compute_gold_edges(gold_heads, keep_mask)
    predicted = {(min(i, j), max(i, j)) for i, j in pred_edges}
    return len(gold & predicted), len(gold)


def compute_uuas(pred_edges, gold_heads: tuple[int, ...], keep_mask: np.ndarray) -> float:
    """One sentence's undirected unlabelled attachment score (a corpus sums the counts)."""
    correct, total = count_correct_edges(pred_edges, gold_heads, keep_mask)
    return correct / total if total else 0.0


# ---------------------------------------------------------------- scores (pure)


def compute_row_spearman(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """(rows, n) × (rows, n) → (rows,) Spearman ρ of each row (ties at their average rank, as
    scipy.stats.spearmanr); nan where a row is constant."""
    pred_ranks = rankdata(pred, axis=-1)
    gold_ranks = rankdata(gold, axis=-1)
    pred_ranks -= pred_ranks.mean(axis=-1, keepdims=True)
    gold_ranks -= gold_ranks.mean(axis=-1, keepdims=True)
    norm = np.sqrt((pred_ranks ** 2).sum(-1) * (gold_ranks ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (pred_ranks * gold_ranks).sum(-1) / norm, np.nan)


def compute_spearman_parts(rho: np.ndarray) -> tuple[float, float]:
    """(sum, count) of a sentence's finite Spearman correlations (a constant row is nan)."""
    finite = rho[np.isfinite(rho)]
    return float(finite.sum()), float(len(finite))


def compute_distance_parts(predictions: list[np.ndarray], sentences: list[ProbeSentence],
                           gold: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per sentence: gold edges the predicted MST found (`hits`) of its gold edges (`units`),
    the sum and count of its rows' Spearman ρ, and its length."""
    parts = defaultdict(list)
    for pred, sentence, target in zip(predictions, sentences, gold):
        keep = compute_keep_mask(sentence)
        found, count = count_correct_edges(compute_kept_mst(pred, keep), sentence.heads, keep)
        rho_sum, rho_count = compute_spearman_parts(compute_row_spearman(pred, target))
        for key, value in (("hits", found), ("units", count), ("rho_sum", rho_sum),
                           ("rho_count", rho_count), ("length", len(pred))):
            parts[key].append(value)
    return {key: np.asarray(values, dtype=np.float64) for key, values in parts.items()}


def compute_depth_parts(predictions: list[np.ndarray], sentences: list[ProbeSentence],
                        gold: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per sentence: whether the kept word of least predicted depth is the gold root
    (`hits`, of one sentence: `units`), its one Spearman ρ (sum and count), its length."""
    parts = defaultdict(list)
    for pred, sentence, target in zip(predictions, sentences, gold):
        kept = np.flatnonzero(compute_keep_mask(sentence))
        root = len(kept) and sentence.heads[int(kept[np.argmin(pred[kept])])] == 0
        rho_sum, rho_count = compute_spearman_parts(compute_row_spearman(pred[None],
                                                                         target[None]))
        for key, value in (("hits", float(root)), ("units", 1.0), ("rho_sum", rho_sum),
                           ("rho_count", rho_count), ("length", len(pred))):
            parts[key].append(value)
    return {key: np.asarray(values, dtype=np.float64) for key, values in parts.items()}


def compute_length_average_replicates(parts: dict[str, np.ndarray], weights: np.ndarray
                                      ) -> np.ndarray:
    """H&M's DSpr./NSpr. on each resample, weights (resamples, sentences) the sentences'
    multiplicities: average the correlations of each sentence length (Σ ρ / Σ count over
    the drawn sentences; constant rows, nan, skipped), then average those means over the
    drawn lengths 5-50 that have one, so every length weighs alike (all drawn lengths where
    none is in 5-50; 0 where no length has a finite ρ). A row of ones: the sentences."""
    values = np.unique(parts["length"])  # (lengths,)
    of_length = (parts["length"][:, None] == values[None, :]).astype(np.float64)  # (S, lengths)
    sums = weights @ (parts["rho_sum"][:, None] * of_length)  # (resamples, lengths)
    counts = weights @ (parts["rho_count"][:, None] * of_length)
    drawn = weights @ of_length > 0
    low, high = SPEARMAN_LENGTHS
    in_range = drawn & (values >= low) & (values <= high)
    used = np.where(in_range.any(axis=1, keepdims=True), in_range, drawn) & (counts > 0)
    means = np.where(used, sums / np.maximum(counts, 1), 0.0)
    lengths = used.sum(axis=1)
    return np.where(lengths > 0, means.sum(axis=1) / np.maximum(lengths, 1), 0.0)


def score_parts(kind: str, parts: dict[str, np.ndarray], weights: np.ndarray
                ) -> dict[str, np.ndarray]:
    """(resamples,) each metric of TREE_METRICS[kind] on resampled sentences: the pooled ratio
    hits / units (UUAS, root accuracy; 0 with no units) and the length-averaged Spearman."""
    hits, units = weights @ parts["hits"], weights @ parts["units"]
    ratio, spearman = TREE_METRICS[kind]
    return {ratio: np.where(units > 0, hits / np.maximum(units, 1), 0.0),
            spearman: compute_length_average_replicates(parts, weights)}


def score_distance(predictions: list[np.ndarray], sentences: list[ProbeSentence],
                   gold: list[np.ndarray]) -> dict[str, float]:
    """Corpus UUAS (gold edges found / gold edges, H&M's micro average) and DSpr.: the
    Spearman of every word's row of predicted vs gold distances (the diagonal included, all
    words, as H&M's reporter), averaged per sentence length then over lengths 5-50."""
    parts = compute_distance_parts(predictions, sentences, gold)
    return {k: float(v[0]) for k, v in score_parts("distance", parts,
                                                   np.ones((1, len(sentences)))).items()}


def score_depth(predictions: list[np.ndarray], sentences: list[ProbeSentence],
                gold: list[np.ndarray]) -> dict[str, float]:
    """Root accuracy (the kept word of least predicted depth is the gold root) and NSpr.: one
    Spearman per sentence over all its words, averaged per length then over lengths 5-50."""
    parts = compute_depth_parts(predictions, sentences, gold)
    return {k: float(v[0]) for k, v in score_parts("depth", parts,
                                                   np.ones((1, len(sentences)))).items()}


PARTS = {"distance": compute_distance_parts, "depth": compute_depth_parts}


# ---------------------------------------------------------------- H&M's LINEAR baseline


def linear_baseline_parts(sentences: list[ProbeSentence], probes: list[str],
                          targets: dict[str, list]) -> dict[str, dict[str, np.ndarray]]:
    """H&M's LINEAR: English as a right-branching chain; distance |i − j| (its MST is the
    chain of adjacent kept words), depth = position (the first kept word is the root). Its
    per-sentence parts, by probe."""
    predictions = {
        "distance": [np.abs(np.subtract.outer(np.arange(len(s.words)), np.arange(len(s.words))))
                     .astype(np.float64) for s in sentences],
        "depth": [np.arange(len(s.words), dtype=np.float64) for s in sentences],
    }
    return {kind: PARTS[kind](predictions[kind], sentences, [y.numpy() for y in targets[kind]])
            for kind in probes}


def score_linear_baseline(sentences: list[ProbeSentence], probes: list[str],
                          targets: dict[str, list]) -> list[dict]:
    """The LINEAR baseline's table rows (one per probe)."""
    ones = np.ones((1, len(sentences)))
    return [{"model": "linear_baseline", "layer": -1, "seed": "", "probe": kind,
             **{k: float(v[0]) for k, v in score_parts(kind, parts, ones).items()}}
            for kind, parts in linear_baseline_parts(sentences, probes, targets).items()]
