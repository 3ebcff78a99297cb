"""Structural probes (Hewitt & Manning, 2019): tree helpers, MST, scores, probe fitting, and
the `probe analysis=structural` pipeline end to end."""

from __future__ import annotations

import csv
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import compose_config
from scipy.stats import spearmanr

from bertology.analysis.structural import fit_probe, predict_probe, run
from bertology.analysis.tree_scores import (
    SPEARMAN_LENGTHS,
    compute_depth_parts,
    compute_depths,
    compute_distance_parts,
    compute_keep_mask,
    compute_kept_mst,
    compute_mst_edges,
    compute_row_spearman,
    compute_tree_distances,
    compute_uuas,
    score_depth,
    score_distance,
    score_linear_baseline,
    score_parts,
)
from bertology.config.analysis_settings import StructuralSettings
from bertology.data import synthetic
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import UserError
from bertology.run.replicates import (
    REPLICATES,
    bootstrap_indices,
    read_replicates,
    resample_counts,
)
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import load_catalog
from bertology.study.judge.evidence import reduce_slope
from bertology.study.judge.verdicts import judge

pytestmark = pytest.mark.usefixtures("one_thread")


# "the cat sat ." : the → cat → sat (root) ← .
HAND_HEADS = (2, 3, 0, 3)


def grammar_sentences(count: int) -> list[ProbeSentence]:
    sentences = [s for doc in synthetic.iter_documents(count, seed=1) for s in doc.sentences]
    return [ProbeSentence(s.words, s.upos, s.heads, s.deprels, s.upos)
            for s in sentences[:count]]


def random_heads(n: int, rng: np.random.Generator) -> tuple[int, ...]:
    """A uniform random recursive tree over a random word order: each word after the first
    attaches to an earlier one."""
    order = rng.permutation(n)
    heads = [0] * n
    for k in range(1, n):
        heads[order[k]] = int(order[rng.integers(k)]) + 1
    return tuple(heads)


def test_tree_distances_and_depths_on_a_hand_example():
    expected = np.array([[0, 1, 2, 3],
                         [1, 0, 1, 2],
                         [2, 1, 0, 1],
                         [3, 2, 1, 0]])
    assert (compute_tree_distances(HAND_HEADS) == expected).all()
    assert compute_depths(HAND_HEADS).tolist() == [2, 1, 0, 1]
    # a flat tree: every word hangs off word 2
    assert compute_tree_distances((2, 0, 2, 2))[0].tolist() == [0, 1, 2, 2]
    assert compute_depths((2, 0, 2, 2)).tolist() == [1, 0, 1, 1]
    assert compute_tree_distances((0,)).tolist() == [[0]]  # a one-word sentence
    assert compute_mst_edges(np.zeros((1, 1))) == []


def test_bad_heads_are_user_errors():
    with pytest.raises(UserError):
        compute_depths((2, 1))  # a cycle
    with pytest.raises(UserError):
        compute_tree_distances((0, 0, 2))  # two roots: not one tree


def is_spanning_tree(edges, n: int) -> bool:
    """n − 1 edges without a cycle (union-find) span n vertices."""
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for i, j in edges:
        ri, rj = find(i), find(j)
        if ri == rj:
            return False
        parent[ri] = rj
    return True


def brute_force_mst(weights: np.ndarray) -> tuple[float, set]:
    """The lightest of all spanning trees, by trying every (n − 1)-subset of edges."""
    n = len(weights)
    trees = [edges for edges in itertools.combinations(itertools.combinations(range(n), 2), n - 1)
             if is_spanning_tree(edges, n)]
    best = min(trees, key=lambda edges: sum(weights[i, j] for i, j in edges))
    return sum(weights[i, j] for i, j in best), set(best)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_mst_matches_brute_force(n):
    rng = np.random.default_rng(n)
    for _ in range(4):
        upper = np.triu(rng.random((n, n)), 1)
        weights = upper + upper.T
        weight, edges = brute_force_mst(weights)
        found = compute_mst_edges(weights)
        assert set(found) == edges
        assert sum(weights[i, j] for i, j in found) == pytest.approx(weight)


def test_gold_tree_gives_uuas_one_and_a_random_tree_much_less():
    sentences = grammar_sentences(200)
    rng = np.random.default_rng(0)
    gold_scores, random_scores = [], []
    for s in sentences:
        keep = compute_keep_mask(s)
        gold = compute_tree_distances(s.heads)
        noise = compute_tree_distances(random_heads(len(s.words), rng))
        gold_scores.append(compute_uuas(compute_kept_mst(gold, keep), s.heads, keep))
        random_scores.append(compute_uuas(compute_kept_mst(noise, keep), s.heads, keep))
    assert min(gold_scores) == 1.0
    assert np.mean(random_scores) < 0.4
    targets = [compute_tree_distances(s.heads).astype(float) for s in sentences]
    scores = score_distance(targets, sentences, targets)
    assert scores == {"uuas": 1.0, "dist_spearman": pytest.approx(1.0)}
    depths = [compute_depths(s.heads).astype(float) for s in sentences]
    assert score_depth(depths, sentences, depths) == {"root_acc": 1.0,
                                                      "depth_spearman": pytest.approx(1.0)}


def test_punctuation_is_left_out_of_uuas():
    sentence = ProbeSentence(("the", "cat", "sat", "."), ("DET", "NOUN", "VERB", "PUNCT"),
                             HAND_HEADS, None, ("DET", "NOUN", "VERB", "PUNCT"))
    keep = compute_keep_mask(sentence)
    assert keep.tolist() == [True, True, True, False]
    # the MST never touches "." and the sat–. edge is not gold: 2 of 2 edges
    assert compute_kept_mst(compute_tree_distances(HAND_HEADS), keep) == [(0, 1), (1, 2)]
    assert compute_uuas([(0, 1), (1, 2)], HAND_HEADS, keep) == 1.0
    assert compute_uuas([(0, 2), (1, 2)], HAND_HEADS, keep) == 0.5


def test_row_spearman_matches_scipy():
    rng = np.random.default_rng(0)
    pred, gold = rng.random((5, 9)), rng.integers(0, 4, (5, 9))  # gold has ties
    expected = [spearmanr(p, g).statistic for p, g in zip(pred, gold)]
    assert compute_row_spearman(pred, gold) == pytest.approx(expected)


# ---------------------------------------------------------------- item replicates


def reference_scores(predictions, depths, sentences, gold) -> dict[str, float]:
    """H&M's corpus scores computed directly (the module's algorithm before its scores were
    built from per-sentence parts): pooled UUAS, root accuracy, and the Spearman means per
    length averaged over the lengths 5-50 present (else all), nan rows skipped."""
    correct = total = roots = 0
    by_length: dict[str, dict[int, list]] = {"dist": {}, "depth": {}}
    for pred, depth, sentence, target in zip(predictions, depths, sentences, gold):
        keep = compute_keep_mask(sentence)
        gold_edges = {(min(c, h - 1), max(c, h - 1)) for c, h in enumerate(sentence.heads)
                      if h > 0 and keep[c] and keep[h - 1]}
        correct += len(gold_edges & set(compute_kept_mst(pred, keep)))
        total += len(gold_edges)
        kept = np.flatnonzero(keep)
        roots += int(sentence.heads[int(kept[np.argmin(depth[kept])])] == 0)
        n = len(pred)
        by_length["dist"].setdefault(n, []).extend(compute_row_spearman(pred, target))
        by_length["depth"].setdefault(n, []).extend(
            compute_row_spearman(depth[None], compute_depths(sentence.heads)[None]))

    def average(groups):
        low, high = SPEARMAN_LENGTHS
        lengths = [n for n in groups if low <= n <= high] or list(groups)
        means = [np.nanmean(groups[n]) for n in lengths if np.isfinite(groups[n]).any()]
        return float(np.mean(means)) if means else 0.0

    return {"uuas": correct / total, "dist_spearman": average(by_length["dist"]),
            "root_acc": roots / len(sentences), "depth_spearman": average(by_length["depth"])}


def random_trees(count: int, rng: np.random.Generator):
    """Sentences of 3-12 words with random trees, random symmetric predicted distances
    (some constant), gold distances, and each sentence's depth guess (row sums)."""
    sentences, predictions, gold, depths = [], [], [], []
    for index in range(count):
        n = int(rng.integers(3, 13))
        sentences.append(ProbeSentence(tuple("w" * n), (None,) * n, random_heads(n, rng)))
        pred = rng.random((n, n)) if index % 7 else np.ones((n, n))  # constant rows: nan ρ
        pred = pred + pred.T
        predictions.append(pred)
        gold.append(compute_tree_distances(sentences[-1].heads).astype(float))
        depths.append(pred.sum(1))
    return sentences, predictions, gold, depths


def test_scores_from_parts_match_a_direct_computation():
    sentences, predictions, gold, depths = random_trees(40, np.random.default_rng(0))

    def scores(chosen):
        pick = [sentences[i] for i in chosen]
        got = score_distance([predictions[i] for i in chosen], pick, [gold[i] for i in chosen])
        got |= score_depth([depths[i] for i in chosen], pick,
                           [compute_depths(s.heads).astype(float) for s in pick])
        return got, reference_scores([predictions[i] for i in chosen],
                                     [depths[i] for i in chosen], pick,
                                     [gold[i] for i in chosen])

    got, expected = scores(range(40))
    assert got == pytest.approx(expected)
    # no sentence of 5-50 words: the average falls back to every length
    got, expected = scores([i for i, s in enumerate(sentences) if len(s.words) < 5])
    assert got == pytest.approx(expected)


def test_uuas_replicates_pool_the_drawn_sentences_edges_by_hand():
    """Two 4-word chains: the first predicted as its chain (3 of 3 edges), the second as a
    star from word 0 (1 of 3). A resample of the first twice is 6/6, of the second twice
    2/6, of both 4/6, the point estimate."""
    chain = ProbeSentence(tuple("abcd"), (None,) * 4, (0, 1, 2, 3))
    line = np.abs(np.subtract.outer(np.arange(4), np.arange(4))).astype(float)
    star = np.array([[0, 1, 1, 1], [1, 0, 2, 2], [1, 2, 0, 2], [1, 2, 2, 0]], dtype=float)
    gold = [compute_tree_distances(chain.heads).astype(float)] * 2
    parts = compute_distance_parts([line, star], [chain, chain], gold)
    assert parts["hits"].tolist() == [3, 1] and parts["units"].tolist() == [3, 3]
    weights = resample_counts(np.array([[0, 0], [1, 1], [0, 1]]))
    assert score_parts("distance", parts, weights)["uuas"] == pytest.approx([1, 1 / 3, 2 / 3])
    depth = compute_depth_parts([np.arange(4.0), np.arange(4.0)[::-1].copy()], [chain, chain],
                                [compute_depths(chain.heads).astype(float)] * 2)
    assert score_parts("depth", depth, weights)["root_acc"] == pytest.approx([1, 0, 0.5])


@pytest.mark.slow
def test_noise_predictions_give_layer_slope_intervals_that_cover_zero():
    """Random distances drawn afresh for every 'layer' (independent of the trees): UUAS and
    DSpr. do not change with depth, so the 95% interval of each layer slope covers 0."""
    covered = {"uuas": 0, "dist_spearman": 0}
    weights = resample_counts(bootstrap_indices(150))  # at 200 sentences and 80 trials the
    # bootstrap SD of the UUAS slope was 0.0139 against a Monte-Carlo SD of 0.0137 (0.95
    # coverage); at 60 it ran ~15% low, the small-sample bias of a percentile interval
    for trial in range(10):
        rng = np.random.default_rng(trial)
        sentences, _, gold, _ = random_trees(150, rng)
        layers = []
        for _ in range(4):
            predictions = [rng.random((len(s.words),) * 2) for s in sentences]
            predictions = [p + p.T for p in predictions]
            parts = compute_distance_parts(predictions, sentences, gold)
            layers.append(score_parts("distance", parts, weights))
        for metric in covered:
            table = np.stack([layer[metric] for layer in layers], axis=-1)  # (R, layers)
            low, high = np.percentile(reduce_slope(np.arange(4.0), table), [2.5, 97.5])
            covered[metric] += low <= 0.0 <= high
    assert all(count >= 8 for count in covered.values()), covered


def test_linear_baseline_is_perfect_on_a_right_branching_chain():
    n = 7
    chain = ProbeSentence(tuple("abcdefg"), (None,) * n, (0, *range(1, n)))
    targets = {"distance": [torch.from_numpy(compute_tree_distances(chain.heads)).float()],
               "depth": [torch.from_numpy(compute_depths(chain.heads)).float()]}
    rows = score_linear_baseline([chain], ["distance", "depth"], targets)
    assert rows[0]["uuas"] == 1.0 and rows[1]["root_acc"] == 1.0
    assert rows[1]["depth_spearman"] == pytest.approx(1.0)


def tree_features(sentences, noise_dims: int, signal: bool, rng) -> list[torch.Tensor]:
    """Word i's vector marks the words on its path to the root (root excluded), so squared
    distances are exactly tree distances and squared norms depths; plus Gaussian noise."""
    width = max(len(s.words) for s in sentences)
    out = []
    for s in sentences:
        n = len(s.words)
        paths = np.zeros((n, width))
        for word in range(n):
            node = word
            while s.heads[node] > 0:
                paths[word, node] = 1.0
                node = s.heads[node] - 1
        noise = rng.normal(0, 0.5, (n, noise_dims))
        body = paths if signal else rng.normal(0, 0.5, (n, width))
        out.append(torch.tensor(np.concatenate([body, noise], axis=1), dtype=torch.float32))
    return out


@pytest.mark.parametrize("signal", [True, False])
def test_distance_probe_finds_tree_geometry_and_not_noise(signal):
    sentences = grammar_sentences(260)
    rng = np.random.default_rng(0)
    xs = tree_features(sentences, noise_dims=8, signal=signal, rng=rng)
    settings = StructuralSettings(rank=32, epochs=15, lr=0.01, batch_size=20, patience=3)
    scores = {}
    for kind, make, score in (("distance", compute_tree_distances, score_distance),
                              ("depth", compute_depths, score_depth)):
        ys = [torch.from_numpy(make(s.heads)).float() for s in sentences]
        fit = fit_probe(kind, (xs[:180], ys[:180]), (xs[180:200], ys[180:200]), settings, 0)
        scores |= score(predict_probe(fit.probe, xs[200:]), sentences[200:],
                        [y.numpy() for y in ys[200:]])
    if signal:
        assert scores["uuas"] > 0.9 and scores["dist_spearman"] > 0.9
        assert scores["root_acc"] > 0.9 and scores["depth_spearman"] > 0.8
    else:
        assert scores["uuas"] < 0.4 and scores["dist_spearman"] < 0.3
        assert scores["root_acc"] < 0.4


def test_a_task_without_trees_is_a_user_error(tmp_path):
    flat = [ProbeSentence(("Paris", "is", "big"), ("B-LOC", "O", "O"))]
    ctx = SimpleNamespace(config=SimpleNamespace(task=SimpleNamespace(name="conll03")),
                          sentences=lambda split: flat, out_dir=tmp_path)
    with pytest.raises(UserError, match="conll03.*ud_pos, ud_deps, synthetic_pos"):
        run(ctx, StructuralSettings())


@pytest.mark.slow
def test_probe_pipeline_writes_table_plot_and_metrics(tmp_path):
    from bertology.pipelines import probe

    cfg = compose_config("probe", [
        "analysis=structural", "task=synthetic_pos", "logger=none", "init=random", "seeds=[0]",
        "max_train_sentences=80", "max_eval_sentences=30", "analysis.structural.epochs=3",
        "analysis.structural.rank=16", f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = probe.run(cfg, tmp_path / "run")
    with (tmp_path / "run" / "tables" / "structural_synthetic_pos.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    layers = 3  # size=tiny: embeddings + 2 layers
    assert len(rows) == 2 * layers * 2 + 2  # (model, random) × layers × probes + baseline
    assert {r["model"] for r in rows} == {"model", "random", "linear_baseline"}
    assert (tmp_path / "run" / "plots" / "structural_synthetic_pos.png").stat().st_size > 0
    for metric in ("uuas", "dist_spearman", "root_acc", "depth_spearman"):
        for layer in range(layers):
            assert 0 <= metrics[f"structural/layer_{layer:02d}/{metric}"] <= 1
            assert f"structural/random/layer_{layer:02d}/{metric}" in metrics
        assert f"structural/linear_baseline/{metric}" in metrics
        assert metrics[f"structural/best_layer/{metric}"] in range(layers)
    assert all(math.isfinite(v) for v in metrics.values())
    columns = read_replicates(tmp_path / "run")
    for metric in ("uuas", "dist_spearman", "root_acc", "depth_spearman"):
        keys = [f"structural/linear_baseline/{metric}"] + [
            f"structural/{scope}layer_{layer:02d}/{metric}" for scope in ("", "random/")
            for layer in range(layers)]
        for key in keys:
            assert columns[key].shape == (REPLICATES,) and np.isfinite(columns[key]).all()
            assert columns[key].mean() == pytest.approx(metrics[key], abs=0.03), key
            assert columns[key].std() < 0.15, key
    for finding in ("structural_beats_baseline", "syntax_layers"):
        result = judge(load_catalog()[finding], [RunDir(tmp_path / "run", metrics, {"seed": 0})])
        assert all(test.estimate.items for test in result.tests), finding
