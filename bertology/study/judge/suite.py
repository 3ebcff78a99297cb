"""Holm's step-down over a report's findings (verdicts.py judges each one alone), and what
makes a resolved verdict firm: replicable, not merely past α.

A resolved verdict is firm where its Holm-adjusted p lies below α/10 and no replicate left out
(a seed, or a population's checkpoint) loses it at its Holm step; with 3 replicates or fewer
nothing is firm (one left out leaves 2). Otherwise it is fragile. In the project's simulated
design (effects N(0, 1), seed SD U(0.2, 2), suites of 20) a firm verdict recurs in an
independent rerun at 0.91 with 18 replicates, 0.80 with 5 (tests/study/test_firm.py). A resolved
verdict on 5 or more replicates also prints its predictive replication probability. An
unresolved verdict carries no mark: its note gives the budget that would settle it, with its
range over the seed variance's plausible values. Each verdict and the marks, defined:
docs/findings.md.
"""

from __future__ import annotations

import math

from bertology.study.judge.stats import ALPHA, holm, replication_probability
from bertology.study.judge.verdicts import (
    FIRM_LEAST,
    FindingResult,
    part_note,
    replicates_of,
    unresolved,
    with_context,
)

FIRM_P = ALPHA / 10  # a firm verdict's Holm-adjusted p (two-sided scale) lies below this
PREDICT_LEAST = 5  # replicates from which a resolved verdict prints P(replication)


def correct_suite(results: list[FindingResult]) -> None:
    """Holm's step-down in each direction over the informative findings: the claims'
    one-sided p_holds form one family and their opposites' p_fails another, each at alpha / 2,
    so a strong "does not hold" competes only with other "does not hold"s. Sets each result's
    corrected verdict, its note (the budget at its Holm level, or what makes it firm or not)
    and whether a resolved one is fragile (an uninformative finding stays so and is in
    neither family)."""
    informative = [r for r in results if r.raw != "uninformative"]
    for result in results:
        result.p_adjusted, result.corrected, result.fragile = 1.0, result.raw, False
        result.p_replication = math.nan
        result.note = with_context(result, result.raw_note)
    holds, fails = holm_levels([r.p_holds for r in informative]), \
        holm_levels([r.p_fails for r in informative])
    for result, (p_h, level_h), (p_f, level_f) in zip(informative, holds, fails):
        result.p_adjusted = min(1.0, 2.0 * min(p_h, p_f))
        if p_h < ALPHA / 2 or p_f < ALPHA / 2:
            held = p_h < ALPHA / 2
            verdict, note = resolved_note(result, held, level_h if held else level_f)
        else:  # the budget at the level Holm would hold this finding to, in its direction
            level = level_h if result.lean > 0 else level_f
            verdict, note = unresolved(result, 2.0 * level, result.repeated)
        note = "; ".join(filter(None, [part_note(result, verdict), note]))
        result.corrected, result.note = verdict, with_context(result, note)


def resolved_note(result: FindingResult, held: bool, level: float) -> tuple[str, str]:
    """The resolved verdict and its note: firm with its P(replication), or fragile with why
    and the budget that would settle it. Sets result.fragile and result.p_replication."""
    p = result.p_holds if held else result.p_fails
    if result.replicates >= PREDICT_LEAST:
        result.p_replication = replication_probability(p, level)
    why = not_firm(result, held, level)
    result.fragile = why is not None
    predicted = (f"P(replication) ≈ {result.p_replication:.2f} (an independent rerun resolving "
                 "it so: predictive, an upper bound where the claim was chosen for its result)"
                 if math.isfinite(result.p_replication) else "")
    verdict = "holds" if held else "does not hold"
    if why is None:
        return verdict, predicted
    return verdict, "; ".join(filter(None, [f"fragile: {why}", settle_budget(result, held,
                                                                             2.0 * level),
                                            predicted]))


def not_firm(result: FindingResult, held: bool, level: float) -> str | None:
    """Why a resolved verdict is not firm, or None where it is."""
    kind = replicates_of(result)
    if result.replicates < FIRM_LEAST:
        return (f"{result.replicates} {kind}; firm needs {FIRM_LEAST} or more (with one left "
                "out, at least 3 remain)")
    if not result.p_adjusted < FIRM_P:
        return f"Holm-adjusted p = {result.p_adjusted:.3g}, not below α/10 = {FIRM_P:g}"
    if not result.left_out:
        return f"no {kind[:-1]} could be left out (runs without a seed)"
    for name, p_holds, p_fails in result.left_out:
        p = p_holds if held else p_fails
        if not p < level:
            return (f"without {name} it would not resolve (one-sided p = {p:.3g} against its "
                    f"Holm level {level:.3g})")
    return None


def holm_levels(p_values: list[float]) -> list[tuple[float, float]]:
    """Each p's Holm-adjusted value and the one-sided level it is compared with at its rank
    (alpha / 2 over the hypotheses not yet rejected before it)."""
    adjusted = holm(p_values)
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rank = {index: position for position, index in enumerate(order)}
    return [(adjusted[i], ALPHA / 2 / (len(p_values) - rank[i])) for i in range(len(p_values))]


def settle_budget(result: FindingResult, held: bool, alpha: float) -> str:
    """The replicates that would resolve a fragile verdict with 80% power at its Holm level."""
    parts = result.tests if held else [t for t in result.tests if t.lean < 0] or result.tests
    seeds = max(t.seeds_needed(alpha) for t in parts)
    return (f"≈ {seeds:.0f} {replicates_of(result)} would settle it"
            if math.isfinite(seeds) else "")
