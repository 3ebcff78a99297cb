"""Structural probes (Hewitt & Manning, 2019, "A Structural Probe for Finding Syntax in Word
Representations"), per layer, in torch; the method of john-hewitt/structural-probes.

distance probe: a linear map B (rank × dim) under which ||B(h_i − h_j)||² approximates the
  tree distance d(i, j); scored by UUAS (the minimum spanning tree of the predicted distances
  against the gold undirected edges, punctuation left out) and DSpr. (Spearman of each word's
  row of predicted vs gold distances).
depth probe: ||B h_i||² approximates the depth of word i (root = 0); scored by root accuracy
  (the word of least predicted depth is the gold root, punctuation left out) and NSpr.
Controls: the same probes on the random-initialised encoder, and H&M's LINEAR baseline (the
right-branching chain: distance |i − j|, depth = position), which has no layers.
Item replicates resample the eval sentences with the fitted probes fixed: each score is built
from per-sentence parts (edges found and gold edges; root right; each length's Spearman sums
and counts), recomputed on every resample as on the sentences themselves.
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from bertology.analysis.context import device
from bertology.analysis.features import Features
from bertology.config.probe import StructuralSettings
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require
from bertology.run.figures import layer_means, plot_layer_curves
from bertology.run.replicates import bootstrap_indices, resample_counts, write_replicates
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

TREE_TASKS = ("ud_pos", "ud_deps", "synthetic_pos", "synthetic_depth", "synthetic_agreement")
PUNCT_UPOS = ("PUNCT", "SYM")  # H&M leave punctuation out of UUAS and root accuracy
SPEARMAN_LENGTHS = (5, 50)  # H&M average DSpr./NSpr. over sentence lengths 5-50
HELDOUT_FRACTION = 0.1  # share of the train sentences whose loss early-stops the probe
MIN_IMPROVEMENT = 1e-4  # H&M: a held-out loss counts as better only by this margin
METRICS = {"distance": ("uuas", "dist_spearman"), "depth": ("root_acc", "depth_spearman")}


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
    """(resamples,) each metric of METRICS[kind] on resampled sentences: the pooled ratio
    hits / units (UUAS, root accuracy; 0 with no units) and the length-averaged Spearman."""
    hits, units = weights @ parts["hits"], weights @ parts["units"]
    ratio, spearman = METRICS[kind]
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


# ---------------------------------------------------------------- probes (torch)


class StructuralProbe(torch.nn.Module):
    """H&M's TwoWordPSDProbe (distance) and OneWordPSDProbe (depth): B^T B is the PSD metric."""

    def __init__(self, kind: str, dim: int, rank: int):
        super().__init__()
        self.kind = kind
        self.proj = torch.nn.Parameter(torch.empty(rank, dim).uniform_(-0.05, 0.05))  # H&M init

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(batch, n, dim) → (batch, n, n) squared distances or (batch, n) squared norms."""
        transformed = hidden @ self.proj.T  # (batch, n, rank)
        norms = (transformed ** 2).sum(-1)  # (batch, n)
        if self.kind == "depth":
            return norms
        gram = transformed @ transformed.transpose(1, 2)  # (batch, n, n)
        return (norms[:, :, None] + norms[:, None, :] - 2 * gram).clamp(min=0)


def compute_probe_loss(pred: torch.Tensor, gold: torch.Tensor, lengths: torch.Tensor
                       ) -> torch.Tensor:
    """H&M's L1 loss: per sentence |pred − gold| summed over its words (depth) or word pairs
    (distance) and divided by n (depth) or n² (distance); averaged over sentences."""
    mask = torch.arange(pred.shape[1], device=pred.device)[None] < lengths[:, None]  # (b, n)
    if pred.dim() == 3:
        mask = mask[:, :, None] & mask[:, None, :]  # (b, n, n)
    error = ((pred - gold).abs() * mask).flatten(1).sum(-1)
    return (error / lengths.float() ** (pred.dim() - 1)).mean()


def pad_batch(xs: list[torch.Tensor], ys: list[torch.Tensor]):
    """Padded (b, n, dim) inputs, (b, n[, n]) targets and (b,) lengths on the device."""
    lengths = torch.tensor([len(x) for x in xs])
    n = int(lengths.max())
    gold = torch.zeros((len(ys),) + (n,) * ys[0].dim())
    for row, y in enumerate(ys):
        gold[(row,) + tuple(slice(0, s) for s in y.shape)] = y
    hidden = pad_sequence(xs, batch_first=True)  # (b, n, dim)
    return hidden.to(device()), gold.to(device()), lengths.to(device())


@torch.no_grad()
def compute_heldout_loss(probe: StructuralProbe, xs, ys, batch_size: int) -> float:
    total = 0.0
    for start in range(0, len(xs), batch_size):
        hidden, gold, lengths = pad_batch(xs[start: start + batch_size],
                                          ys[start: start + batch_size])
        total += float(compute_probe_loss(probe(hidden), gold, lengths)) * len(lengths)
    return total / len(xs)


@dataclass
class FitResult:
    probe: StructuralProbe
    heldout_loss: float
    epochs: int


def fit_probe(kind: str, train: tuple[list, list], heldout: tuple[list, list],
              settings: StructuralSettings, seed: int) -> FitResult:
    """Adam on shuffled batches of sentences; H&M's schedule: the lr drops tenfold when the
    held-out loss stops falling, training stops after `patience` epochs without improvement,
    and the best epoch's probe is kept."""
    torch.manual_seed(seed)
    order = np.random.default_rng(seed)
    probe = StructuralProbe(kind, train[0][0].shape[-1], settings.rank).to(device())
    optimizer = torch.optim.Adam(probe.parameters(), lr=settings.lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=0)
    best, best_state, stale, epochs = float("inf"), copy.deepcopy(probe.state_dict()), 0, 0
    while epochs < settings.epochs and stale < settings.patience:
        epochs += 1
        indices = order.permutation(len(train[0]))
        for start in range(0, len(indices), settings.batch_size):
            batch = indices[start: start + settings.batch_size]
            hidden, gold, lengths = pad_batch([train[0][i] for i in batch],
                                              [train[1][i] for i in batch])
            loss = compute_probe_loss(probe(hidden), gold, lengths)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        heldout_loss = compute_heldout_loss(probe, *heldout, settings.batch_size)
        scheduler.step(heldout_loss)
        if heldout_loss < best - MIN_IMPROVEMENT:
            best, best_state, stale = heldout_loss, copy.deepcopy(probe.state_dict()), 0
        else:
            stale += 1
    probe.load_state_dict(best_state)
    return FitResult(probe, best, epochs)


@torch.no_grad()
def predict_probe(probe: StructuralProbe, xs: list[torch.Tensor], batch_size: int = 64
                  ) -> list[np.ndarray]:
    """Each sentence's (n, n) predicted distances or (n,) depths."""
    predictions = []
    for start in range(0, len(xs), batch_size):
        batch = xs[start: start + batch_size]
        out = probe(pad_sequence(batch, batch_first=True).to(device())).cpu().numpy()
        predictions += [out[i, :len(x), :len(x)] if out.ndim == 3 else out[i, :len(x)]
                        for i, x in enumerate(batch)]
    return predictions


# ---------------------------------------------------------------- the analysis


def require_trees(sentences: list[ProbeSentence], task: str) -> None:
    require(all(s.heads is not None for s in sentences), f"task={task} has no dependency trees; "
            f"structural probes need one of: {', '.join(TREE_TASKS)}")


def require_pairs(splits: dict[str, list[ProbeSentence]], task: str) -> None:
    """The probes fit distances between word pairs and depths below the root: a split of
    one-word sentences has neither (issue 31), checked before any extraction."""
    for split, sentences in splits.items():
        require(any(len(s.words) >= 2 for s in sentences), f"task={task}: every {split} "
                "sentence has one word; structural probes need word pairs (sentences of two "
                "words or more): check the data files")


def build_targets(sentences: list[ProbeSentence]) -> dict[str, list[torch.Tensor]]:
    """Gold tree distances (n, n) and depths (n,) per sentence, as float tensors."""
    return {"distance": [torch.from_numpy(compute_tree_distances(s.heads)).float()
                         for s in sentences],
            "depth": [torch.from_numpy(compute_depths(s.heads)).float() for s in sentences]}


def split_layer(features: Features, layer: int) -> list[torch.Tensor]:
    """One layer's (words, dim) array cut into each sentence's (n, dim) tensor."""
    return list(torch.from_numpy(features.layer(layer)).split(np.diff(features.offsets).tolist()))


def split_heldout(count: int) -> tuple[np.ndarray, np.ndarray]:
    """Fixed (fit, held-out) train indices: early stopping never sees the eval split."""
    require(count >= 2, "structural probes need at least 2 train sentences (one held out)")
    order = np.random.default_rng(0).permutation(count)
    cut = max(1, int(round(count * HELDOUT_FRACTION)))
    return np.sort(order[cut:]), np.sort(order[:cut])


def probe_encoder(ctx, which: str, settings: StructuralSettings,
                  targets: dict[str, dict[str, list]], weights: np.ndarray
                  ) -> tuple[list[dict], dict[str, np.ndarray]]:
    """A row per (layer, seed, probe) of one encoder: fit on train, score on eval; and the
    replicates of each layer's seed-mean scores (`layer_LL/<metric>`) over resampled eval
    sentences, weights (resamples, sentences) their multiplicities."""
    train, evaluation = ctx.features(which, "train"), ctx.features(which, "eval")
    fit_idx, held_idx = split_heldout(train.num_sentences)
    sentences = ctx.sentences("eval")
    rows, replicates = [], defaultdict(list)
    for layer in tqdm(range(train.num_layers + 1), desc=f"structural {which}"):
        train_x, eval_x = split_layer(train, layer), split_layer(evaluation, layer)
        for seed in ctx.config.seeds:
            for kind in settings.probes:
                ys = targets["train"][kind]
                fit = fit_probe(kind, ([train_x[i] for i in fit_idx], [ys[i] for i in fit_idx]),
                                ([train_x[i] for i in held_idx], [ys[i] for i in held_idx]),
                                settings, seed)
                gold = [y.numpy() for y in targets["eval"][kind]]
                parts = PARTS[kind](predict_probe(fit.probe, eval_x), sentences, gold)
                scores = {k: float(v[0]) for k, v in score_parts(
                    kind, parts, np.ones((1, len(sentences)))).items()}
                for metric, reps in score_parts(kind, parts, weights).items():
                    replicates[f"layer_{layer:02d}/{metric}"].append(reps)
                rows.append({"model": which, "layer": layer, "seed": seed, "probe": kind,
                             **scores, "heldout_loss": fit.heldout_loss, "epochs": fit.epochs})
                log.info("structural %s layer %d seed %d %s: %s", which, layer, seed, kind,
                         ", ".join(f"{k}={v:.3f}" for k, v in scores.items()))
    return rows, {key: np.mean(seeds, axis=0) for key, seeds in replicates.items()}


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


def summarise(rows: list[dict], metrics: list[str]) -> dict[str, float]:
    """Means over seeds per layer (model, random), the baseline, and the model's best layer
    (best_layer/<metric> is its index, best/<metric> its score)."""
    out: dict[str, float] = {}
    for metric in metrics:
        for series, (layers, means, _) in layer_means(rows, metric).items():
            if series == "linear_baseline":
                out[f"structural/linear_baseline/{metric}"] = float(means[0])
                continue
            prefix = "structural" if series == "model" else f"structural/{series}"
            out.update({f"{prefix}/layer_{layer:02d}/{metric}": float(value)
                        for layer, value in zip(layers, means)})
            if series == "model":
                best = int(np.argmax(means))
                out[f"structural/best_layer/{metric}"] = float(layers[best])
                out[f"structural/best/{metric}"] = float(means[best])
    return out


def run(ctx, settings: StructuralSettings) -> dict[str, float]:
    task = ctx.config.task.name
    train, evaluation = ctx.sentences("train"), ctx.sentences("eval")
    require_trees(train + evaluation, task)
    require_pairs({"train": train, "eval": evaluation}, task)
    targets = {"train": build_targets(train), "eval": build_targets(evaluation)}
    encoders = ["model", "random"] if settings.random_init else ["model"]
    weights = resample_counts(bootstrap_indices(len(evaluation)))  # (resamples, sentences)
    rows, columns = [], {}
    for which in encoders:
        encoder_rows, encoder_columns = probe_encoder(ctx, which, settings, targets, weights)
        prefix = "structural" if which == "model" else f"structural/{which}"
        rows += encoder_rows
        columns.update({f"{prefix}/{key}": reps for key, reps in encoder_columns.items()})
    if settings.linear_baseline:
        rows += score_linear_baseline(evaluation, settings.probes, targets["eval"])
        for kind, parts in linear_baseline_parts(evaluation, settings.probes,
                                                 targets["eval"]).items():
            columns.update({f"structural/linear_baseline/{metric}": reps for metric, reps in
                            score_parts(kind, parts, weights).items()})
    metrics = [m for kind in settings.probes for m in METRICS[kind]]
    write_table(ctx.out_dir, f"structural_{task}", rows)
    write_replicates(ctx.out_dir, f"structural_{task}", columns)
    layered = [row for row in rows if row["model"] != "linear_baseline"]
    plot_layer_curves(layered, metrics, f"structural probes (Hewitt & Manning, 2019): {task}",
                      ctx.out_dir, f"structural_{task}",
                      baselines=[row for row in rows if row["model"] == "linear_baseline"])
    return summarise(rows, metrics)
