"""What attention heads look at (Clark et al., 2019, "What does BERT look at?") and what
their maps look like (Kovaleva et al., 2019, "Revealing the dark secrets of BERT"), read
from the word-level maps that features.py extracts once.

Per head: mean attention to [CLS], [SEP], punctuation, the word itself, the previous and the
next word, and each row's entropy; dependency heads (Clark et al. §4.2, dependency_heads.py);
with compare_to, how far each head's maps moved. Item replicates resample the sentences. All
but the classes are measured on the null too (`attention/random/…`: the random-init twin's
maps sharpened to the model's entropy, attention_null.py), on the model's resamples.

Kovaleva et al.'s five classes (their Figure 1) come from a fixed rule on three masses of each
map (diagonal, vertical, block), not from their CNN on 400 hand-labelled maps, which are not
public: the rule is not validated against labelled maps, so its shares are not comparable with
the paper's, and the log and the figure say so. They are read on the model only.

The statistics and the rule with its thresholds: docs/probing.md, "Attention: per-head
statistics and Kovaleva classes".
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable

import numpy as np

from bertology.analysis.attention_null import build_attention_null
from bertology.analysis.dependency_heads import run_dependencies
from bertology.analysis.features import iter_attention_maps
from bertology.analysis.head_similarity import compute_head_distances
from bertology.analysis.window_subsets import SentenceSubset, within_windows
from bertology.config.analysis_settings import AttentionSettings
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require
from bertology.models.windows import log_fitting
from bertology.run.figures import (
    PALETTE,
    encoder_keys,
    plot_head_heatmap,
    plot_layer_curves,
    save_figure,
    tie_table,
)
from bertology.run.replicates import (
    bootstrap_indices,
    compute_sentence_ids,
    resample_counts,
    write_replicates,
)
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

STATS = ("cls", "sep", "punct", "self", "prev", "next", "entropy")
PATTERNS = ("vertical", "diagonal", "vertical_diagonal", "block", "heterogeneous")
DOMINANT = 0.6
MIXED_PART = 0.25
SAME_BLOCK_OVERLAP = 0.5
KOVALEVA_MIN_WORDS = 6
# The model, and its null: the random-init twin (probe_context's "random"), each head's maps
# sharpened to the model's head's entropy (attention_null.py: the twin's own are near uniform,
# so none of its heads could be special). Clark et al. (2019) report no null
ATTENTION_ENCODERS = ("model", "random")
ATTENTION_PREFIX = {"model": "attention", "random": "attention/random"}
TABLE_SCOPE = {"model": "", "random": "random_"}  # the model's tables keep their names
TWIN_LINE = (("special_heads_fraction", "special heads"), ("deps/nsubj/accuracy", "nsubj head"),
             ("head_divergence/across_minus_within", "JS across − within"))


# ---------------------------------------------------------------- per-head statistics


def is_punctuation(word: str, upos: str | None) -> bool:
    if upos is not None:
        return upos == "PUNCT"
    return bool(word) and all(unicodedata.category(c).startswith("P") for c in word)


def build_punctuation_mask(sentence: ProbeSentence) -> np.ndarray:
    """(n,) bool: which words are punctuation."""
    upos = sentence.upos or (None,) * len(sentence.words)
    return np.array([is_punctuation(w, u) for w, u in zip(sentence.words, upos)], dtype=bool)


def compute_sentence_sums(maps: np.ndarray, punct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One sentence's (layers, heads, stats) sums over its word rows and the (stats,) number
    of rows each sum covers; maps is (layers, heads, n + 2, n + 2)."""
    n = maps.shape[-1] - 2
    rows = maps[:, :, 1:n + 1, :]  # (layers, heads, n, n + 2): the word rows
    entropy = -(rows * np.log(np.clip(rows, 1e-12, None))).sum(-1)  # (layers, heads, n) nats
    sums = np.stack([
        rows[..., 0].sum(-1),
        rows[..., n + 1].sum(-1),
        rows[..., 1:n + 1][..., punct].sum((-1, -2)),
        np.diagonal(maps, 0, 2, 3)[..., 1:n + 1].sum(-1),  # a[i, i]
        np.diagonal(maps, -1, 2, 3)[..., 1:n].sum(-1),  # a[i, i - 1], i = 2 … n
        np.diagonal(maps, 1, 2, 3)[..., 1:n].sum(-1),  # a[i, i + 1], i = 1 … n - 1
        entropy.sum(-1),
    ], axis=-1)  # (layers, heads, stats)
    counts = np.array([n, n, n, n, n - 1, n - 1, n], dtype=np.float64)
    return sums, counts


def collect_sentence_sums(maps: Iterable[np.ndarray], puncts: list[np.ndarray]
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(sentences, layers, heads, stats) sums and (sentences, stats) rows, sentence by
    sentence: the items the replicates resample."""
    pairs = [compute_sentence_sums(m, punct) for m, punct in zip(maps, puncts)]
    require(bool(pairs), "attention statistics need at least one eval sentence")
    return np.stack([s for s, _ in pairs]), np.stack([c for _, c in pairs])


def compute_resampled_stats(sums: np.ndarray, rows: np.ndarray, weights: np.ndarray
                            ) -> np.ndarray:
    """(resamples, layers, heads, stats) means over the word rows of the sentences drawn,
    weights (resamples, sentences) their multiplicities (a row of ones: the sentences)."""
    total = weights @ sums.reshape(len(sums), -1)  # (resamples, layers·heads·stats)
    counts = weights @ rows  # (resamples, stats)
    return total.reshape(len(weights), *sums.shape[1:]) / np.maximum(counts, 1)[:, None, None]


def compute_head_stats(maps: Iterable[np.ndarray], puncts: list[np.ndarray]) -> np.ndarray:
    """(layers, heads, stats) means over every word row of every sentence (STATS order)."""
    sums, rows = collect_sentence_sums(maps, puncts)
    return compute_resampled_stats(sums, rows, np.ones((1, len(sums))))[0]


def compute_special_fraction(stats: np.ndarray) -> np.ndarray:
    """Clark et al. (2019) §3: many heads put most of their attention on [CLS], [SEP] or
    punctuation; the share of heads whose mass on them exceeds one half. stats (...,
    layers, heads, stats) → (...)."""
    special = stats[..., STATS.index("cls")] + stats[..., STATS.index("sep")] \
        + stats[..., STATS.index("punct")]  # (..., layers, heads)
    return (special > 0.5).mean(axis=(-1, -2))


def compute_stat_replicates(sums: np.ndarray, rows: np.ndarray, indices: np.ndarray | None = None,
                            prefix: str = "attention") -> dict[str, np.ndarray]:
    """Replicates over resampled sentences of each layer's head-mean statistics (layers
    numbered from 1, as the metrics) and of the special heads' share; indices (replicates,
    sentences) are the resamples (bootstrap_indices of the sentences where None)."""
    indices = bootstrap_indices(len(sums)) if indices is None else indices
    stats = compute_resampled_stats(sums, rows, resample_counts(indices))
    columns = {f"{prefix}/layer_{layer + 1:02d}/{name}": stats[:, layer, :, k].mean(-1)
               for layer in range(stats.shape[1]) for k, name in enumerate(STATS)}
    columns[f"{prefix}/special_heads_fraction"] = compute_special_fraction(stats)
    return columns


def compute_cosine_change(maps: Iterable[np.ndarray], other: Iterable[np.ndarray]
                          ) -> np.ndarray:
    """(layers, heads) 1 − mean over sentences of the cosine between two models' flattened
    maps of the same sentence: 0 for identical maps."""
    total, count = 0.0, 0
    for a, b in zip(maps, other):
        a, b = a.reshape(*a.shape[:2], -1), b.reshape(*b.shape[:2], -1)  # (layers, heads, m*m)
        norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
        total, count = total + (a * b).sum(-1) / np.maximum(norms, 1e-12), count + 1
    return 1.0 - total / max(count, 1)


# ---------------------------------------------------------------- Kovaleva patterns


def compute_pattern_masses(maps: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """(layers, heads, 3): the D, V and B masses of the module docstring for one sentence."""
    n = maps.shape[-1] - 2
    rows = maps[:, :, 1:n + 1, :]  # (layers, heads, n, n + 2)
    position = np.arange(n + 2)
    band = np.abs(position[1:n + 1, None] - position[None, :]) <= 1  # (n, n + 2)
    band[:, [0, n + 1]] = False  # the band holds words only; [CLS]/[SEP] are vertical
    columns = np.concatenate([[True], punct, [True]])  # (n + 2,) [CLS], punctuation, [SEP]
    diagonal = (rows * band).sum(-1).mean(-1)
    vertical = (rows * (columns & ~band)).sum(-1).mean(-1)
    words = rows[..., 1:n + 1]  # (layers, heads, n, n)
    overlap = np.minimum(rows[:, :, :-1], rows[:, :, 1:]).sum(-1)  # (layers, heads, n - 1)
    starts = np.concatenate([np.zeros((*overlap.shape[:2], 1)), overlap < SAME_BLOCK_OVERLAP],
                            axis=-1)
    block_id = np.cumsum(starts, axis=-1)  # (layers, heads, n): the block of each word row
    same = block_id[..., :, None] == block_id[..., None, :]  # (layers, heads, n, n)
    block = (words * same).sum(-1).mean(-1)
    return np.stack([diagonal, vertical, block], axis=-1)


def classify_patterns(masses: np.ndarray) -> np.ndarray:
    """(..., 3) masses → (...) index into PATTERNS, by the module docstring's rule."""
    diagonal, vertical, block = masses[..., 0], masses[..., 1], masses[..., 2]
    classes = np.full(diagonal.shape, PATTERNS.index("heterogeneous"))
    rules = [  # applied last to first, so that the first matching rule wins
        (block >= DOMINANT, "block"),
        (vertical >= DOMINANT, "vertical"),
        (diagonal >= DOMINANT, "diagonal"),
        ((diagonal >= MIXED_PART) & (vertical >= MIXED_PART)
         & (diagonal + vertical >= DOMINANT), "vertical_diagonal"),
    ]
    for holds, name in rules:
        classes = np.where(holds, PATTERNS.index(name), classes)
    return classes


def count_patterns(maps: Iterable[np.ndarray], puncts: list[np.ndarray]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(layers, heads, classes) map counts per head and (layers, heads, 3) mean masses."""
    counts, masses, total = 0, 0.0, 0
    for sentence_maps, punct in zip(maps, puncts):
        sentence_masses = compute_pattern_masses(sentence_maps, punct)
        classes = classify_patterns(sentence_masses)  # (layers, heads)
        counts = counts + (classes[..., None] == np.arange(len(PATTERNS)))
        masses, total = masses + sentence_masses, total + 1
    return np.asarray(counts), masses / max(total, 1)


def plot_pattern_heatmap(classes: np.ndarray, title: str, out_dir, name: str, table: str):
    """A layers × heads grid coloured by each head's majority class."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    colours = ListedColormap(PALETTE[:len(PATTERNS)])  # the house's colour-blind-safe set
    figure, axis = plt.subplots(figsize=(0.45 * classes.shape[1] + 3.5,
                                         0.4 * classes.shape[0] + 1.8))
    image = axis.imshow(classes, cmap=colours, vmin=-0.5, vmax=len(PATTERNS) - 0.5,
                        aspect="auto")
    tie_table(image, table, "class", PATTERNS)
    axis.set_xticks(range(classes.shape[1]), [str(h) for h in range(classes.shape[1])])
    axis.set_yticks(range(classes.shape[0]), [str(i + 1) for i in range(classes.shape[0])])
    axis.set_xlabel("head")
    axis.set_ylabel("layer")
    bar = figure.colorbar(image, ax=axis, ticks=range(len(PATTERNS)))
    bar.ax.set_yticklabels(PATTERNS)
    axis.set_title(title, fontsize=9)
    return save_figure(figure, out_dir, name)


# ---------------------------------------------------------------- the analysis


def run_head_stats(ctx, settings: AttentionSettings, which: str, features, sentences,
                   indices: np.ndarray, keep: list[int] | None = None
                   ) -> tuple[dict[str, float], dict[str, np.ndarray], list[dict]]:
    """Clark et al.'s §3 statistics per head of one encoder, and on the model the cosine
    change with compare_to: (metrics, their replicates over the resamples `indices`, the
    per-layer table rows). `keep`: the eval sentences read (windows.within_windows), None for
    the first len(sentences)."""
    task, count, prefix = ctx.config.task.name, len(sentences), ATTENTION_PREFIX[which]
    puncts = [build_punctuation_mask(s) for s in sentences]
    maps = iter_attention_maps(features, range(count), f"attention stats ({which})")
    sums, word_rows = collect_sentence_sums(maps, puncts)
    stats = compute_resampled_stats(sums, word_rows, np.ones((1, len(sums))))[0]
    columns = {name: stats[..., k] for k, name in enumerate(STATS)}  # each (layers, heads)
    if which == "model" and ctx.config.compare_to is not None:
        columns["change"] = compute_compare_change(ctx, features, count, keep)
    layers, heads = stats.shape[:2]
    write_table(ctx.out_dir, f"attention_heads_{TABLE_SCOPE[which]}{task}", [
        {"layer": layer + 1, "head": head, **{k: float(v[layer, head]) for k, v in
                                              columns.items()}}
        for layer in range(layers) for head in range(heads)])
    metrics, rows = {}, []
    for layer in range(layers):
        means = {name: float(values[layer].mean()) for name, values in columns.items()}
        rows.append({"model": which, "layer": layer + 1, **means})
        for name, value in means.items():
            key = "change/layer_{:02d}/mean" if name == "change" else "layer_{:02d}/" + name
            metrics[f"{prefix}/" + key.format(layer + 1)] = value
    metrics[f"{prefix}/special_heads_fraction"] = float(compute_special_fraction(stats))
    if which == "model":  # the null's heads look where random weights send them: no heat maps
        if settings.heatmaps:
            for name, values in columns.items():
                plot_head_heatmap(values, f"{name} ({task})", ctx.out_dir,
                                  f"attention_{name}_{task}",
                                  label="entropy (nats)" if name == "entropy" else name,
                                  table=(f"attention_heads_{TABLE_SCOPE[which]}{task}", name))
        log_top_heads(columns)
    return metrics, compute_stat_replicates(sums, word_rows, indices, prefix), rows


def compute_compare_change(ctx, features, count: int, keep: list[int] | None) -> np.ndarray:
    """(layers, heads) cosine change between the model's maps and compare_to's."""
    other = ctx.features("compare", "eval")
    other = other if keep is None else SentenceSubset(other, keep)
    require((other.num_layers, other.num_heads) == (features.num_layers, features.num_heads),
            f"compare_to={ctx.config.compare_to} has {other.num_layers} layers × "
            f"{other.num_heads} heads, the model {features.num_layers} × "
            f"{features.num_heads}; compare checkpoints of one architecture")
    return compute_cosine_change(iter_attention_maps(features, range(count), "change: model"),
                                 iter_attention_maps(other, range(count), "change: compare"))


def log_top_heads(columns: dict[str, np.ndarray]) -> None:
    for name in ("cls", "sep", "punct", "prev", "next"):
        layer, head = np.unravel_index(columns[name].argmax(), columns[name].shape)
        log.info("attention to %s: highest in layer %d head %d (%.3f)", name, layer + 1, head,
                 columns[name][layer, head])


def run_patterns(ctx, settings: AttentionSettings, features, sentences) -> dict[str, float]:
    """Kovaleva et al.'s classes: each head's majority class and the share of each class."""
    task = ctx.config.task.name
    chosen = [i for i, s in enumerate(sentences)
              if len(s.words) >= KOVALEVA_MIN_WORDS][: settings.kovaleva_sentences]
    if not chosen:
        log.info("attention: no eval sentence has %d words; Kovaleva patterns skipped",
                 KOVALEVA_MIN_WORDS)
        return {}
    puncts = [build_punctuation_mask(sentences[i]) for i in chosen]
    counts, masses = count_patterns(iter_attention_maps(features, chosen, "attention patterns"),
                                    puncts)  # (layers, heads, classes), (layers, heads, 3)
    majority = counts.argmax(-1)  # (layers, heads)
    shares = counts / counts.sum(-1, keepdims=True)
    write_table(ctx.out_dir, f"attention_patterns_{task}", [
        {"layer": layer + 1, "head": head, "class": PATTERNS[majority[layer, head]],
         **{f"share_{p}": float(shares[layer, head, k]) for k, p in enumerate(PATTERNS)},
         **{f"{m}_mass": float(masses[layer, head, k])
            for k, m in enumerate(("diagonal", "vertical", "block"))}}
        for layer in range(majority.shape[0]) for head in range(majority.shape[1])])
    if settings.heatmaps:
        plot_pattern_heatmap(majority, f"Kovaleva-style classes by a fixed rule ({task}, "
                             f"{len(chosen)} maps/head;\nnot validated on labelled maps: not "
                             "comparable with the paper's shares)",
                             ctx.out_dir, f"attention_patterns_{task}",
                             table=f"attention_patterns_{task}")
    overall = counts.sum((0, 1)) / counts.sum()  # share of each class over all maps
    log.info("Kovaleva-style classes over %d maps per head: %s (a fixed rule, not the paper's "
             "CNN, never validated on labelled maps: not comparable with its shares)",
             len(chosen), ", ".join(f"{p} {s:.2f}" for p, s in zip(PATTERNS, overall)))
    return {f"attention/pattern/{p}": float(s) for p, s in zip(PATTERNS, overall)}


def run(ctx, settings: AttentionSettings) -> dict[str, float]:
    """Head statistics, dependency heads and head distances of the model and of its null
    (the sharpened twin), Kovaleva classes (and the change with compare_to) of the model, on the
    first max_sentences eval sentences."""
    task = ctx.config.task.name
    features = {which: ctx.features(which, "eval") for which in ATTENTION_ENCODERS}
    sentences = ctx.sentences("eval")[: settings.max_sentences]
    encoder = ctx.encoder("model")  # the twin has its config, so the same windows
    keep, line = within_windows(encoder.model.config, encoder.tokenizer, sentences,
                                ctx.config.task.max_seq_length)
    log_fitting(log, keep, line)
    if keep is not None:
        if not keep:
            return {}
        features = {which: SentenceSubset(f, keep) for which, f in features.items()}
        sentences = [sentences[i] for i in keep]
    log.info("attention: %d layers × %d heads on %d sentences, model and null",
             features["model"].num_layers, features["model"].num_heads, len(sentences))
    features["random"] = build_attention_null(features["model"], features["random"],
                                              len(sentences))
    # One set of resamples for both encoders (as position.py): replicate r of the model and
    # of the twin reads the same sentences (the odd ones, for dependency heads), so
    # model − twin is a paired contrast resample by resample
    resamples = (bootstrap_indices(len(sentences)),
                 bootstrap_indices(len(sentences) // 2) if len(sentences) > 1 else None)
    metrics, replicates, rows = {}, {}, []
    for which in ATTENTION_ENCODERS:
        encoder_metrics, columns, layer_rows = run_encoder(ctx, settings, which,
                                                           features[which], sentences,
                                                           resamples, keep)
        metrics.update(encoder_metrics)
        rows.extend(layer_rows)
        for name, part in columns.items():
            replicates.setdefault(name, {}).update(part)
    # the sentences each file's replicates resample, in order (the odd, scoring half for the
    # dependency heads), so the report counts sentences that other runs score too
    items = {"attention": sentences, "head_similarity": sentences,
             "attention_deps": sentences[1::2]}
    for name, columns in replicates.items():
        if columns:
            write_replicates(ctx.out_dir, f"{name}_{task}", columns,
                             compute_sentence_ids(items[name]), ctx.splits.eval_pool)
    write_layer_table(ctx, settings, rows)
    metrics.update(run_patterns(ctx, settings, features["model"], sentences))
    log_twin(metrics)
    return metrics


def run_encoder(ctx, settings: AttentionSettings, which: str, features, sentences,
                resamples: tuple[np.ndarray, np.ndarray | None], keep: list[int] | None
                ) -> tuple[dict[str, float], dict[str, dict[str, np.ndarray]], list[dict]]:
    """One encoder's head statistics, dependency heads and head distances: (metrics,
    replicate columns by replicates file, per-layer table rows); `resamples` are the indices
    of all sentences and of the odd (dependency scoring) ones."""
    indices, held_out = resamples
    metrics, stat_columns, rows = run_head_stats(ctx, settings, which, features, sentences,
                                                 indices, keep)
    deps, dep_columns = run_dependencies(ctx, settings, features, sentences, which, held_out)
    distances, distance_columns = compute_head_distances(features, len(sentences), indices,
                                                         ATTENTION_PREFIX[which])
    columns = {"attention": stat_columns, "attention_deps": dep_columns,
               "head_similarity": distance_columns}
    return {**metrics, **deps, **distances}, columns, rows


def write_layer_table(ctx, settings: AttentionSettings, rows: list[dict]) -> None:
    """tables/attention_<task>.csv, a row per encoder and layer, and its layer curves with
    the twin's beside the model's."""
    task = ctx.config.task.name
    write_table(ctx.out_dir, f"attention_{task}", rows)
    if settings.heatmaps:
        names = [name for name in (*STATS, "change") if name in rows[0]]
        plot_layer_curves(rows, names, f"attention per layer ({task})", ctx.out_dir,
                          f"attention_layers_{task}", xlabel="layer",
                          keys=encoder_keys("attention"))


def log_twin(metrics: dict[str, float]) -> None:
    """The findings' attention numbers on the model and on its null, one line."""
    parts = [f"{label} {metrics[f'attention/{key}']:.3f} vs "
             f"{metrics[f'attention/random/{key}']:.3f}"
             for key, label in TWIN_LINE if f"attention/random/{key}" in metrics]
    log.info("attention, model vs null (the sharpened twin): %s", "; ".join(parts))
