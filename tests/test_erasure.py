"""Concept erasure does what its papers promise: LEACE leaves a fresh probe at chance on a
planted concept, moves the states less than INLP does on the same data, and agrees with the
formula computed another way; AlterRep puts a binary concept on the chosen side and leaves the
nullspace alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from intervention_cases import leace_by_hand, planted

from bertology.analysis.erasure import (
    AlterRep,
    compute_concept_directions,
    compute_inlp_erasure,
    fit_leace,
)
from bertology.analysis.inlp import fit_inlp, fit_linear_probe, split_dev
from bertology.errors import UserError

TRAIN, EVAL = 2000, 1000
CHANCE = 1 / 3  # three balanced classes
# a held-out accuracy is a binomial share: 4 standard errors at chance put a probe with no
# information inside the band with probability 1 − 6e-5
BAND = 4 * np.sqrt(CHANCE * (1 - CHANCE) / EVAL)


def erased(erasure, x: np.ndarray) -> np.ndarray:
    return erasure.apply(torch.as_tensor(x)).numpy()


@pytest.fixture(scope="module")
def concept():
    """A 3-class concept planted in 32-dimensional states, separable before erasure."""
    x, labels = planted(TRAIN + EVAL, 32, seed=0, separation=0.5)
    return x[:TRAIN], labels[:TRAIN], x[TRAIN:], labels[TRAIN:]


def test_leace_leaves_a_fresh_probe_at_chance(concept):
    x, labels, x_eval, labels_eval = concept
    assert fit_linear_probe(x, labels, 0).score(x_eval, labels_eval) > 0.95  # planted
    leace = fit_leace(x, labels)
    assert leace.rank == 2  # k − 1 directions for k classes
    train, held_out = erased(leace, x), erased(leace, x_eval)
    # the guarantee, exact on the data it was fit on: every class has the same mean
    spread = [train[labels == c].mean(axis=0) - train.mean(axis=0) for c in range(3)]
    assert np.abs(spread).max() < 1e-10
    probe = fit_linear_probe(train, labels, 0)
    assert np.abs(probe.coef_).max() < 1e-3  # the optimum is the constant predictor
    assert abs(probe.score(held_out, labels_eval) - CHANCE) <= BAND


def test_leace_moves_the_states_less_than_inlp(concept):
    x, labels, x_eval, labels_eval = concept
    (train_x, train_y), dev = split_dev(x, labels, 0)
    inlp = fit_inlp(train_x, train_y, iterations=30, seed=0, dev=dev, min_accuracy=CHANCE + 0.02)
    inlp_erasure, leace = compute_inlp_erasure(inlp), fit_leace(x, labels)
    at_chance = fit_linear_probe(erased(inlp_erasure, x), labels, 0)
    assert abs(at_chance.score(erased(inlp_erasure, x_eval), labels_eval) - CHANCE) <= BAND
    change = {name: np.mean(np.sum((erased(e, x) - x) ** 2, axis=1))
              for name, e in (("leace", leace), ("inlp", inlp_erasure))}
    assert change["leace"] <= change["inlp"], change


def test_leace_agrees_with_the_formula_computed_another_way(concept):
    x, labels, x_eval, _ = concept
    expected = leace_by_hand(x, labels)(x_eval)
    np.testing.assert_allclose(erased(fit_leace(x, labels), x_eval), expected, rtol=0,
                               atol=1e-6)


def test_alterrep_moves_a_binary_concept_to_the_chosen_side():
    x, labels = planted(2000, 16, seed=1, classes=2, separation=0.5)
    x = x - x.mean(axis=0)  # AlterRep's sides are of wᵀh = 0: the boundary of centred states
    probe = fit_linear_probe(x, labels, 0)
    assert probe.score(x, labels) > 0.95
    inlp = fit_inlp(x, labels, iterations=1, seed=0)  # the probe's one direction
    directions = compute_concept_directions(inlp.projection)  # (1, 16)
    directions *= np.sign(directions @ probe.coef_[0])[:, None]  # positive: class 1's side
    for side in (1, -1):
        pushed = erased(AlterRep(directions, alpha=1.0, side=side), x)
        assert np.mean(probe.predict(pushed) == (side == 1)) > 0.95
        np.testing.assert_allclose(pushed @ inlp.projection, x @ inlp.projection, atol=1e-10)
    flipped = erased(AlterRep(directions, alpha=1.0), x)
    assert np.mean(probe.predict(flipped) != probe.predict(x)) > 0.9
    np.testing.assert_allclose(erased(AlterRep(directions, alpha=1.0), flipped), x, atol=1e-10)


def test_alterrep_refuses_directions_that_are_not_orthonormal():
    with pytest.raises(UserError, match="orthonormal"):
        AlterRep(np.ones((2, 4)), alpha=1.0)
