"""Where linear word order lives: a linear probe per layer for each word's position in its
sentence (Lin et al., 2019, "Open Sesame", §4: BERT's lower layers encode linear position
best, and the information fades with depth; the survey §4.3).

Labels are word indices 0, 1, …, max_position − 1, with every later word in one last class
(the first sub-word of each word is read, as for every word-level probe). The probe is the
logistic regression of the linear analysis (probe_fits.fit_logistic, its c and max_iter); the
majority baseline always predicts the most frequent train position. Scores are means over
the probe seeds, which draw the training-word sample; item replicates resample eval sentences.

The same probes run on the random-initialised twin (`position/random/layer_LL/accuracy`):
an untrained encoder adds its position embeddings to every token, so position is linearly
readable from it too, and the twin is the null for what pretraining adds. Both encoders train
on the same word samples and share one set of sentence resamples (paired replicates).
"""

from __future__ import annotations

import logging

import numpy as np
from tqdm.auto import tqdm

from bertology.analysis.probe_fits import fit_logistic
from bertology.analysis.probes import Units, sample, unit_features
from bertology.config.analysis_settings import PositionSettings
from bertology.errors import require
from bertology.run.figures import encoder_keys, plot_layer_curves
from bertology.run.replicates import (
    bootstrap_indices,
    compute_ratio_replicates,
    compute_sentence_ids,
    write_replicates,
)
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

# The model, and the same architecture with fresh weights (probe_context.ENCODERS' "random"): a
# claim about what pretraining put in the model is a contrast with this twin, which already
# knows some position from its position embeddings (Hewitt & Liang's point for probes, 2019)
POSITION_ENCODERS = ("model", "random")
POSITION_PREFIX = {"model": "position", "random": "position/random"}


def position_units(ctx, split: str, max_position: int) -> tuple[Units, np.ndarray]:
    """Every word of the split as a unit labelled by its (capped) index, and each unit's
    sentence (for the cluster bootstrap)."""
    features = ctx.features("model", split)
    rows, labels, types, sentence_of = [], [], [], []
    for i, sentence in enumerate(ctx.sentences(split)):
        start = int(features.offsets[i])
        for j, word in enumerate(sentence.words):
            rows.append(start + j)
            labels.append(min(j, max_position))
            types.append(word.lower())
            sentence_of.append(i)
    units = Units(np.array(rows, dtype=np.int64), np.array(labels, dtype=np.int64), types)
    return units, np.array(sentence_of, dtype=np.int64)


def correct_by_sentence(correct: np.ndarray, sentence_of: np.ndarray, sentences: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(correct words, words) per sentence."""
    return (np.bincount(sentence_of, weights=correct, minlength=sentences),
            np.bincount(sentence_of, minlength=sentences).astype(np.float64))


def run(ctx, settings: PositionSettings) -> dict[str, float]:
    """Probe every layer of the model and of its random-init twin for position; return
    per-layer accuracies (means over seeds)."""
    classes = settings.max_position + 1
    positions = {min(j, settings.max_position) for s in ctx.sentences("train")
                 for j in range(len(s.words))}
    require(len(positions) >= 2, f"position probe: every train sentence of "
            f"task={ctx.config.task.name} has one word, so every word is at position 0; it "
            "needs sentences of two words or more (check the data files)")  # before extraction
    train, _ = position_units(ctx, "train", settings.max_position)
    evaluation, sentence_of = position_units(ctx, "eval", settings.max_position)
    # One set of resamples for both encoders: replicate r of the model and of the twin score
    # the same sentences, so model − twin is a paired contrast resample by resample
    indices = bootstrap_indices(len(ctx.sentences("eval")))
    rows, columns = [], {}
    for which in POSITION_ENCODERS:
        encoder_rows, encoder_columns = fit_position_probes(ctx, which, settings, train,
                                                      (evaluation, sentence_of), indices)
        rows.extend(encoder_rows)
        columns.update(encoder_columns)
    majority = float((evaluation.labels == np.bincount(train.labels).argmax()).mean())
    name = f"position_{ctx.config.task.name}"
    write_table(ctx.out_dir, name, rows)
    write_replicates(ctx.out_dir, name, columns, compute_sentence_ids(ctx.sentences("eval")),
                     ctx.splits.eval_pool)
    plot_layer_curves(rows, ["accuracy"],
                      f"position probe ({classes} classes): {ctx.config.task.name}",
                      ctx.out_dir, name,
                      baselines=[{"model": "majority position", "accuracy": majority}],
                      keys=encoder_keys("position", **{
                          "majority position": "position/majority_accuracy"}))
    return summarise_position(rows, majority)


def fit_position_probes(ctx, which: str, settings: PositionSettings, train: Units,
                  evaluation: tuple[Units, np.ndarray], indices: np.ndarray
                  ) -> tuple[list[dict], dict[str, np.ndarray]]:
    """One encoder's table rows (a row per layer and seed) and replicate columns (a column
    per layer: the seeds' mean accuracy on each resample of the eval sentences). Every
    encoder trains on the same seeded word samples, so the contrast varies only the weights."""
    units, sentence_of = evaluation
    sentences = indices.shape[1]
    train_features, eval_features = ctx.features(which, "train"), ctx.features(which, "eval")
    prefix = POSITION_PREFIX[which]
    rows, columns = [], {}
    for layer in tqdm(range(train_features.num_layers + 1), desc=f"position probes ({which})"):
        x_eval = unit_features(eval_features.layer(layer), units.rows)
        per_seed = []
        for seed in ctx.config.seeds:
            sampled = sample(train, settings.max_train_words, seed)
            x_train = unit_features(train_features.layer(layer), sampled.rows)
            proba = fit_logistic(x_train, sampled.labels, settings.max_position + 1,
                                 settings, seed)(x_eval)
            correct = (proba.argmax(axis=1) == units.labels).astype(np.float64)
            rows.append({"model": which, "layer": layer, "seed": seed,
                         "accuracy": float(correct.mean())})
            per_seed.append(correct_by_sentence(correct, sentence_of, sentences))
        hits = np.mean([h for h, _ in per_seed], axis=0)  # the seeds' mean, per sentence
        columns[f"{prefix}/layer_{layer:02d}/accuracy"] = compute_ratio_replicates(
            hits, per_seed[0][1], indices)
    return rows, columns


def summarise_position(rows: list[dict], majority: float) -> dict[str, float]:
    """Means over seeds: position/layer_LL/accuracy, position/random/layer_LL/accuracy."""
    metrics = {"position/majority_accuracy": majority}
    groups: dict[str, list[float]] = {}
    for row in rows:
        key = f"{POSITION_PREFIX[row['model']]}/layer_{row['layer']:02d}/accuracy"
        groups.setdefault(key, []).append(row["accuracy"])
    metrics.update({key: float(np.mean(values)) for key, values in groups.items()})
    return metrics
