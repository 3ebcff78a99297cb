"""Concept erasure does what its papers promise, and the engine reports no effect on noise:
LEACE leaves a fresh probe at chance on a planted concept, moves the states less than INLP does
on the same data, and agrees with the formula computed another way; AlterRep puts a binary
concept on the chosen side and leaves the nullspace alone; mean-ablating a site changes a
shuffled concept's probe accuracy by nothing beyond sampling noise, while the same yardstick
finds the real concept's loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from intervention_cases import leace_by_hand, planted, tiny_mlm

from bertology.analysis.erasure import (
    AlterRep,
    compute_concept_directions,
    compute_inlp_erasure,
    compute_random_erasure,
    compute_shuffled_concept,
    fit_leace,
)
from bertology.analysis.inlp import fit_inlp, fit_linear_probe, split_dev
from bertology.analysis.interventions import MeanAblation, Site, extract_site, intervene
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


# ---------------------------------------------------------------- no effect on noise

SENTENCES, FIT, POSITION = 600, 400, 3
SHUFFLES = 20


@torch.no_grad()
def final_states(model, inputs, ablate: MeanAblation | None) -> np.ndarray:
    """(sentences, hidden) the last layer's output at POSITION, with the embeddings' output
    at POSITION mean-ablated or not."""
    at = [[POSITION]] * len(inputs["input_ids"])
    if ablate is None:
        return extract_site(model, inputs, Site(2), at).numpy()
    with intervene(model, Site(0), at, ablate):
        return extract_site(model, inputs, Site(2), at).numpy()


def effect(clean: np.ndarray, ablated: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """A probe fit on the clean states of the first FIT sentences; its held-out accuracy on
    the clean states minus on the ablated ones, and the 4σ band of that paired difference
    (McNemar: √discordant / n)."""
    probe = fit_linear_probe(clean[:FIT], labels[:FIT], 0)
    right = probe.predict(clean[FIT:]) == labels[FIT:]
    right_ablated = probe.predict(ablated[FIT:]) == labels[FIT:]
    band = 4 * np.sqrt(np.sum(right != right_ablated)) / len(right)
    return float(right.mean() - right_ablated.mean()), float(band)


def test_mean_ablation_shows_no_effect_on_a_shuffled_concept(one_thread):
    """A random-init BERT on random tokens from 12 ids; the concept is whether the token at
    position 3 is among the first six. Mean-ablating the embeddings' output there takes the
    token away from a probe reading the last layer (the real concept: a large effect); with
    the labels shuffled, there is nothing to take away, and the same yardstick must say so
    for every shuffle and on average."""
    model = tiny_mlm("bert")
    ids = torch.randint(5, 17, (SENTENCES, 8), generator=torch.Generator().manual_seed(3))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    reference = {k: v[:FIT] for k, v in inputs.items()}
    mean = extract_site(model, reference, Site(0), [[POSITION]] * FIT).mean(dim=0)
    clean, ablated = final_states(model, inputs, None), final_states(model, inputs,
                                                                     MeanAblation(mean))
    real = (ids[:, POSITION] < 11).numpy().astype(int)
    found, band = effect(clean, ablated, real)
    assert found > band  # the yardstick can fail the null
    rng = np.random.default_rng(0)
    shuffled = [effect(clean, ablated, rng.permutation(real)) for _ in range(SHUFFLES)]
    assert all(abs(e) <= b for e, b in shuffled), shuffled
    effects = np.array([e for e, _ in shuffled])
    standard_error = effects.std(ddof=1) / np.sqrt(SHUFFLES)
    assert abs(effects.mean()) <= 4 * standard_error < 0.05, effects


def test_a_random_erasure_of_equal_rank_is_the_control_the_concept_beats(concept):
    """The random subspace of LEACE's rank is an orthogonal projection removing exactly that
    many directions; on isotropic states it removes rank/dim of their squared norm (by hand:
    E|Qᵀx|² = rank for unit-variance x); erasing the planted concept sends a probe to chance
    while the random erasure of equal rank leaves it near where it was (model − control)."""
    x, labels, x_eval, labels_eval = concept
    leace = fit_leace(x, labels)
    control = compute_random_erasure(x.shape[1], leace.rank, seed=1)
    a = control.matrix
    assert np.allclose(a @ a, a, atol=1e-12) and np.allclose(a, a.T, atol=1e-12)
    assert round(np.trace(np.eye(len(a)) - a)) == leace.rank == control.rank
    noise = np.random.default_rng(2).standard_normal((20_000, x.shape[1]))
    share = ((noise - erased(control, noise)) ** 2).sum(axis=1).mean() / x.shape[1]
    assert share == pytest.approx(leace.rank / x.shape[1], rel=0.05)
    before = fit_linear_probe(x, labels, 0).score(x_eval, labels_eval)
    after_control = fit_linear_probe(erased(control, x), labels, 0).score(
        erased(control, x_eval), labels_eval)
    after_leace = fit_linear_probe(erased(leace, x), labels, 0).score(
        erased(leace, x_eval), labels_eval)
    assert before - after_control < 0.1 < before - after_leace
    with pytest.raises(UserError, match="removes 1 to 31 directions"):
        compute_random_erasure(32, 32, seed=0)


def test_a_shuffled_concept_keeps_its_classes_and_carries_nothing(concept):
    """The shuffled labels have the concept's class counts; LEACE fit on them removes no more
    than chance from a probe of the real concept (its directions are noise)."""
    x, labels, x_eval, labels_eval = concept
    shuffled = compute_shuffled_concept(labels, seed=3)
    assert np.array_equal(np.bincount(shuffled), np.bincount(labels))
    assert (shuffled != labels).mean() > 0.5
    before = fit_linear_probe(x, labels, 0).score(x_eval, labels_eval)
    noise_eraser = fit_leace(x, shuffled)
    after = fit_linear_probe(erased(noise_eraser, x), labels, 0).score(
        erased(noise_eraser, x_eval), labels_eval)
    assert before - after < 0.1
