"""The house style of every figure kind (bertology/run/figures.py): each is written as PNG and
PDF, a layer axis carries whole-number ticks, every labelled line is named in a legend, a band
says what it is, and the colours are the colour-blind-safe palette. The plotting functions
draw tiny synthetic rows; a real tiny probe run draws the probe's figures end to end, and a
report over synthetic runs draws the findings' figures."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import matplotlib
import matplotlib.figure
import numpy as np
import pytest
from conftest import compose_config
from test_report import FINDING, run_report, write_run

from bertology.analysis import amnesic, attention, cloze
from bertology.pipelines import probe
from bertology.pruning import compression, head_pruning
from bertology.pruning.prune_context import Curve
from bertology.run import figures


@pytest.fixture
def drawn(monkeypatch) -> list:
    """Every figure saved while the test runs, as matplotlib drew it."""
    seen = []
    original = matplotlib.figure.Figure.savefig

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if self not in seen:
            seen.append(self)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    return seen


def layer_axes(figure) -> list[tuple[str, list[str]]]:
    """(label, tick labels) of every axis whose label says it counts layers."""
    found = []
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            if axis.get_label_text().startswith("layer"):
                found.append((axis.get_label_text(),
                              [t.get_text() for t in axis.get_ticklabels() if t.get_text()]))
    return found


def legend_texts(figure) -> set[str]:
    legends = [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]
    return {t.get_text() for legend in legends for t in legend.get_texts()}


def check_house_style(out_dir: Path, drawn: list) -> int:
    """Every figure in plots/ as PNG and PDF (no temporary left), integer layer ticks, every
    labelled line in a legend; returns how many layer axes were checked."""
    plots = out_dir / "plots"
    names = {p.stem for p in plots.iterdir()}
    assert not [n for n in names if n.startswith(".")], "a temporary file was left"
    for name in names:
        for fmt in figures.FORMATS:
            assert (plots / f"{name}.{fmt}").stat().st_size > 1000, (name, fmt)
    assert (plots / f"{next(iter(names))}.pdf").read_bytes().startswith(b"%PDF")
    checked = 0
    for figure in drawn:
        for label, ticks in layer_axes(figure):
            assert ticks, label
            for tick in ticks:
                assert float(tick.replace("−", "-")).is_integer(), (label, ticks)
                int(tick.replace("−", "-"))  # "1.0" or "0.5" is refused here
            checked += 1
        named = legend_texts(figure)
        for axes in figure.axes:
            for line in axes.lines:
                if not line.get_label().startswith("_"):
                    assert line.get_label() in named, line.get_label()
    return checked


def test_the_palette_is_colour_blind_safe():
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    assert [c.upper() for c in colours] == [c.upper() for c in figures.PALETTE]
    assert figures.PALETTE[:3] == ["#0072B2", "#E69F00", "#009E73"]  # Okabe & Ito
    assert matplotlib.rcParams["figure.constrained_layout.use"]
    assert matplotlib.rcParams["pdf.fonttype"] == 42  # text, not Type 3 glyphs


def layer_rows(seeds: int) -> list[dict]:
    return [{"model": model, "layer": layer, "seed": seed,
             "accuracy": 0.5 + 0.1 * layer + 0.01 * seed + (0.2 if model == "model" else 0),
             "selectivity": 0.1 * layer}
            for model in ("model", "random") for layer in range(4) for seed in range(seeds)]


@pytest.mark.slow
def test_layer_curves_say_what_their_band_is(tmp_path, drawn):
    figures.plot_layer_curves(layer_rows(3), ["accuracy", "selectivity"], "probe", tmp_path,
                              "curves", baselines=[{"model": "majority", "accuracy": 0.3}])
    figures.plot_layer_curves(layer_rows(1), ["accuracy"], "one seed", tmp_path, "one")
    figures.plot_layer_curves(layer_rows(2), ["accuracy", "selectivity"] * 3, "six", tmp_path,
                              "six")
    (three, one, six) = drawn
    assert "band: ±1 s.d. over 3 seeds" in three._suptitle.get_text()
    assert "band" not in one._suptitle.get_text()
    assert legend_texts(three) == {"model", figures.TWIN, "majority"}
    # six panels wrap into two rows of at most four: a figure stays a page wide
    assert six.get_size_inches()[0] <= 3.6 * figures.MAX_COLUMNS + 0.6
    assert sum(a.get_visible() for a in six.axes) == 6
    assert check_house_style(tmp_path, drawn) == 9


@pytest.mark.slow
def test_heatmaps_bars_and_pruning_curves(tmp_path, drawn):
    figures.plot_head_heatmap(np.random.default_rng(0).random((3, 4)), "heads", tmp_path,
                              "heads")
    attention.plot_pattern_heatmap(np.arange(12).reshape(3, 4) % 5, "patterns", tmp_path,
                                   "patterns", "attention_patterns")
    cloze.plot_metrics({"cloze/blimp/accuracy": 0.6, "cloze/lama/p_at_1": 0.1}, "cloze",
                       tmp_path, "cloze")
    ctx = SimpleNamespace(out_dir=tmp_path, base_metric=0.9, metric="accuracy", total_heads=4,
                          config=
                          SimpleNamespace(task=SimpleNamespace(name="synthetic_negation"),
                                          prune=SimpleNamespace(max_loss=0.01,
                                                                layer_strategies=["top"])))
    amnesic.plot_conditions([
        {"setting": s, "condition": c, "seed": seed, "probe_accuracy": 0.8, "mlm_accuracy": 0.5,
         "kl": 0.1 * seed, "majority_accuracy": 0.4}
        for s in amnesic.SETTINGS for c in amnesic.CONDITIONS for seed in (0, 1)],
        "amnesic", ctx, "amnesic")
    steps = ([0.0, 0.25, 0.5], [0, 2, 4])
    head_pruning.plot_curves(ctx, {
        "gradient": [Curve("gradient", None, *steps, [0.9, 0.88, 0.7])],
        "random": [Curve("random", s, *steps, [0.9, 0.8 - 0.01 * s, 0.6]) for s in range(3)]},
        0.5)
    compression.plot_layer_dropping(ctx, [{"strategy": "top", "dropped": d, "metric": 0.9 - d / 10}
                                          for d in (1, 2, 3)], 4)
    compression.plot_magnitude(ctx, [{"sparsity": s, "metric": 0.9 - s} for s in (0, 0.5)])
    compression.plot_pareto(ctx, [
        {"model": "original", "latency_ms": 10.0, "metric": 0.9, "pareto": True},
        {"model": "original + int8", "latency_ms": 6.0, "metric": 0.89, "pareto": True},
        {"model": "pruned", "latency_ms": 8.0, "metric": 0.85, "pareto": False}])
    pruning = next(f for f in drawn if "head pruning" in f.axes[0].get_title())
    assert "random band: ±1 s.d. over 3 orders" in pruning.axes[0].get_title()
    # head heat map, pattern map (rows are layers), layer dropping (x counts layers)
    assert check_house_style(tmp_path, drawn) == 3


@pytest.mark.slow
def test_a_real_probe_run_draws_every_probe_figure_in_house_style(tmp_path, drawn):
    cfg = compose_config("probe", [
        "analysis=[linear,structural,attention,geometry,position]", "task=synthetic_pos",
        "logger=none", "init=random", "seeds=[0,1]", "max_train_sentences=60",
        "max_eval_sentences=30", "analysis.structural.epochs=2", "analysis.structural.rank=8",
        "analysis.attention.max_sentences=20", "analysis.attention.kovaleva_sentences=10",
        "analysis.attention.min_dependents=1", f"paths.cache_dir={tmp_path / 'cache'}"])
    probe.run(cfg, tmp_path / "run")
    kinds = {p.stem.split("_")[0] for p in (tmp_path / "run" / "plots").glob("*.pdf")}
    assert {"linear", "structural", "attention", "geometry", "position"} <= kinds
    index = (tmp_path / "run" / "index.html").read_text()  # the run's page lists them all
    assert all(f'src="plots/{p.name}"' in index for p in (tmp_path / "run" / "plots").glob("*.png"))
    assert check_house_style(tmp_path / "run", drawn) >= 10
    # every figure names the model it shows (here no checkpoint: a random-init BERT)
    subject = "a random-init bert of 2 layers, hidden 128 (no checkpoint)"
    assert all(subject in {t.get_text() for t in figure.texts} for figure in drawn)
    assert subject in index


def test_the_report_draws_each_finding_in_house_style(tmp_path, drawn):
    curve = {"id": "curve", "unit": "checkpoint", "claim": "the top layer is best",
             "source": "a paper",
             "compare": {"a": {"metric": "probe/layer_*/accuracy", "reduce": "argmax_fraction"},
                         "b": 0.5, "expect": "greater"}}
    for seed in range(3):
        write_run(tmp_path / "runs" / f"a{seed}", {"eval/a": 0.8 + seed / 100, "eval/b": 0.7},
                  seed, FINDING)
        write_run(tmp_path / "runs" / f"c{seed}", {f"probe/layer_{n:02d}/accuracy": 0.5 + n / 10
                                                   for n in range(4)}, seed, curve)
    run_report(tmp_path / "runs", tmp_path / "report", FINDING, curve)
    assert len(drawn) == 2
    assert check_house_style(tmp_path / "report", drawn) == 1
