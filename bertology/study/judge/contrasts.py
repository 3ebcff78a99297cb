"""One comparison over runs: the per-seed contrast a − b (or, with a twin, (a − b) − (a′ − b′))
with its item replicates, and the test of it against the claim's margin.

A contrast is formed seed by seed where the sides share their seeds (paired: the twin of seed s
is compared with the model of seed s, on the same sentences, data order and head
initialisation), else side by side (unpaired, Welch). It is kept as per-seed values before any
test, so that a checkpoint population (population.py) can average each member's seeds first and
replicate over members.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertology.errors import require
from bertology.run.rundir import RunDir
from bertology.study.judge.evidence import (
    Evidence,
    evaluate,
    evaluate_headroom,
    evaluate_items,
    layer_keys,
)
from bertology.study.judge.sign_test import SignTest
from bertology.study.judge.specs import Comparison
from bertology.study.judge.stats import (
    TTest,
    combine_seeds,
    compute_terms_overlap,
    difference,
)

DISCRETE = ("argmax_fraction",)  # reductions judged by an exact sign test over seeds


@dataclass
class Side:
    """One side's per-run values (and replicates) by seed."""

    runs: list[RunDir]
    values: list[float]
    replicates: list[np.ndarray | None]
    items: list[list[str] | None]  # the ids its replicates resample (None: not recorded)
    rooms: list[float | None]  # its eval set over the items scored (None: not recorded)

    @property
    def seeds(self) -> list:
        return [r.seed for r in self.runs]


@dataclass
class Contrast:
    """A comparison's evidence before it is tested: paired, a − b per seed (`values`,
    `replicates`); unpaired, the two sides (`sides`). `terms` gives, per term of the contrast,
    every seed's item ids in the order the seeds are paired (compute_terms_overlap)."""

    design: str
    values: list[float]
    replicates: list[np.ndarray | None]
    terms: list[list[list[str] | None]]
    sides: tuple[Side, Side] | None = None  # unpaired (Welch)
    discrete: bool = False  # a discrete reduction: an exact sign test over seeds
    headroom: float | None = None  # the most items a budget may ask for (× those scored)


def selects(run: RunDir, evidence: Evidence) -> bool:
    return all(str(run.choice(key)) == value for key, value in evidence.where)


def collect(runs: list[RunDir], evidence: Evidence) -> Side:
    chosen = [r for r in runs if selects(r, evidence)]
    require(bool(chosen), f"no run matches {evidence.describe()}")
    lacking = [str(r.path) for r in chosen if not layer_keys(r.metrics, evidence.metric)[1]]
    require(not lacking or len(lacking) == len(chosen),
            f"{len(lacking)} of the {len(chosen)} runs have no metric matching "
            f"{evidence.metric!r} ({', '.join(lacking[:3])}{', ...' if len(lacking) > 3 else ''})"
            ": they could not measure it (too few items for the analysis?); rerun them with "
            "more, or leave them out of the report")
    pairs = [evaluate(evidence, r.metrics, r.replicates) for r in chosen]
    return Side(chosen, [v for v, _ in pairs], [reps for _, reps in pairs],
                [evaluate_items(evidence, r.metrics, r.item_ids) for r in chosen],
                [evaluate_headroom(evidence, r.metrics, r.item_ids, r.item_pools)
                 for r in chosen])


def headroom_of(sides: list[Side]) -> float | None:
    """The least headroom of the sides' runs (every eval set must grow), None if unknown."""
    rooms = [room for side in sides for room in side.rooms]
    return None if not rooms or None in rooms else min(rooms)


def paired_by_seed(a: Side, b: Side) -> list[int] | None:
    """b's run index for each of a's runs when both sides have one run per seed, the same
    seeds; None when they cannot be paired."""
    if None in a.seeds or len(set(a.seeds)) != len(a.seeds):
        return None
    if sorted(map(str, a.seeds)) != sorted(map(str, b.seeds)):
        return None
    position = {seed: i for i, seed in enumerate(b.seeds)}
    return [position[seed] for seed in a.seeds]


def is_discrete(comparison: Comparison) -> bool:
    return any(x.reduce in DISCRETE for x in comparison.evidence)


def contrast_runs(comparison: Comparison, runs: list[RunDir]) -> Contrast:
    """The comparison's per-seed contrast over the runs (paired where the seeds allow)."""
    if comparison.twin is not None:
        return contrast_twin(comparison, runs)
    a = collect(runs, comparison.a)  # a is always an evidence (checked when the spec loads)
    if isinstance(comparison.b, Evidence):
        b = collect(runs, comparison.b)
        order = paired_by_seed(a, b)
    else:
        b, order = None, list(range(len(a.values)))
    discrete = is_discrete(comparison)
    if order is None:
        require(not discrete, f"{comparison.describe()}: a discrete reduction is judged seed "
                "by seed; both sides need the same seeds")
        return Contrast("unpaired (Welch)", [], [], [a.items, b.items], (a, b),
                        headroom=headroom_of([a, b]))
    values = [a.values[i] - (comparison.b if b is None else b.values[j])
              for i, j in enumerate(order)]
    reps = [None if a.replicates[i] is None or (b is not None and b.replicates[j] is None)
            else a.replicates[i] - (comparison.b if b is None else b.replicates[j])
            for i, j in enumerate(order)]
    terms = [a.items] + ([] if b is None else [[b.items[j] for j in order]])
    design = "paired by seed" if b is not None else "per seed"
    return Contrast(f"{design}, exact sign test" if discrete else design, values, reps, terms,
                    discrete=discrete, headroom=headroom_of([a] + ([] if b is None else [b])))


def contrast_twin(comparison: Comparison, runs: list[RunDir]) -> Contrast:
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
    items = [[side.items[j] for j in order] for (_, side), order in zip(sides, orders)
             if isinstance(side, Side)]
    return Contrast("paired by seed, difference in differences", values, reps, items,
                    headroom=headroom_of([side for _, side in sides if isinstance(side, Side)]))


def contrast_test(contrast: Contrast, comparison: Comparison
                  ) -> tuple[TTest | SignTest, float | None]:
    """The one-sided test of a contrast over seeds, and the item overlap it counted
    (compute_overlap over its terms; None: unknown, counted as 0)."""
    if contrast.sides is not None:
        overlaps = [compute_terms_overlap([side.items]) for side in contrast.sides]
        estimate = difference(*(combine_seeds(side.values, side.replicates, overlap=ov or 0.0)
                                for side, ov in zip(contrast.sides, overlaps)))
        unknown = None in overlaps
        return (TTest(estimate, comparison.margin, comparison.expect),
                None if unknown else max(overlaps))
    if contrast.discrete:
        estimate = combine_seeds(contrast.values, [None] * len(contrast.values))
        return SignTest(estimate, tuple(contrast.values), comparison.margin,
                        comparison.expect), None
    overlap = compute_terms_overlap(contrast.terms)
    estimate = combine_seeds(contrast.values, contrast.replicates, overlap=overlap or 0.0)
    return TTest(estimate, comparison.margin, comparison.expect), overlap

