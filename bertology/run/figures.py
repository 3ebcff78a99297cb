"""What analyses leave in the run dir (DESIGN §5): tables/<analysis>_<task>.csv for machines,
plots/<name>.png and plots/<name>.pdf for people. One house style for every figure, so a
figure goes into a paper as it is:

- a colour-blind-safe palette (Okabe & Ito, 2008) as matplotlib's colour cycle;
- constrained layout, so no label overlaps another panel;
- integer ticks on every layer axis (`integer_ticks`), a legend naming every line;
- an uncertainty band says what it is in the title (`band_caption`);
- PNG for a quick look and PDF (vector, TrueType fonts a journal accepts) for the paper, each
  written to a temporary name and renamed;
- under `figure_source(...)`, a grey line at the foot of every figure names the checkpoint it
  is about: a PNG pasted into a paper draft or a chat keeps the model it shows;
- every drawn series is tied (`tie`) to the metrics.json keys it draws, so a test reads a
  figure's data back and compares it with the run's numbers; a reference line (a budget, a
  range) says it is one (`reference`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs on CI and clusters without a display

import matplotlib.pyplot as plt  # noqa: E402
from cycler import cycler  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from bertology.run.write_errors import writing  # noqa: E402

# Okabe & Ito (2008), "Color Universal Design": distinguishable under every common colour-
# vision deficiency; black last. C0, C1, ... in the modules below name these in order.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000"]
GREY = "#7F7F7F"  # reference lines: baselines, budgets, chance
FORMATS = ("png", "pdf")
MAX_COLUMNS = 4  # panels a row: a figure stays a page wide (attention's 7 statistics: 2 rows)
matplotlib.rcParams.update({
    "axes.prop_cycle": cycler(color=PALETTE),
    "figure.constrained_layout.use": True,
    "image.cmap": "viridis",  # perceptually uniform, colour-blind safe
    "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 8,
    "xtick.labelsize": 8, "ytick.labelsize": 8,
    "grid.alpha": 0.3,
    "pdf.fonttype": 42,  # TrueType in the PDF: text stays text (Type 3 fonts are refused by
    "ps.fonttype": 42,   # some publishers' checkers)
    "savefig.dpi": 150,
})
logging.getLogger("fontTools").setLevel(logging.WARNING)  # the PDF's font subsetting, per table
# What this run's figures are about (e.g. "checkpoint: <path>"); set by the pipeline around its
# analyses, so no analysis has to thread it through its own title
FIGURE_SOURCE: contextvars.ContextVar[str] = contextvars.ContextVar("figure_source", default="")


# Series labels of the encoders a run reads: the checkpoint and its random-initialised twin
# (the same architecture with fresh weights), scoped in metrics.json as <prefix>/... and
# <prefix>/random/...
MODEL, TWIN = "model", "random-init twin"
LABELS = {"model": MODEL, "random": TWIN}
SCOPES = {"model": "", "random": "random/"}
# Hewitt & Liang's control task of each encoder: a series of its own (never pooled), drawn
# dashed in its encoder's colour
CONTROL = {"model": "control task (model)", "random": "control task (twin)"}
CONTROL_OF = {label: encoder for encoder, label in CONTROL.items()}
REFERENCE = "reference"  # the gid of a line that draws no metric (a budget, a range)


def tie(artist, ys: Sequence[str], xs: Sequence[str] | None = None, log: str | None = None):
    """Record on a drawn series the metrics.json keys of its points: ys[i] is the key of the
    i-th point's y (one key for a horizontal line), xs[i] of its x where x is a metric too
    (else x is the point's position: a layer, a fraction). With `log` (a metrics.jsonl
    relative to the run dir) the keys are read there, in the record of the point's x (its
    step). Returns the artist."""
    artist.set_gid(json.dumps({"y": list(ys), "x": list(xs) if xs is not None else None,
                               "log": log}))
    return artist


def tie_table(image, table: str, column: str, categories: Sequence[str] | None = None):
    """Record on a layers × heads image the table it draws: tables/<table>.csv, a row per
    (layer from 1, head from 0), the cell's value in `column` (a class name: its index in
    `categories`). Returns the image."""
    image.set_gid(json.dumps({"table": table, "column": column,
                              "categories": list(categories) if categories else None}))
    return image


def reference(artist):
    """Mark a line that draws no metric (a loss budget, a range): grey, dashed or dotted."""
    artist.set_gid(REFERENCE)
    return artist


def encoder_keys(prefix: str, **fixed: str) -> Callable[[str, str], str | None]:
    """The key template of a layer curve (`plot_layer_curves`' keys): the model's at
    <prefix>/layer_LL/<metric>, the twin's at <prefix>/random/layer_LL/<metric>; `fixed` maps
    another series (its raw name) to a template, `{metric}` and `{layer:02d}` filled in."""
    def keys(series: str, metric: str) -> str | None:
        if series in fixed:
            return fixed[series].replace("{metric}", metric)
        if series in SCOPES:
            return f"{prefix}/{SCOPES[series]}layer_{{layer:02d}}/{metric}"
        return None
    return keys


@contextmanager
def figure_source(text: str) -> Iterator[None]:
    """Every figure saved inside the block carries `text` at its foot."""
    token = FIGURE_SOURCE.set(text)
    try:
        yield
    finally:
        FIGURE_SOURCE.reset(token)


def literal(text: str) -> str:
    """Text as matplotlib draws it, not as mathtext: a `$` (a recorded `${seed}` interpolation,
    a path) would open a formula, and an unclosed one stops the figure with a parse error."""
    return text.replace("$", r"\$")


def save_figure(figure, out_dir: Path, name: str) -> Path:
    """plots/<name>.png and plots/<name>.pdf, each renamed into place once whole; then the
    figure is closed (matplotlib keeps every open one). Returns the PNG's path."""
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    if FIGURE_SOURCE.get():
        # above the figure's top edge (bbox_inches="tight" takes it in): clear of the title,
        # the panels and a legend placed outside the axes
        figure.text(0.0, 1.0, FIGURE_SOURCE.get(), ha="left", va="bottom", fontsize=7, color=GREY)
    for fmt in FORMATS:
        tmp = plots / f".{name}.tmp.{fmt}"
        with writing(plots / f"{name}.{fmt}"):
            figure.savefig(tmp, format=fmt, bbox_inches="tight")
        os.replace(tmp, plots / f"{name}.{fmt}")
    plt.close(figure)
    return plots / f"{name}.png"


def integer_ticks(axis, which: str = "x") -> None:
    """Whole-number ticks on a layer (or count) axis: no 0.5, 1.5 between layers."""
    getattr(axis, f"{which}axis").set_major_locator(MaxNLocator(integer=True))


def band_caption(count: int, what: str = "seeds") -> str:
    """What a shaded band is, for the title; one run has none."""
    return f"band: ±1 s.d. over {count} {what}" if count > 1 else ""


def layer_means(rows: list[dict], metric: str, series: str = "model"
                ) -> dict[str, tuple[list[int], list[float], list[float]]]:
    """rows of (series, layer, seed, metric) → per series: layers, mean and std over seeds."""
    values: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if metric in row and row[metric] != "":
            values[row[series]][int(row["layer"])].append(float(row[metric]))
    curves = {}
    for name, by_layer in values.items():
        layers = sorted(by_layer)
        means = [statistics.fmean(by_layer[layer]) for layer in layers]
        stds = [statistics.stdev(by_layer[layer]) if len(by_layer[layer]) > 1 else 0.0
                for layer in layers]
        curves[name] = (layers, means, stds)
    return curves


def plot_layer_curves(rows: list[dict], metrics: list[str], title: str, out_dir: Path,
                      name: str, series: str = "model", baselines: list[dict] = (),
                      xlabel: str = "layer (0 = embeddings)",
                      keys: Callable[[str, str], str | None] | None = None) -> Path:
    """One panel per metric (up to MAX_COLUMNS a row): a line per series (model, random
    init, control …) over layers, with a band of ±1 s.d. over seeds (said in the title); each
    baseline row (a series without layers, e.g. a linear baseline) is a dashed horizontal
    line. One legend for the figure names every line. A series is labelled by LABELS (the
    twin as such) and tied to keys(series, metric), a metrics.json key template with
    `{layer:02d}` (none for a baseline): the mean over seeds it draws is the run's number."""
    columns = min(len(metrics), MAX_COLUMNS)
    rows_of_panels = -(-len(metrics) // columns)
    figure, axes = plt.subplots(rows_of_panels, columns, squeeze=False,
                                figsize=(3.6 * columns + 0.6, 2.9 * rows_of_panels + 0.6))
    for spare in axes.flat[len(metrics):]:
        spare.set_visible(False)
    names = sorted({str(row[series]) for row in rows} - set(CONTROL_OF), key=series_order)
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}  # every panel
    colours.update({control: colours.get(encoder, GREY) for control, encoder in CONTROL_OF.items()})
    labels: dict[str, object] = {}
    for axis, metric in zip(axes.flat, metrics):
        curves = layer_means(rows, metric, series)
        for raw in sorted(curves, key=series_order):
            layers, means, stds = curves[raw]
            colour, label = colours[str(raw)], LABELS.get(str(raw), str(raw))
            line = axis.plot(layers, means, marker="o", color=colour, label=label,
                             linestyle="--" if raw in CONTROL_OF else "-")[0]
            labels[label] = tie_layers(line, keys and keys(str(raw), metric), layers)
            axis.fill_between(layers, [m - s for m, s in zip(means, stds)],
                              [m + s for m, s in zip(means, stds)], alpha=0.2, color=colour,
                              linewidth=0)
        for row in baselines:
            if row.get(metric, "") != "":
                raw = str(row[series])
                line = axis.axhline(float(row[metric]), color=GREY, linestyle="--", label=raw)
                labels[raw] = tie_layers(line, keys and keys(raw, metric), None)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(metric)
        axis.grid(alpha=0.3)
        integer_ticks(axis)
    figure.legend(list(labels.values()), list(labels), loc="outside lower center",
                  ncols=min(len(labels), 4))
    caption = band_caption(seed_count(rows, series))
    figure.suptitle(f"{title}\n{caption}" if caption else title)
    return save_figure(figure, out_dir, name)


def tie_layers(line, template: str | None, layers: list[int] | None):
    """A layer curve tied to its template's key at each layer (a baseline: the one key)."""
    if template is None:
        return line
    if layers is None:
        return tie(line, [template])
    return tie(line, [template.format(layer=layer) for layer in layers])


def series_order(name: str) -> tuple[int, str]:
    """The model's own curve first (first colour), its twin next, their control tasks, then
    other series in name order."""
    first = ("model", "random", *CONTROL.values())
    return (first.index(name), "") if name in first else (len(first), name)


def seed_count(rows: list[dict], series: str = "model") -> int:
    """The most seeds any (series, layer) point averages."""
    seeds: dict[tuple, set] = defaultdict(set)
    for row in rows:
        seeds[(row.get(series), row.get("layer"))].add(row.get("seed"))
    return max((len(s) for s in seeds.values()), default=0)


def plot_head_heatmap(values, title: str, out_dir: Path, name: str, cmap: str = "viridis",
                      label: str = "", table: tuple[str, str] | None = None) -> Path:
    """A layers × heads grid (values: (layers, heads) array), layer 1 at the top; `table`:
    the (table, column) the run writes the same values to (`tie_table`)."""
    figure, axis = plt.subplots(figsize=(0.45 * values.shape[1] + 2.5,
                                         0.4 * values.shape[0] + 1.8))
    image = axis.imshow(values, cmap=cmap, aspect="auto")
    if table is not None:
        tie_table(image, *table)
    axis.set_xticks(range(values.shape[1]), [str(h) for h in range(values.shape[1])])
    axis.set_yticks(range(values.shape[0]), [str(layer + 1) for layer in range(values.shape[0])])
    axis.set_xlabel("head")
    axis.set_ylabel("layer")
    figure.colorbar(image, ax=axis, label=label)
    axis.set_title(title)
    return save_figure(figure, out_dir, name)
