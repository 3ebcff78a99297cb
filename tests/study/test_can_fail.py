"""Every claim can fail (issue 28): for each finding of the catalog, runs built so that its
claim is false, and the report's verdict on them is not "holds".

The worlds are made from the finding's own yaml (tests/helpers/fake_runs.py turns a target per
comparison into runs with seed noise and item replicates), so the tests follow the catalog as
it changes. For every finding:
- it can hold: every comparison (claim and guards) DISTANCE beyond its margin on the claim's
  side → "holds" (the control: without it a broken simulator would make every claim "fail");
- the opposite: one part of the claim DISTANCE on the wrong side of its margin, the rest and
  the guards holding → "does not hold" (for a non-inferiority claim, the treated arm clearly
  worse than its margin allows);
- no effect: one part at a − b = 0, where that contradicts the claim (not for a
  non-inferiority claim, which equal arms satisfy) → not "holds";
- blind: the measurement can tell nothing apart: every quantity the finding compares with
  another (arms, model and twin, accuracy and majority) is equal to it at every layer and
  measured alike (the same predictions on the same items, but for a few); a threshold on a
  quantity the claim contrasts sits on the threshold; a threshold on something else
  (no_nsp's MLM accuracy beside its downstream task) still passes, as it did when both no_nsp
  arms learned the same keyword rule → not "holds", and "uninformative" where the finding has
  a guard (the guard must see that the comparison cannot discriminate).
The no_nsp of 920d8f1 (`all: [mlm − mlm_nsp > −0.01, MLM accuracy > 0.12]`) holds in its
blind world, so test_can_fail[no_nsp] fails on it; the other 29 findings of 920d8f1 pass.
Whether an untrained model satisfies a threshold claim (an anisotropy slope above 0) is the
random-init twin null's question (tests/study/test_noise.py), not this file's.

At realistic distances. DISTANCE is about 20 of those worlds' standard errors: they show that
the verdict's arithmetic can say no, not that a measurement as noisy as the real one can. The
realistic worlds (fake_runs.MeasuredWorld) give each comparison the noise the last `make
reproduce` run measured (tests/fixtures/reproduce_findings.csv) and put it DISTANCE_SE = 2 of
its standard errors past its margin, with fresh noise in each of TRIES worlds:
- true (every part on the claim's side): "holds" as often as the power arithmetic says
  (chance(): the quadrature rule's power over the estimates it reads; for the seed part alone,
  the noncentral t's), within binomial slack at RISK either way (more often: too little noise);
- false (part i on the wrong side, the rest true): "does not hold" at least as often as
  predicted, "does not hold" or "leans against" at least as often as the test or a budget of
  FEASIBLE × the seeds resolves it, and "holds" no more often than predicted (≈ 0).
One finding's TRIES are too few to see a rate near 0.2: test_realistic_rates_over_the_catalog
pools them; the slow test runs SLOW_TRIES per finding. A finding whose real measurement cannot
come out against its claim says `can_fail: false` and why (`tautology:`) in its yaml; its worlds
still run (the verdict can say no), under the id `<finding>-tautology`, counted apart.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from functools import cache

import numpy as np
import pytest
import yaml
from fake_runs import (
    EQUAL,
    GUARD_NOISE,
    ITEM_SD,
    ITEMS,
    LAYERS,
    SEED_SD,
    SEEDS,
    SHARED_ITEM_SD,
    MeasuredWorld,
    Noise,
    World,
    load_reproduce,
)
from scipy import stats

from bertology.run.replicates import REPLICATES
from bertology.study.judge.catalog import finding_files, load_catalog
from bertology.study.judge.evidence import Evidence
from bertology.study.judge.specs import Comparison, FindingSpec, parse_finding
from bertology.study.judge.stats import (
    ALPHA,
    FEASIBLE,
    Estimate,
    compute_half_width,
    compute_power_half_width,
)
from bertology.study.judge.verdicts import compare, judge

CATALOG = load_catalog()
DISTANCE = 0.1  # how far past its margin a made-true or made-false comparison sits


def beyond(comparison: Comparison, distance: float) -> float:
    """The effect `distance` past the margin on the claim's side (negative: the wrong side)."""
    return comparison.margin + (distance if comparison.expect == "greater" else -distance)


def zero_contradicts(comparison: Comparison) -> bool:
    """Whether a − b = 0 makes the comparison false (not a non-inferiority margin)."""
    return comparison.margin >= 0 if comparison.expect == "greater" else comparison.margin <= 0


def world(spec: FindingSpec, claim: dict[int, float | None] | None = None,
          guards: dict[int, float | None] | None = None):
    """Targets for every comparison: the given ones by index, the rest holding."""
    claim, guards = claim or {}, guards or {}
    return ([(c, claim.get(i, beyond(c, DISTANCE))) for i, c in enumerate(spec.comparisons)]
            + [(g, guards.get(i, beyond(g, DISTANCE))) for i, g in enumerate(spec.guards)])


def contrasted(spec: FindingSpec) -> set[str]:
    """The metrics the claim compares with another quantity (all it reads, if it only
    compares with thresholds): what a blind measurement leaves at its null."""
    pairs = [c for c in spec.comparisons if isinstance(c.b, Evidence)] or spec.comparisons
    return {x.metric for c in pairs for x in (c.a, c.b) if isinstance(x, Evidence)}


def blind_target(comparison: Comparison, measured: set[str]) -> float | None:
    if isinstance(comparison.b, Evidence):
        return EQUAL  # the arm is the other arm, the model its twin, the accuracy the majority's
    if comparison.a.metric in measured:
        return 0.0  # the quantity sits on its threshold
    return beyond(comparison, DISTANCE)  # a check of something else still passes


def blind_world(spec: FindingSpec):
    measured = contrasted(spec)
    return world(spec, {i: blind_target(c, measured) for i, c in enumerate(spec.comparisons)},
                 {i: blind_target(g, measured) for i, g in enumerate(spec.guards)})


def build(spec: FindingSpec, targets, name: str) -> World:
    """The world's runs, drawn from a generator seeded by the finding and the world's name."""
    return World(spec, targets, np.random.default_rng(zlib.crc32(f"{spec.id} {name}".encode())))


def verdict(spec: FindingSpec, targets, name: str) -> str:
    return judge(spec, build(spec, targets, name).runs()).raw.label


def check_can_fail(spec: FindingSpec) -> None:
    """Every false world of a finding, judged (the test below; importable for a spec that is
    not in the catalog, e.g. an older version of a yaml)."""
    for i, comparison in enumerate(spec.comparisons):
        wrong = verdict(spec, world(spec, {i: beyond(comparison, -DISTANCE)}), f"opposite{i}")
        assert wrong == "does not hold", f"{comparison.describe()} on its wrong side: {wrong}"
        if zero_contradicts(comparison):
            null = verdict(spec, world(spec, {i: 0.0}), f"zero{i}")
            assert null != "holds", f"{comparison.describe()} with no effect holds"
    blind = verdict(spec, blind_world(spec), "blind")
    measured = contrasted(spec)
    if any(blind_target(g, measured) != beyond(g, DISTANCE) for g in spec.guards):
        assert blind == "uninformative", f"a blind measurement: {blind}, not uninformative"
    else:  # no guard, or one that checks something else (pos_layers: the probe's selectivity)
        assert blind != "holds", "a blind measurement holds"


@pytest.mark.parametrize("finding", sorted(CATALOG))
def test_can_fail(finding):
    check_can_fail(CATALOG[finding])


@pytest.mark.parametrize("finding", sorted(CATALOG))
def test_can_hold(finding):
    """The control: the same simulator with every comparison past its margin holds, and the
    report measures on its runs the effects the world was built with, with seed and item
    noise (without this a broken simulator would make every claim "fail")."""
    spec = CATALOG[finding]
    targets = world(spec)
    result = judge(spec, build(spec, targets, "holds").runs())
    assert result.raw.label == "holds"
    for test, (comparison, target) in zip(result.tests + result.guard_tests, targets):
        assert test.estimate.mean == pytest.approx(target, abs=1e-9), comparison.describe()
        assert test.estimate.n == len(SEEDS) and test.estimate.items and test.estimate.se > 0


SLOPE = parse_finding({"id": "fading", "about": "model", "study": "probe_pos", "compare": {
    "a": {"metric": "probe/layer_*/accuracy", "reduce": "slope"}, "b": 0.0, "expect": "less"}})


def test_a_world_by_hand(tmp_path):
    """The simulator checked without the report's code: a slope of −0.1 over depth, fitted
    per seed by numpy's polyfit, averages −0.1 over the seeds; the seeds differ by about
    SEED_SD; each key's replicates spread as an item mean does, ITEM_SD/√ITEMS (and the
    shared item effect); the runs read back from disk are the runs in memory."""
    runs = build(SLOPE, [(SLOPE.comparisons[0], -0.1)], "by hand").write(tmp_path)
    depth = np.arange(LAYERS) / (LAYERS - 1)
    slopes = [np.polyfit(depth, [r.metrics[f"probe/layer_{i:02d}/accuracy"]
                                 for i in range(LAYERS)], 1)[0] for r in runs]
    assert np.mean(slopes) == pytest.approx(-0.1, abs=1e-9)
    layer = np.array([r.metrics["probe/layer_03/accuracy"] for r in runs])
    assert 0.2 * SEED_SD < layer.std(ddof=1) < 3 * SEED_SD
    spread = runs[0].replicates["probe/layer_03/accuracy"].std()
    expected = np.hypot(ITEM_SD, SHARED_ITEM_SD) / np.sqrt(ITEMS)
    assert spread == pytest.approx(expected, rel=0.2)
    assert len(runs[0].replicates["probe/layer_03/accuracy"]) == 400
    memory = build(SLOPE, [(SLOPE.comparisons[0], -0.1)], "by hand").runs()
    for disk, made in zip(sorted(runs, key=lambda r: r.path.name),
                          sorted(memory, key=lambda r: r.path.name)):
        assert (disk.metrics, disk.config) == (made.metrics, made.config)
        assert all(np.array_equal(disk.replicates[k], made.replicates[k]) for k in made.metrics)


def test_tied_quantities_are_one_measurement():
    """EQUAL ties a twin to its model: the paired difference of their replicates is a small
    fraction of either's (the same predictions on the same items), the means are equal."""
    spec = CATALOG["pretraining_beats_random"]
    runs = build(spec, [(spec.comparisons[0], EQUAL)], "tied").runs()
    model = runs[0].replicates["probe/layer_02/accuracy"]
    twin = runs[0].replicates["probe/random/layer_02/accuracy"]
    assert runs[0].metrics["probe/layer_02/accuracy"] != runs[0].metrics[
        "probe/random/layer_02/accuracy"]  # a seed's values differ by a little
    assert np.mean([r.metrics["probe/layer_02/accuracy"] for r in runs]) == pytest.approx(
        np.mean([r.metrics["probe/random/layer_02/accuracy"] for r in runs]), abs=1e-12)
    assert (model - twin).std() < 0.2 * model.std()


# ---------------------------------------------------------------- at realistic distances
# (the module's docstring, "At realistic distances")

MEASURED = load_reproduce()
DISTANCE_SE = 2.0  # how many of its standard errors past its margin a comparison sits
TRIES, SLOW_TRIES = 24, 300  # worlds per finding and side: the fast suite, the slow one
RISK = 1e-4  # one-sided chance that a correct simulator misses a predicted rate by luck
GRID, SHARED_GRID = 2000, 41  # equal-probability points of the seed and shared parts' estimates
YAMLS = {p.stem: yaml.safe_load(p.read_text()) for p in finding_files()}
CAN_FAIL = {k: YAMLS[k].get("can_fail", True) for k in CATALOG}  # False: a tautology


def measured_noise(spec: FindingSpec) -> list[Noise]:
    """The Noise of each comparison as the last reproduce run measured it; the guards'."""
    rows = MEASURED.get(spec.id)
    assert rows, f"{spec.id}: not in tests/fixtures/reproduce_findings.csv (see its header)"
    return ([Noise.measured(float(r["se"]), float(r["dof"]), int(r["seeds"])) for r in rows]
            + [GUARD_NOISE] * len(spec.guards))


def measured_targets(spec: FindingSpec, noises: list[Noise], wrong: int | None = None):
    """Every comparison DISTANCE_SE of its standard errors past its margin, `wrong` (an index)
    on the wrong side; the guards DISTANCE past theirs."""
    n = len(SEEDS)
    return ([(c, beyond(c, DISTANCE_SE * noise.se(n) * (-1 if i == wrong else 1)))
             for i, (c, noise) in enumerate(zip(spec.comparisons, noises))]
            + [(g, beyond(g, DISTANCE)) for g in spec.guards])


@cache
def verdicts(finding: str, wrong: int | None, tries: int) -> Counter:
    """The raw verdicts of `tries` worlds of a finding (each a fresh noise draw)."""
    spec = CATALOG[finding]
    noises = measured_noise(spec)
    rng = np.random.default_rng(zlib.crc32(f"{finding} measured {wrong} {tries}".encode()))
    world = MeasuredWorld(spec, measured_targets(spec, noises, wrong), noises, rng)
    return Counter(judge(spec, world.runs()).raw.label for _ in range(tries))


def chance(noise: Noise, alpha: float, distance: float = DISTANCE_SE,
           budget: bool = False) -> float:
    """The power arithmetic: the chance that a comparison `distance` standard errors past its
    margin passes the one-sided test at alpha / 2 (the quadrature rule of stats.py), or with
    budget, that it passes it or that FEASIBLE × its seeds would resolve it with 80% power at
    alpha (a "leans against" or "underpowered" verdict). Over the estimates the rule reads: the
    seed part s²/n, a χ² on n − 1 degrees of freedom, and the shared part V_sh, the mean
    covariance of the seeds' R replicates, about normal around the true one and cut at 0 (its
    variance below). One part and no item noise: the noncentral t's power on n − 1 exactly."""
    n = len(SEEDS)
    chi = stats.chi2.ppf((np.arange(GRID) + 0.5) / GRID, n - 1)[:, None]  # (GRID, 1)
    seed_part = noise.seed_sd**2 / n * chi / (n - 1)
    # V_sh = var(A) + (2/n) Σ_s cov(A, B_s) + mean_{s<t} cov(B_s, B_t), with A the shared items'
    # part of a replicate (variance a) and B_s seed s's own (variance b), each (co)variance
    # estimated from ITEMS items and resampled R times
    a, b = noise.shared_sd**2, noise.private_sd**2
    spread = math.sqrt((2 * a * a + 4 * a * b / n + 2 * b * b / (n * (n - 1)))
                       * (1 / ITEMS + 1 / REPLICATES))
    normal = stats.norm.ppf((np.arange(SHARED_GRID) + 0.5) / SHARED_GRID)  # (SHARED_GRID,)
    shared = np.maximum(0.0, a + spread * normal)[None, :]  # (1, SHARED_GRID)
    width = compute_half_width([(seed_part, n - 1, n), (shared, REPLICATES - 1, 0)], alpha / 2)
    if budget:
        seeds = FEASIBLE * n
        width = np.minimum(width, compute_power_half_width(
            [(seed_part * n / seeds, seeds - 1, 1), (shared, REPLICATES - 1, 0)], alpha))
    return float(stats.norm.sf(width / noise.se(n) - distance).mean())


@cache
def predictions(spec: FindingSpec) -> dict[tuple, float]:
    """(world, verdicts) → the chance the power arithmetic gives it: the true world holds
    (every part must: the product); each false world (part i on the wrong side) does not hold
    (at its Bonferroni share), does not hold or leans against (at least: the items path of
    "leans against" is not counted), holds (at most)."""
    noises = measured_noise(spec)[: len(spec.comparisons)]
    parts = len(noises)
    out = {(None, "holds"): math.prod(chance(noise, ALPHA) for noise in noises)}
    for i, noise in enumerate(noises):
        out[(i, "does not hold")] = chance(noise, ALPHA / parts)
        out[(i, "settled")] = chance(noise, ALPHA / parts, budget=True)
        out[(i, "holds")] = chance(noise, ALPHA, distance=-DISTANCE_SE)
    return out


def count(found: Counter, verdict: str) -> int:
    if verdict == "settled":
        return found["does not hold"] + found["leans against"]
    return found[verdict]


def check_realistic(spec: FindingSpec, tries: int) -> None:
    """The rates of the worlds against the power arithmetic, with binomial slack at RISK: at
    least the predicted rate of "holds" (true world), "does not hold", and "does not hold" or
    "leans against" (false worlds); at most the predicted rate of "holds" in every world (a
    simulator with too little noise would hold too often)."""
    for (wrong, verdict), chance_ in predictions(spec).items():
        seen = count(verdicts(spec.id, wrong, tries), verdict)
        low, high = stats.binom.ppf(RISK, tries, chance_), stats.binom.isf(RISK, tries, chance_)
        world = "true" if wrong is None else f"part {wrong} wrong"
        if verdict != "holds" or wrong is None:
            assert seen >= low, f"{world}: {verdict} {seen}/{tries}, predicted {chance_:.3f}"
        if verdict == "holds":
            assert seen <= high, f"{world}: {verdict} {seen}/{tries}, predicted {chance_:.3f}"


def labelled(findings) -> list:
    """The findings as test cases, a tautology (can_fail: false in its yaml) marked in its id."""
    return [pytest.param(f, id=f if CAN_FAIL[f] else f"{f}-tautology") for f in sorted(findings)]


@pytest.mark.parametrize("finding", labelled(CATALOG))
def test_realistic_distance(finding):
    """Two standard errors past the margin with the real run's noise: the claim fails ("does
    not hold" or "leans against") and holds as often as the power arithmetic says."""
    check_realistic(CATALOG[finding], TRIES)


@pytest.mark.slow
@pytest.mark.parametrize("finding", labelled(CATALOG))
def test_realistic_distance_many_worlds(finding):
    check_realistic(CATALOG[finding], SLOW_TRIES)


def test_realistic_rates_over_the_catalog():
    """The fast worlds pooled over the catalog, where one finding's TRIES are too few to see a
    rate of about 0.2: the true worlds hold as often as predicted (within RISK either way), the
    false worlds do not hold, and do not hold or lean against, at least as often."""
    z = stats.norm.isf(RISK)
    for verdict, true_world in (("holds", True), ("does not hold", False), ("settled", False)):
        seen = expected = variance = 0.0
        for finding in sorted(CATALOG):
            for (wrong, said), chance_ in predictions(CATALOG[finding]).items():
                if said == verdict and (wrong is None) == true_world:
                    seen += count(verdicts(finding, wrong, TRIES), verdict)
                    expected += TRIES * chance_
                    variance += TRIES * chance_ * (1 - chance_)
        assert seen >= expected - z * math.sqrt(variance), f"{verdict}: {seen} < {expected:.1f}"
        if true_world:
            assert seen <= expected + z * math.sqrt(variance), f"{verdict}: {seen} > {expected:.1f}"


def test_the_fixture_has_every_comparison():
    """tests/fixtures/reproduce_findings.csv has a row for every comparison of the catalog, as
    the finding states it now, with a measured standard error: a comparison changed since the
    last reproduce run needs that run again (tests/fixtures/refresh_reproduce_findings.py);
    until then its row says so (no effect) and carries an estimated se (the file's header).
    A row measured on more seeds than the worlds draw (the probes run 5) gives its per-seed
    spread (Noise.measured), so a world of 3 seeds is as noisy per seed as the run and its
    standard error larger: a harder test of "can fail" than the run's own 5 seeds."""
    for finding, spec in CATALOG.items():
        rows = MEASURED.get(finding, [])
        assert [r["test"] for r in rows] == [c.describe() for c in spec.comparisons], finding
        for row in rows:
            assert float(row["se"]) > 0 and int(row["seeds"]) >= len(SEEDS), row
            assert float(row["dof"]) >= int(row["seeds"]) - 1, row  # the seed part's ν at least


def test_a_tautology_says_why():
    """`can_fail: false` (the real measurement cannot come out against the claim, whatever the
    model) needs a `tautology:` reason; the realistic worlds still run for it (the verdict can
    say no), under an id that counts it apart."""
    for finding, spec in YAMLS.items():
        assert spec.get("can_fail", True) in (True, False), f"{finding}: can_fail is a bool"
        if spec.get("can_fail", True) is False:
            assert str(spec.get("tautology") or "").strip(), f"{finding}: tautology: why"


def test_the_power_arithmetic_is_the_t_tests():
    """With the seed part alone (no item noise), chance() is the one-sided t-test's power on
    n − 1 degrees of freedom at noncentrality DISTANCE_SE (scipy's noncentral t), and with a
    budget the chance that |t| reaches the power quantile at FEASIBLE × n seeds scaled to n."""
    n, level = len(SEEDS), ALPHA / 2
    noise = Noise(0.01 * math.sqrt(n), 0.0, 0.0)
    power = stats.nct.sf(stats.t.isf(level, n - 1), n - 1, DISTANCE_SE)
    assert chance(noise, ALPHA) == pytest.approx(power, abs=2e-3)
    seeds = FEASIBLE * n
    quantile = stats.t.isf(level, seeds - 1) + stats.t.ppf(0.8, seeds - 1)
    settle = stats.nct.sf(quantile * math.sqrt(n / seeds), n - 1, DISTANCE_SE)
    assert chance(noise, ALPHA, budget=True) == pytest.approx(settle, abs=2e-3)


def test_measured_noise_gives_back_se_and_dof():
    """Noise.measured inverts the report's se and ν: the same parts give them back."""
    for se, dof in ((0.01, 2.0), (0.02, 5.3), (0.003, 120.0)):
        noise = Noise.measured(se, dof, 3)
        estimate = Estimate(0.0, ((noise.seed_sd**2 / 3, 2.0, 3),
                                  (noise.shared_sd**2, REPLICATES - 1.0, 0)), 3, True)
        assert (estimate.se, estimate.dof) == pytest.approx((se, dof), rel=1e-6)


def test_a_measured_world_scatters_as_measured():
    """The report's own estimates over many worlds of one finding: each part's seed means scatter
    around their target by the standard error drawn for it (the noise is not centred), its
    estimated seed part averages the seed spread's, the parts' noises are independent, and a
    layer reduction of the noise is exactly the comparison's."""
    spec = CATALOG["pos_layers"]  # a layer contrast, on the model and against the twin
    noises = [Noise(0.02, 0.01, 0.01), Noise(0.01, 0.0, 0.005)] + [GUARD_NOISE] * len(spec.guards)
    targets = measured_targets(spec, noises)
    world = MeasuredWorld(spec, targets, noises, np.random.default_rng(7))
    estimates = np.array([[compare(c, {"": world.runs()}).test.estimate for c in spec.comparisons]
                          for _ in range(300)])  # (worlds, parts)
    means = np.array([[e.mean for e in row] for row in estimates])
    parts = len(spec.comparisons)  # the guards' noise and targets follow the claim's
    for part, (noise, (_, target)) in enumerate(zip(noises[:parts], targets[:parts])):
        se = noise.se(len(SEEDS))
        assert abs(means[:, part].mean() - target) < 4 * se / math.sqrt(len(means))
        assert means[:, part].std(ddof=1) == pytest.approx(se, rel=0.2)
        seed_parts = [e.parts[0][0] for e in estimates[:, part]]
        assert np.mean(seed_parts) == pytest.approx(noise.seed_sd**2 / len(SEEDS), rel=0.3)
    assert abs(np.corrcoef(means.T)[0, 1]) < 4 / math.sqrt(len(means))
