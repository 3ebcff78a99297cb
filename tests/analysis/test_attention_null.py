"""The attention analysis's null (analysis/attention_null.py): the random-init twin's maps,
each head sharpened to the model's head's entropy. Checked against softmax and entropy computed
here by scipy: the sharpening and its fit; that the null reads only how focused each head is,
not where it looks; and that the twin parts of special_heads and head_similarity can now fail
as well as hold, where the raw twin's near-uniform maps made them hold whatever the model did.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax
from scipy.stats import entropy
from test_attention import StackedMaps

from bertology.analysis import attention
from bertology.analysis.attention_null import (
    build_attention_null,
    fit_factors,
    mean_entropy,
    sharpen,
)
from bertology.analysis.head_similarity import compute_head_distances
from bertology.run.replicates import bootstrap_indices, write_replicates
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import load_catalog
from bertology.study.judge.verdicts import compare


def word_row_entropy_by_scipy(maps: list[np.ndarray]) -> np.ndarray:
    """(layers, heads) mean entropy over every word row (rows 1 … n) of every map."""
    rows = [entropy(m[:, :, 1:-1, :], axis=-1) for m in maps]  # each (layers, heads, n)
    return np.concatenate(rows, axis=-1).mean(-1)


def draw_logits(rng: np.random.Generator, lengths, layers: int = 2, heads: int = 3
                ) -> list[np.ndarray]:
    return [rng.normal(size=(layers, heads, n + 2, n + 2)) for n in lengths]


def test_a_known_factor_is_recovered_and_sharpening_is_softmax_of_scaled_logits():
    """Twin maps softmax(z), model maps softmax(t·z) with t a head: the fit finds t, and the
    sharpened twin is the model's maps, entropy and all."""
    rng = np.random.default_rng(0)
    logits = draw_logits(rng, rng.integers(4, 12, size=20))
    truth = np.array([[0.5, 1.0, 3.0], [7.0, 20.0, 60.0]])
    twin = [softmax(z, axis=-1) for z in logits]
    model = [softmax(z * truth[:, :, None, None], axis=-1) for z in logits]
    target = word_row_entropy_by_scipy(model)
    assert mean_entropy(model) == pytest.approx(target, rel=1e-9)
    factors = fit_factors(twin, target)
    assert factors == pytest.approx(truth, rel=1e-4)
    for z, m in zip(logits, model):
        assert np.allclose(sharpen(softmax(z, axis=-1), factors), m, atol=1e-5)
    # one factor a group (here: a layer) brings the group's mean entropy to the target's
    layer = np.repeat([[0], [1]], 3, axis=1)
    shared = fit_factors(twin, target, layer)
    assert np.all(shared == shared[:, :1])
    found = word_row_entropy_by_scipy([sharpen(m, shared) for m in twin])
    assert found.mean(-1) == pytest.approx(target.mean(-1), rel=1e-4)


def test_the_null_reads_how_focused_each_head_is_not_where_it_looks():
    """Two models whose heads are equally focused, one looking where the other does not (each
    row's entries permuted: its entropy kept, its places drawn afresh), get the same null; a
    model focused otherwise gets another."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(4, 12, size=16)
    twin = [softmax(0.2 * z, axis=-1) for z in draw_logits(rng, lengths)]  # near uniform
    model = [softmax(4.0 * z, axis=-1) for z in draw_logits(rng, lengths)]
    elsewhere = [rng.permuted(m, axis=-1) for m in model]
    assert not np.allclose(model[0], elsewhere[0])
    assert word_row_entropy_by_scipy(elsewhere) == pytest.approx(
        word_row_entropy_by_scipy(model), rel=1e-9)
    nulls = [build_attention_null(StackedMaps(m), StackedMaps(twin), len(lengths))
             for m in (model, elsewhere)]
    assert np.array_equal(nulls[0].factors, nulls[1].factors)
    for i in range(len(lengths)):
        assert np.array_equal(nulls[0].attention_map(i), nulls[1].attention_map(i))
    # the null is the twin's maps, as focused as the model's: far from uniform
    null_maps = [nulls[0].attention_map(i) for i in range(len(lengths))]
    assert word_row_entropy_by_scipy(null_maps) == pytest.approx(
        word_row_entropy_by_scipy(model), rel=1e-3)
    uniform = np.mean([np.log(n + 2) for n in lengths for _ in range(n)])
    assert word_row_entropy_by_scipy(twin).mean() > 0.95 * uniform
    assert word_row_entropy_by_scipy(null_maps).mean() < 0.8 * uniform
    broader = [softmax(1.0 * z, axis=-1) for z in draw_logits(rng, lengths)]
    other = build_attention_null(StackedMaps(broader), StackedMaps(twin), len(lengths))
    assert np.all(other.factors < nulls[0].factors)


# ---------------------------------------------------------------- the twin parts can fail


LENGTHS = np.random.default_rng(2).integers(8, 14, size=60)  # each seed's sentences
SEEDS = (0, 1, 2)


HEIGHTS = np.random.default_rng(4).uniform(size=(2, 12, 1))  # one model's heads, every seed


def special_logits(rng: np.random.Generator, low: float, high: float) -> list[np.ndarray]:
    """Logit maps (2 layers × 12 heads) with a peak on [CLS] of each head's own height, spread
    between low and high, and varying from sentence to sentence: heads of middling peaks put
    about half their mass there, so which count as special varies with the sentences drawn."""
    maps = draw_logits(rng, LENGTHS, heads=12)
    for z in maps:
        z[..., 0] += low + (high - low) * HEIGHTS + rng.normal(0.0, 1.5, size=HEIGHTS.shape)
    return maps


def layer_logits(rng: np.random.Generator, alike: float) -> list[np.ndarray]:
    """Logit maps whose heads share their layer's first head's logits in proportion `alike`
    (0: each head its own)."""
    return [alike * z[:, :1] + (1 - alike) * z for z in draw_logits(rng, LENGTHS)]


def measure_run(out, seed: int, model: list[np.ndarray], null: list[np.ndarray]) -> RunDir:
    """One seed's run as the analysis writes it: the statistics of the model and of the null
    with their replicates, drawn on one set of resamples."""
    puncts = [np.zeros(n, dtype=bool) for n in LENGTHS]
    indices = bootstrap_indices(len(LENGTHS))
    metrics, columns = {}, {}
    for prefix, maps in (("attention", model), ("attention/random", null)):
        sums, rows = attention.collect_sentence_sums(maps, puncts)
        columns.update(attention.compute_stat_replicates(sums, rows, indices, prefix))
        metrics[f"{prefix}/special_heads_fraction"] = float(
            attention.compute_special_fraction(attention.compute_head_stats(maps, puncts)))
        means, replicates = compute_head_distances(StackedMaps(maps), len(maps), indices,
                                                   prefix)
        metrics.update(means)
        columns.update(replicates)
    write_replicates(out / f"seed{seed}", "attention_synthetic", columns)
    return RunDir(out / f"seed{seed}", metrics, {"seed": seed})


def judge_twin_part(finding: str, runs: list[RunDir]) -> str:
    """The finding's twin part (model − null) judged over the seeds by the report's own
    comparison: "holds", "does not hold" (each at one-sided p < 0.01) or "unresolved"."""
    test = compare(load_catalog()[finding].comparisons[1], {"": runs}).test
    return ("holds" if test.p_holds < 0.01 else "does not hold" if test.p_fails < 0.01
            else "unresolved")


WORLDS = {  # (model's logits, twin's logits, sharpness of the model) per seed's rng
    # special_heads: the model has special heads (peaks up to 2.5 on [CLS]), fewer than a twin
    # whose faint logits favour [CLS] more (peaks 2 to 6) gives once as focused; then a model
    # with more (peaks 0.5 to 4) against a twin that favours [CLS] less (0 to 1)
    ("special_heads", "fails"): (lambda r: special_logits(r, 0.0, 2.5),
                                 lambda r: special_logits(r, 2.0, 6.0), 2.0),
    ("special_heads", "holds"): (lambda r: special_logits(r, 0.5, 4.0),
                                 lambda r: special_logits(r, 0.0, 1.0), 2.0),
    # head_similarity: a layer's heads share some of their logits, less than the twin's do
    ("head_similarity", "fails"): (lambda r: layer_logits(r, 0.4),
                                   lambda r: layer_logits(r, 0.9), 2.0),
    ("head_similarity", "holds"): (lambda r: layer_logits(r, 0.9),
                                   lambda r: layer_logits(r, 0.0), 2.0),
}


@pytest.mark.parametrize("finding,world", sorted(WORLDS))
def test_the_twin_parts_read_the_null_and_can_fail(finding, world, tmp_path):
    """A model and a twin whose faint logits (×0.15: near uniform, as transformers' init
    gives) do what the claim says, more than the model ("fails") or less ("holds"). Against
    the null (the twin sharpened to the model's entropy) the twin part reads that way; against
    the raw twin, whose near-uniform maps have no special head and no layer likeness, it
    would have held either way."""
    model_logits, twin_logits, sharpness = WORLDS[finding, world]
    null_runs, raw_runs = [], []
    for seed in SEEDS:
        rng = np.random.default_rng(10 + seed)
        model = [softmax(sharpness * z, axis=-1) for z in model_logits(rng)]
        twin = [softmax(0.15 * z, axis=-1) for z in twin_logits(rng)]
        null = build_attention_null(StackedMaps(model), StackedMaps(twin), len(LENGTHS))
        sharpened = [null.attention_map(i) for i in range(len(LENGTHS))]
        null_runs.append(measure_run(tmp_path / "null", seed, model, sharpened))
        raw_runs.append(measure_run(tmp_path / "raw", seed, model, twin))
    assert judge_twin_part(finding, null_runs) == ("does not hold" if world == "fails"
                                                   else "holds")
    assert judge_twin_part(finding, raw_runs) == "holds"
