"""analysis=geometry: Ethayarajh's (2019) contextuality measures and linear CKA on constructed
arrays, and the probe pipeline end to end (with and without compare_to)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from conftest import compose_config

from bertology.analysis.geometry import (
    build_sample_plan,
    build_type_occurrences,
    compute_anisotropy,
    compute_anisotropy_replicates,
    compute_intra_similarity,
    compute_layer_geometry,
    compute_layer_replicates,
    compute_linear_cka,
    compute_mean_pairwise_cosine,
    compute_mev,
    compute_self_similarity,
    compute_self_similarity_replicates,
    compute_sentence_of,
    sample_pairs,
)
from bertology.config.analysis_settings import GeometrySettings
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


def random_pairs(sentences: int, words_per_sentence: int, count: int = 2000) -> np.ndarray:
    offsets = np.arange(sentences + 1) * words_per_sentence
    return sample_pairs(compute_sentence_of(offsets), count, np.random.default_rng(0))


def test_anisotropy_is_one_when_every_vector_points_the_same_way():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=16)
    vectors = rng.uniform(0.1, 5.0, size=(200, 1)) * direction  # (200, 16), lengths differ
    assert compute_anisotropy(vectors, random_pairs(20, 10)) == pytest.approx(1.0)


def test_anisotropy_is_near_zero_for_an_isotropic_gaussian():
    vectors = np.random.default_rng(0).normal(size=(400, 1000))
    assert abs(compute_anisotropy(vectors, random_pairs(40, 10))) < 0.01


def test_pairs_come_from_different_sentences():
    offsets = np.array([0, 3, 4, 9])
    sentence_of = compute_sentence_of(offsets)
    assert sentence_of.tolist() == [0, 0, 0, 1, 2, 2, 2, 2, 2]
    pairs = sample_pairs(sentence_of, 500, np.random.default_rng(1))
    assert pairs.shape == (500, 2)
    assert np.all(sentence_of[pairs[:, 0]] != sentence_of[pairs[:, 1]])
    with pytest.raises(UserError, match="two sentences"):
        sample_pairs(np.zeros(5, dtype=int), 10, np.random.default_rng(0))


def test_self_similarity_is_one_for_a_word_identical_in_every_context():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(30, 8))
    vectors[[2, 7, 11, 20]] = vectors[2]  # one word type, the same vector in 4 contexts
    assert compute_self_similarity(vectors, [np.array([2, 7, 11, 20])]) == pytest.approx(1.0)
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = units[:6] @ units[:6].T  # brute force over j ≠ k
    expected = (cosines.sum() - 6) / 30
    assert compute_mean_pairwise_cosine(vectors[:6]) == pytest.approx(expected)
    assert abs(compute_mean_pairwise_cosine(rng.normal(size=(50, 2000)))) < 0.01


# ---------------------------------------------------------------- item replicates


def test_self_similarity_replicates_count_pairs_of_different_sentences_by_hand():
    """A type in sentences 0, 1, 2: a resample drawing sentence 0 twice, 1 once and 2 never
    has cross-sentence pairs only between the copies of u0 and u1, so its self-similarity
    is cos(u0, u1) (a copy of u0 against u0 is one context, not two); ones give the point."""
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [5.0, 5.0]])
    types, sentence_of = [np.array([0, 1, 2])], np.array([0, 1, 2, 2])
    weights = np.array([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0], [3.0, 0.0, 0.0]])
    reps = compute_self_similarity_replicates(vectors, types, sentence_of, weights)
    assert reps[0] == pytest.approx(0.6)
    assert reps[1] == pytest.approx(compute_self_similarity(vectors, types))
    assert np.isnan(reps[2])  # one sentence left: no second context


def test_anisotropy_replicates_weight_each_pair_by_its_sentences_copies():
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    pairs, sentence_of = np.array([[0, 1], [0, 2]]), np.array([0, 1, 2])
    weights = np.array([[1.0, 1.0, 1.0], [2.0, 0.0, 1.0], [1.0, 3.0, 1.0]])
    reps = compute_anisotropy_replicates(vectors, pairs, sentence_of, weights)
    c02 = 1 / np.sqrt(2)  # pair (0, 1) has cosine 0
    assert reps == pytest.approx([c02 / 2, c02, c02 / 4])
    assert reps[0] == pytest.approx(compute_anisotropy(vectors, pairs))


def sentences_of_words(sentences: int, words: int, vocabulary: int, seed: int):
    rng = np.random.default_rng(seed)
    built = [ProbeSentence(tuple(f"w{v}" for v in rng.integers(0, vocabulary, words)),
                           (None,) * words) for _ in range(sentences)]
    return built, np.arange(sentences + 1) * words


def test_layer_replicates_with_unit_weights_are_the_point_estimates():
    sentences, offsets = sentences_of_words(30, 6, 12, seed=0)
    vectors = np.random.default_rng(1).normal(size=(int(offsets[-1]), 8)) + 0.5
    plans = {seed: build_sample_plan(sentences, offsets, GeometrySettings(pairs=300,
                                                                          min_occurrences=3),
                                     seed) for seed in (0, 1)}
    reps = compute_layer_replicates(vectors, plans, offsets, np.ones((1, 30)))
    for key, values in reps.items():
        point = np.mean([compute_layer_geometry(vectors, plan, offsets)[key]
                         for plan in plans.values()])
        assert values[0] == pytest.approx(point), key


def test_noise_layers_give_slope_intervals_that_cover_zero():
    """Isotropic Gaussian vectors drawn afresh for every 'layer': no measure changes with
    depth, so the 95% bootstrap interval of each layer slope should cover 0."""
    covered = {"anisotropy": 0, "self_similarity_adjusted": 0, "intra_similarity": 0}
    weights = resample_counts(bootstrap_indices(40))
    for trial in range(10):
        sentences, offsets = sentences_of_words(40, 6, 15, seed=trial)
        plans = {0: build_sample_plan(sentences, offsets, GeometrySettings(
            pairs=500, min_occurrences=3), 0)}
        rng = np.random.default_rng(100 + trial)
        layers = [compute_layer_replicates(rng.normal(size=(240, 16)), plans, offsets, weights)
                  for _ in range(4)]
        for key in covered:
            table = np.stack([layer[key] for layer in layers], axis=-1)  # (R, layers)
            low, high = np.percentile(reduce_slope(np.arange(4.0), table), [2.5, 97.5])
            covered[key] += low <= 0.0 <= high
    assert all(count >= 8 for count in covered.values()), covered


def test_type_occurrences_are_lower_cased_one_per_sentence():
    sentences = [ProbeSentence(("The", "dog", "saw", "the", "cat"), (None,) * 5),
                 ProbeSentence(("the", "cat"), (None,) * 2),
                 ProbeSentence(("A", "Dog"), (None,) * 2)]
    offsets = np.array([0, 5, 7, 9])
    occurrences = build_type_occurrences(sentences, offsets, min_occurrences=2)
    assert {k: v.tolist() for k, v in occurrences.items()} == {
        "cat": [4, 6], "dog": [1, 8], "the": [0, 5]}


def test_intra_similarity_is_one_when_a_sentence_repeats_one_vector():
    rng = np.random.default_rng(0)
    offsets = np.array([0, 3, 7, 8])  # the one-word sentence is left out of the average
    vectors = np.repeat(rng.normal(size=(3, 5)), [3, 4, 1], axis=0)  # (8, 5)
    assert compute_intra_similarity(vectors, offsets) == pytest.approx(1.0)
    vectors = rng.normal(size=(8, 5))
    expected = []
    for start, end in ((0, 3), (3, 7)):
        mean = vectors[start:end].mean(axis=0)
        expected.append(np.mean([v @ mean / np.linalg.norm(v) / np.linalg.norm(mean)
                                 for v in vectors[start:end]]))
    assert compute_intra_similarity(vectors, offsets) == pytest.approx(np.mean(expected))


def test_mev_is_one_for_a_rank_one_occurrence_matrix():
    rng = np.random.default_rng(0)
    assert compute_mev(np.outer(rng.normal(size=10), rng.normal(size=6))) == pytest.approx(1.0)
    assert compute_mev(np.eye(4)) == pytest.approx(0.25)


def test_linear_cka_is_one_for_the_same_space_up_to_rotation_and_scale():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 12)) @ rng.normal(size=(12, 12))  # correlated features
    rotation, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    assert compute_linear_cka(x, x) == pytest.approx(1.0)
    assert compute_linear_cka(x, 7.5 * x @ rotation) == pytest.approx(1.0)
    assert compute_linear_cka(x.astype(np.float32), x @ rotation + 3.0) == pytest.approx(1.0)
    y = rng.normal(size=(300, 5))
    assert compute_linear_cka(x, y) == pytest.approx(compute_linear_cka(x, -2.0 * y))
    assert compute_linear_cka(x, y) == pytest.approx(compute_linear_cka(y, x))


def test_linear_cka_is_near_zero_for_independent_representations():
    rng = np.random.default_rng(0)
    assert compute_linear_cka(rng.normal(size=(5000, 10)), rng.normal(size=(5000, 10))) < 0.01


def read_table(path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def probe(tmp_path, overrides: list[str]):
    from bertology.pipelines.probe import run

    cfg = compose_config("probe", ["analysis=geometry", "logger=none", "max_train_sentences=20",
                                   "max_eval_sentences=60", "seeds=[0]",
                                   f"paths.cache_dir={tmp_path / 'cache'}", *overrides])
    out = tmp_path / "run"
    return run(cfg, out), out


@pytest.mark.slow
def test_geometry_runs_end_to_end_on_a_tiny_random_model(tmp_path):
    metrics, out = probe(tmp_path, ["init=random"])  # a random tiny BERT: no pretraining
    rows = read_table(out / "tables" / "geometry_synthetic_pos.csv")
    assert {row["model"] for row in rows} == {"model", "random"}
    assert sorted({int(row["layer"]) for row in rows}) == [0, 1, 2]  # size=tiny: 2 layers
    for row in rows:
        adjusted = float(row["self_similarity"]) - float(row["anisotropy"])
        assert float(row["self_similarity_adjusted"]) == pytest.approx(adjusted)
        assert -1.0 <= float(row["intra_similarity"]) <= 1.0
    assert (out / "plots" / "geometry_synthetic_pos.png").exists()
    assert not (out / "plots" / "geometry_cka_synthetic_pos.png").exists()
    for measure in ("anisotropy", "self_similarity", "intra_similarity",
                    "self_similarity_adjusted", "intra_similarity_adjusted", "cka_random"):
        assert f"geometry/layer_02/{measure}" in metrics
    assert "geometry/random/layer_00/anisotropy" in metrics
    assert "geometry/layer_00/cka" not in metrics
    assert all(math.isfinite(value) for value in metrics.values())


def test_geometry_run_writes_replicates_for_the_model_and_its_random_twin(tmp_path):
    metrics, out = probe(tmp_path, ["init=random"])
    columns = read_replicates(out)
    for scope in ("geometry", "geometry/random"):
        for layer in range(3):
            for measure in ("anisotropy", "self_similarity", "self_similarity_adjusted",
                            "intra_similarity", "intra_similarity_adjusted"):
                key = f"{scope}/layer_{layer:02d}/{measure}"
                reps = columns[key]
                assert reps.shape == (REPLICATES,) and np.isfinite(reps).all(), key
                assert reps.mean() == pytest.approx(metrics[key], abs=0.02), key
                assert 0.0 < reps.std() < 0.1, key
    for finding in ("anisotropy", "self_similarity"):
        result = judge(load_catalog()[finding], [RunDir(out, metrics, {"seed": 0})])
        assert all(test.estimate.items for test in result.tests), finding


def save_tiny_bert(path, tokenizer, seed: int) -> str:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.slow
def test_geometry_compares_two_checkpoints_with_cka(tmp_path, synthetic_tokenizer):
    first = save_tiny_bert(tmp_path / "first", synthetic_tokenizer, seed=10)
    second = save_tiny_bert(tmp_path / "second", synthetic_tokenizer, seed=11)
    metrics, out = probe(tmp_path / "same", [f"model.name_or_path={first}",
                                             f"compare_to={first}"])
    rows = read_table(out / "tables" / "geometry_synthetic_pos.csv")
    model_rows = [row for row in rows if row["model"] == "model"]
    assert [float(row["cka"]) for row in model_rows] == pytest.approx([1.0] * 3)
    assert all(row["cka"] == "" for row in rows if row["model"] != "model")
    assert (out / "plots" / "geometry_cka_synthetic_pos.png").exists()

    metrics, out = probe(tmp_path / "other", [f"model.name_or_path={first}",
                                              f"compare_to={second}"])
    cka = [metrics[f"geometry/layer_{layer:02d}/cka"] for layer in range(3)]
    assert all(0.0 < value < 0.99 for value in cka)
    assert "geometry/compare/layer_01/self_similarity" in metrics
    assert metrics["geometry/min_layer/cka"] in (0.0, 1.0, 2.0)
