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
from dataclasses import replace

from bertology.study.judge.record import FindingResult, Verdict
from bertology.study.judge.stats import ALPHA, holm, replication_probability
from bertology.study.judge.verdicts import FIRM_LEAST, part_note, replicates_of, unresolved

FIRM_P = ALPHA / 10  # a firm verdict's Holm-adjusted p (two-sided scale) lies below this
PREDICT_LEAST = 5  # replicates from which a resolved verdict prints P(replication)


def correct_suite(results: list[FindingResult]) -> list[FindingResult]:
    """Holm's step-down in each direction over the informative findings: the claims'
    one-sided p_holds form one family and their opposites' p_fails another, each at alpha / 2,
    so a strong "does not hold" competes only with other "does not hold"s. Returns the results
    in their order, each with its corrected verdict and note (the budget at its Holm level, or
    what makes it firm or not), its Holm-adjusted p and whether a resolved one is fragile (an
    uninformative finding stays so and is in neither family)."""
    reset = [replace(r, corrected=r.raw, p_adjusted=1.0, fragile=False, p_replication=math.nan)
             for r in results]
    informative = [i for i, r in enumerate(reset) if r.raw.label != "uninformative"]
    holds = holm_levels([reset[i].p_holds for i in informative])
    fails = holm_levels([reset[i].p_fails for i in informative])
    for i, (p_h, level_h), (p_f, level_f) in zip(informative, holds, fails):
        reset[i] = corrected_by_holm(replace(reset[i], p_adjusted=min(1.0, 2.0 * min(p_h, p_f))),
                                     p_h, p_f, level_h, level_f)
    return reset


def corrected_by_holm(result: FindingResult, p_h: float, p_f: float, level_h: float,
                      level_f: float) -> FindingResult:
    """An informative finding at its Holm step in each direction (Holm-adjusted p, one-sided
    level): resolved, firm or fragile, or the budget at the level Holm would hold it to."""
    if p_h < ALPHA / 2 or p_f < ALPHA / 2:
        held = p_h < ALPHA / 2
        return resolved_by_holm(result, held, level_h if held else level_f)
    level = level_h if result.lean > 0 else level_f
    verdict, note = unresolved(result, 2.0 * level, result.repeated)
    return replace(result, corrected=Verdict(verdict, with_part_note(result, verdict, note)))


def resolved_by_holm(result: FindingResult, held: bool, level: float) -> FindingResult:
    """The resolved verdict and its note: firm with its P(replication), or fragile with why
    and the budget that would settle it."""
    p = result.p_holds if held else result.p_fails
    p_replication = (replication_probability(p, level) if result.replicates >= PREDICT_LEAST
                     else math.nan)
    why = not_firm(result, held, level)
    predicted = (f"P(replication) ≈ {p_replication:.2f} (an independent rerun resolving "
                 "it so: predictive, an upper bound where the claim was chosen for its result)"
                 if math.isfinite(p_replication) else "")
    verdict = "holds" if held else "does not hold"
    note = predicted if why is None else "; ".join(filter(None, [
        f"fragile: {why}", settle_budget(result, held, 2.0 * level), predicted]))
    return replace(result, corrected=Verdict(verdict, with_part_note(result, verdict, note)),
                   fragile=why is not None, p_replication=p_replication)


def with_part_note(result: FindingResult, verdict: str, note: str) -> str:
    """The note after what a compound claim's first part says on its own (verdicts.part_note)."""
    return "; ".join(filter(None, [part_note(result, verdict), note]))


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
