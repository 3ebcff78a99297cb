"""A finding's verdict from its runs: holds, does not hold, underpowered, inconclusive or
uninformative, before and after Holm's correction over every finding of the report.

A finding states its claim as one comparison, or several that must all hold (`all:`):

    compare: {a: <evidence>, b: <evidence or a number>, expect: greater | less, margin: m}

meaning a − b > m (greater) or a − b < m (less). The verdict is computed, never written: a
one-sided test of the claim against its margin (stats.py), an intersection-union test over the
parts of a compound claim, and Holm's step-down over the report, so that the chance of any
false "holds" or "does not hold" in the suite stays at α. A finding says what it is `about`
(`model` or `method`); runs identical but for their seed count as one replication.

Each verdict, defined: docs/findings.md, "The verdicts, defined".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bertology.errors import require
from bertology.run.rundir import RunDir
from bertology.study.evidence import Evidence, evaluate, layer_keys, parse_evidence
from bertology.study.results import replication_key
from bertology.study.stats import (
    ALPHA,
    FEASIBLE,
    SignTest,
    TTest,
    combine_seeds,
    difference,
    holm,
)

EXPECTATIONS = ("greater", "less")
VERDICTS = ("holds", "does not hold", "underpowered", "inconclusive", "uninformative")
ABOUT = ("model", "method")


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
    about: str = "model"  # model | method (ABOUT)
    guards: tuple[Comparison, ...] = ()  # what must hold for the comparison to inform at all
    caveat: str = ""  # what a reader must know beside the verdict (shown in its note)

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


def parse_comparisons(block, finding: str) -> tuple[Comparison, ...]:
    """One comparison, or several under `all:`."""
    block = block or {}
    parts = block["all"] if isinstance(block, dict) and "all" in block else [block]
    return tuple(parse_comparison(p, finding) for p in parts)


def parse_finding(spec: dict) -> FindingSpec:
    require(isinstance(spec, dict) and spec.get("id"), f"a finding block needs an id: {spec!r}")
    about = spec.get("about", "model")  # the catalog declares it (tests/test_findings.py)
    require(about in ABOUT, f"finding {spec['id']}: about={about!r}; valid: {', '.join(ABOUT)} "
            "(model: what training put in the model; method: a property of the probe, metric "
            "or architecture)")
    study = spec.get("study") or ()
    guards = parse_comparisons(spec["guard"], spec["id"]) if spec.get("guard") else ()
    return FindingSpec(str(spec["id"]), str(spec.get("claim", "")), str(spec.get("source", "")),
                       parse_comparisons(spec.get("compare"), spec["id"]),
                       (study,) if isinstance(study, str) else tuple(study), str(about), guards,
                       str(spec.get("caveat", "")))


# ---------------------------------------------------------------- one comparison


@dataclass
class Side:
    """One side's per-run values (and replicates) by seed."""

    runs: list[RunDir]
    values: list[float]
    replicates: list[np.ndarray | None]

    @property
    def seeds(self) -> list:
        return [r.seed for r in self.runs]


def selects(run: RunDir, evidence: Evidence) -> bool:
    return all(str(run.choice(key)) == value for key, value in evidence.where)


def collect(runs: list[RunDir], evidence: Evidence) -> Side:
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


def compare_runs(comparison: Comparison, runs: list[RunDir]) -> tuple[TTest | SignTest, str]:
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
    runs: list[RunDir]
    tests: list[TTest | SignTest]
    designs: list[str]
    p_holds: float = 1.0
    p_fails: float = 1.0
    raw: str = "inconclusive"
    corrected: str = "inconclusive"
    note: str = ""
    p_adjusted: float = 1.0
    notes: list[str] = field(default_factory=list)
    guard_tests: list[TTest | SignTest] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def p_two_sided(self) -> float:
        return min(1.0, 2.0 * min(self.p_holds, self.p_fails))


def judge(spec: FindingSpec, runs: list[RunDir]) -> FindingResult:
    """The raw verdict; the corrected one needs the whole suite (correct_suite)."""
    require(all(isinstance(c.a, Evidence) for c in spec.comparisons + spec.guards),
            f"finding {spec.id}: side a must read the runs (a metric), not a number")
    runs, repeats = independent_runs(spec, runs)
    compared = [compare_runs(c, runs) for c in spec.comparisons]
    result = FindingResult(spec, runs, [t for t, _ in compared], [d for _, d in compared])
    result.guard_tests = [compare_runs(g, runs)[0] for g in spec.guards]
    tests = result.tests
    result.p_holds = max(t.p_holds for t in tests)  # intersection-union: every part must hold
    result.p_fails = min(1.0, len(tests) * min(t.p_fails for t in tests))  # Bonferroni: any
    result.raw, result.note = classify(result, ALPHA, repeated=bool(repeats))
    failed = [g.describe() for g, t in zip(spec.guards, result.guard_tests)
              if not t.p_holds < ALPHA / 2]
    if failed:  # the comparison cannot discriminate: no verdict on the claim, either way
        result.raw = "uninformative"
        result.note = f"guard not met: {'; '.join(failed)}"
    repeated = (f"{len(repeats)} run(s) repeat another exactly (same config less the seed, "
                "same evidence) and count once") if repeats else ""
    result.note = "; ".join(filter(None, [result.note, repeated, spec.caveat]))
    return result


def evidence_of(spec: FindingSpec) -> list[Evidence]:
    """Every evidence the finding reads, guards included."""
    return [x for c in spec.comparisons + spec.guards for x in (c.a, c.b)
            if isinstance(x, Evidence)]


def independent_runs(spec: FindingSpec, runs: list[RunDir]) -> tuple[list[RunDir], list[RunDir]]:
    """(the runs that replicate independently, the repeats left out). A run whose config
    equals another's but for the seed and whose every metric the finding reads (and its item
    replicates) is identical to it is the same measurement again (a deterministic pipeline
    the seed does not reach): counting it would be pseudo-replication; the first is kept."""
    kept: list[RunDir] = []
    repeats: list[RunDir] = []
    seen: set[tuple] = set()
    evidence = evidence_of(spec)
    for run in runs:
        keys = sorted({k for e in evidence if selects(run, e)
                       for k in layer_keys(run.metrics, e.metric)[1]})
        readings = [(k, run.metrics[k], run.replicates[k].tobytes()
                     if k in run.replicates else None) for k in keys]
        if not readings:  # an arm of the sweep this finding does not read: not a repeat
            kept.append(run)
            continue
        key = (replication_key(run), repr(readings))
        (repeats if key in seen else kept).append(run)
        seen.add(key)
    return kept, repeats


def classify(result: FindingResult, alpha: float, repeated: bool = False) -> tuple[str, str]:
    """The verdict at level alpha (two-sided), and what an unresolved one would need: seeds,
    or items where the noise every seed shares (one evaluation set) is what keeps it open.
    repeated: some of the runs repeated another exactly and were counted once."""
    if any(math.isnan(t.estimate.mean) for t in result.tests):
        return "inconclusive", "the evidence is undefined on these runs (see the figure)"
    if any(t.estimate.n < 2 for t in result.tests):  # before "holds": one seed never resolves
        if repeated:  # the seeds do not reach the measurement: more of them repeat it again
            return "underpowered", ("the seeds do not reach this measurement (their runs "
                                    "repeat it exactly), so more seeds cannot resolve it: "
                                    "replicate what varies it (another checkpoint, e.g. a "
                                    "pretraining seed)")
        return "underpowered", ("one seed measures no seed-to-seed variance (item replicates "
                                "do not stand in for it): run more seeds")
    if result.p_holds < alpha / 2:
        return "holds", ""
    if result.p_fails < alpha / 2:
        return "does not hold", ""
    if not all(t.measured for t in result.tests):
        return "underpowered", ("no uncertainty measured (identical seeds and no item "
                                "replicates): more seeds, or runs that write replicates")
    # the part furthest from resolving decides the budget: its seeds, then its items
    budgets = [(t.seeds_needed(alpha), t.items_needed(alpha), t) for t in result.tests]
    seeds, items, weakest = max(budgets, key=lambda b: b[:2])
    if seeds <= FEASIBLE * weakest.estimate.n:
        return "underpowered", f"≈ {seeds:.0f} seeds would resolve it (80% power)"
    if 1.0 < items <= FEASIBLE:
        return "underpowered", ("more items, not seeds: the noise of the items every seed "
                                "shares does not shrink with seeds; ≥ "
                                f"{math.ceil(items)}× the items would resolve it (80% power)")
    return "inconclusive", "the effect is too close to the margin for a feasible budget"


def correct_suite(results: list[FindingResult]) -> None:
    """Holm over the two-sided p-values of the informative findings; sets each result's
    corrected verdict (an uninformative finding stays so and is not in the family)."""
    informative = [r for r in results if r.raw != "uninformative"]
    adjusted = holm([r.p_two_sided for r in informative])
    for result in results:
        result.p_adjusted, result.corrected = 1.0, result.raw
    for result, p in zip(informative, adjusted):
        result.p_adjusted = p
        if p < ALPHA:
            result.corrected = "holds" if result.p_holds < result.p_fails else "does not hold"
        elif result.raw in ("holds", "does not hold"):
            result.corrected = "underpowered"  # resolved alone, not beside the other claims
