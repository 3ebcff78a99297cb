"""Holm's step-down over a report's findings (verdicts.py judges each one alone), and the
fragile mark: a resolved verdict whose Holm-adjusted p lies within 2× of α, or an unresolved
one whose budget its seeds' variance could change. Either could move on another CPU or with
one seed more (issue 38). Each verdict and the mark, defined: docs/findings.md.
"""

from __future__ import annotations

import math
from dataclasses import replace

from bertology.study.stats import ALPHA, SEED_VARIANCE_LEVEL, TTest, holm
from bertology.study.verdicts import FindingResult, replicates_of, unresolved, with_context


def budget_fragile(result: FindingResult, alpha: float, verdict: str) -> bool:
    """Whether an unresolved verdict (unresolved(result, alpha)'s, given) rests on the noise of
    its seed variance. Underpowered or leans against (a budget that settles it: seeds, or
    items where the items every seed shares dominate) and inconclusive (none) are told apart
    by budgets that scale with s², and s² from 3 seeds is uncertain by a factor of 60 (its 90%
    interval). Fragile when the verdict, recomputed with the true seed variance at either end
    of that interval, is not the same (issue 38: between two CPUs, heads_raise needed ≈ 17
    seeds on one and more than 30 on the other, the same effect)."""
    if not any(isinstance(t, TTest) for t in result.tests):
        return False  # a sign test has no variance to scale
    for end in (0, 1):  # every seed part at the low, then the high end of its own interval
        scaled = [t.with_seed_variance(end) if isinstance(t, TTest) else t for t in result.tests]
        if unresolved(replace(result, tests=scaled), alpha, result.repeated)[0] != verdict:
            return True
    return False


FRAGILE = 2.0  # a verdict whose adjusted p lies within this factor of alpha, either way


def correct_suite(results: list[FindingResult]) -> None:
    """Holm's step-down in each direction over the informative findings: the claims'
    one-sided p_holds form one family and their opposites' p_fails another, each at alpha / 2,
    so a strong "does not hold" competes only with other "does not hold"s. Sets each result's
    corrected verdict, its note (the budget at its Holm level) and whether it is fragile (an
    uninformative finding stays so and is in neither family)."""
    informative = [r for r in results if r.raw != "uninformative"]
    for result in results:
        result.p_adjusted, result.corrected = 1.0, result.raw
        result.note = with_context(result, result.raw_note)
    holds, fails = holm_levels([r.p_holds for r in informative]), \
        holm_levels([r.p_fails for r in informative])
    for result, (p_h, level_h), (p_f, level_f) in zip(informative, holds, fails):
        result.p_adjusted = min(1.0, 2.0 * min(p_h, p_f))
        if p_h < ALPHA / 2:
            verdict, note = "holds", ""
        elif p_f < ALPHA / 2:
            verdict, note = "does not hold", ""
        else:  # the budget at the level Holm would hold this finding to, in its direction
            level = level_h if result.lean > 0 else level_f
            verdict, note = unresolved(result, 2.0 * level, result.repeated)
        result.fragile = ALPHA / FRAGILE <= result.p_adjusted < ALPHA * FRAGILE
        resolved = verdict in ("holds", "does not hold")
        if not resolved and not result.fragile and budget_fragile(result, 2.0 * level, verdict):
            result.fragile = True
            note = "; ".join([f"fragile: with the seed variance elsewhere in its "
                              f"{SEED_VARIANCE_LEVEL:.0%} interval this verdict would be "
                              "another unresolved one", note])
        elif result.fragile and resolved:
            note = fragile_note(result, verdict == "holds",
                                2.0 * (level_h if verdict == "holds" else level_f))
        elif result.fragile:
            note = "; ".join([f"fragile: Holm-adjusted p = {result.p_adjusted:.3g}", note])
        result.corrected, result.note = verdict, with_context(result, note)


def holm_levels(p_values: list[float]) -> list[tuple[float, float]]:
    """Each p's Holm-adjusted value and the one-sided level it is compared with at its rank
    (alpha / 2 over the hypotheses not yet rejected before it)."""
    adjusted = holm(p_values)
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rank = {index: position for position, index in enumerate(order)}
    return [(adjusted[i], ALPHA / 2 / (len(p_values) - rank[i])) for i in range(len(p_values))]


def fragile_note(result: FindingResult, held: bool, alpha: float) -> str:
    """A resolved verdict within a factor of FRAGILE of its threshold (float noise, another
    CPU, one seed more could move it), and the seeds that would make it firm: the budget with
    80% power at its Holm level."""
    parts = result.tests if held else [t for t in result.tests if t.lean < 0] or result.tests
    seeds = max(t.seeds_needed(alpha) for t in parts)
    budget = (f"; ≈ {seeds:.0f} {replicates_of(result)} would settle it"
              if math.isfinite(seeds) else "")
    return (f"fragile: Holm-adjusted p = {result.p_adjusted:.3g}, within {FRAGILE:g}× of "
            f"α = {ALPHA:g}{budget}")
