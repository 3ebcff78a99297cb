"""analysis=attention: Clark et al.'s (2019) head statistics and dependency heads, Kovaleva et
al.'s (2019) pattern classes and the cosine change, on hand-made maps and end to end."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from conftest import compose_config

from bertology.analysis import attention, dependency_heads
from bertology.analysis.attention import PATTERNS, STATS
from bertology.analysis.attention_null import build_attention_null
from bertology.data.probe_sentences import ProbeSentence
from bertology.run.replicates import REPLICATES, read_replicates
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import load_catalog
from bertology.study.judge.verdicts import judge


def build_map(word_rows: np.ndarray) -> np.ndarray:
    """(1, 1, n + 2, n + 2) map with the given (n, n + 2) word rows; [CLS]/[SEP] rows are
    uniform (the statistics must ignore them)."""
    n = word_rows.shape[0]
    full = np.full((n + 2, n + 2), 1.0 / (n + 2))
    full[1:n + 1] = word_rows
    return full[None, None]


def one_hot_rows(n: int, targets: list[int]) -> np.ndarray:
    """(n, n + 2): word row i puts all its mass on column targets[i]."""
    rows = np.zeros((n, n + 2))
    rows[np.arange(n), targets] = 1.0
    return rows


def stat(values: np.ndarray, name: str) -> float:
    return float(values[0, 0, STATS.index(name)])


# ---------------------------------------------------------------- head statistics


def test_previous_word_head_has_prev_one_and_zero_entropy():
    n = 5  # word i (position i) attends to position i - 1; the first word so to [CLS]
    maps = build_map(one_hot_rows(n, list(range(n))))
    stats = attention.compute_head_stats([maps], [np.zeros(n, dtype=bool)])
    assert stat(stats, "prev") == pytest.approx(1.0)
    assert stat(stats, "entropy") == pytest.approx(0.0, abs=1e-9)
    assert stat(stats, "cls") == pytest.approx(1 / n)
    for name in ("sep", "self", "next", "punct"):
        assert stat(stats, name) == pytest.approx(0.0)


def test_next_self_sep_punct_and_uniform_entropy_are_exact():
    n = 4
    next_word = build_map(one_hot_rows(n, [i + 2 for i in range(n)]))  # last word → [SEP]
    itself = build_map(one_hot_rows(n, [i + 1 for i in range(n)]))
    uniform = build_map(np.full((n, n + 2), 1.0 / (n + 2)))
    punct = np.array([False, True, False, True])
    stats = attention.compute_head_stats([next_word], [punct])
    assert stat(stats, "next") == pytest.approx(1.0)
    assert stat(stats, "sep") == pytest.approx(1 / n)
    assert stat(stats, "punct") == pytest.approx(2 / n)  # words 1 and 3 → punctuation 2 and 4
    assert stat(attention.compute_head_stats([itself], [punct]), "self") == pytest.approx(1.0)
    uniform_stats = attention.compute_head_stats([uniform], [punct])
    assert stat(uniform_stats, "entropy") == pytest.approx(math.log(n + 2))  # nats
    assert stat(uniform_stats, "punct") == pytest.approx(2 / (n + 2))


def test_stats_average_over_the_word_rows_of_all_sentences():
    short = build_map(one_hot_rows(2, [0, 0]))  # 2 words on [CLS]
    long = build_map(one_hot_rows(4, [5, 5, 5, 5]))  # 4 words on [SEP]
    stats = attention.compute_head_stats([short, long], [np.zeros(2, bool), np.zeros(4, bool)])
    assert stat(stats, "cls") == pytest.approx(2 / 6)
    assert stat(stats, "sep") == pytest.approx(4 / 6)


def test_stat_replicates_resample_sentences_with_a_hand_worked_spread():
    """Four 3-word sentences, one head: in two every word row attends to [CLS], in two to
    itself. cls = self = 0.5, and the ideal bootstrap SD of a mean of 4 equal clusters is
    sqrt(pop. var / 4) = sqrt(0.25 / 4) = 0.25; on each resample cls + self = 1."""
    n = 3
    on_cls, on_self = build_map(one_hot_rows(n, [0] * n)), build_map(one_hot_rows(n, [1, 2, 3]))
    sums, rows = attention.collect_sentence_sums([on_cls, on_self, on_cls, on_self],
                                                 [np.zeros(n, bool)] * 4)
    assert sums.shape == (4, 1, 1, len(STATS)) and rows.shape == (4, len(STATS))
    columns = attention.compute_stat_replicates(sums, rows)
    cls, itself = columns["attention/layer_01/cls"], columns["attention/layer_01/self"]
    assert cls.shape == (REPLICATES,)
    assert cls.mean() == pytest.approx(0.5, abs=0.03)
    assert cls.std() == pytest.approx(0.25, rel=0.12)
    assert np.allclose(cls + itself, 1.0)
    # the special heads' share: this one head is special (> 0.5) where [CLS] sentences are
    # the majority of the resample
    special = columns["attention/special_heads_fraction"]
    assert np.array_equal(special, (cls > 0.5).astype(float))


def test_special_heads_fraction_counts_heads_over_one_half():
    n = 4  # 1 layer × 3 heads: on [CLS]; on [SEP] and punctuation (0.25 + 0.5); on itself
    punct = np.array([False, True, True, False])
    maps = np.concatenate([build_map(one_hot_rows(n, [0] * n)),
                           build_map(one_hot_rows(n, [5, 2, 3, 4])),
                           build_map(one_hot_rows(n, [1, 2, 3, 4]))], axis=1)
    stats = attention.compute_head_stats([maps], [punct])
    assert attention.compute_special_fraction(stats) == pytest.approx(2 / 3)
    sums, rows = attention.collect_sentence_sums([maps, maps], [punct, punct])
    special = attention.compute_stat_replicates(sums, rows)["attention/special_heads_fraction"]
    assert np.allclose(special, 2 / 3)  # every sentence alike: no sampling error


def test_punctuation_from_upos_or_from_characters():
    sentence = ProbeSentence(("Hi", ",", "you", "!"), (None,) * 4,
                             upos=("INTJ", "PUNCT", "PRON", "PUNCT"))
    assert attention.build_punctuation_mask(sentence).tolist() == [False, True, False, True]
    plain = ProbeSentence(("well", "--", "ok", "e.g.", "..."), (None,) * 5)
    assert attention.build_punctuation_mask(plain).tolist() == [False, True, False, False,
                                                                True]


# ---------------------------------------------------------------- dependency heads


# "the dog saw a cat" / "dogs saw the big cat": 1-based heads, 0 = root
TREES = [
    ProbeSentence(("the", "dog", "saw", "a", "cat"), (None,) * 5, (2, 3, 0, 5, 3),
                  ("det", "nsubj", "root", "det", "obj")),
    ProbeSentence(("dogs", "saw", "the", "big", "cat"), (None,) * 5, (2, 0, 5, 5, 2),
                  ("nsubj", "root", "det", "amod", "obj")),
]


def gold_head_maps(sentence: ProbeSentence) -> np.ndarray:
    """(1, 2, n + 2, n + 2): head 0 points every dependent at its gold head (the root at
    [SEP]); head 1 at the previous word."""
    n = len(sentence.words)
    gold = [h if h > 0 else n + 1 for h in sentence.heads]
    return np.concatenate([build_map(one_hot_rows(n, gold)),
                           build_map(one_hot_rows(n, list(range(n))))], axis=1)


def test_a_head_pointing_at_gold_heads_scores_one_and_offsets_are_counted():
    relations = dependency_heads.count_relations([gold_head_maps(s) for s in TREES], TREES)
    assert "root" not in relations  # the root has no head word
    rows = {r: dependency_heads.build_dependency_row(r, counts) for r, counts in relations.items()}
    for row in rows.values():
        assert row["best_accuracy"] == pytest.approx(1.0)
        assert (row["best_layer"], row["best_head"], row["direction"]) == (1, 0, "dep->head")
    assert rows["det"]["count"] == 3
    # det: +1, +1, +2 → offset +1 gets 2 of 3; obj: −2 and −3, a tie won by the nearer
    assert (rows["det"]["baseline_offset"], rows["det"]["baseline_accuracy"]) == (1, 2 / 3)
    assert (rows["obj"]["baseline_offset"], rows["obj"]["baseline_accuracy"]) == (-2, 0.5)
    assert rows["all"]["count"] == 8
    assert (rows["all"]["baseline_offset"], rows["all"]["baseline_accuracy"]) == (1, 5 / 8)


def test_dependency_replicates_resample_the_scoring_sentences_by_hand():
    """Per sentence of TREES, 4 dependents; offset +1 right for 3 (first) and 2 (second):
    a resample of the first twice is 6/8, of the second twice 4/8, of both 5/8; the gold
    head is right on every resample."""
    maps = [gold_head_maps(s) for s in TREES]
    per_sentence = [dependency_heads.count_relations([m], [s]) for m, s in zip(maps, TREES)]
    merged = dependency_heads.merge_counts(per_sentence)
    whole = dependency_heads.count_relations(maps, TREES)
    assert set(merged) == set(whole)
    for relation, counts in whole.items():
        assert merged[relation].count == counts.count
        assert np.array_equal(merged[relation].dep_to_head, counts.dep_to_head)
        assert merged[relation].offsets == counts.offsets
    row = dependency_heads.build_dependency_row("all", whole["all"])
    accuracy, baseline = dependency_heads.compute_row_replicates(
        row, per_sentence, np.array([[0, 0], [1, 1], [0, 1]]))
    assert accuracy.tolist() == [1.0, 1.0, 1.0]
    assert baseline.tolist() == pytest.approx([6 / 8, 4 / 8, 5 / 8])
    # a relation one sentence lacks (amod) counts nothing there
    amod = dependency_heads.build_dependency_row("amod", whole["amod"])
    accuracy, _ = dependency_heads.compute_row_replicates(amod, per_sentence,
                                                          np.array([[1, 1], [0, 1]]))
    assert accuracy.tolist() == [1.0, 1.0]


def swapped_head_maps(sentence: ProbeSentence) -> np.ndarray:
    """gold_head_maps with its two heads swapped: head 1 gold, head 0 the previous word."""
    return gold_head_maps(sentence)[:, ::-1]


def test_the_best_head_and_offset_are_chosen_on_one_half_and_scored_on_the_other():
    """Chosen where head 0 is gold, scored where head 0 points at the previous word: the
    held-out accuracy is head 0's there (by hand: the dependents whose head is word i − 1,
    none in TREES), not the 1.0 it had where it was chosen nor head 1's 1.0 there."""
    select = dependency_heads.count_relations([gold_head_maps(s) for s in TREES], TREES)["all"]
    score = dependency_heads.count_relations([swapped_head_maps(s) for s in TREES], TREES)["all"]
    row = dependency_heads.build_dependency_row("all", select, score)
    assert (row["best_layer"], row["best_head"], row["direction"]) == (1, 0, "dep->head")
    assert row["selection_accuracy"] == pytest.approx(1.0)
    assert sum(h == j for s in TREES for j, h in enumerate(s.heads) if h > 0) == 0
    assert row["best_accuracy"] == 0.0
    assert (row["baseline_offset"], row["baseline_accuracy"]) == (1, 5 / 8)


def test_head_to_dependent_direction_reads_the_columns():
    rows = np.zeros((3, 5))
    rows[0, 3] = 1.0  # word 0 attends to word 2: word 2's predicted head (transposed) is 0
    rows[1, 2] = 1.0  # word 1 attends to itself, which is ignored
    rows[2, 0] = 1.0
    dep_to_head, head_to_dep = dependency_heads.predict_heads(build_map(rows))
    assert head_to_dep[0, 0, 2] == 0
    assert dep_to_head[0, 0, 0] == 2


# ---------------------------------------------------------------- Kovaleva patterns


def pattern_rows(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, n + 2) clean word rows of one class (each sums to 1); the last word is a full
    stop."""
    rows, target = np.zeros((n, n + 2)), -1
    for i in range(n):
        p = i + 1  # the word's position
        if kind == "vertical":
            rows[i, [n + 1, 0, n]] = [0.6, 0.3, 0.1]
        elif kind == "diagonal":
            np.add.at(rows[i], [max(p - 1, 1), p, min(p + 1, n)], [0.5, 0.3, 0.2])
        elif kind == "vertical_diagonal":
            rows[i, [n + 1, p]] = [0.5, 0.5]
        elif kind == "block":  # two blocks of 6 words, uniform inside
            block = range(1, 7) if p <= 6 else range(7, n + 1)
            rows[i, list(block)] = 1.0 / len(block)
        else:  # each word on a random far-away word, another one than its neighbour's
            far = [q for q in range(1, n) if abs(q - p) > 1 and q != target]
            target = far[rng.integers(len(far))]
            rows[i, target] = 1.0
    return rows


@pytest.mark.parametrize("kind", PATTERNS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_maps_fall_in_their_kovaleva_class(kind, seed):
    rng = np.random.default_rng(seed)
    n = 12
    noise = rng.dirichlet(np.ones(n + 2), size=n)  # (n, n + 2)
    rows = 0.85 * pattern_rows(kind, n, rng) + 0.15 * noise
    punct = np.zeros(n, dtype=bool)
    punct[-1] = True
    masses = attention.compute_pattern_masses(build_map(rows), punct)
    assert PATTERNS[int(attention.classify_patterns(masses)[0, 0])] == kind


def test_pattern_counts_give_each_head_its_majority_class():
    rng = np.random.default_rng(0)
    n, punct = 10, np.zeros(10, dtype=bool)
    maps = [np.concatenate([build_map(pattern_rows("vertical", n, rng)),
                            build_map(pattern_rows("diagonal", n, rng))], axis=1)
            for _ in range(3)]
    counts, masses = attention.count_patterns(maps, [punct] * 3)
    assert counts.shape == (1, 2, len(PATTERNS))
    assert counts[0, 0, PATTERNS.index("vertical")] == 3
    assert counts[0, 1, PATTERNS.index("diagonal")] == 3
    assert masses[0, 1, 0] == pytest.approx(1.0)  # the diagonal head's D mass


# ---------------------------------------------------------------- cosine change


def test_cosine_change_is_zero_for_identical_maps_and_one_for_disjoint():
    rng = np.random.default_rng(0)
    maps = [rng.dirichlet(np.ones(7), size=(2, 3, 7)) for _ in range(4)]  # (2, 3, 7, 7)
    assert np.allclose(attention.compute_cosine_change(maps, [m.copy() for m in maps]), 0.0)
    cls_only, sep_only = np.zeros((1, 1, 4, 4)), np.zeros((1, 1, 4, 4))
    cls_only[..., 0], sep_only[..., 3] = 1.0, 1.0
    assert attention.compute_cosine_change([cls_only], [sep_only])[0, 0] == pytest.approx(1.0)


# ---------------------------------------------------------------- end to end


def read_table(path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def save_compare_checkpoint(path, tokenizer) -> None:
    """A random BERT of size=tiny's shape (2 layers × 2 heads) with its own tokenizer."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


@pytest.mark.slow
def test_probe_attention_end_to_end(tmp_path, synthetic_tokenizer):
    from bertology.pipelines.probe import run

    save_compare_checkpoint(tmp_path / "compare", synthetic_tokenizer)
    cfg = compose_config("probe", [
        "analysis=attention", "task=synthetic_pos", "logger=none", "init=random", "seeds=[0]",
        "max_train_sentences=30", "max_eval_sentences=40", "analysis.attention.max_sentences=30",
        "analysis.attention.kovaleva_sentences=20", "analysis.attention.min_dependents=1",
        f"compare_to={tmp_path / 'compare'}",
        f"paths.cache_dir={tmp_path / 'cache'}"])
    out = tmp_path / "run"
    metrics = run(cfg, out)
    task = "synthetic_pos"
    heads = read_table(out / "tables" / f"attention_heads_{task}.csv")
    assert len(heads) == 4 and set(STATS) | {"layer", "head", "change"} <= set(heads[0])
    for row in heads:  # 2 layers × 2 heads, word rows sum to 1
        shares = sum(float(row[k]) for k in ("cls", "sep"))
        assert 0.0 <= shares <= 1.0 + 1e-3 and 0.0 < float(row["change"]) <= 1.0
    deps = read_table(out / "tables" / f"attention_deps_{task}.csv")
    assert deps[0]["relation"] == "all" and "det" in {r["relation"] for r in deps}
    patterns = read_table(out / "tables" / f"attention_patterns_{task}.csv")
    assert {r["class"] for r in patterns} <= set(PATTERNS)
    for name in ("cls", "sep", "entropy", "change", "patterns"):
        assert (out / "plots" / f"attention_{name}_{task}.png").stat().st_size > 0
    assert sum(metrics[f"attention/pattern/{p}"] for p in PATTERNS) == pytest.approx(1.0)
    assert {"attention/layer_01/sep", "attention/layer_02/entropy",
            "attention/change/layer_02/mean", "attention/deps/all/accuracy",
            "attention/deps/det/baseline"} <= set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())
    columns = read_replicates(out)
    for key in ("attention/layer_01/sep", "attention/layer_02/entropy",
                "attention/special_heads_fraction", "attention/deps/all/accuracy",
                "attention/deps/det/baseline"):
        assert np.isfinite(columns[key]).all(), key
        assert columns[key].mean() == pytest.approx(metrics[key], abs=0.05), key
    for finding in ("special_heads", "dependency_heads"):
        result = judge(load_catalog()[finding], [RunDir(out, metrics, {"seed": 0})])
        assert all(test.estimate.items for test in result.tests), finding


# ---------------------------------------------------------------- the random-init twin


def random_maps(rng: np.random.Generator, n: int, peak: float) -> np.ndarray:
    """(2, 3, n + 2, n + 2): rows drawn from a Dirichlet, `peak` added on [CLS] before they
    are normalised (large: [CLS] heads, as a trained model's; 0: diffuse, as a twin's)."""
    rows = rng.dirichlet(np.ones(n + 2), size=(2, 3, n + 2))
    rows[..., 0] += peak * rng.random((2, 3, 1))
    return rows / rows.sum(-1, keepdims=True)


def test_paired_replicates_are_the_statistic_on_each_resample_by_hand():
    """Model and twin replicates drawn on one set of resamples: model − twin on replicate r is
    the difference of the statistics computed afresh on the sentences resample r drew."""
    from bertology.analysis.head_similarity import compute_head_distances
    from bertology.analysis.window_subsets import SentenceSubset
    from bertology.run.replicates import bootstrap_indices

    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 9, size=12)
    maps = {"model": [random_maps(rng, n, 4.0) for n in lengths],
            "random": [random_maps(rng, n, 0.0) for n in lengths]}
    puncts = [np.zeros(n, dtype=bool) for n in lengths]
    indices = bootstrap_indices(len(lengths), replicates=20)
    columns = {}
    for which, prefix in attention.ATTENTION_PREFIX.items():
        sums, rows = attention.collect_sentence_sums(maps[which], puncts)
        columns.update(attention.compute_stat_replicates(sums, rows, indices, prefix))
        columns.update(compute_head_distances(StackedMaps(maps[which]), len(lengths), indices,
                                              prefix)[1])
    for r in (0, 7, 19):
        drawn = indices[r]
        fresh = {which: attention.compute_head_stats([maps[which][i] for i in drawn],
                                                     [puncts[i] for i in drawn])
                 for which in maps}  # (layers, heads, stats)
        for key, value in (("special_heads_fraction", attention.compute_special_fraction),
                           ("layer_02/cls", lambda s: s[1, :, STATS.index("cls")].mean())):
            contrast = columns[f"attention/{key}"][r] - columns[f"attention/random/{key}"][r]
            assert contrast == pytest.approx(value(fresh["model"]) - value(fresh["random"]))
        divergence = {which: compute_head_distances(
            SentenceSubset(StackedMaps(maps[which]), drawn.tolist()), len(drawn))[0]
            ["attention/head_divergence/across_minus_within"] for which in maps}
        key = "head_divergence/across_minus_within"
        assert (columns[f"attention/{key}"][r] - columns[f"attention/random/{key}"][r]
                == pytest.approx(divergence["model"] - divergence["random"]))
    # the [CLS] peak makes the model's heads special, the twin's diffuse rows do not
    assert columns["attention/special_heads_fraction"].mean() > 0.5
    assert columns["attention/random/special_heads_fraction"].max() == 0.0


class StackedMaps:
    """Features' attention_map over a list of hand-made maps."""

    def __init__(self, maps: list[np.ndarray]):
        self.maps, self.num_sentences = maps, len(maps)
        self.num_layers, self.num_heads = maps[0].shape[:2]

    def attention_map(self, index: int) -> np.ndarray:
        return self.maps[index]


TWIN_RUN = ["analysis=attention", "task=synthetic_pos", "logger=none", "init=random",
            "seeds=[0]", "max_train_sentences=20", "max_eval_sentences=30",
            "analysis.attention.heatmaps=false", "analysis.attention.kovaleva_sentences=5",
            "analysis.attention.min_dependents=1"]


def probe_twin(tmp_path) -> tuple[dict, object]:
    """A tiny attention probe run, then its context rebuilt on the run's feature cache."""
    from bertology.config.probe_config import load_probe_config
    from bertology.pipelines.probe import build_probe_context, run

    cfg = compose_config("probe", [*TWIN_RUN, f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = run(cfg, tmp_path / "run")
    return metrics, build_probe_context(load_probe_config(cfg), tmp_path / "again")


def test_the_twin_writes_attention_metrics_on_the_models_resamples(tmp_path):
    from bertology.run.replicates import bootstrap_indices

    metrics, ctx = probe_twin(tmp_path)
    out, task = tmp_path / "run", "synthetic_pos"
    # the twin's eval maps were extracted by the run (read back here from its cache, beside
    # the model's), with eager attention, and are its own
    model, twin = ctx.features("model", "eval"), ctx.features("random", "eval")
    entries = list((tmp_path / "cache" / "features").iterdir())
    assert len(entries) == 2 and all((e / "attention.npy").exists() for e in entries)
    assert ctx.encoder("random").model.config._attn_implementation == "eager"
    assert np.allclose(twin.attention_map(0).sum(-1), 1.0, atol=1e-2)
    assert np.abs(model.attention_map(0) - twin.attention_map(0)).max() > 1e-3
    keys = ["special_heads_fraction", "deps/nsubj/accuracy", "deps/nsubj/baseline",
            "deps/all/accuracy", "head_divergence/across_minus_within",
            *(f"layer_{layer:02d}/{name}" for layer in (1, 2) for name in STATS)]
    columns = read_replicates(out)
    for key in keys:
        for prefix in ("attention", "attention/random"):
            assert math.isfinite(metrics[f"{prefix}/{key}"]), key
            assert columns[f"{prefix}/{key}"].shape == (REPLICATES,), key
    # the offset baseline reads only the trees: the twin's is the model's, resample by resample
    assert np.array_equal(columns["attention/deps/nsubj/baseline"],
                          columns["attention/random/deps/nsubj/baseline"])
    layers = read_table(out / "tables" / f"attention_{task}.csv")
    assert [(r["model"], r["layer"]) for r in layers] == [
        (which, str(layer)) for which in ("model", "random") for layer in (1, 2)]
    assert (out / "tables" / f"attention_deps_random_{task}.csv").exists()
    # replicate r of the model and of its null (the twin sharpened to the model's entropy)
    # is its statistic on the sentences resample r drew
    sentences = ctx.sentences("eval")
    puncts = [attention.build_punctuation_mask(s) for s in sentences]
    null = build_attention_null(model, twin, len(sentences))
    for r in (0, 123):
        drawn = bootstrap_indices(len(sentences))[r]
        for prefix, features in (("attention", model), ("attention/random", null)):
            stats = attention.compute_head_stats([features.attention_map(i) for i in drawn],
                                                 [puncts[i] for i in drawn])
            assert columns[f"{prefix}/layer_02/sep"][r] == pytest.approx(
                stats[1, :, STATS.index("sep")].mean())
            assert columns[f"{prefix}/special_heads_fraction"][r] == pytest.approx(
                attention.compute_special_fraction(stats))


def test_a_twin_with_the_models_weights_has_the_models_replicates(tmp_path, monkeypatch):
    """With the twin drawn with the model's very weights, every twin replicate equals the
    model's: both encoders were scored on the same resamples (others would differ by 1e-2
    and more), and the null sharpens the twin by factors of 1 (to within the fit's 1e-8; it
    renormalises each row, stored as float16: equal to 1e-4)."""
    import copy

    from bertology.analysis import probe_context

    monkeypatch.setattr(probe_context, "random_like", lambda model, seed: copy.deepcopy(model))
    metrics, _ = probe_twin(tmp_path)
    columns = read_replicates(tmp_path / "run")
    twin_keys = [k for k in columns if k.startswith("attention/random/")]
    assert len(twin_keys) > 20
    for key in twin_keys:
        model_key = key.replace("attention/random/", "attention/")
        assert np.allclose(columns[key], columns[model_key], rtol=0, atol=1e-4,
                           equal_nan=True), key
        assert metrics[key] == pytest.approx(metrics[model_key], abs=1e-4), key
    assert np.std(columns["attention/random/deps/all/accuracy"]) > 0


@pytest.mark.slow
@pytest.mark.data("ud_english_ewt")  # 80 dev sentences: the excerpt has 16
def test_minilm_has_subject_heads_and_special_heads_that_its_random_twin_lacks(tmp_path):
    """all-MiniLM-L6-v2 against its random-init twin on 80 EWT dev sentences (measured: the
    best nsubj head 0.556 vs the twin's 0.000, offset baseline 0.352, 54 held-out subjects,
    paired contrast's 95% interval [0.42, 0.70]; special heads 0.472 vs 0.000, [0.40, 0.53];
    across − within JS 0.039 vs 0.000. seed=1, 2 draw other sentences: nsubj 0.569 vs 0.069
    and 0.395 vs 0.047, special heads 0.444 and 0.528 vs 0.000). The twin's maps are
    near uniform, so its [CLS]/[SEP]/punctuation share is about their share of the tokens
    (under one half) and its best head is no subject detector: Clark et al.'s heads are
    pretraining's, and model − twin, paired resample by resample, says so."""
    from bertology.pipelines.probe import run

    cfg = compose_config("probe", [
        "model=minilm", "task=ud_pos", "analysis=attention", "logger=none", "seeds=[0]",
        "max_train_sentences=24", "max_eval_sentences=80", "analysis.attention.heatmaps=false",
        "analysis.attention.kovaleva_sentences=5", "analysis.attention.min_dependents=20",
        f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = run(cfg, tmp_path / "run")
    columns = read_replicates(tmp_path / "run")
    nsubj, special = "deps/nsubj/accuracy", "special_heads_fraction"
    assert metrics[f"attention/{nsubj}"] > metrics[f"attention/random/{nsubj}"] + 0.3
    assert metrics[f"attention/random/{nsubj}"] < metrics["attention/random/deps/nsubj/baseline"]
    assert metrics[f"attention/{special}"] > 0.25 > metrics[f"attention/random/{special}"]
    for key in (nsubj, special):  # the paired contrast's 95% interval lies above zero
        contrast = columns[f"attention/{key}"] - columns[f"attention/random/{key}"]
        assert np.quantile(contrast, 0.025) > 0.1, key


@pytest.mark.slow
@pytest.mark.data("ud_english_ewt")
def test_minilms_attention_null_is_as_focused_as_minilm_and_its_twin_is_not(tmp_path):
    """The null the twin parts read (the twin's maps sharpened to MiniLM's entropy, head by
    head) on 80 EWT dev sentences, against entropies computed here by scipy: the raw twin's
    word rows sit near uniform's entropy, the null's at MiniLM's, well under it; the null's
    heads differ (within-layer JS divergence well above the raw twin's) and a layer's heads
    are more alike than heads across layers, so head_similarity's twin part no longer reads
    a contrast with zero. Measured on 300 sentences (bench/bench_attention_nulls.py): entropy
    0.983 of uniform (twin), 0.623 (null), 0.603 (MiniLM); JS within a layer 0.003, 0.067,
    0.153; across − within +0.000, +0.013, +0.038. The null's special heads' share stays 0
    there: no untrained head this focused lands on [CLS], [SEP] or punctuation (mean mass
    0.18, under their share of the tokens, 0.22; MiniLM's 0.49)."""
    from scipy.stats import entropy

    from bertology.config.probe_config import load_probe_config
    from bertology.pipelines.probe import build_probe_context, run

    cfg = compose_config("probe", [
        "model=minilm", "task=ud_pos", "analysis=attention", "logger=none", "seeds=[0]",
        "max_train_sentences=24", "max_eval_sentences=80", "analysis.attention.heatmaps=false",
        "analysis.attention.kovaleva_sentences=5", f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = run(cfg, tmp_path / "run")
    ctx = build_probe_context(load_probe_config(cfg), tmp_path / "again")
    model, twin = ctx.features("model", "eval"), ctx.features("random", "eval")
    count = model.num_sentences
    null = build_attention_null(model, twin, count)

    def entropy_ratio(features) -> float:
        """Mean entropy of every head's word rows over the mean ln(n + 2): 1 is uniform."""
        found, uniform = [], []
        for i in range(count):
            rows = features.attention_map(i)[:, :, 1:-1, :].astype(np.float64)
            found.append(entropy(rows, axis=-1).mean((0, 1)))
            uniform.append(np.full(rows.shape[2], np.log(rows.shape[-1])))
        return float(np.concatenate(found).mean() / np.concatenate(uniform).mean())

    ratios = {name: entropy_ratio(f) for name, f in
              (("model", model), ("twin", twin), ("null", null))}
    assert ratios["twin"] > 0.95
    assert ratios["null"] < 0.7 and ratios["null"] == pytest.approx(ratios["model"], abs=0.03)
    layer_means = [metrics[f"attention/random/layer_{layer:02d}/entropy"]
                   for layer in range(1, 7)]
    model_means = [metrics[f"attention/layer_{layer:02d}/entropy"] for layer in range(1, 7)]
    assert np.mean(layer_means) / np.mean(model_means) == pytest.approx(
        ratios["null"] / ratios["model"], abs=0.01)
    key = "head_divergence/across_minus_within"
    assert metrics["attention/random/head_divergence/within_layer"] > 0.03
    assert metrics[f"attention/random/{key}"] > 0.005
    assert metrics["attention/special_heads_fraction"] > 0.25
