"""A finding's verdict from its runs: holds, does not hold, underpowered, leans against,
inconclusive or uninformative, before Holm's correction over every finding of the report
(suite.py corrects them and tells a firm resolved verdict from a fragile one).

A finding states its claim as one comparison, or several that must all hold (specs.py),
each formed seed by seed (contrasts.py) or, over a checkpoint population, member by member
(population.py). The verdict is computed, never written: a one-sided test of the claim
against its margin (stats.py), an intersection-union test over the parts of a compound claim,
and Holm's step-down in each direction over the report, so that the chance of any false
"holds" or "does not hold" in the suite stays at α. A finding says what it is `about`
(`model` or `method`); runs identical but for their seed count as one replication. Every
seed counts, a collapsed fine-tuning too, and each arm's collapse rate is reported beside the
verdict as an endpoint of its own (collapses.py). judge() returns the finding's record
(record.py), frozen; apply_presuppositions and Holm (suite.py) return replaced records.

Each verdict, defined: docs/findings.md, "The verdicts, defined".
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from bertology.errors import UserError, require
from bertology.run.rundir import RunDir
from bertology.study.judge.checkpoints import checkpoint_of
from bertology.study.judge.collapses import collapse_note, count_collapses, trained_groups
from bertology.study.judge.contrasts import contrast_runs, contrast_test, selects
from bertology.study.judge.evidence import Evidence, layer_keys
from bertology.study.judge.population import (
    MemberSpread,
    population_members,
    population_test,
    set_aside_failed,
)
from bertology.study.judge.record import (
    Compared,
    FindingResult,
    Verdict,
    combine_parts,
)
from bertology.study.judge.results import replication_key
from bertology.study.judge.sign_test import SignTest
from bertology.study.judge.specs import Comparison, FindingSpec, evidence_of
from bertology.study.judge.stats import (
    ALPHA,
    FEASIBLE,
    MAX_SEEDS,
    SEED_VARIANCE_LEVEL,
    TTest,
)

VERDICTS = ("holds", "does not hold", "underpowered", "leans against", "inconclusive",
            "uninformative")
RESOLVED = ("holds", "does not hold")
FIRM_LEAST = 4  # replicates a firm verdict needs: with 3, one left out leaves 2 (suite.py)




def judge(spec: FindingSpec, runs: list[RunDir]) -> FindingResult:
    """The raw verdict; the corrected one needs the whole suite (correct_suite). Runs that read
    two or more pretrained checkpoints are judged across them, each checkpoint one replicate
    (population.py); otherwise seed by seed. Everything is found first, then the record is
    built once (record.py)."""
    require(all(isinstance(c.a, Evidence) for c in spec.comparisons + spec.guards),
            f"finding {spec.id}: side a must read the runs (a metric), not a number")
    members, failed = set_aside_failed(population_members(runs, evidence_of(spec)))
    groups, repeats = {}, []
    for name, group in (members or {"": runs}).items():  # seeds are judged within a member
        groups[name], repeat = independent_runs(spec, group)
        repeats += repeat
    # every seed counts, collapsed or not (intention to treat); the collapse rate is reported
    # on its own, and the claim on the seeds that trained in every arm as a secondary line
    collapses, trained = count_collapses(spec, groups), trained_groups(spec, groups)
    secondary = per_protocol(spec, trained)
    notes = [failed, collapse_note(collapses, secondary, trained)]
    parts = tuple(compare(c, groups) for c in spec.comparisons)
    guard_tests = tuple(compare(g, groups).test for g in spec.guards)
    kept = tuple(r for g in groups.values() for r in g)
    repeated = (f"{len(repeats)} run(s) repeat another exactly (same config less the seed, "
                "same evidence) and count once") if repeats else ""
    tautology = f"cannot fail (a tautology): {spec.tautology}" if spec.tautology else ""
    caveat = spec.caveat if caveat_applies(spec, kept) else ""
    context = "; ".join(filter(None, [*notes, repeated, caveat, tautology, skew_note(parts)]))
    evidence = FindingResult(spec, kept, parts, guard_tests, tuple(members),
                             repeated=bool(repeats), context=context,
                             collapses=tuple(collapses))
    label, note = classify(evidence, ALPHA, repeated=bool(repeats))
    resolved = label in RESOLVED and evidence.replicates >= FIRM_LEAST
    left_out = tuple(leave_one_out(spec, groups)) if resolved else ()
    unmet = [describe_unmet(g, t) for g, t in zip(spec.guards, guard_tests)
             if not t.p_holds < ALPHA / 2]
    if unmet:  # the comparison cannot discriminate: no verdict on the claim, either way
        raw = Verdict("uninformative", f"guard not met: {'; '.join(unmet)}")
    else:
        raw = Verdict(label, "; ".join(filter(None, [part_note(evidence, label), note])))
    return replace(evidence, left_out=left_out, raw=raw, corrected=raw)


def per_protocol(spec: FindingSpec, trained: dict[str, list[RunDir]]) -> list:
    """The claim's parts on the seeds that trained in every arm: none where no seed was set
    aside, or where those left miss some part's runs (every seed of an arm collapsed)."""
    try:
        return [compare(c, trained).test for c in spec.comparisons] if trained else []
    except UserError:
        return []


def apply_presuppositions(results: list[FindingResult]) -> list[FindingResult]:
    """A finding whose claim presupposes another (its yaml's `presupposes:`) is uninformative
    where that one, judged on the same checkpoints, does not hold: where the members never
    learned the POS information pretraining_beats_random asks for, a claim about which layer
    holds it describes what they have not learned yet, and "does not hold" would read as
    "false". The presupposed finding's estimate goes in the note. Runs before Holm, which
    leaves uninformative findings out of its families. Returns the results in their order,
    those made uninformative replaced; a presupposed finding is read as it stands after the
    ones before it in the list."""
    by_id = {r.id: r for r in results}
    for result in results:
        unmet = [by_id[p] for p in result.spec.presupposes
                 if p in by_id and by_id[p].members == result.members
                 and by_id[p].raw.label != "holds"]
        if not unmet or result.raw.label == "uninformative":
            continue
        raw = Verdict("uninformative", "the runs did not learn what the claim presupposes: "
                      + "; ".join(f"{r.id} {r.raw.label} ({describe_test(r.tests[0])})"
                                  for r in unmet))
        by_id[result.id] = replace(result, raw=raw, corrected=raw)
    return [by_id[r.id] for r in results]


def describe_test(test: TTest | SignTest) -> str:
    """An estimate against its margin in a few words: "+0.009 [−0.004, 0.022], margin 0.02"."""
    low, high = test.estimate.interval()
    return (f"{test.estimate.mean:+.3g} [{low:.3g}, {high:.3g}] against its margin "
            f"{test.margin:g}")


def describe_unmet(guard: Comparison, test: TTest | SignTest) -> str:
    """An unmet guard with its estimate and p. Where every replicate sits at one value (a model
    at verb accuracy 1.000 on every seed) the p is the sign test's 0.5^n (TTest.p_holds), so
    the note says how many replicates would meet it: two perfect seeds cannot (p = 0.25)."""
    text = f"{guard.describe()} ({describe_test(test)}, p = {test.p_holds:.2g}"
    if isinstance(test, TTest) and test.estimate.exact and test.gap > 0:
        needed = math.ceil(math.log2(2 / ALPHA))  # 0.5^n < α/2
        text += (f"; every one of its {test.estimate.n} replicates at one value, which counts "
                 f"as a sign test over them: {needed} or more would meet it")
    return text + ")"


def part_note(result: FindingResult, verdict: str) -> str:
    """Where a compound claim is not found to hold but its first part is (at α/2 on its own):
    the note says so, so "does not hold" is not read as "false on the model" ("holds on the
    model, not beyond its twin" where a later part is a twin contrast)."""
    if verdict == "holds" or len(result.tests) < 2 or not result.tests[0].p_holds < ALPHA / 2:
        return ""
    p = result.tests[0].p_holds
    if any(c.twin is not None for c in result.spec.comparisons[1:]):
        return f"its first part holds on the model (p = {p:.2g}), not beyond its twin"
    return f"its first part holds (p = {p:.2g}), not the claim as a whole"


def skew_note(parts: tuple[Compared, ...]) -> str:
    """Where a part's members are skewed (population.MembersCheck), say so with its sign test."""
    skewed = [p.check for p in parts if p.check is not None and p.check.skewed]
    return "; ".join(f"the members are skewed (g1 = {c.skewness:+.2f}; sign test over them "
                     f"p = {c.sign_p:.2g}): a mean over a few strong or weak members, read "
                     "the figure" for c in skewed)


def leave_one_out(spec: FindingSpec, groups: dict[str, list[RunDir]]
                  ) -> list[tuple[str, float, float]]:
    """Each replicate left out in turn, the claim judged on the others: a population's
    checkpoints (its groups), else the seeds of the one group; (name, p_holds, p_fails)."""
    if len(groups) > 1:
        cuts = {name: {k: g for k, g in groups.items() if k != name} for name in groups}
    else:
        (group,) = groups.values()
        seeds = sorted({r.seed for r in group}, key=str)
        if None in seeds:  # runs without a seed: no replicate to leave out
            return []
        cuts = {f"seed {seed}": {"": [r for r in group if r.seed != seed]} for seed in seeds}
    return [(name, *combine_parts([compare(c, cut).test for c in spec.comparisons]))
            for name, cut in cuts.items()]


def caveat_applies(spec: FindingSpec, runs: list[RunDir]) -> bool:
    """A caveat about one checkpoint (MiniLM's contrastive tuning) is shown where a run reads
    it, not on a population of BERTs pretrained here."""
    return not spec.caveat_checkpoint or any(
        checkpoint_of(r) == spec.caveat_checkpoint for r in runs)


def compare(comparison: Comparison, groups: dict[str, list[RunDir]]) -> Compared:
    """One comparison over one group's seeds, or across the members of a population."""
    contrasts = [contrast_runs(comparison, group) for group in groups.values()]
    rooms = [c.headroom for c in contrasts]
    headroom = None if None in rooms else min(rooms)
    if len(groups) == 1:
        test, overlap = contrast_test(contrasts[0], comparison)
        return Compared(test, contrasts[0].design, overlap, None, None, None, headroom)
    seeds = [{str(run.seed) for run in group} for group in groups.values()]
    private = sum(map(len, seeds)) == len(set().union(*seeds))  # no seed run on two members
    return Compared(*population_test(contrasts, comparison, private), headroom)


def headroom_for(result: FindingResult, test: TTest | SignTest) -> float | None:
    """How many times its items the eval sets of a test's runs hold (an items budget beyond
    it is no budget: 2× the dev set where the run scored all of it); None where unrecorded."""
    return result.part_of(test).headroom


def replicates_of(result: FindingResult) -> str:
    """What a budget counts: pretrained checkpoints across a population, else seeds."""
    return "checkpoints" if result.members else "seeds"


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
# Across a population: the seeds-a-member path only where the noise within members makes ≥
# this share of their spread, priced at MORE_SEEDS times the seeds a member ran
MATERIAL_WITHIN = 0.25
MORE_SEEDS = 4


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
    alpha; inconclusive where no feasible budget settles it (on the margin, none does);
    uninformative where the evidence is undefined on the runs (no quantity to budget for)."""
    if any(math.isnan(t.estimate.mean) for t in result.tests):
        # the runs cannot give the quantity at all: no budget to name, so not "inconclusive",
        # which keeps one meaning (a feasible budget does not resolve the estimate)
        return "uninformative", "the evidence is undefined on these runs (see the figure)"
    lean = result.lean
    if lean == 0:
        return "inconclusive", "the estimate sits on the margin: no budget resolves it"
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
    seeds, test, level = deciding_budget(result, alpha)
    within = seeds_a_member(result, alpha)
    if seeds <= FEASIBLE * test.estimate.n:
        return label, "; ".join(filter(None, [
            f"≈ {seeds:.0f} {replicates_of(result)} would {SETTLES[lean]} (80% power; "
            f"{budget_range(result, alpha)})", within]))
    items = test.items_needed(level)
    material = test.shared_share(level) >= MATERIAL_SHARED and 1.0 < items <= FEASIBLE
    room = headroom_for(result, test)
    if material and (room is None or items <= room):
        return label, ("more items, not seeds: the noise of the items every seed shares does "
                       f"not shrink with seeds; ≥ {math.ceil(items)}× the items would "
                       f"{SETTLES[lean]} (80% power)")
    if material:  # the items that would resolve it do not exist
        return "inconclusive", (f"≥ {math.ceil(items)}× the items would {SETTLES[lean]}, but "
                                f"the eval set holds {room:.3g}× the items scored")
    side = "claim's side" if lean > 0 else "wrong side"
    return "inconclusive", "; ".join(filter(None, [
        f"the estimate lies on the {side} of the margin, too close to it for a feasible "
        "budget", within]))


def budget_range(result: FindingResult, alpha: float) -> str:
    """The deciding budget with every seed part's variance at the low and the high end of its
    true value's SEED_VARIANCE_LEVEL interval (a variance from 3 seeds is uncertain by a
    factor of 60): the budget as the interval it is, not one number."""
    ends = []
    for end in (0, 1):
        scaled = tuple(replace(p, test=p.test.with_seed_variance(end))
                       if isinstance(p.test, TTest) else p for p in result.parts)
        ends.append(deciding_budget(replace(result, parts=scaled), alpha)[0])
    low, high = (f"{x:.0f}" if math.isfinite(x) else f"over {MAX_SEEDS:,}" for x in ends)
    return f"{low}–{high} across the seed variance's {SEED_VARIANCE_LEVEL:.0%} interval"


def seeds_a_member(result: FindingResult, alpha: float) -> str:
    """Across a population whose members ran 2+ seeds each, where their own noise is a
    material share of the members' spread in a part that decides: the checkpoints that would
    settle it at MORE_SEEDS times the most seeds a member ran, every part priced (the claim's
    side: all parts must resolve, the furthest decides; the wrong side: the nearest part
    leaning against, at its Bonferroni share); "" else."""
    lean = result.lean
    parts, level = deciding_parts(result, alpha)
    spreads = [spread_of(result, t) for t in parts]
    if not all(isinstance(t, TTest) for t in parts) or None in spreads \
            or max(s.within for s in spreads) < MATERIAL_WITHIN:
        return ""
    seeds = MORE_SEEDS * max(s.seeds[1] for s in spreads)
    # from 2: the checkpoints run may already do at more seeds each
    each = [at_member_seeds(t, s, seeds).seeds_needed(level, least=2)
            for t, s in zip(parts, spreads)]
    members = max(each) if lean > 0 else min(each)
    run, settles = len(result.members), SETTLES[lean]
    budget = (f"no number of checkpoints up to {MAX_SEEDS:,} would {settles}"
              if not math.isfinite(members) else f"these {run} checkpoints would {settles}"
              if members <= run else f"≈ {members:.0f} checkpoints would {settles}")
    low, high = min(s.seeds[0] for s in spreads), max(s.seeds[1] for s in spreads)
    ran = f"{low}" if low == high else f"{low}–{high}"
    return (f"up to {max(s.within for s in spreads):.0%} of the checkpoints' spread is probe "
            f"and fine-tuning noise within them ({ran} seeds each): at {seeds} seeds a "
            f"checkpoint (--member-seeds {seeds}), {budget}")


def at_member_seeds(test: TTest, spread: MemberSpread, seeds: int) -> TTest:
    """The test with its members' part at `seeds` seeds a member (the shared items' part
    stays)."""
    return test.with_seed_parts_scaled(lambda _: spread.members_variance(1.0, seeds))


def spread_of(result: FindingResult, test: TTest | SignTest) -> MemberSpread | None:
    return result.part_of(test).spread


def deciding_budget(result: FindingResult, alpha: float) -> tuple[float, TTest | SignTest, float]:
    """(seeds needed, the part that needs them, its level) for an unresolved estimate: on the
    claim's side every part must resolve, the furthest decides; on the wrong side any part that
    leans against settles it (at its Bonferroni share of alpha, as p_fails)."""
    parts, level = deciding_parts(result, alpha)
    seeds, test = (max if result.lean > 0 else min)(
        ((t.seeds_needed(level), t) for t in parts), key=lambda b: b[0])
    return seeds, test, level


def deciding_parts(result: FindingResult, alpha: float) -> tuple[list, float]:
    """(the parts a budget must settle, their level): every part on the claim's side; on the
    wrong side, those that lean against, each at its Bonferroni share of alpha (as p_fails)."""
    if result.lean > 0:
        return result.tests, alpha
    return [t for t in result.tests if t.lean < 0], alpha / len(result.tests)
