"""Where linear word order lives: a linear probe per layer for each word's position in its
sentence (Lin et al., 2019, "Open Sesame", §4: BERT's lower layers encode linear position
best, and the information fades with depth; the survey §4.3).

Labels are word indices 0, 1, …, max_position − 1, with every later word in one last class
(the first sub-word of each word is read, as for every word-level probe). The probe is the
logistic regression of the linear analysis (probes.fit_logistic, its c and max_iter); the
majority baseline always predicts the most frequent train position. Scores are means over
the probe seeds, which draw the training-word sample; item replicates resample eval sentences.
"""

from __future__ import annotations

import logging

import numpy as np
from tqdm.auto import tqdm

from bertology.analysis.probes import Units, fit_logistic, sample, unit_features
from bertology.config.probe import PositionSettings
from bertology.run.figures import plot_layer_curves
from bertology.run.replicates import bootstrap_indices, compute_ratio_replicates, write_replicates
from bertology.run.tables import write_table

log = logging.getLogger(__name__)


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
    """Probe every layer for position; return per-layer accuracies (means over seeds)."""
    classes = settings.max_position + 1
    train, _ = position_units(ctx, "train", settings.max_position)
    evaluation, sentence_of = position_units(ctx, "eval", settings.max_position)
    sentences = len(ctx.sentences("eval"))
    indices = bootstrap_indices(sentences)
    train_features, eval_features = ctx.features("model", "train"), ctx.features("model",
                                                                                 "eval")
    rows, columns = [], {}
    for layer in tqdm(range(train_features.num_layers + 1), desc="position probes"):
        x_eval = unit_features(eval_features.layer(layer), evaluation.rows)
        per_seed = []
        for seed in ctx.config.seeds:
            units = sample(train, settings.max_train_words, seed)
            x_train = unit_features(train_features.layer(layer), units.rows)
            proba = fit_logistic(x_train, units.labels, classes, settings, seed)(x_eval)
            correct = (proba.argmax(axis=1) == evaluation.labels).astype(np.float64)
            rows.append({"model": "position", "layer": layer, "seed": seed,
                         "accuracy": float(correct.mean())})
            per_seed.append(correct_by_sentence(correct, sentence_of, sentences))
        hits = np.mean([h for h, _ in per_seed], axis=0)  # the seeds' mean, per sentence
        columns[f"position/layer_{layer:02d}/accuracy"] = compute_ratio_replicates(
            hits, per_seed[0][1], indices)
    majority = float((evaluation.labels == np.bincount(train.labels).argmax()).mean())
    name = f"position_{ctx.config.task.name}"
    write_table(ctx.out_dir, name, rows)
    write_replicates(ctx.out_dir, name, columns)
    plot_layer_curves(rows, ["accuracy"], f"position probe ({classes} classes): "
                      f"{ctx.config.task.name}", ctx.out_dir, name,
                      baselines=[{"model": "majority position", "accuracy": majority}])
    metrics = {"position/majority_accuracy": majority}
    for layer in range(train_features.num_layers + 1):
        metrics[f"position/layer_{layer:02d}/accuracy"] = float(np.mean(
            [r["accuracy"] for r in rows if r["layer"] == layer]))
    return metrics
