"""A finding judged across a checkpoint population: independently pretrained encoders (the
MultiBERTs seeds, or `python -m bertology.reproduce --population K`), each probed or fine-tuned
with its own seeds.

For a claim about what pretraining puts in a model, the unit of replication is the pretrained
checkpoint, not the probe seed: seeds of one checkpoint share its pretraining, and
independently pretrained BERTs disagree on probing and fine-tuning results (Sellam et al.,
2021, MultiBERTs). So where a finding's runs read two or more checkpoints, each checkpoint (a
member) is first reduced to one value, the mean of its seeds' contrasts, with the mean of their
item replicates, and the members are the replicates:

    θ̂ = (1/K) Σ_m d̄_m,   Var(θ̂) = s²_members / K  (on K − 1 degrees of freedom)  +  V_sh

where s²_members holds pretraining, probe-seed and private item noise alike (each member's mean
carries them all), and V_sh the noise of items every member scores (stats.combine_seeds, the
same two-level arithmetic as seeds of one checkpoint, one level up). This is the interval the
verdict reads. Its level with 5 members is tested in tests/study/test_population.py.

Sellam et al.'s multi-bootstrap, which resamples members and items jointly, is computed beside
it and reported (findings.csv's multibootstrap_* columns), not used for the verdict: with few
members a percentile bootstrap of a mean is too narrow by √((K − 1)/K) and reads a normal
where the spread is estimated from K values, so at K = 5 it holds a true-null claim about three
times as often as its nominal 2.5% (measured in the same test).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from scipy import stats

from bertology.errors import UserError
from bertology.run.rundir import RunDir
from bertology.study.judge.checkpoints import checkpoint_of
from bertology.study.judge.contrasts import Contrast, selects
from bertology.study.judge.evidence import Evidence
from bertology.study.judge.sign_test import SignTest
from bertology.study.judge.specs import Comparison
from bertology.study.judge.stats import TTest, combine_seeds, compute_terms_overlap

DRAWS = 20_000  # multi-bootstrap draws: p resolves to 5e-5, below Holm's 0.025/30 = 8.3e-4
DESIGN = "across {k} checkpoints: member means on K − 1 degrees of freedom + shared items"


def population_members(runs: list[RunDir], evidence: list[Evidence]
                       ) -> dict[str, list[RunDir]]:
    """The runs by the pretrained checkpoint they read, where they read two or more, every run
    reads one (a random-init run belongs to no member) and every checkpoint has a run of each
    arm the finding reads (its evidence's `where`); else {}: one checkpoint, pretraining runs
    whose seeds are the encoders, or arms that read different checkpoints (a study's model
    arm and a stand-in for its twin), which are one study, not a population."""
    names = [checkpoint_of(run) for run in runs]
    if None in names or len(set(names)) < 2:
        return {}
    members: dict[str, list[RunDir]] = {}
    for name, run in zip(names, runs):
        members.setdefault(name, []).append(run)
    complete = all(any(selects(run, e) for run in group)
                   for group in members.values() for e in evidence)
    return dict(sorted(members.items())) if complete else {}


@cache  # every finding of a report asks again about the same few checkpoints
def pretraining_failed(checkpoint: str) -> bool:
    """Whether a checkpoint `bertology pretrain` wrote did not learn: its run's final held-out
    MLM accuracy at or below the floor the run recorded beside it (<run>/metrics.json for
    <run>/model: eval/mlm_majority_accuracy, the accuracy of always predicting the most
    frequent masked token). The pretraining analogue of a fine-tuning seed that collapsed to
    the majority class (Mosbach et al., 2021), at the floor itself: a fine-tuning's band
    (stats.COLLAPSE_BAND) would span most of what members learn above an MLM floor. Unlike a
    collapsed seed, which counts in its verdict, a failed member is set aside, and the scope
    names it: it is not a draw of the procedure's models. False where there is
    no such record (a hub checkpoint, or a run from before the floor was recorded)."""
    try:
        metrics = RunDir(Path(checkpoint).parent).metrics
    except UserError:  # no such file, or not one a run wrote whole
        return False
    return below_floor(metrics)


def below_floor(metrics: dict) -> bool:
    """A pretraining run's metrics.json: final held-out MLM accuracy at or below its recorded
    floor (False where either is missing)."""
    accuracy = metrics.get("eval/mlm_accuracy")
    floor = metrics.get("eval/mlm_majority_accuracy")
    return accuracy is not None and floor is not None and accuracy <= floor


def set_aside_failed(members: dict[str, list[RunDir]]
                     ) -> tuple[dict[str, list[RunDir]], str]:
    """The members whose pretraining learned, and the note that says how many did not. A
    failed member is a failed run of the procedure, not a draw of what the procedure puts in a
    model; averaged in, it drags the mean as a collapsed seed does (docs/findings.md). Where
    fewer than 2 learned, all stay, and the note says so."""
    failed = [name for name in members if pretraining_failed(name)]
    if not failed:
        return members, ""
    what = (f"{len(failed)} of {len(members)} checkpoints did not pretrain (held-out MLM "
            "accuracy ≤ its most frequent masked token's share")
    if len(members) - len(failed) < 2:
        return members, f"{what}); kept, fewer than 2 learned"
    kept = {name: runs for name, runs in members.items() if name not in failed}
    return kept, (f"{what}: {', '.join(map(run_name, failed))}), set aside; judged across the "
                  f"{len(kept)} that learned")


def run_name(checkpoint: str) -> str:
    """A checkpoint as a note names it: a pretraining run's dir for its model/, else as given."""
    path = Path(checkpoint)
    return path.parent.name if path.name == "model" and path.parent.name else checkpoint


@dataclass(frozen=True)
class MemberValue:
    """One member's contrast: the mean over its seeds, the mean of their item replicates
    (None where some seed has none, or their lengths differ) and, per term of the contrast,
    the item ids of its seeds in turn (None where some are unknown)."""

    value: float
    replicates: np.ndarray | None
    terms: list[list[str] | None]


def stacked(replicates: list[np.ndarray | None]) -> np.ndarray | None:
    """(runs, R) where every run has replicates of one length; else None."""
    if any(r is None for r in replicates) or len({len(r) for r in replicates}) != 1:
        return None
    return np.stack(replicates)


def mean_replicates(replicates: list[np.ndarray | None]) -> np.ndarray | None:
    table = stacked(replicates)
    return None if table is None else table.mean(axis=0)  # (R,): replicate r of every seed


def concat_items(lists: list[list[str] | None]) -> list[str] | None:
    """A member's items: its seeds' lists one after another (the positions its averaged
    replicates resample, seed by seed)."""
    if any(ids is None for ids in lists):
        return None
    return [item for ids in lists for item in ids]


def member_value(contrast: Contrast) -> MemberValue:
    """A member's contrast reduced over its seeds (paired: the mean of a − b; unpaired: the
    mean of a minus the mean of b)."""
    if contrast.sides is not None:
        a, b = contrast.sides
        ra, rb = (mean_replicates(side.replicates) for side in (a, b))
        reps = None if ra is None or rb is None or len(ra) != len(rb) else ra - rb
        return MemberValue(float(np.mean(a.values) - np.mean(b.values)), reps,
                           [concat_items(a.items), concat_items(b.items)])
    return MemberValue(float(np.mean(contrast.values)), mean_replicates(contrast.replicates),
                       [concat_items(term) for term in contrast.terms])


@dataclass(frozen=True)
class MemberSpread:
    """What the spread of the members' values is made of, where each member ran two or more
    seeds of its own: `within`, the share of its variance s² that the seeds' spread inside a
    member accounts for (W / s², W the mean over members of Σ_sides s²_seeds / n: the probe and
    fine-tuning noise a member's mean still carries, which more seeds a member average out;
    capped at 1); the rest is the spread of pretraining itself, which only more members
    average out. `per_seed`: that noise at one seed a side, Σ_sides s²_seeds averaged over the
    members, over s² (scaled down with `within` where the cap binds), so members that ran
    different numbers of seeds are priced by their own. `seeds`: the fewest and the most a
    member ran (on one side)."""

    seeds: tuple[int, int]
    within: float
    per_seed: float

    def members_variance(self, variance: float, seeds: int) -> float:
        """The variance `variance` (of the mean over members, as run) would have at `seeds`
        seeds a member on every side: the within part becomes its one-seed noise / seeds, the
        rest stays."""
        return variance * (1.0 - self.within + self.per_seed / seeds)


def sides_of(contrast: Contrast) -> list[list[float]]:
    """A member's per-seed values: one list (paired), or each side's (unpaired)."""
    return [side.values for side in contrast.sides] if contrast.sides else [contrast.values]


def seed_noise(contrast: Contrast, seeds: int | None = None) -> float | None:
    """The variance of a member's value that its own seeds' spread accounts for: Σ_sides
    s²_seeds / n (n: its seeds on that side, or `seeds` for every side); None with fewer than
    2 seeds on a side."""
    sides = sides_of(contrast)
    if any(len(values) < 2 for values in sides):
        return None
    return float(sum(np.var(values, ddof=1) / (seeds or len(values)) for values in sides))


def member_spread(contrasts: list[Contrast], values: list[float], private: bool = True
                  ) -> MemberSpread | None:
    """The within-member share of the members' spread (E s² = σ²_pretraining + E W); None
    where some member ran one seed, the members agree exactly, or the members' seeds are not
    their own (`private`: with seeds 0..n on every checkpoint, noise shared by seed index, the
    same sentence draws, sits in W but not in s², and would inflate the share)."""
    noise = [seed_noise(c) for c in contrasts]
    spread = float(np.var(values, ddof=1)) if len(values) > 1 else 0.0
    if not private or None in noise or not spread > 0.0:
        return None
    within = float(np.mean(noise)) / spread
    capped = min(1.0, within)
    one_seed = float(np.mean([seed_noise(c, seeds=1) for c in contrasts])) / spread
    counts = [len(values) for c in contrasts for values in sides_of(c)]
    # seeds that agree exactly inside every member (a count at a floor): no noise to price
    return MemberSpread((min(counts), max(counts)), capped,
                        one_seed * capped / within if within > 0.0 else 0.0)


# |sample skewness| of the members' values beyond which a mean over them is in doubt: with a
# fifth of the members weak, a t-test across 5 of them holds a claim false of the mean up to 0.34
# of the time (tests/study/test_population.py), at 18 still 0.04-0.08 against its 0.025
SKEWED = 1.0
CHECK_LEAST = 5  # members from which the sign test and skewness are reported


@dataclass(frozen=True)
class MembersCheck:
    """Beside a population verdict: the exact sign test of the claim over the members (how
    many fall on its side of the margin, against a fair coin) and the skewness of their values
    (adjusted Fisher-Pearson g1). A mean over skewed members can hold where most members do not
    show the effect, or the reverse; the flag says to read the figure before the verdict."""

    sign_p: float  # one-sided p of the claim over members (sign_test.SignTest)
    skewness: float

    @property
    def skewed(self) -> bool:
        return abs(self.skewness) > SKEWED


def members_check(values: list[float], comparison: Comparison) -> MembersCheck | None:
    """The sign test and skewness of the members' values (None under CHECK_LEAST members)."""
    if len(values) < CHECK_LEAST:
        return None
    sign = SignTest(combine_seeds(values, [None] * len(values)), tuple(values),
                    comparison.margin, comparison.expect)
    spread = float(np.std(values))
    skewness = float(stats.skew(values, bias=False)) if spread > 0 else 0.0
    return MembersCheck(sign.p_holds, skewness)


def population_test(contrasts: list[Contrast], comparison: Comparison, private: bool = True
                    ) -> tuple[TTest | SignTest, str, float | None,
                               tuple[float, float, float] | None, MemberSpread | None,
                               MembersCheck | None]:
    """The test of one comparison across the members (contrasts: one per member, in member
    order): the two-level interval above, or an exact sign test over members for a discrete
    reduction; the design; the item overlap between members counted; the multi-bootstrap
    (low, high, p) reported beside it (None for a discrete reduction); and what the members'
    spread is made of (member_spread; private: no seed is run on two members)."""
    members = [member_value(c) for c in contrasts]
    values = [m.value for m in members]
    spread = member_spread(contrasts, values, private)
    if any(c.discrete for c in contrasts):
        estimate = combine_seeds(values, [None] * len(values))
        return (SignTest(estimate, tuple(values), comparison.margin, comparison.expect),
                f"across {len(members)} checkpoints, exact sign test over members", None, None,
                spread, None)
    replicates = [m.replicates for m in members]
    terms = [[m.terms[t] for m in members] for t in range(min(len(m.terms) for m in members))]
    overlap = compute_terms_overlap(terms)
    estimate = combine_seeds(values, replicates, overlap=overlap or 0.0)
    boot = compute_multibootstrap(np.array(values), stacked(replicates), comparison.margin,
                                  comparison.expect)
    return (TTest(estimate, comparison.margin, comparison.expect),
            DESIGN.format(k=len(members)), overlap, boot, spread,
            members_check(values, comparison))


def compute_multibootstrap(values: np.ndarray, replicates: np.ndarray | None, margin: float,
                           expect: str, draws: int = DRAWS, seed: int = 0
                           ) -> tuple[float, float, float]:
    """Sellam et al. (2021)'s multi-bootstrap of a mean over members: each draw resamples the
    members with replacement and the items once for all of them (replicate r of every member
    resamples the same positions, bootstrap_indices), so items shared by members stay paired.
    values (K,) the members' contrasts, replicates (K, R) or None (members only). Returns the
    95% percentile interval and the one-sided p of the claim: the share of draws at or on the
    wrong side of the margin (at least 1 / (draws + 1))."""
    rng = np.random.default_rng(seed)
    k = len(values)
    picks = rng.integers(0, k, size=(draws, k))  # (draws, K): members drawn
    if replicates is None:
        statistic = np.asarray(values)[picks].mean(axis=1)
    else:
        column = rng.integers(0, replicates.shape[1], size=draws)  # (draws,): items drawn
        statistic = replicates[picks, column[:, None]].mean(axis=1)
    low, high = np.quantile(statistic, [0.025, 0.975])
    wrong = statistic <= margin if expect == "greater" else statistic >= margin
    return float(low), float(high), float((wrong.sum() + 1) / (draws + 1))

