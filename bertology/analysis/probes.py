"""Layer-wise probing classifiers: what each layer encodes linearly (or with an MLP), and how
much of it a probe could have memorised instead (the survey's §3-§4).

For every layer 0 (embeddings) … L and every seed:
- the task probe (logistic regression, scikit-learn; or a one-hidden-layer MLP, torch),
- the control task of Hewitt & Liang (2019): each word type gets a fixed random label drawn
  from the task's label distribution, so a probe can only solve it by memorising word
  identity; selectivity = task accuracy − control accuracy,
- the same task probe on a random-initialised model of the same architecture, so that what
  pretraining adds shows apart from what the architecture and word identity give,
- optionally the online code length of the labels (MDL probing, Voita & Titov, 2020, §3.2):
  units in a seeded order are cut at 0.1%, 0.2%, 0.4%, …, 50%, 100%; the first block costs
  log2 K bits a label, each later block −log2 p(y|x) under a probe fit on the blocks before
  it; compression = n·log2 K / code length (analysis/mdl.py). As theirs, the probe is a
  softmax over all K classes (mdl.fit_softmax, probe_fits.fit_mlp), so a label the prefix
  lacks costs finite bits. With the control task on, the control labels get a code too, and
  the gap. The probes are fitted in analysis/probe_fits.py.
Seeds draw the training-word sample, the control labels, the MDL order and the MLP's initial
weights. Item replicates (run/replicates.py) resample the eval sentences, a sentence's units
together (a cluster bootstrap), and re-score the fitted probes' predictions on each resample:
the probe stays fixed, only the items it is scored on vary.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
from tqdm.auto import tqdm

from bertology.analysis.degenerate import require_classes, require_units, skipped, word_offsets
from bertology.analysis.features import Features
from bertology.analysis.mdl import compute_mdl_metrics
from bertology.analysis.probe_fits import FITS, MDL_FITS, compute_accuracy
from bertology.config.analysis_settings import LinearSettings, MLPSettings
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require
from bertology.run.figures import CONTROL, encoder_keys, plot_layer_curves
from bertology.run.replicates import (
    bootstrap_indices,
    compute_ratio_replicates,
    compute_sentence_ids,
    write_replicates,
)
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Units:
    """The labelled units of one split: rows into the features' word axis, (n,) for words
    or (n, 2) for edges (dependent, head), their label ids and their word types."""

    rows: np.ndarray
    labels: np.ndarray
    types: list[str]


def build_units(sentences: list[ProbeSentence], features: Features, unit: str,
                label_names: list[str]) -> Units:
    """Every labelled word (unit=word), or every dependent-head edge (unit=edge, edge
    probing: Tenney et al., 2019b); labels outside label_names are left out."""
    rows, labels, types = [], [], []
    for i, sentence in enumerate(sentences):
        start = int(features.offsets[i])
        for j, label in enumerate(sentence.labels):
            if label is None or label not in label_names:
                continue
            if unit == "word":
                rows.append(start + j)
                types.append(sentence.words[j].lower())
            else:
                if sentence.heads[j] == 0:  # the root has no head word to pair with
                    continue
                head = sentence.heads[j] - 1
                rows.append((start + j, start + head))
                types.append(f"{sentence.words[j].lower()}|{sentence.words[head].lower()}")
            labels.append(label_names.index(label))
    return Units(np.array(rows, dtype=np.int64), np.array(labels, dtype=np.int64), types)


def label_set(sentences: list[ProbeSentence]) -> list[str]:
    """The train split's labels, most frequent first."""
    counts = Counter(label for s in sentences for label in s.labels if label is not None)
    return [label for label, _ in counts.most_common()]


def compute_control_labels(types: list[str], distribution: np.ndarray, seed: int
                           ) -> dict[str, int]:
    """Hewitt & Liang (2019) §2: one label per word type, drawn once from the empirical label
    distribution; the same type always gets the same label, in train and eval alike."""
    rng = np.random.default_rng(seed)
    vocabulary = sorted(set(types))
    drawn = rng.choice(len(distribution), size=len(vocabulary), p=distribution)
    return dict(zip(vocabulary, drawn.tolist()))


def unit_features(layer: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(units, dim), or (units, 2·dim) for edges: [h_dependent; h_head]."""
    if rows.ndim == 1:
        return layer[rows]
    return np.concatenate([layer[rows[:, 0]], layer[rows[:, 1]]], axis=1)


def sample(units: Units, limit: int | None, seed: int) -> Units:
    """A seeded subsample of the training units (the seeds' source of variation)."""
    if limit is None or limit >= len(units.labels):
        return units
    keep = np.sort(np.random.default_rng(seed).choice(len(units.labels), limit, replace=False))
    return Units(units.rows[keep], units.labels[keep], [units.types[i] for i in keep])


# ---------------------------------------------------------------- one layer, one seed


@dataclass(frozen=True)
class ProbeData:
    """One encoder's units on both splits, with the label set and the control labels' source."""

    train: Units
    eval: Units
    classes: int
    distribution: np.ndarray  # the train labels' empirical distribution
    eval_sentence: np.ndarray | None = None  # (eval units,) each unit's sentence (bootstrap)
    eval_sentences: int = 0  # sentences of the eval split, units or not


def probe_layer(kind: str, settings, data: ProbeData, train_layer: np.ndarray,
                eval_layer: np.ndarray, seed: int, control: bool) -> dict[str, float]:
    """Task accuracy (+ control accuracy and selectivity, + MDL of the task and, with the
    control task on, of the control task) of one layer and seed."""
    return score_layer(kind, settings, data, train_layer, eval_layer, seed, control)[0]


def score_layer(kind: str, settings, data: ProbeData, train_layer: np.ndarray,
                eval_layer: np.ndarray, seed: int, control: bool
                ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """probe_layer's row, and the (eval units,) 0/1 hits behind its accuracies."""
    fit = FITS[kind]
    train = sample(data.train, settings.max_train_words, seed)
    x_train = unit_features(train_layer, train.rows)
    x_eval = unit_features(eval_layer, data.eval.rows)
    proba = fit(x_train, train.labels, data.classes, settings, seed)(x_eval)
    hits = {"accuracy": (proba.argmax(axis=1) == data.eval.labels).astype(np.float64)}
    row = {"accuracy": compute_accuracy(proba, data.eval.labels)}
    y_control = None
    if control:
        mapping = compute_control_labels([*data.train.types, *data.eval.types], data.distribution,
                                         seed)
        y_control = np.array([mapping[t] for t in train.types])
        y_eval = np.array([mapping[t] for t in data.eval.types])
        proba = fit(x_train, y_control, data.classes, settings, seed)(x_eval)
        hits["control_accuracy"] = (proba.argmax(axis=1) == y_eval).astype(np.float64)
        row["control_accuracy"] = compute_accuracy(proba, y_eval)
        row["selectivity"] = row["accuracy"] - row["control_accuracy"]
    if settings.mdl:
        row.update(compute_mdl_metrics(
            lambda x, y, s: MDL_FITS[kind](x, y, data.classes, settings, s),
            x_train, train.labels, y_control, data.classes, seed))
    return row, hits


def compute_unit_sentences(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(units,) the sentence of each unit (an edge's: its dependent's), from the features'
    (sentences + 1,) word offsets."""
    words = rows if rows.ndim == 1 else rows[:, 0]
    return np.searchsorted(offsets, words, side="right") - 1


def compute_hit_replicates(hits: list[dict[str, np.ndarray]], data: ProbeData,
                           indices: np.ndarray) -> dict[str, np.ndarray]:
    """Replicates of one layer's seed-mean accuracies over resampled eval sentences: per
    sentence the seeds' mean hits over its units (Σ hits / Σ units on each resample, as the
    accuracy pools units); selectivity is task − control on the same resample."""
    units = np.bincount(data.eval_sentence, minlength=data.eval_sentences).astype(np.float64)
    out = {}
    for key in hits[0]:
        correct = np.mean([np.bincount(data.eval_sentence, weights=h[key],
                                       minlength=data.eval_sentences) for h in hits], axis=0)
        out[key] = compute_ratio_replicates(correct, units, indices)
    if "control_accuracy" in out:
        out["selectivity"] = out["accuracy"] - out["control_accuracy"]
    return out


def build_probe_data(ctx, which: str, names: list[str]) -> ProbeData:
    unit = ctx.config.task.probe_unit
    train = build_units(ctx.sentences("train"), ctx.features(which, "train"), unit, names)
    evaluation = build_units(ctx.sentences("eval"), ctx.features(which, "eval"), unit, names)
    require(len(train.labels) and len(evaluation.labels),
            f"task={ctx.config.task.name}: no labelled {unit}s to probe; check the data files")
    counts = np.bincount(train.labels, minlength=len(names))
    offsets = ctx.features(which, "eval").offsets
    return ProbeData(train, evaluation, len(names), counts / counts.sum(),
                     compute_unit_sentences(offsets, evaluation.rows), len(offsets) - 1)


def probe_encoder(ctx, kind: str, settings, which: str, data: ProbeData
                  ) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Rows (model, layer, seed, metrics...) for every layer and seed of one encoder, and the
    item replicates of each layer's seed-mean accuracies (`layer_LL/<metric>`)."""
    train_features, eval_features = ctx.features(which, "train"), ctx.features(which, "eval")
    layers = range(train_features.num_layers + 1)
    indices = bootstrap_indices(data.eval_sentences)
    rows, columns = [], {}
    progress = tqdm(total=len(layers) * len(ctx.config.seeds), unit="probe",
                    desc=f"{kind} probes ({which})")
    for layer in layers:
        train_layer, eval_layer = train_features.layer(layer), eval_features.layer(layer)
        hits = []
        for seed in ctx.config.seeds:
            # the twin's control task too: its selectivity is the null for the model's
            # (mlp_less_selective compares linear − MLP selectivity with the twin's)
            metrics, seed_hits = score_layer(kind, settings, data, train_layer, eval_layer, seed,
                                             control=settings.control)
            rows.append({"model": which, "layer": layer, "seed": seed, **metrics})
            hits.append(seed_hits)
            progress.update()
        columns.update({f"layer_{layer:02d}/{key}": reps for key, reps in
                        compute_hit_replicates(hits, data, indices).items()})
    progress.close()
    return rows, columns


# ---------------------------------------------------------------- the analyses


def run_linear(ctx, settings: LinearSettings) -> dict[str, float]:
    return run_probes(ctx, settings, "linear", prefix="probe")


def run_mlp(ctx, settings: MLPSettings) -> dict[str, float]:
    return run_probes(ctx, settings, "mlp", prefix="mlp")


def run_probes(ctx, settings, kind: str, prefix: str) -> dict[str, float]:
    """Probe every layer of the model (and of its random-initialised twin), write the table
    and the layer curves, and return the per-layer means over seeds."""
    names = label_set(ctx.sentences("train"))
    require(len(names) >= 2, f"task={ctx.config.task.name} has {len(names)} label(s) in its "
            "train sentences; a probe needs at least two")
    settings, notes = check_units(ctx, settings, names, prefix)  # before any extraction
    # The units index words of ctx.sentences, which every encoder's features share
    data = build_probe_data(ctx, "model", names)
    encoders = ["model", "random"] if settings.random_init else ["model"]
    rows, columns = [], {f"{prefix}/majority_accuracy": majority_replicates(data)}
    for which in encoders:
        encoder_rows, encoder_columns = probe_encoder(ctx, kind, settings, which, data)
        scope = prefix if which == "model" else f"{prefix}/{which}"
        rows += encoder_rows
        columns.update({f"{scope}/{key}": reps for key, reps in encoder_columns.items()})
    name = f"{kind}_{ctx.config.task.name}"
    write_table(ctx.out_dir, name, rows)
    # the eval sentences, in the order the replicates resample them (the report's overlap)
    write_replicates(ctx.out_dir, name, columns, compute_sentence_ids(ctx.sentences("eval")),
                     ctx.splits.eval_pool)
    title = f"{kind} probe: {ctx.config.task.name}"
    if seeds_vary_only_the_control(kind, settings, data, ctx.config.seeds):
        log.info("%s probe: every seed trains on the same %d words (max_train_words=%s) and "
                 "L-BFGS is deterministic, so the seeds %s vary only the control task's labels; "
                 "for seeds that sample other sentences run one job per seed (seed=0,1,2)",
                 kind, len(data.train.labels), settings.max_train_words, ctx.config.seeds)
        title += "\n(the task probe is deterministic: the seeds vary only the control labels)"
    plot_layer_curves(curve_rows(rows), ["accuracy", "selectivity"], title, ctx.out_dir, name,
                      keys=curve_keys(prefix))
    return {**summarise(rows, prefix, majority=majority_accuracy(data)), **notes}


def check_units(ctx, settings, names: list[str], prefix: str) -> tuple[object, dict[str, float]]:
    """What the probes need, from the sentences alone: labelled units in both
    splits and two classes among the train units (else one line); and two classes among every
    seed's control labels, else the control task is skipped with a note (one word type, or a
    draw that gave every type one label, leaves it nothing to learn)."""
    task, unit = ctx.config.task.name, ctx.config.task.probe_unit
    fix = "check the data files (and max_train_sentences, task.max_seq_length)"
    units = {split: build_units(ctx.sentences(split), word_offsets(ctx.sentences(split)), unit,
                                names) for split in ("train", "eval")}
    for split, found in units.items():
        require_units(len(found.labels), f"task={task}: the {split} split's labelled {unit}s", fix)
    train = units["train"]
    require_classes(train.labels, names, f"task={task}: the train split's {unit}s", fix)
    if not settings.control:
        return settings, {}
    counts = np.bincount(train.labels, minlength=len(names))
    for seed in ctx.config.seeds:
        mapping = compute_control_labels([*train.types, *units["eval"].types],
                                         counts / counts.sum(), seed)
        if len({mapping[t] for t in sample(train, settings.max_train_words, seed).types}) < 2:
            return replace(settings, control=False), skipped(
                f"{prefix}/skipped/control_task",
                f"the control task (Hewitt & Liang, 2019: one random label per word type) has "
                f"one class among seed {seed}'s train {unit}s ({len(set(train.types))} word "
                "type(s)); no control accuracy or selectivity")
    return settings, {}


def seeds_vary_only_the_control(kind: str, settings, data: ProbeData, seeds: list) -> bool:
    """Whether the probe seeds change nothing but the control labels: a linear probe (L-BFGS
    from zero on a convex objective) on every training word (`sample` draws no subsample)."""
    everything = sample(data.train, settings.max_train_words, seed=0) is data.train
    return kind == "linear" and everything and len(seeds) > 1


def curve_rows(rows: list[dict]) -> list[dict]:
    """The plot's series: the task accuracy of the model and of its random-init twin, and
    each one's control task apart (CONTROL: its own line, tied to its own metrics.json key)."""
    out = []
    for row in rows:
        out.append(row)
        if "control_accuracy" in row:
            out.append({"model": CONTROL[row["model"]], "layer": row["layer"],
                        "seed": row["seed"], "accuracy": row["control_accuracy"]})
    return out


def curve_keys(prefix: str):
    """The metrics.json key of every curve in the figure (figures.encoder_keys)."""
    scopes = {"model": "", "random": "random/"}
    return encoder_keys(prefix, **{CONTROL[which]: f"{prefix}/{scope}layer_{{layer:02d}}/"
                                   "control_accuracy" for which, scope in scopes.items()})


def majority_accuracy(data: ProbeData) -> float:
    """Accuracy of always predicting the most frequent train label, on the eval units."""
    return float((data.eval.labels == int(np.argmax(data.distribution))).mean())


def majority_replicates(data: ProbeData) -> np.ndarray:
    """majority_accuracy on the resamples of the eval sentences the probes' replicates use,
    so that a probe − majority difference pairs them resample by resample."""
    hits = (data.eval.labels == int(np.argmax(data.distribution))).astype(np.float64)
    return compute_hit_replicates([{"accuracy": hits}], data,
                                  bootstrap_indices(data.eval_sentences))["accuracy"]


def summarise(rows: list[dict], prefix: str, majority: float) -> dict[str, float]:
    """Means over seeds: `probe/layer_07/accuracy`, `probe/random/layer_07/accuracy`, ...;
    the best layer by task accuracy, and the majority-class baseline."""
    metrics = {f"{prefix}/majority_accuracy": majority}
    groups: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["layer"]), []).append(row)
    for (which, layer), group in groups.items():
        scope = prefix if which == "model" else f"{prefix}/{which}"
        for key in group[0]:
            if key not in ("model", "layer", "seed"):
                metrics[f"{scope}/layer_{layer:02d}/{key}"] = statistics.fmean(
                    row[key] for row in group)
    best = max((layer for which, layer in groups if which == "model"),
               key=lambda layer: metrics[f"{prefix}/layer_{layer:02d}/accuracy"])
    metrics[f"{prefix}/best_layer"] = float(best)
    metrics[f"{prefix}/best_layer/accuracy"] = metrics[f"{prefix}/layer_{best:02d}/accuracy"]
    return metrics
