"""A finding's verdict from its runs: holds, does not hold, underpowered or inconclusive,
before and after Holm's correction over every finding of the report.

A finding states its claim as one comparison, or several that must all hold (`all:`):

    compare: {a: <evidence>, b: <evidence or a number>, expect: greater | less, margin: m}

meaning a − b > m (greater) or a − b < m (less). The verdict is computed, never written:
- holds: the one-sided p-value of the claim is below α/2 (its 95% interval lies beyond m);
  for several comparisons, every one (an intersection-union test: p = the largest p);
- does not hold: the opposite claim passes the same test (for several: any one of them,
  Bonferroni over them);
- underpowered: neither, and the budget that would resolve the observed effect with 80% power
  is within 10× the seeds run: the verdict says how many seeds that is; also a claim whose runs
  measured no uncertainty at all (one run, or identical seeds, and no item replicates);
- inconclusive: neither, and the effect sits so close to the margin that no feasible budget
  resolves it (or it is undefined on these runs).
The corrected verdict applies Holm's step-down over the two-sided p-values of all findings in
the report, so the chance of any false "holds" or "does not hold" in the suite stays at α.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bertology.errors import require
from bertology.findings.evidence import Evidence, evaluate, parse_evidence
from bertology.findings.runs import Run
from bertology.findings.statistics import (
    ALPHA,
    FEASIBLE,
    SignTest,
    TTest,
    combine_seeds,
    difference,
    holm,
)

EXPECTATIONS = ("greater", "less")
VERDICTS = ("holds", "does not hold", "underpowered", "inconclusive")


@dataclass(frozen=True)
class Comparison:
    a: Evidence | float
    b: Evidence | float
    expect: str
    margin: float

    def describe(self) -> str:
        side = [x.describe() if isinstance(x, Evidence) else f"{x:g}" for x in (self.a, self.b)]
        symbol = ">" if self.expect == "greater" else "<"
        return f"{side[0]} − {side[1]} {symbol} {self.margin:g}"


@dataclass(frozen=True)
class FindingSpec:
    id: str
    claim: str
    source: str
    comparisons: tuple[Comparison, ...]
    studies: tuple[str, ...] = ()  # the studies whose runs it reads (none: its own runs)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.comparisons)


def parse_comparison(spec: dict, finding: str) -> Comparison:
    require(isinstance(spec, dict) and "a" in spec and "b" in spec,
            f"finding {finding}: a comparison needs a and b")
    expect = str(spec.get("expect", "greater"))
    require(expect in EXPECTATIONS, f"finding {finding}: expect={expect!r}; valid: "
            f"{', '.join(EXPECTATIONS)}")
    return Comparison(parse_evidence(spec["a"]), parse_evidence(spec["b"]), expect,
                      float(spec.get("margin", 0.0)))


def parse_finding(spec: dict) -> FindingSpec:
    require(isinstance(spec, dict) and spec.get("id"), f"a finding block needs an id: {spec!r}")
    compare = spec.get("compare") or {}
    parts = compare["all"] if isinstance(compare, dict) and "all" in compare else [compare]
    study = spec.get("study") or ()
    return FindingSpec(str(spec["id"]), str(spec.get("claim", "")), str(spec.get("source", "")),
                       tuple(parse_comparison(p, spec["id"]) for p in parts),
                       (study,) if isinstance(study, str) else tuple(study))


# ---------------------------------------------------------------- one comparison


@dataclass
class Side:
    """One side's per-run values (and replicates) by seed."""

    runs: list[Run]
    values: list[float]
    replicates: list[np.ndarray | None]

    @property
    def seeds(self) -> list:
        return [r.seed for r in self.runs]


def selects(run: Run, evidence: Evidence) -> bool:
    return all(str(run.choice(key)) == value for key, value in evidence.where)


def collect(runs: list[Run], evidence: Evidence) -> Side:
    chosen = [r for r in runs if selects(r, evidence)]
    require(bool(chosen), f"no run matches {evidence.describe()}")
    pairs = [evaluate(evidence, r.metrics, r.replicates) for r in chosen]
    return Side(chosen, [v for v, _ in pairs], [reps for _, reps in pairs])


def paired_by_seed(a: Side, b: Side) -> list[int] | None:
    """b's run index for each of a's runs when both sides have one run per seed, the same
    seeds; None when they cannot be paired."""
    if None in a.seeds or len(set(a.seeds)) != len(a.seeds):
        return None
    if sorted(map(str, a.seeds)) != sorted(map(str, b.seeds)):
        return None
    position = {seed: i for i, seed in enumerate(b.seeds)}
    return [position[seed] for seed in a.seeds]


DISCRETE = ("argmax_fraction",)  # reductions judged by an exact sign test over seeds


def is_discrete(comparison: Comparison) -> bool:
    return any(isinstance(x, Evidence) and x.reduce in DISCRETE
               for x in (comparison.a, comparison.b))


def compare_runs(comparison: Comparison, runs: list[Run]) -> tuple[TTest | SignTest, str]:
    """The test of one comparison over the runs, and how a − b was formed (for the report)."""
    a = collect(runs, comparison.a)  # a is always an evidence (checked when the spec loads)
    if isinstance(comparison.b, Evidence):
        b = collect(runs, comparison.b)
        order = paired_by_seed(a, b)
    else:
        b, order = None, list(range(len(a.values)))
    if order is None:
        require(not is_discrete(comparison), f"{comparison.describe()}: a discrete reduction "
                "is judged seed by seed; both sides need the same seeds")
        estimate = difference(combine_seeds(a.values, a.replicates),
                              combine_seeds(b.values, b.replicates))
        return TTest(estimate, comparison.margin, comparison.expect), "unpaired (Welch)"
    values = [a.values[i] - (comparison.b if b is None else b.values[j])
              for i, j in enumerate(order)]
    reps = [None if a.replicates[i] is None or (b is not None and b.replicates[j] is None)
            else a.replicates[i] - (comparison.b if b is None else b.replicates[j])
            for i, j in enumerate(order)]
    design = "paired by seed" if b is not None else "per seed"
    if is_discrete(comparison):
        estimate = combine_seeds(values, [None] * len(values))
        return SignTest(estimate, tuple(values), comparison.margin, comparison.expect), \
            f"{design}, exact sign test"
    return TTest(combine_seeds(values, reps), comparison.margin, comparison.expect), design


# ---------------------------------------------------------------- the finding


@dataclass
class FindingResult:
    spec: FindingSpec
    runs: list[Run]
    tests: list[TTest | SignTest]
    designs: list[str]
    p_holds: float = 1.0
    p_fails: float = 1.0
    raw: str = "inconclusive"
    corrected: str = "inconclusive"
    note: str = ""
    p_adjusted: float = 1.0
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def p_two_sided(self) -> float:
        return min(1.0, 2.0 * min(self.p_holds, self.p_fails))


def judge(spec: FindingSpec, runs: list[Run]) -> FindingResult:
    """The raw verdict; the corrected one needs the whole suite (correct_suite)."""
    require(all(isinstance(c.a, Evidence) for c in spec.comparisons),
            f"finding {spec.id}: side a must read the runs (a metric), not a number")
    compared = [compare_runs(c, runs) for c in spec.comparisons]
    result = FindingResult(spec, runs, [t for t, _ in compared], [d for _, d in compared])
    tests = result.tests
    result.p_holds = max(t.p_holds for t in tests)  # intersection-union: every part must hold
    result.p_fails = min(1.0, len(tests) * min(t.p_fails for t in tests))  # Bonferroni: any
    result.raw, result.note = classify(result, ALPHA)
    return result


def classify(result: FindingResult, alpha: float) -> tuple[str, str]:
    """The verdict at level alpha (two-sided), and what an unresolved one would need."""
    if any(math.isnan(t.estimate.mean) for t in result.tests):
        return "inconclusive", "the evidence is undefined on these runs (see the figure)"
    if result.p_holds < alpha / 2:
        return "holds", ""
    if result.p_fails < alpha / 2:
        return "does not hold", ""
    if not all(t.measured for t in result.tests):
        return "underpowered", ("no uncertainty measured (one run or identical seeds, and no "
                                "item replicates): more seeds, or runs that write replicates")
    # the part furthest from resolving decides the budget
    weakest = max(result.tests, key=lambda t: t.seeds_needed(alpha))
    needed = weakest.seeds_needed(alpha)
    if needed <= FEASIBLE * weakest.estimate.n:
        return "underpowered", f"≈ {math.ceil(needed)} seeds would resolve it (80% power)"
    return "inconclusive", "the effect is too close to the margin for a feasible budget"


def correct_suite(results: list[FindingResult]) -> None:
    """Holm over the suite's two-sided p-values; sets each result's corrected verdict."""
    adjusted = holm([r.p_two_sided for r in results])
    for result, p in zip(results, adjusted):
        result.p_adjusted = p
        if p < ALPHA:
            result.corrected = "holds" if result.p_holds < result.p_fails else "does not hold"
        elif result.raw in ("holds", "does not hold"):
            result.corrected = "underpowered"  # resolved alone, not beside the other claims
        else:
            result.corrected = result.raw
