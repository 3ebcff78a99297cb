"""Decodable vs used: erase the probe task's labels (POS on ud_pos) from a layer's output with
LEACE (Belrose et al., 2023) and measure how much the model's own predictions change (Elazar
et al., 2021's amnesic probing, with LEACE's closed-form eraser in place of INLP).

At each layer L: the eraser is fit on the word-level states of the probe's train sentences at
L (the encoder the readout runs: the fine-tuned classifier's, or the MLM's), applied at L's
output on every token of the readout's inputs through the intervention engine
(interventions.py), and the readout (readouts.py) is scored against its unperturbed
predictions. Controls (erasure.py): a random subspace of the same rank (Elazar et al.'s), and
LEACE of the labels shuffled across words (Hewitt & Liang's control task). With
compare_to_twin, the same on the random-init twin fine-tuned the same way. A linear probe,
retrained on erased states, shows the erasure left the labels undecodable (at the majority
baseline) while the probe before it shows what was decodable.

Metrics, per readout (task | mlm) and layer, erasure_use[/twin]/<readout>/layer_LL/:
<condition>/{flip,kl,accuracy,drop} for concept (LEACE of the labels), subspace and shuffled;
excess (concept flip − subspace flip) and excess_shuffled; probe_before, probe_after,
probe_majority; rank. docs/interventions.md, "Decodable vs used".
"""

from __future__ import annotations

import logging

import numpy as np
from threadpoolctl import threadpool_limits

from bertology.analysis.erasure import (
    Erasure,
    compute_random_erasure,
    compute_shuffled_concept,
    fit_leace,
)
from bertology.analysis.inlp import (
    fit_linear_probe,
    majority_label,
    subsample_words,
)
from bertology.analysis.probe_context import ProbeContext
from bertology.analysis.probes import build_units, label_set
from bertology.analysis.readouts import (
    Readout,
    build_mlm_readout,
    build_task_readout,
    compute_readout_effects,
    load_classifier,
)
from bertology.analysis.use_figure import plot_erasure_use
from bertology.config.analysis_settings import ErasureUseSettings
from bertology.errors import require
from bertology.run.replicates import (
    compute_item_ids,
    compute_ratio_replicates,
    write_replicates,
)
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

ERASURES = ("concept", "subspace", "shuffled")  # the labels' erasure and its two controls


def layer_words(ctx: ProbeContext, which: str, split: str, layer: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(words, dim) float64 states of one encoder at `layer`, (words,) their labels and
    (words,) the sentence each is in, the labelled words of the split."""
    features = ctx.features(which, split)
    units = build_units(ctx.sentences(split), features, "word", label_set(ctx.sentences("train")))
    sentence_of = np.searchsorted(features.offsets, units.rows, side="right") - 1
    return features.layer(layer)[units.rows].astype(np.float64), units.labels, sentence_of


def fit_conditions(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, Erasure]:
    """LEACE of the labels, a random subspace of its rank, LEACE of the labels shuffled. One
    BLAS thread: a (dim, dim) eigendecomposition contending with torch's threads is far
    slower on a loaded CPU (docs/probing.md, "One thread per probe fit")."""
    with threadpool_limits(1, user_api="blas"):
        concept = fit_leace(x, y)
        return {"concept": concept,
                "subspace": compute_random_erasure(x.shape[1], concept.rank, seed),
                "shuffled": fit_leace(x, compute_shuffled_concept(y, seed))}


def apply_rows(erasure: Erasure | None, x: np.ndarray) -> np.ndarray:
    return x if erasure is None else x @ erasure.matrix + erasure.offset  # (words, dim)


def compute_probe_check(train: tuple, evaluation: tuple, erasure: Erasure, settings,
                        seed: int) -> dict[str, np.ndarray]:
    """A linear probe retrained from scratch on the states before and after the erasure, scored
    on the eval words: what is decodable, and that LEACE left nothing a linear probe finds
    (Belrose et al.: at the majority baseline). Per eval word, whether each is right (words,):
    probe_before, probe_after, and probe_majority (the commonest train label)."""
    (x, y), (x_eval, y_eval) = train, evaluation
    x, y = subsample_words(x, y, settings.max_probe_words, seed)
    correct = {}
    for name, erasure_or_none in (("probe_before", None), ("probe_after", erasure)):
        probe = fit_linear_probe(apply_rows(erasure_or_none, x), y, seed)
        correct[name] = probe.predict(apply_rows(erasure_or_none, x_eval)) == y_eval
    return {**correct, "probe_majority": y_eval == majority_label(y)}


def summarize_probe_check(correct: dict[str, np.ndarray], sentence_of: np.ndarray,
                          sentences: int, prefix: str
                          ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The probe accuracies over the eval words and their bootstrap replicates over the eval
    sentences (each an item: its right words over its labelled words), every column on the
    same resamples. A probe left at the majority tag is right on the same words as the
    majority tag, so probe_after − probe_majority is 0 on every resample: a spread measured
    as zero, which the judge reads with the sign test (stats.TTest.p_holds), where without
    replicates it could not tell seeds that agree from one measurement."""
    words = np.bincount(sentence_of, minlength=sentences)
    metrics, replicates = {}, {}
    for name, right in correct.items():
        per_sentence = np.bincount(sentence_of, weights=right.astype(np.float64),
                                   minlength=sentences)
        metrics[f"{prefix}/{name}"] = float(right.mean())
        replicates[f"{prefix}/{name}"] = compute_ratio_replicates(per_sentence, words)
    return metrics, replicates


def summarize_effects(counts: dict[str, dict[str, np.ndarray]], prefix: str
                      ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Ratios of sums over items (metrics) and their bootstrap replicates over items."""
    scored = counts["original"]["scored"]
    metrics, replicates = {}, {}

    def put(key: str, numerator: np.ndarray) -> None:
        metrics[f"{prefix}/{key}"] = float(numerator.sum() / scored.sum())
        replicates[f"{prefix}/{key}"] = compute_ratio_replicates(numerator, scored)

    for c in ERASURES:
        put(f"{c}/flip", counts[c]["flips"])
        put(f"{c}/kl", counts[c]["kl"])
        put(f"{c}/accuracy", counts[c]["correct"])
        put(f"{c}/drop", counts["original"]["correct"] - counts[c]["correct"])
    put("excess", counts["concept"]["flips"] - counts["subspace"]["flips"])
    put("excess_shuffled", counts["concept"]["flips"] - counts["shuffled"]["flips"])
    return metrics, replicates


def measure_layer(ctx: ProbeContext, settings: ErasureUseSettings, readout: Readout,
                  which: str, layer: int, prefix: str) -> tuple[dict, dict, dict, dict]:
    """One layer of one arm: its metrics, the readout's replicates, the probe's replicates
    (over the probe's eval sentences) and its table row."""
    seed = ctx.config.seed
    train = subsample_words(*layer_words(ctx, which, "train", layer)[:2],
                            settings.max_fit_words, seed)
    conditions = fit_conditions(*train, seed)
    x_eval, y_eval, sentence_of = layer_words(ctx, which, "eval", layer)
    correct = compute_probe_check(train, (x_eval, y_eval), conditions["concept"], settings, seed)
    found, probe_replicates = summarize_probe_check(
        correct, sentence_of, len(ctx.sentences("eval")), f"{prefix}/layer_{layer:02d}")
    check = {name: found[f"{prefix}/layer_{layer:02d}/{name}"] for name in correct}
    counts = compute_readout_effects(readout, layer, conditions, desc=f"{prefix} layer {layer}")
    metrics, replicates = summarize_effects(counts, f"{prefix}/layer_{layer:02d}")
    metrics |= found
    metrics[f"{prefix}/layer_{layer:02d}/rank"] = float(conditions["concept"].rank)
    log.info("%s layer %d: flip %.3f (subspace %.3f, shuffled %.3f); probe %.3f -> %.3f "
             "(majority %.3f), rank %d", prefix, layer,
             *(metrics[f"{prefix}/layer_{layer:02d}/{c}/flip"] for c in ERASURES),
             check["probe_before"], check["probe_after"], check["probe_majority"],
             conditions["concept"].rank)
    row = {"arm": prefix, "layer": layer, "rank": conditions["concept"].rank, **check,
           **{f"{c}_{s}": metrics[f"{prefix}/layer_{layer:02d}/{c}/{s}"]
              for c in ERASURES for s in ("flip", "kl", "drop")}}
    return metrics, replicates, probe_replicates, row


def build_arms(ctx: ProbeContext, settings: ErasureUseSettings, kind: str
               ) -> list[tuple[str, str, Readout]]:
    """(metric prefix, encoder whose states fit the eraser, readout) per arm: the task
    readout reads compare_to (and compare_to_twin, the twin arm); the MLM readout reads the
    checkpoint's own MLM head (no twin: the twin's MLM head was never trained, so what its
    predictions lose under an erasure is no use of anything learnt)."""
    config, batch = ctx.config, ctx.config.batch_size
    if kind == "mlm":
        model, tokenizer = ctx.mlm_model()
        readout = build_mlm_readout(model, tokenizer, ctx.sentences("eval"), settings.mask_prob,
                                    config.seed, batch, config.task.max_seq_length)
        return [("erasure_use/mlm", "model", readout)]
    require(config.compare_to is not None, "analysis.erasure_use.readouts=[task] reads a "
            "fine-tuned classifier: set compare_to=<a finetune run's model/> (and "
            "compare_to_twin=<its init=random twin>)")
    arms = [("erasure_use/task", "compare", "compare_to")]
    if config.compare_to_twin is not None:
        arms.append(("erasure_use/twin/task", "compare_twin", "compare_to_twin"))
    built = []
    for prefix, which, key in arms:
        classifier = load_classifier(getattr(config, key), settings.task, key)
        tokenizer = ctx.encoder(which).tokenizer
        readout = build_task_readout(classifier.to(ctx.encoder(which).model.device), tokenizer,
                                     settings.task, config.data_dir, settings.max_examples,
                                     batch)
        built.append((prefix, which, readout))
    return built


def run(ctx: ProbeContext, settings: ErasureUseSettings) -> dict[str, float]:
    metrics: dict[str, float] = {}
    replicates: dict = {}
    rows = []
    name = f"erasure_use_{ctx.config.task.name}"
    for kind in settings.readouts:
        for prefix, which, readout in build_arms(ctx, settings, kind):
            num_layers = readout.model.config.num_hidden_layers
            layers = settings.layers if settings.layers is not None else list(range(num_layers + 1))
            require(all(0 <= layer <= num_layers for layer in layers), f"analysis.erasure_use."
                    f"layers={list(layers)}: a layer is 0 (embeddings) … {num_layers}")
            columns, probe_columns = {}, {}
            for layer in layers:
                found, resampled, probe_resampled, row = measure_layer(
                    ctx, settings, readout, which, layer, prefix)
                metrics |= found
                columns |= resampled
                probe_columns |= probe_resampled
                rows.append(row)
            first = f"{prefix}/layer_{layers[0]:02d}/concept"  # the unperturbed accuracy
            metrics[f"{prefix}/accuracy"] = metrics[f"{first}/accuracy"] + metrics[f"{first}/drop"]
            replicates |= columns
            stem = f"{name}_{prefix.replace('/', '_')}"
            write_replicates(ctx.out_dir, stem, columns, readout.item_ids, readout.pool)
            # the probe's items are the probe task's eval sentences, not the readout's
            write_replicates(ctx.out_dir, f"{stem}_probe", probe_columns,
                             compute_item_ids([list(s.words) for s in ctx.sentences("eval")]))
    write_table(ctx.out_dir, name, rows)
    for kind in settings.readouts:
        plot_erasure_use(metrics, replicates, ctx.out_dir, kind, f"{name}_{kind}",
                               f"decodable vs used: {ctx.config.task.name} labels erased "
                               f"(LEACE), {kind} readout")
    return metrics
