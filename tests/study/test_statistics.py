"""The verdict rules cannot say "holds" where the evidence does not show it: zero-variance
seeds, one seed, a discrete reduction at its boundary, many claims at once, three seeds whose
item noise is private or shared; the interval and the power note against hand computations."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from bertology.run.replicates import REPLICATES, bootstrap_indices, compute_ratio_replicates
from bertology.study.judge.evidence import Evidence, evaluate
from bertology.study.judge.record import Compared, FindingResult, Verdict
from bertology.study.judge.sign_test import SignTest
from bertology.study.judge.specs import FindingSpec
from bertology.study.judge.stats import (
    Estimate,
    TTest,
    combine_seeds,
    compute_half_width,
    compute_random_effects,
    difference,
    holm,
    one_sided_p,
)
from bertology.study.judge.suite import correct_suite, holm_levels
from bertology.study.judge.verdicts import classify

SPEC = FindingSpec("demo", "a claim", "a paper", ())
T975 = {2: 4.302653, 3: 3.182446}  # t quantiles from a printed table (Student's t, 0.975)


def judged(test: TTest | SignTest) -> tuple[str, str]:
    return classify(FindingResult(SPEC, (), (Compared(test, "per seed"),)), 0.05)


def verdict(estimate: Estimate, margin: float = 0.0, expect: str = "greater") -> str:
    return judged(TTest(estimate, margin, expect))[0]


# ---------------------------------------------------------------- hand computations


def test_seeds_without_replicates_give_the_t_interval():
    e = combine_seeds([1.0, 2.0, 3.0], [None, None, None])
    assert (e.mean, e.variance, e.dof, e.items) == (2.0, 1.0 / 3, 2, False)
    assert e.interval()[1] - 2.0 == pytest.approx(T975[2] / 3**0.5, rel=1e-6)


def test_remembered_quantiles_are_the_printed_ones_for_scalars_and_arrays():
    """compute_half_width remembers scalar t quantiles (the budget search asks thousands):
    asked twice, or for an array of ν, it gives the printed table's values."""
    for _ in range(2):
        assert compute_half_width([(1.0, 2, 3)], 0.025) == pytest.approx(T975[2], rel=1e-6)
    widths = compute_half_width([(np.ones(2), np.array([2.0, 3.0]), 3)], 0.025)
    assert widths == pytest.approx([T975[2], T975[3]], rel=1e-6)


def test_hksj_interval_with_shared_items_by_hand():
    """3 seeds, 4 replicates each: replicate r = the seed's value + a shared item effect c_r
    (the same items in every run) + a private one p_sr. Worked out on paper:
    values 0.2, 0.4, 0.9: mean 0.5, s² = (0.09 + 0.01 + 0.16) / 2 = 0.13, seed part 0.13/3
    (HKSJ with equal weights: Σ (y − ȳ)² / (n (n − 1))), ν = 2.
    Cov_r with ddof 1: Var(c) = 4 · 0.01 / 3; c ⟂ p; Cov(p0, p1) = −4 · 0.0025 / 3, p2 = 0:
    pairs (0,1) 0.04/3 − 0.01/3, (0,2) and (1,2) 0.04/3 → mean 0.11/9, ν = R − 1 = 3.
    95% half-width sqrt(t_2² · 0.13/3 + t_3² · 0.11/9)."""
    c = np.array([0.1, -0.1, 0.1, -0.1])
    private = [np.array([0.05, 0.05, -0.05, -0.05]), -np.array([0.05, 0.05, -0.05, -0.05]),
               np.zeros(4)]
    values = [0.2, 0.4, 0.9]
    e = combine_seeds(values, [v + c + p for v, p in zip(values, private)])
    assert e.mean == pytest.approx(0.5)
    assert e.parts[0][:2] == pytest.approx((0.13 / 3, 2))
    assert e.parts[1][:2] == pytest.approx((0.11 / 9, 3))
    assert e.shared == pytest.approx(0.11 / 9) and e.variance == pytest.approx(0.13 / 3 + 0.11 / 9)
    half = math.sqrt(T975[2] ** 2 * 0.13 / 3 + T975[3] ** 2 * 0.11 / 9)
    assert e.interval() == pytest.approx((0.5 - half, 0.5 + half), rel=1e-6)
    # the p-value is the level at which the half-width reaches the gap (0.2 above a margin
    # of 0.3): the claim holds exactly when the margin lies outside the interval
    p = TTest(e, 0.3, "greater").p_holds
    assert float(compute_half_width(e.parts, p)) == pytest.approx(0.2, rel=1e-8)
    assert (p < 0.025) == (0.5 - half > 0.3)


def test_one_part_is_the_t_test_exactly():
    e = combine_seeds([0.1, 0.3, 0.2, 0.35], [None] * 4)
    s2 = sum((x - 0.2375) ** 2 for x in (0.1, 0.3, 0.2, 0.35)) / 3
    assert TTest(e, 0.0, "greater").p_holds == pytest.approx(
        stats.t.sf(0.2375 / math.sqrt(s2 / 4), 3), rel=1e-10)
    assert one_sided_p(-0.1, e.parts) == pytest.approx(1 - one_sided_p(0.1, e.parts))


def test_private_item_noise_is_not_counted_twice():
    """Seeds whose replicates move independently (each drew its own items): the shared part
    is ~0 and V is the seeds' spread over n, which already holds that noise."""
    rng = np.random.default_rng(1)
    reps = [0.5 + rng.normal(0, 0.05, 4000) for _ in range(4)]
    values = [0.5 + 0.05 * z for z in (1.0, -1.0, 0.5, -0.5)]
    e = combine_seeds(values, reps)
    assert e.shared < 0.01 * 0.05**2
    assert e.variance == pytest.approx(np.var(values, ddof=1) / 4, rel=0.02)


@pytest.mark.parametrize("seeds", [3, 30])
def test_shared_item_noise_is_not_shrunk_by_seeds(seeds):
    """Every seed scored on the same items: their common item noise stays whole however many
    seeds run (a shared dev set does not average out over seeds)."""
    rng = np.random.default_rng(2)
    common = rng.normal(0, 0.05, 4000)
    values = list(0.5 + rng.normal(0, 0.01, seeds))
    e = combine_seeds(values, [v + common + rng.normal(0, 0.01, 4000) for v in values])
    assert e.shared == pytest.approx(0.05**2, rel=0.1)


def test_unpaired_sides_keep_their_parts_by_hand():
    a = combine_seeds([1.0, 1.2, 1.4], [None] * 3)  # s² = 0.04, part 0.04/3, ν 2
    b = combine_seeds([0.5, 0.6, 0.7, 0.8], [None] * 4)  # s² = 0.05/3, part 0.05/12, ν 3
    d = difference(a, b)
    assert d.mean == pytest.approx(0.55) and d.n == 3
    assert d.variance == pytest.approx(0.04 / 3 + 0.05 / 12)
    half = math.sqrt(T975[2] ** 2 * 0.04 / 3 + T975[3] ** 2 * 0.05 / 12)
    assert d.interval()[1] == pytest.approx(0.55 + half, rel=1e-6)


def test_holm_by_hand():
    # sorted p: 0.01 (×4), 0.02 (×3), 0.03 (×2), 0.5 (×1), running maximum
    assert holm([0.03, 0.01, 0.5, 0.02]) == pytest.approx([0.06, 0.04, 0.5, 0.06])


# ---------------------------------------------------------------- the rules


def test_zero_variance_never_holds():
    """Three identical seeds and no replicates: zero width, so no verdict either way."""
    e = combine_seeds([0.9, 0.9, 0.9], [None] * 3)
    assert e.se == 0.0
    assert verdict(e, margin=0.5) == "underpowered"
    assert verdict(e, margin=0.95) == "leans against"  # wrong side: never "underpowered"


def test_one_run_on_a_side_without_replicates_never_holds():
    a = combine_seeds([0.80, 0.82, 0.81], [None] * 3)
    b = combine_seeds([0.40], [None])  # one value: its variance is unknown, not zero
    assert verdict(difference(a, b)) != "holds"


@pytest.mark.parametrize("margin", [0.5, 0.95])
def test_one_seed_never_resolves_even_with_item_replicates(margin):
    """2,000 items put 0.8 far above 0.5 and far below 0.95 on its items alone, but one seed
    measures no seed-to-seed variance: neither "holds" nor "does not hold"."""
    rng = np.random.default_rng(0)
    correct = (rng.random(2000) < 0.8).astype(float)
    reps = compute_ratio_replicates(correct, np.ones_like(correct))
    e = combine_seeds([correct.mean()], [reps])
    assert e.items and e.n == 1 and math.isnan(e.se)
    label, note = judged(TTest(e, margin, "greater"))
    side = "underpowered" if margin < 0.8 else "leans against"  # by the estimate's side
    assert label == side and "one seed" in note
    three = combine_seeds([0.80, 0.81, 0.79], [None] * 3)
    assert verdict(difference(three, e), margin=margin - 1.0) == "underpowered"  # 0 > m


def test_a_clear_effect_holds_and_its_opposite_does_not():
    e = combine_seeds([0.10, 0.11, 0.12], [None] * 3)
    assert verdict(e) == "holds"
    assert verdict(e, expect="less") == "does not hold"


def seeds_by_hand(gap: float, per_seed: float, run: int) -> int:
    """The least m > run with gap ≥ (t_{m−1}(0.975) + t_{m−1}(0.8)) · sqrt(per_seed / m)."""
    m = run + 1
    while gap < (stats.t.ppf(0.975, m - 1) + stats.t.ppf(0.8, m - 1)) * math.sqrt(per_seed / m):
        m += 1
    return m


def test_an_unresolved_claim_says_how_many_seeds_would_resolve_it():
    values = [0.02, -0.01, 0.04]
    e = combine_seeds(values, [None] * 3)
    test = TTest(e, 0.0, "greater")
    assert test.seeds_needed() == seeds_by_hand(0.05 / 3, np.var(values, ddof=1), 3)
    label, note = judged(test)
    # and the same budget at either end of the true variance's 90% interval (χ²_2: the seed
    # variance from 3 seeds is uncertain by a factor of 60), by hand
    low, high = (seeds_by_hand(0.05 / 3, np.var(values, ddof=1) * 2 / stats.chi2.ppf(q, 2), 3)
                 for q in (0.95, 0.05))
    assert low < test.seeds_needed() < high
    assert (label, note) == ("underpowered", f"≈ {test.seeds_needed():.0f} seeds would "
                             f"resolve it (80% power; {low}–{high} across the seed variance's "
                             "90% interval)")


def test_the_budget_never_asks_for_fewer_seeds_than_were_run():
    """z = 3.5 on 3 seeds: unresolved (t_2 needs 4.30); the old normal formula said
    3 · (2.80 / 3.5)² ≈ 2 seeds, after 3 were run (electra's note)."""
    values = [1.0, 2.0, 3.0]  # se = 1/√3
    test = TTest(combine_seeds(values, [None] * 3), 2.0 - 3.5 / math.sqrt(3), "greater")
    assert test.z == pytest.approx(3.5) and test.p_holds > 0.025
    assert test.seeds_needed() == seeds_by_hand(3.5 / math.sqrt(3), 1.0, 3) >= 4


def test_noise_that_seeds_do_not_shrink_asks_for_items():
    """Three seeds on one dev set that agree to 1e-4, its item noise sd 0.02: an effect of
    0.03 stays unresolved at any number of seeds; the note asks for items, ≥ (0.02 ·
    (t + t_0.8) / 0.03)² times as many."""
    rng = np.random.default_rng(4)
    common = rng.normal(0, 0.02, REPLICATES)
    values = [0.03, 0.0301, 0.0299]
    e = combine_seeds(values, [v + common for v in values])
    test = TTest(e, 0.0, "greater")
    assert test.seeds_needed() == math.inf
    label, note = judged(test)
    factor = (math.sqrt(e.shared) * (stats.t.ppf(0.975, REPLICATES - 1)
                                     + stats.t.ppf(0.8, REPLICATES - 1)) / 0.03) ** 2
    assert label == "underpowered" and "more items, not seeds" in note
    assert f"≥ {math.ceil(factor)}× the items" in note


def sign_power_by_hand(seeds: int, share: float) -> float:
    """P(the one-sided exact sign test passes at 2.5%) with `seeds` seeds each on the claim's
    side with probability share, by enumeration."""
    def tail(k, p):
        return sum(math.comb(seeds, j) * p**j * (1 - p) ** (seeds - j)
                   for j in range(k, seeds + 1))
    critical = next((k for k in range(seeds + 1) if tail(k, 0.5) < 0.025), None)
    return 0.0 if critical is None else tail(critical, share)


def test_the_sign_test_needs_six_agreeing_seeds():
    three = SignTest(combine_seeds([0.3] * 3, [None] * 3), (0.3,) * 3, 0.667, "less")
    six = SignTest(combine_seeds([0.3] * 6, [None] * 6), (0.3,) * 6, 0.667, "less")
    assert three.p_holds == 0.125 and three.seeds_needed() == 6
    assert six.p_holds == pytest.approx(1 / 64)


def test_the_sign_test_budget_has_power_and_exceeds_the_seeds_run():
    values = (0.3, 0.3, 0.3, 0.8, 0.3, 0.8)  # 4 of 6 on the claim's side (ties: none)
    test = SignTest(combine_seeds(list(values), [None] * 6), values, 0.667, "less")
    m = test.seeds_needed()
    assert m > 6 and sign_power_by_hand(int(m), 4 / 6) >= 0.8
    assert sign_power_by_hand(int(m) - 1, 4 / 6) < 0.8 or m - 1 == 6


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
        holds += judged(test)[0] == "holds"
    assert holds / trials <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / trials)


# ---------------------------------------------------------------- the level under the null

ITEMS, SEEDS, TRIALS = 200, 3, 4000
RATIOS = (0.0, 0.5, 1.0, 4.0)  # τ² / σ²_item
SHARED = (0.0, 0.5, 1.0)  # the share of item noise common to the seeds (0: each its own items)


def bootstrap_counts(items: int) -> np.ndarray:
    """(R, items) how often each item enters each replicate: the runs' own resamples
    (bertology.run.replicates.bootstrap_indices), as a matrix."""
    indices = bootstrap_indices(items)  # (R, items)
    counts = np.zeros(indices.shape)
    np.add.at(counts, (np.arange(len(indices))[:, None], indices), 1.0)
    return counts


def simulate_null(ratio: float, shared: float, trials: int, rng) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """trials studies of SEEDS seeds at the margin (0): per-item scores with unit variance,
    a share `shared` of it common to every seed (the same items) and the rest private (its
    own sentences, or the model's own errors on them), plus a seed effect of variance
    ratio · σ²_item (σ²_item = 1 / ITEMS, the item noise of one seed's mean). Values
    (trials, seeds) and bootstrap replicates (trials, seeds, R) as the runs write them."""
    private = rng.standard_normal((trials, SEEDS, ITEMS), dtype=np.float32)  # float32: speed
    common = rng.standard_normal((trials, 1, ITEMS), dtype=np.float32)
    seed_effect = rng.normal(0, math.sqrt(ratio / ITEMS), (trials, SEEDS, 1)).astype(np.float32)
    scores = math.sqrt(1 - shared) * private + math.sqrt(shared) * common + seed_effect
    replicates = scores @ bootstrap_counts(ITEMS).T.astype(np.float32) / ITEMS  # (t, s, R)
    return scores.mean(axis=-1, dtype=np.float64), replicates.astype(np.float64)


def holds_under_null(values: np.ndarray, replicates: np.ndarray) -> np.ndarray:
    """The report's rule, vectorised over trials: the mean beyond the quadrature half-width
    of its seed part (ν = n − 1) and shared part (ν = R − 1) at one-sided 2.5%."""
    mean, seed_var, shared = compute_random_effects(values, replicates)
    parts = [(seed_var / SEEDS, SEEDS - 1, SEEDS), (shared, replicates.shape[-1] - 1, 0)]
    return mean > compute_half_width(parts, 0.025)


@pytest.mark.parametrize("shared", SHARED)
@pytest.mark.parametrize("ratio", RATIOS)
def test_the_rule_keeps_its_level_with_three_seeds(ratio, shared):
    """The true effect exactly at the margin, 3 seeds, 200 items, the runs' 400 bootstrap
    replicates: P(holds) ≤ 2.5% within Monte-Carlo error, for seed-to-seed variance from none
    to 4× the item noise, with item noise private to each seed, half shared, or all shared.
    The bound is 2.5% + 3 binomial standard errors at 4,000 trials (0.0324): a rule exactly at
    2.5% exceeds it with probability 0.13% per cell, 1.6% over the 12 cells. On these very
    simulations the rule before (DerSimonian–Laird's τ² truncated at 0, then Satterthwaite,
    normal at τ² = 0) held 0.019 / 0.028 / 0.037 / 0.063 of the time with private items at
    ratios 0 / ½ / 1 / 4, and 0.024 / 0.033 / 0.030 / 0.045 with half the items shared: it
    fails this test at 1 and 4 (private) and ½ and 4 (half shared)."""
    rng = np.random.default_rng([int(4 * ratio), int(2 * shared), 28])
    values, replicates = simulate_null(ratio, shared, TRIALS, rng)
    holds = holds_under_null(values, replicates)
    # the vectorised rule is the report's: the verdicts of the first trials agree
    for t in range(20):
        e = combine_seeds(list(values[t]), list(replicates[t]))
        assert (verdict(e) == "holds") == holds[t]
    assert holds.mean() <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / TRIALS)


def test_the_level_test_can_see_a_wrong_rule():
    """The same simulation with a normal quantile on the seeds' spread (the truncated-τ²
    rule's failure) holds well above 2.5% when the seed variance dominates."""
    rng = np.random.default_rng(5)
    values, _ = simulate_null(4.0, 0.0, TRIALS, rng)
    z = values.mean(axis=1) / np.sqrt(values.var(axis=1, ddof=1) / SEEDS)
    assert (z > stats.norm.isf(0.025)).mean() > 0.025 + 3 * math.sqrt(0.025 * 0.975 / TRIALS)


def test_holm_keeps_fifteen_null_claims_from_holding_together():
    """15 claims exactly at their margins: at 2.5% each, some claim holds ~32% of the time;
    after Holm in each direction at α/2, some claim is resolved either way (holds or does not
    hold) under 5% of the time."""
    rng = np.random.default_rng(7)
    trials, any_raw, any_corrected = 300, 0, 0
    for _ in range(trials):
        results = []
        for _ in range(15):
            e = combine_seeds(list(rng.normal(0, 1, 3)), [None] * 3)
            test = TTest(e, 0.0, "greater")
            result = FindingResult(SPEC, (), (Compared(test, ""),))
            raw = Verdict(classify(result, 0.05)[0])
            results.append(replace(result, raw=raw, corrected=raw))
        results = correct_suite(results)
        any_raw += any(r.raw.label == "holds" for r in results)
        any_corrected += any(r.corrected.label in ("holds", "does not hold") for r in results)
    assert any_raw / trials > 0.2  # the problem is real
    assert any_corrected / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)


# ---------------------------------------------------------------- what each verdict means


def suite_result(values: list[float], margin: float = 0.0, expect: str = "greater",
                 replicates: list | None = None) -> FindingResult:
    """A finding's result from per-seed values of a − b (and replicates), judged raw."""
    test = TTest(combine_seeds(values, replicates or [None] * len(values)), margin, expect)
    result = FindingResult(SPEC, (), (Compared(test, "per seed"),))
    raw = Verdict(*classify(result, 0.05))
    return replace(result, raw=raw, corrected=raw,
                   left_out=left_out(values, replicates, margin, expect))


def left_out(values: list[float], replicates: list | None, margin: float, expect: str
             ) -> list[tuple[str, float, float]]:
    """Each seed left out in turn (verdicts.leave_one_out on runs), computed from the values."""
    replicates = replicates or [None] * len(values)
    found = []
    for i in range(len(values)):
        keep = [j for j in range(len(values)) if j != i]
        test = TTest(combine_seeds([values[j] for j in keep], [replicates[j] for j in keep]),
                     margin, expect)
        found.append((f"seed {i}", test.p_holds, test.p_fails))
    return found


def test_no_estimate_on_the_wrong_side_is_underpowered():
    """2,000 random 3-seed studies in both directions: every unresolved estimate on the wrong
    side of its margin is "leans against" or "inconclusive", raw and after Holm (issue 38:
    65% of claims two standard errors on the wrong side were told "underpowered")."""
    rng = np.random.default_rng(38)
    results = []
    for trial in range(2000):
        values = list(rng.normal(rng.normal(0, 1), rng.uniform(0.2, 2), 3))
        results.append(suite_result(values, 0.0, ("greater", "less")[trial % 2]))
    for start in range(0, len(results), 25):  # suites of 25 findings, as the report's
        results[start:start + 25] = correct_suite(results[start:start + 25])
    wrong = [r for r in results if r.lean < 0]
    assert len(wrong) > 500
    assert not [r for r in wrong if "underpowered" in (r.raw.label, r.corrected.label)]
    assert {r.corrected.label for r in wrong} <= {"does not hold", "leans against", "inconclusive"}
    leaning = [r for r in wrong if r.corrected.label == "leans against"]
    assert leaning and all("seeds would settle it against the claim" in r.note
                           or "items" in r.note for r in leaning)


def test_a_strong_does_not_hold_is_not_made_underpowered_by_holm():
    """BERT dependency_heads in issue 38: t = −10.1 on 3 seeds, raw "does not hold", became
    "underpowered" beside 24 other claims. Now it is "does not hold" or "leans against" with
    the seeds that would settle it at its Holm level, never "underpowered"."""
    target = suite_result([0.0, 0.1, 0.2], margin=0.1 + 10.1 * 0.1 / math.sqrt(3))
    assert target.tests[0].z == pytest.approx(-10.1) and target.raw.label == "does not hold"
    rng = np.random.default_rng(1)
    others = [suite_result(list(rng.normal(0, 1, 3))) for _ in range(24)]
    target, *others = correct_suite([target, *others])
    assert target.corrected.label in ("does not hold", "leans against")
    if target.corrected.label == "leans against":
        assert "seeds would settle it against the claim" in target.note


def shared_items_result(shared_sd: float, seed_sd: float, effect: float) -> FindingResult:
    """3 seeds on one evaluation set: each seed's replicates = its value + the common items'
    noise (sd shared_sd over resamples) + a little private noise."""
    rng = np.random.default_rng(3)
    common = rng.normal(0, shared_sd, REPLICATES)
    values = list(effect + rng.normal(0, seed_sd, 3))
    reps = [v + common + rng.normal(0, 1e-4, REPLICATES) for v in values]
    return suite_result(values, 0.0, "greater", reps)


def test_the_items_note_needs_a_material_shared_part():
    """Seeds that agree to 0.001 on a dev set with item sd 0.02 and an effect of 0.03: the
    shared items are nearly all of the width: "more items". Seeds that spread (sd 0.08) on
    item sd 0.004: the shared part is under 1% of the squared width, so the note never asks
    for items, whatever items_needed would say."""
    dominated = shared_items_result(0.02, 0.001, 0.03)
    assert dominated.tests[0].shared_share() > 0.9
    assert "more items, not seeds" in dominated.raw.note
    seeds = shared_items_result(0.004, 0.08, 0.03)
    assert seeds.tests[0].shared_share() < 0.01
    assert "items" not in seeds.raw.note


def test_the_items_note_only_where_the_shared_part_is_a_quarter_of_the_width():
    """Hand-made 3-seed studies on one eval set, from seeds that agree to seeds that spread and
    from effects near the margin to far from it, and null studies on private items (where V_sh
    truncated at 0 is estimator noise): wherever the note asks for items, the shared items make
    at least a quarter of the squared half-width (issue 38's bar). It does ask on the shared
    grid (shares near 1); without the rule it asked on 34 of the 150 null studies, at shares
    from 0.002 (checked)."""
    results = [shared_items_result(shared_sd, seed_sd, effect)
               for shared_sd in (0.004, 0.01, 0.02)
               for seed_sd in np.geomspace(0.0005, 0.08, 6) for effect in (0.01, 0.03, 0.06)]
    values, replicates = simulate_null(0.5, 0.0, 150, np.random.default_rng(26))
    results += [suite_result(list(v), 0.0, "greater", list(r))
                for v, r in zip(values, replicates)]
    noted = [r.tests[0].shared_share(0.05) for r in results if "items" in r.raw.note]
    assert noted and max(noted) > 0.9
    assert min(noted) >= 0.25, sorted(noted)[:5]


def test_the_budget_is_the_seeds_at_the_holm_level():
    """An unresolved claim beside 24 others: its "≈ N seeds" is the budget with 80% power at
    the level Holm holds it to at its rank, which asks for more seeds than the raw α does."""
    rng = np.random.default_rng(5)
    target = suite_result([0.30, 0.45, 0.60])  # t ≈ 5.2 on 2 dof: raw p ≈ 0.017
    others = [suite_result(list(rng.normal(0, 1, 3))) for _ in range(24)]
    target, *others = correct_suite([target, *others])
    assert target.raw.label == "holds" and target.corrected.label == "underpowered"
    _, level = holm_levels([r.p_holds for r in [target, *others]])[0]
    holm_seeds = target.tests[0].seeds_needed(2 * level)
    assert holm_seeds > target.tests[0].seeds_needed(0.05) + 1
    assert f"≈ {holm_seeds:.0f} seeds would resolve it" in target.note, target.note


def test_the_items_note_is_rare_on_private_items():
    """Null studies whose items are private to each seed (no shared part in truth; V_sh
    truncated at 0 is positive about half the time): the items note on at most 2% (issue 38
    measured 10–18% before the 25% rule)."""
    rng = np.random.default_rng(25)
    values, replicates = simulate_null(0.5, 0.0, 600, rng)
    notes = [suite_result(list(v), 0.0, "greater", list(r)).raw.note
             for v, r in zip(values, replicates)]
    assert sum("more items" in n for n in notes) / len(notes) <= 0.02


def test_firm_means_below_alpha_over_10_on_4_or_more_seeds_none_of_which_carries_it():
    """Firm iff the Holm-adjusted p lies below α/10, there are 4 or more replicates, and no
    replicate left out loses the verdict at its Holm step; any other resolved verdict is
    fragile and says why and what would settle it; an unresolved one carries no mark."""
    gap = stats.t.isf(0.02, 2) * 1e-3 / math.sqrt(3)  # one-sided p = 0.02: p_adjusted 0.04
    near = suite_result([gap, gap + 1e-3, gap - 1e-3])
    [near] = correct_suite([near])
    assert near.p_adjusted == pytest.approx(0.04, rel=1e-3)
    assert near.corrected.label == "holds" and near.fragile
    assert "firm needs 4 or more" in near.note and "seeds would settle it" in near.note
    three = suite_result([1.0, 1.1, 0.9])  # p_adjusted 0.004, but 3 seeds are never firm
    [three] = correct_suite([three])
    assert three.corrected.label == "holds" and three.fragile and "3 seeds" in three.note
    values = [1.0, 1.1, 0.9, 1.05, 0.95]
    five = suite_result(values)
    [five] = correct_suite([five])
    assert five.corrected.label == "holds" and not five.fragile and "fragile" not in five.note
    # its predictive replication probability, by hand: Φ((z − z_0.975) / √2)
    p = stats.t.sf(np.mean(values) / (np.std(values, ddof=1) / math.sqrt(5)), 4)
    by_hand = stats.norm.cdf((stats.norm.isf(p) - stats.norm.isf(0.025)) / math.sqrt(2))
    assert five.p_replication == pytest.approx(by_hand, rel=1e-9) and by_hand > 0.95
    assert f"P(replication) ≈ {by_hand:.2f}" in five.note
    # past α but not α/10 on 5 seeds: fragile, said so
    spread = np.array([0.0, 1.0, -1.0, 0.5, -0.5]) / math.sqrt(0.625)  # sd 1
    weak = suite_result(list(stats.t.isf(0.006, 4) / math.sqrt(5) + spread))
    [weak] = correct_suite([weak])
    assert weak.p_adjusted == pytest.approx(0.012, rel=1e-6)
    assert weak.corrected.label == "holds" and weak.fragile and "not below α/10" in weak.note
    # one seed that carries it: left out, the other four do not resolve at its Holm level
    carried = suite_result(values)
    left_out = list(carried.left_out)
    left_out[2] = ("seed 2", 0.03, 0.97)
    [carried] = correct_suite([replace(carried, left_out=tuple(left_out))])
    assert carried.corrected.label == "holds" and carried.fragile
    assert "without seed 2 it would not resolve" in carried.note
    miss = suite_result([gap * 0.8, gap * 0.8 + 1e-3, gap * 0.8 - 1e-3])
    [miss] = correct_suite([miss])
    assert miss.corrected.label == "underpowered" and not miss.fragile
    assert "fragile" not in miss.note


def test_a_floor_on_every_resample_is_judged_as_measured():
    """special_heads on BERT: 0 heads in every seed, on different sentences, on every
    resample. Zero spread as measured, an infinite t statistic: it gets the sign test's p,
    0.5^n, so 3 seeds at the floor lean against "> 0.25" (p 0.125) and 18 checkpoints settle
    it (p 3.8e-6), where an infinite t said p 1e-100 at any n; seeds 0, 1/48, 0 whose
    resamples move are a measured spread; without replicates the values stay unmeasured."""
    floor = [np.zeros(REPLICATES)] * 3
    result = suite_result([0.0, 0.0, 0.0], 0.25, "greater", floor)
    assert result.tests[0].estimate.exact and result.raw.label == "leans against"
    assert result.tests[0].p_fails == 0.125 and result.tests[0].p_holds == 1.0
    many = suite_result([0.0] * 18, 0.25, "greater", [np.zeros(REPLICATES)] * 18)
    assert many.raw.label == "does not hold" and many.tests[0].p_fails == pytest.approx(3.8147e-6)
    # its interval is the one value measured (the report printed [nan, nan] for it), while
    # the same seeds without replicates measured nothing
    assert result.tests[0].estimate.interval() == (0.0, 0.0)
    assert all(map(math.isnan, combine_seeds([0.0] * 3, [None] * 3).interval()))
    near = suite_result([0.0, 1 / 48, 0.0], 0.25, "greater",
                        [np.zeros(REPLICATES), np.full(REPLICATES, 1 / 48) +
                         np.linspace(-0.01, 0.01, REPLICATES), np.zeros(REPLICATES)])
    assert near.raw.label == "does not hold"
    assert suite_result([0.0, 0.0, 0.0], 0.25).raw.label == "leans against"


def test_seeds_at_one_floor_whose_resamples_vary_are_not_exact():
    """Every seed collapsed to one value but each seed's replicates move (the floor's own
    resampling noise, independent across seeds): V_sh estimates below zero and is clamped to
    0. That zero is not measured, so the estimate is not exact and no infinite t follows."""
    wobble = np.random.default_rng(0).normal(0.0, 0.01, REPLICATES)
    moving = [wobble, -wobble, np.zeros(REPLICATES)]  # Var(Σ) = 0 < Σ Var: V_sh clamped
    estimate = combine_seeds([0.0, 0.0, 0.0], moving)
    assert estimate.variance == 0.0 and not estimate.exact
    assert not TTest(estimate, -0.25, "greater").measured


def test_the_items_note_asks_only_for_items_the_eval_set_holds():
    """The dominated study above asks for more items; where its runs scored the whole eval
    set (headroom 1) or half of it (2×, less than it asks) the items do not exist and the
    verdict is inconclusive, saying so; with a set 50× larger the note stands."""
    needed = math.ceil(shared_items_result(0.02, 0.001, 0.03).tests[0].items_needed())
    assert 2 < needed <= 10
    for room, verdict in ((1.0, "inconclusive"), (2.0, "inconclusive"),
                          (50.0, "underpowered")):
        result = shared_items_result(0.02, 0.001, 0.03)
        (part,) = result.parts
        label, note = classify(replace(result, parts=(replace(part, headroom=room),)), 0.05)
        assert label == verdict
        assert ("more items, not seeds" in note) == (verdict == "underpowered")
        if verdict == "inconclusive":
            assert f"the eval set holds {room:.3g}× the items scored" in note


def test_an_unresolved_budget_is_an_interval_over_the_seed_variance_and_no_mark():
    """Whether an unresolved claim is underpowered (a feasible budget) or inconclusive (none)
    turns on the seeds needed, which scale with s²; from 3 seeds s² is uncertain by a factor
    of 60. heads_raise on two CPUs: the same effect, +0.002, with seed sds of 0.002 and 0.008:
    underpowered on one, inconclusive on the other. Neither carries a fragility mark (a mark
    that covered most unresolved verdicts excused most disagreements); the underpowered one
    states its budget as the interval it is, and 20 seeds pin it down."""
    narrow, wide = suite_result([0.0, 0.002, 0.004]), suite_result([-0.006, 0.002, 0.010])
    [narrow] = correct_suite([narrow])
    [wide] = correct_suite([wide])
    assert narrow.corrected.label == "underpowered" and not narrow.fragile
    assert "across the seed variance's 90% interval" in narrow.note
    assert "fragile" not in narrow.note
    assert wide.corrected.label == "inconclusive" and not wide.fragile
    spread = np.random.default_rng(0).normal(0, 1, 20)
    spread = (spread - spread.mean()) / spread.std(ddof=1)
    pinned = suite_result(list(0.3 + spread))  # 20 seeds: about 90 needed
    [pinned] = correct_suite([pinned])
    assert pinned.corrected.label == "underpowered" and not pinned.fragile
    budget = re.search(r"≈ (\d+) seeds would resolve it \(80% power; (\d+)–(\d+) across",
                       pinned.note)
    low, mid, high = int(budget[2]), int(budget[1]), int(budget[3])
    assert mid == 90 and low < mid < high < 3 * mid  # 19 degrees of freedom: a narrow range
