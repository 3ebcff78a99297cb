"""A finding's verdict from its runs: holds, does not hold, underpowered, leans against,
inconclusive or uninformative, before and after Holm's correction over every finding of the
report, and whether it is fragile.

A finding states its claim as one comparison, or several that must all hold (`all:`):

    compare: {a: <evidence>, b: <evidence or a number>, expect: greater | less, margin: m,
              twin: {a: <evidence>, b: <evidence or a number>}}   # optional

meaning a − b > m (greater) or a − b < m (less); with a twin, (a − b) − (a′ − b′) against m.
The verdict is computed, never written: a one-sided test of the claim against its margin
(stats.py), an intersection-union test over the parts of a compound claim, and Holm's step-down
in each direction over the report, so that the chance of any false "holds" or "does not hold"
in the suite stays at α. A finding says what it is `about`
(`model` or `method`); runs identical but for their seed count as one replication.

Each verdict, defined: docs/findings.md, "The verdicts, defined".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bertology.errors import require
from bertology.run.rundir import RunDir
from bertology.study.evidence import (
    Evidence,
    evaluate,
    evaluate_items,
    layer_keys,
    parse_evidence,
)
from bertology.study.results import replication_key
from bertology.study.stats import (
    ALPHA,
    FEASIBLE,
    SignTest,
    TTest,
    collapsed_seeds,
    combine_seeds,
    compute_terms_overlap,
    difference,
    holm,
)

EXPECTATIONS = ("greater", "less")
VERDICTS = ("holds", "does not hold", "underpowered", "leans against", "inconclusive",
            "uninformative")
ABOUT = ("model", "method")


def describe_side(x: Evidence | float) -> str:
    return x.describe() if isinstance(x, Evidence) else f"{x:g}"


@dataclass(frozen=True)
class Comparison:
    """a − b against the margin; with a twin, (a − b) − (a′ − b′): the same contrast on the
    random-init twin subtracted, so only what training adds counts (a difference in
    differences, every term paired by seed)."""

    a: Evidence | float
    b: Evidence | float
    expect: str
    margin: float
    twin: tuple[Evidence, Evidence | float] | None = None  # (a′, b′)

    def describe(self) -> str:
        symbol = ">" if self.expect == "greater" else "<"
        contrast = f"{describe_side(self.a)} − {describe_side(self.b)}"
        if self.twin is not None:
            twin = " − ".join(describe_side(x) for x in self.twin)
            contrast = f"({contrast}) − ({twin})"
        return f"{contrast} {symbol} {self.margin:g}"

    @property
    def evidence(self) -> list[Evidence]:
        """Every evidence it reads."""
        return [x for x in (self.a, self.b, *(self.twin or ())) if isinstance(x, Evidence)]


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
    no_twin: str = ""  # an `about: model` claim judged without its twin: why none applies
    tautology: str = ""  # can_fail: false: why the real measurement cannot come out against it
    unit: str = "checkpoint"  # what its replicates are: checkpoint | pretraining (scope.UNITS)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.comparisons)

    @property
    def reads_twin(self) -> bool:
        """Whether some comparison of the claim contrasts the model with its random-init twin
        (a twin block, or a twin's metric: probe/random/…, downstream/twin/…)."""
        return any(c.twin is not None or any(twin_metric(e.metric) for e in c.evidence)
                   for c in self.comparisons)


TWIN_METRICS = ("/random/", "twin/")  # where the pipelines write the twin's readings


def twin_metric(metric: str) -> bool:
    return any(part in metric for part in TWIN_METRICS)


def parse_comparison(spec: dict, finding: str) -> Comparison:
    require(isinstance(spec, dict) and "a" in spec and "b" in spec,
            f"finding {finding}: a comparison needs a and b")
    expect = str(spec.get("expect", "greater"))
    require(expect in EXPECTATIONS, f"finding {finding}: expect={expect!r}; valid: "
            f"{', '.join(EXPECTATIONS)}")
    twin = None
    if spec.get("twin") is not None:
        block = spec["twin"]
        require(isinstance(block, dict) and "a" in block and "b" in block,
                f"finding {finding}: twin needs a and b (the same contrast on the twin)")
        twin = (parse_evidence(block["a"]), parse_evidence(block["b"]))
        require(isinstance(twin[0], Evidence), f"finding {finding}: twin's a must read the "
                "runs (a metric), not a number")
    return Comparison(parse_evidence(spec["a"]), parse_evidence(spec["b"]), expect,
                      float(spec.get("margin", 0.0)), twin)


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
                       str(spec.get("caveat", "")), str(spec.get("no_twin", "")),
                       str(spec.get("tautology", "")) if spec.get("can_fail") is False else "",
                       str(spec.get("unit", "checkpoint")))


# ---------------------------------------------------------------- one comparison


@dataclass
class Side:
    """One side's per-run values (and replicates) by seed."""

    runs: list[RunDir]
    values: list[float]
    replicates: list[np.ndarray | None]
    items: list[list[str] | None]  # the ids its replicates resample (None: not recorded)

    @property
    def seeds(self) -> list:
        return [r.seed for r in self.runs]


def selects(run: RunDir, evidence: Evidence) -> bool:
    return all(str(run.choice(key)) == value for key, value in evidence.where)


def collect(runs: list[RunDir], evidence: Evidence) -> Side:
    chosen = [r for r in runs if selects(r, evidence)]
    require(bool(chosen), f"no run matches {evidence.describe()}")
    pairs = [evaluate(evidence, r.metrics, r.replicates) for r in chosen]
    return Side(chosen, [v for v, _ in pairs], [reps for _, reps in pairs],
                [evaluate_items(evidence, r.metrics, r.item_ids) for r in chosen])


def overlap_of(terms: list[tuple[Side, list[int]]]) -> float | None:
    """The share of items seeds share where their replicates cannot pair them
    (stats.compute_terms_overlap), from the runs' recorded ids, each term's runs taken in the
    order given (its seeds paired); None where some run recorded none."""
    return compute_terms_overlap([[side.items[i] for i in order] for side, order in terms])


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
    return any(x.reduce in DISCRETE for x in comparison.evidence)


def compare_runs(comparison: Comparison, runs: list[RunDir]
                 ) -> tuple[TTest | SignTest, str, float | None]:
    """The test of one comparison over the runs, how a − b was formed (for the report), and
    the item overlap counted (compute_overlap; None: unknown, counted as 0)."""
    if comparison.twin is not None:
        return compare_twin(comparison, runs)
    a = collect(runs, comparison.a)  # a is always an evidence (checked when the spec loads)
    if isinstance(comparison.b, Evidence):
        b = collect(runs, comparison.b)
        order = paired_by_seed(a, b)
    else:
        b, order = None, list(range(len(a.values)))
    if order is None:
        require(not is_discrete(comparison), f"{comparison.describe()}: a discrete reduction "
                "is judged seed by seed; both sides need the same seeds")
        overlaps = [overlap_of([(side, list(range(len(side.values))))]) for side in (a, b)]
        estimate = difference(
            *(combine_seeds(side.values, side.replicates, overlap=ov or 0.0)
              for side, ov in zip((a, b), overlaps)))
        unknown = None in overlaps
        return (TTest(estimate, comparison.margin, comparison.expect), "unpaired (Welch)",
                None if unknown else max(overlaps))
    values = [a.values[i] - (comparison.b if b is None else b.values[j])
              for i, j in enumerate(order)]
    reps = [None if a.replicates[i] is None or (b is not None and b.replicates[j] is None)
            else a.replicates[i] - (comparison.b if b is None else b.replicates[j])
            for i, j in enumerate(order)]
    design = "paired by seed" if b is not None else "per seed"
    if is_discrete(comparison):
        estimate = combine_seeds(values, [None] * len(values))
        return SignTest(estimate, tuple(values), comparison.margin, comparison.expect), \
            f"{design}, exact sign test", None
    overlap = overlap_of([(a, list(range(len(a.values))))] + ([] if b is None else [(b, order)]))
    return (TTest(combine_seeds(values, reps, overlap=overlap or 0.0), comparison.margin,
                  comparison.expect), design, overlap)


def compare_twin(comparison: Comparison, runs: list[RunDir]
                 ) -> tuple[TTest, str, float | None]:
    """(a − b) − (a′ − b′), seed by seed: the four terms must share their seeds (the twin of
    seed s is compared with the model of seed s: the same data order, sentences and head
    initialisation), their replicates differenced on the same resamples."""
    require(not is_discrete(comparison), f"{comparison.describe()}: a discrete reduction has "
            "no difference in differences")
    terms = [(sign, x) for sign, x in zip((1, -1, -1, 1), (comparison.a, comparison.b,
                                                           *comparison.twin))]
    sides = [(sign, collect(runs, x) if isinstance(x, Evidence) else x) for sign, x in terms]
    first = sides[0][1]
    orders = [paired_by_seed(first, side) if isinstance(side, Side) else None
              for _, side in sides]
    require(all(o is not None for o, (_, side) in zip(orders, sides) if isinstance(side, Side)),
            f"{comparison.describe()}: a difference in differences pairs the model and its "
            "twin seed by seed; every term needs one run per seed, the same seeds")
    values, reps = [], []
    for i in range(len(first.values)):
        # (sign, value, replicates) per term; a number is its own replicate on every resample
        parts = [(sign, side.values[order[i]], side.replicates[order[i]])
                 if isinstance(side, Side) else (sign, side, side)
                 for (sign, side), order in zip(sides, orders)]
        values.append(sum(sign * value for sign, value, _ in parts))
        missing = any(r is None for _, _, r in parts)
        reps.append(None if missing else sum(sign * np.asarray(r) for sign, _, r in parts))
    overlap = overlap_of([(side, order) for (_, side), order in zip(sides, orders)
                          if isinstance(side, Side)])
    return (TTest(combine_seeds(values, reps, overlap=overlap or 0.0), comparison.margin,
                  comparison.expect), "paired by seed, difference in differences", overlap)


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
    note: str = ""  # what the corrected verdict needs or means (the raw one's before Holm)
    p_adjusted: float = 1.0  # two-sided scale: 2 × the smaller Holm-adjusted one-sided p
    notes: list[str] = field(default_factory=list)
    guard_tests: list[TTest | SignTest] = field(default_factory=list)
    raw_note: str = ""
    context: str = ""  # repeats merged, the caveat: appended to either note
    fragile: bool = False
    repeated: bool = False  # some runs repeated another exactly and count once
    # per comparison, the share of items seeds share at other positions of their lists that
    # entered its interval (stats.compute_overlap); None: runs without item ids, counted as 0
    overlaps: list[float | None] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def p_two_sided(self) -> float:
        return min(1.0, 2.0 * min(self.p_holds, self.p_fails))

    @property
    def lean(self) -> int:
        """−1 where some part's estimate lies on the wrong side of its margin (the claim needs
        every part), +1 where every part lies on the claim's side, else 0."""
        leans = [t.lean for t in self.tests]
        return -1 if -1 in leans else 1 if leans and all(x == 1 for x in leans) else 0


# A trained model's accuracy and its majority-class floor, as each pipeline writes them: a run
# at or below the floor collapsed (Mosbach et al., 2021; Dodge et al., 2020)
ACCURACY_FLOORS = (("eval/accuracy", "eval/majority_accuracy"),
                   ("prune/original/accuracy", "prune/original/majority_accuracy"),
                   ("distill/teacher/accuracy", "distill/teacher/majority_accuracy"))


def collapsed(runs: list[RunDir]) -> set:
    """The seeds some run of which collapsed to the majority class (stats.collapsed_seeds)."""
    seeds = set()
    # a sentence classifier's floor only: a tagger's token accuracy sits near its majority tag
    # (CoNLL's all-O tagger scores 0.82) while it learns, so a tagger is not flagged by it
    classifiers = [r for r in runs if str(r.select("task.kind", default="classification"))
                   == "classification"]
    for accuracy, floor in ACCURACY_FLOORS:
        scored = [r for r in classifiers if accuracy in r.metrics and floor in r.metrics]
        flagged = collapsed_seeds([r.metrics[accuracy] for r in scored],
                                  [r.metrics[floor] for r in scored])
        seeds |= {scored[i].seed for i in flagged}
    return seeds


def set_aside_collapsed(runs: list[RunDir]) -> tuple[list[RunDir], str]:
    """The runs of the seeds that trained, and the note that says how many collapsed. A seed
    that collapsed leaves every arm (its pairs go with it): averaging it in drags the mean, and
    no test of a mean keeps its level against a rare collapse (docs/findings.md). Where fewer
    than 2 seeds trained, all stay: there is nothing to judge on, and a guard says so."""
    gone = collapsed(runs)
    seeds = {r.seed for r in runs}
    if not gone or len(seeds - gone) < 2:
        note = (f"{len(gone)} of {len(seeds)} seeds collapsed (accuracy ≤ majority class); "
                "kept, fewer than 2 trained") if gone else ""
        return runs, note
    note = (f"{len(gone)} of {len(seeds)} seeds collapsed (accuracy ≤ majority class: seed "
            f"{', '.join(map(str, sorted(gone, key=str)))}), set aside; judged on the "
            f"{len(seeds - gone)} that trained")
    return [r for r in runs if r.seed not in gone], note


def judge(spec: FindingSpec, runs: list[RunDir]) -> FindingResult:
    """The raw verdict; the corrected one needs the whole suite (correct_suite)."""
    require(all(isinstance(c.a, Evidence) for c in spec.comparisons + spec.guards),
            f"finding {spec.id}: side a must read the runs (a metric), not a number")
    runs, collapse = set_aside_collapsed(runs)
    runs, repeats = independent_runs(spec, runs)
    compared = [compare_runs(c, runs) for c in spec.comparisons]
    result = FindingResult(spec, runs, [t for t, _, _ in compared], [d for _, d, _ in compared],
                           overlaps=[o for _, _, o in compared])
    result.guard_tests = [compare_runs(g, runs)[0] for g in spec.guards]
    tests = result.tests
    result.p_holds = max(t.p_holds for t in tests)  # intersection-union: every part must hold
    result.p_fails = min(1.0, len(tests) * min(t.p_fails for t in tests))  # Bonferroni: any
    result.raw, result.raw_note = classify(result, ALPHA, repeated=bool(repeats))
    failed = [g.describe() for g, t in zip(spec.guards, result.guard_tests)
              if not t.p_holds < ALPHA / 2]
    if failed:  # the comparison cannot discriminate: no verdict on the claim, either way
        result.raw = "uninformative"
        result.raw_note = f"guard not met: {'; '.join(failed)}"
    repeated = (f"{len(repeats)} run(s) repeat another exactly (same config less the seed, "
                "same evidence) and count once") if repeats else ""
    tautology = f"cannot fail (a tautology): {spec.tautology}" if spec.tautology else ""
    result.context = "; ".join(filter(None, [collapse, repeated, spec.caveat, tautology]))
    result.corrected, result.note = result.raw, with_context(result, result.raw_note)
    result.repeated = bool(repeats)
    return result


def with_context(result: FindingResult, note: str) -> str:
    return "; ".join(filter(None, [note, result.context]))


def evidence_of(spec: FindingSpec) -> list[Evidence]:
    """Every evidence the finding reads, guards included."""
    return [x for c in spec.comparisons + spec.guards for x in c.evidence]


def independent_runs(spec: FindingSpec, runs: list[RunDir]) -> tuple[list[RunDir], list[RunDir]]:
    """(the runs that replicate independently, the repeats left out). A run whose config
    equals another's but for the seed and whose every metric the finding reads, with item
    replicates that vary, is identical to it is the same measurement again (a deterministic
    pipeline the seed does not reach): counting it would be pseudo-replication; the first is
    kept. Identical readings whose replicates do not vary are a floor or ceiling (0 special
    heads on every resample of different sentences), not a repeat: two item sets cannot give
    the same 400 varying resample values by chance, but they can both sit at a floor."""
    kept: list[RunDir] = []
    repeats: list[RunDir] = []
    seen: set[tuple] = set()
    evidence = evidence_of(spec)
    for run in runs:
        keys = sorted({k for e in evidence if selects(run, e)
                       for k in layer_keys(run.metrics, e.metric)[1]})
        readings = [(k, run.metrics[k], run.replicates[k].tobytes()
                     if k in run.replicates else None) for k in keys]
        if not readings or at_a_floor(run, keys):  # an arm it does not read; a floor
            kept.append(run)
            continue
        key = (replication_key(run), repr(readings))
        (repeats if key in seen else kept).append(run)
        seen.add(key)
    return kept, repeats


def at_a_floor(run: RunDir, keys: list[str]) -> bool:
    """Every metric read has item replicates, none of which vary."""
    return all(k in run.replicates and np.ptp(run.replicates[k]) == 0 for k in keys)


# ---------------------------------------------------------------- the verdicts

# Each verdict has one meaning (docs/findings.md, "The verdicts, defined"): holds / does not
# hold resolve the claim; the other three say where an unresolved estimate lies and what would
# resolve it.
LEANING = {1: "underpowered", -1: "leans against"}
SETTLES = {1: "resolve it", -1: "settle it against the claim"}
MATERIAL_SHARED = 0.25  # the items path only where shared items make ≥ this share of the width


def classify(result: FindingResult, alpha: float, repeated: bool = False) -> tuple[str, str]:
    """The verdict at level alpha (two-sided; each direction one-sided at alpha / 2), and
    what an unresolved one would need. repeated: some of the runs repeated another exactly
    and were counted once."""
    defined = not any(math.isnan(t.estimate.mean) for t in result.tests)
    if defined and all(t.estimate.n >= 2 for t in result.tests):
        if result.p_holds < alpha / 2:
            return "holds", ""
        if result.p_fails < alpha / 2:
            return "does not hold", ""
    return unresolved(result, alpha, repeated)


def unresolved(result: FindingResult, alpha: float, repeated: bool = False) -> tuple[str, str]:
    """An estimate that did not resolve at alpha: underpowered on the claim's side of the
    margin, leans against on the wrong side, each with the budget that would settle it at
    alpha; inconclusive on the margin or where no feasible budget settles it."""
    if any(math.isnan(t.estimate.mean) for t in result.tests):
        return "inconclusive", "the evidence is undefined on these runs (see the figure)"
    lean = result.lean
    if lean == 0:
        return "inconclusive", "the estimate sits on the margin"
    label = LEANING[lean]
    if any(t.estimate.n < 2 for t in result.tests):  # one seed never resolves
        if repeated:  # the seeds do not reach the measurement: more of them repeat it again
            return label, ("the seeds do not reach this measurement (their runs repeat it "
                           "exactly), so more seeds cannot resolve it: replicate what varies "
                           "it (another checkpoint, e.g. a pretraining seed)")
        return label, ("one seed measures no seed-to-seed variance (item replicates do not "
                       "stand in for it): run more seeds")
    if not all(t.measured for t in result.tests):
        return label, ("no uncertainty measured (identical seeds and no item replicates): "
                       "more seeds, or runs that write replicates")
    # claim's side: every part must resolve, the furthest decides; wrong side: any part
    # that leans against settles it (at its Bonferroni share of alpha, as p_fails)
    if lean > 0:
        parts, level = result.tests, alpha
    else:
        parts = [t for t in result.tests if t.lean < 0]
        level = alpha / len(result.tests)
    budgets = [(t.seeds_needed(level), t) for t in parts]
    seeds, test = (max if lean > 0 else min)(budgets, key=lambda b: b[0])
    if seeds <= FEASIBLE * test.estimate.n:
        return label, f"≈ {seeds:.0f} seeds would {SETTLES[lean]} (80% power)"
    items = test.items_needed(level)
    if test.shared_share(level) >= MATERIAL_SHARED and 1.0 < items <= FEASIBLE:
        return label, ("more items, not seeds: the noise of the items every seed shares does "
                       f"not shrink with seeds; ≥ {math.ceil(items)}× the items would "
                       f"{SETTLES[lean]} (80% power)")
    side = "claim's side" if lean > 0 else "wrong side"
    return "inconclusive", (f"the estimate lies on the {side} of the margin, too close to it "
                            "for a feasible budget")


# ---------------------------------------------------------------- the suite

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
        if result.fragile and verdict in ("holds", "does not hold"):
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
    budget = f"; ≈ {seeds:.0f} seeds would settle it" if math.isfinite(seeds) else ""
    return (f"fragile: Holm-adjusted p = {result.p_adjusted:.3g}, within {FRAGILE:g}× of "
            f"α = {ALPHA:g}{budget}")
