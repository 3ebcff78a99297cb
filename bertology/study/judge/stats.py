"""The statistics behind a verdict: an estimate of a − b with an interval that counts both
sources of noise, a one-sided test against the claim's margin, Holm's correction over the suite,
and the budget that would resolve an unresolved claim.

The noise has two sources, seeds and the finite sample of items a run is scored on (the runs'
bootstrap replicates, bertology/run/replicates.py), and the variance of the seed mean two parts:
a seed part s²/n on n − 1 degrees of freedom, the Hartung–Knapp–Sidik–Jonkman random-effects
interval with equal weights (Hartung & Knapp, 2001; Sidik & Jonkman, 2002), which keeps its level
with 3 seeds whatever the seed-to-seed variance (IntHout, Ioannidis & Borm, 2014); and a shared
part, the item noise every seed shares, which more seeds do not shrink. Each part keeps its own t
quantile and the two add in quadrature, which keeps the level for every ratio of the parts. One
seed measures no seed-to-seed variance: its claim is underpowered. Items that seeds share at
other positions of their lists escape the replicates and enter at a bound (compute_overlap);
seeds whose fine-tuning collapsed are counted as an endpoint of their own (collapsed_seeds).

The derivation: docs/findings.md, "The statistics, derived".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05  # two-sided; a one-sided claim is tested at ALPHA / 2, the 95% interval's edge
POWER = 0.8  # for the budget that would resolve an unresolved claim
FEASIBLE = 10.0  # a claim needing more than this many times its seeds (or items) is inconclusive
SEED_VARIANCE_LEVEL = 0.90  # the interval of the true seed variance a budget is checked across
MAX_SEEDS = 1000  # the power search stops here (inf beyond)
SMALLEST_P = 1e-100  # p-values below this are reported as it (the root search's floor)

# One variance part: (v, ν, seeds). seeds is the number of seeds v was divided by (more seeds
# divide it further); 0 for item noise that every seed shares (more seeds leave it).
Part = tuple[float, float, int]


def compute_half_width(parts: tuple[Part, ...] | list, alpha: float):
    """sqrt(Σ t_{ν_i}(1 − alpha)² v_i): how far beyond the margin the mean must lie for the
    one-sided test at level alpha (vectorised over the parts' v arrays)."""
    return np.sqrt(sum(t_isf(alpha, dof) ** 2 * np.asarray(v) for v, dof, _ in parts))


def t_isf(alpha, dof):
    """stats.t.isf(alpha, dof), remembered for scalars: a report's Holm steps and budget
    searches ask the same few quantiles thousands of times, each a scipy call (bench/RESULTS.md
    times what remembering them saves)."""
    if np.ndim(alpha) or np.ndim(dof):
        return stats.t.isf(alpha, dof)
    return scalar_t_isf(float(alpha), float(dof))


@lru_cache(maxsize=4096)
def scalar_t_isf(alpha: float, dof: float) -> float:
    return float(stats.t.isf(alpha, dof))


def compute_random_effects(values: np.ndarray, replicates: np.ndarray, overlap=0.0
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, s², V_sh) over the seed axis of values (..., n) and item replicates (..., n, R)
    (the formulas above); vectorised so the level test runs thousands of simulated studies
    through the same arithmetic as the report. overlap (scalar or (...)): compute_overlap."""
    n = values.shape[-1]
    mean = values.mean(axis=-1)  # (...)
    seed_var = values.var(axis=-1, ddof=1)  # (...): seed effects and private item noise
    # Σ_{s≠t} Cov(d_s, d_t) = Var(Σ_s d_s) − Σ_s Var(d_s), over replicates
    own = replicates.var(axis=-1, ddof=1).sum(axis=-1)  # (...)
    total = replicates.sum(axis=-2).var(axis=-1, ddof=1)  # (...)
    shared = np.maximum(0.0, (total - own) / (n * (n - 1)))  # (...): noise of common items
    # Items two seeds share at other positions of their lists: replicate r resamples other
    # items in each, so the replicates do not see the noise they share. It is at most their
    # share of a seed's item variance (all of their noise common; Cauchy–Schwarz, items of
    # equal variance), and enters at that bound
    return mean, seed_var, shared + np.asarray(overlap) * own / n


def compute_overlap(items: list) -> float:
    """The share of a seed's eval items that another seed also scored where the replicates
    cannot pair them, averaged over pairs of seeds: items[s] lists seed s's item ids (e.g.
    the sentences' indices in the eval file) in the order its replicates resample them. An
    item shared at the same position of two lists of the same length is paired (replicate r
    draws the same positions, bootstrap_indices) and counted by V_sh already."""
    n = len(items)
    if n < 2:
        return 0.0
    positions = [{item: i for i, item in enumerate(seed)} for seed in items]
    total = 0.0
    for s, t in ((s, t) for s in range(n) for t in range(n) if s != t):
        paired = len(items[s]) == len(items[t])
        unpaired = sum(not (paired and positions[t][item] == i)
                       for item, i in positions[s].items() if item in positions[t])
        total += unpaired / math.sqrt(len(items[s]) * len(items[t]))
    return total / (n * (n - 1))


def compute_terms_overlap(terms: list[list[list | None]]) -> float | None:
    """compute_overlap of a contrast whose terms (a, b; a twin's a′, b′) each give every
    seed's item ids, in the order of the seeds paired: the largest term's share. Where every
    term of a seed scores one list (two layers of a run, a model and its twin on one seed's
    sentences) each term's share is the contrast's own; where they differ it is the bound of
    the term sharing most (a heuristic). None where some seed's ids are unknown (a run made
    before runs recorded them)."""
    if any(ids is None for seeds in terms for ids in seeds):
        return None
    return max((compute_overlap(seeds) for seeds in terms), default=0.0)


# A fine-tuning run within this much accuracy of its majority-class floor collapsed. Mosbach et
# al. (2021) call a run failed at or below the majority classifier; Dodge et al. (2020) see the
# diverged restarts end near it. At the floor exactly, 0.51 against 0.509 counts as trained,
# though it is one binomial standard error of an accuracy near 0.5 on SST-2's 872 dev sentences
# (√(0.25/872) = 0.017) from predicting the majority class; a trained run sits 0.3 above it.
COLLAPSE_BAND = 0.02


def collapsed_seeds(values: list[float], floor, band: float = COLLAPSE_BAND) -> list[int]:
    """The seeds whose runs collapsed: an accuracy within `band` of the floor or below it, the
    floor the accuracy of always predicting the majority class (a run's majority_accuracy; one
    floor, or one per seed). Mosbach, Andriushchenko & Klakow (2021) call such a fine-tuning run
    failed and report how many failed; Dodge et al. (2020) see many restarts diverge on small
    GLUE tasks. Which seeds collapse is an outcome of the arm, so a verdict keeps every seed
    (intention to treat) and reports each arm's collapse rate as an endpoint of its own, with
    the estimate on the seeds that trained in every arm as a secondary, per-protocol line
    (study/judge/collapses.py). The primary's level: a rare collapse in one arm drags its mean, and
    no test of a mean keeps its level against that at any number of seeds (Bahadur & Savage,
    1956); where collapses are as likely in either arm the paired contrast stays symmetric and
    the level holds (docs/statistics.md, "Overlapping sentences and collapsed seeds"). Without a
    floor there is no flag: on 3 healthy seeds a median/MAD rule flags one 5% of the time even
    at 10 MADs."""
    floors = np.broadcast_to(np.asarray(floor, dtype=np.float64), (len(values),))
    return [s for s, (v, f) in enumerate(zip(values, floors)) if v <= f + band]


# A standard error under this share of the values' scale is rounding, not spread: resamples
# all at 1.0 less a margin of 0.9 leave a variance of 2e-34, which would otherwise read as a
# measured spread and give p = 0 where the sign test gives 0.5^n.
ROUNDING = 1e-12


@dataclass(frozen=True)
class Estimate:
    """A mean, the variance parts of its uncertainty (Part) and the number of seeds; `items`
    says whether item-level replicates entered it, `moving` whether any seed's replicates
    vary (a zero V_sh can be a clamped negative estimate, not a measured zero)."""

    mean: float
    parts: tuple[Part, ...]
    n: int
    items: bool
    moving: bool = False

    @property
    def variance(self) -> float:
        """V, the sum of the parts; nan where one is unknown (one seed)."""
        return float(sum(v for v, _, _ in self.parts))

    @property
    def shared(self) -> float:
        """The part of V that more seeds do not shrink (items every seed shares)."""
        return float(sum(v for v, _, seeds in self.parts if seeds == 0))

    @property
    def exact(self) -> bool:
        """Seeds that agree exactly, each with item replicates that do not vary (a floor or
        ceiling: every resample of every seed at one value): zero spread as measured, not an
        unmeasured spread (independent_runs merges only runs that repeat one measurement)."""
        return (self.items and self.n >= 2 and not self.moving
                and self.variance <= (ROUNDING * max(1.0, abs(self.mean))) ** 2)

    @property
    def se(self) -> float:
        """The standard error; nan where the variance is unknown (one seed)."""
        return math.sqrt(max(self.variance, 0.0)) if math.isfinite(self.variance) else math.nan

    def interval(self, level: float = 1 - ALPHA) -> tuple[float, float]:
        """The two-sided interval (the quadrature rule); the mean alone where the spread was
        measured as zero (exact: every seed and resample at one value, as every member's
        share of special heads at 0), nan where no uncertainty was measured."""
        if self.exact:
            return self.mean, self.mean
        if not self.se > 0.0:
            return math.nan, math.nan
        half = float(compute_half_width(self.parts, (1 - level) / 2))
        return self.mean - half, self.mean + half

    @cached_property
    def dof(self) -> float:
        """For the table: the ν whose t quantile times se gives the 95% half-width (one part:
        its own ν; inf where that is the normal's)."""
        if not self.se > 0.0:
            return math.nan
        live = [dof for v, dof, _ in self.parts if v > 0]
        if len(live) == 1:
            return float(live[0])
        ratio = float(compute_half_width(self.parts, ALPHA / 2)) / self.se
        top = min(max(live), 1e9)
        if ratio <= stats.t.isf(ALPHA / 2, top):
            return math.inf if top == 1e9 else float(top)
        return float(optimize.brentq(lambda d: stats.t.isf(ALPHA / 2, d) - ratio,
                                     min(live), top))

    def at_seeds(self, seeds: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """The parts the same design would have with `seeds` seeds (per side): seed parts
        shrink as 1/seeds with seeds − 1 degrees of freedom, shared parts stay."""
        seeds = np.asarray(seeds, dtype=np.float64)
        return [(v * n / seeds, seeds - 1, 1) if n else (np.full_like(seeds, v), dof, 0)
                for v, dof, n in self.parts]


def combine_seeds(values: list[float], replicates: list[np.ndarray | None],
                  overlap: float = 0.0) -> Estimate:
    """The mean over seeds of per-seed values, with its seed and shared item parts (above).
    replicates[s] is seed s's (R,) array, or None where its run wrote none. overlap, the
    share of its items a seed shares with others where their replicates do not pair them
    (compute_overlap), enters the shared part at its bound (with replicates: they measure the
    item variance it is a share of)."""
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("no values to combine")
    usable = [r for r in replicates if r is not None and np.isfinite(r).all()]
    items = len(usable) == n and len({len(r) for r in usable}) == 1
    if n == 1:  # one seed: no seed-to-seed variance measured, whatever its items say
        return Estimate(values[0], ((math.nan, 1.0, 1),), 1, items)
    if not items:  # seeds only: the t-interval (none if they agree: no spread measured)
        return Estimate(float(np.mean(values)), ((float(np.var(values, ddof=1)) / n,
                                                  n - 1.0, n),), n, False)
    reps = np.stack(usable)  # (seeds, R)
    mean, seed_var, shared = (float(x) for x in compute_random_effects(np.array(values), reps,
                                                                        overlap))
    # The seed part keeps n − 1 degrees of freedom even where the items say the seeds should
    # agree: 3 seeds cannot tell τ² = 0 from τ² = 4 σ²_item, and reading them with a normal
    # quantile when they happen to agree is how the truncated-τ² rule lost its level (HKSJ).
    # V_sh is estimated from R replicates: R − 1 degrees of freedom.
    return Estimate(mean, ((seed_var / n, n - 1.0, n), (shared, reps.shape[1] - 1.0, 0)), n,
                    True, moving=bool(np.ptp(reps, axis=1).max() > 0))


def difference(a: Estimate, b: Estimate) -> Estimate:
    """a − b for sides that share no seeds: each side's parts, side by side (Welch's sum of
    variances, each part read with its own ν). A side with one seed has an unknown (nan)
    variance, and so has the difference."""
    return Estimate(a.mean - b.mean, a.parts + b.parts, min(a.n, b.n), a.items and b.items,
                    a.moving or b.moving)


def one_sided_p(gap: float, parts: tuple[Part, ...]) -> float:
    """The one-sided p-value of `mean − margin = gap > 0`: the level at which the quadrature
    rule's half-width equals gap (one part: the t-test's p exactly)."""
    if gap < 0:
        return 1.0 - one_sided_p(-gap, parts)
    live = [(v, dof, n) for v, dof, n in parts if v > 0]
    if gap == 0:
        return 0.5
    if not live:  # zero spread as measured (Estimate.exact): the t statistic is infinite
        return SMALLEST_P
    if len(live) == 1:
        return float(stats.t.sf(gap / math.sqrt(live[0][0]), live[0][1]))

    def excess(log_p: float) -> float:  # decreasing in p: the half-width shrinks
        return float(compute_half_width(live, math.exp(log_p))) - gap

    if excess(math.log(SMALLEST_P)) <= 0:
        return SMALLEST_P
    return math.exp(optimize.brentq(excess, math.log(SMALLEST_P), math.log(0.5), xtol=1e-10))


def compute_power_quantile(dof, alpha: float = ALPHA) -> np.ndarray:
    """t_ν(1 − α/2) + t_ν(POWER): how many standard errors beyond the margin an effect must
    lie for the one-sided test at alpha/2 to pass with POWER (t quantiles: a normal one would
    promise 3 seeds what a t on 2 degrees of freedom cannot deliver). Whole ν up to MAX_SEEDS
    are read from a table (the budget search asks for hundreds at a time)."""
    dof = np.asarray(dof, dtype=np.float64)
    table = power_quantile_table(alpha)  # (MAX_SEEDS + 1,) by ν
    whole = (dof == np.round(dof)) & (dof >= 1) & (dof < len(table))
    if whole.all():
        return table[dof.astype(np.int64)]
    return stats.t.isf(alpha / 2, dof) + stats.t.ppf(POWER, dof)


@lru_cache(maxsize=256)
def power_quantile_table(alpha: float) -> np.ndarray:
    dof = np.arange(MAX_SEEDS + 1, dtype=np.float64)
    dof[0] = 1.0  # ν = 0 is never asked for; a placeholder
    return stats.t.isf(alpha / 2, dof) + stats.t.ppf(POWER, dof)


def compute_power_half_width(parts: list, alpha: float = ALPHA):
    """The quadrature rule at compute_power_quantile per part (vectorised over v and ν)."""
    return np.sqrt(sum(compute_power_quantile(dof, alpha) ** 2 * np.asarray(v)
                       for v, dof, _ in parts))


@lru_cache(maxsize=1024)  # a report asks it of a few ν thousands of times (the budget search)
def seed_variance_factor(dof: float, level: float = SEED_VARIANCE_LEVEL) -> tuple[float, float]:
    """σ²/s² at the two ends of the `level` interval of a true variance estimated on dof
    degrees of freedom (s²ν/σ² ~ χ²_ν). With 3 seeds (ν = 2) it spans 0.33–19.5: a budget
    computed from s² can be off by that factor either way."""
    if not math.isfinite(dof) or dof <= 0:
        return 1.0, 1.0
    tail = (1 - level) / 2
    return dof / stats.chi2.isf(tail, dof), dof / stats.chi2.ppf(tail, dof)


@dataclass(frozen=True)
class TTest:
    """One-sided test of the claim `effect > margin` (greater) or `effect < margin` (less)
    on an estimate's parts (the quadrature rule; one part: the t-test)."""

    estimate: Estimate
    margin: float
    expect: str  # greater | less

    @property
    def measured(self) -> bool:
        """Whether the runs gave an uncertainty at all (not one seed, not identical seeds
        without replicates)."""
        return math.isfinite(self.estimate.variance) and (self.estimate.se > 0.0
                                                          or self.estimate.exact)

    @property
    def gap(self) -> float:
        """The estimate's distance beyond the margin in the claim's direction (positive: on
        the claim's side)."""
        gap = self.estimate.mean - self.margin
        return gap if self.expect == "greater" else -gap

    @property
    def lean(self) -> int:
        """+1 where the estimate lies on the claim's side of the margin, −1 on the wrong
        side, 0 on it or undefined."""
        gap = self.gap
        return 0 if not gap or math.isnan(gap) else 1 if gap > 0 else -1

    @property
    def z(self) -> float:
        """gap in standard errors; 0 where nothing was measured."""
        return self.gap / self.estimate.se if self.measured and self.estimate.se else 0.0

    def shared_share(self, alpha: float = ALPHA) -> float:
        """The share of the squared 95% half-width (at alpha, two-sided) that the items every
        seed shares make: t²_{R−1} V_sh / Σ t²_ν v. Where it is small, more items would not
        resolve the claim, whatever items_needed says (V_sh truncated at 0 is positive half
        the time on private items alone)."""
        total = float(compute_half_width(self.estimate.parts, alpha / 2)) ** 2
        shared = [part for part in self.estimate.parts if part[2] == 0]
        if not shared or not total > 0.0:
            return 0.0
        return float(compute_half_width(shared, alpha / 2)) ** 2 / total

    @cached_property
    def p_holds(self) -> float:
        """P-value of the claim against H0 (the effect is at or on the wrong side of the
        margin); 1 where no uncertainty was measured. An exact estimate (every replicate and
        resample at one value: zero spread as measured) has an infinite t statistic, so it
        gets the sign test's p instead, 0.5^n for n replicates all on the claim's side: 18
        checkpoints at one value cannot say more than 18 coin flips."""
        if not self.measured:
            return 1.0
        if self.estimate.exact:
            return 0.5 ** self.estimate.n if self.gap > 0 else 1.0
        return one_sided_p(self.gap, self.estimate.parts)

    @property
    def p_fails(self) -> float:
        """P-value of the opposite claim (the effect lies on the wrong side of the margin)."""
        if not self.measured:
            return 1.0
        if self.estimate.exact:
            return 0.5 ** self.estimate.n if self.gap < 0 else 1.0
        return 1.0 - self.p_holds

    def with_seed_variance(self, end: int, level: float = SEED_VARIANCE_LEVEL) -> TTest:
        """The same test had each seed part of its variance been at the low (end 0) or high
        (end 1) end of its true variance's `level` interval (seed_variance_factor, on that
        part's own ν); the shared items' part stays. A budget asked of σ² rather than of s²."""
        return self.with_seed_parts_scaled(lambda dof: seed_variance_factor(dof, level)[end])

    def with_seed_parts_scaled(self, factor) -> TTest:
        """The same test with each seed part's variance times factor(its ν); the shared
        items' part stays."""
        parts = tuple((v * factor(dof), dof, n) if n else (v, dof, n)
                      for v, dof, n in self.estimate.parts)
        return replace(self, estimate=replace(self.estimate, parts=parts))

    def seeds_needed(self, alpha: float = ALPHA, least: int | None = None) -> float:
        """Seeds (per side, at the same items per seed) for the observed effect to resolve
        with POWER: the least m from `least` (default: above the seeds run, which did not
        resolve it) whose parts (Estimate.at_seeds) give a power half-width within |gap|.
        inf for no effect, an unknown seed variance, or no m up to MAX_SEEDS (the shared
        items' noise may be the cause: items_needed)."""
        gap = abs(self.gap) if self.measured else 0.0
        if gap == 0.0:
            return math.inf
        first = self.estimate.n + 1 if least is None else least
        for low, high in ((first, 64), (64, MAX_SEEDS + 1)):  # most end early
            seeds = np.arange(low, max(low, high))
            resolves = compute_power_half_width(self.estimate.at_seeds(seeds), alpha) <= gap
            if resolves.any():
                return float(seeds[resolves.argmax()])
        return math.inf

    def items_needed(self, alpha: float = ALPHA) -> float:
        """Where the noise of the items every seed shares alone keeps the effect from
        resolving with POWER at any number of seeds: the factor of items per seed that would
        shrink that part enough (it falls as 1/items), a lower bound (the seed part is taken
        as gone). 1 where the shared part is not the limit; inf for no effect."""
        gap = abs(self.gap) if self.measured else 0.0
        if gap == 0.0:
            return math.inf
        shared = [part for part in self.estimate.parts if part[2] == 0]
        width = float(compute_power_half_width(shared, alpha)) if shared else 0.0
        return (width / gap) ** 2 if width >= gap else 1.0


def replication_probability(p: float, level: float) -> float:
    """The predictive probability that an independent rerun of the same design resolves the
    claim the same way at the same one-sided level: with z the observed effect in standard
    errors (from its one-sided p) and z_c the level's critical value, the rerun's z is
    N(z, 2) under a flat prior (the effect's uncertainty and the rerun's own noise), so
    Φ((z − z_c)/√2) (Goodman, 1992; Killeen, 2005). Observed effects that passed a threshold
    overstate their truth: read it as an upper bound where the claim was chosen for its
    result."""
    z = stats.norm.isf(max(p, SMALLEST_P))
    return float(stats.norm.cdf((z - stats.norm.isf(level)) / math.sqrt(2.0)))


def holm(p_values: list[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values: the family-wise error rate over every claim
    of the suite stays at the level they are compared with."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
