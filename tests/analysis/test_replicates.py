"""Bootstrap replicates over items: deterministic per item count, the right statistic on each
resample, and a spread that matches the textbook standard error."""

from __future__ import annotations

import numpy as np
import pytest

from bertology.run.replicates import (
    bootstrap_indices,
    compute_mean_replicates,
    compute_ratio_replicates,
    read_replicates,
    resample_counts,
    resample_sums,
    write_replicates,
)


def test_indices_depend_on_the_item_count_only():
    assert np.array_equal(bootstrap_indices(50), bootstrap_indices(50))
    assert not np.array_equal(bootstrap_indices(50)[:, :49], bootstrap_indices(49))
    assert bootstrap_indices(7).min() >= 0 and bootstrap_indices(7).max() <= 6


def test_ratio_replicates_pool_sentences_by_hand():
    # three sentences: (correct, words) = (1, 2), (3, 3), (0, 5); resample [0, 1, 1] and [2, 2, 0]
    correct, words = np.array([1, 3, 0]), np.array([2, 3, 5])
    indices = np.array([[0, 1, 1], [2, 2, 0]])
    reps = compute_ratio_replicates(correct, words, indices)
    assert reps == pytest.approx([(1 + 3 + 3) / (2 + 3 + 3), (0 + 0 + 1) / (5 + 5 + 2)])


def test_replicate_spread_is_the_binomial_standard_error():
    rng = np.random.default_rng(0)
    correct = (rng.random(2000) < 0.3).astype(float)
    spread = compute_ratio_replicates(correct, np.ones_like(correct)).std()
    textbook = np.sqrt(correct.mean() * (1 - correct.mean()) / len(correct))
    assert spread == pytest.approx(textbook, rel=0.12)
    assert compute_mean_replicates(correct).mean() == pytest.approx(correct.mean(), abs=0.002)


def test_replicates_round_trip(tmp_path):
    write_replicates(tmp_path, "linear_ud_pos", {"probe/layer_01/accuracy": np.array([0.5, 0.25]),
                                                 "probe/layer_02/accuracy": np.array([1.0, 0.0])})
    write_replicates(tmp_path, "geometry_ud_pos", {"geometry/layer_01/anisotropy": np.ones(2)})
    columns = read_replicates(tmp_path)
    assert set(columns) == {"probe/layer_01/accuracy", "probe/layer_02/accuracy",
                            "geometry/layer_01/anisotropy"}
    assert columns["probe/layer_01/accuracy"].tolist() == [0.5, 0.25]
    assert read_replicates(tmp_path / "nowhere") == {}


def test_resample_counts_are_each_resamples_item_multiplicities():
    indices = np.array([[0, 0, 2], [1, 2, 1]])
    counts = resample_counts(indices)
    assert counts.tolist() == [[2, 0, 1], [0, 2, 1]]
    values = np.array([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0]])
    assert resample_sums(values, indices).tolist() == [[6.0, 60.0], [8.0, 80.0]]
    many = bootstrap_indices(30)
    assert np.array_equal(resample_counts(many) @ np.arange(30.0), np.arange(30.0)[many].sum(1))
