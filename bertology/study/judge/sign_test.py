"""The exact sign test over seeds (or a population's members), for a discrete reduction (a peak
layer) whose sampling distribution no normal approximation or bootstrap describes; the same
interface as stats.TTest, so verdicts.py judges either alike."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from bertology.study.judge.stats import ALPHA, MAX_SEEDS, POWER, Estimate


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
    def lean(self) -> int:
        """+1 where more seeds fall on the claim's side than on the other, −1 the reverse."""
        sides = sum(self._side(v) for v in self.values)
        return (sides > 0) - (sides < 0)

    def shared_share(self, alpha: float = ALPHA) -> float:
        """A sign test over seeds has no item part."""
        return 0.0

    @property
    def p_holds(self) -> float:
        wins = sum(self._side(v) > 0 for v in self.values)
        return float(stats.binom.sf(wins - 1, len(self.values), 0.5))

    @property
    def p_fails(self) -> float:
        losses = sum(self._side(v) < 0 for v in self.values)
        return float(stats.binom.sf(losses - 1, len(self.values), 0.5))

    def seeds_needed(self, alpha: float = ALPHA) -> float:
        """Seeds for the one-sided exact test to pass with POWER when each seed falls on the
        majority side with the observed share; never fewer than were run plus one; inf where
        the seeds split evenly."""
        n = len(self.values)
        share = max(sum(self._side(v) > 0 for v in self.values),
                    sum(self._side(v) < 0 for v in self.values)) / n
        if share <= 0.5:
            return math.inf
        seeds = np.arange(n + 1, MAX_SEEDS + 1)  # a sign test gains nothing from items
        # the critical count: the least k with P(X ≥ k | p = ½) < alpha/2
        critical = stats.binom.ppf(1 - alpha / 2, seeds, 0.5) + 1
        critical += stats.binom.sf(critical - 1, seeds, 0.5) >= alpha / 2  # ppf's tie
        powered = stats.binom.sf(critical - 1, seeds, share) >= POWER
        return float(seeds[powered.argmax()]) if powered.any() else math.inf

    def items_needed(self, alpha: float = ALPHA) -> float:
        """Items do not move a sign test over seeds: 1 (seeds are its only budget)."""
        return 1.0
