"""The statistics behind a verdict: an estimate of a − b with a standard error that counts both
sources of noise, a one-sided test against the claim's margin, Holm's correction over the suite,
and the budget that would resolve an unresolved claim.

Two sources of noise (see the README's "How verdicts are decided"):
- seeds: a run's number changes with its seed (initialisation, sampled sentences, data order);
- items: it is computed on a finite sample of sentences or examples. Runs write bootstrap
  replicates of their metrics over items (bertology/run/replicates.py), so even a deterministic
  run, or three seeds that agree exactly, carries its sampling error.

Per seed s the estimate is d_s (a_s − b_s, paired by seed) with item replicates d_s^r. Over
n seeds, as in a random-effects meta-analysis (DerSimonian & Laird, 1986):

    V_items  = Var_r( mean_s d_s^r )                  item noise of the seed mean; replicate r
                                                      resamples the same items in every run, so
                                                      noise shared by the seeds is counted once
    σ²_own   = n/(n−1) · mean_s Var_r(d_s^r − mean_s' d_s'^r)   item noise private to a seed
    τ²       = max(0, s²_seeds − σ²_own)              seed-to-seed variance beyond item noise
    V        = τ²/n + V_items,   ν = Satterthwaite (n − 1 for the seed part, ∞ for the items)

Without replicates V = s²_seeds / n with n − 1 degrees of freedom (the t-interval), and V = 0
(three equal seeds, or one) never supports a verdict: the claim is underpowered until the runs
give an uncertainty. Two sides that do not share seeds are combined by Welch–Satterthwaite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05  # two-sided; a one-sided claim is tested at ALPHA / 2, the 95% interval's edge
POWER = 0.8  # for the budget that would resolve an unresolved claim
FEASIBLE = 10.0  # a claim needing more than this many times its seeds is called inconclusive


@dataclass(frozen=True)
class Estimate:
    """A mean with its variance V, degrees of freedom ν (inf: normal) and the number of
    seeds; `items` says whether item-level replicates entered V."""

    mean: float
    variance: float
    dof: float
    n: int
    items: bool

    @property
    def se(self) -> float:
        """The standard error; nan where the variance is unknown (one run, no replicates)."""
        return math.sqrt(max(self.variance, 0.0)) if math.isfinite(self.variance) else math.nan

    def interval(self, level: float = 1 - ALPHA) -> tuple[float, float]:
        """The two-sided interval; nan where no uncertainty was measured."""
        if not self.se > 0.0:
            return math.nan, math.nan
        half = stats.t.ppf(0.5 + level / 2, self.dof) * self.se
        return self.mean - half, self.mean + half


def combine_seeds(values: list[float], replicates: list[np.ndarray | None]) -> Estimate:
    """The mean over seeds of per-seed values, with V from seeds and item replicates (above).
    replicates[s] is seed s's (R,) array, or None where its run wrote none."""
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("no values to combine")
    mean = float(np.mean(values))
    seed_var = float(np.var(values, ddof=1)) if n > 1 else 0.0
    usable = [r for r in replicates if r is not None and np.isfinite(r).all()]
    if len(usable) != n:  # seeds only: the t-interval (zero width if they agree; one run:
        # the variance is unknown, not zero)
        return Estimate(mean, seed_var / n if n > 1 else math.nan, max(n - 1, 1), n, False)
    reps = np.stack(usable)  # (seeds, R)
    seed_mean_reps = reps.mean(axis=0)  # (R,)
    v_items = float(np.var(seed_mean_reps, ddof=1))
    own = float(np.mean(np.var(reps - seed_mean_reps, axis=1, ddof=1))) * n / (n - 1) \
        if n > 1 else 0.0
    tau2 = max(0.0, seed_var - own)
    variance = tau2 / n + v_items
    return Estimate(mean, variance, satterthwaite([(tau2 / n, n - 1)]
                                                  + [(v_items, math.inf)]), n, True)


def satterthwaite(parts: list[tuple[float, float]]) -> float:
    """Degrees of freedom of a sum of variance estimates (v_i with ν_i each)."""
    total = sum(v for v, _ in parts)
    denominator = sum(v * v / d for v, d in parts if v > 0 and math.isfinite(d))
    if total <= 0:
        return 1.0
    return math.inf if denominator == 0 else total * total / denominator


def difference(a: Estimate, b: Estimate) -> Estimate:
    """a − b for sides that share no seeds: Welch–Satterthwaite. A side with one value and no
    replicates has an unknown (nan) variance, and so has the difference."""
    variance = a.variance + b.variance
    dof = satterthwaite([(a.variance, a.dof), (b.variance, b.dof)])
    return Estimate(a.mean - b.mean, variance, dof, min(a.n, b.n), a.items and b.items)


@dataclass(frozen=True)
class TTest:
    """One-sided test of the claim `effect > margin` (greater) or `effect < margin` (less)
    on a t (or normal) estimate."""

    estimate: Estimate
    margin: float
    expect: str  # greater | less

    @property
    def measured(self) -> bool:
        """Whether the runs gave an uncertainty at all (not one run without replicates, not
        identical seeds without them)."""
        return math.isfinite(self.estimate.variance) and self.estimate.se > 0.0

    @property
    def z(self) -> float:
        """The standardised distance of the estimate beyond the margin, in the claim's
        direction (positive: on the claim's side); 0 where nothing was measured."""
        if not self.measured:
            return 0.0
        gap = self.estimate.mean - self.margin
        return (gap if self.expect == "greater" else -gap) / self.estimate.se

    @property
    def p_holds(self) -> float:
        """P-value of the claim against H0 (the effect is at or on the wrong side of the
        margin); 1 where no uncertainty was measured."""
        return float(stats.t.sf(self.z, self.estimate.dof)) if self.measured else 1.0

    @property
    def p_fails(self) -> float:
        """P-value of the opposite claim (the effect lies on the wrong side of the margin)."""
        return float(stats.t.cdf(self.z, self.estimate.dof)) if self.measured else 1.0

    def seeds_needed(self, alpha: float = ALPHA) -> float:
        """Seeds (at the same items per seed) for the observed effect to resolve with POWER,
        assuming the standard error falls as 1/sqrt(seeds); inf for no effect."""
        if self.z == 0.0:
            return math.inf
        z_needed = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(POWER)
        return self.estimate.n * (z_needed / abs(self.z)) ** 2


@dataclass(frozen=True)
class SignTest:
    """An exact sign test over seeds, for a discrete reduction (a peak layer) whose sampling
    distribution no normal approximation or bootstrap describes: each seed's value falls on
    the claim's side of the margin or not, and under H0 either is as likely. Ties count for
    neither side."""

    estimate: Estimate  # for the report: the mean over seeds, no interval of its own
    values: tuple[float, ...]
    margin: float
    expect: str

    def _side(self, value: float) -> int:
        gap = value - self.margin if self.expect == "greater" else self.margin - value
        return (gap > 0) - (gap < 0)

    @property
    def measured(self) -> bool:
        return True

    @property
    def p_holds(self) -> float:
        wins = sum(self._side(v) > 0 for v in self.values)
        return float(stats.binom.sf(wins - 1, len(self.values), 0.5))

    @property
    def p_fails(self) -> float:
        losses = sum(self._side(v) < 0 for v in self.values)
        return float(stats.binom.sf(losses - 1, len(self.values), 0.5))

    def seeds_needed(self, alpha: float = ALPHA) -> float:
        """Seeds for the one-sided exact test to pass at the observed share on the claim's
        side (or against it); inf where the seeds split evenly."""
        n = len(self.values)
        share = max(sum(self._side(v) > 0 for v in self.values),
                    sum(self._side(v) < 0 for v in self.values)) / n
        if share <= 0.5:
            return math.inf
        for seeds in range(n, 200):
            if stats.binom.sf(math.ceil(share * seeds) - 1, seeds, 0.5) < alpha / 2:
                return float(seeds)
        return math.inf


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
