"""The verdict rules cannot say "holds" where the evidence does not show it: zero-variance
seeds, a discrete reduction at its boundary, one run on a side, many claims at once; and the
variance formulas against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bertology.findings.evidence import Evidence, evaluate
from bertology.findings.statistics import (
    Estimate,
    SignTest,
    TTest,
    combine_seeds,
    difference,
    holm,
    satterthwaite,
)
from bertology.findings.verdicts import FindingResult, FindingSpec, classify, correct_suite
from bertology.run.replicates import compute_ratio_replicates

SPEC = FindingSpec("demo", "a claim", "a paper", ())


def verdict(estimate: Estimate, margin: float = 0.0, expect: str = "greater") -> str:
    test = TTest(estimate, margin, expect)
    result = FindingResult(SPEC, [], [test], ["per seed"], p_holds=test.p_holds,
                           p_fails=test.p_fails)
    return classify(result, 0.05)[0]


# ---------------------------------------------------------------- hand computations


def test_seeds_without_replicates_give_the_t_interval():
    e = combine_seeds([1.0, 2.0, 3.0], [None, None, None])
    assert (e.mean, e.variance, e.dof, e.items) == (2.0, 1.0 / 3, 2, False)
    assert e.interval()[1] - 2.0 == pytest.approx(4.302653 / 3**0.5, rel=1e-6)


def test_random_effects_by_hand():
    """Two seeds, replicates r = (+1, −1, +1, −1) around each seed's value, shared items."""
    noise = np.array([1.0, -1.0, 1.0, -1.0]) * 0.1
    e = combine_seeds([0.5, 0.7], [0.5 + noise, 0.7 + noise])
    # V_items = var(seed-mean replicates) = var(0.6 ± 0.1) with ddof 1 = 0.04/3
    # σ²_own = 0 (the seeds move together), τ² = var(0.5, 0.7) = 0.02; V = 0.02/2 + 0.04/3
    assert e.variance == pytest.approx(0.01 + 0.04 / 3)
    assert e.dof == pytest.approx((0.01 + 0.04 / 3) ** 2 / (0.01**2 / 1))


def test_private_item_noise_is_not_counted_twice():
    """Seeds that differ only by their own item noise: τ² is 0, and V is that noise over n."""
    rng = np.random.default_rng(1)
    reps = [0.5 + rng.normal(0, 0.05, 4000) for _ in range(4)]
    values = [0.5 + 0.05 * z for z in (1.0, -1.0, 0.5, -0.5)]  # spread ≈ the item noise
    e = combine_seeds(values, reps)
    assert e.variance == pytest.approx(0.05**2 / 4, rel=0.1)


def test_welch_satterthwaite_by_hand():
    a = Estimate(1.0, 0.04, 4, 5, False)
    b = Estimate(0.5, 0.01, 9, 10, False)
    d = difference(a, b)
    assert d.mean == 0.5 and d.variance == pytest.approx(0.05)
    assert d.dof == pytest.approx(0.05**2 / (0.04**2 / 4 + 0.01**2 / 9))
    assert satterthwaite([(0.0, 2), (0.3, math.inf)]) == math.inf


def test_holm_by_hand():
    # sorted p: 0.01 (×4), 0.02 (×3), 0.03 (×2), 0.5 (×1), running maximum
    assert holm([0.03, 0.01, 0.5, 0.02]) == pytest.approx([0.06, 0.04, 0.5, 0.06])


# ---------------------------------------------------------------- the rules


def test_zero_variance_never_holds():
    """Three identical seeds and no replicates: zero width, so no verdict either way."""
    e = combine_seeds([0.9, 0.9, 0.9], [None] * 3)
    assert e.se == 0.0
    assert verdict(e, margin=0.5) == "underpowered"
    assert verdict(e, margin=0.95) == "underpowered"


def test_one_run_on_a_side_without_replicates_never_holds():
    a = combine_seeds([0.80, 0.82, 0.81], [None] * 3)
    b = combine_seeds([0.40], [None])  # one value: its variance is unknown, not zero
    assert verdict(difference(a, b)) != "holds"


def test_one_run_with_replicates_is_judged_on_its_items():
    rng = np.random.default_rng(0)
    correct = (rng.random(2000) < 0.8).astype(float)
    reps = compute_ratio_replicates(correct, np.ones_like(correct))
    assert verdict(combine_seeds([correct.mean()], [reps]), margin=0.7) == "holds"
    assert verdict(combine_seeds([correct.mean()], [reps]), margin=0.79) != "holds"


def test_a_clear_effect_holds_and_its_opposite_does_not():
    e = combine_seeds([0.10, 0.11, 0.12], [None] * 3)
    assert verdict(e) == "holds"
    assert verdict(e, expect="less") == "does not hold"


def test_an_unresolved_claim_says_how_many_seeds_would_resolve_it():
    e = combine_seeds([0.02, -0.01, 0.04], [None] * 3)
    test = TTest(e, 0.0, "greater")
    n = test.seeds_needed()
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert n == pytest.approx(3 * (z / test.z) ** 2)
    assert verdict(e) == ("underpowered" if n <= 30 else "inconclusive")


def simulate_boundary_seed(rng, items: int = 300) -> float:
    """One seed of a 6-layer probe whose true accuracy peaks equally at layers 3 and 5: the
    peak's true position is 2/3 of the depth on average, right at the claim's threshold."""
    true = np.array([0.70, 0.80, 0.86, 0.90, 0.88, 0.90, 0.85])
    correct = (rng.random((items, 7)) < true).astype(float)  # (sentences, layers)
    metrics = {f"probe/layer_{i:02d}/accuracy": float(v) for i, v in enumerate(correct.mean(0))}
    return evaluate(Evidence("probe/layer_*/accuracy", "argmax_fraction"), metrics, {})[0]


@pytest.mark.parametrize("seeds", [3, 8])
def test_a_discrete_reduction_at_its_boundary_rarely_holds(seeds):
    """pos_layers' old rule held 12.5% of the time here (3 seeds, zero-width intervals when
    the seeds agree). A bootstrap of an argmax is no better (it centres on the sample's own
    peak), so discrete reductions get an exact sign test over seeds: P(holds) ≤ 2.5%."""
    rng = np.random.default_rng(0)
    holds, trials = 0, 200
    for _ in range(trials):
        values = [simulate_boundary_seed(rng) for _ in range(seeds)]
        test = SignTest(combine_seeds(values, [None] * seeds), tuple(values), 0.667, "less")
        result = FindingResult(SPEC, [], [test], [""], p_holds=test.p_holds,
                               p_fails=test.p_fails)
        holds += classify(result, 0.05)[0] == "holds"
    assert holds / trials <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / trials)


def test_the_sign_test_needs_six_agreeing_seeds():
    three = SignTest(combine_seeds([0.3] * 3, [None] * 3), (0.3,) * 3, 0.667, "less")
    six = SignTest(combine_seeds([0.3] * 6, [None] * 6), (0.3,) * 6, 0.667, "less")
    assert three.p_holds == 0.125 and three.seeds_needed() == 6
    assert six.p_holds == pytest.approx(1 / 64)


def test_the_rule_keeps_its_level_under_the_null():
    """Seed effects and shared item noise, the true effect at the margin: P(holds) ≤ 2.5%."""
    rng = np.random.default_rng(3)
    trials, holds = 600, 0
    for _ in range(trials):
        shared = rng.normal(0, 0.02, 400)  # the same items in every seed
        values, reps = [], []
        for _ in range(3):
            seed_effect = rng.normal(0, 0.02)
            item_error = rng.normal(0, 0.02)
            values.append(seed_effect + item_error)
            reps.append(seed_effect + item_error + shared - shared.mean())
        holds += verdict(combine_seeds(values, reps)) == "holds"
    assert holds / trials <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / trials)


def test_holm_keeps_fifteen_null_claims_from_holding_together():
    """15 claims exactly at their margins: at 2.5% each, some claim holds ~32% of the time;
    after Holm, under 5%."""
    rng = np.random.default_rng(7)
    trials, any_raw, any_corrected = 300, 0, 0
    for _ in range(trials):
        results = []
        for _ in range(15):
            e = combine_seeds(list(rng.normal(0, 1, 3)), [None] * 3)
            test = TTest(e, 0.0, "greater")
            results.append(FindingResult(SPEC, [], [test], [""], p_holds=test.p_holds,
                                         p_fails=test.p_fails))
            results[-1].raw = classify(results[-1], 0.05)[0]
        correct_suite(results)
        any_raw += any(r.raw == "holds" for r in results)
        any_corrected += any(r.corrected == "holds" for r in results)
    assert any_raw / trials > 0.2  # the problem is real
    assert any_corrected / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)
