"""How contextual are the representations? Ethayarajh (2019), per layer, on the eval split:
anisotropy (the baseline the other measures are read against), self-similarity,
intra-sentence similarity and maximum explainable variance (MEV). Each is computed on the
model, on the same architecture with random weights (what pretraining adds) and, with
compare_to=, on a second checkpoint; linear CKA (Kornblith et al., 2019) compares the model's
layers with the random model's and with the second checkpoint's. With compare_to_twin= (the
random model fine-tuned as compare_to was, from the same weights), the random model's layers
are compared with it too: geometry/random/layer_*/cka, the twin arm of the model's
geometry/layer_*/cka (finetuning_top_layers: is the change pretraining-specific?).

Item replicates (run/replicates.py) resample the eval sentences as clusters, a sentence's words
moving together: each measure is recomputed on the resampled corpus by weighting its original
terms by how often each sentence was drawn. MEV and CKA have no replicates.

The measures and how each is resampled: docs/probing.md, "Geometry: measures and their
replicates".
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from bertology.analysis.features import Features
from bertology.analysis.probe_context import ProbeContext
from bertology.config.analysis_settings import GeometrySettings
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require
from bertology.run.figures import encoder_keys, plot_layer_curves
from bertology.run.replicates import (
    bootstrap_indices,
    compute_sentence_ids,
    resample_counts,
    write_replicates,
)
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

MEASURES = ("anisotropy", "self_similarity", "intra_similarity", "self_similarity_adjusted",
            "intra_similarity_adjusted", "mev")
# Words CKA reads per layer: linear CKA of unrelated representations is biased upwards by
# about d / (n + d), so more words than the 5000 that would do for memory (float64, n × d).
MAX_CKA_WORDS = 10000
EPS = 1e-12


@dataclass(frozen=True)
class SamplePlan:
    """One seed's random choices, shared by every layer and every encoder so that their
    numbers differ only by the representations."""

    pairs: np.ndarray  # (pairs, 2) word indices from different sentences
    types: list[np.ndarray]  # per chosen word type: its word indices, one per sentence
    cka_words: np.ndarray  # (≤ MAX_CKA_WORDS,) word indices CKA reads


# ---------------------------------------------------------------- sampling


def compute_sentence_of(offsets: np.ndarray) -> np.ndarray:
    """(words,) the sentence index of every word, from the (sentences + 1,) offsets."""
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


def sample_pairs(sentence_of: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """(count, 2) uniformly random word pairs, redrawn until the two words of each pair come
    from different sentences (Ethayarajh's baseline uses different contexts)."""
    require(len(np.unique(sentence_of)) >= 2, "geometry's anisotropy baseline needs words from "
            "two sentences at least; raise max_eval_sentences")
    pairs = rng.integers(0, len(sentence_of), size=(count, 2))
    same = sentence_of[pairs[:, 0]] == sentence_of[pairs[:, 1]]
    while same.any():
        pairs[same, 1] = rng.integers(0, len(sentence_of), size=int(same.sum()))
        same = sentence_of[pairs[:, 0]] == sentence_of[pairs[:, 1]]
    return pairs


def build_type_occurrences(sentences: list[ProbeSentence], offsets: np.ndarray,
                           min_occurrences: int) -> dict[str, np.ndarray]:
    """Lower-cased word type → its word indices, the first occurrence in each sentence (a
    type "appears in sentences s1 … sn at indices i1 … in"), for types in enough sentences."""
    occurrences: dict[str, list[int]] = defaultdict(list)
    for index, sentence in enumerate(sentences):
        seen: set[str] = set()
        for position, word in enumerate(sentence.words):
            key = word.lower()
            if key not in seen:
                seen.add(key)
                occurrences[key].append(int(offsets[index]) + position)
    return {word: np.array(indices) for word, indices in sorted(occurrences.items())
            if len(indices) >= min_occurrences}


def build_sample_plan(sentences: list[ProbeSentence], offsets: np.ndarray,
                      settings: GeometrySettings, seed: int) -> SamplePlan:
    rng = np.random.default_rng(seed)
    pairs = sample_pairs(compute_sentence_of(offsets), settings.pairs, rng)
    occurrences = build_type_occurrences(sentences, offsets, settings.min_occurrences)
    require(occurrences, f"no word type occurs in {settings.min_occurrences} eval sentences, "
            "so self-similarity is undefined; raise max_eval_sentences or lower "
            "analysis.geometry.min_occurrences")
    words = list(occurrences)
    chosen = rng.choice(len(words), size=min(settings.max_types, len(words)), replace=False)
    types = [occurrences[words[i]] for i in sorted(chosen)]
    total = int(offsets[-1])
    cka_words = (np.sort(rng.choice(total, size=MAX_CKA_WORDS, replace=False))
                 if total > MAX_CKA_WORDS else np.arange(total))
    return SamplePlan(pairs, types, cka_words)


# ---------------------------------------------------------------- the measures


def compute_unit_rows(vectors: np.ndarray) -> np.ndarray:
    """(n, dim) float64 rows scaled to unit length (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), EPS)


def compute_anisotropy(vectors: np.ndarray, pairs: np.ndarray) -> float:
    """Mean cosine similarity of the (pairs, 2) word pairs: ~0 in an isotropic space."""
    first = compute_unit_rows(vectors[pairs[:, 0]])
    second = compute_unit_rows(vectors[pairs[:, 1]])
    return float(np.mean(np.sum(first * second, axis=1)))


def compute_mean_pairwise_cosine(vectors: np.ndarray) -> float:
    """SelfSim (Ethayarajh, Eq. 1): the mean cosine over the n(n-1) ordered pairs j ≠ k of the
    (n, dim) vectors, via ||Σ u||² = Σ_jk u_j·u_k = n + Σ_{j≠k} u_j·u_k for unit rows u."""
    units = compute_unit_rows(vectors)
    count = len(units)
    total = units.sum(axis=0)
    return float((total @ total - count) / (count * (count - 1)))


def compute_self_similarity(vectors: np.ndarray, types: list[np.ndarray]) -> float:
    """Self-similarity of each word type across its contexts, averaged over types."""
    return float(np.mean([compute_mean_pairwise_cosine(vectors[indices]) for indices in types]))


def compute_mev(vectors: np.ndarray) -> float:
    """MEV (Ethayarajh, Eq. 3): σ1² / Σ σi² of the (n, dim) occurrence matrix, uncentred. The
    σi² are the eigenvalues of its smaller Gram matrix, cheaper than an SVD."""
    vectors = np.asarray(vectors, dtype=np.float64)
    gram = vectors @ vectors.T if len(vectors) <= vectors.shape[1] else vectors.T @ vectors
    return float(np.linalg.eigvalsh(gram)[-1] / max(np.trace(gram), EPS))


def compute_mean_mev(vectors: np.ndarray, types: list[np.ndarray]) -> float:
    return float(np.mean([compute_mev(vectors[indices]) for indices in types]))


def compute_sentence_intra(vectors: np.ndarray, offsets: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
    """(sentences,) each sentence's mean cosine between its words and its mean vector, and
    (sentences,) whether it counts (two words or more: a one-word sentence is trivially 1)."""
    units = compute_unit_rows(vectors)
    lengths = np.diff(offsets)
    cumulative = np.concatenate([np.zeros((1, vectors.shape[1])),
                                 np.cumsum(np.asarray(vectors, dtype=np.float64), axis=0)])
    sums = cumulative[offsets[1:]] - cumulative[offsets[:-1]]  # (sentences, dim)
    sentence_of = compute_sentence_of(offsets)
    cosines = np.sum(units * compute_unit_rows(sums)[sentence_of], axis=1)  # (words,)
    per_sentence = np.bincount(sentence_of, weights=cosines, minlength=len(lengths))
    keep = lengths >= 2
    require(keep.any(), "geometry's intra-sentence similarity needs a sentence of two words")
    return per_sentence / np.maximum(lengths, 1), keep.astype(np.float64)


def compute_intra_similarity(vectors: np.ndarray, offsets: np.ndarray) -> float:
    """IntraSim (Ethayarajh, Eq. 2): per sentence, the mean cosine between each word and the
    sentence's mean vector, averaged over sentences of two words or more."""
    values, keep = compute_sentence_intra(vectors, offsets)
    return float(np.mean(values[keep > 0]))


# ---------------------------------------------------------------- item replicates


def compute_anisotropy_replicates(vectors: np.ndarray, pairs: np.ndarray,
                                  sentence_of: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(resamples,) anisotropy on resampled sentences (module docstring): the pairs' cosines
    weighted by m_a·m_b, weights (resamples, sentences) the sentences' multiplicities."""
    cosines = np.sum(compute_unit_rows(vectors[pairs[:, 0]])
                     * compute_unit_rows(vectors[pairs[:, 1]]), axis=1)  # (pairs,)
    both = weights[:, sentence_of[pairs[:, 0]]] * weights[:, sentence_of[pairs[:, 1]]]
    total = both.sum(axis=1)  # (resamples,)
    return np.where(total > 0, both @ cosines / np.maximum(total, EPS), np.nan)


def compute_self_similarity_replicates(vectors: np.ndarray, types: list[np.ndarray],
                                       sentence_of: np.ndarray, weights: np.ndarray
                                       ) -> np.ndarray:
    """(resamples,) self-similarity on resampled sentences (module docstring). For unit rows
    u with multiplicities m, Σ_j≠k m_j m_k u_j·u_k = ||Σ m_j u_j||² − Σ m_j², so a type costs
    one (resamples, n) × (n, dim) product."""
    values = []
    for indices in types:
        m = weights[:, sentence_of[indices]]  # (resamples, n): one occurrence per sentence
        total = m @ compute_unit_rows(vectors[indices])  # (resamples, dim)
        squares = (m ** 2).sum(axis=1)
        pairs = m.sum(axis=1) ** 2 - squares  # Σ_j≠k m_j m_k
        values.append(np.where(pairs > 0, ((total ** 2).sum(axis=1) - squares)
                               / np.maximum(pairs, 1.0), np.nan))
    stacked = np.stack(values)  # (types, resamples), nan where a type has no pair
    defined = np.isfinite(stacked)
    count = defined.sum(axis=0)
    return np.where(count > 0, np.where(defined, stacked, 0.0).sum(axis=0)
                    / np.maximum(count, 1), np.nan)


def compute_layer_replicates(vectors: np.ndarray, plans: dict[int, SamplePlan],
                             offsets: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """(resamples,) replicates of the seeds' mean of every measure but MEV, one layer."""
    sentence_of = compute_sentence_of(offsets)
    values, keep = compute_sentence_intra(vectors, offsets)
    intra = (weights @ (values * keep)) / np.maximum(weights @ keep, EPS)
    per_seed = []
    for plan in plans.values():
        anisotropy = compute_anisotropy_replicates(vectors, plan.pairs, sentence_of, weights)
        self_similarity = compute_self_similarity_replicates(vectors, plan.types, sentence_of,
                                                             weights)
        per_seed.append({"anisotropy": anisotropy, "self_similarity": self_similarity,
                         "intra_similarity": intra,
                         "self_similarity_adjusted": self_similarity - anisotropy,
                         "intra_similarity_adjusted": intra - anisotropy})
    return {key: np.mean([seed[key] for seed in per_seed], axis=0) for key in per_seed[0]}


def compute_linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA (Kornblith et al., 2019, Eq. 5) of (n, d1) and (n, d2) representations of
    the same n examples: ||YᵀX||²_F / (||XᵀX||_F ||YᵀY||_F) on column-centred features; 1 for
    the same space up to rotation and isotropic scaling. float64: the norms are of squares."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    x = x - x.mean(axis=0)
    y = y - y.mean(axis=0)
    cross = np.linalg.norm(y.T @ x) ** 2
    return float(cross / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def compute_layer_geometry(vectors: np.ndarray, plan: SamplePlan,
                           offsets: np.ndarray) -> dict[str, float]:
    """Every measure of one layer's (words, dim) vectors; the adjusted ones subtract the
    layer's anisotropy, as Ethayarajh does so that layers are comparable."""
    anisotropy = compute_anisotropy(vectors, plan.pairs)
    self_similarity = compute_self_similarity(vectors, plan.types)
    intra_similarity = compute_intra_similarity(vectors, offsets)
    return {"anisotropy": anisotropy, "self_similarity": self_similarity,
            "intra_similarity": intra_similarity,
            "self_similarity_adjusted": self_similarity - anisotropy,
            "intra_similarity_adjusted": intra_similarity - anisotropy,
            "mev": compute_mean_mev(vectors, plan.types)}


# ---------------------------------------------------------------- the run


def load_series(ctx: ProbeContext) -> dict[str, Features]:
    series = {"model": ctx.features("model", "eval"), "random": ctx.features("random", "eval")}
    for which, key in (("compare", "compare_to"), ("compare_twin", "compare_to_twin")):
        if getattr(ctx.config, key) is not None:
            series[which] = ctx.features(which, "eval")
            if series[which].num_layers != series["model"].num_layers:
                log.warning("%s has %d layers, the model %d: CKA covers the layers both have",
                            key, series[which].num_layers, series["model"].num_layers)
    return series


# encoder -> (the encoder it is compared with by CKA, the column): the model against the random
# twin (cka_random) and against compare_to (cka); the twin against compare_to_twin (cka)
CKA_PAIRS = {"model": (("random", "cka_random"), ("compare", "cka")),
             "random": (("compare_twin", "cka"),)}
MEASURED = ("model", "random", "compare")  # encoders whose own geometry is measured


def compute_layer_rows(layer: int, vectors: dict[str, np.ndarray], plans: dict[int, SamplePlan],
                       offsets: np.ndarray) -> list[dict]:
    """The table's rows of one layer: a row per (encoder, seed); the model's rows carry CKA
    against the random model (cka_random) and against compare_to (cka)."""
    rows = []
    for seed, plan in plans.items():
        for name, x in vectors.items():
            if name not in MEASURED:
                continue  # compare_twin: read by the twin's CKA only
            row = {"model": name, "layer": layer, "seed": seed,
                   **compute_layer_geometry(x, plan, offsets)}
            words = plan.cka_words
            for other, column in CKA_PAIRS.get(name, ()):
                if other in vectors:
                    row[column] = compute_linear_cka(x[words], vectors[other][words])
            rows.append(row)
    return rows


def run(ctx: ProbeContext, settings: GeometrySettings) -> dict[str, float]:
    sentences = ctx.sentences("eval")
    series = load_series(ctx)
    offsets = series["model"].offsets
    require(len(sentences) == series["model"].num_sentences, "geometry: features and sentences "
            "disagree; clear the features cache (paths.cache_dir)")
    plans = {seed: build_sample_plan(sentences, offsets, settings, seed)
             for seed in ctx.config.seeds}
    log.info("geometry: %d word pairs, %d word types in ≥ %d sentences, %d words for CKA",
             settings.pairs, len(plans[ctx.config.seeds[0]].types), settings.min_occurrences,
             len(plans[ctx.config.seeds[0]].cka_words))
    layers = max(features.num_layers for features in series.values())
    weights = resample_counts(bootstrap_indices(len(sentences)))  # (resamples, sentences)
    rows, columns = [], {}
    for layer in tqdm(range(layers + 1), desc="geometry", unit="layer"):
        vectors = {name: features.layer(layer) for name, features in series.items()
                   if layer <= features.num_layers}
        rows.extend(compute_layer_rows(layer, vectors, plans, offsets))
        for name, x in ((n, x) for n, x in vectors.items() if n in MEASURED):
            prefix = "geometry" if name == "model" else f"geometry/{name}"
            columns.update({f"{prefix}/layer_{layer:02d}/{key}": reps for key, reps in
                            compute_layer_replicates(x, plans, offsets, weights).items()})
    task = ctx.config.task.name
    write_table(ctx.out_dir, f"geometry_{task}", rows)
    write_replicates(ctx.out_dir, f"geometry_{task}", columns, compute_sentence_ids(sentences),
                     ctx.splits.eval_pool)
    plot_layer_curves(rows, list(MEASURES), f"contextuality (Ethayarajh, 2019): {task}",
                      ctx.out_dir, f"geometry_{task}", keys=encoder_keys(
                          "geometry", compare="geometry/compare/layer_{layer:02d}/{metric}"))
    if ctx.config.compare_to is not None:
        plot_cka(rows, ctx, task)
    return collect_metrics(rows)


CKA_LABELS = {("model", "cka"): "vs compare_to", ("model", "cka_random"): "vs random init",
              ("random", "cka"): "random init vs compare_to_twin"}
# each CKA curve's metrics.json key (collect_metrics)
CKA_KEYS = {label: f"geometry/{'' if model == 'model' else model + '/'}layer_{{layer:02d}}/{column}"
            for (model, column), label in CKA_LABELS.items()}


def plot_cka(rows: list[dict], ctx: ProbeContext, task: str) -> None:
    """Per layer, the model's CKA with compare_to and with its random-initialised twin, and
    the twin's with compare_to_twin (the twin after the same fine-tuning)."""
    pairs = [{"pair": label, "layer": row["layer"], "seed": row["seed"], "cka": row[column]}
             for row in rows for (model, column), label in CKA_LABELS.items()
             if row["model"] == model and column in row]
    plot_layer_curves(pairs, ["cka"], f"linear CKA (Kornblith et al., 2019): {task}",
                      ctx.out_dir, f"geometry_cka_{task}", series="pair",
                      keys=lambda series, metric: CKA_KEYS.get(series))


def collect_metrics(rows: list[dict]) -> dict[str, float]:
    """Means over seeds: geometry/[random/|compare/]layer_LL/<measure>, the model's CKA, and
    the model's most context-specific layer (lowest adjusted self-similarity) and, with
    compare_to, the layer that changed most (lowest CKA)."""
    values: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        prefix = "geometry" if row["model"] == "model" else f"geometry/{row['model']}"
        for key, value in row.items():
            if key not in ("model", "layer", "seed"):
                values[f"{prefix}/layer_{row['layer']:02d}/{key}"].append(value)
    metrics = {}
    for key, samples in values.items():
        mean = float(np.mean(samples))
        if math.isfinite(mean):
            metrics[key] = mean
        else:
            log.warning("geometry: %s is not finite and is left out", key)
    for measure in ("self_similarity_adjusted", "cka"):
        by_layer = {int(key.split("/")[1][6:]): value for key, value in metrics.items()
                    if key.startswith("geometry/layer_") and key.endswith(f"/{measure}")}
        if by_layer:
            metrics[f"geometry/min_layer/{measure}"] = float(min(by_layer, key=by_layer.get))
    return metrics
