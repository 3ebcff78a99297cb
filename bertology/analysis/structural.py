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
and counts), recomputed on every resample as on the sentences themselves. The scores, their
parts and the baseline are pure numpy, in analysis/tree_scores.py.
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from bertology.analysis.features import Features
from bertology.analysis.probe_context import device
from bertology.analysis.tree_scores import (
    PARTS,
    TREE_METRICS,
    compute_depths,
    compute_tree_distances,
    linear_baseline_parts,
    score_linear_baseline,
    score_parts,
)
from bertology.config.analysis_settings import StructuralSettings
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require
from bertology.run.figures import encoder_keys, layer_means, plot_layer_curves
from bertology.run.replicates import (
    bootstrap_indices,
    compute_sentence_ids,
    resample_counts,
    write_replicates,
)
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

TREE_TASKS = ("ud_pos", "ud_deps", "synthetic_pos", "synthetic_depth", "synthetic_agreement")
HELDOUT_FRACTION = 0.1  # share of the train sentences whose loss early-stops the probe
MIN_IMPROVEMENT = 1e-4  # H&M: a held-out loss counts as better only by this margin


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


def pad_probe_batch(xs: list[torch.Tensor], ys: list[torch.Tensor]):
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
        hidden, gold, lengths = pad_probe_batch(xs[start: start + batch_size],
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
            hidden, gold, lengths = pad_probe_batch([train[0][i] for i in batch],
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
    one-word sentences has neither, checked before any extraction."""
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


def fit_structural_probes(ctx, which: str, settings: StructuralSettings,
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


def summarise_structural(rows: list[dict], metrics: list[str]) -> dict[str, float]:
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
        encoder_rows, encoder_columns = fit_structural_probes(ctx, which, settings, targets,
                                                              weights)
        prefix = "structural" if which == "model" else f"structural/{which}"
        rows += encoder_rows
        columns.update({f"{prefix}/{key}": reps for key, reps in encoder_columns.items()})
    if settings.linear_baseline:
        rows += score_linear_baseline(evaluation, settings.probes, targets["eval"])
        for kind, parts in linear_baseline_parts(evaluation, settings.probes,
                                                 targets["eval"]).items():
            columns.update({f"structural/linear_baseline/{metric}": reps for metric, reps in
                            score_parts(kind, parts, weights).items()})
    metrics = [m for kind in settings.probes for m in TREE_METRICS[kind]]
    write_table(ctx.out_dir, f"structural_{task}", rows)
    write_replicates(ctx.out_dir, f"structural_{task}", columns,
                     compute_sentence_ids(evaluation), ctx.splits.eval_pool)
    layered = [row for row in rows if row["model"] != "linear_baseline"]
    plot_layer_curves(layered, metrics, f"structural probes (Hewitt & Manning, 2019): {task}",
                      ctx.out_dir, f"structural_{task}",
                      baselines=[row for row in rows if row["model"] == "linear_baseline"],
                      keys=encoder_keys("structural",
                                        linear_baseline="structural/linear_baseline/{metric}"))
    return summarise_structural(rows, metrics)
