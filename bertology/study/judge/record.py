"""A finding's verdict record, frozen: what verdicts.judge() found for one finding, built once.

Each comparison of the claim is one `Compared` part (its test, how a − b was formed, and what is
reported beside the interval); the verdict at each level is a `Verdict` (its label and note):
`raw`, the finding judged alone, and `corrected`, after Holm's step-down over the report. Nothing
changes a record in place: a presupposition that does not hold (verdicts.apply_presuppositions)
and Holm (suite.correct_suite) return replaced records. What the parts determine (the tests, the
claim's p in each direction, the replicates) is read from them, not stored beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from bertology.run.rundir import RunDir
from bertology.study.judge.collapses import ArmCollapses
from bertology.study.judge.population import MembersCheck, MemberSpread
from bertology.study.judge.sign_test import SignTest
from bertology.study.judge.specs import FindingSpec
from bertology.study.judge.stats import TTest


@dataclass(frozen=True)
class Verdict:
    """A verdict (one of verdicts.VERDICTS) and its note: what an unresolved one would need, or
    what a resolved one means (firm or fragile). The finding's context is not in it: it is the
    record's, the same at every level (FindingResult.note joins the two)."""

    label: str
    note: str = ""


@dataclass(frozen=True)
class Compared:
    """One comparison judged: its test, how a − b was formed, the share of items seeds share
    that entered its interval (stats.compute_overlap; None: runs without item ids, counted as
    0), and across a population Sellam et al.'s multi-bootstrap (low, high, p), what the
    members' spread is made of (members with 2+ seeds) and the sign test and skewness of the
    members (5 or more); the items headroom: how many times its items the runs' eval sets hold
    (None: unrecorded)."""

    test: TTest | SignTest
    design: str
    overlap: float | None = None
    multibootstrap: tuple[float, float, float] | None = None
    spread: MemberSpread | None = None
    check: MembersCheck | None = None
    headroom: float | None = None


@dataclass(frozen=True)
class FindingResult:
    """One finding judged. `parts`: its claim's comparisons judged, in the spec's order;
    `guard_tests`: its guards'; `members`: a population's checkpoints, each one replicate (empty:
    judged seed by seed); `left_out`: for a resolved raw verdict on verdicts.FIRM_LEAST
    replicates or more, each one left out in turn, (its name, p_holds, p_fails) judged on the
    others (suite.py: firm means no replicate left out loses the verdict); `repeated`: some runs
    repeated another exactly and count once; `context`: what is said of the finding at every
    level (seeds set aside, repeats merged, its caveat); `collapses`: each arm's fine-tuning
    collapse rate, an endpoint of its own. Holm sets `corrected`, `p_adjusted`
    (two-sided scale: 2 × the smaller Holm-adjusted one-sided p), `fragile` and, for a resolved
    verdict, `p_replication` (its predictive P(replication)); before it, corrected is raw."""

    spec: FindingSpec
    runs: tuple[RunDir, ...]
    parts: tuple[Compared, ...]
    guard_tests: tuple[TTest | SignTest, ...] = ()
    members: tuple[str, ...] = ()
    left_out: tuple[tuple[str, float, float], ...] = ()
    repeated: bool = False
    context: str = ""
    collapses: tuple[ArmCollapses, ...] = ()
    raw: Verdict = Verdict("inconclusive")
    corrected: Verdict = Verdict("inconclusive")
    p_adjusted: float = 1.0
    fragile: bool = False
    p_replication: float = math.nan

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def tests(self) -> tuple[TTest | SignTest, ...]:
        return tuple(part.test for part in self.parts)

    @cached_property
    def p_holds(self) -> float:
        return combine_parts(self.tests)[0]

    @cached_property
    def p_fails(self) -> float:
        return combine_parts(self.tests)[1]

    @property
    def p_two_sided(self) -> float:
        return min(1.0, 2.0 * min(self.p_holds, self.p_fails))

    @property
    def replicates(self) -> int:
        """The replicates the claim rests on (seeds, or a population's checkpoints): the fewest
        of any part."""
        return min(t.estimate.n for t in self.tests)

    @property
    def lean(self) -> int:
        """−1 where some part's estimate lies on the wrong side of its margin (the claim needs
        every part), +1 where every part lies on the claim's side, else 0."""
        leans = [t.lean for t in self.tests]
        return -1 if -1 in leans else 1 if leans and all(x == 1 for x in leans) else 0

    @property
    def note(self) -> str:
        """The corrected verdict's note with the finding's context: what the tables show."""
        return "; ".join(filter(None, [self.corrected.note, self.context]))

    def part_of(self, test: TTest | SignTest) -> Compared:
        """The part whose test this is."""
        return next(part for part in self.parts if part.test is test)


def combine_parts(tests: tuple | list) -> tuple[float, float]:
    """(p_holds, p_fails) of a claim over its parts: intersection-union (every part must hold:
    the largest p) for the claim, Bonferroni (any part failing refutes it) for its opposite."""
    return (max(t.p_holds for t in tests),
            min(1.0, len(tests) * min(t.p_fails for t in tests)))
