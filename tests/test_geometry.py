"""analysis=geometry: Ethayarajh's (2019) contextuality measures and linear CKA on constructed
arrays, and the probe pipeline end to end (with and without compare_to)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from conftest import compose_config

from bertology.analysis.geometry import (
    build_type_occurrences,
    compute_anisotropy,
    compute_intra_similarity,
    compute_linear_cka,
    compute_mean_pairwise_cosine,
    compute_mev,
    compute_self_similarity,
    compute_sentence_of,
    sample_pairs,
)
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import UserError


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


def save_tiny_bert(path, tokenizer, seed: int) -> str:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


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
