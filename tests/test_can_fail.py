"""Every claim can fail (issue 28): for each finding of the catalog, runs built so that its
claim is false, and the report's verdict on them is not "holds".

The worlds are made from the finding's own yaml (tests/fake_runs.py turns a target per
comparison into runs with seed noise and item replicates), so the tests follow the catalog as
it changes. For every finding:
- it can hold: every comparison (claim and guards) DISTANCE beyond its margin on the claim's
  side → "holds" (the control: without it a broken simulator would make every claim "fail");
- the opposite: one part of the claim DISTANCE on the wrong side of its margin, the rest and
  the guards holding → "does not hold" (for a non-inferiority claim, the treated arm clearly
  worse than its margin allows);
- no effect: one part at a − b = 0, where that contradicts the claim (not for a
  non-inferiority claim, which equal arms satisfy) → not "holds";
- blind: the measurement can tell nothing apart: every quantity the finding compares with
  another (arms, model and twin, accuracy and majority) is equal to it at every layer and
  measured alike (the same predictions on the same items, but for a few); a threshold on a
  quantity the claim contrasts sits on the threshold; a threshold on something else
  (no_nsp's MLM accuracy beside its downstream task) still passes, as it did when both no_nsp
  arms learned the same keyword rule → not "holds", and "uninformative" where the finding has
  a guard (the guard must see that the comparison cannot discriminate).
The no_nsp of 920d8f1 (`all: [mlm − mlm_nsp > −0.01, MLM accuracy > 0.12]`) holds in its
blind world, so test_can_fail[no_nsp] fails on it; the other 29 findings of 920d8f1 pass.
Whether an untrained model satisfies a threshold claim (an anisotropy slope above 0) is the
random-init twin null's question (tests/test_noise.py), not this file's.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from fake_runs import EQUAL, ITEM_SD, ITEMS, LAYERS, SEED_SD, SEEDS, SHARED_ITEM_SD, World

from bertology.study.catalog import load_catalog
from bertology.study.evidence import Evidence
from bertology.study.verdicts import Comparison, FindingSpec, judge, parse_finding

CATALOG = load_catalog()
DISTANCE = 0.1  # how far past its margin a made-true or made-false comparison sits


def beyond(comparison: Comparison, distance: float) -> float:
    """The effect `distance` past the margin on the claim's side (negative: the wrong side)."""
    return comparison.margin + (distance if comparison.expect == "greater" else -distance)


def zero_contradicts(comparison: Comparison) -> bool:
    """Whether a − b = 0 makes the comparison false (not a non-inferiority margin)."""
    return comparison.margin >= 0 if comparison.expect == "greater" else comparison.margin <= 0


def world(spec: FindingSpec, claim: dict[int, float | None] | None = None,
          guards: dict[int, float | None] | None = None):
    """Targets for every comparison: the given ones by index, the rest holding."""
    claim, guards = claim or {}, guards or {}
    return ([(c, claim.get(i, beyond(c, DISTANCE))) for i, c in enumerate(spec.comparisons)]
            + [(g, guards.get(i, beyond(g, DISTANCE))) for i, g in enumerate(spec.guards)])


def contrasted(spec: FindingSpec) -> set[str]:
    """The metrics the claim compares with another quantity (all it reads, if it only
    compares with thresholds): what a blind measurement leaves at its null."""
    pairs = [c for c in spec.comparisons if isinstance(c.b, Evidence)] or spec.comparisons
    return {x.metric for c in pairs for x in (c.a, c.b) if isinstance(x, Evidence)}


def blind_target(comparison: Comparison, measured: set[str]) -> float | None:
    if isinstance(comparison.b, Evidence):
        return EQUAL  # the arm is the other arm, the model its twin, the accuracy the majority's
    if comparison.a.metric in measured:
        return 0.0  # the quantity sits on its threshold
    return beyond(comparison, DISTANCE)  # a check of something else still passes


def blind_world(spec: FindingSpec):
    measured = contrasted(spec)
    return world(spec, {i: blind_target(c, measured) for i, c in enumerate(spec.comparisons)},
                 {i: blind_target(g, measured) for i, g in enumerate(spec.guards)})


def build(spec: FindingSpec, targets, name: str) -> World:
    """The world's runs, drawn from a generator seeded by the finding and the world's name."""
    return World(spec, targets, np.random.default_rng(zlib.crc32(f"{spec.id} {name}".encode())))


def verdict(spec: FindingSpec, targets, name: str) -> str:
    return judge(spec, build(spec, targets, name).runs()).raw


def check_can_fail(spec: FindingSpec) -> None:
    """Every false world of a finding, judged (the test below; importable for a spec that is
    not in the catalog, e.g. an older version of a yaml)."""
    for i, comparison in enumerate(spec.comparisons):
        wrong = verdict(spec, world(spec, {i: beyond(comparison, -DISTANCE)}), f"opposite{i}")
        assert wrong == "does not hold", f"{comparison.describe()} on its wrong side: {wrong}"
        if zero_contradicts(comparison):
            null = verdict(spec, world(spec, {i: 0.0}), f"zero{i}")
            assert null != "holds", f"{comparison.describe()} with no effect holds"
    blind = verdict(spec, blind_world(spec), "blind")
    measured = contrasted(spec)
    if any(blind_target(g, measured) != beyond(g, DISTANCE) for g in spec.guards):
        assert blind == "uninformative", f"a blind measurement: {blind}, not uninformative"
    else:  # no guard, or one that checks something else (pos_layers: the probe's selectivity)
        assert blind != "holds", "a blind measurement holds"


@pytest.mark.parametrize("finding", sorted(CATALOG))
def test_can_fail(finding):
    check_can_fail(CATALOG[finding])


@pytest.mark.parametrize("finding", sorted(CATALOG))
def test_can_hold(finding):
    """The control: the same simulator with every comparison past its margin holds, and the
    report measures on its runs the effects the world was built with, with seed and item
    noise (without this a broken simulator would make every claim "fail")."""
    spec = CATALOG[finding]
    targets = world(spec)
    result = judge(spec, build(spec, targets, "holds").runs())
    assert result.raw == "holds"
    for test, (comparison, target) in zip(result.tests + result.guard_tests, targets):
        assert test.estimate.mean == pytest.approx(target, abs=1e-9), comparison.describe()
        assert test.estimate.n == len(SEEDS) and test.estimate.items and test.estimate.se > 0


SLOPE = parse_finding({"id": "fading", "about": "model", "study": "probe_pos", "compare": {
    "a": {"metric": "probe/layer_*/accuracy", "reduce": "slope"}, "b": 0.0, "expect": "less"}})


def test_a_world_by_hand(tmp_path):
    """The simulator checked without the report's code: a slope of −0.1 over depth, fitted
    per seed by numpy's polyfit, averages −0.1 over the seeds; the seeds differ by about
    SEED_SD; each key's replicates spread as an item mean does, ITEM_SD/√ITEMS (and the
    shared item effect); the runs read back from disk are the runs in memory."""
    runs = build(SLOPE, [(SLOPE.comparisons[0], -0.1)], "by hand").write(tmp_path)
    depth = np.arange(LAYERS) / (LAYERS - 1)
    slopes = [np.polyfit(depth, [r.metrics[f"probe/layer_{i:02d}/accuracy"]
                                 for i in range(LAYERS)], 1)[0] for r in runs]
    assert np.mean(slopes) == pytest.approx(-0.1, abs=1e-9)
    layer = np.array([r.metrics["probe/layer_03/accuracy"] for r in runs])
    assert 0.2 * SEED_SD < layer.std(ddof=1) < 3 * SEED_SD
    spread = runs[0].replicates["probe/layer_03/accuracy"].std()
    expected = np.hypot(ITEM_SD, SHARED_ITEM_SD) / np.sqrt(ITEMS)
    assert spread == pytest.approx(expected, rel=0.2)
    assert len(runs[0].replicates["probe/layer_03/accuracy"]) == 400
    memory = build(SLOPE, [(SLOPE.comparisons[0], -0.1)], "by hand").runs()
    for disk, made in zip(sorted(runs, key=lambda r: r.path.name),
                          sorted(memory, key=lambda r: r.path.name)):
        assert (disk.metrics, disk.config) == (made.metrics, made.config)
        assert all(np.array_equal(disk.replicates[k], made.replicates[k]) for k in made.metrics)


def test_tied_quantities_are_one_measurement():
    """EQUAL ties a twin to its model: the paired difference of their replicates is a small
    fraction of either's (the same predictions on the same items), the means are equal."""
    spec = CATALOG["pretraining_beats_random"]
    runs = build(spec, [(spec.comparisons[0], EQUAL)], "tied").runs()
    model = runs[0].replicates["probe/layer_02/accuracy"]
    twin = runs[0].replicates["probe/random/layer_02/accuracy"]
    assert runs[0].metrics["probe/layer_02/accuracy"] != runs[0].metrics[
        "probe/random/layer_02/accuracy"]  # a seed's values differ by a little
    assert np.mean([r.metrics["probe/layer_02/accuracy"] for r in runs]) == pytest.approx(
        np.mean([r.metrics["probe/random/layer_02/accuracy"] for r in runs]), abs=1e-12)
    assert (model - twin).std() < 0.2 * model.std()
